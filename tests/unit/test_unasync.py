"""The generated sync twins: current with their async sources, and the substitutions."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    return load_script("saltedtable_ci_unasync", ROOT / ".ci" / "unasync.py")


unasync = _load()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("async def read(self) -> None:", "def read(self) -> None:"),
        ("rows = await call.collect()", "rows = call.collect()"),
        ("async with slot(limiter):", "with slot(limiter):"),
        ("keys = [row.row_key async for row in stream]", "keys = [row.row_key for row in stream]"),
        ("await stream.aclose()", "stream.close()"),
        ("async def __aenter__(self) -> X:", "def __enter__(self) -> X:"),
        ("await self.__aexit__(None)", "self.__exit__(None)"),
        ("with aclosing(rows):", "with closing(rows):"),
        ("-> AsyncGenerator[Row, None]:", "-> Generator[Row, None, None]:"),
        ("guard: Callable[[GuardTime], Awaitable[bool]]", "guard: Callable[[GuardTime], bool]"),
        ("x: AsyncIterable[Row]", "x: Iterable[Row]"),
        ("class SaltedTableAsync(TableAttributes):", "class SaltedTable(TableAttributes):"),
        ("client: BigtableDataClientAsync", "client: BigtableDataClient"),
        ("as with ``TableAsync``.", "as with ``Table``."),
        ("class ExampleAsync:", "class Example:"),
        ("SaltedMutationsBatcherAsync", "SaltedMutationsBatcherSync"),
        ("table: TableLikeAsync", "table: SyncTableLike"),
        ("merge: Merge[Row]", "merge: ThreadMerge[Row]"),
        ("from .read_call import ReadCall", "from .read_call import SyncReadCall"),
        (
            "from .._engine.runtime_asyncio import slot",
            "from .._engine.runtime_threads import slot",
        ),
        ("see :mod:`.._read.cancel_asyncio`", "see :mod:`.._read.cancel_threads`"),
    ],
)
def test_a_substitution(source: str, expected: str) -> None:
    """Each async form becomes its sync form."""
    assert unasync.unasync(source) == expected


@pytest.mark.parametrize(
    "text",
    [
        "return self._read_call(query)",  # a method named like a module
        "self.loop_asyncio",  # an attribute named like a driver
        "awaited = 1",  # `await` inside a word
        "Asyncio",  # not a `...Async` name
        "MergeCore[Row]",  # a longer name that starts with a renamed one
        "self.limiter.total",
    ],
)
def test_what_is_left_alone(text: str) -> None:
    """Names that only look like async ones are kept."""
    assert unasync.unasync(text) == text


def test_a_generated_file_says_so_first() -> None:
    """Every generated file starts with the line naming its source and the generator."""
    for source, target in unasync.FILES:
        first = (ROOT / target).read_text(encoding="utf-8").splitlines()[0]
        assert first == unasync.header(source).splitlines()[0]


def test_every_generated_file_has_its_source() -> None:
    """The generated folder holds the twins of the source folder, file for file, and no more."""
    generated = {p.name for p in (ROOT / unasync.TARGET_DIR).glob("*.py")} - {"__init__.py"}
    assert generated == {Path(target).name for _, target in unasync.FILES}
    assert len(unasync.FILES) >= 5


def test_an_unused_substitution_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NAMES entry no source uses makes the generator exit 1, naming it."""
    monkeypatch.setitem(unasync.NAMES, "NoSourceUsesThisName", "Nothing")
    assert unasync.main(["--check"]) == 1
    assert "NoSourceUsesThisName" in capsys.readouterr().out


def test_the_generated_files_are_current() -> None:
    """`python .ci/unasync.py --check` passes: no sync twin is stale (else `make generate`)."""
    assert unasync.main(["--check"]) == 0


def test_the_check_fails_on_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A generated file edited by hand makes --check exit 1 and show the difference."""
    batcher = [pair for pair in unasync.FILES if pair[1] == "saltedtable/_sync_autogen/batcher.py"]
    for source, target in batcher:
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).write_text((ROOT / source).read_text(encoding="utf-8"))
        text = (ROOT / target).read_text(encoding="utf-8")
        (tmp_path / target).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / target).write_text(text.replace("def append", "def append_edited"))
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())  # ruff config
    monkeypatch.setattr(unasync, "ROOT", tmp_path)
    monkeypatch.setattr(unasync, "FILES", tuple(batcher))
    assert unasync.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "+    def append(" in out
    assert "stale: saltedtable/_sync_autogen/batcher.py" in out


def test_gitattributes_marks_the_generated_files_and_nothing_else() -> None:
    """The path-keyed setting moves with the files: it marks every generated file, and
    nothing outside the generated folder (whose hand-written ``__init__`` says so too)."""
    lines = (ROOT / ".gitattributes").read_text(encoding="utf-8").splitlines()
    patterns = [line.split()[0] for line in lines if "linguist-generated" in line]
    marked = {str(p.relative_to(ROOT)) for pattern in patterns for p in ROOT.glob(pattern)}
    generated = {target for _, target in unasync.FILES}
    assert generated <= marked, f"not marked generated: {sorted(generated - marked)}"
    assert all(path.startswith(unasync.TARGET_DIR) for path in marked)
