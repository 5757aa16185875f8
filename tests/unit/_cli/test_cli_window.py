"""``saltedtable window``: usage errors are found before any request (exit 2, one line)."""

from __future__ import annotations

import pytest

from tests.cli_helpers import assert_one_line_error, run

WHERE = ("--project", "p", "--instance", "i")


def test_window_needs_a_step(capsys: pytest.CaptureFixture[str]) -> None:
    """`saltedtable window` alone is a usage error asking for a step."""
    code, _, err = run(capsys, "window")
    assert code == 2
    assert "STEP" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("-n", "64", "--at", "2026-12-01T00:00:00"), "no UTC offset"),
        (("-n", "64", "--at", "tomorrow"), "not an ISO-8601 time"),
    ],
)
def test_a_bad_start_is_refused_before_any_request(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    """--at without an offset, or not a time: exit 2, one line, nothing sent."""
    code, _, err = run(capsys, "window", "open", "users", *WHERE, *args)
    assert code == 2
    assert_one_line_error(err, needle)


@pytest.mark.parametrize("args", [("-n", "0"), ("-n", "64", "--lead", "0")])
def test_bad_numbers_are_usage_errors(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    """A bucket count below 1 or a lead that is not > 0: argparse refuses them."""
    code, _, _ = run(capsys, "window", "open", "users", *WHERE, *args)
    assert code == 2
