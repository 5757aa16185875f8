"""The parity suite's scenarios (data) and drivers (how one flavour of table runs them).

``tests/emulator/test_parity.py`` runs every scenario of :mod:`.scenarios` against a plain
Bigtable table and a salted one, through each driver of :mod:`.drivers`, and compares what
the two did: results, exception types and when the exception came.
"""
