"""The package's import rules: every import points downward, and the exports agree.

docs/development.md lists the modules folder by folder; :data:`ORDER` is that list,
lowest first, in dotted names (``"_scheme.salt"``; a folder's ``__init__`` is the
folder's name). A module may import only modules listed before it (at module level,
inside a function or under ``TYPE_CHECKING`` alike), so there is no import cycle,
between folders or inside one. The read engine imports nothing but itself and the
standard library.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import sys
from pathlib import Path

import pytest

import saltedtable

PACKAGE = Path(saltedtable.__file__).resolve().parent

#: Lowest floor first. A new module goes where its imports put it (and in the guide).
ORDER: tuple[str, ...] = (
    "_public",
    "_exceptions",
    "_contracts",
    # where a key lives (pure)
    "_scheme.salt",
    "_scheme.ranges",
    "_scheme.cutoff",
    "_scheme.named",
    "_scheme.flags",
    "_scheme.epochs",
    "_scheme.layout",
    "_scheme.window",
    "_scheme.hot",
    "_scheme.hot_move",
    "_scheme.views",
    "_scheme",
    # the read engine (no Bigtable)
    "_engine.budget",
    "_engine.slots",
    "_engine.slots_asyncio",
    "_engine.slots_threads",
    "_engine.merge",
    "_engine.merge_asyncio",
    "_engine.merge_threads",
    "_engine.runtime_asyncio",
    "_engine.runtime_threads",
    "_engine",
    # one read against Bigtable
    "_read.settings",
    "_read.timeouts",
    "_read.query",
    "_read.plan",
    "_read.split",
    "_read.stats",
    "_read.cancel_asyncio",
    "_read.cancel_threads",
    "_read.sources",
    "_read.sources_asyncio",
    "_read.sources_threads",
    "_read.call",
    "_read",
    # the layout record and the guard's decisions (pure)
    "_guard.families",
    "_guard.record",
    "_guard.migration",
    "_guard.from_record",
    "_guard.resalt",
    "_guard.hot_record",
    "_guard.window_state",
    "_guard.decisions",
    "_guard",
    # the tables' pure halves, shared by both flavours
    "_write",
    "_admin",
    "_facade",
    "_hotkeys",
    "_split",
    # the async sources, then their generated twins
    "_async.table_like",
    "_async.chunks",
    "_async.read_call",
    "_async.guard",
    "_async.window_table",
    "_async.batcher",
    "_async.bulk",
    "_async.table",
    "_async",
    "_sync_autogen.table_like",
    "_sync_autogen.chunks",
    "_sync_autogen.read_call",
    "_sync_autogen.guard",
    "_sync_autogen.window_table",
    "_sync_autogen.batcher",
    "_sync_autogen.bulk",
    "_sync_autogen.table",
    "_sync_autogen",
    "_connection",
    "_create",
    "_resalt",
    "_window_ops",
    # around it
    "otel",
    "testing",
    "pytest_plugin",
    "advise.noise",
    "advise.model",
    "advise.input",
    "advise.heatmap",
    "advise.report",
    "advise.run",
    "advise",
    "_cli.commands",
    "_cli.args",
    "_cli.specs",
    "_cli.inspect",
    "_cli.row_output",
    "_cli.emulator",
    "_cli.migrate",
    "_cli.admin",
    "_cli.resalt",
    "_cli.window",
    "_cli.read",
    "_cli.main",
    "_cli",
    "beam._record_steps",
    "beam._io",
    "beam._migrate",
    "beam._window",
    "beam._cli",
    "beam.__main__",
    "beam",
    "__init__",
)

#: The engine's folder: it may import only itself, the standard library and ENGINE_MAY.
ENGINE = "_engine"
#: What the engine may import besides the standard library: the runtime it drives.
ENGINE_MAY = frozenset({"anyio"})


def _module_of(path: Path) -> str:
    """The ORDER name of a file: its dotted module under the package."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _known(dotted: str) -> str | None:
    """The ORDER name of an absolute ``saltedtable...`` module, or None if it is none."""
    if dotted == "saltedtable":
        return "__init__"
    name = dotted.removeprefix("saltedtable.")
    return name if name in ORDER else None


def _targets(path: Path, node: ast.ImportFrom) -> set[str]:
    """The absolute modules an ``import from`` names: the module, or the modules it imports."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = ["saltedtable", *path.relative_to(PACKAGE).with_suffix("").parts][:-1]
        if path.name == "__init__.py":
            parts = ["saltedtable", *path.relative_to(PACKAGE).parts[:-1]]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, node.module] if node.module else parts)
    found = set()
    for alias in node.names:
        if base == "saltedtable" and alias.name == "__version__":
            continue  # the installed version, which the package root reads on demand
        # `from . import model`: the module model; `from .model import X`: the module .model
        found.add(f"{base}.{alias.name}" if _known(f"{base}.{alias.name}") else base)
    return found


@functools.cache
def _tree(path: Path) -> ast.Module:
    """``path`` parsed, once a session: the rules below read the same modules hundreds of
    times (an import's target once for every file importing it), and nothing mutates a tree."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imported(path: Path) -> set[str]:
    """Every absolute module ``path`` imports, anywhere in it."""
    tree = _tree(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found |= _targets(path, node)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _own(path: Path) -> set[str]:
    """The package's own modules (ORDER names) that ``path`` imports."""
    return {
        known
        for module in _imported(path)
        if module.split(".")[0] == "saltedtable" and (known := _known(module)) is not None
    }


FILES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_module_has_a_floor() -> None:
    """A module missing from ORDER fails here, not silently."""
    names = {_module_of(p) for p in FILES}
    assert names - set(ORDER) == set(), "add these modules to ORDER (and docs/development.md)"
    assert set(ORDER) - names == set(), "ORDER names modules that no longer exist"


def test_every_import_of_the_package_is_known() -> None:
    """An import of a package module that ORDER does not know (a typo, a removed module) fails."""
    unknown = sorted(
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in FILES
        for module in _imported(path)
        if module.split(".")[0] == "saltedtable"
        and _known(module) is None
        and _known(module.rsplit(".", 1)[0]) is None
    )
    assert unknown == []


def test_a_folder_is_one_run_of_floors() -> None:
    """A folder's modules sit together in ORDER, followed by the folder itself."""
    folders = {name.split(".")[0] for name in ORDER if "." in name}
    for folder in folders:
        at = [i for i, name in enumerate(ORDER) if name.split(".")[0] == folder]
        assert at == list(range(at[0], at[-1] + 1)), f"{folder}'s modules are split in ORDER"
        # The folder's __init__ comes last: it may import (re-export) its own modules.
        assert ORDER[at[-1]] == folder, f"{folder} (its __init__) comes last in its run"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_downward(path: Path) -> None:
    """Every module of the package a file imports is on a lower floor than the file's own."""
    own = _module_of(path)
    rank = ORDER.index(own)
    upward = sorted(name for name in _own(path) if ORDER.index(name) > rank)
    assert not upward, f"{path.relative_to(PACKAGE)} ({own}) imports from above its floor: {upward}"


ENGINE_FILES = sorted((PACKAGE / ENGINE).rglob("*.py"))


@pytest.mark.parametrize("path", ENGINE_FILES, ids=lambda p: p.name)
def test_the_engine_imports_only_itself_and_the_standard_library(path: Path) -> None:
    """No google, grpc or other saltedtable module in ``_engine/`` (anyio is its runtime)."""
    outside = sorted(
        module
        for module in _imported(path)
        if not module.startswith(f"saltedtable.{ENGINE}")
        and module.split(".")[0] not in sys.stdlib_module_names | ENGINE_MAY
    )
    assert outside == [], f"{path.name} imports from outside the engine: {outside}"


def test_the_import_reader_resolves_relative_and_sibling_imports() -> None:
    """What the rules above see: a client import, another folder, a sibling, a folder module."""
    merge = PACKAGE / ENGINE / "merge.py"
    run = PACKAGE / "advise" / "run.py"
    text = (
        "from google.cloud.bigtable.data import Row\n"
        "from .._read.plan import ReadPlan\n"
        "from .budget import ReadBudget\n"
    )
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            found |= _targets(merge, node)
    assert found == {
        "google.cloud.bigtable.data",
        "saltedtable._read.plan",
        "saltedtable._engine.budget",
    }
    (node,) = ast.parse("from . import model, report\n").body
    assert isinstance(node, ast.ImportFrom)
    assert _targets(run, node) == {"saltedtable.advise.model", "saltedtable.advise.report"}


def _init_tree() -> ast.Module:
    return ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))


def test_all_lazy_and_type_checking_exports_agree() -> None:
    """Every public name resolves; lazy names and their TYPE_CHECKING imports name one module."""
    tree = _init_tree()
    lazy: dict[str, str] = {}
    typed: dict[str, str] = {}
    eager: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_LAZY":
            assert isinstance(node.value, ast.Dict)
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                assert isinstance(key, ast.Constant)
                assert isinstance(value, ast.Constant)
                lazy[key.value] = value.value
        elif isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                for alias in stmt.names:
                    typed[alias.asname or alias.name] = "." + (stmt.module or "")
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            # (`_publish` and the like are the package's own helpers, not exports.)
            eager.update(
                name
                for alias in node.names
                if not (name := alias.asname or alias.name).startswith("_")
            )
    assert lazy == typed, "_LAZY and the TYPE_CHECKING imports disagree"
    public = set(saltedtable.__all__) - {"__version__"}
    assert public == eager | set(lazy), (
        f"in __all__ only: {sorted(public - eager - set(lazy))}; "
        f"exported but not in __all__: {sorted((eager | set(lazy)) - public)}"
    )
    for name in sorted(public):
        assert getattr(saltedtable, name) is not None
    for name, module in lazy.items():
        # A lazy name is imported from the module that defines it (no re-export hops).
        # (Its __module__ says "saltedtable" now, so the module's source is read.)
        source = _source_of("saltedtable" + module)
        assert source is not None, f"{name}: {module} is no module of the package"
        defined = _defined(_tree(source))
        assert name in defined, f"{name} is not defined in {module}"
        assert getattr(importlib.import_module(module, "saltedtable"), name) is getattr(
            saltedtable, name
        )


def _source_of(module: str) -> Path | None:
    """The file of a dotted ``saltedtable`` module, or None if it is not one."""
    base = PACKAGE.joinpath(*module.split(".")[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _absolute(path: Path, node: ast.ImportFrom) -> str | None:
    """The dotted module an ``import from`` in ``path`` names, if it is the package's."""
    if node.level == 0:
        module = node.module or ""
        return module if module.split(".")[0] == "saltedtable" else None
    parts = ["saltedtable", *path.relative_to(PACKAGE).with_suffix("").parts][:-1]
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _defined(tree: ast.Module) -> set[str]:
    """The names a module binds itself at its top level (not by importing them)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _sideways(path: Path, text: str | None = None) -> list[str]:
    """``from saltedtable.x import Name`` in ``path`` where ``x`` only re-exports ``Name``."""
    found = []
    tree = _tree(path) if text is None else ast.parse(text)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = _absolute(path, node)
        source = None if module is None else _source_of(module)
        if module is None or source is None:
            continue
        defined = _defined(_tree(source))
        for alias in node.names:
            if _source_of(f"{module}.{alias.name}") is None and alias.name not in defined:
                found.append(f"line {node.lineno}: {alias.name} from {module}")
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_names_come_from_their_owner(path: Path) -> None:
    """Every name the package imports from itself comes from the module that defines it."""
    assert _sideways(path) == [], "import these names from the module that defines them"


def test_a_sideways_import_is_seen() -> None:
    """The owner check flags a name taken through a module that only imports it."""
    beam = PACKAGE / "beam" / "_io.py"
    text = (
        "from .record import SaltScheme\n"  # record imports SaltScheme from _scheme.salt
        "from .._scheme.salt import SaltScheme as S\n"
        "from saltedtable import SaltedTableAsync\n"  # the package re-exports it lazily
        "from .._scheme import salt\n"
    )
    assert _sideways(PACKAGE / "_guard" / "decisions.py", text) == [
        "line 1: SaltScheme from saltedtable._guard.record",
        "line 3: SaltedTableAsync from saltedtable",
    ]
    assert (
        _sideways(beam, "from .._scheme.salt import SaltScheme\nfrom ._io import ReadSaltedRows\n")
        == []
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("TableLike", "TableLikeAsync"),
        ("SaltedMutationsBatcher", "SaltedMutationsBatcherAsync"),
    ],
)
def test_a_renamed_name_still_works_with_a_deprecation_warning(old: str, new: str) -> None:
    """An old public name gives the renamed class, warns each time, and is not in __all__."""
    for _ in range(2):
        with pytest.warns(DeprecationWarning, match=f"renamed saltedtable.{new}"):
            value = getattr(saltedtable, old)
        assert value is getattr(saltedtable, new)
    assert old not in saltedtable.__all__
    assert new in saltedtable.__all__


_ROLE = re.compile(r":(?:mod|class|func|meth|data|attr|exc):`~?([.\w]+)`")


@functools.cache
def _module_names() -> dict[str, set[str]]:
    """Every module of the package, dotted, and the names it binds at its top level."""
    found: dict[str, set[str]] = {}
    for path in FILES:
        own = _module_of(path)
        dotted = "saltedtable" if own == "__init__" else f"saltedtable.{own}"
        tree = _tree(path)
        found[dotted] = _defined(tree) | {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom | ast.Import)
            for alias in node.names
        }
    found["saltedtable"] |= set(saltedtable.__all__)  # the lazy names too
    return found


def _broken_references(
    path: Path, names: dict[str, set[str]], text: str | None = None
) -> list[str]:
    """The docstring roles in ``path`` naming a package module or name that does not exist."""
    own = _module_of(path)
    parts_of_own = [] if own == "__init__" else own.split(".")
    package = ["saltedtable", *(parts_of_own if path.name == "__init__.py" else parts_of_own[:-1])]
    source = path.read_text(encoding="utf-8") if text is None else text
    broken = []
    for number, line in enumerate(source.splitlines(), 1):
        for match in _ROLE.finditer(line):
            ref = match.group(1)
            if ref.startswith("."):
                level = len(ref) - len(ref.lstrip("."))
                parts = [*package[: len(package) - (level - 1)], *ref.lstrip(".").split(".")]
            elif ref.startswith("saltedtable."):
                parts = ref.split(".")
            else:
                continue
            at = max(k for k in range(1, len(parts) + 1) if ".".join(parts[:k]) in names or k == 1)
            rest = parts[at:]
            if rest and rest[0] not in names.get(".".join(parts[:at]), set()):
                broken.append(f"line {number}: {ref}")
    return broken


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_docstring_references_name_what_exists(path: Path) -> None:
    """A ``:class:`~.x.Name``` in a docstring still names a module and a name after a move."""
    assert _broken_references(path, _module_names()) == []


def test_a_stale_docstring_reference_is_seen() -> None:
    """The check above fails on a reference to a module that moved away, or a name that did."""
    text = (
        '"""See :class:`~._merge.Merge`, :mod:`.merge_asyncio`,\n'
        ':class:`~.merge_asyncio.Merge` and :class:`~.merge.Merge`."""\n'
    )
    probe = PACKAGE / "_engine" / "probe.py"
    assert _broken_references(probe, _module_names(), text) == [
        "line 1: ._merge.Merge",
        "line 2: .merge.Merge",
    ]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_another_modules_private_name(path: Path) -> None:
    """What two modules share has a package-internal public name, not an ``_x`` one."""
    private = sorted(
        f"line {node.lineno}: {alias.name}"
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ImportFrom)
        and (node.level > 0 or (node.module or "").split(".")[0] == "saltedtable")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    )
    assert private == [], "give these names a public name in the module that defines them"
