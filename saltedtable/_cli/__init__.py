"""The ``saltedtable`` command: one module a command group, its argument parsers and output.

``main.main`` is the console script. Nothing in the library imports this folder,
except ``saltedtable.beam``'s launcher, which reuses the migration arguments.
"""
