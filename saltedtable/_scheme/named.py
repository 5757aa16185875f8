"""Custom key parts with a stable identity (pure).

The layout record names the key part a table was written with, so that a
reader with another one is refused. A ready-made part (``fields``,
``before_last``) is named by its value; a custom function needs a name its
author gives, because nothing else about a function survives a redeploy
reliably: two lambdas, two ``functools.partial`` objects or two callable
instances of one class look alike. :func:`named_key_part` gives it one, and
:func:`key_part_identity` refuses what has none.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, final

from .._exceptions import LayoutError, SaltSchemeError
from .salt import READY_MADE_KEY_PARTS

__all__ = ["NamedKeyPart", "key_part_identity", "named_key_part"]


@final
@dataclass(frozen=True, slots=True)
class NamedKeyPart:
    """A custom key part and the stable name the layout record stores for it.

    Change the name whenever the function would put some key in another
    bucket: readers with the old name are then refused.

    Args:
        name: The stable name (e.g. ``"tenant-before-hash/v1"``).
        func: ``bytes -> bytes``, the part of the key that is hashed.
    """

    name: str
    func: Callable[[bytes], bytes]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise SaltSchemeError(
                f"a key part's name must be a non-empty string, got {self.name!r}"
            )
        if not callable(self.func):
            raise SaltSchemeError(f"named_key_part needs a callable, got {self.func!r}")

    def __call__(self, key: bytes, /) -> bytes:
        return self.func(key)

    def shared_part(self, prefix: bytes, /) -> bytes | None:
        """What the wrapped function's ``shared_part`` says (None if it has none)."""
        shared = getattr(self.func, "shared_part", None)
        return None if shared is None else shared(prefix)


def named_key_part(name: str, func: Callable[[bytes], bytes]) -> NamedKeyPart:
    """Give a custom key part the stable name the layout record stores.

    Example::

        scheme = SaltScheme(16, key_part=named_key_part("tenant/v1", lambda k: k[:8]))
    """
    return NamedKeyPart(name, func)


def key_part_identity(part: Callable[..., Any] | None) -> str | None:
    """What the layout record stores for a key part.

    None for the whole key; ``name:...`` for a :class:`NamedKeyPart`; the
    value of saltedtable's ready-made parts; ``module.function`` for a plain
    function defined at the top of an importable module.

    Raises:
        LayoutError: A key part without a stable identity (a lambda, a nested
            function, a function of ``__main__``, a partial, a callable object).
    """
    if part is None:
        return None
    if isinstance(part, NamedKeyPart):
        return f"name:{part.name}"
    # The class, not its module's name: the package may move its modules, and the
    # public names say __module__ "saltedtable".
    if type(part) in READY_MADE_KEY_PARTS:  # (a subclass elsewhere is not one of them)
        return repr(part)  # fields(...), before_last(...): their value is their identity
    if isinstance(part, types.FunctionType):
        qualname, module = part.__qualname__, part.__module__ or ""
        if "<" not in qualname and module and module != "__main__":
            return f"{module}.{qualname}"
    raise LayoutError(
        f"the key part {part!r} has no stable name, so the layout record could not tell "
        "it from another function; give it one: "
        "SaltScheme(..., key_part=saltedtable.named_key_part('my-part/v1', func)) "
        "(or open the table with guard=False)"
    )
