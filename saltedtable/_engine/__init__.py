"""The read engine: the ordered merge of many bucket streams, the fair slots, the byte budget.

It knows sources, rows as opaque values with a key and a size, and deadlines; it
imports nothing from google, grpc or the rest of saltedtable (a test holds this).
A shared core lives in ``x.py``; the hand-written drivers for each runtime in
``x_asyncio.py`` and ``x_threads.py``. Imported by ``_read``, the tables and Beam's
reads (the read budget).
"""
