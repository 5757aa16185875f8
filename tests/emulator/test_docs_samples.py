"""The ``console`` samples of docs/cli.md, docs/guard.md and docs/tables.md, run on the emulator.

Each ```` ```console ```` block of those pages is a transcript: ``$ command`` lines, each
followed by what it prints (stdout and stderr, in order). This test runs every command
of a page, in page order, as a fresh ``saltedtable`` process pointed at the session's
emulator, and compares what it printed with the page after normalising timestamps and
sizes only (:func:`normalise`); everything else must match. A page's commands share its
tables: a page creates what its later samples read, and the tables of every project and
instance the page names are deleted before and after it.

How authors write samples (also in docs/development.md, "Samples in the docs"):

- ```` ```console ```` is a transcript that runs; ```` ```sh ```` lists commands without
  their output and is not run.
- ``<!-- not run: REASON -->`` on the line before a block skips it (a step on Apache
  Beam, a foreground command); :data:`NOT_RUN_ALLOWED` caps how many a page may skip.
- ``<!-- sample setup: NAME -->`` runs ``SETUPS[NAME]`` first, for a state no command
  makes (a record left by an older release in a family that can collect it).
- Samples name their own project and instance (``my-project``/``my-instance``): the
  emulator accepts any, and the suite's own instance is never wiped.
- ``$ export NAME=VALUE ...`` sets variables for the page's later commands, and
  ``NAME=VALUE saltedtable ...`` for one command, as a shell does (a sample's own
  ``BIGTABLE_EMULATOR_HOST`` wins over the session's emulator).
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from google.cloud.bigtable.data import BigtableDataClient, RowMutationEntry, SetCell
from google.cloud.bigtable_admin_v2 import types

from saltedtable import SCHEME_ROW_KEY, SaltedTable, SaltScheme, describe_layout
from saltedtable._admin import admin_client
from saltedtable._create import create_salted_table
from saltedtable._guard.families import parse_family
from saltedtable.testing import (
    INSTANCE,
    PROJECT,
    Emulator,
    ExternalEmulator,
    delete_table,
    list_tables,
)

pytestmark = pytest.mark.emulator

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ("cli.md", "guard.md", "tables.md")

#: How many blocks each page may mark ``not run``: a new skip is a deliberate edit here.
NOT_RUN_ALLOWED = {"cli.md": 3, "guard.md": 0, "tables.md": 1}

#: What runs ``saltedtable`` from this checkout (the installed script may be another's).
MAIN = "from saltedtable._cli.main import main; raise SystemExit(main())"

#: The time one command may take (the emulator answers in milliseconds).
COMMAND_TIMEOUT = 120.0

_NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->")
_SETUP = re.compile(r"<!--\s*sample setup:\s*(?P<name>[\w-]+)\s*-->")

#: Timestamps: ISO 8601 date-times and cbt's cell times (``2026/11/26-12:00:00.123000``).
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{4}/\d{2}/\d{2}-\d{2}:\d{2}:\d{2}(?:\.\d+)?"
)
#: Sizes: a number (``12,345``, ``1.5``, ``~0``) before a byte unit.
_SIZE = re.compile(r"~?\d[\d,]*(?:\.\d+)? ?(?:bytes|B|KB|KiB|MB|MiB|GB|GiB)\b")


def normalise(text: str) -> str:
    """``text`` with timestamps and sizes replaced by placeholders, trailing blanks dropped."""
    text = _TIMESTAMP.sub("<time>", text)
    text = _SIZE.sub("<size>", text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


@dataclass
class Command:
    """One ``$ command`` of a transcript and the output the page shows for it."""

    line: int
    text: str
    expected: list[str] = field(default_factory=list)

    @property
    def argv(self) -> list[str]:
        """The command's words, as a POSIX shell splits them (comments dropped)."""
        return shlex.split(self.text, comments=True)


@dataclass
class Block:
    """A ```` ```console ```` block: its commands, and the markers on the line before it."""

    page: str
    line: int
    commands: list[Command]
    not_run: str | None = None
    setup: str | None = None


def parse_blocks(page: str, text: str) -> list[Block]:
    """Every ```` ```console ```` block of ``text``, with the markers just before it.

    A ``$ `` line starts a command (a trailing backslash continues it on the next line);
    the lines up to the next ``$ `` line or the block's end are its output.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        fence = i
        markers = []
        j = fence - 1
        while j >= 0 and lines[j].strip().startswith("<!--"):
            markers.append(lines[j])
            j -= 1
        block = Block(page, fence + 1, [])
        for marker in markers:
            if match := _NOT_RUN.search(marker):
                block.not_run = match["reason"]
            elif match := _SETUP.search(marker):
                block.setup = match["name"]
        i = fence + 1
        while i < len(lines) and lines[i].strip() != "```":
            current = lines[i]
            if current.startswith("$ "):
                start = i
                text_ = current[2:]
                while text_.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text_ = text_[:-1] + " " + lines[i].strip()
                block.commands.append(Command(start + 1, text_))
            elif block.commands:
                block.commands[-1].expected.append(current)
            else:
                raise ValueError(f"docs/{page}:{i + 1}: output before any `$ ` command")
            i += 1
        blocks.append(block)
        i += 1
    return blocks


# --------------------------------------------------------------------------- setups


def record_in_ttl_family(address: str) -> None:
    """``events`` as an older release left it: its record in ``cf``, a max-age family."""
    with admin_client(emulator_host=address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent="projects/my-project/instances/my-instance",
                table_id="events",
                table=types.Table(column_families=dict([parse_family("cf:max_age=30d")])),
            )
        )
    with BigtableDataClient(project="my-project") as client:
        table = client.get_table("my-instance", "events")
        table.mutate_row(
            SCHEME_ROW_KEY, SetCell("cf", b"scheme", describe_layout(SaltScheme(4)).encode())
        )


def events_with_users(address: str) -> None:
    """``events``, salted over 4 buckets, holding the rows docs/cli.md reads back."""
    create_salted_table("my-project", "my-instance", "events", SaltScheme(4), emulator_host=address)
    millis = 1714564800000  # 2024-05-01T12:00:00Z
    rows = {
        b"user1": [("name", b"Ada", 0), ("visits", (3).to_bytes(8, "big"), 0)],
        b"user10": [("name", b"Grace", 1)],
        b"user2": [("name", "Zo\u00eb".encode(), 2)],
    }
    with BigtableDataClient(project="my-project") as client:
        raw = client.get_table("my-instance", "events")
        with SaltedTable.open(raw, SaltScheme(4)) as table:
            for key, cells in rows.items():
                mutations = [
                    SetCell("cf", column, value, (millis + minutes * 60_000) * 1000)
                    for column, value, minutes in cells
                ]
                table.mutate_row(key, mutations)


def written_elsewhere(address: str) -> None:
    """``orders``: 1,000 rows another tool salted over 4 buckets, no record, family ``cf``."""
    with admin_client(emulator_host=address) as admin:
        admin.create_table(
            request=types.CreateTableRequest(
                parent="projects/my-project/instances/my-instance",
                table_id="orders",
                table=types.Table(column_families=dict([parse_family("cf")])),
            )
        )
    scheme = SaltScheme(4)
    with BigtableDataClient(project="my-project") as client:
        table = client.get_table("my-instance", "orders")
        table.bulk_mutate_rows(
            [
                RowMutationEntry(scheme.salt_key(b"user%05d" % i), SetCell("cf", b"c", b"v"))
                for i in range(1000)
            ]
        )


#: What ``<!-- sample setup: NAME -->`` runs, by name; each takes the emulator's address.
SETUPS: dict[str, Callable[[str], None]] = {
    "written-elsewhere": written_elsewhere,
    "events-with-users": events_with_users,
    "record-in-ttl-family": record_in_ttl_family,
}


# --------------------------------------------------------------------------- running


def instances_named(blocks: list[Block]) -> set[tuple[str, str]]:
    """The (project, instance) pairs the page's commands name, and its setups' own."""
    pairs = {("my-project", "my-instance")} if any(b.setup for b in blocks) else set()
    for block in blocks:
        for command in block.commands:
            argv = command.argv
            named = {a: argv[k + 1] for k, a in enumerate(argv[:-1]) if a.startswith("--")}
            if "--project" in named and "--instance" in named:
                pairs.add((named["--project"], named["--instance"]))
    return pairs


def wipe(address: str, pairs: set[tuple[str, str]]) -> None:
    """Delete every table of the sample instances ``pairs``."""
    for project, instance in pairs:
        for table_id in list_tables(address, project=project, instance=instance):
            delete_table(address, table_id, project=project, instance=instance, missing_ok=True)


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def assignments(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The leading ``NAME=VALUE`` words of ``argv`` as variables, and the words after them."""
    variables: dict[str, str] = {}
    while argv and _ASSIGNMENT.match(argv[0]):
        name, _, value = argv[0].partition("=")
        variables[name] = value
        argv = argv[1:]
    return variables, argv


def run_command(
    argv: list[str], address: str, variables: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run ``saltedtable ARGS`` from this checkout with the sample's ``variables``; return
    its exit status and its output (stdout and stderr interleaved as a terminal shows them)."""
    env = dict(os.environ)
    for name in ("SALTEDTABLE_PROJECT", "SALTEDTABLE_INSTANCE", "SALTEDTABLE_TABLE"):
        env.pop(name, None)
    env.pop("PYTHONSAFEPATH", None)  # the checkout's package comes first on sys.path
    env.update(BIGTABLE_EMULATOR_HOST=address, PYTHONUNBUFFERED="1", COLUMNS="80")
    env.update(variables or {})
    # A session of its own, so that a command that hangs can be stopped with what it
    # started: SIGTERM first (``saltedtable emulator`` then stops its emulator, which runs
    # in a session of its own), then SIGKILL.
    process = subprocess.Popen(
        [sys.executable, "-c", MAIN, *argv[1:]],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        output += f"\n(killed after {COMMAND_TIMEOUT:.0f} s)"
    return process.returncode, output


def differences(page: str, blocks: list[Block], address: str) -> Iterator[str]:
    """Run the page's blocks in order; yield a report for each command whose output differs."""
    exported: dict[str, str] = {}
    for block in blocks:
        if block.not_run is not None:
            continue
        if block.setup is not None:
            SETUPS[block.setup](address)
        for command in block.commands:
            where = f"docs/{page}:{command.line}: $ {command.text}"
            argv = command.argv
            if argv[:1] == ["export"]:
                variables, rest = assignments(argv[1:])
                if not rest and not command.expected:
                    exported.update(variables)
                    continue
            variables, argv = assignments(argv)
            if not argv or argv[0] != "saltedtable":
                yield (
                    f"{where}\n  runs no saltedtable command: write it as ```sh, or mark "
                    "the block `<!-- not run: REASON -->`"
                )
                continue
            status, output = run_command(argv, address, {**exported, **variables})
            want = normalise("\n".join(command.expected))
            got = normalise(output)
            if want != got:
                diff = difflib.unified_diff(
                    want.splitlines(), got.splitlines(), "the page", "the command", lineterm=""
                )
                yield f"{where}\n  (exit status {status})\n" + "\n".join(diff)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES)
def test_the_page_s_console_samples_print_what_the_commands_print(
    page: str, bigtable_emulator: Emulator | ExternalEmulator
) -> None:
    """Every ``console`` sample of the page prints what the command prints today."""
    blocks = parse_blocks(page, (DOCS / page).read_text(encoding="utf-8"))
    assert blocks, f"docs/{page} has no console sample"
    skipped = [b for b in blocks if b.not_run is not None]
    assert all(b.not_run for b in skipped), f"docs/{page}: a `not run` marker without a reason"
    assert len(skipped) <= NOT_RUN_ALLOWED[page], (
        f"docs/{page} skips {len(skipped)} samples (allowed: {NOT_RUN_ALLOWED[page]}): "
        + "; ".join(f"line {b.line}: {b.not_run}" for b in skipped)
    )
    unknown = [b.setup for b in blocks if b.setup is not None and b.setup not in SETUPS]
    assert not unknown, f"docs/{page}: unknown sample setups {unknown}"
    pairs = instances_named(blocks)
    assert (PROJECT, INSTANCE) not in pairs, (
        f"docs/{page}: samples must name an instance of their own, not the suite's {INSTANCE}"
    )
    address = bigtable_emulator.address
    wipe(address, pairs)
    try:
        reports = list(differences(page, blocks, address))
    finally:
        wipe(address, pairs)
    assert not reports, (
        f"{len(reports)} sample(s) of docs/{page} differ from what the commands print "
        "(timestamps and sizes normalised; '-' the page, '+' the command):\n\n"
        + "\n\n".join(reports)
    )


# --------------------------------------------------------------------------- the parser


def test_a_transcript_splits_into_commands_continuations_and_outputs() -> None:
    """Commands continue over backslashed lines; each keeps the lines up to the next ``$``."""
    text = "\n".join(
        [
            "<!-- sample setup: record-in-ttl-family -->",
            "```console",
            "$ saltedtable key -n 16 \\",
            "    user123   # a comment",
            "user123\tbucket 7\t07-user123",
            "$ saltedtable --version",
            "saltedtable 0.1.0",
            "```",
            "<!-- not run: needs Apache Beam -->",
            "```console",
            "$ saltedtable migrate verify",
            "```",
            "```sh",
            "$ not a transcript",
            "```",
        ]
    )
    first, second = parse_blocks("x.md", text)
    assert (first.line, first.setup, first.not_run) == (2, "record-in-ttl-family", None)
    assert [(c.line, c.argv, c.expected) for c in first.commands] == [
        (3, ["saltedtable", "key", "-n", "16", "user123"], ["user123\tbucket 7\t07-user123"]),
        (6, ["saltedtable", "--version"], ["saltedtable 0.1.0"]),
    ]
    assert (second.not_run, second.setup) == ("needs Apache Beam", None)


def test_output_before_a_command_is_refused() -> None:
    """A console block must start with a command: stray output names its line."""
    with pytest.raises(ValueError, match=r"docs/x.md:2: output before"):
        parse_blocks("x.md", "```console\nsaltedtable 0.1.0\n```")


def test_normalise_replaces_timestamps_and_sizes_and_nothing_else() -> None:
    """Times and byte sizes become placeholders; counts, keys and other numbers stay."""
    text = (
        "buckets: 16, about 41,943,040 bytes from 40 samples, skew (max/mean) 1.08   \n"
        "  bucket 0: ~2,621,440 bytes; budget 20000 rows / 8 MiB, 512 B a row\n"
        "  cf:q @ 2026/11/26-12:00:00.123000 at 2024-01-01T00:00:00+00:00 key#1704060000000\n"
    )
    assert normalise(text) == (
        "buckets: 16, about <size> from 40 samples, skew (max/mean) 1.08\n"
        "  bucket 0: <size>; budget 20000 rows / <size>, <size> a row\n"
        "  cf:q @ <time> at <time> key#1704060000000"
    )
