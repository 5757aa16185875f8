"""What this project's suite adds to the saltedtable pytest plugin (saltedtable/pytest_plugin.py).

The plugin, loaded through its ``pytest11`` entry point, starts one official Bigtable
emulator per session on demand and provides fresh tables and clients. Here: tests under
``tests/emulator/`` are marked ``emulator``, and the short names the suite has always used
stand for the plugin's fixtures (``emulator``, ``data_client``, ``make_table``). A missing
emulator fails those tests with the install instructions; it never skips them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from google.cloud.bigtable.data import BigtableDataClient, BigtableDataClientAsync, RowMutationEntry
from google.cloud.bigtable.data.mutations import SetCell
from hypothesis import settings

from saltedtable import SaltedTable, SaltScheme
from saltedtable.pytest_plugin import TableFactory
from saltedtable.testing import INSTANCE, PROJECT, Emulator, ExternalEmulator

# No time limit per example: the suite asserts no timings (speed is the benchmarks'
# business), and a loaded 2-core CI machine must not turn a slow example into a failure.
settings.register_profile("saltedtable", deadline=None)
settings.load_profile("saltedtable")

# pytester runs the plugin's own tests (tests/emulator/test_pytest_plugin.py).
pytest_plugins = ["pytester"]

EMULATOR_TESTS = Path(__file__).parent / "emulator"

MakeTable = Callable[..., str]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/emulator/ with ``emulator``."""
    for item in items:
        if item.path.is_relative_to(EMULATOR_TESTS):
            item.add_marker(pytest.mark.emulator)


@pytest.fixture(scope="session")
def emulator(bigtable_emulator: Emulator | ExternalEmulator) -> Emulator:
    """The session's emulator process (this suite stops, restarts and inspects it)."""
    if not isinstance(bigtable_emulator, Emulator):
        pytest.fail(
            "this suite starts its own emulator: run it without --bigtable-emulator-host",
            pytrace=False,
        )
    return bigtable_emulator


@pytest.fixture
def data_client(bigtable_data_client: BigtableDataClientAsync) -> BigtableDataClientAsync:
    """A data client connected to the session's emulator, closed after the test."""
    return bigtable_data_client


@pytest.fixture
def make_table(bigtable_table_factory: TableFactory) -> TableFactory:
    """``make_table(families=("cf",)) -> table_id``: a fresh table, deleted after the test."""
    return bigtable_table_factory


def salted_table_of(make_table: MakeTable, scheme: SaltScheme, keys: Sequence[bytes]) -> str:
    """A fresh table of ``keys`` salted by ``scheme`` (family ``cf``, each key its own value)."""
    name = make_table()
    with BigtableDataClient(project=PROJECT) as client:
        table = SaltedTable.from_client(client, INSTANCE, name, scheme)
        table.bulk_mutate_rows([RowMutationEntry(k, SetCell("cf", b"q", k)) for k in keys])
    return name
