"""The README's quickstarts, async and sync, run as the docs say (``make demo``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from saltedtable.testing import EMULATOR_HOST_ENV

REPO = Path(__file__).resolve().parents[2]


def test_both_quickstarts_run_on_a_fresh_emulator() -> None:
    """examples/quickstart.py then examples/quickstart_sync.py under `saltedtable emulator`."""
    env = {k: v for k, v in os.environ.items() if k != EMULATOR_HOST_ENV}
    saltedtable = str(Path(sys.executable).with_name("saltedtable"))
    script = (
        f"{sys.executable} examples/quickstart.py && {sys.executable} examples/quickstart_sync.py"
    )
    done = subprocess.run(
        [saltedtable, "emulator", "--table", "quickstart:cf", "--", "sh", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "point read: b'user2#1700000003' -> b'click 2/3'" in out
    assert "(1 request over every bucket: answered, up to 22 rows)" in out
    assert "sync point read: b'user4#1700000002' -> b'view'" in out
    scan = out.split("sync scan, limit 4:")[1].split()
    assert scan == [repr(b"user1#%d" % (1700000000 + t)) for t in range(4)]
