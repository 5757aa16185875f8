"""The `saltedtable migrate` hook and `saltedtable.beam`: without Beam, an install hint."""

from __future__ import annotations

import importlib
import sys

import pytest

from saltedtable._cli import main


def test_migrate_without_beam_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without Apache Beam, migrate exits 2 and says which extra to install."""
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # makes `import apache_beam` fail
    for name in [m for m in sys.modules if m.startswith("saltedtable.beam")]:
        monkeypatch.delitem(sys.modules, name)
    assert main(["migrate", "backfill", "--help"]) == 2
    assert "pip install 'apache-beam>=2.60'" in capsys.readouterr().err


def test_importing_saltedtable_beam_without_beam_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``import saltedtable.beam`` without Apache Beam says which extra to install."""
    monkeypatch.setitem(sys.modules, "apache_beam", None)
    for name in [m for m in sys.modules if m.startswith("saltedtable.beam")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'apache-beam>=2\.60'") as caught:
        importlib.import_module("saltedtable.beam")
    assert caught.value.name == "apache_beam"
