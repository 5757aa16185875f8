"""The Bigtable admin API, as saltedtable uses it: clients and table schemas.

The generated admin client ignores ``BIGTABLE_EMULATOR_HOST``; :func:`admin_client`
honours it (a plaintext channel to the emulator) and otherwise uses the
credentials it is given or the environment's default ones, so the same code
runs against Cloud Bigtable and the emulator.

:func:`schema_reader_for` gives the guard a way to read the column families
of the table a data-API table object points at, with that data client's own
credentials: a caller that may read the schema gets its GC rules checked; one
that may not gets a warning (see ``saltedtable._guard.decisions``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

from ._guard.families import FamilyInfo, TableSchema, family_info

if TYPE_CHECKING:
    from google.cloud.bigtable.data import BigtableDataClient
    from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient

__all__ = [
    "EMULATOR_HOST_ENV",
    "SchemaReader",
    "admin_client",
    "data_client",
    "read_schema",
    "schema_reader_for",
    "table_label",
    "table_path",
]

EMULATOR_HOST_ENV: Final = "BIGTABLE_EMULATOR_HOST"
#: Seconds one admin call may take.
ADMIN_TIMEOUT: Final = 60.0


def table_path(project: str, instance: str, table: str) -> str:
    """The admin resource name of a table."""
    return f"projects/{project}/instances/{instance}/tables/{table}"


@contextlib.contextmanager
def admin_client(
    *, credentials: Any = None, emulator_host: str | None = None
) -> Iterator[BigtableTableAdminClient]:
    """A table admin client, closed on exit.

    Args:
        credentials: Credentials to use (default: the environment's).
        emulator_host: ``host:port`` of an emulator (default:
            ``$BIGTABLE_EMULATOR_HOST``); a plaintext channel is used there.
    """
    import grpc
    from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient
    from google.cloud.bigtable_admin_v2.services.bigtable_table_admin.transports import (
        BigtableTableAdminGrpcTransport,
    )

    host = emulator_host or os.environ.get(EMULATOR_HOST_ENV)
    if host:
        channel = grpc.insecure_channel(host)
        client = BigtableTableAdminClient(
            transport=BigtableTableAdminGrpcTransport(channel=channel)
        )
        try:
            yield client
        finally:
            channel.close()
        return
    client = BigtableTableAdminClient(credentials=credentials)
    try:
        yield client
    finally:
        client.transport.close()  # type: ignore[no-untyped-call]


def table_label(table: Any) -> str:
    """How messages name the table a data-API table object points at."""
    table_id = getattr(table, "table_id", None)
    instance = getattr(table, "instance_id", None)
    project = getattr(getattr(table, "client", None), "project", None)
    if isinstance(table_id, str) and isinstance(instance, str) and isinstance(project, str):
        return f"{table_id} --instance {instance} --project {project}"
    return table_id if isinstance(table_id, str) else "TABLE"


def schema_of(table: Any) -> dict[str, FamilyInfo]:
    """The column families of an admin ``Table`` proto."""
    return {name: family_info(name, fam) for name, fam in table.column_families.items()}


def read_schema(
    client: BigtableTableAdminClient, name: str, *, timeout: float | None = None
) -> dict[str, FamilyInfo]:
    """The column families of the table ``name`` (its admin resource name).

    Args:
        client: The admin client.
        name: The table's admin resource name.
        timeout: Seconds the read may take, one attempt and no retry (what is
            left of an operation's budget). None: :data:`ADMIN_TIMEOUT`, with
            the client's own retries.

    Raises:
        google.api_core.exceptions.GoogleAPICallError: The call failed
            (``NotFound``, ``PermissionDenied``, ``DeadlineExceeded`` ...).
    """
    from google.cloud.bigtable_admin_v2 import types

    request = types.GetTableRequest(name=name, view=types.Table.View.SCHEMA_VIEW)
    if timeout is None:
        return schema_of(client.get_table(request=request, timeout=ADMIN_TIMEOUT))
    return schema_of(client.get_table(request=request, timeout=timeout, retry=None))


#: Reads a table's column families within a timeout (seconds; None: the default).
SchemaReader = Callable[[float | None], TableSchema]


def schema_reader_for(table: Any, *, internals: bool = True) -> SchemaReader | None:
    """How the guard reads the schema of a data-API table object (None: it cannot).

    A ``TableAsync``/``Table`` of the Bigtable client is read through the admin
    API with its data client's credentials (and emulator), within the timeout
    the reader is called with. Any other object may answer itself with a
    ``saltedtable_schema()`` method (test doubles do; it is given no timeout).
    ``internals`` False (the salted table's ``client_internals`` switch): the
    data client's private attributes are not read; the admin client uses the
    default credentials and the emulator of ``BIGTABLE_EMULATOR_HOST``, as a
    data client made without arguments does.
    """
    own = getattr(table, "saltedtable_schema", None)
    if callable(own):

        def read_own(timeout: float | None) -> TableSchema:
            return own()  # type: ignore[no-any-return]

        return read_own
    client = getattr(table, "client", None)
    project = getattr(client, "project", None)
    instance = getattr(table, "instance_id", None)
    table_id = getattr(table, "table_id", None)
    if not (isinstance(project, str) and isinstance(instance, str) and isinstance(table_id, str)):
        return None
    if internals:
        credentials = getattr(client, "_credentials", None)
        emulator_host = getattr(client, "_emulator_host", None)
    else:
        credentials = emulator_host = None  # (admin_client: the environment's)

    def read(timeout: float | None) -> TableSchema:
        with admin_client(credentials=credentials, emulator_host=emulator_host) as admin:
            return read_schema(admin, table_path(project, instance, table_id), timeout=timeout)

    return read


# -- create ------------------------------------------------------------------------------


@contextlib.contextmanager
def data_client(
    project: str, *, credentials: Any = None, emulator_host: str | None = None
) -> Iterator[BigtableDataClient]:
    """A sync data client (on the emulator when one is given or set), closed on exit."""
    import warnings

    from google.cloud.bigtable.data import BigtableDataClient

    host = emulator_host or os.environ.get(EMULATOR_HOST_ENV)
    saved = os.environ.get(EMULATOR_HOST_ENV)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Connecting to Bigtable emulator", RuntimeWarning)
        if host:
            os.environ[EMULATOR_HOST_ENV] = host
        try:
            client = BigtableDataClient(project=project, credentials=credentials)
        finally:
            if host and saved is None:
                del os.environ[EMULATOR_HOST_ENV]
            elif host and saved is not None:
                os.environ[EMULATOR_HOST_ENV] = saved
    try:
        yield client
    finally:
        client.close()
