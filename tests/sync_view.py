"""An async view of a sync salted table, so the async test suites also check the sync one.

Every call runs the sync method in a worker thread (``anyio.to_thread``); a
stream is pulled one row per thread hop. Slow, but it runs the very same
differential scenarios against ``SaltedTable`` as against ``SaltedTableAsync``.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio.to_thread

from saltedtable import SaltedTable

__all__ = ["AsyncView"]

_STREAMS = frozenset({"read_rows_stream", "read_prefix"})


async def _pull(make: Callable[[], Iterator[Any]]) -> AsyncIterator[Any]:
    rows = await anyio.to_thread.run_sync(make)
    done = object()
    try:
        while (row := await anyio.to_thread.run_sync(next, rows, done)) is not done:
            yield row
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            await anyio.to_thread.run_sync(close)


class AsyncView:
    """``SaltedTableAsync``'s surface over a :class:`SaltedTable` (sync), for tests."""

    def __init__(self, table: SaltedTable) -> None:
        self.sync = table

    def read_prefix(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The sync ``read_prefix`` as an async iterator (like the async table's)."""
        return _pull(functools.partial(self.sync.read_prefix, *args, **kwargs))

    async def read_rows_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The sync stream, checked at call time, as an async iterator."""
        rows = await anyio.to_thread.run_sync(
            functools.partial(self.sync.read_rows_stream, *args, **kwargs)
        )
        return _pull(lambda: rows)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sync, name)
        if not callable(attr) or name in _STREAMS:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await anyio.to_thread.run_sync(functools.partial(attr, *args, **kwargs))

        return call
