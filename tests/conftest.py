"""Fixtures for the whole suite: one official Bigtable emulator per session, on demand.

Tests under ``tests/emulator/`` are marked ``emulator`` automatically. The emulator only
starts when a test asks for the ``emulator`` fixture (directly or through ``data_client``
or ``make_table``), so ``pytest tests/unit`` never needs it. A missing emulator fails
those tests with the install instructions; it never skips them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync

from saltedtable._exceptions import EmulatorError
from saltedtable.testing import (
    EMULATOR_HOST_ENV,
    PROJECT,
    Emulator,
    create_table,
    delete_table,
    start_emulator,
)

EMULATOR_TESTS = Path(__file__).parent / "emulator"

MakeTable = Callable[..., str]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/emulator/ with ``emulator``."""
    for item in items:
        if item.path.is_relative_to(EMULATOR_TESTS):
            item.add_marker(pytest.mark.emulator)


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    """The session's emulator; BIGTABLE_EMULATOR_HOST points at it while it runs."""
    try:
        running = start_emulator()
    except EmulatorError as error:
        # A failure, never a skip: CI without the emulator must not pass quietly.
        message = f"the Bigtable emulator is required:\n{error}"
        raise pytest.fail.Exception(message, pytrace=False) from None
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(EMULATOR_HOST_ENV, running.address)
            yield running
    finally:
        running.stop()


@pytest.fixture
async def data_client(emulator: Emulator) -> AsyncIterator[BigtableDataClientAsync]:
    """A data client connected to the session's emulator, closed after the test."""
    client = BigtableDataClientAsync(project=PROJECT)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def make_table(emulator: Emulator) -> Iterator[MakeTable]:
    """``make_table(families=("cf",)) -> table_id``: a fresh table, deleted after the test."""
    created: list[str] = []

    def make(families: Iterable[str] = ("cf",)) -> str:
        table_id = f"t-{uuid.uuid4().hex[:16]}"
        create_table(emulator.address, table_id, families)
        created.append(table_id)
        return table_id

    yield make
    for table_id in created:
        delete_table(emulator.address, table_id, missing_ok=True)
