"""What ``saltedtable inspect`` works out from a table's samples and record (pure).

:func:`bucket_sizes` estimates each bucket's share of the data from
``sample_row_keys`` (Bigtable answers with keys that cut the table into
pieces of about equal size and the bytes before each); :func:`split_alignment`
tells which bucket boundaries are split points; :func:`skew` is the largest
bucket over the mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, final

from .._guard.record import LayoutRecord
from .._scheme.salt import SCHEME_ROW_KEY, SaltScheme, prefix_end

__all__ = [
    "SUMMARY_ABOVE",
    "Inspection",
    "bucket_sizes",
    "epoch_sizes",
    "largest_buckets",
    "prefix_sizes",
    "size_histogram",
    "skew",
    "split_alignment",
]

#: Above this many buckets the text report summarises them (``--all-buckets`` lists all).
SUMMARY_ABOVE: Final = 32
#: Buckets the summary lists by name: the largest ones.
_SHOWN_LARGEST: Final = 10
_HISTOGRAM_BINS: Final = 8
_BAR: Final = 30


def _buckets_between(scheme: SaltScheme, start: bytes, end: bytes) -> list[int]:
    """The buckets whose prefix range meets ``[start, end)`` (``end`` b"": the table's end)."""
    found = []
    for bucket in scheme.bucket_ids:
        prefix = scheme.prefix(bucket)
        stop = prefix_end(prefix)
        if (not end or prefix < end) and (not stop or start < stop):
            found.append(bucket)
    return found


def bucket_sizes(scheme: SaltScheme, samples: Sequence[tuple[bytes, int]]) -> dict[int, float]:
    """Estimated bytes per bucket from ``sample_row_keys`` answers.

    The bytes between two samples belong to the key range between them; a
    range that spans several buckets is shared among them evenly, so the
    estimate is as fine as the samples are (one per tablet on Cloud Bigtable).
    Bytes outside every bucket (legacy rows, the record row) are left out.
    """
    sizes = dict.fromkeys(scheme.bucket_ids, 0.0)
    previous_key, previous_offset = b"", 0
    for key, offset in samples:
        delta = offset - previous_offset
        if delta > 0:
            end = key if key else b""
            if end.startswith(SCHEME_ROW_KEY):
                end = SCHEME_ROW_KEY
            buckets = _buckets_between(scheme, previous_key, end)
            for bucket in buckets:
                sizes[bucket] += delta / len(buckets)
        previous_key, previous_offset = key, offset
    return sizes


def prefix_sizes(
    prefixes: Sequence[bytes], samples: Sequence[tuple[bytes, int]]
) -> dict[bytes, float]:
    """Estimated bytes per salt prefix (of any epoch) from ``sample_row_keys`` answers.

    As :func:`bucket_sizes`, keyed by the prefix itself, so that bucket 5 of
    N=8 (``5-``) and of N=64 (``05-``) are told apart. A prefix that two
    epochs share (same width) holds both epochs' rows: its bytes are the sum.
    """
    ordered = sorted(set(prefixes))
    sizes = dict.fromkeys(ordered, 0.0)
    previous_key, previous_offset = b"", 0
    for key, offset in samples:
        delta = offset - previous_offset
        if delta > 0:
            end = key if key else b""
            if end.startswith(SCHEME_ROW_KEY):
                end = SCHEME_ROW_KEY
            met = [
                p
                for p in ordered
                if (not end or p < end) and (not prefix_end(p) or previous_key < prefix_end(p))
            ]
            for prefix in met:
                sizes[prefix] += delta / len(met)
        previous_key, previous_offset = key, offset
    return sizes


def epoch_sizes(
    epochs: Sequence[tuple[str, SaltScheme | None]], samples: Sequence[tuple[bytes, int]]
) -> list[dict[str, Any]]:
    """Per epoch (``(start, scheme)``, oldest first): its scheme and estimated bytes per bucket.

    Each bucket is measured by its own prefix (:func:`prefix_sizes`); buckets
    whose prefix another epoch shares are named in ``shared``.
    """
    every = [p for _, scheme in epochs if scheme is not None for p in scheme.prefixes]
    sizes = prefix_sizes(every, samples)
    out: list[dict[str, Any]] = []
    for i, (start, scheme) in enumerate(epochs):
        if scheme is None:
            out.append({"epoch": i, "start": start, "scheme": "unsalted", "buckets": {}})
            continue
        mine = {b: sizes[scheme.prefix(b)] for b in scheme.bucket_ids}
        shared = [
            b
            for b in scheme.bucket_ids
            if any(
                other is not None and j != i and scheme.prefix(b) in other.prefixes
                for j, (_, other) in enumerate(epochs)
            )
        ]
        out.append(
            {"epoch": i, "start": start, "scheme": str(scheme), "buckets": mine, "shared": shared}
        )
    return out


def skew(sizes: dict[int, float]) -> float | None:
    """The largest bucket over the mean (1.0: even); None without data."""
    total = sum(sizes.values())
    if total <= 0 or not sizes:
        return None
    return max(sizes.values()) / (total / len(sizes))


def split_alignment(
    scheme: SaltScheme, samples: Sequence[tuple[bytes, int]]
) -> tuple[list[bytes], list[bytes]]:
    """``(aligned, missing)``: bucket boundaries that are split points, and those that are not.

    A boundary is a bucket's prefix (the lowest one too: it divides the
    buckets from the key space before them). A tablet split inside a
    bucket is fine; one bucket sharing a tablet with the next is what
    pre-splitting avoids.
    """
    keys = {key for key, _ in samples}
    aligned: list[bytes] = []
    missing: list[bytes] = []
    for prefix in sorted(scheme.prefixes):
        (aligned if prefix in keys else missing).append(prefix)
    return aligned, missing


def largest_buckets(sizes: dict[int, float], count: int) -> list[tuple[int, float]]:
    """The ``count`` largest buckets as ``(bucket, bytes)``, largest first (ties: lower first)."""
    return sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:count]


def size_histogram(sizes: dict[int, float], bins: int) -> list[tuple[float, float, int]]:
    """How many buckets fall in each of ``bins`` equal spans from the smallest size to the largest.

    Returns:
        ``(low, high, buckets)`` per span, in order; the last span includes its
        upper end. One span when every bucket has the same size; none without buckets.
    """
    if not sizes:
        return []
    low, high = min(sizes.values()), max(sizes.values())
    if high <= low:
        return [(low, high, len(sizes))]
    width = (high - low) / bins
    counts = [0] * bins
    for size in sizes.values():
        counts[min(bins - 1, int((size - low) / width))] += 1
    return [(low + i * width, low + (i + 1) * width, n) for i, n in enumerate(counts)]


def _bucket_lines(sizes: dict[int, float], all_buckets: bool) -> list[str]:
    """Every bucket on its own line, or above :data:`SUMMARY_ABOVE`, a summary of them."""
    if all_buckets or len(sizes) <= SUMMARY_ABOVE:
        return [f"  bucket {bucket}: ~{size:,.0f} bytes" for bucket, size in sorted(sizes.items())]
    lines = [f"  largest {_SHOWN_LARGEST}:"]
    lines.extend(
        f"    bucket {bucket}: ~{size:,.0f} bytes"
        for bucket, size in largest_buckets(sizes, _SHOWN_LARGEST)
    )
    smallest = min(sizes.items(), key=lambda item: (item[1], item[0]))
    lines.append(f"  smallest: bucket {smallest[0]}: ~{smallest[1]:,.0f} bytes")
    lines.append("  sizes:")
    spans = size_histogram(sizes, _HISTOGRAM_BINS)
    most = max(n for _, _, n in spans)
    labels = [f"~{low:,.0f} to ~{high:,.0f} bytes:" for low, high, _ in spans]
    width = max(map(len, labels))
    for label, (_, _, n) in zip(labels, spans, strict=True):
        bar = "#" * round(n * _BAR / most)
        what = "bucket " if n == 1 else "buckets"
        lines.append(f"    {label:<{width}} {n:>6,} {what} {bar}".rstrip())
    lines.append("  every bucket: --all-buckets (or --json)")
    return lines


@final
@dataclass
class Inspection:
    """What ``saltedtable inspect`` found about one table.

    ``problems`` decide the exit status (1 when any); ``notes`` are shown only.
    """

    table: str
    record: LayoutRecord | None = None
    record_family: str | None = None
    families: list[dict[str, Any]] = field(default_factory=list)
    scheme: str | None = None
    buckets: dict[int, float] = field(default_factory=dict)
    skew: float | None = None
    samples: int = 0
    #: Per epoch of a table with epochs: its start, scheme and bytes per bucket.
    epochs: list[dict[str, Any]] = field(default_factory=list)
    splits_aligned: list[str] = field(default_factory=list)
    splits_missing: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    #: The record's window: old and new bucket counts, start, lead and state (None: none).
    window: dict[str, Any] | None = None
    #: The record's hot parts and rows: kind, value, K, buckets (and their sizes).
    hot: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def sorted_families(self) -> list[dict[str, Any]]:
        """The families by name (the admin API answers them in no set order)."""
        return sorted(self.families, key=lambda fam: str(fam["name"]))

    def as_json(self) -> dict[str, Any]:
        """A JSON-friendly form (bucket ids as strings, sizes in bytes)."""
        out: dict[str, Any] = {
            "table": self.table,
            "record": None if self.record is None else self.record.as_dict(),
            "record_family": self.record_family,
            "record_flags": None if self.record is None else str(self.record.cli_flags()),
            "families": self.sorted_families(),
            "scheme": self.scheme,
            "bucket_bytes": {str(b): round(v) for b, v in sorted(self.buckets.items())},
            "skew": self.skew,
            "samples": self.samples,
            "splits": {"aligned": self.splits_aligned, "missing": self.splits_missing},
            "stray_keys": self.stray,
            "hot": self.hot,
            "problems": self.problems,
            "notes": self.notes,
        }
        if self.window is not None:  # (a table in a window only)
            out["window"] = self.window
        if self.epochs:  # (a table with epochs only: other reports keep their form)
            out["epochs"] = [
                {
                    **e,
                    "buckets": {str(b): round(v) for b, v in sorted(e["buckets"].items())},
                    "skew": skew(e["buckets"]) if e["buckets"] else None,
                }
                for e in self.epochs
            ]
        return out

    def text(self, *, all_buckets: bool = False) -> str:
        """The report for people.

        Args:
            all_buckets: List every bucket, also above :data:`SUMMARY_ABOVE`
                buckets (where the largest, the smallest and a histogram of
                their sizes are shown instead).
        """
        lines = [f"table {self.table}"]
        if self.record is None:
            lines.append("record: none")
        else:
            lines.append(f"record: in family {self.record_family!r}: {self.record.as_dict()}")
            lines.append(f"  as flags: {self.record.cli_flags()}")
        lines.append("families:")
        for fam in self.sorted_families():
            kind = f", aggregate {fam['aggregate']}" if fam.get("aggregate") else ""
            lines.append(f"  {fam['name']}: gc {fam['gc_rule']}{kind}")
        if self.scheme is not None:
            lines.append(f"layout: {self.scheme}")
        if self.buckets:
            total = sum(self.buckets.values())
            shown = "n/a" if self.skew is None else f"{self.skew:.2f}"
            lines.append(
                f"buckets: {len(self.buckets)}, about {total:,.0f} bytes from {self.samples} "
                f"samples, skew (max/mean) {shown}"
            )
            lines.extend(_bucket_lines(self.buckets, all_buckets))
            lines.append(
                f"splits: {len(self.splits_aligned)} of "
                f"{len(self.splits_aligned) + len(self.splits_missing)} bucket boundaries "
                "are split points"
            )
        for hot in self.hot:
            sizes = ", ".join(
                f"{b}: {self.buckets.get(b, 0):,.0f} B" if self.buckets else str(b)
                for b in hot["buckets"]
            )
            start = f" from {hot['from']}" if hot.get("from") else ""
            moving = (
                f", moving from K={hot['moving_from']} (saltedtable split --finish)"
                if "moving_from" in hot
                else ""
            )
            lines.append(
                f"hot {hot['kind']} {hot['value']!r}: K={hot['k']}{start} (buckets {sizes}){moving}"
            )
        if self.window is not None:
            w = self.window
            lines.append(
                f"window: {w['old_buckets']} -> {w['new_buckets']} buckets from {w['start']}, "
                f"{w['state']} (lead {w['min_lead_s']:g} s)"
            )
        if self.epochs:
            lines.append(f"epochs: {len(self.epochs)}")
        for e in self.epochs:
            lines.append(f"  epoch {e['epoch']} from {e['start']}: {e['scheme']}")
            if e["buckets"]:
                size = skew(e["buckets"])
                shown = "n/a" if size is None else f"{size:.2f}"
                shared = e.get("shared") or []
                note = f", {len(shared)} bucket prefixes shared with other epochs" if shared else ""
                lines.append(f"  about {sum(e['buckets'].values()):,.0f} bytes, skew {shown}{note}")
                lines.extend("  " + line for line in _bucket_lines(e["buckets"], all_buckets))
        if self.stray:
            lines.append(f"stray or misplaced keys (sample of {len(self.stray)}):")
            lines.extend(f"  {s}" for s in self.stray)
        lines.extend(f"note: {n}" for n in self.notes)
        lines.extend(f"PROBLEM: {p}" for p in self.problems)
        if not self.problems:
            lines.append("no problems found")
        return "\n".join(lines)
