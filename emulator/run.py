"""Run the official Bigtable emulator: ``python emulator/run.py --help``.

A thin wrapper around ``python -m saltedtable.testing`` for checkouts where the
package is not installed: it puts the repository root on ``sys.path`` first.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saltedtable.testing import main

if __name__ == "__main__":
    raise SystemExit(main())
