"""The reversed chunk merge against the client's forward merge, mirrored; the reversed resume.

A reversed stream is a forward one seen in a mirror: map every key of a stream
through an order-reversing bijection of its keys, and the reversed merge of the
mirrored stream must give the client's forward outcome (rows, error, metric and
resume state) mirrored, the error's word "increasing" read as "decreasing".
"""

from __future__ import annotations

import asyncio
from typing import Any

from google.cloud.bigtable.data._async._read_rows import _ReadRowsOperationAsync
from google.cloud.bigtable_v2.types import RowRange, RowSet
from hypothesis import given
from hypothesis import strategies as st

from saltedtable._async.chunks import (
    REVERSE_SCANS_HEADER,
    merge_chunks,
    reverse_scans_unavailable,
    revise_reversed_rowset,
)
from saltedtable._sync_autogen.chunks import merge_chunks as merge_chunks_sync
from tests.fakes import FakeTable
from tests.unit._async.test_chunks import (
    LAST,
    LEAVE,
    PB,
    PROPERTY,
    REMAINING,
    Outcome,
    _client,
    _run,
    _run_sync,
    chunks,
    responses,
    valid_responses,
)


def _mirror_of(resp: list[Any], last: bytes | None) -> dict[bytes, bytes]:
    """An order-reversing bijection of every non-empty key the stream (and ``last``) names."""
    keys = {c.row_key for r in resp for c in r.chunks if c.row_key}
    keys |= {r.last_scanned_row_key for r in resp if r.last_scanned_row_key}
    if last:
        keys.add(last)
    ordered = sorted(keys)
    return dict(zip(ordered, reversed(ordered), strict=True))


def _mirrored(resp: list[Any], m: dict[bytes, bytes]) -> list[Any]:
    out = []
    for r in resp:
        copy = PB()
        copy.CopyFrom(r)
        if copy.last_scanned_row_key:
            copy.last_scanned_row_key = m[copy.last_scanned_row_key]
        for c in copy.chunks:
            if c.row_key:
                c.row_key = m[c.row_key]
        out.append(copy)
    return out


def _key(m: dict[bytes, bytes], key: bytes | None) -> bytes | None:
    return m.get(key, key) if key else key


def _mirror_outcome(o: Outcome, m: dict[bytes, bytes]) -> Outcome:
    rows = [
        (_key(m, row[0]), tuple((c[0], _key(m, c[1]), *c[2:]) for c in row[1])) for row in o.rows
    ]
    error = o.error
    if error is not None:
        error = (error[0], error[1].replace("increasing", "decreasing (a reversed scan)"))
    return Outcome(rows, error, o.metric, _key(m, o.last), o.remaining, o.blocking_updates)


def _reverse(op: Any, stream: Any) -> Any:
    return merge_chunks(op, stream, True)


def _reverse_sync(op: Any, stream: Any) -> Any:
    return merge_chunks_sync(op, stream, True)


def _compare_mirrored(
    resp: list[Any], last: bytes | None, remaining: int | None, fail: bool, leave: int | None
) -> None:
    m = _mirror_of(resp, last)
    args = {"last": last, "remaining": remaining, "fail": fail, "leave_after": leave}
    expected = asyncio.run(_run(_client, resp, **args))
    mirrored = _mirrored(resp, m)
    margs = {**args, "last": _key(m, last)}
    got = asyncio.run(_run(_reverse, mirrored, **margs))
    assert got == _mirror_outcome(expected, m)
    assert _run_sync(_reverse_sync, mirrored, **margs) == got


@PROPERTY
@given(responses(chunks()), LAST, REMAINING, st.booleans(), LEAVE)
def test_random_reversed_chunks_give_the_clients_mirrored_outcome(
    resp: list[Any], last: bytes | None, remaining: int | None, fail: bool, leave: int | None
) -> None:
    """Random chunks, mirrored: the reversed merge is the client's forward merge, mirrored."""
    _compare_mirrored(resp, last, remaining, fail, leave)


@PROPERTY
@given(valid_responses(), LAST, REMAINING, st.booleans(), LEAVE)
def test_server_like_reversed_streams_give_the_clients_mirrored_outcome(
    resp: list[Any], last: bytes | None, remaining: int | None, fail: bool, leave: int | None
) -> None:
    """Server-like streams (some broken or cut short), mirrored: the same outcome, mirrored."""
    _compare_mirrored(resp, last, remaining, fail, leave)


def test_increasing_keys_in_a_reversed_stream_are_refused() -> None:
    """Two rows in ascending order: the forward merge takes them, the reversed one refuses."""
    resp = [PB(chunks=[_row_chunk(b"a"), _row_chunk(b"b")])]
    forward = asyncio.run(
        _run(merge_chunks, resp, last=None, remaining=None, fail=False, leave_after=None)
    )
    assert [r[0] for r in forward.rows] == [b"a", b"b"]
    assert forward.error is None
    back = asyncio.run(
        _run(_reverse, resp, last=None, remaining=None, fail=False, leave_after=None)
    )
    assert [r[0] for r in back.rows] == [b"a"]
    assert back.error is not None
    assert back.error[1].endswith("row keys should be strictly decreasing (a reversed scan)")


def _row_chunk(key: bytes) -> Any:
    c = PB.CellChunk(row_key=key, value=b"v", commit_row=True)
    c.family_name.value = "f"
    c.qualifier.value = b"q"
    return c


def test_the_header_is_feature_flags_asking_for_reverse_scans() -> None:
    """The header the server reads: base64 of a FeatureFlags message with reverse_scans set."""
    import base64

    from google.cloud.bigtable_v2.types import FeatureFlags

    name, value = REVERSE_SCANS_HEADER
    assert name == "bigtable-features"
    flags = FeatureFlags.deserialize(base64.urlsafe_b64decode(value))
    assert flags.reverse_scans
    assert value == "CAE="


# -- resuming a reversed read ------------------------------------------------------------------


def _model_keys(row_set: RowSet) -> set[bytes]:
    """The keys of a small key space (b'a'..b'h', two long) a row set names."""
    space = {bytes([x, y]) for x in b"abcdefgh" for y in b"abcdefgh"} | {
        bytes([x]) for x in b"abcdefgh"
    }
    if not row_set.row_keys and not row_set.row_ranges:
        return space
    out = set(row_set.row_keys) & space | set()
    out |= {k for k in row_set.row_keys}
    for r in row_set.row_ranges:
        for k in space:
            if "start_key_closed" in r and k < r.start_key_closed:
                continue
            if "start_key_open" in r and k <= r.start_key_open:
                continue
            if "end_key_closed" in r and k > r.end_key_closed:
                continue
            if "end_key_open" in r and k >= r.end_key_open:
                continue
            out.add(k)
    return out


KEY = st.sampled_from([b"a", b"b", b"bc", b"c", b"d", b"dd", b"e", b"g", b"h"])


@st.composite
def row_sets(draw: st.DrawFn) -> RowSet:
    ranges = []
    for _ in range(draw(st.integers(0, 3))):
        fields: dict[str, bytes] = {}
        start = draw(st.one_of(st.none(), KEY))
        end = draw(st.one_of(st.none(), KEY))
        if start is not None:
            fields["start_key_closed" if draw(st.booleans()) else "start_key_open"] = start
        if end is not None:
            fields["end_key_closed" if draw(st.booleans()) else "end_key_open"] = end
        ranges.append(RowRange(**fields))
    keys = draw(st.lists(KEY, max_size=3))
    return RowSet(row_keys=keys, row_ranges=ranges)


@given(row_sets(), KEY)
def test_a_reversed_read_resumes_below_the_last_key(row_set: RowSet, last: bytes) -> None:
    """The revised row set names exactly the keys of the old one below the last key read."""
    left = {k for k in _model_keys(row_set) if k < last}
    revised = revise_reversed_rowset(row_set, last)
    if revised is None:
        assert not left
    else:
        assert _model_keys(revised) == left


def test_the_clients_own_revision_would_resume_above_the_last_key() -> None:
    """Why the reversed read revises its own way: the client's keeps what lies above."""
    whole = RowSet()
    clients = _ReadRowsOperationAsync._revise_request_rowset(whole, b"m")
    assert clients.row_ranges[0].start_key_open == b"m"
    ours = revise_reversed_rowset(whole, b"m")
    assert ours.row_ranges[0].end_key_open == b"m"
    assert not ours.row_ranges[0].start_key_open


def test_a_table_that_is_not_the_clients_cannot_read_backwards() -> None:
    reason = reverse_scans_unavailable(FakeTable())
    assert reason is not None
    assert "FakeTable, whose read_rows_stream is its own" in reason
