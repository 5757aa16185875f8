"""The `saltedtable migrate` hook and `saltedtable.beam` without Apache Beam.

Help and usage errors need no Beam; running a step names the package to install.
Apache Beam is hidden here (`sys.modules["apache_beam"] = None`), so these tests
hold in .venv-beam as well as in the core .venv, which has no Beam.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from saltedtable._cli.main import main
from tests.cli_helpers import assert_one_line_error

STEPS = ("backfill", "verify", "cutover", "delete-legacy", "resalt")


@pytest.fixture
def no_beam(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import apache_beam` fail and forget every saltedtable.beam module."""
    monkeypatch.setitem(sys.modules, "apache_beam", None)
    for name in [m for m in sys.modules if m.startswith("saltedtable.beam")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.usefixtures("no_beam")
def test_migrate_help_works_without_beam(capsys: pytest.CaptureFixture[str]) -> None:
    """``migrate --help`` exits 0 and lists every step, and imports nothing of Beam."""
    assert main(["migrate", "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: saltedtable migrate")
    assert all(step in out for step in STEPS)
    assert "--extra_packages dist/saltedtable-" in out
    assert err == ""
    assert not any(m.startswith("saltedtable.beam") for m in sys.modules)


@pytest.mark.usefixtures("no_beam")
@pytest.mark.parametrize("step", STEPS)
def test_step_help_works_without_beam(step: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``migrate STEP --help`` exits 0 with the step's own options."""
    assert main(["migrate", step, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: saltedtable migrate {step}")
    assert "--bigtable-project" in out
    assert ("--prune" in out) is (step == "backfill")
    assert ("--to-buckets" in out) is (step in ("verify", "resalt"))
    assert err == ""


@pytest.mark.usefixtures("no_beam")
@pytest.mark.parametrize("step", ["backfill-window", "verify-window", "retire-window"])
def test_window_step_help_works_without_beam(step: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The resalt window's steps are ``saltedtable migrate`` steps, parsed without Beam."""
    assert main(["migrate", step, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: saltedtable migrate {step}")
    assert "--bigtable-project" in out
    assert ("--only-buckets" in out) is (step != "retire-window")
    assert ("--grace" in out) is (step == "retire-window")
    assert err == ""
    assert not any(m.startswith("saltedtable.beam") for m in sys.modules)
    main(["migrate", "--help"])
    assert step in capsys.readouterr().out


@pytest.mark.usefixtures("no_beam")
def test_a_window_step_without_beam_names_the_package(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A well-formed window step exits 2 saying that it needs Beam."""
    argv = ["migrate", "verify-window", "-n", "64", "--bigtable-project", "p"]
    argv += ["--instance", "i", "--table", "t"]
    assert main(argv) == 2
    assert_one_line_error(
        capsys.readouterr().err, "the verify-window step runs on Apache Beam", "pip install"
    )


@pytest.mark.usefixtures("no_beam")
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["migrate"], "STEP"),
        (["migrate", "nosuch"], "nosuch"),
        (["migrate", "backfill", "-n", "x"], "'x' is not an integer"),
        (["migrate", "backfill", "-n", "4"], "--bigtable-project"),
    ],
)
def test_usage_errors_need_no_beam(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad migrate command line is refused (exit 2) before Beam is looked for."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err, needle, "--help")
    assert "Apache Beam" not in err


@pytest.mark.usefixtures("no_beam")
def test_running_a_step_without_beam_names_the_package(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A well-formed step exits 2 saying that it needs Beam and how to install it."""
    argv = ["migrate", "verify", "-n", "4", "--cutoff", "2024-01-01T00:00:00Z"]
    argv += ["--bigtable-project", "p", "--instance", "i", "--table", "t", "--runner", "X"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line_error(
        err, "the verify step runs on Apache Beam", "pip install 'apache-beam>=2.60'"
    )


@pytest.mark.usefixtures("no_beam")
def test_importing_saltedtable_beam_without_beam_names_the_package() -> None:
    """``import saltedtable.beam`` without Apache Beam says which package to install."""
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'apache-beam>=2\.60'") as caught:
        importlib.import_module("saltedtable.beam")
    assert caught.value.name == "apache_beam"


def test_delete_legacy_waits_longer_than_the_default_record_refresh() -> None:
    """A reader with the default record_refresh has read the record again before a row goes."""
    from saltedtable._cli.migrate import parse
    from saltedtable._guard.record import DEFAULT_LEGACY_GRACE, DEFAULT_RECORD_REFRESH

    parsed = parse(
        ["delete-legacy", "--bigtable-project", "p", "--instance", "i", "--table", "t", "-n", "4"]
    )
    assert not isinstance(parsed, int)
    args, _ = parsed
    assert args.grace == DEFAULT_LEGACY_GRACE
    assert args.grace > DEFAULT_RECORD_REFRESH
