"""`saltedtable resalt` usage errors, refused before any request."""

from __future__ import annotations

import pytest

from tests.cli_helpers import assert_one_line_error, run

WHERE = ("--project", "p", "--instance", "i")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("-n", "32"), "-n/--buckets"),
        (("--at", "2026-12-01T00:00:00+00:00"), "--at"),
        (("--time", "epoch:ms:1", "--min-lead", "5"), "--time, --min-lead"),
        (("--skip-row-check",), "--skip-row-check"),
    ],
)
def test_repair_refuses_the_append_options(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    """--repair appends nothing: an append option given with it is a usage error naming it."""
    code, out, err = run(capsys, "resalt", "events", *WHERE, "--repair", *args)
    assert code == 2
    assert out == ""
    assert_one_line_error(err, needle, "--repair")


def test_an_append_needs_buckets_and_a_start(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --repair, -n and --at are required (exit 2, one line)."""
    code, _, err = run(capsys, "resalt", "events", *WHERE, "-n", "32")
    assert code == 2
    assert_one_line_error(err, "-n/--buckets and --at")
