"""Parity: the same scenarios against a plain Bigtable table and a salted one, compared.

Each scenario of ``tests/parity/scenarios.py`` runs against a plain table and against a
salted table over a second table, both holding the same logical rows, through each
driver of ``tests/parity/drivers.py`` (one per flavour: async now). What each step
returned or raised (the exact exception type, and for streams whether it came from the
call or from the iteration) must be equal, and so must both tables' rows after a
scenario that writes; documented differences are checked as documented instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery, TableAsync

from saltedtable import SCHEME_ROW_KEY, SaltedTableAsync, SaltScheme
from saltedtable.testing import INSTANCE, Emulator
from tests.parity.drivers import Context, Driver, drivers, observe_row, reconcile
from tests.parity.model import Scenario
from tests.parity.scenarios import ATTRIBUTES, SCENARIOS
from tests.unit.test_faultproxy import load_faultproxy

fp = load_faultproxy()

MakeTable = Callable[..., str]

#: One driver per flavour: async and sync.
DRIVERS: tuple[Driver, ...] = drivers()


async def physical_rows(client: BigtableDataClientAsync, table_id: str) -> list[Any]:
    """Every row of a table as the plain client reads it."""
    async with client.get_table(INSTANCE, table_id) as table:
        return list(await table.read_rows(ReadRowsQuery()))


def reader(
    client: BigtableDataClientAsync, table_id: str, scheme: SaltScheme | None, ctx: Context
) -> Callable[[], Any]:
    """Reads a table's rows by logical key, without the salted table under test.

    With ``scheme`` the physical keys are unsalted (the layout record left out), so the
    two tables compare row for row.
    """

    async def contents() -> list[Any]:
        rows = []
        for row in await physical_rows(client, table_id):
            if scheme is not None:
                if row.row_key == SCHEME_ROW_KEY:
                    continue
                key = scheme.unsalt_key(row.row_key)
                row.row_key = key
                for cell in row.cells:
                    cell.row_key = key
            rows.append(observe_row(row, ctx))
        return sorted(rows, key=lambda row: row[1])

    return contents


async def seed(
    client: BigtableDataClientAsync, scenario: Scenario, plain_id: str, salted_id: str
) -> None:
    """Write the scenario's rows to both tables: plainly, and through a salted table."""
    if not scenario.seed:
        return
    entries = list(scenario.seed)
    async with client.get_table(INSTANCE, plain_id) as plain:
        await plain.bulk_mutate_rows(entries)
    salted = SaltedTableAsync(client.get_table(INSTANCE, salted_id), scenario.scheme)
    async with salted:
        await salted.bulk_mutate_rows(entries)


def scenario_params() -> list[Any]:
    """Every scenario; a known, unfixed difference is expected to fail (strictly)."""
    return [
        pytest.param(
            s,
            id=s.id,
            marks=() if s.known is None else pytest.mark.xfail(strict=True, reason=s.known),
        )
        for s in SCENARIOS
    ]


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@pytest.mark.parametrize("scenario", scenario_params())
async def test_salted_table_behaves_like_the_plain_table(
    scenario: Scenario,
    driver: Driver,
    emulator: Emulator,
    data_client: BigtableDataClientAsync,
    make_table: MakeTable,
) -> None:
    """The salted table returns and raises what the plain table does, at the same moment,
    and leaves the same rows behind (documented differences checked as documented)."""
    if scenario.table == "missing":
        plain_id = salted_id = f"missing-{uuid.uuid4().hex[:8]}"
    else:
        plain_id, salted_id = make_table(scenario.families), make_table(scenario.families)
        await seed(data_client, scenario, plain_id, salted_id)
    async with AsyncExitStack() as stack:
        address = emulator.address
        if scenario.latency:
            proxy = await stack.enter_async_context(fp.FaultProxy("127.0.0.1", emulator.port))
            proxy.latency = scenario.latency
            address = proxy.address
        client, plain, salted = await stack.enter_async_context(
            driver.targets(address, scenario, plain_id, salted_id)
        )
        plain_ctx, salted_ctx = (
            Context(
                objects=scenario.objects(),
                client=client,
                server_time=scenario.server_time,
                samples=scenario.samples,
                table_id=table_id,
            )
            for table_id in (plain_id, salted_id)
        )
        read_plain = reader(data_client, plain_id, None, plain_ctx)
        read_salted = reader(data_client, salted_id, scenario.scheme, salted_ctx)
        initial = scenario.contents and scenario.table == "own"
        # The salted table first: if it changed the caller's arguments, the plain run
        # that follows would show it.
        got: list[Any] = [("initial", await read_salted())] if initial else []
        got += await driver.runner.run(salted, scenario, salted_ctx, read_salted)
        expected: list[Any] = [("initial", await read_plain())] if initial else []
        expected += await driver.runner.run(plain, scenario, plain_ctx, read_plain)
        if initial:
            got.append(("final", await read_salted()))
            expected.append(("final", await read_plain()))
    got = reconcile(expected, got)
    if scenario.deliberate is not None:
        scenario.deliberate(expected, got)
    else:
        assert got == expected


def test_scenarios_cover_every_public_method_of_table_async() -> None:
    """Every public method and attribute of TableAsync appears in some scenario."""
    from tests.parity.model import Attr, Batch, Call, Close, SetAttr, Within

    used: set[str] = set()

    def walk(steps: Any) -> None:
        for step in steps:
            if isinstance(step, Call):
                used.add(step.method)
            elif isinstance(step, Attr | SetAttr):
                used.add(step.name)
            elif isinstance(step, Batch):
                used.add("mutations_batcher")
            elif isinstance(step, Close):
                used.add("close")
            elif isinstance(step, Within):
                used.update(("__aenter__", "__aexit__"))
                walk(step.steps)

    for scenario in SCENARIOS:
        walk(scenario.steps)
    public = {name for name in dir(TableAsync) if not name.startswith("_")}
    public |= {"__aenter__", "__aexit__"}
    instance_attributes = {
        "client",
        "instance_id",
        "table_id",
        "instance_name",
        "table_name",
        "app_profile_id",
    } | {name for name in ATTRIBUTES if name.startswith("default_")}
    assert (public | instance_attributes) - used == set()
    assert len({s.id for s in SCENARIOS}) == len(SCENARIOS), "scenario ids must be unique"


def test_a_salted_table_needs_a_table() -> None:
    """``SaltedTableAsync(None, scheme)`` is refused at once, naming what is missing."""
    with pytest.raises(TypeError, match="got None"):
        SaltedTableAsync(None, SaltScheme(4))  # type: ignore[arg-type]
