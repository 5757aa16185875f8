"""pytest fixtures for testing your own code against the official Bigtable emulator.

Installed with saltedtable and loaded by pytest automatically (entry point
``pytest11``, name ``saltedtable``; ``-p no:saltedtable`` turns it off). Nothing
starts until a test asks for a fixture:

* ``bigtable_emulator`` (session): the emulator, started on first use and stopped
  at the end of the session; ``BIGTABLE_EMULATOR_HOST`` points at it meanwhile.
  A missing emulator fails the tests that need it, with the install hint; they
  are never skipped. ``--bigtable-emulator-host=HOST:PORT`` uses an emulator that
  is already running (Docker, another shell) instead of starting one.
* ``bigtable_table_factory``: ``make(families=None) -> table_id``, a fresh table
  per call, deleted after the test.
* ``bigtable_families``: the column families of ``bigtable_table`` and of the
  factories' tables, ``("cf",)``; override it (in a conftest, a module, a class,
  or with ``@pytest.mark.parametrize("bigtable_families", ...)``) to change them.
* ``bigtable_table``: the id of a fresh table, deleted after the test.
* ``bigtable_data_client`` (async): a ``BigtableDataClientAsync`` connected to the
  emulator, closed after the test.
* ``salted_table_async_factory`` (async): ``make(scheme, ...) ->
  SaltedTableAsync`` over a fresh table, closed after the test.
* ``bigtable_sync_data_client``: a ``BigtableDataClient`` (the sync client)
  connected to the emulator, closed after the test.
* ``salted_table_factory``: ``make(scheme, ...) -> SaltedTable`` (the sync
  table) over a fresh table, closed after the test.

Tables live in project ``saltedtable.testing.PROJECT`` and instance
``saltedtable.testing.INSTANCE``. The async fixtures need ``pytest-asyncio``
(saltedtable's ``pytest`` extra, or ``pip install pytest-asyncio``); the others do not.
"""

from __future__ import annotations

import functools
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pytest

if TYPE_CHECKING:
    from google.cloud.bigtable.data import BigtableDataClient, BigtableDataClientAsync

    from saltedtable._async.table import SaltedTableAsync
    from saltedtable._scheme.salt import SaltScheme
    from saltedtable._sync_autogen.table import SaltedTable
    from saltedtable.testing import Emulator, ExternalEmulator

__all__ = [
    "SaltedTableAsyncFactory",
    "SaltedTableFactory",
    "TableFactory",
    "bigtable_data_client",
    "bigtable_emulator",
    "bigtable_families",
    "bigtable_sync_data_client",
    "bigtable_table",
    "bigtable_table_factory",
    "salted_table_async_factory",
    "salted_table_factory",
]

_HOST_OPTION = "--bigtable-emulator-host"
#: A salted table of either flavour, as a factory makes it.
_Table = TypeVar("_Table")
#: A Bigtable data client of either flavour.
_Client = TypeVar("_Client")


class TableFactory(Protocol):
    """The ``bigtable_table_factory`` fixture: creates a table, returns its id."""

    def __call__(self, families: Iterable[str] | None = None) -> str:
        """Create a fresh table with ``families`` (default: ``bigtable_families``)."""
        ...


class SaltedTableAsyncFactory(Protocol):
    """The ``salted_table_async_factory`` fixture: a salted table over a fresh table."""

    def __call__(
        self,
        scheme: SaltScheme,
        *,
        families: Iterable[str] | None = None,
        table_id: str | None = None,
        **options: Any,
    ) -> SaltedTableAsync:
        """Return a ``SaltedTableAsync`` with ``scheme`` over a fresh table.

        Args:
            scheme: The salt scheme.
            families: Column families of the fresh table (default: ``bigtable_families``).
            table_id: Use this existing table instead of creating one.
            **options: Passed to ``SaltedTableAsync.from_client`` (``cutoff=``,
                ``stats_hook=``, ...).
        """
        ...


class SaltedTableFactory(Protocol):
    """The ``salted_table_factory`` fixture: a sync salted table over a fresh table."""

    def __call__(
        self,
        scheme: SaltScheme,
        *,
        families: Iterable[str] | None = None,
        table_id: str | None = None,
        **options: Any,
    ) -> SaltedTable:
        """Return a ``SaltedTable`` with ``scheme`` over a fresh table.

        Args:
            scheme: The salt scheme.
            families: Column families of the fresh table (default: ``bigtable_families``).
            table_id: Use this existing table instead of creating one.
            **options: Passed to ``SaltedTable.from_client`` (``cutoff=``,
                ``stats_hook=``, ...).
        """
        ...


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--bigtable-emulator-host``."""
    group = parser.getgroup("saltedtable", "saltedtable's Bigtable emulator fixtures")
    group.addoption(
        _HOST_OPTION,
        dest="bigtable_emulator_host",
        default="",
        metavar="HOST:PORT",
        help="use the Bigtable emulator already running there instead of starting one "
        '(e.g. --bigtable-emulator-host="$BIGTABLE_EMULATOR_HOST"; empty: start one)',
    )


@pytest.fixture(scope="session")
def bigtable_emulator(request: pytest.FixtureRequest) -> Iterator[Emulator | ExternalEmulator]:
    """The session's Bigtable emulator; ``BIGTABLE_EMULATOR_HOST`` points at it meanwhile."""
    # Imported on first use: loading the plugin must stay cheap for every pytest run.
    from saltedtable import testing
    from saltedtable._exceptions import EmulatorError

    given: str = request.config.getoption("bigtable_emulator_host")
    running: testing.Emulator | testing.ExternalEmulator
    try:
        running = testing.connect_emulator(given) if given else testing.start_emulator()
    except EmulatorError as error:
        # A failure, never a skip: a suite without its emulator must not pass quietly.
        pytest.fail(f"the Bigtable emulator is required:\n{error}", pytrace=False)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(testing.EMULATOR_HOST_ENV, running.address)
            yield running
    finally:
        if isinstance(running, testing.Emulator):
            running.stop()


@pytest.fixture
def bigtable_families() -> tuple[str, ...]:
    """Column families of ``bigtable_table`` and of the factories' tables."""
    return ("cf",)


@pytest.fixture
def bigtable_table_factory(
    bigtable_emulator: Emulator | ExternalEmulator, bigtable_families: tuple[str, ...]
) -> Iterator[TableFactory]:
    """``make(families=None) -> table_id``: a fresh table per call, deleted after the test."""
    from saltedtable.testing import create_table, delete_table

    created: list[str] = []

    def make(families: Iterable[str] | None = None) -> str:
        table_id = f"t-{uuid.uuid4().hex[:16]}"
        chosen = bigtable_families if families is None else tuple(families)
        create_table(bigtable_emulator.address, table_id, chosen)
        created.append(table_id)
        return table_id

    yield make
    for table_id in created:
        delete_table(bigtable_emulator.address, table_id, missing_ok=True)


@pytest.fixture
def bigtable_table(bigtable_table_factory: TableFactory) -> str:
    """The id of a fresh table with ``bigtable_families``, deleted after the test."""
    return bigtable_table_factory()


def _async_fixture(function: Callable[..., Any]) -> Any:
    """pytest-asyncio's fixture decorator, or a stand-in that fails saying it is missing."""
    try:
        import pytest_asyncio
    except ImportError:  # only the async fixtures need it; the plugin must still load

        def needs_pytest_asyncio() -> None:
            pytest.fail(
                f"the saltedtable fixture {function.__name__} is async and needs "
                "pytest-asyncio: pip install pytest-asyncio (saltedtable's pytest extra)",
                pytrace=False,
            )

        return pytest.fixture(needs_pytest_asyncio, name=function.__name__)
    return pytest_asyncio.fixture(function)


def _emulator_client(client_class: Callable[..., _Client]) -> _Client:
    """A data client of ``client_class`` for the session's emulator (its project)."""
    from saltedtable.testing import PROJECT

    with warnings.catch_warnings():
        # The client warns that it talks to an emulator: here that is the point.
        warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
        return client_class(project=PROJECT)


@_async_fixture
async def bigtable_data_client(
    bigtable_emulator: Emulator | ExternalEmulator,
) -> AsyncIterator[BigtableDataClientAsync]:
    """A data client connected to the session's emulator, closed after the test."""
    from google.cloud.bigtable.data import BigtableDataClientAsync

    client = _emulator_client(BigtableDataClientAsync)
    try:
        yield client
    finally:
        await client.close()


def _table_for(factory: TableFactory, families: Iterable[str] | None, table_id: str | None) -> str:
    """The table a factory wraps: ``table_id``, or a fresh one with ``families``."""
    if table_id is None:
        return factory(families)
    if families is not None:
        raise TypeError("families= only applies to a fresh table, not to table_id=")
    return table_id


def _maker(
    wrap: Callable[..., _Table], tables: TableFactory, made: list[_Table]
) -> Callable[..., _Table]:
    """A salted table factory's ``make``: ``wrap(table_id, scheme, **options)`` of the
    table :func:`_table_for` picks, kept in ``made`` for the fixture to close."""

    def make(
        scheme: SaltScheme,
        *,
        families: Iterable[str] | None = None,
        table_id: str | None = None,
        **options: Any,
    ) -> _Table:
        table = wrap(_table_for(tables, families, table_id), scheme, **options)
        made.append(table)
        return table

    return make


@_async_fixture
async def salted_table_async_factory(
    bigtable_data_client: BigtableDataClientAsync, bigtable_table_factory: TableFactory
) -> AsyncIterator[SaltedTableAsyncFactory]:
    """``make(scheme, *, families=None, table_id=None, **options) -> SaltedTableAsync``.

    Each call wraps a fresh table (or ``table_id``) with ``scheme``; every table
    made is closed after the test, and the fresh tables are deleted.
    """
    from saltedtable._async.table import SaltedTableAsync
    from saltedtable.testing import INSTANCE

    made: list[SaltedTableAsync] = []
    wrap = functools.partial(SaltedTableAsync.from_client, bigtable_data_client, INSTANCE)
    try:
        yield _maker(wrap, bigtable_table_factory, made)
    finally:
        for table in made:
            await table.close()


@pytest.fixture
def bigtable_sync_data_client(
    bigtable_emulator: Emulator | ExternalEmulator,
) -> Iterator[BigtableDataClient]:
    """A sync data client connected to the session's emulator, closed after the test."""
    from google.cloud.bigtable.data import BigtableDataClient

    client = _emulator_client(BigtableDataClient)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def salted_table_factory(
    bigtable_sync_data_client: BigtableDataClient, bigtable_table_factory: TableFactory
) -> Iterator[SaltedTableFactory]:
    """``make(scheme, *, families=None, table_id=None, **options) -> SaltedTable``.

    The sync twin of ``salted_table_async_factory``: each call wraps a fresh
    table (or ``table_id``) with ``scheme``; every table made is closed after
    the test, and the fresh tables are deleted. Needs no pytest-asyncio.
    """
    from saltedtable._sync_autogen.table import SaltedTable
    from saltedtable.testing import INSTANCE

    made: list[SaltedTable] = []
    wrap = functools.partial(SaltedTable.from_client, bigtable_sync_data_client, INSTANCE)
    try:
        yield _maker(wrap, bigtable_table_factory, made)
    finally:
        for table in made:
            table.close()
