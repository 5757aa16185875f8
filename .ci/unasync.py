"""Generate the sync twins of saltedtable's async modules (unasync style).

The table facade, the read call, the guard driver and the batcher are written
once, async; their sync twins are this script's output: ordered substitutions
(``async def`` -> ``def``, ``await x`` -> ``x``, ``async with``/``async for``,
the async dunders, ``aclose`` -> ``close``, the async names -> the sync ones)
and then ruff (unused imports, import order, format), so a generated file
passes ``make lint`` as it is. What differs by more than that lives behind
``saltedtable/_concurrency.py`` and its hand-written twin
``saltedtable/_concurrency_sync.py``.

Usage::

    python .ci/unasync.py           # write the sync files
    python .ci/unasync.py --check   # exit 1 when one is stale (make lint)
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (async source, generated sync file), relative to the repository root.
FILES: tuple[tuple[str, str], ...] = (
    ("saltedtable/_table.py", "saltedtable/_sync.py"),
    ("saltedtable/_read_call.py", "saltedtable/_read_call_sync.py"),
    ("saltedtable/_table_guard.py", "saltedtable/_table_guard_sync.py"),
    ("saltedtable/_batcher.py", "saltedtable/_batcher_sync.py"),
    ("saltedtable/_chunks.py", "saltedtable/_chunks_sync.py"),
)

#: Whole words renamed, async name -> sync name (code, docstrings and comments alike).
NAMES: dict[str, str] = {
    # Python's
    "AsyncGenerator": "Generator",
    "AsyncIterable": "Iterable",
    "AsyncIterator": "Iterator",
    "StopAsyncIteration": "StopIteration",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "aclose": "close",
    "aclosing": "closing",
    "asynccontextmanager": "contextmanager",
    # the Bigtable client's
    "BigtableDataClientAsync": "BigtableDataClient",
    "MutationsBatcherAsync": "MutationsBatcher",
    "TableAsync": "Table",
    "_DataApiTargetAsync": "_DataApiTarget",
    "_ReadRowsOperationAsync": "_ReadRowsOperation",
    "method_async": "method",
    # saltedtable's, where the pair does not follow the `...Async` rule below. The public
    # sync names take the plain names in 0.3.0, when the deprecated async aliases
    # `TableLike` and `SaltedMutationsBatcher` are gone (docs/versioning.md).
    "TableLikeAsync": "SyncTableLike",
    "BatcherLike": "SyncBatcherLike",
    "ReadRowsStream": "SyncReadRowsStream",
    "SaltedMutationsBatcherAsync": "SaltedMutationsBatcherSync",
    "TableGuard": "SyncTableGuard",
    "ReadCall": "SyncReadCall",
    "BucketSource": "SyncBucketSource",
    "OneRequestSource": "SyncOneRequestSource",
    "Merge": "ThreadMerge",
    "AsyncSlots": "Slots",
    "stop_sources": "stop_sync_sources",
}

#: Module names, where a module is named (``from ._x import``, ``:mod:`._x```).
MODULES: dict[str, str] = {
    "_table": "_sync",
    "_concurrency": "_concurrency_sync",
    "_read_call": "_read_call_sync",
    "_table_guard": "_table_guard_sync",
    "_batcher": "_batcher_sync",
    "_chunks": "_chunks_sync",
}

#: Applied in order, before the names.
PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bAsyncGenerator\[([^\[\]]+), None\]"), r"Generator[\1, None, None]"),
    (re.compile(r"\bAwaitable\[([^\[\]]+)\]"), r"\1"),
    (re.compile(r"\basync (def|with|for)\b"), r"\1"),
    (re.compile(r"\bawait "), ""),
    # The client's modules: its async code, and the sync code generated from it.
    (re.compile(r"\bbigtable\.data\._async\."), "bigtable.data._sync_autogen."),
)

_WORD = re.compile(r"\b\w+\b")
#: A module named after a dot that does not follow a name (``self._table`` is no module).
_MODULE = re.compile(r"(?<![\w)\]])\.(" + "|".join(MODULES) + r")\b")


def _name(match: re.Match[str]) -> str:
    word = match.group(0)
    if word in NAMES:
        return NAMES[word]
    # python-bigtable's rule: the async class is the sync one's name + "Async".
    if word.endswith("Async") and len(word) > len("Async") and word[0].isupper():
        return word[: -len("Async")]
    return word


def unasync(source: str) -> str:
    """The sync text of an async module's text (before ruff tidies it)."""
    for pattern, replacement in PATTERNS:
        source = pattern.sub(replacement, source)
    source = _WORD.sub(_name, source)
    return _MODULE.sub(lambda m: "." + MODULES[m.group(1)], source)


def header(source_path: str) -> str:
    """The first line of a generated file."""
    return (
        f"# Generated from {source_path} by .ci/unasync.py: do not edit.\n"
        "# Edit the async source, then run `make generate`.\n"
    )


def _ruff(args: list[str], text: str, path: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", path, "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"ruff {' '.join(args)} failed on the text for {path}:\n{done.stderr}")
    return done.stdout


def generate(source_path: str, target_path: str) -> str:
    """The text ``target_path`` should hold."""
    text = header(source_path) + unasync((ROOT / source_path).read_text(encoding="utf-8"))
    # The renames leave imports unused (Awaitable) or out of order: ruff tidies them,
    # and formats the lines `await` no longer makes long.
    tidy = ["check", "--fix", "--select", "F401,I001", "--exit-zero", "-q"]
    text = _ruff(tidy, text, target_path)
    return _ruff(["format", "-q"], text, target_path)


def main(argv: list[str] | None = None) -> int:
    """Write the sync twins, or (``--check``) say which are stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for source_path, target_path in FILES:
        wanted = generate(source_path, target_path)
        target = ROOT / target_path
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current == wanted:
            continue
        if args.check:
            stale.append(target_path)
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                wanted.splitlines(keepends=True),
                target_path,
                f"{target_path} (generated from {source_path})",
            )
            sys.stdout.writelines(list(diff)[:60])
        else:
            target.write_text(wanted, encoding="utf-8")
            print(f"wrote {target_path}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `make generate` (python .ci/unasync.py)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
