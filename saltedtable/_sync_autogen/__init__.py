"""Generated from ``saltedtable._async`` by ``.ci/unasync.py``: do not edit.

Each file is the sync twin of the same-named file in ``_async/``. Edit the async
source, then run ``make generate``. Whoever uses the sync tables (the package root,
``_create``, the commands, Beam) imports them from here.
"""
