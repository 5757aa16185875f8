"""Authorized views over salted tables: the row prefixes a view needs (pure).

An authorized view names the row-key prefixes it lets through. A logical key
prefix of a salted table lives under every bucket's prefix (or under one,
when the key part fixes the bucket for every key with that prefix), plus,
with a cutoff, unsalted where legacy rows were written. The layout record
lives in its own reserved row; a view that includes it lets the guard read
the record through the view.

The prefixes are exact: a row is let through iff its logical key starts with
the prefix. Legacy keys never start with a salt prefix (the layout refuses
them), so the unsalted prefix and a salt prefix's range meet only when one
starts the other. A logical prefix inside a salt prefix (``b"10-x"``) has no
legacy rows, so no unsalted prefix is added; one that begins a salt prefix
(``b"1"`` and ``b"10-"``) is refused, since no row prefix lets the legacy key
``b"1"`` through without the salted rows under ``b"10-"``.
"""

from __future__ import annotations

from .._exceptions import QueryPlanError
from .cutoff import CutoffPolicy
from .hot import HotLayout
from .layout import Layout
from .salt import SCHEME_ROW_KEY, SaltScheme, to_key

__all__ = ["view_row_prefixes"]


def view_row_prefixes(
    scheme: SaltScheme | Layout,
    prefix: bytes | str,
    *,
    cutoff: CutoffPolicy | None = None,
    record: bool = True,
    hot: HotLayout | None = None,
) -> list[bytes]:
    """The row prefixes of an authorized view that shows one logical key prefix.

    Args:
        scheme: The table's salt scheme; or its whole layout (a layout with
            epochs: every epoch's buckets, and the unsalted rows of an
            unsalted first epoch).
        prefix: The logical key prefix the view shows (not empty).
        cutoff: The table's cutoff: legacy rows are stored unsalted, under
            ``prefix`` itself, so it is added (unless the prefix starts with
            a salt prefix, where no legacy key can be).
        record: Also include the reserved layout-record row, so a salted
            table over the view can check its layout (False: open it with
            ``guard=False`` and check the record through the table).
        hot: The table's hot lists (of its newest scheme): a prefix that fixes
            a hot part shows the part's K buckets, and the sub-rows of split
            rows under the prefix.

    Returns:
        Sorted physical prefixes: one per bucket, or one when the key part
        fixes the bucket of every key starting with ``prefix``.

    Raises:
        QueryPlanError: An empty prefix (a view of every row is the table),
            or, with a cutoff, a prefix that begins a salt prefix (``b"1"``
            and ``b"10-"``): its unsalted row prefix would also show other
            keys' salted rows.
    """
    logical = to_key(prefix)
    if not logical:
        raise QueryPlanError("a view's logical prefix must not be empty (that is the whole table)")
    if isinstance(scheme, Layout):
        if cutoff is not None:
            raise TypeError("give the cutoff inside the Layout, or a SaltScheme and cutoff=")
        schemes, legacy_rows = scheme.schemes, scheme.as_epochs().has_legacy
    else:
        schemes, legacy_rows = (scheme,), cutoff is not None
    out: set[bytes] = set()
    for one in schemes:
        shared_part = getattr(one.key_part, "shared_part", None)
        shared = None if shared_part is None else shared_part(logical)
        if shared is not None:
            buckets: tuple[int, ...] = (one.bucket_of_part(shared),)
            if hot is not None and hot.scheme == one:
                buckets = hot.scan_buckets(logical) or buckets
            out.update(one.prefix(b) + logical for b in buckets)
        else:
            out.update(bucket_prefix + logical for bucket_prefix in one.prefixes)
    if legacy_rows:
        legacy = [_legacy_prefix(one, logical) for one in schemes]
        if None not in legacy:
            out.add(logical)
    if record:
        out.add(SCHEME_ROW_KEY)
    return sorted(out)


def _legacy_prefix(scheme: SaltScheme, logical: bytes) -> bytes | None:
    """The row prefix of the legacy rows under ``logical``, or None when there can be none.

    Raises:
        QueryPlanError: ``logical`` begins a salt prefix, so no row prefix
            shows its legacy rows without other keys' salted rows.
    """
    if scheme.has_prefix(logical) or logical.startswith(SCHEME_ROW_KEY):
        # No legacy key starts with a salt prefix or the reserved row (Layout.locate
        # refuses them), and this row prefix holds other keys' salted rows.
        return None
    begun = sorted(p for p in scheme.prefixes if p.startswith(logical))
    if begun:
        more = f" (and {len(begun) - 1} more)" if len(begun) > 1 else ""
        # A marker keeps the key spaces apart unless the prefix begins the marker itself.
        marker = (
            ""
            if scheme.marker
            else ", or use a scheme with a marker (SaltScheme(..., marker=b'~')) so the "
            "salted and unsalted key spaces cannot meet"
        )
        raise QueryPlanError(
            f"a view of the logical prefix {logical!r} cannot be exact with a cutoff: "
            f"{logical!r} begins the salt prefix {begun[0]!r}{more}, so a row prefix that "
            f"lets its legacy (unsalted) keys through also shows other keys' salted rows "
            f"under {begun[0]!r}; give a longer prefix that ends the key's field "
            f"(e.g. {logical + b'#'!r}){marker}"
        )
    return logical
