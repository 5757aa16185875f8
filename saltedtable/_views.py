"""Authorized views over salted tables: the row prefixes a view needs (pure).

An authorized view names the row-key prefixes it lets through. A logical key
prefix of a salted table lives under every bucket's prefix (or under one,
when the key part fixes the bucket for every key with that prefix), plus,
with a cutoff, unsalted where legacy rows were written. The layout record
lives in its own reserved row; a view that includes it lets the guard read
the record through the view.
"""

from __future__ import annotations

from ._cutoff import CutoffPolicy
from ._salt import SCHEME_ROW_KEY, SaltScheme, to_key

__all__ = ["view_row_prefixes"]


def view_row_prefixes(
    scheme: SaltScheme,
    prefix: bytes | str,
    *,
    cutoff: CutoffPolicy | None = None,
    record: bool = True,
) -> list[bytes]:
    """The row prefixes of an authorized view that shows one logical key prefix.

    Args:
        scheme: The table's salt scheme.
        prefix: The logical key prefix the view shows (not empty).
        cutoff: The table's cutoff: legacy rows are stored unsalted, under
            ``prefix`` itself, so it is added.
        record: Also include the reserved layout-record row, so a salted
            table over the view can check its layout (False: open it with
            ``guard=False`` and check the record through the table).

    Returns:
        Sorted physical prefixes: one per bucket, or one when the key part
        fixes the bucket of every key starting with ``prefix``.

    Raises:
        ValueError: An empty prefix (a view of every row is the table).
    """
    logical = to_key(prefix)
    if not logical:
        raise ValueError("a view's logical prefix must not be empty (that is the whole table)")
    shared_part = getattr(scheme.key_part, "shared_part", None)
    shared = None if shared_part is None else shared_part(logical)
    if shared is not None:
        out = {scheme.prefix(scheme.bucket_of_part(shared)) + logical}
    else:
        out = {bucket_prefix + logical for bucket_prefix in scheme.prefixes}
    if cutoff is not None:
        out.add(logical)
    if record:
        out.add(SCHEME_ROW_KEY)
    return sorted(out)
