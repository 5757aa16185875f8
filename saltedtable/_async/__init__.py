"""The async sources of the generated code: the table, its read call, chunked reads, guard, batcher.

Edit these: ``.ci/unasync.py`` writes ``saltedtable._sync_autogen`` from them, file
for file (``make generate``; ``make lint`` fails when a twin is stale). What differs
between runtimes by more than ``async``/``await`` lives in the ``_asyncio``/``_threads``
drivers of ``_engine`` and ``_read``.
"""
