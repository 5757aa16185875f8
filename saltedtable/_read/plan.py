"""Read planning: one logical read -> physical sub-queries, one per bucket.

Pure code. :func:`plan_reads` decides which buckets can hold matching rows and
what to ask each of them; :class:`PageCursor` turns one sub-query into a
sequence of bounded page requests (so a limit reads about ``limit`` rows, a
concurrency slot is held for one page at a time, and long key lists are sent
in chunks). Row-key regex filters are rewritten per bucket by
:func:`rewrite_filter`. :func:`one_request` joins a bounded read's
sub-queries into one request, for reads small enough to need no more.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, cast, final

from google.cloud.bigtable.data import row_filters as _row_filters
from google.cloud.bigtable.data.read_rows_query import ReadRowsQuery, RowRange
from google.cloud.bigtable.data.row_filters import (
    ConditionalRowFilter,
    RowFilter,
    RowFilterChain,
    RowFilterUnion,
    RowKeyRegexFilter,
)
from google.cloud.bigtable_v2.types import RowRange as _RowRangeMessage

from .._engine.budget import ReadBudget
from .._exceptions import QueryPlanError, UnsaltableKeyError
from .._scheme.cutoff import CutoffPolicy
from .._scheme.epochs import Epochs, buckets_of_range, physical_range, shared_prefix
from .._scheme.hot import HotLayout
from .._scheme.layout import Layout
from .._scheme.ranges import KeyRange
from .._scheme.salt import SaltScheme, prefix_end, to_key
from .settings import ReadSettings, one_request_size

__all__ = [
    "KeyRange",
    "OneRequest",
    "PageCursor",
    "ReadPlan",
    "SubQuery",
    "one_request",
    "plan_reads",
    "rewrite_filter",
]

#: Point keys sent in one ReadRows request at most (a request carries every key
#: it names, so a read of 100k keys is split instead of sent as one huge message).
MAX_KEYS_PER_REQUEST: Final = 1000
#: ... and at most this many bytes of keys.
MAX_KEY_BYTES_PER_REQUEST: Final = 512 * 1024


@final
@dataclass(frozen=True, slots=True)
class SubQuery:
    """What one bucket is asked for: physical keys and ranges, and the rewritten filter.

    Attributes:
        bucket: The salt bucket, or None for the legacy (unsalted) side of a
            time-cutoff layout.
        prefix: Its physical key prefix; ``physical[len(prefix):]`` is the logical key
            (empty on the legacy side).
        keys: Physical point keys, sorted.
        ranges: Physical ranges, each inside the bucket's key space.
        row_filter: The filter to send, with row-key regexes rewritten for this bucket.
    """

    bucket: int | None
    prefix: bytes
    keys: tuple[bytes, ...] = ()
    ranges: tuple[KeyRange, ...] = ()
    row_filter: RowFilter | None = field(default=None, compare=False)
    #: Why the legacy side is read, when that is not plain (see ``describe``).
    note: str = field(default="", compare=False)
    #: With layout epochs: the epochs whose rows this prefix may hold (their rows
    #: are told apart one by one, ``Layout.hiding_under``); empty otherwise.
    epochs: tuple[int, ...] = ()

    def describe(self) -> str:
        """One line for humans: the bucket, its keys and ranges."""
        if self.bucket is None:
            why = self.note or "before the cutoff"
            parts = [f"legacy side (unsalted keys, {why}):"]
        else:
            parts = [f"bucket {self.bucket} prefix {self.prefix!r}:"]
        if self.epochs:
            parts[0] = parts[0][:-1] + f" (epoch{'s' * (len(self.epochs) > 1)} "
            parts[0] += ", ".join(map(str, self.epochs)) + "):"
        if self.keys:
            shown = ", ".join(repr(k) for k in self.keys[:3])
            more = f" (+{len(self.keys) - 3} more)" if len(self.keys) > 3 else ""
            parts.append(f"keys {shown}{more}")
        parts.extend(f"range {r}" for r in self.ranges)
        return " ".join(parts)


_UNSET: Final = object()


@final
@dataclass(frozen=True, slots=True)
class ReadPlan:
    """The physical reads that answer one logical read.

    Attributes:
        subqueries: One per bucket that can hold matching rows, in bucket order.
        limit: The logical row limit (None: no limit).
        row_filter: The logical filter as the caller gave it.
        reverse: Read in descending key order (every bucket backwards, the
            merge descending; the limit is the first rows in that order).
    """

    subqueries: tuple[SubQuery, ...]
    limit: int | None = None
    row_filter: RowFilter | None = field(default=None, compare=False)
    reverse: bool = False
    #: How a table runs this plan, when one planned it (``SaltedTableAsync.plan``):
    #: shown by :meth:`explain` and returned by :meth:`settings`; reads are handed
    #: their settings apart from the plan.
    how: ReadSettings | None = field(default=None, compare=False)
    _order: object = field(default=_UNSET, init=False, compare=False, repr=False)

    @property
    def one_request_order(self) -> tuple[int, ...] | None:
        """The sub-queries' indexes in prefix order if they can be one request, else None.

        Worked out once per plan (a read asks twice: for its settings and its request).
        """
        order = self._order
        if order is _UNSET:
            order = _one_request_order(self.subqueries)
            object.__setattr__(self, "_order", order)
        return cast("tuple[int, ...] | None", order)

    @property
    def buckets(self) -> tuple[int | None, ...]:
        """The buckets this plan reads (None: the legacy side of a cutoff layout)."""
        return tuple(s.bucket for s in self.subqueries)

    def settings(
        self,
        budget: ReadBudget | None = None,
        *,
        ordered: bool | None = None,
        slots: int | None = None,
        one_request: bool | None = None,
    ) -> ReadSettings:
        """How this plan is read (see :class:`~saltedtable.ReadSettings`).

        With no argument: the settings of the table that planned it (else the
        defaults). An argument given replaces that one setting.

        Args:
            budget: What the read may hold at once.
            ordered: Merged in key order.
            slots: Requests the table runs at once (``max_concurrent_subscans``).
            one_request: Whether a small read may try one request over every
                bucket first (False on cutoff layouts, whose rows are checked one
                by one, per side).
        """
        how = self.how
        if how is not None and (budget, ordered, slots, one_request) == (None, None, None, None):
            return how
        if budget is None:
            budget = ReadBudget() if how is None else how.budget
        if ordered is None:
            ordered = True if how is None else how.ordered
        if slots is None and how is not None:
            slots = how.slots
        n = len(self.subqueries)
        joins = self.one_request_order is not None
        if one_request is None:
            # The table's gate: closed only where its settings would have tried one.
            one_request = how is None or not (
                joins
                and how.one_request_rows == 0
                and one_request_size(how.budget, self.limit, n, ordered=how.ordered)
            )
        rows_first = one_request_size(budget, self.limit, n, ordered=ordered)
        tries = one_request and joins
        return ReadSettings(
            ordered=ordered,
            budget=budget,
            slots=slots,
            subqueries=n,
            limit=self.limit,
            one_request_rows=rows_first if tries else 0,
        )

    def strategy(self, budget: ReadBudget | None = None, *, ordered: bool | None = None) -> str:
        """How the read runs, in words: requests per bucket and what it holds at most.

        The same as ``self.settings(budget, ordered=ordered).describe()``.
        """
        return self.settings(budget, ordered=ordered).describe()

    def explain(self, max_lines: int = 32, settings: ReadSettings | None = None) -> str:
        """A human-readable description: how the read runs, then one sub-query a line.

        Args:
            max_lines: Show at most this many sub-queries (the rest are counted).
            settings: How the read runs (default: :meth:`settings`).
        """
        head = f"{len(self.subqueries)} sub-quer{'y' if len(self.subqueries) == 1 else 'ies'}"
        if self.reverse:
            head += ", reversed"
        if self.limit is not None:
            head += f", limit {self.limit}"
        if self.row_filter is not None:
            head += f", filter {type(self.row_filter).__name__}"
        how = settings if settings is not None else self.settings()
        lines = [head, f"  how: {how.describe()}"]
        lines += ["  " + s.describe() for s in self.subqueries[:max_lines]]
        if len(self.subqueries) > max_lines:
            lines.append(f"  ... and {len(self.subqueries) - max_lines} more sub-queries")
        return "\n".join(lines)


def plan_reads(
    query: ReadRowsQuery,
    layout: Layout | SaltScheme,
    cutoff: CutoffPolicy | None = None,
    *,
    reverse: bool = False,
    hot: HotLayout | None = None,
) -> ReadPlan:
    """Turn a logical query into one physical sub-query per bucket that can match.

    A query with neither keys nor ranges reads the whole table, as in Bigtable.
    Point keys go to their bucket only; a range goes to every bucket unless the
    scheme's key part proves it lies in one (see :class:`saltedtable.KeyPart`).
    With a cutoff, keys before it are read from the legacy (unsalted) layout by
    one more sub-query (bucket None) that never touches the salted key space,
    and a side that the range's time bounds rule out is not read.

    Args:
        query: The logical read.
        layout: The table's layout; a bare :class:`SaltScheme` is taken with ``cutoff``.
        cutoff: Only with a bare scheme.
        reverse: A reversed read (the same sub-queries; see :attr:`ReadPlan.reverse`).
        hot: The table's hot lists (one plain scheme only): a key of a hot part
            is read in the one of the part's K buckets it lives in, and a range
            the key part narrows to a hot part reads all K. Split rows are not
            planned here (the table reads them itself).

    Raises:
        RowKeyError: A point key cannot be salted (empty, too long, ...).
        CutoffError: A point key's timestamp cannot be read.
        QueryPlanError: The filter cannot be applied to salted keys.
    """
    if isinstance(layout, SaltScheme):
        layout = Layout(layout, cutoff)
    elif cutoff is not None:
        raise TypeError("give the cutoff inside the Layout, not beside it")
    if layout.epochs is not None:
        return _plan_epochs(query, layout.epochs, reverse)
    scheme, cutoff = layout.scheme, layout.cutoff
    keys_by_bucket: dict[int | None, list[bytes]] = {}
    ranges_by_bucket: dict[int | None, list[KeyRange]] = {}
    row_keys = query.row_keys
    row_ranges = [KeyRange.from_row_range(r) for r in query.row_ranges]
    for key in row_keys:
        try:
            bucket: int | None
            if hot is not None:
                bucket, physical = hot.bucket_of(key), hot.physical_keys(key)[0]
            else:
                bucket, physical = layout.locate(key)
        except UnsaltableKeyError:
            continue  # never written salted: no bucket holds it
        keys_by_bucket.setdefault(bucket, []).append(physical)
    if not row_keys and not row_ranges:
        row_ranges = [KeyRange()]
    gaps = layout.legacy_gaps() if cutoff is not None else ()
    unreadable_only = legacy_ranges_planned = 0
    for rng in row_ranges:
        if rng.is_empty:
            continue
        legacy, salted = (
            (False, True)
            if cutoff is None
            else cutoff.sides_of_range(rng.start, rng.end, rng.end_closed)
        )
        if salted:
            buckets = buckets_of_range(scheme, rng)
            if hot is not None and len(buckets) == 1:
                buckets = _hot_buckets(hot, rng)
            for bucket in buckets:
                phys = physical_range(scheme.prefix(bucket), rng)
                ranges_by_bucket.setdefault(bucket, []).append(phys)
        if legacy:
            pieces = [p for gap in gaps if (p := rng.intersect(gap)) is not None]
            ranges_by_bucket.setdefault(None, []).extend(pieces)
            assert cutoff is not None
            unreadable_only += cutoff.only_unreadable_before(rng.start, rng.end, rng.end_closed)
            legacy_ranges_planned += 1
    subs = []
    legacy_keys = keys_by_bucket.pop(None, [])
    legacy_ranges = ranges_by_bucket.pop(None, [])
    if legacy_keys or legacy_ranges:
        note = ""
        if not legacy_keys and legacy_ranges_planned and unreadable_only == legacy_ranges_planned:
            note = "read only because keys with an unreadable time stay unsalted"
        subs.append(
            SubQuery(
                None,
                b"",
                tuple(sorted(set(legacy_keys))),
                tuple(legacy_ranges),
                query.filter,
                note,
            )
        )
    salted_buckets = {b for b in keys_by_bucket.keys() | ranges_by_bucket.keys() if b is not None}
    for bucket in sorted(salted_buckets):
        prefix = scheme.prefix(bucket)
        subs.append(
            SubQuery(
                bucket,
                prefix,
                tuple(sorted(set(keys_by_bucket.get(bucket, ())))),
                tuple(ranges_by_bucket.get(bucket, ())),
                rewrite_filter(query.filter, prefix),
            )
        )
    return ReadPlan(tuple(subs), query.limit, query.filter, reverse)


def _hot_buckets(hot: HotLayout, rng: KeyRange) -> tuple[int, ...]:
    # A range the key part narrows to one bucket: a hot part's rows live in K.
    if rng.start == rng.end:
        return (hot.bucket_of(rng.start),)
    shared = getattr(hot.scheme.key_part, "shared_part", None)
    part = None if shared is None else shared(shared_prefix(rng))
    return hot.part_buckets(part) if isinstance(part, bytes) else hot.scheme.bucket_ids


def _plan_epochs(query: ReadRowsQuery, epochs: Epochs, reverse: bool) -> ReadPlan:
    """:func:`plan_reads` of a layout with epochs: one sub-query per physical prefix.

    A point key goes to the prefix of its epoch; a range to every prefix of
    every epoch it can touch (:meth:`Epochs.touches`), a prefix that epochs
    share once. Each sub-query names the epochs it reads for, whose rows
    the read tells apart one by one (:meth:`Epochs.hiding_for`).
    """
    keys: dict[bytes, list[bytes]] = {}
    reads: dict[bytes, tuple[int | None, set[int], list[KeyRange]]] = {}
    for key in query.row_keys:
        try:
            epoch, bucket, physical = epochs.locate(key)
        except UnsaltableKeyError:
            continue  # never written salted: no bucket holds it
        prefix = physical[: len(physical) - len(to_key(key))]
        keys.setdefault(prefix, []).append(physical)
        reads.setdefault(prefix, (bucket, set(), []))[1].add(epoch)
    row_ranges = [KeyRange.from_row_range(r) for r in query.row_ranges]
    if not query.row_keys and not row_ranges:
        row_ranges = [KeyRange()]
    for rng in row_ranges:
        if rng.is_empty:
            continue
        for touch in epochs.touches(rng):
            _, owners, ranges = reads.setdefault(touch.prefix, (touch.bucket, set(), []))
            owners.update(touch.epochs)
            ranges.extend(r for r in touch.ranges if r not in ranges)
    subs = tuple(
        SubQuery(
            bucket,
            prefix,
            tuple(sorted(set(keys.get(prefix, ())))),
            tuple(ranges),
            query.filter if bucket is None else rewrite_filter(query.filter, prefix),
            epochs=tuple(sorted(owners)),
        )
        for prefix, (bucket, owners, ranges) in sorted(reads.items())
    )
    return ReadPlan(subs, query.limit, query.filter, reverse)


# -- paging ------------------------------------------------------------------


@final
class _RequestRange(RowRange):
    """A :class:`RowRange` built for one request: its hash is worked out once.

    ``ReadRowsQuery`` files its ranges in a dict, and ``RowRange`` hashes by
    reading four properties of its proto-plus message (about 40 Python calls a
    range). A request over 16 buckets names 16 ranges, so that was most of a
    small read's planning. The hash is the one ``RowRange`` computes, so equal
    ranges still hash alike whichever class built them.
    """

    __slots__ = ("_hash",)
    _hash: int

    def __hash__(self) -> int:
        return self._hash


_RANGE_PB: Final = _RowRangeMessage.pb()
_WRAP: Final = _RowRangeMessage.wrap


def _request_range(rng: KeyRange, internals: bool = True) -> RowRange:
    """``rng`` as a request's ``RowRange``, equal to :meth:`KeyRange.to_row_range`'s, built cheaply.

    The message is built by protobuf itself and wrapped (no proto-plus
    marshalling); the keys are bytes the planner made, so the checks of
    ``RowRange.__init__`` have nothing to catch. That sets a private attribute
    of the client's ``RowRange``: with ``internals`` False (the table's
    ``client_internals`` switch), or where this client's ``RowRange`` is not
    built that way (:data:`_FAST_RANGES`), the public constructor builds it.
    """
    if not (internals and _FAST_RANGES):
        return rng.to_row_range()
    start, end = rng.start, rng.end
    fields: dict[str, bytes] = {}
    if start:
        fields["start_key_closed" if rng.start_closed else "start_key_open"] = start
    if end:
        fields["end_key_closed" if rng.end_closed else "end_key_open"] = end
    made = _RequestRange.__new__(_RequestRange)
    made._pb = _WRAP(_RANGE_PB(**fields))
    made._hash = hash(
        (
            start or None,
            end or None,
            not (start and not rng.start_closed),
            not (end and not rng.end_closed),
        )
    )
    return made


def _fast_ranges_work() -> bool:
    """Whether :func:`_request_range`'s cheap build equals the public one in this client."""
    try:
        for rng in (KeyRange(b"a", True, b"b"), KeyRange(b"a", False, b"b", True), KeyRange()):
            made, public = _request_range(rng), rng.to_row_range()
            if made != public or hash(made) != hash(public) or made._pb != public._pb:
                return False
    except Exception:  # any other layout of RowRange: the public constructor only
        return False
    return True


_FAST_RANGES = True  # (so the check itself can build one)
#: The client's ``RowRange`` is built as :func:`_request_range` expects (checked at import).
_FAST_RANGES = _fast_ranges_work()


@final
class PageCursor:
    """Walks one :class:`SubQuery` as a series of bounded page requests.

    Call :meth:`next_query` for the next request (None when the sub-query is
    done), run it with a row limit of ``size``, then report what came back with
    :meth:`advance`. Each request names at most :data:`MAX_KEYS_PER_REQUEST`
    point keys; ranges are clipped to the same window, so no row is skipped.

    ``reverse``: the requests are read backwards (a reversed scan), so pages
    walk down: each resumes below the last key read, and key windows are taken
    from the largest keys down.
    """

    __slots__ = ("_after", "_done", "_internals", "_keys", "_reverse", "_upto", "sub")

    def __init__(self, sub: SubQuery, *, reverse: bool = False, internals: bool = True) -> None:
        self.sub = sub
        self._reverse = reverse
        #: False: requests are built with the client's public constructors only.
        self._internals = internals
        self._keys = sub.keys
        self._after: bytes | None = None
        self._upto: bytes | None = None
        self._done = False

    @property
    def done(self) -> bool:
        """True once every row of the sub-query has been read."""
        return self._done

    @property
    def position(self) -> bytes | None:
        """The last physical key read so far (the resume point), or None."""
        return self._after

    def next_query(self, size: int | None) -> ReadRowsQuery | None:
        """Return the request for the next page of at most ``size`` rows, or None.

        ``size`` None: no row limit (a request streamed for as long as its
        reader takes rows; report an early end as a full page,
        ``advance(rows, rows, last_key)``).
        """
        if self._done:
            return None
        if self._reverse:
            return self._next_below(size)
        after = self._after
        keys = self._keys
        lo = 0 if after is None else bisect.bisect_right(keys, after)
        hi, total = lo, 0
        while hi < len(keys) and hi - lo < MAX_KEYS_PER_REQUEST:
            total += len(keys[hi])
            if total > MAX_KEY_BYTES_PER_REQUEST and hi > lo:
                break
            hi += 1
        self._upto = keys[hi - 1] if hi < len(keys) else None
        ranges = [c for r in self.sub.ranges if (c := r.clip(after, self._upto)) is not None]
        return self._window(keys[lo:hi], ranges, size)

    def _next_below(self, size: int | None) -> ReadRowsQuery | None:
        """:meth:`next_query` of a reversed cursor: the window below the last key read.

        (``_after`` is then the smallest key read, ``_upto`` the lowest key of
        the window: the window is ``[_upto, _after)``.)
        """
        before = self._after
        keys = self._keys
        hi = len(keys) if before is None else bisect.bisect_left(keys, before)
        lo, total = hi, 0
        while lo > 0 and hi - lo < MAX_KEYS_PER_REQUEST:
            total += len(keys[lo - 1])
            if total > MAX_KEY_BYTES_PER_REQUEST and lo < hi:
                break
            lo -= 1
        self._upto = keys[lo] if lo > 0 else None
        ranges = [c for r in self.sub.ranges if (c := _clip_below(r, self._upto, before))]
        return self._window(keys[lo:hi], ranges, size)

    def _window(
        self, keys: Sequence[bytes], ranges: list[KeyRange], size: int | None
    ) -> ReadRowsQuery | None:
        """The request for one window of keys and clipped ranges (None: nothing is left)."""
        if not keys and not ranges:
            # An empty ReadRowsQuery would read the whole table: never send one.
            self._done = True
            return None
        return ReadRowsQuery(
            row_keys=list(keys),
            row_ranges=[_request_range(r, self._internals) for r in ranges],
            limit=size or None,
            row_filter=self.sub.row_filter,
        )

    def advance(self, rows: int, size: int, last_key: bytes | None) -> None:
        """Record a page of ``rows`` rows (requested ``size``) ending at ``last_key``."""
        if rows >= size and last_key is not None:
            self._after = last_key  # a full page: there may be more after it
        elif self._upto is not None:
            self._after = self._upto  # this key window is exhausted: next window
        else:
            self._done = True


def _clip_below(rng: KeyRange, lowest: bytes | None, before: bytes | None) -> KeyRange | None:
    """Intersect with ``[lowest, before)`` (None: unbounded there); None when nothing is left."""
    start, start_closed = rng.start, rng.start_closed
    if lowest is not None and (not start or start < lowest):
        start, start_closed = lowest, True
    end, end_closed = rng.end, rng.end_closed
    if before is not None and (not end or end >= before):
        end, end_closed = before, False
    clipped = KeyRange(start, start_closed, end, end_closed)
    return None if clipped.is_empty else clipped


@final
@dataclass(frozen=True, slots=True)
class OneRequest:
    """Every sub-query of a read as one ReadRows request, and which sub-query each row is of.

    The request names every bucket's keys and ranges with the read's filter
    and a row limit of :attr:`rows`. Bigtable returns rows in physical key
    order, so they come bucket after bucket; fewer than :attr:`rows` rows
    means that they are all the rows of the read.

    Attributes:
        query: The request.
        rows: Its row limit.
    """

    query: ReadRowsQuery
    rows: int
    _prefixes: tuple[bytes, ...]
    _owners: tuple[int, ...]

    def owner(self, key: bytes) -> int | None:
        """Index of the sub-query whose bucket holds physical ``key`` (None: none)."""
        i = bisect.bisect_right(self._prefixes, key) - 1
        if i >= 0 and key.startswith(self._prefixes[i]):
            return self._owners[i]
        return None


def one_request(plan: ReadPlan, rows: int, *, internals: bool = True) -> OneRequest | None:
    """The plan's sub-queries as one request of at most ``rows`` rows, if it can be one.

    It can when the plan reads two or more buckets (no legacy side), every
    range is bounded on both sides (a prefix, a ``start``-``end`` range) or
    the read names keys, every bucket is sent the same filter (a row-key
    regex is rewritten per bucket, so it cannot be), and the keys and ranges
    of all buckets fit one request (at most :data:`MAX_KEYS_PER_REQUEST` of
    them, and :data:`MAX_KEY_BYTES_PER_REQUEST` bytes of keys and bounds).
    A read of whole buckets, or of a range open on one side, is left to the
    buckets' own requests: it is rarely small.
    """
    order = plan.one_request_order
    if rows < 1 or order is None:
        return None
    subs = plan.subqueries
    keys: list[str | bytes] = [k for sub in subs for k in sub.keys]
    return OneRequest(
        ReadRowsQuery(
            row_keys=keys,
            row_ranges=[_request_range(r, internals) for sub in subs for r in sub.ranges],
            limit=rows,
            row_filter=subs[0].row_filter,
        ),
        rows,
        tuple(subs[i].prefix for i in order),
        order,
    )


def _one_request_order(subs: tuple[SubQuery, ...]) -> tuple[int, ...] | None:
    """The sub-queries' indexes in prefix order if they can be one request (see above)."""
    if len(subs) < 2:
        return None
    row_filter = subs[0].row_filter
    count = size = 0
    for sub in subs:
        prefix = sub.prefix
        if sub.bucket is None or not prefix or sub.row_filter != row_filter or sub.epochs:
            return None  # (epochs: rows are told apart one by one, per prefix)
        for rng in sub.ranges:
            start, end = rng.start, rng.end
            if (
                start == prefix
                or not end
                # A bounded end lies under the prefix: only an open one is its end.
                or (not end.startswith(prefix) and end == prefix_end(prefix))
            ):
                return None  # open on a side within the bucket
            size += len(start) + len(end)
        keys = sub.keys
        count += len(keys) + len(sub.ranges)
        if keys:
            size += sum(map(len, keys))
    if count > MAX_KEYS_PER_REQUEST or size > MAX_KEY_BYTES_PER_REQUEST:
        return None
    prefixes = [sub.prefix for sub in subs]
    order = tuple(sorted(range(len(subs)), key=prefixes.__getitem__))
    before = prefixes[order[0]]
    for i in order[1:]:
        if prefixes[i].startswith(before):
            return None  # a row could not be told apart (no built-in scheme does this)
        before = prefixes[i]
    return order


# -- filters -----------------------------------------------------------------


#: The client's filters that neither look at the row key nor hold other filters, by
#: exact type (a point write's predicate is checked with one ``in``, not four ABC
#: checks; a subclass takes the full check).
_KEYLESS: Final = frozenset(
    cls
    for cls in vars(_row_filters).values()
    if isinstance(cls, type)
    and issubclass(cls, RowFilter)
    and cls is not RowFilter
    and not cls.__name__.startswith("_")
    and not issubclass(cls, RowKeyRegexFilter | ConditionalRowFilter | Sequence)
    and cls.__module__ == _row_filters.__name__
)


def rewrite_filter(row_filter: RowFilter | None, prefix: bytes) -> RowFilter | None:
    """Return ``row_filter`` with every row-key regex rewritten for keys under ``prefix``.

    Bigtable matches a row-key regex against the whole key, so a logical regex
    ``R`` becomes ``<prefix>(?:R)`` on the physical key. Chains, unions and
    conditions are rewritten recursively; other filters do not look at the key
    and are kept as they are.

    Raises:
        QueryPlanError: The regex uses a construct whose meaning would change.
    """
    if row_filter is None or type(row_filter) in _KEYLESS:
        return row_filter
    if isinstance(row_filter, RowKeyRegexFilter):
        if not row_filter.regex:
            # Bigtable refuses an empty regex (InvalidArgument): send it as it
            # is, so the call fails the way it fails on a plain table.
            return row_filter
        return RowKeyRegexFilter(_rewrite_regex(row_filter.regex, prefix))
    if isinstance(row_filter, RowFilterChain | RowFilterUnion):
        kids = [rewrite_filter(f, prefix) for f in row_filter.filters]
        return type(row_filter)([k for k in kids if k is not None])
    if isinstance(row_filter, ConditionalRowFilter):
        return ConditionalRowFilter(
            rewrite_filter(row_filter.predicate_filter, prefix) or row_filter.predicate_filter,
            rewrite_filter(row_filter.true_filter, prefix),
            rewrite_filter(row_filter.false_filter, prefix),
        )
    return row_filter


_WORD: Final = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _rewrite_regex(regex: bytes, prefix: bytes) -> bytes:
    body = regex
    if body.startswith(b"^"):
        body = body[1:]
    elif body.startswith(b"\\A"):
        body = body[2:]
    start_anchor, word_boundary = _scan_regex(body)
    if start_anchor:
        raise QueryPlanError(
            f"RowKeyRegexFilter {regex!r} has a start anchor ('^' or '\\A') after its first "
            "character; on salted keys it would match nothing. Anchor only at the very start."
        )
    if word_boundary and prefix and prefix[-1] in _WORD:
        # Before the logical key sits the prefix's last byte, a word character
        # here, where the unsalted key had the start of the text.
        raise QueryPlanError(
            f"RowKeyRegexFilter {regex!r} tests a word-boundary (\\b or \\B), which could "
            f"see the salt prefix {prefix!r}; drop it or use a separator that is not a word "
            "character"
        )
    if any(b >= 0x80 for b in prefix):
        raise QueryPlanError(
            f"RowKeyRegexFilter cannot be rewritten for the binary salt prefix {prefix!r} "
            "(RE2 reads bytes >= 0x80 as UTF-8); filter rows after reading them instead"
        )
    literal = b"".join(b"\\x%02x" % b for b in prefix)
    return literal + b"(?:" + body + b")"


def _scan_regex(body: bytes) -> tuple[bool, bool]:
    """(has a start anchor, has a word-boundary test) outside character classes."""
    start_anchor = word_boundary = False
    i, in_class = 0, False
    while i < len(body):
        c = body[i : i + 1]
        if c == b"\\":
            if not in_class:
                escaped = body[i + 1 : i + 2]
                start_anchor |= escaped == b"A"
                word_boundary |= escaped in (b"b", b"B")
            i += 2
            continue
        if in_class:
            if c == b"]":
                in_class = False
        elif c == b"[":
            in_class = True
            # A ']' right after '[' or '[^' is a literal member of the class.
            i += 2 if body[i + 1 : i + 2] == b"^" else 1
            if body[i : i + 1] == b"]":
                i += 1
            continue
        elif c == b"^":
            start_anchor = True
        i += 1
    return start_anchor, word_boundary
