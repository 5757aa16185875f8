"""Where the layout record may live: column families and their GC rules (pure).

A layout record that garbage collection removes switches the guard off
silently, and a collected ``deleting`` record lets cutoff readers open again
while legacy rows disappear. So the record is only ever stored in a family
whose GC rule can never remove a column's latest version, and never in an
aggregate family (which takes ``AddToCell``/``MergeToCell``, not the
record's ``SetCell``).

:data:`RECORD_FAMILY` is the family reserved for the record
(``saltedtable create`` makes it, ``saltedtable guard --add-family`` adds it).
:func:`family_info` describes a family of an admin ``Table`` proto;
:func:`record_family_problem` says why a family cannot hold the record, and
:func:`place_record` chooses where a record goes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

__all__ = [
    "FAMILY_NAME",
    "MAX_AGE_SECONDS",
    "MAX_VERSIONS",
    "RECORD_FAMILY",
    "FamilyInfo",
    "Placement",
    "TableSchema",
    "check_family_name",
    "describe_gc_rule",
    "family_info",
    "gc_rule_may_drop_latest",
    "parse_family",
    "parse_gc_rule",
    "place_record",
    "record_family_problem",
]

#: The column family reserved for the layout record (no GC rule).
RECORD_FAMILY: Final = "saltedtable"

#: What Bigtable accepts as a column family id.
FAMILY_NAME: Final = re.compile(r"[_a-zA-Z0-9][-_.a-zA-Z0-9]{0,63}")


@final
@dataclass(frozen=True, slots=True)
class FamilyInfo:
    """One column family as the record's placement sees it.

    Args:
        name: The family id.
        gc_rule: The GC rule in words (``"none"`` when it has none).
        may_drop_latest: Whether the GC rule can remove a column's latest
            version (a max-age rule, or a union holding one).
        aggregate: The aggregate type (``"int64 sum"`` ...), or None for a
            plain family.
    """

    name: str
    gc_rule: str = "none"
    may_drop_latest: bool = False
    aggregate: str | None = None


#: A table's column families by id.
TableSchema = Mapping[str, FamilyInfo]


def check_family_name(name: str) -> None:
    """Refuse a family id Bigtable would refuse.

    Raises:
        ValueError: With the name and the rule.
    """
    if not isinstance(name, str) or not FAMILY_NAME.fullmatch(name):
        raise ValueError(
            f"column family {name!r} is not a valid Bigtable family id (1 to 64 of "
            "letters, digits, '_', '-', '.', not starting with '-' or '.')"
        )


def _duration(value: Any) -> str:
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else float(value.seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _kind(rule: Any) -> str | None:
    """Which of the GcRule oneof fields is set (None: no rule)."""
    if rule is None:
        return None
    pb = type(rule).pb(rule) if hasattr(type(rule), "pb") else rule
    return pb.WhichOneof("rule")  # type: ignore[no-any-return]


def describe_gc_rule(rule: Any) -> str:
    """An admin ``GcRule`` in words: ``none``, ``max_versions=1``, ``max_age=7d``, ..."""
    kind = _kind(rule)
    if kind is None:
        return "none"
    if kind == "max_num_versions":
        return f"max_versions={rule.max_num_versions}"
    if kind == "max_age":
        return f"max_age={_duration(rule.max_age)}"
    parts = rule.intersection.rules if kind == "intersection" else rule.union.rules
    joined = " and " if kind == "intersection" else " or "
    return "(" + joined.join(describe_gc_rule(r) for r in parts) + ")"


def gc_rule_may_drop_latest(rule: Any) -> bool:
    """Whether an admin ``GcRule`` can remove a column's latest version.

    A max-versions rule keeps at least one version; a max-age rule removes
    everything old enough; a union removes what any of its rules would; an
    intersection only what all of them would.
    """
    kind = _kind(rule)
    if kind is None or kind == "max_num_versions":
        return False
    if kind == "max_age":
        return True
    if kind == "union":
        return any(gc_rule_may_drop_latest(r) for r in rule.union.rules)
    rules = list(rule.intersection.rules)
    return bool(rules) and all(gc_rule_may_drop_latest(r) for r in rules)


def _aggregate(value_type: Any) -> str | None:
    if value_type is None:
        return None
    pb = type(value_type).pb(value_type) if hasattr(type(value_type), "pb") else value_type
    if pb.WhichOneof("kind") != "aggregate_type":
        return None
    agg = pb.aggregate_type
    which = (agg.WhichOneof("aggregator") or "aggregate").rstrip("_")
    inner = agg.input_type.WhichOneof("kind") or ""
    return f"{inner.removesuffix('_type')} {which}".strip()


def family_info(name: str, family: Any) -> FamilyInfo:
    """Describe one entry of an admin ``Table.column_families``."""
    rule = family.gc_rule if "gc_rule" in family else None
    value_type = family.value_type if "value_type" in family else None
    return FamilyInfo(
        name=name,
        gc_rule=describe_gc_rule(rule),
        may_drop_latest=gc_rule_may_drop_latest(rule),
        aggregate=_aggregate(value_type),
    )


def record_family_problem(info: FamilyInfo) -> str | None:
    """Why the layout record must not live in this family, or None when it may."""
    if info.aggregate is not None:
        return (
            f"column family {info.name!r} is an aggregate family ({info.aggregate}): it "
            "takes AddToCell/MergeToCell, not the record's SetCell"
        )
    if info.may_drop_latest:
        return (
            f"column family {info.name!r} has the GC rule {info.gc_rule}, which can "
            "collect the layout record and switch the guard off"
        )
    return None


@final
@dataclass(frozen=True, slots=True)
class Placement:
    """Where a record goes: a family, or nowhere with the reason.

    Args:
        family: The family to store the record in (None: do not store it).
        checked: Whether the family's GC rule and type were checked.
        probe: The schema could not be read: try the reserved family, and
            treat a refusal as "the table has no such family".
        reason: Why nothing is stored (``family`` None), or why the family
            could not be checked.
    """

    family: str | None
    checked: bool = True
    probe: bool = False
    reason: str | None = None


def place_record(
    schema: TableSchema | None,
    *,
    family: str | None,
    explicit: bool,
    unreadable: str = "",
) -> Placement:
    """Choose the family a new layout record is stored in.

    Args:
        schema: The table's families (None: the schema could not be read).
        family: The family the caller named (``explicit``), or the one the
            first write names.
        explicit: ``family`` was named for the record (``guard_scheme``,
            ``--family``): store it there or refuse.
        unreadable: Why the schema could not be read (for messages).

    Returns:
        The reserved family when the table has it; otherwise an explicitly
        named family that passes :func:`record_family_problem`; otherwise the
        write's own family when the schema shows it is safe; otherwise
        nothing, with the reason.

    Raises:
        LayoutError: An explicitly named family that cannot hold the record
            (missing, aggregate, or a GC rule that can collect it).
    """
    from .._exceptions import LayoutError

    if explicit and family is not None:
        if schema is None:
            return Placement(family, checked=False, reason=unreadable)
        info = schema.get(family)
        if info is None:
            add = (
                " (saltedtable guard --add-family adds it)"
                if family == RECORD_FAMILY
                else f"; add it, or store the record in {RECORD_FAMILY!r} (guard --add-family)"
            )
            raise LayoutError(
                f"the table has no column family {family!r} for the layout record{add}"
            )
        problem = record_family_problem(info)
        if problem is not None:
            raise LayoutError(
                f"{problem}; store the record in the family {RECORD_FAMILY!r} instead "
                "(saltedtable guard --add-family)"
            )
        return Placement(family)
    if schema is None:
        return Placement(RECORD_FAMILY, checked=False, probe=True, reason=unreadable)
    reserved = schema.get(RECORD_FAMILY)
    if reserved is not None:
        problem = record_family_problem(reserved)
        if problem is None:
            return Placement(RECORD_FAMILY)
        return Placement(None, reason=problem)
    info = schema.get(family) if family is not None else None
    if info is None:
        return Placement(None, reason=f"the table has no column family {RECORD_FAMILY!r}")
    problem = record_family_problem(info)
    if problem is not None:
        return Placement(None, reason=problem)
    return Placement(family)


_AGGREGATES: Final = ("sum", "min", "max", "hll")

#: The longest ``max_age``: a protobuf Duration holds at most 315,576,000,000 seconds
#: (10,000 years of 365.25 days).
MAX_AGE_SECONDS: Final = 315_576_000_000
#: The most ``max_versions``: the field is an int32.
MAX_VERSIONS: Final = 2**31 - 1
_AGE_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_gc_rule(text: str) -> Any:
    """A GC rule from its short form: ``max_age=7d``, ``max_versions=3``, ``A|B`` (union), ``A&B``.

    Ages take ``s``, ``m``, ``h`` or ``d``, from 1s to :data:`MAX_AGE_SECONDS`;
    versions from 1 to :data:`MAX_VERSIONS`. ``none`` (or empty) is no rule.

    Raises:
        ValueError: With the part that could not be read.
    """
    import datetime as dt

    from google.cloud.bigtable_admin_v2 import types as admin_types

    types: Any = admin_types
    text = text.strip()
    if text in ("", "none"):
        return None
    for sep, kind in (("|", "union"), ("&", "intersection")):
        if sep in text:
            rules = [parse_gc_rule(part) for part in text.split(sep)]
            if any(rule is None for rule in rules):
                raise ValueError(f"GC rule {text!r}: an empty part")
            if kind == "union":
                return types.GcRule(union=types.GcRule.Union(rules=rules))
            return types.GcRule(intersection=types.GcRule.Intersection(rules=rules))
    name, _, value = text.partition("=")
    name = name.strip().replace("-", "_")
    value = value.strip()
    if name in ("max_versions", "max_num_versions"):
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
        if not re.fullmatch(r"[0-9]+", value) or not 1 <= int(value) <= MAX_VERSIONS:
            raise ValueError(
                f"GC rule {text!r}: max_versions needs a whole number from 1 to {MAX_VERSIONS}"
            )
        return types.GcRule(max_num_versions=int(value))
    if name == "max_age":
        match = re.fullmatch(r"([0-9]+)([smhd])", value)
        seconds = 0 if match is None else int(match[1]) * _AGE_UNITS[match[2]]
        if not 1 <= seconds <= MAX_AGE_SECONDS:
            raise ValueError(
                f"GC rule {text!r}: max_age needs a number and s, m, h or d (7d), from 1s "
                f"to {MAX_AGE_SECONDS}s (3652500d, about 10,000 years: a Duration's limit)"
            )
        return types.GcRule(max_age=dt.timedelta(seconds=seconds))
    raise ValueError(
        f"GC rule {text!r}: expected max_age=DURATION, max_versions=N, none, "
        "or rules joined by | (union) or & (intersection)"
    )


def parse_family(spec: str) -> tuple[str, Any]:
    """``NAME[:RULE]`` or ``NAME:agg=sum|min|max|hll``: a family id and its admin ``ColumnFamily``.

    Raises:
        ValueError: A bad family id or rule, naming it.
    """
    from google.cloud.bigtable_admin_v2 import types as admin_types

    types: Any = admin_types
    name, _, rule = spec.partition(":")
    check_family_name(name)
    rule = rule.strip()
    if rule.startswith("agg="):
        kind = rule.removeprefix("agg=")
        if kind not in _AGGREGATES:
            raise ValueError(
                f"family {name!r}: aggregate {kind!r} is not one of {', '.join(_AGGREGATES)}"
            )
        agg = types.Type.Aggregate
        if kind == "hll":
            aggregate = agg(
                input_type=types.Type(int64_type=types.Type.Int64()),
                hllpp_unique_count=agg.HyperLogLogPlusPlusUniqueCount(),
            )
        else:
            aggregate = agg(
                input_type=types.Type(int64_type=types.Type.Int64()),
                **{kind: getattr(agg, kind.capitalize())()},
            )
        return name, types.ColumnFamily(value_type=types.Type(aggregate_type=aggregate))
    try:
        gc_rule = parse_gc_rule(rule)
    except ValueError as exc:
        raise ValueError(f"family {name!r}: {exc}") from None
    return name, types.ColumnFamily() if gc_rule is None else types.ColumnFamily(gc_rule=gc_rule)
