"""Creating a salted table: pre-split at every bucket prefix, with a family for its record.

Through the admin API (:mod:`._admin`), then the sync table's guard stores the
layout record, so the table is guarded from its first row. A create that fails
part-way deletes the table again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, final

from ._admin import ADMIN_TIMEOUT, admin_client, data_client, read_schema, table_path
from ._connection import data_timeouts
from ._guard.families import RECORD_FAMILY, check_family_name, family_info, parse_family
from ._scheme.cutoff import CutoffPolicy
from ._scheme.salt import (
    MAX_ROW_KEY_BYTES,
    SCHEME_ROW_KEY,
    SaltScheme,
    format_key,
    prefix_end,
    to_key,
)
from ._sync_autogen.table import SaltedTable

__all__ = [
    "CreateResult",
    "check_split_keys",
    "check_table_id",
    "create_salted_table",
    "split_points",
]

#: Bigtable's rule for table ids: a letter, digit or underscore, then up to 49 more
#: letters, digits, underscores, hyphens or dots.
_TABLE_ID: Final = re.compile(r"[_a-zA-Z0-9][-_.a-zA-Z0-9]{0,49}")


def check_table_id(table_id: str) -> None:
    """Refuse a table id Bigtable would refuse: 1 to 50 of ``a-z A-Z 0-9 _ - .``, not led by - or .

    Raises:
        ValueError: Naming the id and the rule.
    """
    if not _TABLE_ID.fullmatch(table_id):
        raise ValueError(
            f"table id {table_id!r} is not a valid Bigtable table id (1 to 50 of "
            "a-z A-Z 0-9 _ - ., not starting with - or .)"
        )


def check_split_keys(keys: Sequence[bytes | str], option: str = "split key") -> list[bytes]:
    """The split keys as bytes, refusing what Bigtable cannot split at.

    Raises:
        ValueError: An empty key, or one longer than a row key may be (4 KiB).
    """
    out: list[bytes] = []
    for key in keys:
        raw = to_key(key)
        if not raw:
            raise ValueError(f"{option}: an empty key is no split point")
        if len(raw) > MAX_ROW_KEY_BYTES:
            raise ValueError(
                f"{option} {format_key(raw[:20])}... is {len(raw)} bytes; Bigtable row keys "
                f"(and split points) are at most {MAX_ROW_KEY_BYTES}"
            )
        out.append(raw)
    return out


def split_points(
    scheme: SaltScheme, cutoff: CutoffPolicy | None = None, extra: Sequence[bytes] = ()
) -> list[bytes]:
    """Where a new salted table is split: every bucket prefix, sorted.

    With a cutoff the legacy key space after the salted one starts its own
    tablet too (the end of the last prefix), and ``extra`` keys (the legacy
    key space's own split points) are added. The reserved record row needs
    no split of its own.
    """
    points = set(scheme.prefixes)
    if cutoff is not None:
        end = prefix_end(max(scheme.prefixes))
        if end:
            points.add(end)
    points.update(key for key in extra if key)
    return sorted(points)


@final
@dataclass(frozen=True, slots=True)
class CreateResult:
    """What :func:`create_salted_table` did.

    Args:
        table: The table's admin resource name.
        created: False when the table existed and ``if_not_exists`` accepted it.
        splits: The split points the table was created with (empty if it existed).
        record_family: The family holding the layout record.
        record_stored: Whether this call stored the record (False: an existing
            table's record agreed, and nothing was written).
        sampled_rows: The rows sampled before the record was stored (all of
            them fit the layout; None: none were sampled).
    """

    table: str
    created: bool
    splits: tuple[bytes, ...]
    record_family: str
    record_stored: bool = True
    sampled_rows: int | None = None


def _families_of(families: Mapping[str, Any] | Sequence[str]) -> dict[str, Any]:
    from google.cloud.bigtable_admin_v2 import types

    out: dict[str, Any] = {}
    items = (
        [parse_family(spec) for spec in families]
        if not isinstance(families, Mapping)
        else list(families.items())
    )
    for name, value in items:
        check_family_name(name)
        if name in out:
            raise ValueError(f"column family {name!r} is given twice")
        if value is None:
            value = types.ColumnFamily()
        elif isinstance(value, str):
            value = parse_family(f"{name}:{value}")[1]
        out[name] = value
    return out


def create_salted_table(
    project: str,
    instance: str,
    table_id: str,
    scheme: SaltScheme,
    *,
    families: Mapping[str, Any] | Sequence[str] = ("cf",),
    cutoff: CutoffPolicy | None = None,
    extra_splits: Sequence[bytes] = (),
    if_not_exists: bool = False,
    credentials: Any = None,
    emulator_host: str | None = None,
    timeout: float | None = None,
) -> CreateResult:
    """Create a salted table: split at every bucket prefix, with a family for its layout record.

    The table gets the caller's column families (with their GC rules or
    aggregate types) plus :data:`~saltedtable._guard.families.RECORD_FAMILY`
    (no GC rule), and the layout record of ``scheme`` and ``cutoff`` is
    stored there before this returns. Everything is checked before anything
    is created, and a record that cannot be stored deletes the new table
    again: a failed create leaves no table (if that delete fails too, the
    first error is raised with a note naming the table left behind).

    Args:
        project: Google Cloud project id.
        instance: Bigtable instance id.
        table_id: The new table's id.
        scheme: The salt scheme.
        families: ``NAME[:RULE]`` specs (see ``parse_family``) or a mapping of
            family id to an admin ``ColumnFamily``, a rule spec, or None.
        cutoff: The cutoff of a forward-only migration's layout.
        extra_splits: More split points (the legacy key space's own): row
            keys of 1 to 4,096 bytes (``str`` is encoded as UTF-8).
        if_not_exists: Accept an existing table whose record agrees, in
            whichever family it lives; a table without a record gets one in
            its family ``saltedtable`` if a sample of its rows fits the
            layout, and one without that family is refused with the command
            that adds it.
        credentials: Credentials for the admin and data clients.
        emulator_host: An emulator's ``host:port`` (default ``$BIGTABLE_EMULATOR_HOST``).
        timeout: Seconds each request may take, retries included (None: the
            clients' defaults, 60 seconds for an admin call). An admin read
            given a timeout is one attempt.

    Raises:
        LayoutError: The table exists (without ``if_not_exists``), its record
            differs, it has neither a record nor the family ``saltedtable``,
            its rows do not fit the layout (nothing is stored), or the record
            cannot be stored.
        ValueError: A bad family id or rule, a family given twice, a record
            family with a rule that can collect it, a scheme whose prefixes
            cover the record row, or an empty or over-long split key.
        google.api_core.exceptions.GoogleAPICallError: The admin API refused
            (an unknown instance or project: ``NotFound``).
    """
    from google.api_core.exceptions import AlreadyExists, NotFound
    from google.cloud.bigtable_admin_v2 import types

    from ._exceptions import LayoutError
    from ._guard.families import RECORD_FAMILY, record_family_problem

    check_table_id(table_id)
    wanted = _families_of(families)
    reserved = wanted.setdefault(RECORD_FAMILY, types.ColumnFamily())
    problem = record_family_problem(family_info(RECORD_FAMILY, reserved))
    if problem is not None:
        raise ValueError(f"{problem}: the record family must keep its latest version")
    if scheme.has_prefix(SCHEME_ROW_KEY):
        raise ValueError(
            f"{scheme} has a prefix covering the reserved row {SCHEME_ROW_KEY!r}, so the "
            "layout record cannot be stored; give the scheme a marker"
        )
    splits = split_points(scheme, cutoff, check_split_keys(extra_splits))
    name = table_path(project, instance, table_id)
    at = _TableAt(project, instance, table_id, scheme, cutoff, credentials, emulator_host, timeout)
    with admin_client(credentials=credentials, emulator_host=emulator_host) as admin:
        try:
            schema = read_schema(admin, name, timeout=timeout)
            exists = True
        except NotFound:
            exists = False
        if exists and not if_not_exists:
            raise LayoutError(
                f"table {table_id!r} already exists in instance {instance!r}: "
                "give another id, or --if-not-exists to accept it when its record agrees"
            )
        if exists:
            stored_in, stored, sampled = _accept_existing(at, has_reserved=RECORD_FAMILY in schema)
            return CreateResult(name, False, (), stored_in, stored, sampled)
        request = types.CreateTableRequest(
            parent=f"projects/{project}/instances/{instance}",
            table_id=table_id,
            table=types.Table(column_families=wanted),
            initial_splits=[types.CreateTableRequest.Split(key=key) for key in splits],
        )
        try:
            admin.create_table(request=request, timeout=timeout or ADMIN_TIMEOUT)
        except NotFound as exc:
            exc.add_note(f"instance {instance!r} of project {project!r} was not found")
            raise
        except AlreadyExists:
            raise LayoutError(
                f"table {table_id!r} was created meanwhile by someone else; nothing was changed"
            ) from None
        try:
            stored_in, _, sampled = _store_record(at)
        except BaseException as exc:
            try:
                admin.delete_table(name=name, timeout=timeout or ADMIN_TIMEOUT)
            except Exception as cleanup:  # the first error is the one to raise
                first = str(cleanup).splitlines()[0] if str(cleanup) else ""
                exc.add_note(
                    f"the new table {table_id!r} in instance {instance!r} was left behind: "
                    f"deleting it failed ({type(cleanup).__name__}: {first}); delete it "
                    "before creating it again"
                )
            raise
    return CreateResult(name, True, tuple(splits), stored_in, True, sampled)


@dataclass(frozen=True)
class _TableAt:
    """The table create works on, with its layout, and how to open it with the data client."""

    project: str
    instance: str
    table_id: str
    scheme: SaltScheme
    cutoff: CutoffPolicy | None
    credentials: Any
    emulator_host: str | None
    timeout: float | None

    @contextmanager
    def opened(self) -> Iterator[SaltedTable]:
        """The salted table, open while the block runs (its data client closes after it)."""
        with data_client(
            self.project, credentials=self.credentials, emulator_host=self.emulator_host
        ) as client:
            yield SaltedTable.from_client(
                client,
                self.instance,
                self.table_id,
                self.scheme,
                cutoff=self.cutoff,
                **data_timeouts(self.timeout),
            )


def _accept_existing(at: _TableAt, *, has_reserved: bool) -> tuple[str, bool, int | None]:
    """``if_not_exists`` on an existing table: its record's family, whether stored, rows sampled.

    A record that agrees is accepted in whatever family holds it (nothing is
    sampled: None). A table without one gets one in the reserved family when
    it has that family and a sample of its rows fits the layout; otherwise it
    is refused with the command that adds the family (create does not change
    an existing table's schema).

    Raises:
        SchemeMismatchError: The stored record differs.
        LayoutError: No record, and no reserved family to store one in; or
            sampled rows do not fit the layout (nothing is stored).
    """
    from ._exceptions import LayoutError

    with at.opened() as table:
        table.guard_scheme()  # reads the record wherever it lives; refuses a different one
        family = table._guard.stored_family
    if family is not None:
        return family, False, None
    if not has_reserved:
        raise LayoutError(
            f"table {at.table_id!r} exists in instance {at.instance!r} without a layout record "
            f"and without the column family {RECORD_FAMILY!r} to store one in; nothing was "
            f"changed: add both with `saltedtable guard {at.table_id} --project {at.project} "
            f"--instance {at.instance} -n {at.scheme.buckets} --add-family` (and the scheme's "
            "other options)"
        )
    return _store_record(at)


def _store_record(at: _TableAt) -> tuple[str, bool, int | None]:
    """Store (or check) the layout record: its family, whether this stored it, rows sampled.

    Raises:
        LayoutError: Sampled rows do not fit the layout (nothing is stored).
    """
    with at.opened() as table:
        table.guard_scheme(family=RECORD_FAMILY)
        guard = table._guard
        family, stored, sampled = guard.stored_family, guard.outcome == "stored", guard.sampled
    return family or RECORD_FAMILY, stored, sampled
