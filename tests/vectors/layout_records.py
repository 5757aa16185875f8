"""Layout records as an earlier commit stored them: the cases, and the script writing them.

``layout_records_before_move.json`` holds, for each layout in :data:`CASES`, the exact value
saltedtable at commit 3563838 (the last commit before the package's modules
moved into folders) stored in the reserved row for it.
``tests/unit/_guard/test_record_compat.py`` checks that the current code reads each one
as the same layout and writes the same bytes.

Regenerate it from a checkout with the git history (that commit's package is taken
from git, the cases from this file)::

    python tests/vectors/layout_records.py 3563838 > tests/vectors/layout_records_before_move.json

Run with ``--here`` instead of a commit, it prints what the current code stores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The module this file is imported as: custom functions are stored under its name.
MODULE = "tests.vectors.layout_records"

#: The release the stored file was written by, and the file.
RELEASE = "3563838"
STORED = Path(__file__).with_name("layout_records_before_move.json")

_UTC = dt.UTC
_CUT = "dt.datetime(2024, 1, 1, tzinfo=dt.UTC)"
_EPOCH_MS = "epoch_field(unit='ms', sep=b'/', index=1, digits=13)"


def tenant_part(key: bytes) -> bytes:
    """A custom key part defined at the top of a module: stored as its import path."""
    return key[:4]


def key_time(key: bytes) -> int:
    """A custom timestamp reader: stored as its import path."""
    return int.from_bytes(key[-8:], "big")


#: name -> (scheme, cutoff or None, migration state or None), as Python expressions
#: over saltedtable's public names (the same in every release that has them).
CASES: dict[str, tuple[str, str | None, str | None]] = {
    "crc32, 16 buckets": ("SaltScheme(16)", None, None),
    "crc32, 1 bucket": ("SaltScheme(1)", None, None),
    "crc32c, 100 buckets": ("SaltScheme(100, hash='crc32c')", None, None),
    "farmhash, 4096 buckets, separator and marker": (
        "SaltScheme(4096, hash='farmhash', separator=b':', marker=b'~')",
        None,
        None,
    ),
    "java, 10 buckets": ("SaltScheme(10, hash='java')", None, None),
    "phoenix, 256 buckets, binary marker": (
        "SaltScheme(256, hash='phoenix', marker=b'\\x00\\xff')",
        None,
        None,
    ),
    "fields(1)": ("SaltScheme(16, key_part=fields(1))", None, None),
    "fields(3, b'/')": ("SaltScheme(16, key_part=fields(3, b'/'))", None, None),
    "fields(k=2, sep=b'::')": ("SaltScheme(64, key_part=fields(k=2, sep=b'::'))", None, None),
    "fields with a non-ASCII separator": (
        "SaltScheme(8, key_part=fields(1, b'\\xc3\\xa9'))",
        None,
        None,
    ),
    "before_last()": ("SaltScheme(16, key_part=before_last())", None, None),
    "before_last(b'#')": ("SaltScheme(16, hash='java', key_part=before_last(b'#'))", None, None),
    "named_key_part over a function": (
        "SaltScheme(32, key_part=named_key_part('tenant/v1', tenant_part))",
        None,
        None,
    ),
    "named_key_part over fields": (
        "SaltScheme(32, key_part=named_key_part('f2', fields(2)))",
        None,
        None,
    ),
    "custom top-level function": ("SaltScheme(32, key_part=tenant_part)", None, None),
    "cutoff, epoch_field()": ("SaltScheme(16)", f"CutoffPolicy({_CUT}, epoch_field())", None),
    "cutoff, epoch_field(ms, '/', 1, 13)": (
        "SaltScheme(16, key_part=fields(1, b'/'))",
        f"CutoffPolicy({_CUT}, {_EPOCH_MS})",
        None,
    ),
    "cutoff, epoch_field(us), unreadable legacy": (
        "SaltScheme(16)",
        f"CutoffPolicy({_CUT}, epoch_field(unit='us', sep=b'|', index=0), unreadable='legacy')",
        None,
    ),
    "cutoff, reversed_epoch_field()": (
        "SaltScheme(16)",
        f"CutoffPolicy({_CUT}, reversed_epoch_field())",
        None,
    ),
    "cutoff, reversed_epoch_field(s, '-', 2, 19, base)": (
        "SaltScheme(16, hash='crc32c')",
        f"CutoffPolicy({_CUT}, reversed_epoch_field(unit='s', sep=b'-', index=2, digits=19, "
        "base=2**62), unreadable='salted')",
        None,
    ),
    "cutoff, iso8601_field()": ("SaltScheme(16)", f"CutoffPolicy({_CUT}, iso8601_field())", None),
    "cutoff, iso8601_field('/', 1, local)": (
        "SaltScheme(16)",
        f"CutoffPolicy({_CUT}, iso8601_field(sep=b'/', index=1, assume_utc=False))",
        None,
    ),
    "cutoff, big_endian_int()": ("SaltScheme(16)", f"CutoffPolicy({_CUT}, big_endian_int())", None),
    "cutoff, big_endian_int(4, 4, s)": (
        "SaltScheme(16, key_part=before_last())",
        f"CutoffPolicy({_CUT}, big_endian_int(offset=4, width=4, unit='s'))",
        None,
    ),
    "cutoff, custom reader": ("SaltScheme(16)", f"CutoffPolicy({_CUT}, key_time)", None),
    "cutoff at an offset with microseconds": (
        "SaltScheme(16)",
        "CutoffPolicy(dt.datetime(2023, 6, 30, 23, 59, 59, 123456, "
        "tzinfo=dt.timezone(dt.timedelta(hours=2))), epoch_field(unit='us'))",
        None,
    ),
    "migration, backfill": ("SaltScheme(16)", f"CutoffPolicy({_CUT}, {_EPOCH_MS})", "backfill"),
    "migration, cutover": ("SaltScheme(16)", f"CutoffPolicy({_CUT}, {_EPOCH_MS})", "cutover"),
    "migration, deleting": (
        "SaltScheme(16, key_part=fields(1, b'/'))",
        f"CutoffPolicy({_CUT}, {_EPOCH_MS})",
        "deleting",
    ),
}


def namespace() -> dict[str, Any]:
    """The names the expressions of :data:`CASES` use, from whichever saltedtable is imported."""
    import saltedtable

    names: dict[str, Any] = {name: getattr(saltedtable, name) for name in saltedtable.__all__}
    # Run as a script this file is __main__: the custom functions are taken from it
    # under its import name, which is what the record stores.
    cases = importlib.import_module(MODULE)
    names.update(dt=dt, tenant_part=cases.tenant_part, key_time=cases.key_time)
    return names


def migration_record() -> Callable[..., Any]:
    """The function ``saltedtable migrate`` stores a migration's record with (private: it moved)."""
    for module in ("saltedtable._guard.migration", "saltedtable._migration"):
        try:
            return getattr(importlib.import_module(module), "migration_record")  # noqa: B009
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError("no saltedtable module defines migration_record")


def build(case: tuple[str, str | None, str | None], names: Mapping[str, Any]) -> Any:
    """The layout record a case names, as the imported saltedtable builds it."""
    scheme_text, cutoff_text, state = case
    scheme = eval(scheme_text, dict(names))
    cutoff = None if cutoff_text is None else eval(cutoff_text, dict(names))
    if state is None:
        return names["describe_layout"](scheme, cutoff)
    return migration_record()(scheme, cutoff, state)


def stored_values() -> dict[str, Any]:
    """Every case with the exact text the imported saltedtable stores for it."""
    names = namespace()
    records = {}
    for name, case in CASES.items():
        value: bytes = build(case, names).encode()
        scheme, cutoff, state = case
        records[name] = {
            "scheme": scheme,
            "cutoff": cutoff,
            "migration": state,
            # The stored JSON is ASCII (json.dumps escapes the rest): kept as text.
            "stored": value.decode("ascii"),
        }
    return records


def _release_package(commit: str, into: Path) -> None:
    """The release's ``saltedtable`` package from git, unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "saltedtable"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(into, filter="data")
        else:  # pragma: no cover - our own git archive, nothing untrusted
            tar.extractall(into)


def run_with_release(commit: str, args: list[str]) -> str:
    """This file's ``args`` run by the saltedtable of ``commit``; what it printed.

    The release's package comes first on the path; the cases (``tests``) come
    from this checkout.
    """
    with tempfile.TemporaryDirectory() as tmp:
        _release_package(commit, Path(tmp))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, str(ROOT)])}
        done = subprocess.run(
            [sys.executable, "-m", MODULE, *args],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
    if done.returncode:
        raise SystemExit(f"{commit} failed:\n{done.stderr}")
    return done.stdout


def _describe(commit: str) -> str:
    """``saltedtable X.Y.Z, commit <sha>``: the release a commit is, from git."""
    sha = subprocess.run(
        ["git", "rev-parse", f"{commit}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    project = subprocess.run(
        ["git", "show", f"{sha}:pyproject.toml"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    version = next(
        (
            line.split("=", 1)[1].strip().strip('"')
            for line in project.splitlines()
            if line.startswith("version")
        ),
        "?",
    )
    return f"saltedtable {version}, commit {sha}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("commit", nargs="?", help="the release's commit (default: --here)")
    parser.add_argument("--here", action="store_true", help="use the saltedtable imported here")
    parser.add_argument(
        "--decode",
        metavar="FILE",
        help="print what each stored value in FILE decodes to, and how it differs from "
        "the record this saltedtable builds for the same case",
    )
    parser.add_argument("--written-by", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.commit and not args.here:
        inner = ["--here", "--written-by", _describe(args.commit)]
        if args.decode:
            inner += ["--decode", str(Path(args.decode).resolve())]
        sys.stdout.write(run_with_release(args.commit, inner))
        return 0
    import saltedtable

    if args.decode:
        stored = json.loads(Path(args.decode).read_text(encoding="utf-8"))["records"]
        names = namespace()
        out: dict[str, Any] = {}
        for name, entry in stored.items():
            decoded = saltedtable.LayoutRecord.decode(entry["stored"].encode())
            out[name] = {
                "as_dict": decoded.as_dict(),
                # What this release's guard compares: equal records open.
                "differences": decoded.differences(build(CASES[name], names)),
            }
    else:
        out = {
            "written_by": args.written_by or f"the saltedtable at {saltedtable.__file__}",
            "how": "describe_layout(scheme, cutoff).encode(), or migration_record(...) "
            "for a migration state; regenerate with tests/vectors/layout_records.py",
            "records": stored_values(),
        }
    json.dump(out, sys.stdout, indent=1, sort_keys=True, ensure_ascii=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
