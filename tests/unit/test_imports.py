"""The package's import rules: every import points downward, and the exports agree.

docs/development.md lists the modules floor by floor; :data:`ORDER` is that list,
lowest first. A module may import only modules listed before it (at module level,
inside a function or under ``TYPE_CHECKING`` alike), so there is no import cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import saltedtable

PACKAGE = Path(saltedtable.__file__).resolve().parent

#: Lowest floor first. A new module goes where its imports put it (and in the guide).
ORDER: tuple[str, ...] = (
    # pure
    "_exceptions",
    "_contracts",
    "_commands",
    "_salt",
    "_ranges",
    "_cutoff",
    "_named",
    "_flags",
    "_families",
    "_layout",
    "_strategy",
    "_record",
    "_migration",
    "_query",
    "_plan",
    "_split",
    "_args",
    "_specs",
    "_from_record",
    "_stats",
    "_views",
    "_inspect",
    "_row_output",
    "_timeouts",
    "_connection",
    # the engine
    "_merge",
    # I/O, each module serving both flavours
    "_cancel",
    "_slots",
    "_concurrency",
    "_concurrency_sync",
    "_chunks",
    "_chunks_sync",
    "_reader",
    "_read_call",
    "_read_call_sync",
    "_guard",
    "_table_guard",
    "_table_guard_sync",
    "_write",
    "_batcher",
    "_batcher_sync",
    "_admin",
    "_facade",
    "_table",
    "_sync",
    "_create",
    # around it
    "otel",
    "testing",
    "pytest_plugin",
    "_emulator_cmd",
    "_migrate_args",
    "advise",
    "_admin_cli",
    "_read_cli",
    "_cli",
    "beam",
    "__init__",
)


def _module_of(path: Path) -> str:
    """The ORDER name of a file: a top-level module, or its subpackage."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def _imported(path: Path) -> set[str]:
    """The package's own modules (ORDER names) that ``path`` imports, anywhere in it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0: saltedtable/x.py, 1: a subpackage
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module and node.module.startswith("saltedtable."):
                    found.add(node.module.split(".")[1])
                continue
            up = node.level - 1 - depth  # > 0 never happens; 0: the package itself
            if up < 0:
                continue  # a sibling inside the same subpackage
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("saltedtable."):
                    found.add(alias.name.split(".")[1])
    return found


FILES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_module_has_a_floor() -> None:
    """A module missing from ORDER fails here, not silently."""
    names = {_module_of(p) for p in FILES}
    assert names - set(ORDER) == set(), "add these modules to ORDER (and docs/development.md)"
    assert set(ORDER) - names == set(), "ORDER names modules that no longer exist"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_downward(path: Path) -> None:
    """Every module of the package a file imports is on a lower floor than the file's own."""
    own = _module_of(path)
    rank = ORDER.index(own)
    upward = sorted(
        name
        for name in _imported(path)
        if name != own and name in ORDER and ORDER.index(name) > rank
    )
    assert not upward, f"{path.name} ({own}) imports from above its floor: {upward}"


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
            eager.update(alias.asname or alias.name for alias in node.names)
    assert lazy == typed, "_LAZY and the TYPE_CHECKING imports disagree"
    public = set(saltedtable.__all__) - {"__version__"}
    assert public == eager | set(lazy), (
        f"in __all__ only: {sorted(public - eager - set(lazy))}; "
        f"exported but not in __all__: {sorted((eager | set(lazy)) - public)}"
    )
    for name in sorted(public):
        assert getattr(saltedtable, name) is not None
    for name, module in lazy.items():
        owner = getattr(saltedtable, name)
        where = getattr(owner, "__module__", None)
        if where is not None and where.startswith("saltedtable."):
            # A lazy name is imported from the module that defines it (no re-export hops).
            assert where == "saltedtable" + module, f"{name} is defined in {where}, not {module}"


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
    tree = ast.parse(path.read_text(encoding="utf-8") if text is None else text)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = _absolute(path, node)
        source = None if module is None else _source_of(module)
        if module is None or source is None:
            continue
        defined = _defined(ast.parse(source.read_text(encoding="utf-8")))
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
        "from ._record import SaltScheme\n"  # _record imports SaltScheme from _salt
        "from ._salt import SaltScheme as S\n"
        "from saltedtable import SaltedTableAsync\n"  # the package re-exports it lazily
        "from . import _salt\n"
    )
    assert _sideways(PACKAGE / "_guard.py", text) == [
        "line 1: SaltScheme from saltedtable._record",
        "line 3: SaltedTableAsync from saltedtable",
    ]
    assert (
        _sideways(beam, "from .._salt import SaltScheme\nfrom ._io import ReadSaltedRows\n") == []
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
