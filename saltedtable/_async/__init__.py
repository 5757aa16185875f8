"""Async sources of the generated code: table protocol, table, read call, chunks, guard, batcher.

Edit these: ``.ci/unasync.py`` writes ``saltedtable._sync_autogen`` from them, file
for file (``make generate``; ``make lint`` fails when a twin is stale). What differs
between runtimes by more than ``async``/``await`` lives in the ``_asyncio``/``_threads``
drivers of ``_engine`` and ``_read``. The package root and the pytest plugin
import the async tables from here; the rest of the package imports them from the
root.
"""
