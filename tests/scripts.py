"""Import a project script that is not in a package (examples/, emulator/, .ci/) by its
path, or run an example on the emulator."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(name: str, path: Path) -> ModuleType:
    """The script at ``path`` as module ``name``, loaded once per process.

    It is registered in :data:`sys.modules` before it runs: dataclasses look
    their module up by name while the class is built.
    """
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def run_example(script: str, address: str, table: str) -> subprocess.CompletedProcess[str]:
    """Run ``examples/<script>`` against the emulator at ``address`` on table ``table``
    (``SALTEDTABLE_TABLE``), then delete the table; its output, whatever its exit status."""
    from saltedtable.testing import EMULATOR_HOST_ENV, delete_table

    env = {**os.environ, EMULATOR_HOST_ENV: address, "SALTEDTABLE_TABLE": table}
    try:
        return subprocess.run(
            [sys.executable, f"examples/{script}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        delete_table(address, table, missing_ok=True)
