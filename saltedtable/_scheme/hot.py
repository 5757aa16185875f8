"""Hot keys: a hot key part spread over K buckets, a hot row split into K sub-rows (pure).

Salting spreads many keys; it cannot spread one. This module holds the rules
that place one hot key part or one hot row in K buckets and read it back as
one, with no I/O: the layout record (which lists the hot parts and rows),
the table and the read engine call these functions (docs/hot-keys.md).

**Which K buckets.** A hot key's K buckets are its home bucket (the one the
scheme gives it unsplit) and K - 1 more around the ring of the scheme's
buckets, at the offsets :func:`spread_offsets` chooses: each next offset is
the bucket farthest from those already chosen. So the K buckets are spread
over the key space (sub-rows in neighbouring buckets could share a tablet
when tablets span several buckets), and the list for K is a prefix of the
list for K + 1: raising K keeps every old bucket.

**Which of the K.** A key of a hot part goes to bucket number
``jump(fingerprint64(key), K)``; a plain column of a hot row lives in sub-row
``jump(fingerprint64(family NUL qualifier), K)``. ``jump`` is the jump
consistent hash (Lamping and Veach, 2014): when K rises, a key either stays
or moves to one of the new buckets, never between old ones. So a raise moves
the fewest rows, and a column's sub-row index never decreases over its
history (0, the home row, before the split): the highest-numbered sub-row
holds its latest write, which decides ties (:func:`combine_rows`).
"""

from __future__ import annotations

import functools
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, final

import farmhash

from .._exceptions import RowKeyError, SaltSchemeError, SplitKeyError
from .salt import MAX_ROW_KEY_BYTES, SaltScheme, fields, format_key, to_key

if TYPE_CHECKING:  # the client's value types, imported only when rows are combined
    from google.cloud.bigtable.data.mutations import Mutation
    from google.cloud.bigtable.data.row import Row
    from google.cloud.bigtable.data.row_filters import RowFilter

__all__ = [
    "AGGREGATE_KINDS",
    "AfterOp",
    "HotLayout",
    "SplitFilter",
    "SplitProposal",
    "check_hot_change",
    "combine_rows",
    "jump_hash",
    "plan_split_filter",
    "propose_split",
    "read_buckets",
    "read_keys",
    "refuse_atomic",
    "route_mutations",
    "spread_of_token",
    "spread_offsets",
]

_U64: Final = (1 << 64) - 1
_JUMP_MULTIPLIER: Final = 2862933555777941757
_INT64_MIN: Final = -(1 << 63)

#: The aggregate kinds a split row can combine on read (the last word of
#: ``FamilyInfo.aggregate``: ``"int64 sum"`` is ``sum``). HLL cannot be combined
#: without the server's sketch format, so a split row refuses writes to it.
AGGREGATE_KINDS: Final = frozenset({"sum", "min", "max"})


# -- the two hashes ---------------------------------------------------------------


def jump_hash(key: int, buckets: int) -> int:
    """Jump consistent hash: a number in ``range(buckets)`` for a 64-bit ``key``.

    Raising ``buckets`` moves a key only to one of the new numbers (Lamping and
    Veach, "A Fast, Minimal Memory, Consistent Hash Algorithm", 2014).

    Raises:
        ValueError: ``buckets`` is below 1.
    """
    if buckets < 1:
        raise ValueError(f"jump_hash needs buckets >= 1, got {buckets}")
    b, j = -1, 0
    key &= _U64
    while j < buckets:
        b = j
        key = (key * _JUMP_MULTIPLIER + 1) & _U64
        # Floats as in the paper: IEEE doubles, the same on every platform.
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def _fingerprint(data: bytes) -> int:
    # FarmHash Fingerprint64 is fixed by its specification, so placements never change
    # with the Python version (hash() of bytes is randomised per process).
    return int(farmhash.fingerprint64(data))


def _column_id(family: str, qualifier: bytes) -> bytes:
    # A family id never holds NUL (FAMILY_NAME), so the pair is encoded without ambiguity.
    return family.encode() + b"\x00" + qualifier


def spread_of_token(token: bytes | str) -> int:
    """The ``spread`` of a caller's token for :func:`route_mutations` (its fingerprint).

    A token naming the writer or the event keeps an application's retry of one
    ``AddToCell`` on the same sub-row; the count is still at-least-once.
    """
    return _fingerprint(to_key(token))


@functools.lru_cache(maxsize=256)
def spread_offsets(ring: int, k: int) -> tuple[int, ...]:
    """The first ``k`` offsets around a ring of ``ring`` buckets, each farthest from the rest.

    Offset 0 (the home bucket) comes first; each next one is the offset whose
    distance around the ring to the nearest chosen one is largest, the lowest
    on a tie. The list for ``k`` is a prefix of the list for ``k + 1``.

    Raises:
        ValueError: ``k`` is not in ``1..ring``.
    """
    if not 1 <= k <= ring:
        raise ValueError(f"spread_offsets needs 1 <= k <= {ring}, got {k}")
    chosen = [0]
    dist = [min(o, ring - o) for o in range(ring)]
    while len(chosen) < k:
        best = max(range(ring), key=lambda o: (dist[o], -o))
        chosen.append(best)
        for o in range(ring):
            d = abs(o - best)
            d = min(d, ring - d)
            if d < dist[o]:
                dist[o] = d
    return tuple(chosen)


# -- the layout of hot keys -------------------------------------------------------


def _check_list(what: str, listed: Mapping[Any, int], n: int) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for raw, k in listed.items():
        key = to_key(raw)
        if not key:
            raise SaltSchemeError(f"a hot {what} must not be empty")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 < k <= n:
            raise SaltSchemeError(
                f"hot {what} {format_key(key)!r}: K must be an integer with 1 < K <= N={n}, "
                f"got {k!r} (K = 1 is the unsplit {what}: leave it off the list)"
            )
        out[key] = k
    return dict(sorted(out.items()))


@final
@dataclass(frozen=True, slots=True, repr=False, eq=False)
class HotLayout:
    """A scheme with its hot key parts and hot rows, each with its fan-out K.

    Args:
        scheme: The salt scheme.
        parts: ``{part value: K}``: the rows whose key part is listed go to one of
            K buckets (needs a scheme with a ``key_part``).
        rows: ``{logical row key: K}``: each listed row is stored as K sub-rows.
        moving: ``{part value: K_old}``: listed parts whose rows may still sit
            where fan-out ``K_old`` placed them (1: the part's home bucket, it
            was not listed), because the part was listed, or its K raised, after
            its rows were written. Writes go to the placement of ``parts``;
            reads consult both until a backfill has moved the rows and a record
            change removes the entry (:mod:`saltedtable._scheme.hot_move`).

    Raises:
        SaltSchemeError: A K outside ``2..N``, an empty value, hot parts on a
            scheme that hashes the whole key (list the key as a hot row), or a
            moving part that is not listed with a K above its ``K_old``.
    """

    scheme: SaltScheme
    parts: Mapping[bytes, int] = field(default_factory=dict)
    rows: Mapping[bytes, int] = field(default_factory=dict)
    #: The lists writers used before the latest split (None: no split with a start).
    previous: HotLayout | None = None
    #: When writers switch from :attr:`previous` to these lists (microseconds
    #: since the Unix epoch; None: in effect since they were stored).
    start_micros: int | None = None
    #: The minimum lead the split kept, seconds: table objects re-read the record
    #: within it while a split is pending, and write only within it of their last read.
    min_lead_s: float | None = None
    #: Parts whose rows may still sit where an older fan-out placed them:
    #: ``{part: K_old}`` (1: the part's home bucket, it was not listed).
    moving: Mapping[bytes, int] = field(default_factory=dict)

    _index: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = self.scheme.buckets
        parts = _check_list("part", self.parts, n)
        rows = _check_list("row", self.rows, n)
        if parts and self.scheme.key_part is None:
            raise SaltSchemeError(
                f"{self.scheme} hashes the whole key, so a key part is one row: list "
                f"{format_key(next(iter(parts)))!r} as a hot row instead"
            )
        moving: dict[bytes, int] = {}
        for raw, k_old in self.moving.items():
            part = to_key(raw)
            k = parts.get(part)
            if k is None:
                raise SaltSchemeError(
                    f"moving part {format_key(part)!r} is not a listed hot part: a move goes "
                    "to the placement the list gives"
                )
            if not isinstance(k_old, int) or isinstance(k_old, bool) or not 1 <= k_old < k:
                raise SaltSchemeError(
                    f"moving part {format_key(part)!r}: its old fan-out must be an integer "
                    f"from 1 to K - 1 = {k - 1}, got {k_old!r}"
                )
            moving[part] = k_old
        if moving and not isinstance(self.scheme.key_part, fields):
            # (hot_move.part_ranges: a moving part is cut out of scans as key ranges.)
            raise SaltSchemeError(
                f"a hot part can move only under a fields(...) key part; {self.scheme} has "
                "another: list parts before their rows are written"
            )
        object.__setattr__(self, "parts", MappingProxyType(parts))
        object.__setattr__(self, "rows", MappingProxyType(rows))
        object.__setattr__(self, "moving", MappingProxyType(dict(sorted(moving.items()))))
        object.__setattr__(self, "_index", {b: i for i, b in enumerate(self.scheme.bucket_ids)})
        self._check_start()

    def _check_start(self) -> None:
        previous = self.previous
        if self.start_micros is not None and previous is None:
            # (a first split: writers used no lists before it)
            previous = HotLayout(self.scheme)
            object.__setattr__(self, "previous", previous)
        if previous is None:
            return
        if self.start_micros is None:
            raise SaltSchemeError("hot lists with previous lists need the split's start_micros")
        # Only the latest split's "before" is kept (one earlier placement at most),
        # with the moves it shares with these lists: a part still moving from an
        # earlier split moves in both, and writers of either keep its delete rule.
        inherited = {
            part: k_old
            for part, k_old in self.moving.items()
            if previous.parts.get(part, 1) == self.parts[part]
        }
        if (
            previous.previous is not None
            or previous.min_lead_s is not None
            or dict(previous.moving) != inherited
        ):
            previous = HotLayout(
                self.scheme, parts=previous.parts, rows=previous.rows, moving=inherited
            )
            object.__setattr__(self, "previous", previous)
        check_hot_change(previous, self.lists())
        if self.min_lead_s is not None and not self.min_lead_s > 0:
            raise SaltSchemeError(f"min_lead_s must be seconds > 0, got {self.min_lead_s!r}")

    def _key(self) -> tuple[Any, ...]:
        prev = None if self.previous is None else self.previous._key()
        lists = (self.scheme, tuple(self.parts.items()), tuple(self.rows.items()))
        return (*lists, prev, self.start_micros, self.min_lead_s, tuple(self.moving.items()))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # A mapping proxy cannot be pickled (Beam pickles what its workers use).
        return HotLayout, (
            self.scheme,
            dict(self.parts),
            dict(self.rows),
            self.previous,
            self.start_micros,
            self.min_lead_s,
            dict(self.moving),
        )

    def __repr__(self) -> str:
        text = f"HotLayout({self.scheme}, parts={dict(self.parts)!r}, rows={dict(self.rows)!r}"
        if self.start_micros is not None:
            text += f", previous={self.previous!r}, start_micros={self.start_micros}"
        if self.min_lead_s is not None:
            text += f", min_lead_s={self.min_lead_s:g}"
        # Without moving parts the repr is the one it always was.
        return text + (f", moving={dict(self.moving)!r})" if self.moving else ")")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HotLayout):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    # -- the split's start -------------------------------------------------------

    def lists(self) -> HotLayout:
        """The parts and rows alone (no previous lists, start, lead or moving parts)."""
        if self.previous is None and self.min_lead_s is None and not self.moving:
            return self
        return HotLayout(self.scheme, parts=self.parts, rows=self.rows)

    def same_lists(self, other: HotLayout) -> bool:
        """Whether ``other`` lists the same parts and rows with the same K (same scheme)."""
        return (self.scheme, dict(self.parts), dict(self.rows)) == (
            other.scheme,
            dict(other.parts),
            dict(other.rows),
        )

    def pending(self, now_micros: int) -> bool:
        """Whether the latest split has not started at ``now_micros`` (writers use ``previous``)."""
        return self.start_micros is not None and now_micros < self.start_micros

    def writers_at(self, now_micros: int) -> HotLayout:
        """The lists writers place rows by at ``now_micros``: ``previous`` before the start.

        Before the start every writer, whether it has read the split or not,
        writes where the previous lists put rows (a split row's home row,
        sub-row 0, which every reader reads), so no write lands where a reader
        that does not know the split will not look.
        """
        if self.previous is not None and self.pending(now_micros):
            return self.previous
        return self

    # -- a move ----------------------------------------------------------------

    @property
    def before(self) -> HotLayout | None:
        """The placement the moving parts' rows had before their move (None: nothing moves).

        The same lists, with each moving part at its old fan-out (unlisted where it was 1).
        """
        if not self.moving:
            return None
        parts = {p: self.moving.get(p, k) for p, k in self.parts.items()}
        return HotLayout(self.scheme, {p: k for p, k in parts.items() if k > 1}, self.rows)

    def moving_part(self, key: bytes | str) -> bytes | None:
        """The moving part ``key`` belongs to (None: its part is not moving)."""
        if not self.moving:
            return None
        part = self.scheme.hashed_part(to_key(key))
        return part if part in self.moving else None

    def move_keys(self, key: bytes | str) -> tuple[bytes, bytes | None]:
        """``(new physical key, old physical key)`` of an unsplit row; old None: one row.

        The old key is None when the row's part is not moving, or when the move
        leaves this key where it was (the jump hash keeps a key in its bucket
        with chance ``K_old / K``): there is then one physical row and nothing
        to combine. A split row never moves (a change may not move its home).
        """
        key = to_key(key)
        new = self.physical_keys(key)[0]
        before = self.before
        if before is None or key in self.rows or self.moving_part(key) is None:
            return new, None
        old = before.physical_keys(key)[0]
        return new, (None if old == new else old)

    # -- buckets ---------------------------------------------------------------

    def buckets_from(self, home: int, k: int) -> tuple[int, ...]:
        """The ``k`` buckets of a key whose home bucket is ``home``, home first."""
        ids = self.scheme.bucket_ids
        start = self._index[home]
        return tuple(ids[(start + o) % len(ids)] for o in spread_offsets(len(ids), k))

    def part_buckets(self, part: bytes | str) -> tuple[int, ...]:
        """The buckets a key part's rows live in: K for a hot part, else its one bucket."""
        part = to_key(part)
        home = self.scheme.bucket_of_part(part)
        return self.buckets_from(home, self.parts.get(part, 1))

    def bucket_of(self, key: bytes | str) -> int:
        """The bucket of a logical key (a split row's home sub-row)."""
        key = to_key(key)
        part = self.scheme.hashed_part(key)
        k = self.parts.get(part, 1) if self.parts else 1
        home = self.scheme.bucket_of_part(part)
        if k == 1:
            return home
        return self.buckets_from(home, k)[jump_hash(_fingerprint(key), k)]

    def row_buckets(self, key: bytes | str) -> tuple[int, ...]:
        """The buckets of a logical row: its K sub-rows' when split (home first), else one."""
        key = to_key(key)
        return self.buckets_from(self.bucket_of(key), self.rows.get(key, 1))

    def physical_keys(self, key: bytes | str) -> tuple[bytes, ...]:
        """The physical keys of a logical row: ``prefix(b_j) + key``, sub-row 0 first.

        Sub-row 0 is where the row lives unsplit, so a writer that has not yet
        read the split keeps writing where readers look.
        """
        key = to_key(key)
        home = self.scheme.salt_key(key)  # checks the key (empty, too long)
        if not self.parts and key not in self.rows:
            return (home,)
        found = tuple(self.scheme.prefix(b) + key for b in self.row_buckets(key))
        longest = max(found, key=len)
        if len(longest) > MAX_ROW_KEY_BYTES:
            # Java's negative buckets have longer prefixes than the home's.
            raise RowKeyError(
                f"sub-row key {format_key(longest[:40])}... is {len(longest)} bytes; "
                f"Bigtable allows at most {MAX_ROW_KEY_BYTES}"
            )
        return found

    def is_split(self, key: bytes | str) -> bool:
        """Whether the logical row is stored as more than one sub-row."""
        return to_key(key) in self.rows

    def scan_buckets(self, prefix: bytes | str) -> tuple[int, ...] | None:
        """The buckets a scan of ``prefix`` must read, or None when it needs them all.

        None when the key part does not fix one part for the prefix (the scan
        fans out anyway); else the part's buckets and the sub-row buckets of every
        hot row under the prefix, in ascending order.
        """
        prefix = to_key(prefix)
        shared = getattr(self.scheme.key_part, "shared_part", None)
        part = shared(prefix) if shared is not None else None
        if part is None:
            return None
        found = set(self.part_buckets(part))
        for row in self.rows:
            if row.startswith(prefix):
                found.update(self.row_buckets(row))
        return tuple(sorted(found))

    def sub_row(self, key: bytes, family: str, qualifier: bytes) -> int:
        """The sub-row (0..K-1) a plain column of a split row lives in (0 when unsplit)."""
        k = self.rows.get(key, 1)
        return 0 if k == 1 else jump_hash(_fingerprint(_column_id(family, qualifier)), k)


# -- during a change --------------------------------------------------------------


def check_hot_change(before: HotLayout, after: HotLayout) -> None:
    """Refuse a change of the hot lists that readers could not follow.

    A change may list new parts and rows and raise K. Lowering K or unlisting
    would move cells to lower sub-rows, where the tie rule of
    :func:`combine_rows` would prefer older writes: folding sub-rows back needs
    a backfill this release does not have.

    A change must also leave every split row's home bucket where it was. A
    part change that moves a split row (listing its part, or raising the
    part's K, when the jump hash moves that row) would put the row's old and
    new sub-rows in one read, where a physical row both places share holds
    writes of both times and no order of the sub-rows keeps "the later write
    wins". List a part before splitting rows under it.

    Raises:
        SaltSchemeError: The schemes differ, a K falls, a listed key is
            dropped, or a split row's home bucket moves.
    """
    if before.scheme != after.scheme:
        raise SaltSchemeError(
            f"a hot-key change keeps the scheme: {before.scheme} then {after.scheme}"
        )
    for part, k_old in before.moving.items():
        if after.parts.get(part) != before.parts[part]:
            raise SaltSchemeError(
                f"hot part {format_key(part)!r} is still moving from K={k_old} to "
                f"K={before.parts[part]}: finish that move (saltedtable split --finish) "
                "before changing its K again"
            )
    for what, old, new in (("part", before.parts, after.parts), ("row", before.rows, after.rows)):
        for key, k in old.items():
            if new.get(key, 1) < k:
                raise SaltSchemeError(
                    f"hot {what} {format_key(key)!r}: K may only rise (from {k} to "
                    f"{new.get(key, 1)}); folding a split back is not supported"
                )
    moved = after.before
    for row in after.rows:
        if moved is not None and moved.bucket_of(row) != after.bucket_of(row):
            raise SaltSchemeError(
                f"hot row {format_key(row)!r} belongs to a moving part and its home moves: "
                "finish the move (saltedtable split --finish) before splitting it"
            )
        was, now = before.bucket_of(row), after.bucket_of(row)
        if was != now:
            raise SaltSchemeError(
                f"hot row {format_key(row)!r} is split, and this change of its key part's "
                f"fan-out moves its home from bucket {was} to {now}; a split row's home must "
                "stay (list the part, or raise its K, before splitting rows under it)"
            )


def read_keys(before: HotLayout | None, after: HotLayout, key: bytes | str) -> tuple[bytes, ...]:
    """The physical keys a point read of ``key`` consults, oldest placement first.

    Until a change's backfill completes, rows may still sit where ``before``
    put them: both placements are read, in one request. The order is the rank
    :func:`combine_rows` takes: keys only ``before`` has come first (they hold
    older writes), then ``after``'s, sub-row 0 first.
    """
    new = after.physical_keys(key)
    if before is None:
        return new
    old = [k for k in before.physical_keys(key) if k not in new]
    return (*old, *new)


def read_buckets(
    before: HotLayout | None, after: HotLayout, prefix: bytes | str
) -> tuple[int, ...] | None:
    """The buckets a scan of ``prefix`` reads during a change (None: all of them)."""
    new = after.scan_buckets(prefix)
    if before is None or new is None:
        return new
    old = before.scan_buckets(prefix)
    return None if old is None else tuple(sorted(set(old) | set(new)))


# -- writes -----------------------------------------------------------------------


def _aggregate_kind(aggregates: Mapping[str, str], family: str) -> str | None:
    text = aggregates.get(family)
    return None if text is None else text.split()[-1]


def route_mutations(
    key: bytes | str,
    mutations: Sequence[Mutation],
    *,
    layout: HotLayout,
    aggregates: Mapping[str, str],
    spread: int = 0,
    previous: HotLayout | None = None,
) -> list[tuple[bytes, list[Mutation]]]:
    """Send one logical ``mutate_row`` to the physical rows it touches.

    Rules on a split row (K sub-rows):

    * ``SetCell`` goes to the column's sub-row (:meth:`HotLayout.sub_row`), so
      each column's versions live in one physical row once the split is in effect.
    * ``AddToCell`` (families of kind sum, min or max) goes to sub-row
      ``spread % K``; every ``AddToCell`` of one call goes to the same sub-row,
      so the call's adds stay one atomic write. The client never retries
      ``AddToCell`` and the spread adds no retry of its own.
    * ``DeleteRangeFromColumn``, ``DeleteAllFromFamily`` and ``DeleteAllFromRow``
      go to every physical row a reader consults (:func:`read_keys`): a
      column's cells may sit in the home row (written before the split), in a
      lower sub-row (before K rose), and, for aggregates, in any sub-row.

    Each physical row gets its mutations in the call's order. The physical
    writes are separate rows: together they are not atomic.

    Args:
        key: The logical row key.
        mutations: The call's mutations, in order.
        layout: The hot layout writers use now.
        aggregates: The table's aggregate families: ``{family: "int64 sum"}``
            (``FamilyInfo.aggregate``); families not listed are plain.
        spread: Chooses the ``AddToCell`` sub-row: a per-writer counter, a random
            number, or :func:`spread_of_token`.
        previous: The layout before a change whose backfill is not complete:
            deletes also reach its placement.

    Returns:
        ``(physical key, mutations)`` per physical row touched, in read order.

    Raises:
        SplitKeyError: A mutation a split row cannot keep the meaning of:
            ``SetCell`` in an aggregate family, ``AddToCell`` in an HLL or
            unknown family, any other mutation type (``MergeToCell``).
    """
    from google.cloud.bigtable.data.mutations import (
        AddToCell,
        DeleteAllFromFamily,
        DeleteAllFromRow,
        DeleteRangeFromColumn,
        SetCell,
    )

    key = to_key(key)
    readers = read_keys(previous, layout, key)
    k = layout.rows.get(key, 1)
    if k == 1:
        # Unsplit: the writes go where the layout places the row; deletes also reach
        # the previous placement (a hot part whose rows are being moved).
        home = layout.physical_keys(key)[0]
        groups: dict[bytes, list[Mutation]] = {p: [] for p in readers}
        for mutation in mutations:
            is_delete = isinstance(
                mutation, DeleteRangeFromColumn | DeleteAllFromFamily | DeleteAllFromRow
            )
            for target in readers if is_delete else (home,):
                groups[target].append(mutation)
        return [(p, m) for p, m in groups.items() if m]
    subs = layout.physical_keys(key)
    groups = {p: [] for p in readers}
    adds_to = subs[spread % k]
    for mutation in mutations:
        if isinstance(mutation, SetCell):
            if mutation.family in aggregates:
                raise SplitKeyError(
                    f"row {format_key(key)!r} is split into {k} sub-rows: SetCell in the "
                    f"aggregate family {mutation.family!r} would replace one sub-row's "
                    "partial only (Bigtable refuses SetCell there anyway)"
                )
            sub = layout.sub_row(key, mutation.family, mutation.qualifier)
            groups[subs[sub]].append(mutation)
        elif isinstance(mutation, AddToCell):
            kind = _aggregate_kind(aggregates, mutation.family)
            if kind not in AGGREGATE_KINDS:
                why = (
                    "is not an aggregate family this table object knows"
                    if kind is None
                    else f"aggregates with {aggregates[mutation.family]!r}, which cannot be "
                    "combined on read"
                )
                raise SplitKeyError(
                    f"row {format_key(key)!r} is split into {k} sub-rows: AddToCell to "
                    f"family {mutation.family!r} is refused: the family {why}"
                )
            groups[adds_to].append(mutation)
        elif isinstance(mutation, DeleteRangeFromColumn | DeleteAllFromFamily | DeleteAllFromRow):
            for target in readers:
                groups[target].append(mutation)
        else:
            raise SplitKeyError(
                f"row {format_key(key)!r} is split into {k} sub-rows: "
                f"{type(mutation).__name__} cannot be spread and combined on read "
                "(MergeToCell and HLL are refused on split rows)"
            )
    return [(p, m) for p, m in groups.items() if m]


def refuse_atomic(
    layout: HotLayout, key: bytes | str, operation: str, previous: HotLayout | None = None
) -> None:
    """Refuse a single-row atomic operation on a split row, or on a row being moved.

    ``check_and_mutate_row`` and ``read_modify_write_row`` are atomic on one
    physical row; a split row is K of them, and a row of a hot part whose
    placement changes may sit in two places until the backfill.

    Raises:
        SplitKeyError: ``key`` is a split row, or readers consult two places for it.
    """
    key = to_key(key)
    k = layout.rows.get(key)
    moving = layout.moving_part(key)
    if moving is not None and layout.move_keys(key)[1] is not None:
        raise SplitKeyError(
            f"{operation} is atomic on one row, but row {format_key(key)!r} is moving: its "
            f"key part {format_key(moving)!r} moves from fan-out K={layout.moving[moving]} "
            f"to K={layout.parts[moving]} and the row may sit in both places until the "
            "move is finished (saltedtable split --finish)"
        )
    if k is not None:
        raise SplitKeyError(
            f"{operation} is atomic on one row, but row {format_key(key)!r} is split into "
            f"{k} sub-rows (the layout record lists it with K={k}); write it with "
            "mutate_row (AddToCell for counters), or keep rows that need it unsplit"
        )
    places = read_keys(previous, layout, key)
    if len(places) > 1:
        raise SplitKeyError(
            f"{operation} is atomic on one row, but row {format_key(key)!r} is moving "
            f"between {len(places)} places (its key part's fan-out changed and the backfill "
            "has not completed); retry once the backfill's record change is read"
        )


# -- reads: combining sub-rows ----------------------------------------------------


def _int64(value: bytes) -> int:
    return int.from_bytes(value, "big", signed=True)


def _wrap64(value: int) -> int:
    # Bigtable's int64 sum wraps like two's complement; Python ints do not.
    return (value - _INT64_MIN) % (1 << 64) + _INT64_MIN


def combine_rows(
    key: bytes | str, sub_rows: Sequence[Row | None], aggregates: Mapping[str, str]
) -> Row | None:
    """One logical row from its sub-rows, as one unsplit Bigtable row would hold it.

    * Cells are grouped by (family, qualifier, timestamp). In an aggregate
      family the partials combine by the family's kind (sum wraps at 64 bits,
      min, max; values are big-endian int64); a stripped value (empty) stays
      empty. In a plain family the cell of the latest sub-row in ``sub_rows``
      wins a tie, as the later write replaces a cell in one row: a column's
      sub-row only ever moves to a later one (see the module docstring).
    * The result is ordered as Bigtable orders a row: family name,
      qualifier, newest timestamp first. Labels are the winning cell's.

    Args:
        key: The logical key (the cells' and the row's ``row_key``).
        sub_rows: The sub-rows in read order (:func:`read_keys`), None where a
            sub-row does not exist.
        aggregates: ``{family: "int64 sum"}`` as for :func:`route_mutations`.

    Returns:
        The logical row, or None when no sub-row holds a cell.

    Raises:
        SplitKeyError: An aggregate family of an unknown kind (HLL) holds
            partials in more than one sub-row, or an aggregate value is not 8 bytes.
    """
    from google.cloud.bigtable.data.row import Cell, Row

    key = to_key(key)
    merged: dict[tuple[str, bytes, int], list[Cell]] = {}
    for row in sub_rows:
        if row is None:
            continue
        for cell in row.cells:
            merged.setdefault((cell.family, cell.qualifier, cell.timestamp_micros), []).append(cell)
    if not merged:
        return None
    cells = []
    for (family, qualifier, ts), group in sorted(
        merged.items(), key=lambda item: (item[0][0], item[0][1], -item[0][2])
    ):
        last = group[-1]
        value = last.value
        kind = _aggregate_kind(aggregates, family)
        if kind is not None and len(group) > 1 and all(c.value for c in group):
            if kind not in AGGREGATE_KINDS:
                raise SplitKeyError(
                    f"row {format_key(key)!r}: family {family!r} aggregates with "
                    f"{aggregates[family]!r}, which cannot be combined across sub-rows"
                )
            if any(len(c.value) != 8 for c in group):
                raise SplitKeyError(
                    f"row {format_key(key)!r}: a cell of the aggregate family {family!r} "
                    "is not a big-endian int64"
                )
            parts = [_int64(c.value) for c in group]
            if kind == "sum":
                total = _wrap64(sum(parts))
            else:
                total = min(parts) if kind == "min" else max(parts)
            value = total.to_bytes(8, "big", signed=True)
        elif kind is not None and len(group) > 1:
            value = b""
        cells.append(Cell(value, key, family, qualifier, ts, list(last.labels)))
    return Row(key, cells)


# -- reads: filters ----------------------------------------------------------------

#: A step re-applied to the combined row, in the filter's order:
#: ``("column_limit", n)``, ``("row_offset", n)``, ``("row_limit", n)``,
#: ``("strip", 0)`` or ``("label", label)``.
AfterOp = tuple[Literal["column_limit", "row_offset", "row_limit", "strip", "label"], int | str]


@final
@dataclass(frozen=True, slots=True)
class SplitFilter:
    """How a read filter runs on a split row: a filter per sub-row, then steps on the whole.

    Args:
        down: The filter each sub-row read carries (None: none).
        after: The steps re-applied to the combined row, in order.
    """

    down: RowFilter | None
    after: tuple[AfterOp, ...] = ()

    def apply(self, row: Row | None) -> Row | None:
        """Apply :attr:`after` to a combined row (None when no cell is left)."""
        from google.cloud.bigtable.data.row import Cell, Row

        if row is None:
            return None
        cells = list(row.cells)
        for op, arg in self.after:
            if op == "column_limit":
                seen: dict[tuple[str, bytes], int] = {}
                kept = []
                for c in cells:
                    n = seen.get((c.family, c.qualifier), 0)
                    if n < int(arg):
                        kept.append(c)
                    seen[c.family, c.qualifier] = n + 1
                cells = kept
            elif op == "row_offset":
                cells = cells[int(arg) :]
            elif op == "row_limit":
                cells = cells[: int(arg)]
            elif op == "strip":
                cells = [
                    Cell(b"", c.row_key, c.family, c.qualifier, c.timestamp_micros, list(c.labels))
                    for c in cells
                ]
            else:
                cells = [
                    Cell(
                        c.value,
                        c.row_key,
                        c.family,
                        c.qualifier,
                        c.timestamp_micros,
                        [*c.labels, str(arg)],
                    )
                    for c in cells
                ]
        return Row(row.row_key, cells) if cells else None


def _flatten(row_filter: RowFilter) -> Iterable[RowFilter]:
    from google.cloud.bigtable.data.row_filters import RowFilterChain

    if isinstance(row_filter, RowFilterChain):
        for inner in row_filter.filters:
            yield from _flatten(inner)
    else:
        yield row_filter


def plan_split_filter(row_filter: RowFilter | None, key: bytes | str = b"") -> SplitFilter:
    """Split a read filter into what each sub-row read carries and what runs after combining.

    A chain is read in order. Cell predicates on family, qualifier, column
    range and timestamp go down (a combined cell is made of sub-row cells of
    the same column and timestamp, so they commute with combining); row-key
    regexes go down wherever they are (they keep or drop every sub-row
    alike). ``cells_per_column_limit`` goes down *and* is re-applied (each
    sub-row's newest n cells of a column hold the newest n of the union).
    After the first row-level step, only row limits and offsets, column
    limits, stripping values and labels may follow; they run on the combined
    row.

    Refused (:class:`SplitKeyError`): value filters (regex, range, bitmask: an
    aggregate's partials and a replaced cell's old value would be tested instead of
    the combined cell), row sampling, conditions, sinks, interleaves (a cell
    passing two branches comes twice, which a sum would count twice), a
    timestamp or column predicate after a limit, and filter types it does not know.

    Raises:
        SplitKeyError: The filter cannot keep its meaning on a split row.
    """
    from google.cloud.bigtable.data import row_filters as rf

    if row_filter is None:
        return SplitFilter(None)
    name = f"row {format_key(to_key(key))!r}" if key else "a split row"

    def refuse(what: str) -> SplitKeyError:
        return SplitKeyError(
            f"{what} cannot be answered on {name}, which is split into sub-rows: "
            "saltedtable combines the sub-rows and this filter would test the parts, "
            "not the combined row"
        )

    column_level = (
        rf.FamilyNameRegexFilter,
        rf.ColumnQualifierRegexFilter,
        rf.ColumnRangeFilter,
    )
    down: list[rf.RowFilter] = []
    after: list[AfterOp] = []
    phase = "cells"  # then "columns" (after a column limit), then "rows"
    for f in _flatten(row_filter):
        if isinstance(f, rf.RowKeyRegexFilter) or (isinstance(f, rf.PassAllFilter) and f.flag):
            down.append(f)
        elif isinstance(f, rf.BlockAllFilter) and f.flag:
            return SplitFilter(f)
        elif (isinstance(f, column_level) and phase != "rows") or (
            isinstance(f, rf.TimestampRangeFilter) and phase == "cells"
        ):
            down.append(f)
        elif isinstance(f, rf.CellsColumnLimitFilter):
            if phase != "rows":
                down.append(f)
                phase = "columns"
            after.append(("column_limit", f.num_cells))
        elif isinstance(f, rf.CellsRowLimitFilter):
            phase = "rows"
            after.append(("row_limit", f.num_cells))
        elif isinstance(f, rf.CellsRowOffsetFilter):
            phase = "rows"
            after.append(("row_offset", f.num_cells))
        elif isinstance(f, rf.StripValueTransformerFilter):
            if f.flag:
                after.append(("strip", 0))
        elif isinstance(f, rf.ApplyLabelFilter):
            after.append(("label", f.label))
        elif isinstance(f, (*column_level, rf.TimestampRangeFilter)):
            raise refuse(f"{type(f).__name__} after a cell limit")
        else:
            raise refuse(type(f).__name__)
    if not down:
        return SplitFilter(None, tuple(after))
    return SplitFilter(down[0] if len(down) == 1 else rf.RowFilterChain(down), tuple(after))


# -- the advisor's proposal -------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class SplitProposal:
    """The K that brings a hot part's or row's tablet under the target, and the command.

    Args:
        kind: ``"part"`` or ``"row"``.
        value: The part value or row key.
        k: The proposed K (capped at N).
        k_high: The K the high end of the share's interval needs (capped at N).
        level: The predicted max/mean of the tablet holding one of the K pieces.
        meets: Whether ``level`` is at or below the target (False when the cap bites).
        command: ``saltedtable split TABLE --part VALUE -k K``.
    """

    kind: Literal["part", "row"]
    value: bytes
    k: int
    k_high: int
    level: float
    meets: bool
    command: str


def _piece_level(share: float, k: int, distinct: int, tablets: int) -> float:
    # The tablet of one of the K pieces holds share/K and a fair part of the rest:
    # T * share / K + (D - T) / (D - 1) * (1 - share), the advisor's hot_key_floor at K = 1.
    if distinct <= 1 or tablets <= 1:
        return 1.0
    return tablets * share / k + (distinct - tablets) / (distinct - 1) * (1.0 - share)


def _k_for(share: float, distinct: int, tablets: int, target: float, n: int) -> int:
    if distinct <= 1 or tablets <= 1:
        return 1
    rest = (distinct - tablets) / (distinct - 1) * (1.0 - share)
    # rest <= 1 < target, so the room left for the pieces is positive.
    k = max(1, min(n, math.ceil(tablets * share / (target - rest))))
    # The closed form, checked against the level itself (floating point at the edges).
    while k < n and _piece_level(share, k, distinct, tablets) > target:
        k += 1
    while k > 1 and _piece_level(share, k - 1, distinct, tablets) <= target:
        k -= 1
    return k


def propose_split(
    kind: Literal["part", "row"],
    value: bytes | str,
    share: float,
    *,
    buckets: int,
    tablets: int,
    distinct: int,
    target: float,
    table: str = "TABLE",
    share_high: float | None = None,
) -> SplitProposal | None:
    """The K for a hot part or row that takes ``share`` of the writes, or None if none is needed.

    The advisor's model: the tablet holding a key with share ``s`` of the load
    runs at ``T * s + (D - T) / (D - 1) * (1 - s)`` times the mean
    (``hot_key_floor``). Split over K buckets, each piece carries ``s / K``:
    K is the smallest that brings that level to the target, capped at N.

    Args:
        kind: ``"part"`` or ``"row"``.
        value: The hot part value or row key.
        share: Its share of the writes (0..1).
        buckets: N: K never exceeds it.
        tablets: T, the tablets the advisor models.
        distinct: D, the distinct keys in the sample.
        target: The max/mean to reach (> 1).
        table: The table name for the command.
        share_high: The high end of the share's interval, for :attr:`SplitProposal.k_high`.

    Raises:
        ValueError: A share outside 0..1, a target not above 1, or counts below 1.
    """
    if not 0.0 <= share <= 1.0 or (share_high is not None and not share <= share_high <= 1.0):
        raise ValueError(f"shares are between 0 and 1 (share <= share_high), got {share}")
    if not target > 1.0:
        raise ValueError(f"target must be > 1, got {target}")
    if buckets < 1 or tablets < 1 or distinct < 1:
        raise ValueError("buckets, tablets and distinct must be >= 1")
    if _piece_level(share, 1, distinct, tablets) <= target:
        return None
    if buckets < 2:
        raise ValueError("a split needs N >= 2 buckets")
    k = max(2, _k_for(share, distinct, tablets, target, buckets))
    high = share if share_high is None else share_high
    k_high = max(k, _k_for(high, distinct, tablets, target, buckets))
    level = _piece_level(share, k, distinct, tablets)
    text = format_key(to_key(value))
    command = f"saltedtable split {shlex.quote(table)} --{kind} {shlex.quote(text)} -k {k}"
    return SplitProposal(
        kind=kind,
        value=to_key(value),
        k=k,
        k_high=k_high,
        level=level,
        meets=level <= target,
        command=command,
    )
