"""A stall right after fast rows: the rows that came before it are not held (issue 23 review).

While rows flow, the consumer waits for batches without a fine timer (a pending
timer costs the event loop work on every turn). A source that sends rows fast
and then stalls (a sparse filter on Cloud Bigtable: the server scans without
returning rows) must not keep the few rows it sent last from the caller until
the stall ends: a coarse timer (``STALL_SECONDS``) bounds how long they wait.
The bound asserted is generous (seconds): the test checks that the rows come
during the stall at all, never how fast.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest

from saltedtable._engine.merge import WAKE_BATCH, Feed, Sent
from saltedtable._engine.merge_asyncio import STALL_SECONDS, Merge


class FastThenStall:
    """Sends ``fast`` items one per loop turn, then waits for ``stall`` before its last one."""

    def __init__(self, fast: int, stall: asyncio.Event) -> None:
        self.fast = fast
        self.pos = 0
        self.stall = stall
        self.stalled = asyncio.Event()

    async def __call__(self, size: int, feed: Feed[int]) -> Sent:
        end = self.pos + size
        while self.pos < min(end, self.fast + 1):
            if self.pos == self.fast:
                self.stalled.set()
                await self.stall.wait()
            else:
                await asyncio.sleep(0)
            feed.items.append(self.pos)
            feed.keys.append(self.pos)
            self.pos += 1
            if len(feed.keys) >= feed.wake_at:
                feed.wake()
        return Sent(self.pos - (end - size), self.pos <= self.fast)


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
@pytest.mark.parametrize("extra", [1, 3, WAKE_BATCH - 1])
def test_rows_sent_before_a_stall_reach_the_consumer_during_the_stall(
    ordered: bool, extra: int
) -> None:
    # Enough fast rows that the consumer's waits run untimed, then ``extra``
    # rows short of a batch, then the stall.
    fast = 20 * WAKE_BATCH + extra

    async def main() -> list[int]:
        stall = asyncio.Event()
        source = FastThenStall(fast, stall)
        got: list[int] = []
        reached = asyncio.Event()

        async def consume() -> None:
            async with Merge([source], ordered=ordered) as merge:
                async for batch in merge:
                    got.extend(batch)
                    if len(got) >= fast:
                        reached.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await source.stalled.wait()
            # Generous: the timer is STALL_SECONDS; a held row would wait forever.
            with anyio.move_on_after(max(2.0, 40 * STALL_SECONDS)):
                await reached.wait()
            during_stall = len(got)
            stall.set()
        assert during_stall == fast, (during_stall, fast)
        return got

    assert asyncio.run(main()) == list(range(fast + 1))
