"""Layout epochs (pure): validation, routing, attribution of shared prefixes, range planning.

The central property: for every epoch list and every key, the key has exactly one
physical row, that row is attributed back to the key's epoch, and the key's physical
keys under every *other* epoch are hidden, so a prefix two epochs share (``05-`` for
N=16 and N=64) never shows a row twice.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import (
    CutoffError,
    CutoffPolicy,
    Epoch,
    Epochs,
    KeyRange,
    Layout,
    QueryPlanError,
    RowKeyError,
    SaltScheme,
    SaltSchemeError,
    epoch_field,
    fields,
    view_row_prefixes,
)
from saltedtable._guard.record import describe_layout
from saltedtable._scheme.epochs import instant_of
from saltedtable._scheme.salt import SCHEME_ROW_KEY, prefix_end

PROPERTY = settings(max_examples=150, deadline=None)

T0 = 1_704_067_200_000  # 2024-01-01, in ms
DAY = 86_400_000
READER = epoch_field("ms", b"#", 1, 13)


def ms_key(lead: bytes, ms: int) -> bytes:
    """A ``lead#<13-digit ms>`` key."""
    return lead + b"#%013d" % ms


def at(ms: int) -> int:
    """Microseconds of a time in milliseconds."""
    return ms * 1000


def three(legacy: bool = True, **kw: object) -> Epochs:
    """unsalted (or N=8), N=16 from T0, N=64 from T0 + 1 day."""
    first = Epoch(None, None if legacy else SaltScheme(8))
    return Epochs(
        (first, Epoch(at(T0), SaltScheme(16)), Epoch(at(T0 + DAY), SaltScheme(64))),
        READER,
        **kw,  # type: ignore[arg-type]
    )


# -- validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("epochs", "words"),
    [
        ((), "non-empty"),
        ((Epoch(0, SaltScheme(8)),), "minus infinity"),
        ((Epoch(None, SaltScheme(8)), Epoch(None, SaltScheme(16))), "only the first"),
        (
            (Epoch(None, None), Epoch(5, SaltScheme(8)), Epoch(5, SaltScheme(16))),
            "must be in order",
        ),
        (
            (Epoch(None, None), Epoch(9, SaltScheme(8)), Epoch(5, SaltScheme(16))),
            "must be in order",
        ),
        ((Epoch(None, SaltScheme(8)), Epoch(5, None)), "only the first epoch may be"),
        ((Epoch(None, SaltScheme(8)), Epoch(5, SaltScheme(8))), "repeats"),
        ((Epoch(None, None),), "at least one salted"),
        ((Epoch(None, SaltScheme(8)), Epoch(5, SaltScheme(16, hash="farmhash"))), "formats"),
        ((Epoch(None, SaltScheme(8)), Epoch(5, SaltScheme(16, separator=b"_"))), "formats"),
        ((Epoch(None, SaltScheme(8)), Epoch(5, SaltScheme(16, marker=b"~"))), "formats"),
        (
            (Epoch(None, SaltScheme(8, marker=b"~")), Epoch(5, SaltScheme(16, marker=b"~a"))),
            "formats",
        ),
        ((Epoch(None, SaltScheme(8)), Epoch(5, SaltScheme(16, hash="phoenix"))), "formats"),
        ((Epoch(None, SaltScheme(256, hash="phoenix")),), "reserved row"),
    ],
)
def test_lists_that_break_a_rule_are_refused_naming_it(
    epochs: tuple[Epoch, ...], words: str
) -> None:
    """Out of order, unsalted later, repeated, other formats, the reserved row: refused."""
    with pytest.raises(SaltSchemeError, match=words):
        Epochs(epochs, READER)


def test_disjoint_markers_may_change_the_format() -> None:
    """Two non-empty markers neither of which starts the other: hash and separator may change."""
    epochs = Epochs(
        (
            Epoch(None, SaltScheme(8, marker=b"a")),
            Epoch(at(T0), SaltScheme(16, hash="farmhash", separator=b"_", marker=b"b")),
        ),
        READER,
    )
    assert epochs.locate(ms_key(b"u", T0))[2].startswith(b"b")


def test_more_than_one_epoch_needs_a_reader_and_a_known_unreadable() -> None:
    """The reader picks the epoch: without one, or with an unknown fallback, refused."""
    with pytest.raises(SaltSchemeError, match="key-time reader"):
        Epochs((Epoch(None, None), Epoch(1, SaltScheme(8))))
    with pytest.raises(SaltSchemeError, match="unreadable"):
        three(unreadable="legacy")
    with pytest.raises(SaltSchemeError, match="min_lead"):
        three(min_lead=0)


def test_a_key_part_may_change_across_epochs() -> None:
    """Key parts only choose buckets: each epoch hashes with its own."""
    epochs = Epochs(
        (Epoch(None, SaltScheme(16)), Epoch(at(T0), SaltScheme(16, key_part=fields(1)))), READER
    )
    a, b = ms_key(b"user", T0), ms_key(b"user", T0 + 5)
    assert epochs.locate(a)[1] == epochs.locate(b)[1] == SaltScheme(16).bucket_of(b"user")


# -- routing ---------------------------------------------------------------------


def test_each_key_goes_to_the_epoch_its_time_selects() -> None:
    """Boundaries belong to the later epoch; each epoch salts with its own scheme."""
    epochs = three()
    assert epochs.locate(ms_key(b"d", T0 - 1)) == (0, None, ms_key(b"d", T0 - 1))
    key = ms_key(b"d", T0)
    assert epochs.locate(key) == (1, SaltScheme(16).bucket_of(key), SaltScheme(16).salt_key(key))
    key = ms_key(b"d", T0 + DAY)
    assert epochs.locate(key)[0] == 2
    assert epochs.locate(key)[2] == SaltScheme(64).salt_key(key)


def test_unreadable_keys_follow_the_policy() -> None:
    """error: refused with CutoffError; first / last: that epoch."""
    with pytest.raises(CutoffError, match="epoch"):
        three().locate(b"meta")
    assert three(unreadable="first").locate(b"meta") == (0, None, b"meta")
    assert three(unreadable="last").locate(b"meta")[2] == SaltScheme(64).salt_key(b"meta")


def test_unsalted_keys_inside_a_newer_epochs_prefix_are_refused() -> None:
    """A legacy key that looks salted by any epoch, or the reserved row, cannot be stored."""
    epochs = three(unreadable="first")
    with pytest.raises(RowKeyError, match="salt prefix b'05-' of epoch 1"):
        epochs.locate(b"05-" + ms_key(b"x", T0 - 5))
    with pytest.raises(RowKeyError, match="reserved"):
        epochs.locate(SCHEME_ROW_KEY)
    with pytest.raises(RowKeyError, match="empty"):
        epochs.locate(b"")


# -- attribution: the central property --------------------------------------------

SCHEME_POOL = [SaltScheme(n) for n in (1, 3, 8, 10, 16, 64, 100)]
LEADS = [b"dev0", b"dev1", b"dev12", b"x"]


@st.composite
def epoch_lists(draw: st.DrawFn) -> Epochs:
    """1-4 epochs of compatible crc32 schemes (sharing prefixes or not), maybe unsalted first."""
    legacy = draw(st.booleans())
    n = draw(st.integers(1, 4))
    schemes: list[SaltScheme | None] = [None] if legacy else []
    while len(schemes) < n + legacy:
        s = draw(st.sampled_from(SCHEME_POOL))
        if not schemes or s != schemes[-1]:
            schemes.append(s)
    starts = sorted(draw(st.sets(st.integers(-5, 5), min_size=len(schemes) - 1, max_size=9)))
    starts = starts[: len(schemes) - 1]
    epochs = [Epoch(None, schemes[0])]
    epochs += [Epoch(at(T0 + s * 1000), sc) for s, sc in zip(starts, schemes[1:], strict=True)]
    unreadable = draw(st.sampled_from(["error", "first", "last"]))
    return Epochs(tuple(epochs), READER, unreadable)  # type: ignore[arg-type]


KEYS = st.one_of(
    st.builds(ms_key, st.sampled_from(LEADS), st.integers(T0 - 7000, T0 + 7000)),
    st.sampled_from([b"meta", b"dev1", b"05-x"]),
)


@PROPERTY
@given(epoch_lists(), KEYS)
def test_every_key_has_one_physical_row_attributed_back_to_its_epoch(
    epochs: Epochs, key: bytes
) -> None:
    """locate -> owner is the identity; the key's rows under other epochs' prefixes are hidden."""
    try:
        epoch, _, physical = epochs.locate(key)
    except (CutoffError, RowKeyError):
        return  # refused keys have no row to attribute
    assert epochs.owner(physical) == (epoch, key)
    assert epochs.logical_of(physical) == key
    prefix = physical[: len(physical) - len(key)]
    assert epochs.hidden_under(prefix, key) is None
    # Every other physical place this key could have been written (by another epoch,
    # or unsalted) is attributed to no epoch: at most one row shows per logical key.
    elsewhere = {e.scheme.salt_key(key) for e in epochs if e.scheme is not None}
    if epochs.has_legacy and epochs.prefix_of(key) is None:
        elsewhere.add(key)
    for other in elsewhere - {physical}:
        assert epochs.owner(other) is None, (other, epochs.why_hidden(other))


@PROPERTY
@given(epoch_lists(), st.lists(KEYS, max_size=12), st.data())
def test_a_range_reads_every_visible_row_once(
    epochs: Epochs, keys: list[bytes], data: st.DataObject
) -> None:
    """touches(range): each prefix once, each range once, and every key of the range inside."""
    bounds = st.one_of(st.just(b""), st.sampled_from([*keys, b"dev1", b"dev12#", b"x#"]))
    lo, hi = sorted([data.draw(bounds), data.draw(bounds)])
    rng = KeyRange(lo, data.draw(st.booleans()), hi, data.draw(st.booleans()))
    if not hi:
        rng = KeyRange(lo, rng.start_closed, b"", False)
    touches = epochs.touches(rng)
    prefixes = [t.prefix for t in touches]
    assert prefixes == sorted(set(prefixes))
    for t in touches:
        assert len(set(t.ranges)) == len(t.ranges)
    for key in keys:
        if not _in(rng, key):
            continue
        try:
            _, _, physical = epochs.locate(key)
        except (CutoffError, RowKeyError):
            continue
        prefix = physical[: len(physical) - len(key)]
        touch = next((t for t in touches if t.prefix == prefix), None)
        assert touch is not None, (key, prefix)
        assert any(_in(r, physical) for r in touch.ranges), (key, touch)


def _in(rng: KeyRange, key: bytes) -> bool:
    if rng.start and (key < rng.start or (key == rng.start and not rng.start_closed)):
        return False
    return not rng.end or key < rng.end or (key == rng.end and rng.end_closed)


def test_a_shared_prefix_is_read_once_for_both_epochs() -> None:
    """N=16 and N=64 share 00- .. 15-: a whole-table read names 64 + 8 prefixes, not 16 + 64 + 8."""
    epochs = three(legacy=False)
    touches = epochs.touches(KeyRange())
    assert len(touches) == 64 + 8  # 16 shared with N=64; N=8's one-digit prefixes apart
    shared = next(t for t in touches if t.prefix == b"05-")
    assert shared.epochs == (1, 2)
    assert shared.ranges == (KeyRange(b"05-", True, prefix_end(b"05-"), False),)


def test_a_row_under_a_shared_prefix_in_the_wrong_bucket_is_hidden() -> None:
    """Right prefix width, right time, wrong bucket for its epoch: attributed to no epoch."""
    epochs = three()
    key = ms_key(b"d", T0 + DAY + 1)  # epoch 2 (N=64)
    bucket = SaltScheme(64).bucket_of(key)
    wrong = (bucket + 1) % 16
    physical = b"%02d-" % wrong + key
    assert epochs.owner(physical) is None
    assert "bucket" in (epochs.why_hidden(physical) or "")


def test_a_time_range_reads_only_the_epochs_it_can_touch() -> None:
    """A range bounded in time inside one epoch reads that epoch's buckets only."""
    epochs = three(legacy=False)
    one_day = KeyRange(ms_key(b"d", T0 + 10), True, ms_key(b"d", T0 + 20), True)
    assert epochs.epochs_of_range(one_day) == (1,)
    across = KeyRange(ms_key(b"d", T0 - 10), True, ms_key(b"d", T0 + DAY), True)
    assert epochs.epochs_of_range(across) == (0, 1, 2)
    assert three(legacy=True, unreadable="first").epochs_of_range(one_day) == (0, 1)
    assert three(legacy=True, unreadable="last").epochs_of_range(one_day) == (1, 2)


# -- today's layouts as epochs ----------------------------------------------------

CUT = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize("unreadable", ["error", "legacy", "salted"])
def test_todays_layouts_round_trip_through_epochs(unreadable: str) -> None:
    """Layout(scheme) and Layout(scheme, cutoff) are one and two epochs, and come back equal."""
    plain = Layout(SaltScheme(8))
    assert plain.as_epochs() == Epochs((Epoch(None, SaltScheme(8)),))
    assert Layout.of_epochs(plain.as_epochs()) == plain
    pol = CutoffPolicy(CUT, READER, unreadable=unreadable)  # type: ignore[arg-type]
    cut = Layout(SaltScheme(8, marker=b"~"), pol)
    assert len(cut.as_epochs()) == 2
    assert cut.as_epochs().epochs[1].start == pol.cutoff_micros
    back = Layout.of_epochs(cut.as_epochs())
    assert back == cut
    assert back.cutoff is not None
    assert back.cutoff.cutoff == CUT
    assert back.epochs is None


def test_a_plain_layout_keeps_its_schemes_salter() -> None:
    """The write path of a one-scheme layout is the scheme's own salter, nothing in between."""
    salter = Layout(SaltScheme(8)).salter()
    assert salter.__qualname__ == SaltScheme(8).salter().__qualname__


def test_a_layout_with_epochs_is_made_by_of_epochs_only() -> None:
    """Epochs beside a cutoff, a scheme that is not the newest, or today's shape: refused."""
    epochs = three()
    with pytest.raises(SaltSchemeError, match="of_epochs"):
        Layout(SaltScheme(16), None, epochs)
    with pytest.raises(SaltSchemeError, match="of_epochs"):
        Layout(SaltScheme(8), None, Epochs((Epoch(None, SaltScheme(8)),)))
    layout = Layout.of_epochs(epochs)
    assert layout.scheme == SaltScheme(64)
    assert layout.epochs == epochs
    assert layout.schemes == (SaltScheme(16), SaltScheme(64))


CUTOFF_KEYS = st.one_of(
    st.builds(ms_key, st.sampled_from(LEADS), st.integers(T0 - 3000, T0 + 3000)),
    st.sampled_from([b"meta", b"dev1"]),
)


@PROPERTY
@given(CUTOFF_KEYS, st.sampled_from(["error", "legacy", "salted"]))
def test_a_cutoff_in_epoch_form_routes_and_hides_as_the_cutoff_does(
    key: bytes, unreadable: str
) -> None:
    """The general epoch rules on a cutoff's list agree with the cutoff's own rules."""
    pol = CutoffPolicy(instant_of(at(T0)), READER, unreadable=unreadable)  # type: ignore[arg-type]
    cut = Layout(SaltScheme(8, marker=b"~"), pol)
    epochs = cut.as_epochs()
    try:
        expected = cut.locate(key)
    except CutoffError:
        with pytest.raises(CutoffError):
            epochs.locate(key)
    else:
        assert epochs.locate(key)[1:] == expected
    assert (cut.stray_reason(key) is None) == (epochs.hidden_under(b"", key) is None)
    prefix = cut.scheme.prefix(cut.scheme.bucket_of(key))
    assert (cut.salted_stray_reason(key) is None) == (epochs.hidden_under(prefix, key) is None)
    rng = KeyRange(ms_key(b"d", T0 - 5), True, ms_key(b"d", T0 + 5), False)
    legacy, salted = pol.sides_of_range(rng.start, rng.end, rng.end_closed)
    assert epochs.epochs_of_range(rng) == tuple(i for i, s in ((0, legacy), (1, salted)) if s)


def test_a_view_of_a_layout_with_epochs_covers_every_epochs_buckets() -> None:
    """view_row_prefixes(layout): each prefix of every epoch once, and the unsalted rows."""
    layout = Layout.of_epochs(three(legacy=True, unreadable="first"))
    got = view_row_prefixes(layout, b"dev1#")
    want = {b"%02d-dev1#" % b for b in range(64)} | {b"dev1#", SCHEME_ROW_KEY}
    assert got == sorted(want)
    assert len(got) == 64 + 2  # N=16's prefixes are N=64's first sixteen
    salted_only = Layout.of_epochs(three(legacy=False))
    assert b"dev1#" not in view_row_prefixes(salted_only, b"dev1#")
    assert b"3-dev1#" in view_row_prefixes(salted_only, b"dev1#")
    with pytest.raises(QueryPlanError, match="begins the salt prefix"):
        view_row_prefixes(layout, b"1")
    assert view_row_prefixes(Layout(SaltScheme(8)), b"a") == view_row_prefixes(SaltScheme(8), b"a")


DOCS = Path(__file__).resolve().parents[3] / "docs" / "epochs.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)


def test_the_docs_python_sample_runs() -> None:
    """docs/epochs.md's Python sample runs as written."""
    (sample,) = _blocks("python")
    exec(compile(sample, str(DOCS), "exec"), {})


def test_the_docs_record_is_the_record_stored() -> None:
    """docs/epochs.md's JSON record is what describe_layout stores for its layout."""
    (shown,) = _blocks("json")
    epochs = Epochs(
        (
            Epoch(None, None),
            Epoch.at(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), SaltScheme(16)),
            Epoch.at(dt.datetime(2026, 9, 1, tzinfo=dt.UTC), SaltScheme(64)),
        ),
        epoch_field("ms", index=1, digits=13),
        min_lead=300.0,
    )
    layout = Layout.of_epochs(epochs)
    stored = describe_layout(layout.scheme, layout.cutoff, epochs=layout.epochs)
    assert json.loads(shown) == json.loads(stored.encode())


def test_epochs_pickle_as_their_arguments_and_name_the_package() -> None:
    """Beam ships layouts to workers: a pickled layout with epochs comes back equal."""
    layout = Layout.of_epochs(three())
    back = pickle.loads(pickle.dumps(layout))
    assert back == layout
    assert back.epochs is not None
    assert back.epochs.locate(ms_key(b"d", T0 + DAY)) == layout.epochs.locate(
        ms_key(b"d", T0 + DAY)
    )  # type: ignore[union-attr]
    assert Epochs.__module__ == Epoch.__module__ == "saltedtable"


def test_a_list_extends_the_lists_it_appends_to_and_nothing_else() -> None:
    """Plain and cutoff layouts are extended by appending; a changed history is not."""
    plain = Layout(SaltScheme(8)).as_epochs()
    with pytest.raises(SaltSchemeError, match="reader"):
        plain.appended(Epoch(at(T0), SaltScheme(16)))  # one epoch: no reader yet
    grown = plain.appended(Epoch(at(T0), SaltScheme(16)), timestamp=READER, min_lead=300.0)
    assert (grown.timestamp, grown.unreadable, grown.min_lead) == (READER, "error", 300.0)
    assert grown.extends(plain)
    assert not plain.extends(grown)
    assert not grown.extends(grown)
    more = grown.appended(Epoch(at(T0 + DAY), SaltScheme(64)))
    assert more.extends(grown)
    assert more.extends(plain)
    other_reader = Epochs(
        more.epochs,
        epoch_field(
            "ms",
            b"#",
            1,
            13,
        ),
        "first",
    )
    assert not other_reader.extends(grown)
    moved = Epochs((plain.epochs[0], Epoch(at(T0 + 1), SaltScheme(16))), READER)
    assert not more.extends(moved)
    pol = CutoffPolicy(instant_of(at(T0)), READER)
    cut = Layout(SaltScheme(16), pol).as_epochs()
    assert cut.appended(Epoch(at(T0 + DAY), SaltScheme(64))).extends(cut)
