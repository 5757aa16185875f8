"""Helpers for tests that run the command line through ``main([...])``."""

from __future__ import annotations

import io
import sys

import pytest

from saltedtable._cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run main(argv); return (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *needles: str) -> None:
    """stderr is exactly one 'saltedtable ...: error: ...' line, mentioning every needle."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("saltedtable")
    assert ": error: " in lines[0]
    for needle in needles:
        assert needle in lines[0]


def set_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Replace stdin with ``data``."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
