"""``python -m saltedtable.beam STEP ...``: a Beam step from the command line.

Takes what ``saltedtable migrate`` takes (the migration steps), and the resalt
window's steps (``backfill-window``, ``verify-window``, ``retire-window``).
"""

from __future__ import annotations

import sys

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
