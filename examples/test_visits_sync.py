"""The sync flavour of test_visits.py: saltedtable's pytest fixtures with ``SaltedTable``.

The same page-visit code written against the sync table (``SaltedTable``, over the
client's ``BigtableDataClient``), and its tests. Run it with
``pytest examples/test_visits_sync.py``; no pytest-asyncio needed (see docs/testing.md).
"""

from __future__ import annotations

from contextlib import closing

import pytest
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery, SetCell

from saltedtable import SaltedTable, SaltScheme
from saltedtable.pytest_plugin import SaltedTableFactory
from saltedtable.testing import INSTANCE

# -- the code under test (in your project it lives in your package) ----------------------


def record_visit(table: SaltedTable, user: str, at: int, page: str) -> None:
    """Store one visit under the logical key ``user#<13-digit time>``."""
    table.mutate_row(f"{user}#{at:013d}", SetCell("visits", b"page", page.encode()))


def visits_of(table: SaltedTable, user: str, *, limit: int) -> list[str]:
    """The first ``limit`` pages ``user`` visited, oldest first."""
    with closing(table.read_prefix(f"{user}#".encode(), limit=limit)) as rows:
        return [row.cells[0].value.decode() for row in rows]


# -- its tests ---------------------------------------------------------------------------


@pytest.fixture
def bigtable_families() -> tuple[str, ...]:
    """Every table the plugin creates in this module has the family ``visits``."""
    return ("visits",)


def test_visits_come_back_oldest_first(salted_table_factory: SaltedTableFactory) -> None:
    """A user's visits come back in time order, without another user's."""
    table = salted_table_factory(SaltScheme(8))
    for at, page in [(3, "/c"), (1, "/a"), (2, "/b")]:
        record_visit(table, "ada", at, page)
    record_visit(table, "bob", 1, "/x")

    assert visits_of(table, "ada", limit=10) == ["/a", "/b", "/c"]
    assert visits_of(table, "ada", limit=2) == ["/a", "/b"]


def test_users_are_spread_over_buckets(
    salted_table_factory: SaltedTableFactory,
    bigtable_table: str,
    bigtable_sync_data_client: BigtableDataClient,
) -> None:
    """Bigtable stores salted keys: twenty users land under more than one prefix."""
    table = salted_table_factory(SaltScheme(8), table_id=bigtable_table)
    for user in range(20):
        record_visit(table, f"user{user}", 1, "/")

    scheme = SaltScheme(8)
    with bigtable_sync_data_client.get_table(INSTANCE, bigtable_table) as raw:
        physical = [row.row_key for row in raw.read_rows(ReadRowsQuery())]
    # Besides the rows, the table holds the layout record the first write stored.
    salted = [key for key in physical if scheme.has_prefix(key)]
    assert len(salted) == 20
    assert len(physical) == 21
    assert len({scheme.split_key(key)[0] for key in salted}) > 1
