"""Where a logical key lives: salt schemes, key ranges, time cutoffs, named key parts, layouts.

Pure: nothing here performs I/O or imports the Bigtable client's I/O modules (it
uses its value types such as ``RowRange``). Every other folder of the package may
import it; it imports only ``saltedtable._exceptions``.
"""
