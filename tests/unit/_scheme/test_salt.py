"""SaltScheme against vectors the JDK computed (tests/vectors), its properties and its errors."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saltedtable import RowKeyError, SaltScheme, SaltSchemeError, before_last, fields

REPO = Path(__file__).resolve().parents[3]
VECTORS_FILE = REPO / "tests" / "vectors" / "salt_vectors.json"
VECTORS: dict[str, Any] = json.loads(VECTORS_FILE.read_text())
ALL_HASHES = ("crc32", "crc32c", "farmhash", "java", "phoenix")
DEFAULT_HASHES = ("crc32", "crc32c", "farmhash")
SOME_NS = (1, 2, 3, 7, 10, 16, 100, 256, 1000, 4096)
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)


@cache
def scheme(
    buckets: int,
    hash: str = "crc32",
    key_part: Callable[[bytes], bytes] | None = None,
) -> SaltScheme:
    """One SaltScheme per configuration: building a big one is not free."""
    return SaltScheme(buckets, hash=hash, key_part=key_part)


def vectors(*, utf8: bool | None = None) -> list[dict[str, Any]]:
    """The JDK vectors, optionally only the valid (or only the invalid) UTF-8 keys."""
    return [v for v in VECTORS["vectors"] if utf8 is None or v["utf8"] is utf8]


def key_of(vector: dict[str, Any]) -> bytes:
    return bytes.fromhex(vector["key_hex"])


def vector_for(key: bytes) -> dict[str, Any]:
    (found,) = (v for v in VECTORS["vectors"] if v["key_hex"] == key.hex())
    return found


def check_all(failures: list[str]) -> None:
    assert not failures, f"{len(failures)} vector(s) disagree, first ones:\n" + "\n".join(
        failures[:10]
    )


# -- fixed vectors from the JDK ------------------------------------------------------------------


def test_vector_file_covers_the_edge_cases() -> None:
    """The vector file holds the keys the edge-case tests below rely on."""
    labels = {v["label"] for v in vectors()}
    assert "string hashCode == Integer.MIN_VALUE (searched)" in labels
    assert "Arrays.hashCode == Integer.MIN_VALUE (searched)" in labels
    assert any(v["java_hash"] == -(2**31) for v in vectors())
    assert any(v["arrays_hash"] == -(2**31) for v in vectors())
    assert any(not v["utf8"] for v in vectors())
    assert any(len(key_of(v)) > 3000 for v in vectors())
    assert any("f09f9880" in v["key_hex"] for v in vectors(utf8=True))  # U+1F600, a surrogate pair
    assert VECTORS["farmhash_source"].startswith("Guava")


@pytest.mark.parametrize("n", VECTORS["java_ns"])
def test_java_matches_the_bigtable_sample(n: int) -> None:
    """hash="java" gives String.hashCode() % N + "-" + key as the JDK does, sign included."""
    s = scheme(n, "java")
    failures = []
    for v in vectors(utf8=True):
        key = key_of(v)
        want = v["java"][str(n)]
        prefix = want["prefix"].encode()
        salted = s.salt_key(key)
        if salted != prefix + key or s.bucket_of(key) != int(want["prefix"][:-1]):
            failures.append(f"{key!r}: got {salted[:12]!r}..., JDK {prefix!r}")
        if "salted_hex" in want and salted != bytes.fromhex(want["salted_hex"]):
            failures.append(f"{key!r}: got {salted!r}, JDK {want['salted_hex']}")
        if s.unsalt_key(salted) != key:
            failures.append(f"{key!r}: unsalt_key({salted[:12]!r}...) is not the key")
    check_all(failures)


@pytest.mark.parametrize("n", VECTORS["java_ns"])
def test_java_before_last_matches_the_bigtable_sample(n: int) -> None:
    """hash="java" with before_last(b"-") hashes rowKey.substring(0, rowKey.lastIndexOf("-"))."""
    s = scheme(n, "java", before_last(b"-"))
    failures = []
    checked = 0
    for v in vectors(utf8=True):
        key = key_of(v)
        partial = v["java_before_last"]
        if partial is None:
            continue
        checked += 1
        want = partial["salts"][str(n)]
        prefix = want["prefix"].encode()
        salted = s.salt_key(key)
        if salted != prefix + key or s.bucket_of(key) != int(want["prefix"][:-1]):
            failures.append(f"{key!r}: got {salted[:12]!r}..., JDK {prefix!r}")
        if "salted_hex" in want and salted != bytes.fromhex(want["salted_hex"]):
            failures.append(f"{key!r}: got {salted!r}, JDK {want['salted_hex']}")
        if s.unsalt_key(salted) != key:
            failures.append(f"{key!r}: unsalt_key({salted[:12]!r}...) is not the key")
    assert checked > 50
    check_all(failures)


@pytest.mark.parametrize("n", VECTORS["phoenix_ns"])
def test_phoenix_matches_arrays_hashcode(n: int) -> None:
    """hash="phoenix" prepends the byte Math.abs(Arrays.hashCode(bytes) % N), no separator."""
    s = scheme(n, "phoenix")
    failures = []
    for v in vectors():
        key = key_of(v)
        salt = v["phoenix"][str(n)]
        salted = s.salt_key(key)
        if salted != bytes((salt,)) + key or s.bucket_of(key) != salt:
            failures.append(f"{key!r}: got salt {salted[0]}, JDK {salt}")
        if s.unsalt_key(salted) != key:
            failures.append(f"{key!r}: unsalt_key is not the key")
    check_all(failures)


@pytest.mark.parametrize("hash_name", DEFAULT_HASHES)
@pytest.mark.parametrize("n", VECTORS["default_ns"])
def test_default_format_matches_java(hash_name: str, n: int) -> None:
    """crc32, crc32c and farmhash give the JDK's / Guava's hash mod N as a zero-padded prefix."""
    s = scheme(n, hash_name)
    failures = []
    for v in vectors():
        key = key_of(v)
        prefix = v[f"{hash_name}_prefix"][str(n)].encode()
        salted = s.salt_key(key)
        if salted != prefix + key or s.bucket_of(key) != v[hash_name] % n:
            failures.append(f"{key!r}: got {salted[:8]!r}..., Java {prefix!r}")
        if s.unsalt_key(salted) != key:
            failures.append(f"{key!r}: unsalt_key is not the key")
    check_all(failures)


def test_java_negative_prefix() -> None:
    """The sample's own key goes to the negative bucket -3 for N=7, written b"-3-"."""
    s = scheme(7, "java")
    assert vector_for(b"user123-site-1700000000")["java"]["7"]["prefix"] == "-3-"
    assert s.bucket_of("user123-site-1700000000") == -3
    assert s.salt_key("user123-site-1700000000") == b"-3-user123-site-1700000000"
    assert s.unsalt_key(b"-3-user123-site-1700000000") == b"user123-site-1700000000"
    assert b"-3-" in s.prefixes


def test_java_hashcode_min_value() -> None:
    """A key hashing to Integer.MIN_VALUE keeps Java's signed remainder (-8 for 10, 0 for 16)."""
    for key in (b"polygenelubricants", b"alxexlnb"):
        assert vector_for(key)["java_hash"] == -(2**31)
        assert scheme(10, "java").salt_key(key) == b"-8-" + key
        assert scheme(16, "java").salt_key(key) == b"0-" + key
        assert scheme(7, "java").salt_key(key) == b"-2-" + key
    assert scheme(10, "java", before_last()).salt_key(b"alxexlnb-tail") == b"-8-alxexlnb-tail"


def test_phoenix_arrays_hashcode_min_value() -> None:
    """A key with Arrays.hashCode == Integer.MIN_VALUE still gets a non-negative salt byte."""
    for key in (b"aedhssxo", bytes.fromhex("808099f2eff3e9eb")):
        assert vector_for(key)["arrays_hash"] == -(2**31)
        assert scheme(7, "phoenix").salt_key(key) == b"\x02" + key
        assert scheme(10, "phoenix").salt_key(key) == b"\x08" + key
        assert scheme(256, "phoenix").salt_key(key) == b"\x00" + key


# -- what the schemes match outside Python (docs/schemes.md) ---------------------

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _sql_mod(x: int, y: int) -> int:
    """GoogleSQL's MOD on INT64: the remainder keeps the sign of the dividend."""
    assert INT64_MIN <= x <= INT64_MAX, f"{x} leaves INT64"
    rem = abs(x) % y
    return -rem if x < 0 else rem


def _sql_if(condition: bool, then: int, otherwise: int) -> int:
    return then if condition else otherwise


def _farmhash_sql() -> str:
    """The SQL expression that docs/schemes.md gives for hash="farmhash" buckets."""
    text = (REPO / "docs" / "schemes.md").read_text()
    section = text.split("### FarmHash in SQL", 1)[1]
    (expression,) = re.findall(r"```sql\n(.*?)```", section.split("\n### ", 1)[0], re.S)
    return str(expression)


def _eval_sql(expression: str, fingerprint: int, n: int) -> int:
    """Evaluate the documented expression with FARM_FINGERPRINT's signed INT64 value."""
    py = expression.replace("FARM_FINGERPRINT(row_key)", "fp")
    py = re.sub(r"\bN\b", "n", py)
    py = re.sub(r"\bMOD\(", "sql_mod(", py)
    py = re.sub(r"\bIF\(", "sql_if(", py)
    assert set(re.findall(r"[A-Za-z_]\w*", py)) <= {"fp", "n", "sql_mod", "sql_if"}, py
    value = eval(py, {"sql_mod": _sql_mod, "sql_if": _sql_if}, {"fp": fingerprint, "n": n})
    assert isinstance(value, int)
    return value


def test_documented_farm_fingerprint_sql_gives_the_farmhash_bucket() -> None:
    """The SQL in docs/schemes.md, over FARM_FINGERPRINT's signed value, is the unsigned % N."""
    import farmhash

    rnd = random.Random(25)
    keys = [key_of(v) for v in vectors()]
    keys += [f"user{i}#{1_700_000_000 + i}".encode() for i in range(1000)]
    keys += [rnd.randbytes(rnd.randint(1, 40)) for _ in range(1000)]
    expression = _farmhash_sql()
    negatives = 0
    for n in SOME_NS:
        s = scheme(n, "farmhash")
        naive_differs = 0
        for key in keys:
            unsigned = int(farmhash.fingerprint64(key))
            signed = unsigned - 2**64 if unsigned > INT64_MAX else unsigned
            negatives += signed < 0
            assert _eval_sql(expression, signed, n) == s.bucket_of(key), (key, n)
            naive_differs += _sql_mod(signed, n) != s.bucket_of(key)
        if n > 2:  # the plain MOD of the signed value is wrong for about half the keys
            assert 0.4 < naive_differs / len(keys) < 0.6, (n, naive_differs)
    assert negatives > 0


def test_keys_the_docs_show_are_the_keys_the_scheme_makes() -> None:
    """The salted keys and buckets in the README's and docs/schemes.md's comments, computed."""
    readme = (REPO / "README.md").read_text()
    quickstart = re.findall(
        r'SaltScheme\(buckets=(\d+)\)\s+# prefix = [^"]*b"(\d+-)([^"]+)"', readme
    )
    assert quickstart, "the README quickstart's prefix comment"
    for n, prefix, key in quickstart:
        assert SaltScheme(int(n)).salt_key(key) == (prefix + key).encode(), (n, prefix, key)
    shown = re.findall(r"SaltScheme\((\d+)\)\.salt_key\(b\"([^\"]+)\"\)\s+# b'([^']+)'", readme)
    assert shown
    for n, key, salted in shown:
        assert SaltScheme(int(n)).salt_key(key) == salted.encode()
    schemes = (REPO / "docs" / "schemes.md").read_text()
    (n,) = re.findall(r"scheme = SaltScheme\((\d+)\)", schemes)
    s = SaltScheme(int(n))
    (bucket,) = re.findall(r'scheme\.bucket_of\(b"user123"\)\s+# (\d+)', schemes)
    (salted,) = re.findall(r"scheme\.salt_key\(b\"user123\"\)\s+# b'([^']+)'", schemes)
    assert s.bucket_of(b"user123") == int(bucket)
    assert s.salt_key(b"user123") == salted.encode()


def _hbasewd_one_byte_simple_hash(arrays_hash: int, n: int) -> int:
    """HBaseWD's OneByteSimpleHash prefix byte from the hash: (byte) (Math.abs(hash) % n)."""
    java_abs = arrays_hash if arrays_hash == -(2**31) else abs(arrays_hash)  # int overflow
    rem = abs(java_abs) % n
    return (-rem if java_abs < 0 else rem) & 0xFF  # Java's remainder, then the byte


@pytest.mark.parametrize("n", VECTORS["phoenix_ns"])
def test_phoenix_is_hbasewd_one_byte_simple_hash_but_for_min_value(n: int) -> None:
    """The phoenix byte is HBaseWD's prefix for every key but Integer.MIN_VALUE hashes."""
    differ = []
    for v in vectors():
        ours = scheme(n, "phoenix").salt_key(key_of(v))[0]
        if ours != _hbasewd_one_byte_simple_hash(v["arrays_hash"], n):
            differ.append(v["arrays_hash"])
    power_of_two = n & (n - 1) == 0
    assert differ == ([] if power_of_two else [-(2**31)] * len(differ))
    assert power_of_two or len(differ) == 2  # aedhssxo and 808099f2eff3e9eb


def test_hbasewd_min_value_bytes() -> None:
    """HBaseWD's bytes for a MIN_VALUE hash, as a JVM computed them, fall outside range(N)."""
    for n, jvm in ((7, 0xFE), (10, 0xF8), (16, 0x00), (100, 0xD0), (256, 0x00)):
        assert _hbasewd_one_byte_simple_hash(-(2**31), n) == jvm


def test_java_hashes_utf16_units() -> None:
    """U+1F600 hashes as its surrogate pair 0xD83D, 0xDE00 (1772899), not as one code point."""
    emoji = "\U0001f600".encode()
    v = vector_for(emoji)
    assert v["java_hash"] == 0xD83D * 31 + 0xDE00 == 1772899
    assert scheme(1000, "java").salt_key(emoji) == b"899-" + emoji
    assert scheme(7, "java").bucket_of(emoji) == 1772899 % 7


def test_str_keys_are_utf8() -> None:
    """A str key salts and unsalts like its UTF-8 bytes."""
    for h in ALL_HASHES:
        s = scheme(16, h)
        assert s.salt_key("café-日本語-😀") == s.salt_key("café-日本語-😀".encode())
        assert s.bucket_of("café") == s.bucket_of("café".encode())
        if h != "phoenix":  # a phoenix salt byte need not be valid UTF-8
            assert s.unsalt_key(s.salt_key("café").decode()) == "café".encode()


def test_default_prefix_format() -> None:
    """Default prefixes are zero-padded decimal of width len(str(N-1)), then the separator."""
    assert scheme(16).prefix(7) == b"07-"
    assert scheme(1).prefix(0) == b"0-"
    assert scheme(100).prefix(5) == b"05-"
    assert scheme(101).prefix(5) == b"005-"
    assert scheme(10).prefix(9) == b"9-"
    assert scheme(1).prefixes == (b"0-",)
    assert scheme(4).prefixes == (b"0-", b"1-", b"2-", b"3-")
    assert SaltScheme(16, separator=b"#").prefix(7) == b"07#"
    assert SaltScheme(16, "farmhash").salt_key(b"k")[2:] == b"-k"


def test_java_and_phoenix_prefix_sets() -> None:
    """java has 2N-1 unpadded prefixes from -(N-1) to N-1; phoenix has N single bytes."""
    assert set(scheme(3, "java").prefixes) == {b"-2-", b"-1-", b"0-", b"1-", b"2-"}
    assert len(scheme(1000, "java").prefixes) == 1999
    assert scheme(1000, "java").prefix(-999) == b"-999-"
    assert scheme(1000, "java").prefix(7) == b"7-"
    assert set(scheme(4, "phoenix").prefixes) == {b"\x00", b"\x01", b"\x02", b"\x03"}
    assert scheme(256, "phoenix").prefix(255) == b"\xff"


# -- properties ----------------------------------------------------------------------------------

utf8_keys = st.text(min_size=1, max_size=40).map(lambda t: t.encode("utf-8"))
byte_keys = st.binary(min_size=1, max_size=40)


@st.composite
def schemes_and_keys(draw: st.DrawFn) -> tuple[SaltScheme, bytes]:
    """A scheme of any hash and size, and a key it can salt."""
    h = draw(st.sampled_from(ALL_HASHES))
    n = draw(st.sampled_from([n for n in SOME_NS if h != "phoenix" or n <= 256]))
    key = draw(utf8_keys if h == "java" else st.one_of(byte_keys, utf8_keys))
    return scheme(n, h), key


@PROPERTY_SETTINGS
@given(schemes_and_keys())
def test_round_trip(case: tuple[SaltScheme, bytes]) -> None:
    """unsalt_key(salt_key(k)) == k for every hash and bucket count."""
    s, key = case
    assert s.unsalt_key(s.salt_key(key)) == key


@PROPERTY_SETTINGS
@given(schemes_and_keys())
def test_bucket_in_range(case: tuple[SaltScheme, bytes]) -> None:
    """bucket_of is in [0, N) (java: (-N, N)) and salt_key starts with that bucket's prefix."""
    s, key = case
    bucket = s.bucket_of(key)
    low = -s.buckets if s.hash == "java" else -1
    assert low < bucket < s.buckets
    assert s.salt_key(key) == s.prefix(bucket) + key


@PROPERTY_SETTINGS
@given(schemes_and_keys())
def test_salted_key_has_exactly_one_prefix(case: tuple[SaltScheme, bytes]) -> None:
    """Every salted key starts with exactly one of the scheme's prefixes: scans never overlap."""
    s, key = case
    salted = s.salt_key(key)
    assert [p for p in s.prefixes if salted.startswith(p)] == [s.prefix(s.bucket_of(key))]


@PROPERTY_SETTINGS
@given(
    st.sampled_from(ALL_HASHES),
    st.sampled_from([1, 2, 3, 16]),
    st.lists(utf8_keys, min_size=2, max_size=30, unique=True),
)
def test_order_inside_a_bucket(hash_name: str, n: int, keys: list[bytes]) -> None:
    """Keys a < b in the same bucket keep their order once salted."""
    s = scheme(n, hash_name)
    by_bucket: dict[int, list[bytes]] = {}
    for key in sorted(keys):
        by_bucket.setdefault(s.bucket_of(key), []).append(key)
    for same in by_bucket.values():
        salted = [s.salt_key(k) for k in same]
        assert salted == sorted(salted)


no_hash = st.binary(min_size=1, max_size=12).filter(lambda b: b"#" not in b)
no_dash = st.text(min_size=1, max_size=12).filter(lambda t: "-" not in t)


@PROPERTY_SETTINGS
@given(
    st.sampled_from(ALL_HASHES),
    st.sampled_from([2, 7, 16, 100]),
    st.integers(1, 3),
    st.data(),
)
def test_fields_share_a_bucket(hash_name: str, n: int, k: int, data: st.DataObject) -> None:
    """Keys with the same first k fields share the bucket of those fields hashed alone."""
    part_fields = data.draw(
        st.lists(utf8_keys.filter(lambda b: b"#" not in b), min_size=k, max_size=k)
    )
    part = b"#".join(part_fields)
    tails = data.draw(st.lists(st.one_of(utf8_keys, st.just(b"")), min_size=2, max_size=4))
    s = scheme(n, hash_name, fields(k, b"#"))
    whole = scheme(n, hash_name)
    want = whole.bucket_of(part)
    assert s.bucket_of(part) == want  # fewer than k separators: hashed whole
    for tail in tails:
        key = part + b"#" + tail
        assert s.bucket_of(key) == want
        assert s.unsalt_key(s.salt_key(key)) == key


@PROPERTY_SETTINGS
@given(
    st.sampled_from(ALL_HASHES),
    st.sampled_from([2, 7, 16, 100]),
    st.text(min_size=1, max_size=20),
    st.lists(no_dash, min_size=2, max_size=4),
)
def test_before_last_shares_a_bucket(hash_name: str, n: int, head: str, tails: list[str]) -> None:
    """Keys equal up to their last b"-" share the bucket of that head hashed alone."""
    s = scheme(n, hash_name, before_last(b"-"))
    want = scheme(n, hash_name).bucket_of(head.encode())
    for tail in tails:
        key = f"{head}-{tail}".encode()
        assert s.bucket_of(key) == want
        assert s.unsalt_key(s.salt_key(key)) == key
    if "-" not in head:
        assert s.bucket_of(head) == want  # no separator: hashed whole


def test_key_part_helpers() -> None:
    """fields(k) cuts before the k-th separator; before_last cuts before the last one."""
    assert fields(1)(b"a#b#c") == b"a"
    assert fields(2)(b"a#b#c") == b"a#b"
    assert fields(3)(b"a#b#c") == b"a#b#c"
    assert fields(2, b"::")(b"a::b::c") == b"a::b"
    assert fields(1)(b"#a") == b""
    assert before_last()(b"user123-site-1700000000") == b"user123-site"
    assert before_last()(b"nodash") == b"nodash"
    assert before_last(b"#")(b"a#b#c") == b"a#b"


def assert_prefix_free(prefixes: tuple[bytes, ...]) -> None:
    """No prefix is a prefix of another (adjacent in sorted order suffices, and is O(n log n))."""
    ordered = sorted(prefixes)
    assert len(set(ordered)) == len(ordered)
    for a, b in pairwise(ordered):
        assert not b.startswith(a), (a, b)


@pytest.mark.parametrize("hash_name", ALL_HASHES)
def test_prefixes_are_prefix_free(hash_name: str) -> None:
    """For N in 1..300 no prefix starts another, so prefix range scans never overlap."""
    top = 256 if hash_name == "phoenix" else 300
    for n in range(1, top + 1):
        s = SaltScheme(n, hash_name)
        assert len(s.prefixes) == (2 * n - 1 if hash_name == "java" else n)
        assert_prefix_free(s.prefixes)
        if n <= 30:  # the sorted shortcut, checked against every pair
            assert not [
                (a, b) for a in s.prefixes for b in s.prefixes if a != b and b.startswith(a)
            ]


@pytest.mark.parametrize("separator", [b"#", b"::", b"\x00", b"-_-"])
def test_prefixes_are_prefix_free_with_other_separators(separator: bytes) -> None:
    """Prefix freedom holds for any allowed separator, not only b"-"."""
    for h in ("crc32", "java"):
        for n in (1, 9, 10, 11, 99, 100, 101, 1000, 4096):
            assert_prefix_free(SaltScheme(n, h, separator=separator).prefixes)


DETERMINISM_KEYS = [
    "user123-site-1700000000",
    "café-42",
    "日本語-東京",
    "😀-party",
    "polygenelubricants",
    "a",
    "tenant#7#user#9",
]
DETERMINISM_SCRIPT = """
import json, sys
from saltedtable import SaltScheme, before_last
keys = json.loads(sys.argv[1])
out = {}
for h in ("crc32", "crc32c", "farmhash", "java", "phoenix"):
    for n in (3, 16, 256):
        for part in (None, before_last()):
            s = SaltScheme(n, h, key_part=part)
            out[f"{h}/{n}/{part is not None}"] = [s.salt_key(k).hex() for k in keys]
print(json.dumps(out, sort_keys=True))
"""


def salted_here() -> dict[str, list[str]]:
    out = {}
    for h in ALL_HASHES:
        for n in (3, 16, 256):
            for part in (None, before_last()):
                s = SaltScheme(n, h, key_part=part)
                out[f"{h}/{n}/{part is not None}"] = [s.salt_key(k).hex() for k in DETERMINISM_KEYS]
    return out


@pytest.mark.parametrize("seed", ["123", "456"])
def test_salting_is_the_same_in_every_process(seed: str) -> None:
    """Another process with another PYTHONHASHSEED salts every key exactly as this one does."""
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", DETERMINISM_SCRIPT, json.dumps(DETERMINISM_KEYS)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(result.stdout) == salted_here()


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"buckets": 0}, r"buckets.*0"),
        ({"buckets": -4}, r"buckets.*-4"),
        ({"buckets": 4097}, r"4097"),
        ({"buckets": 10**9}, r"1000000000"),
        ({"buckets": 257, "hash": "phoenix"}, r"256"),
        ({"buckets": 4, "separator": "-"}, r"separator"),
        ({"buckets": 4, "separator": b""}, r"separator"),
        ({"buckets": 4, "separator": b"1"}, r"separator.*digit"),
        ({"buckets": 4, "separator": b"-0-"}, r"separator.*digit"),
        ({"buckets": 4, "hash": "java", "separator": b"9"}, r"separator.*digit"),
    ],
)
def test_bad_scheme_is_rejected(kwargs: dict[str, Any], match: str) -> None:
    """Bucket counts below 1 or above the limits, and bad separators, raise SaltSchemeError."""
    with pytest.raises(SaltSchemeError, match=match):
        SaltScheme(**kwargs)


def test_scheme_limits_are_inclusive() -> None:
    """4096 buckets and phoenix with 256 buckets are still allowed."""
    assert len(SaltScheme(4096).prefixes) == 4096
    assert len(SaltScheme(256, "phoenix").prefixes) == 256


def test_unknown_hash_names_the_value_and_the_choices() -> None:
    """An unknown hash raises SaltSchemeError naming it and every valid hash."""
    with pytest.raises(SaltSchemeError, match=r"md5") as info:
        SaltScheme(4, hash="md5")
    for name in ALL_HASHES:
        assert name in str(info.value)


def test_scheme_errors_are_value_errors() -> None:
    """SaltSchemeError and RowKeyError are ValueErrors, so generic handlers catch them."""
    assert issubclass(SaltSchemeError, ValueError)
    assert issubclass(RowKeyError, ValueError)


def test_key_part_returning_non_bytes() -> None:
    """A key_part that returns str is caught with SaltSchemeError when the scheme uses it."""
    s = SaltScheme(4, key_part=lambda key: key.decode())
    with pytest.raises(SaltSchemeError, match=r"bytes"):
        s.salt_key(b"user-1")
    with pytest.raises(SaltSchemeError, match=r"bytes"):
        s.bucket_of(b"user-1")


@pytest.mark.parametrize("hash_name", ALL_HASHES)
def test_empty_key_is_rejected(hash_name: str) -> None:
    """An empty logical key raises RowKeyError."""
    with pytest.raises(RowKeyError, match=r"empty"):
        scheme(4, hash_name).salt_key(b"")
    with pytest.raises(RowKeyError, match=r"empty"):
        scheme(4, hash_name).salt_key("")


def key_salting_to(s: SaltScheme, total: int) -> bytes:
    """A logical key whose salted key is exactly ``total`` bytes long under ``s``."""
    for i in range(1000):
        for length in range(total - 5, total):
            key = (b"%d" % i).ljust(length, b"k")
            if length + len(s.prefix(s.bucket_of(key))) == total:
                return key
    raise AssertionError(f"no key salts to {total} bytes under {s}")


@pytest.mark.parametrize("hash_name", ALL_HASHES)
def test_too_long_salted_key_is_rejected(hash_name: str) -> None:
    """A salted key over Bigtable's 4096-byte limit raises RowKeyError; one of 4096 does not."""
    s = scheme(16, hash_name)
    assert len(s.salt_key(key_salting_to(s, 4096))) == 4096
    with pytest.raises(RowKeyError, match=r"4096"):
        s.salt_key(key_salting_to(s, 4097))
    with pytest.raises(RowKeyError, match=r"4096"):
        s.salt_key("k" * 4096)


def test_java_rejects_invalid_utf8() -> None:
    """hash="java" raises RowKeyError for keys that are not UTF-8, as the JDK vectors mark them."""
    bad = vectors(utf8=False)
    assert bad
    for v in bad:
        with pytest.raises(RowKeyError, match=r"(?i)utf-?8"):
            scheme(16, "java").salt_key(key_of(v))


def unsalt_error(s: SaltScheme, physical: bytes) -> None:
    with pytest.raises(RowKeyError, match=re.escape(repr(physical))):
        s.unsalt_key(physical)


def key_in_bucket(s: SaltScheme, bucket: int) -> bytes:
    """A logical key that ``s`` puts in ``bucket``."""
    return next(k for k in (b"user%d" % i for i in range(100_000)) if s.bucket_of(k) == bucket)


def test_unsalt_rejects_bad_default_prefixes() -> None:
    """unsalt_key refuses wrong widths, out-of-range or mismatched buckets, missing separators."""
    s = scheme(16)
    key = key_in_bucket(s, 7)
    assert s.unsalt_key(b"07-" + key) == key
    unsalt_error(s, b"7-" + key)  # width 1, not 2
    unsalt_error(s, b"007-" + key)  # width 3
    unsalt_error(s, b"16-" + key)  # out of range
    unsalt_error(s, b"99-" + key)
    unsalt_error(s, b"08-" + key)  # the hash puts the key in 07
    unsalt_error(s, b"07" + key)  # no separator
    unsalt_error(s, b"07#" + key)  # another separator
    unsalt_error(s, b"-7-" + key)  # java-style sign
    unsalt_error(s, key)  # no prefix at all
    unsalt_error(s, b"07-")  # prefix only: empty logical key
    unsalt_error(s, b"")
    t = SaltScheme(16, separator=b"::")
    assert t.unsalt_key(b"07::" + key) == key
    unsalt_error(t, b"07-" + key)
    unsalt_error(t, b"07:" + key)


def test_unsalt_rejects_bad_java_prefixes() -> None:
    """unsalt_key for java refuses padded, out-of-range, -0 and mismatched buckets."""
    s = scheme(7, "java")
    key = b"user123-site-1700000000"
    assert s.unsalt_key(b"-3-" + key) == key
    unsalt_error(s, b"3-" + key)  # the sign is part of the bucket
    unsalt_error(s, b"-03-" + key)  # unpadded only
    unsalt_error(s, b"-7-" + key)  # out of range
    unsalt_error(s, b"--3-" + key)
    unsalt_error(s, b"-3" + key)  # no separator after the digits
    unsalt_error(s, key)
    zero = key_in_bucket(s, 0)
    assert s.unsalt_key(b"0-" + zero) == zero
    unsalt_error(s, b"-0-" + zero)
    unsalt_error(s, b"00-" + zero)


def test_unsalt_rejects_bad_phoenix_prefixes() -> None:
    """unsalt_key for phoenix refuses a salt byte >= N or one the hash does not give."""
    s = scheme(10, "phoenix")
    key = b"aedhssxo"
    assert s.unsalt_key(b"\x08" + key) == key
    unsalt_error(s, b"\x0a" + key)
    unsalt_error(s, b"\xff" + key)
    unsalt_error(s, b"\x07" + key)
    unsalt_error(s, b"\x08")


# -- the write path's salter ------------------------------------------------------------


def _outcome(salt: Callable[[Any], bytes], key: Any) -> bytes | tuple[type, str]:
    try:
        return salt(key)
    except Exception as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("hash_name", ALL_HASHES)
@pytest.mark.parametrize("n", [1, 7, 16, 100])
def test_the_salter_salts_as_salt_key_does(hash_name: str, n: int) -> None:
    """Every key, edge cases included, salts (or is refused) as salt_key does it."""
    s = scheme(n, hash_name)
    salt = s.salter()
    longest = 4096 - max(len(p) for p in s.prefixes)
    keys: list[Any] = [b"user1#2024", "user1#2024", "é", b"\xff\xfe", b"", "", None, 7]
    keys += [b"k" * size for size in (longest - 1, longest, longest + 1, 4096 - 1, 4096)]
    keys += [random.Random(n).randbytes(20) for _ in range(50)]
    for key in keys:
        assert _outcome(salt, key) == _outcome(s.salt_key, key), key


def test_a_key_part_scheme_salts_through_salt_key() -> None:
    s = scheme(16, key_part=fields(1))
    assert s.salter()(b"user1#2024") == s.salt_key(b"user1#2024")


@pytest.mark.parametrize("hash_name", ALL_HASHES)
@pytest.mark.parametrize("n", [1, 7, 16, 100])
def test_the_locator_places_keys_as_locate_does(hash_name: str, n: int) -> None:
    """The point writes' locator: every key, edge cases included, placed (or refused) as
    locate places it, for every hash."""
    s = scheme(n, hash_name)
    locate = s.locator()
    longest = 4096 - max(len(p) for p in s.prefixes)
    keys: list[Any] = [b"user1#2024", "user1#2024", "é", b"\xff\xfe", b"", "", None, 7]
    keys += [b"k" * size for size in (longest - 1, longest, longest + 1, 4096 - 1, 4096)]
    keys += [random.Random(n).randbytes(20) for _ in range(50)]
    for key in keys:
        assert _outcome(locate, key) == _outcome(s.locate, key), key
    assert s.locator() is locate  # made once per scheme


def test_a_key_part_scheme_locates_through_locate() -> None:
    s = scheme(16, key_part=fields(1))
    assert s.locator()(b"user1#2024") == s.locate(b"user1#2024")
