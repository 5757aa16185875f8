"""Mark when a small read asks a sync table's slots for one: fairness tests count from there.

A fairness test counts the requests that started while a small read waited for its slot.
Counted from before the call, it also counts those that scans started while the small
read's thread was still planning the read, which a loaded machine makes long: the count
then depends on the machine's speed. Counted from the small read's own request for a
slot, it depends on the slots' order only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from saltedtable._engine.slots_threads import Slots

__all__ = ["mark_small_reads", "reads_point_keys"]


def mark_small_reads(
    slots: Slots, count: Callable[[], int], is_small: Callable[[object], bool] | None = None
) -> list[int]:
    """Record ``count()`` each time a small read asks ``slots`` for a slot, in its own thread.

    Args:
        slots: A sync table's slots (its ``limiter``).
        count: The requests started so far.
        is_small: Whether a request is the small read's, given what asks for the slot (its
            runner, else its owner). None: the requests that ask with ``urgent=None`` (a
            one request over the buckets; a bucket's requests pass their own ``urgent``).

    Returns:
        The list the marks are appended to (one per small read's request, in order).
    """
    marks: list[int] = []

    class Marking(Slots):  # type: ignore[misc]
        __slots__ = ()

        def acquire(self, deadline: float, *args: Any, **kwargs: Any) -> bool:
            names = ("abort", "urgent", "owner", "runner")
            given = dict(zip(names, args, strict=False)) | kwargs
            source = given.get("runner") or given.get("owner")
            small = given.get("urgent") is None if is_small is None else is_small(source)
            if small:
                marks.append(count())
            return bool(super().acquire(deadline, *args, **kwargs))

    slots.__class__ = Marking
    return marks


def reads_point_keys(source: object) -> bool:
    """Whether a bucket's request reads point keys (a small read of keys; scans read ranges)."""
    return bool(getattr(getattr(source, "sub", None), "keys", ()))
