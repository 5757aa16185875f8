"""How a fan-out read asks its buckets for rows: the memory budget and request sizes.

Pure code. A read of N buckets sends each bucket a series of ReadRows
requests, one at a time, each with a row limit. Every row a request may
return has room reserved before the request is sent, so a request never
waits for the caller and never holds a concurrency slot while the merge is
behind; what a read can hold at once is what its buckets have asked for and
not handed over yet. :class:`ReadBudget` bounds that across all buckets, in
rows and in bytes, so memory does not grow with N or with the scan's size.

Bytes are counted as well as rows: every request carries a byte cap, and its
row limit is what that cap allows at the largest row the read has seen
(:class:`Ask`, :func:`page_ask`, :func:`capped_ask`; at
:data:`DEFAULT_ROW_BYTES` before the read has measured a row). A source
stops after the row that takes its request past the cap (a row larger than
any seen before), so bytes asked for and not handed over never exceed the
byte budget plus one row per bucket, whatever the row sizes.

Rows count at what they cost the process as objects (:func:`row_cost`), not
only their key and value bytes. A request that streams (one request carrying
one grant after another) has a row limit too, its bucket's share of the bytes
(:func:`stream_rows`): what its transport may buffer is then within the budget.

Reads without a limit keep each bucket topped up to its share of the budget
(:func:`allowance`), in pages of at most half a share of bytes; before any of
its rows is measured a bucket asks few rows (:func:`ramp`). Reads with
a limit go in rounds: the first asks every bucket for enough that data
spread evenly by the salt is answered in one round (:func:`first_round`),
and the second asks each bucket that may still hold one of the first
``limit`` rows for at most what it could contribute (:func:`refills`),
which answers any data in two rounds.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, final

__all__ = [
    "AHEAD_LEAST",
    "AHEAD_ROWS",
    "CELL_OVERHEAD_BYTES",
    "DEFAULT_MAX_CONCURRENT_SUBSCANS",
    "DEFAULT_ROW_BYTES",
    "FIRST_PAGE_ROWS",
    "MIN_WINDOW_ROWS",
    "PROBE_ROWS",
    "READ_AHEAD_GROWTH",
    "READ_AHEAD_ROWS",
    "READ_AHEAD_SECONDS",
    "ROW_OVERHEAD_BYTES",
    "STREAM_MIN_ROWS",
    "STREAM_WINDOW_ROWS",
    "Ask",
    "ReadBudget",
    "ahead_rows",
    "allowance",
    "capped_ask",
    "fetch_bound",
    "first_request",
    "first_round",
    "first_window",
    "page_ask",
    "ramp",
    "refills",
    "row_cost",
    "stream_rows",
    "streamable",
    "unordered_shares",
    "widen",
    "wire_bytes",
]

#: What a row held as Python objects costs beyond its key and cell values: the
#: ``Row``, its cell list and the merge's list slots (:func:`row_cost`)...
ROW_OVERHEAD_BYTES: Final = 192
#: ...and per cell: the ``Cell``, its qualifier, family, timestamp and label list.
#: Both measured with ``tracemalloc`` on rows built as the client's row merger builds
#: them (one 100-byte cell: 588 B in all, against 115 B of key and value; four
#: cells: 1,750 B against 415 B), CPython 3.11-3.13 on 64-bit Linux.
CELL_OVERHEAD_BYTES: Final = 288
#: Sub-scan requests in flight per table when the caller does not say otherwise.
DEFAULT_MAX_CONCURRENT_SUBSCANS: Final = 64
#: Bytes assumed per row, to turn a byte cap into a row limit, until a read has measured a row.
DEFAULT_ROW_BYTES: Final = 512
#: Rows a bucket's first page asks at most before any of its rows is measured (see
#: :func:`ramp`): enough that a small read (a few hundred rows per bucket) still takes
#: one request per bucket; it bounds the first pages of reads over few buckets, whose
#: pages at the assumed 512 B a row are thousands of rows.
FIRST_PAGE_ROWS: Final = 256
#: Rows a request asks while its read has measured no row (the read's first wave,
#: see :func:`ramp`): with rows of unknown size, one row per bucket is all the
#: first wave may bring in.
PROBE_ROWS: Final = 1
#: A bucket's request streams (no row limit, grants renewed in the stream) only while
#: its byte cap holds at least this many rows of the widest it has seen
#: (:func:`streamable`): the transport of a stream buffers what its flow-control
#: window allows whatever the grant, which for wide rows is more than the budget.
STREAM_MIN_ROWS: Final = 16
#: The read-ahead a read without a limit starts with, across its buckets: each
#: bucket's window (the rows it may hold and have asked for at once) starts at
#: its part of this, within [:data:`MIN_WINDOW_ROWS`, :data:`FIRST_PAGE_ROWS`]
#: (see :func:`first_window`, :func:`widen`).
READ_AHEAD_ROWS: Final = 4 * FIRST_PAGE_ROWS
#: The smallest window a bucket starts with (pages of fewer rows cost more per row).
MIN_WINDOW_ROWS: Final = 64
#: A bucket's read-ahead window grows (:data:`READ_AHEAD_GROWTH` times) when its
#: consumer takes half of it within this many seconds of the bucket's last
#: request's end (see :func:`widen`).
READ_AHEAD_SECONDS: Final = 1.0
#: How many times larger a bucket's window grows at once (see :func:`widen`): fast
#: enough that a consumer that keeps up reaches full pages in few requests.
READ_AHEAD_GROWTH: Final = 4
#: The largest window of a bucket of an unordered read whose request streams: held
#: rows are live objects (docs/development.md, "Rows held above the slowest bucket").
STREAM_WINDOW_ROWS: Final = 256
#: Rows an ordered streamed read's buckets may hold above the merge's watermark, in
#: all, before a bucket pauses (:func:`ahead_rows`; measured in the same section).
AHEAD_ROWS: Final = 1024
#: The least :func:`ahead_rows` gives a bucket.
AHEAD_LEAST: Final = 16
#: The first round of a limited read is sized so that rows spread evenly over
#: the buckets need no second round with at least this probability...
ONE_ROUND_PROBABILITY: Final = 0.6
#: ...or, where that would ask more than :func:`fetch_bound` allows, with at
#: least this one (a median of one round).
MEDIAN_ONE_ROUND: Final = 0.5


@final
@dataclass(frozen=True, slots=True)
class ReadBudget:
    """The most one read holds: rows asked of buckets and not yet handed to the caller.

    Both bounds apply; ``bytes`` counts what a row costs the process
    (:func:`row_cost`: its key and cell values, and the objects that hold
    them). Each
    request's row limit is what its share of the bytes allows at the largest
    row the read has seen (:data:`DEFAULT_ROW_BYTES` before it has seen
    one), and each request stops after the row that takes it past its byte
    cap, so a row larger than any seen before (the first wide rows of a
    read, say) overshoots by that one row at most: the request ends there
    and the next one is sized by that row. A read always allows one row
    per bucket that still has rows, whatever the budget: an ordered merge
    cannot emit a row before it has seen the head of every bucket. So the
    bytes a read holds stay within ``bytes`` plus one row per bucket, and a
    row larger than the whole budget is still read, one row at a time per
    bucket.

    Args:
        rows: Rows across all buckets.
        bytes: Bytes across all buckets, rows counted at :func:`row_cost`
            (what a row of 100 B in one cell costs is about 590 B).
        one_request_rows: A read of bounded ranges or of keys (a prefix, a
            ``start``-``end`` range, a set of keys) over several buckets first
            asks for this many rows in one request that names every bucket's
            keys and ranges; when fewer come back, that one request answered
            the read (one round trip, and the client's cost of one request
            instead of one per bucket). Otherwise the read goes on bucket by
            bucket, and the table tries that first request less often
            (after k misses in a row it skips the next 2**k - 1 such reads,
            at most 63). Capped by ``rows`` and ``bytes``; 0
            turns it off.

    Raises:
        ValueError: ``rows`` or ``bytes`` below 1, ``one_request_rows`` below 0.
    """

    rows: int = 20_000
    bytes: int = 8 * 1024 * 1024
    one_request_rows: int = 1000

    def __post_init__(self) -> None:
        for name, least in (("rows", 1), ("bytes", 1), ("one_request_rows", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"ReadBudget.{name} must be an int >= {least}, got {value!r}")

    def rows_for(self, row_bytes: float) -> int:
        """Rows the budget allows across all buckets, with rows of ``row_bytes`` each."""
        return max(1, min(self.rows, int(self.bytes // max(1.0, row_bytes))))


def row_cost(data_bytes: int, cells: int) -> int:
    """What a row held by a read counts in its budget's bytes.

    ``data_bytes`` (its key and cell values) plus :data:`ROW_OVERHEAD_BYTES`
    and :data:`CELL_OVERHEAD_BYTES` per cell: the Python objects a held row
    costs, which for small rows are most of it.
    """
    return data_bytes + ROW_OVERHEAD_BYTES + CELL_OVERHEAD_BYTES * cells


def stream_rows(budget: ReadBudget, sources: int, largest: int) -> int:
    """The row limit of a streamed request of one of a read's ``sources``.

    A streamed request carries one grant after another, but its transport
    does not wait for grants: gRPC grows each stream's flow-control window to
    several megabytes and keeps it full while the bucket's reader pauses or
    falls behind, outside the budget. A row limit bounds what the server may
    send for the request, whatever the window: the bucket's share of the
    budget's bytes at the ``largest`` row seen, counted as it travels (its
    :func:`row_cost` less the objects a row of one cell becomes: the bytes the
    transport buffers), so that what the requests of all ``sources`` buckets may
    buffer stays within the budget's bytes besides what the read holds. When a request
    has run to its limit, the next one starts (one round trip per share).
    At least :data:`STREAM_MIN_ROWS`; :func:`streamable` requests give more.
    """
    share = budget.bytes // max(1, sources)
    return max(STREAM_MIN_ROWS, share // wire_bytes(largest))


def wire_bytes(cost: int) -> int:
    """The bytes a row whose :func:`row_cost` is ``cost`` takes in the transport, at least.

    Its cost less the objects a row of one cell becomes (a row of more cells is
    counted larger than it travels, which errs on the safe side), and never less
    than an eighth of its cost.
    """
    return max(1, cost - ROW_OVERHEAD_BYTES - CELL_OVERHEAD_BYTES, cost // 8)


def allowance(budget: ReadBudget, live: int, row_bytes: float) -> int:
    """Rows one of ``live`` buckets may have asked for and not handed over (at least 1)."""
    return max(1, budget.rows_for(row_bytes) // max(1, live))


class Ask(NamedTuple):
    """One request's size: at most ``rows`` rows, and a byte cap.

    The source stops after the row that takes the bytes it delivered past
    ``cap`` (a row larger than the read had seen), so a request delivers at
    most ``cap`` bytes plus one row. A cap of 0 is a single row the merge
    needs whatever the budget (the head of a bucket that holds nothing).
    """

    rows: int
    cap: int


def page_ask(
    budget: ReadBudget,
    *,
    live: int,
    largest: int | None,
    held_rows: int,
    held_bytes: int,
    rows_room: int,
    bytes_room: int,
    needs_head: bool = True,
    alone: bool = False,
    window: int | None = None,
) -> Ask | None:
    """The next request of one of ``live`` buckets of a read without a limit (None: wait).

    Each bucket has a share of the budget's rows and bytes (its rows no more
    than its read-ahead ``window``) and asks again
    once it holds half a share or less: for the rest of its share of rows,
    within a byte cap of at most half its share of bytes, so that one page
    is read while the one before is handed over even where bytes bind (a
    page's bytes count until its last row is handed over). The row limit is
    what the cap allows at the ``largest`` row seen (None: none measured
    yet, so :data:`DEFAULT_ROW_BYTES`). When its share allows no row (rows
    larger than half a bucket's share of bytes), a bucket that holds nothing
    asks one row: always in an ordered read (``needs_head``: the merge needs
    the head of every bucket; cap 0), otherwise only while the budget has
    room for a row of the ``largest`` size, or when no other request runs
    and nothing is held (``alone``), so an unordered read of rows wider than
    a share holds about the budget, not a row per bucket.

    Args:
        budget: The read's budget.
        live: Buckets that may still have rows.
        largest: Bytes of the largest row the read has seen (None: none yet).
        held_rows: Rows the bucket holds (delivered and not handed over).
        held_bytes: Bytes the bucket is charged for what it holds.
        rows_room: Rows the budget still allows across the read.
        bytes_room: Bytes the budget still allows across the read.
        needs_head: The read merges in key order (it needs a row of every bucket).
        alone: No request of the read runs and it holds no row.
        window: Rows the bucket may hold and have asked for, at most, while
            its consumer has not shown it needs more (None: its share; see
            :func:`widen`).
    """
    est = DEFAULT_ROW_BYTES if largest is None else max(1, largest)
    share_rows = allowance(budget, live, est)
    if window is not None:
        share_rows = max(1, min(share_rows, window))
    share_bytes = max(1, budget.bytes // max(1, live))
    if held_rows > share_rows // 2 or held_bytes > share_bytes // 2:
        return None
    cap = min((share_bytes + 1) // 2, share_bytes - held_bytes, bytes_room)
    rows = min(share_rows - held_rows, rows_room, max(0, cap) // est)
    if rows >= 1:
        return Ask(rows, cap)
    if held_rows == 0:
        if needs_head or alone:
            return Ask(1, 0)
        if bytes_room >= est and rows_room >= 1:
            return Ask(1, est)
    return None


def ramp(ask: Ask, *, requests: int, measured: bool, read_measured: bool = True) -> Ask:
    """``ask``, limited to few rows while the bucket has measured none of its rows.

    Before a bucket has delivered a row, its rows' size is a guess. While
    the read has measured no row at all (``read_measured`` false: the read's
    first wave), a request asks :data:`PROBE_ROWS` (one row), so what the
    first wave may bring in is one row per bucket whatever the rows' size
    (the transport of a request with a larger row limit buffers rows past its
    byte cap before the source's cut reaches the server). Once the read has
    measured rows, a bucket that has not asks at most :data:`FIRST_PAGE_ROWS`
    rows, capped at the largest row the read has seen. Either way each
    request after one that delivered nothing asks twice as many as the one
    before, and once the bucket has measured a row the byte cap at the
    largest row seen sizes the request alone.
    """
    if measured:
        return ask
    first = FIRST_PAGE_ROWS if read_measured else PROBE_ROWS
    most = first << min(requests, 20)
    return ask if ask.rows <= most else Ask(most, ask.cap)


def ahead_rows(buckets: int) -> int:
    """Rows a bucket of an ordered read whose requests stream holds above the
    watermark, while the consumer waits for another bucket, before it pauses.

    :data:`AHEAD_ROWS` shared by the buckets, at least :data:`AHEAD_LEAST`.
    """
    return max(AHEAD_LEAST, AHEAD_ROWS // max(1, buckets))


def streamable(cap: int, largest: int) -> bool:
    """Whether a request with this byte cap may stream (see :data:`STREAM_MIN_ROWS`).

    ``largest`` is the widest row the bucket (or, before it has any, the
    read) has seen; 0: none measured yet, and a request whose rows may be of
    any size keeps its row limit (see :func:`ramp`). Measured with 1 MiB rows
    at the default budget: streamed requests peaked 36-59 MB over the raw
    client's RSS, paged ones within 10 MB.
    """
    return largest > 0 and cap >= STREAM_MIN_ROWS * largest


def first_window(buckets: int) -> int:
    """The read-ahead window each of a read's ``buckets`` starts with (see :func:`widen`).

    :data:`READ_AHEAD_ROWS` shared by the buckets, at least
    :data:`MIN_WINDOW_ROWS` and at most :data:`FIRST_PAGE_ROWS` each: a read of
    few buckets keeps first pages of :data:`FIRST_PAGE_ROWS` (a read of a few
    hundred rows a bucket in one request each), and a read of many buckets
    whose consumer is slow does not start with thousands of rows nobody takes.
    """
    return max(MIN_WINDOW_ROWS, min(FIRST_PAGE_ROWS, READ_AHEAD_ROWS // max(1, buckets)))


def widen(window: int, since_end: float, most: int) -> int:
    """A bucket's read-ahead window, now that it is about to ask again.

    A bucket of a read without a limit asks again once it holds half its
    window (:func:`page_ask`), which starts at :func:`first_window`. When
    that happens within :data:`READ_AHEAD_SECONDS` of its last request's end
    (``since_end``), its consumer takes rows faster than half a window a
    period, so the window grows :data:`READ_AHEAD_GROWTH` times (at most to
    ``most``); otherwise it stays.
    The window so follows what the consumer takes: a consumer that keeps up
    with the reads reaches full pages (the bucket's share of the budget)
    within a few requests, and one slower than the reads has little more
    asked for than it takes in a period, so its read-ahead does not keep
    slots, server time and client time from other reads while nobody takes
    its rows.
    """
    if since_end < READ_AHEAD_SECONDS and window < most:
        return min(most, window * READ_AHEAD_GROWTH)
    return window


def capped_ask(rows: int, *, largest: int | None, cap: int) -> Ask | None:
    """A request of up to ``rows`` rows within ``cap`` bytes (None: the cap allows no row).

    The row limit is what ``cap`` allows at the ``largest`` row seen (before
    any, at :data:`DEFAULT_ROW_BYTES`); rows larger than that stop the
    request at its cap.
    """
    est = DEFAULT_ROW_BYTES if largest is None else max(1, largest)
    fit = min(rows, max(0, cap) // est)
    return Ask(fit, cap) if fit >= 1 else None


def first_request(share: int, sources: int, slots: int | None) -> int:
    """Rows of a source's first request in an ordered read without a limit.

    An ordered merge hands over nothing before every source has answered
    once, and only ``slots`` requests run at once. With more sources than
    slots, first requests of a full ``share`` each would have the last
    sources start only after ``sources / slots - 1`` waves of full pages, so
    each first request asks ``share x slots / sources`` rows instead (at
    least one): every source has answered after about one share's worth of
    rows per slot, and later requests ask the full share.

    Args:
        share: The source's share of the budget (:func:`allowance`).
        sources: Sources of the read.
        slots: Requests that may run at once (None: no bound).
    """
    if slots is None or sources <= slots:
        return share
    return max(1, share * slots // sources)


def fetch_bound(limit: int, buckets: int) -> int:
    """Rows a limited ordered read of ``buckets`` buckets aims to fetch: ``2 limit + 2 buckets``.

    :func:`first_round` stays within it where a median of one round allows,
    and :func:`refills` shrinks a second round to what is left of it, so
    most reads fetch little more than they return.
    """
    return 2 * limit + 2 * buckets


def first_round(limit: int, buckets: int, cap: int | None = None) -> list[int]:
    """Rows to ask of each bucket in the first round of a read of ``limit`` rows.

    With keys spread by the salt, the number of the first ``limit - 1`` rows
    that lie in one bucket is binomial (``limit - 1`` draws, ``1 / buckets``).
    One round is enough when no bucket holds as many of them as it was asked
    for, so each bucket is asked the smallest size for which that holds in
    every bucket with probability :data:`ONE_ROUND_PROBABILITY`.

    Where ``buckets`` times that size exceeds :func:`fetch_bound`, the round
    asks what the bound allows instead (less an eighth of a row per bucket,
    kept for a second round), spread evenly: some buckets one row more than
    the others. It does so only while that still answers at least
    one read in two in one round (:data:`MEDIAN_ONE_ROUND`); otherwise every
    bucket asks the smallest size that does. When ``limit`` is small next to
    ``buckets`` both cannot hold, and a round costs more than a few rows.

    Args:
        limit: The read's row limit (>= 1).
        buckets: Buckets that may hold rows (>= 1).
        cap: Ask no bucket for more (the budget's allowance).

    Returns:
        The size of each bucket's first request, in bucket order.
    """
    if limit < 1 or buckets < 1:
        raise ValueError(f"need limit >= 1 and buckets >= 1, got {limit}, {buckets}")
    sizes = [limit] if buckets == 1 else _first_sizes(limit, buckets)
    return [max(1, min(size, limit) if cap is None else min(size, limit, cap)) for size in sizes]


def _first_sizes(limit: int, buckets: int) -> list[int]:
    size = _one_round_size(limit, buckets, ONE_ROUND_PROBABILITY)
    bound = fetch_bound(limit, buckets)
    if buckets * size <= bound:
        return [size] * buckets
    # What the bound allows, less an eighth of a row per bucket for a second
    # round; `larger` buckets ask one row more than the others.
    low, larger = divmod(bound - buckets // 8, buckets)
    draws, p = limit - 1, 1 / buckets
    one_round = (
        _binomial_cdf(draws, p, low - 1) ** (buckets - larger)
        * _binomial_cdf(draws, p, low) ** larger
    )
    if one_round < MEDIAN_ONE_ROUND:
        return [_one_round_size(limit, buckets, MEDIAN_ONE_ROUND)] * buckets
    # Bresenham: exactly `larger` buckets, spread over the bucket order.
    return [low + ((i + 1) * larger // buckets - i * larger // buckets) for i in range(buckets)]


def _binomial_cdf(draws: int, p: float, k: int) -> float:
    """P(Binomial(draws, p) <= k), for the small draws x p of first rounds."""
    if k < 0:
        return 0.0
    return next(itertools.islice(_binomial_cdfs(draws, p), min(k, draws), None))


def _binomial_cdfs(draws: int, p: float) -> Iterator[float]:
    """P(Binomial(draws, p) <= k) for k = 0, 1, ..., draws."""
    mass = (1 - p) ** draws
    cdf = mass
    yield cdf
    for j in range(draws):
        mass *= (draws - j) / (j + 1) * p / (1 - p)
        cdf += mass
        yield min(1.0, cdf)


def _one_round_size(limit: int, buckets: int, probability: float) -> int:
    """Rows per bucket with which evenly salted data needs one round with ``probability``."""
    per_bucket = probability ** (1 / buckets)
    return _binomial_quantile(limit - 1, 1 / buckets, per_bucket) + 1


def _binomial_quantile(draws: int, p: float, q: float) -> int:
    """The smallest k with P(Binomial(draws, p) <= k) >= q."""
    if draws <= 0:
        return 0
    mean = draws * p
    if mean > 500:  # the point masses would underflow; the normal shape is close by then
        sd = math.sqrt(mean * (1 - p))
        return max(0, math.ceil(mean + statistics.NormalDist().inv_cdf(q) * sd - 0.5))
    for k, cdf in enumerate(_binomial_cdfs(draws, p)):
        if cdf >= q:
            return k
    return draws


def refills(
    limit: int,
    emitted: int,
    held: Sequence[Any],
    lasts: Sequence[Any | None],
    more: Sequence[bool],
    cap: int | None = None,
    room: int | None = None,
) -> dict[int, int]:
    """Rows to ask of each bucket in the next round of an ordered read with a limit.

    Called when no request is in flight. A bucket that has more rows and
    whose last key read lies below the ``limit``-th smallest key known so far
    may hold some of the first ``limit`` rows; any other bucket cannot. Such a
    bucket can contribute at most the rows that still rank above its last
    key, so asking exactly that many makes this the last round whatever the
    data (unless ``cap`` is smaller).

    Args:
        limit: The read's row limit.
        emitted: Rows already handed to the caller (all below every last key).
        held: The sorted keys of rows read and not yet handed over, across buckets.
        lasts: Per bucket, the last key it returned (None: none yet).
        more: Per bucket, whether it may have more rows.
        cap: Ask no bucket for more (the budget's allowance).
        room: Rows the round should ask in all (what is left of
            :func:`fetch_bound`). When the sizes add up to more, each shrinks
            in proportion (to one row at least; the round then asks at most
            ``max(room, buckets asked)`` rows), unless one bucket alone could
            add more than twice the room: data skewed into that bucket is
            asked in full and keeps to two rounds. Evenly salted data almost
            always completes in the shrunk round, as the buckets asked rarely
            hold as many of the missing rows as they could; otherwise a third
            round follows.

    Returns:
        ``{bucket index: rows to ask}`` for the buckets to read again.
    """
    missing = limit - emitted
    if missing <= 0:
        return {}
    threshold = held[missing - 1] if len(held) >= missing else None
    sizes: dict[int, int] = {}
    for i, last in enumerate(lasts):
        if not more[i] or (threshold is not None and last is not None and last >= threshold):
            continue
        size = missing - (0 if last is None else bisect.bisect_right(held, last))
        if size > 0:
            sizes[i] = size if cap is None else max(1, min(size, cap))
    total = sum(sizes.values())
    if room is not None and total > room and max(sizes.values()) <= 2 * room:
        # One row each, then what is left of the room in proportion to the rest.
        spare, rest = max(0, room - len(sizes)), total - len(sizes)
        sizes = {i: 1 + (size - 1) * spare // rest for i, size in sizes.items()}
    return sizes


def unordered_shares(missing: int, idle: int, refill: int) -> int:
    """Rows to ask of each of ``idle`` buckets when an unordered read still misses rows.

    A bucket asks for its share of what is missing, doubled each time it is
    asked again (``refill`` counts from 1): a bucket that holds most of the
    matching rows reaches large requests quickly, while an even spread asks
    for little more than is missing.
    """
    share = math.ceil(missing / max(1, idle)) << min(max(refill - 1, 0), 20)
    return max(1, min(missing, share))
