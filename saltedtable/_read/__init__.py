"""One read against Bigtable: what it asks (plan, query, split), how it runs, what it did.

Planning is pure; ``call`` holds one read's state, which both read calls share;
the sources and the cancellation helpers drive the client's streams, once per
runtime (``_asyncio``/``_threads``, around what ``sources`` shares). Imported by
the guard, the tables, the write helpers, the commands, OpenTelemetry export and
Beam; it imports ``_scheme`` and ``_engine``, never a table.
"""
