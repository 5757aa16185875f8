"""KeyRange: a row key range with open or closed ends, and the operations the planner needs.

Pure code. Bigtable's own :class:`RowRange` is converted at the edges; inside,
ranges are frozen values that can be intersected, clipped and compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:  # the client is imported only when a range is converted
    from google.cloud.bigtable.data.read_rows_query import RowRange

__all__ = ["KeyRange"]


@final
@dataclass(frozen=True, slots=True)
class KeyRange:
    """A row key range; an empty ``start`` or ``end`` means unbounded on that side."""

    start: bytes = b""
    start_closed: bool = True
    end: bytes = b""
    end_closed: bool = False

    @classmethod
    def from_row_range(cls, row_range: RowRange) -> KeyRange:
        """Convert a Bigtable :class:`RowRange`."""
        return cls(
            row_range.start_key or b"",
            row_range.start_is_inclusive,
            row_range.end_key or b"",
            row_range.end_is_inclusive,
        )

    def to_row_range(self) -> RowRange:
        """Convert to a Bigtable :class:`RowRange`."""
        from google.cloud.bigtable.data.read_rows_query import RowRange

        return RowRange(
            self.start or None,
            self.end or None,
            start_is_inclusive=self.start_closed,
            end_is_inclusive=self.end_closed,
        )

    @property
    def is_empty(self) -> bool:
        """True when no key lies in the range."""
        if not self.start or not self.end:
            return False
        if self.start > self.end:
            return True
        return self.start == self.end and not (self.start_closed and self.end_closed)

    def clip(self, after: bytes | None, upto: bytes | None) -> KeyRange | None:
        """Intersect with ``(after, upto]``; None when nothing is left."""
        start, start_closed = self.start, self.start_closed
        if after is not None and (not start or start <= after):
            start, start_closed = after, False
        end, end_closed = self.end, self.end_closed
        if upto is not None and (not end or end > upto):
            end, end_closed = upto, True
        clipped = KeyRange(start, start_closed, end, end_closed)
        return None if clipped.is_empty else clipped

    def intersect(self, other: KeyRange) -> KeyRange | None:
        """The keys in both ranges; None when there are none."""
        start, start_closed = self.start, self.start_closed
        if other.start and (not start or other.start > start):
            start, start_closed = other.start, other.start_closed
        elif other.start and other.start == start:
            start_closed = start_closed and other.start_closed
        end, end_closed = self.end, self.end_closed
        if other.end and (not end or other.end < end):
            end, end_closed = other.end, other.end_closed
        elif other.end and other.end == end:
            end_closed = end_closed and other.end_closed
        both = KeyRange(start, start_closed, end, end_closed)
        return None if both.is_empty else both

    def __str__(self) -> str:
        lo = "(-inf" if not self.start else ("[" if self.start_closed else "(") + repr(self.start)
        hi = "+inf)" if not self.end else repr(self.end) + ("]" if self.end_closed else ")")
        return f"{lo}, {hi}"
