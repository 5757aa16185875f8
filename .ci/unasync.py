"""Generate saltedtable's sync code from its async sources (unasync style).

Every module of ``saltedtable/_async/`` (the table facade, the read call, chunked
reads, the guard driver and the batcher) is written once, async; the same-named
module of ``saltedtable/_sync_autogen/`` is this script's output: ordered
substitutions (``async def`` -> ``def``, ``await x`` -> ``x``, ``async with``/``async
for``, the async dunders, ``aclose`` -> ``close``, the async names -> the sync ones,
a ``x_asyncio`` module -> ``x_threads``) and then ruff (unused imports, import order,
format), so a generated file passes ``make lint`` as it is. What differs by more
than that lives in the hand-written ``_asyncio``/``_threads`` drivers.

A substitution no source uses any more is an error, so the table below cannot rot.

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

SOURCE_DIR = "saltedtable/_async"
TARGET_DIR = "saltedtable/_sync_autogen"


def _files() -> tuple[tuple[str, str], ...]:
    """(async source, generated sync file) pairs, folder to folder, relative to the root."""
    return tuple(
        (f"{SOURCE_DIR}/{path.name}", f"{TARGET_DIR}/{path.name}")
        for path in sorted((ROOT / SOURCE_DIR).glob("*.py"))
        if path.name != "__init__.py"
    )


#: (async source, generated sync file), relative to the repository root.
FILES: tuple[tuple[str, str], ...] = _files()

#: Whole words renamed, async name -> sync name (code, docstrings and comments alike).
NAMES: dict[str, str] = {
    # Python's
    "AsyncGenerator": "Generator",
    "AsyncIterable": "Iterable",
    "AsyncIterator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
    "aclose": "close",
    "aclosing": "closing",
    # the Bigtable client's
    "BigtableDataClientAsync": "BigtableDataClient",
    "MutationsBatcherAsync": "MutationsBatcher",
    "TableAsync": "Table",
    "_DataApiTargetAsync": "_DataApiTarget",
    "_ReadRowsOperationAsync": "_ReadRowsOperation",
    "_MutateRowsOperationAsync": "_MutateRowsOperation",
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
#: A runtime driver named after a dot that does not follow a name (``self.x_asyncio`` is
#: no module): ``from .._engine.runtime_asyncio import`` -> ``.._engine.runtime_threads``.
_DRIVER = re.compile(r"(?<![\w)\]])(\.(?:\w+\.)*\w+)_asyncio\b")

#: The NAMES entries and PATTERNS (by index) some source used, for ``unused()``.
_USED: set[str] = set()


def _name(match: re.Match[str]) -> str:
    word = match.group(0)
    if word in NAMES:
        _USED.add(word)
        return NAMES[word]
    # python-bigtable's rule: the async class is the sync one's name + "Async".
    if word.endswith("Async") and len(word) > len("Async") and word[0].isupper():
        return word[: -len("Async")]
    return word


def unasync(source: str) -> str:
    """The sync text of an async module's text (before ruff tidies it)."""
    for index, (pattern, replacement) in enumerate(PATTERNS):
        source, count = pattern.subn(replacement, source)
        if count:
            _USED.add(f"PATTERNS[{index}]")
    source = _WORD.sub(_name, source)
    return _DRIVER.sub(r"\1_threads", source)


def unused() -> list[str]:
    """The substitutions no call of :func:`unasync` has used so far."""
    every = [*NAMES, *(f"PATTERNS[{index}]" for index in range(len(PATTERNS)))]
    return [name for name in every if name not in _USED]


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
    _USED.clear()
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
    never = unused()
    if stale:
        print(f"stale: {', '.join(stale)}; run `make generate` (python .ci/unasync.py)")
    if never:
        print(f"these substitutions were never used (remove them): {', '.join(never)}")
    if stale or never:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
