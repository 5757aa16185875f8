"""One read against Bigtable: what it asks (plan, query, split), how it runs, what it did.

Planning is pure; the sources and the cancellation helpers drive the client's
streams, once per runtime (``_asyncio``/``_threads``). Imported by the guard and
the tables; it imports ``_scheme`` and ``_engine``, never a table.
"""
