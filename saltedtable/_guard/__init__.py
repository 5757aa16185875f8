"""The layout record and the guard's judgement: record, families, migration states, decisions.

Pure: it decides what a table's rows and stored record allow; the driver that
reads and writes the record is ``saltedtable._async.guard`` (and its generated
twin). Imports ``_scheme`` and ``_read``'s planning; the tables and the CLI import it.
"""
