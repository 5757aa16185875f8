"""Testing your own code with saltedtable's pytest fixtures (see docs/testing.md).

A test file as it would sit in your project: a little code that stores page visits in a
salted table, and its tests. Run it with ``pytest examples/test_visits.py``; the
``saltedtable`` pytest plugin (installed with the package) starts the official Bigtable
emulator on first use and gives every test fresh tables. Needs pytest-asyncio
(``pip install '.[pytest]'`` from a checkout).
"""

from __future__ import annotations

from contextlib import aclosing

import pytest
from google.cloud.bigtable.data import BigtableDataClientAsync, ReadRowsQuery, SetCell

from saltedtable import SaltedTableAsync, SaltScheme
from saltedtable.pytest_plugin import SaltedTableAsyncFactory
from saltedtable.testing import INSTANCE

# Not needed where pytest-asyncio runs with asyncio_mode = "auto".
pytestmark = pytest.mark.asyncio

# -- the code under test (in your project it lives in your package) ----------------------


async def record_visit(table: SaltedTableAsync, user: str, at: int, page: str) -> None:
    """Store one visit under the logical key ``user#<13-digit time>``."""
    await table.mutate_row(f"{user}#{at:013d}", SetCell("visits", b"page", page.encode()))


async def visits_of(table: SaltedTableAsync, user: str, *, limit: int) -> list[str]:
    """The first ``limit`` pages ``user`` visited, oldest first."""
    pages: list[str] = []
    async with aclosing(table.read_prefix(f"{user}#".encode(), limit=limit)) as rows:
        async for row in rows:
            pages.append(row.cells[0].value.decode())
    return pages


# -- its tests ---------------------------------------------------------------------------


@pytest.fixture
def bigtable_families() -> tuple[str, ...]:
    """Every table the plugin creates in this module has the family ``visits``."""
    return ("visits",)


async def test_visits_come_back_oldest_first(
    salted_table_async_factory: SaltedTableAsyncFactory,
) -> None:
    """A user's visits come back in time order, without another user's."""
    table = salted_table_async_factory(SaltScheme(8))
    for at, page in [(3, "/c"), (1, "/a"), (2, "/b")]:
        await record_visit(table, "ada", at, page)
    await record_visit(table, "bob", 1, "/x")

    assert await visits_of(table, "ada", limit=10) == ["/a", "/b", "/c"]
    assert await visits_of(table, "ada", limit=2) == ["/a", "/b"]


async def test_users_are_spread_over_buckets(
    salted_table_async_factory: SaltedTableAsyncFactory,
    bigtable_table: str,
    bigtable_data_client: BigtableDataClientAsync,
) -> None:
    """Bigtable stores salted keys: twenty users land under more than one prefix."""
    table = salted_table_async_factory(SaltScheme(8), table_id=bigtable_table)
    for user in range(20):
        await record_visit(table, f"user{user}", 1, "/")

    scheme = SaltScheme(8)
    async with bigtable_data_client.get_table(INSTANCE, bigtable_table) as raw:
        physical = [row.row_key for row in await raw.read_rows(ReadRowsQuery())]
    # Besides the rows, the table holds the layout record the first write stored.
    salted = [key for key in physical if scheme.has_prefix(key)]
    assert len(salted) == 20
    assert len(physical) == 21
    assert len({scheme.split_key(key)[0] for key in salted}) > 1
