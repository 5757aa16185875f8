"""The descending merge (reversed scans): the ascending engine over order-reversed keys."""

from __future__ import annotations

from collections.abc import Sequence

import anyio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable._engine.budget import ReadBudget
from saltedtable._engine.merge import Feed, Sent, descending_key
from saltedtable._engine.merge_asyncio import Merge
from tests.unit._engine.test_merge import run

PROPERTY = settings(max_examples=80, deadline=None)
KEYS = st.binary(max_size=4)


@given(KEYS, KEYS)
def test_descending_keys_order_bytes_backwards(a: bytes, b: bytes) -> None:
    """Prefixes, 0x00 and 0xff bytes included: a < b exactly when their keys order b first."""
    da, db = descending_key(a), descending_key(b)
    assert (a < b) == (da > db)
    assert (a == b) == (da == db)


def test_descending_keys_of_the_awkward_cases() -> None:
    keys = [b"", b"\x00", b"\x00\x00", b"\x00\xff", b"a", b"a\x00", b"a\xff", b"\xff", b"\xff\xff"]
    assert sorted(keys, key=descending_key) == sorted(keys, reverse=True)


class DescendingSource:
    """A bucket read backwards: its items (the keys themselves) largest first."""

    def __init__(self, items: Sequence[bytes], burst: int) -> None:
        self.items = sorted(items, reverse=True)
        self.pos = 0
        self.burst = burst

    async def __call__(self, size: int, feed: Feed[bytes]) -> Sent:
        pushed = 0
        for item in self.items[self.pos : self.pos + size]:
            if pushed % self.burst == 0:
                await anyio.lowlevel.checkpoint()
            feed.items.append(item)  # (with a key, feed.keys is feed.items)
            self.pos += 1
            pushed += 1
            if len(feed.keys) >= feed.wake_at:
                feed.wake()
        return Sent(pushed, self.pos < len(self.items))


@st.composite
def byte_partitions(draw: st.DrawFn) -> list[list[bytes]]:
    items = draw(st.lists(st.binary(min_size=1, max_size=3), unique=True, max_size=120))
    n = draw(st.integers(1, 8))
    parts: list[list[bytes]] = [[] for _ in range(n)]
    for item in items:
        parts[draw(st.integers(0, n - 1))].append(item)
    return parts


def _identity(item: bytes) -> bytes:
    return item


@PROPERTY
@given(
    parts=byte_partitions(),
    ordered=st.booleans(),
    limit=st.one_of(st.none(), st.integers(1, 150)),
    budget_rows=st.integers(1, 40),
    slots=st.one_of(st.none(), st.integers(1, 4)),
    burst=st.integers(1, 10),
)
def test_a_descending_merge_hands_over_the_largest_keys_first(
    parts: list[list[bytes]],
    ordered: bool,
    limit: int | None,
    budget_rows: int,
    slots: int | None,
    burst: int,
) -> None:
    """Ordered: the union sorted descending (its first ``limit``); unordered: each source's
    items in its own (descending) order, none twice."""
    sources = [DescendingSource(p, burst) for p in parts]

    async def main() -> list[bytes]:
        merge = Merge(
            sources,
            ordered=ordered,
            limit=limit,
            budget=ReadBudget(rows=budget_rows),
            slots=slots,
            key=_identity,
            descending=True,
        )
        out: list[bytes] = []
        async with merge:
            async for batch in merge:
                out += batch
        assert merge.peak_outstanding <= budget_rows + len(sources)
        return out

    got = run(main)
    expected = sorted((x for p in parts for x in p), reverse=True)
    if ordered:
        assert got == expected[:limit]
    else:
        assert len(got) == len(set(got)) == min(len(expected), limit or len(expected))
        for part in parts:
            mine = set(part)
            assert [x for x in got if x in mine] == sorted(mine & set(got), reverse=True)


def test_a_forward_merge_keeps_the_key_it_was_given() -> None:
    """The forward path is not wrapped: its key function is the caller's own."""
    merge: Merge[bytes] = Merge([DescendingSource([], 1)], key=_identity)
    assert merge._key is _identity
    assert not merge.descending
    back: Merge[bytes] = Merge([DescendingSource([], 1)], key=_identity, descending=True)
    assert back._key is not _identity
    assert back.descending
