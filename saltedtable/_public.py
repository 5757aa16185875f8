"""Public names carry the public module's name, not the private module that defines them.

The package's classes and functions live in private modules (``_scheme/salt.py``,
``_guard/record.py``, ...) that may move between releases; users import them from
``saltedtable`` (or ``saltedtable.beam``). :func:`publish` sets each public name's
``__module__`` to the module users import it from, so that reprs, tracebacks, docs
and pickles say ``saltedtable.SaltScheme``. It imports nothing of the package: every
public module may use it.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from collections.abc import Iterable, Mapping

__all__ = ["publish", "publish_one"]


def _is_private(module: str, package: str) -> bool:
    """True for a module of ``package`` below a private (``_x``) name."""
    parts = module.split(".")
    return parts[0] == package and any(part.startswith("_") for part in parts[1:])


def _resolve_annotations(cls: type) -> None:
    """Replace the class's own string annotations with the objects they name.

    ``typing.get_type_hints`` (which pydantic, hypothesis' ``from_type`` and others
    call on dataclasses) evaluates a class's string annotations in the module its
    ``__module__`` names. Once that is the public module, names the defining module
    imported for its annotations (``Callable``, ``HashName``, ...) are no longer
    found there, so they are evaluated here first, in the defining module. A class
    whose annotations cannot be evaluated (names imported only for type checkers)
    keeps its strings: ``get_type_hints`` failed on it before too.
    """
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(value, str) for value in own.values()):
        return
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:
        return
    cls.__annotations__ = {name: hints.get(name, value) for name, value in own.items()}


def publish_one(value: object, public: str) -> None:
    """Name ``public`` as the module of ``value`` if a private module of its package defines it.

    Anything else is left as it is: a constant, a type alias, a name another
    public module already claimed, a name from another package.
    """
    if not isinstance(value, type | types.FunctionType):
        return
    package = public.partition(".")[0]
    if not _is_private(value.__module__, package):
        return
    if isinstance(value, type) and value.__module__ in sys.modules:
        _resolve_annotations(value)
    value.__module__ = public


def publish(namespace: Mapping[str, object], names: Iterable[str], public: str) -> None:
    """:func:`publish_one` for each of ``names`` that ``namespace`` holds (lazy ones are not)."""
    for name in names:
        if name in namespace:
            publish_one(namespace[name], public)
