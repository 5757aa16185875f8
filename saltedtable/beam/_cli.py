"""``saltedtable migrate``: the migration steps from the command line.

Runs locally by default (Beam's in-process portable runner); every option it
does not know is handed to Beam's ``PipelineOptions``, so ``--runner
DataflowRunner --project ... --region ... --temp_location gs://...`` runs the
same step on Dataflow. Exit codes: 0 done (and verified), 1 a verification
found differences or a step was refused, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO, NoReturn, TypedDict

from apache_beam.options.pipeline_options import PipelineOptions

from .._exceptions import SaltedTableError
from .._salt import HASHES, SaltScheme
from .._specs import cutoff_policy_from_args, key_part_from_spec
from ._io import BigtableTarget
from ._migrate import (
    MigrationReport,
    backfill,
    cut_over,
    delete_legacy,
    progress_stream,
    resalt,
    verify_backfill,
    verify_resalt,
)

__all__ = ["main"]

_STEPS = ("backfill", "verify", "cutover", "delete-legacy", "resalt")

_EPILOG = """\
steps of finishing a forward-only migration (a table with --cutoff), in order:
  backfill        copy every legacy row to its salted key (re-runnable)
  verify          compare legacy rows and copies per bucket (rows, checksum)
  cutover         verify, then let fully salted readers open the table too
  delete-legacy   after every service runs without the cutoff: delete the
                  verified legacy rows and write the fully salted record
changing the scheme:
  resalt          copy into --to-table with --to-buckets/--to-hash/...,
                  verify, write the new layout record there
  verify --to-table ...   compare a table and its resalted copy again

Other options go to Apache Beam, e.g. --runner DataflowRunner --region
us-central1 --temp_location gs://bucket/tmp --setup_file ./setup.py.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="saltedtable migrate",
        description="Backfill, verify, cut over or resalt a salted table with Apache Beam.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("step", choices=_STEPS)
    p.add_argument("--bigtable-project", required=True, help="the table's Google Cloud project")
    p.add_argument("--instance", required=True, help="Bigtable instance id")
    p.add_argument("--table", required=True, help="table id")
    p.add_argument("--app-profile", help="Bigtable app profile id")
    p.add_argument("-n", "--buckets", type=int, required=True, help="the table's bucket count")
    p.add_argument("--hash", default="crc32", help=f"one of {', '.join(HASHES)}")
    p.add_argument("--key-part", metavar="SPEC", help="fields:K[:SEP] or before-last[:SEP]")
    p.add_argument("--separator", default="-", help="separator after a decimal prefix")
    p.add_argument("--marker", default="", help="bytes before every prefix (text)")
    p.add_argument("--cutoff", metavar="ISO", help="the table's cutoff (forward-only migration)")
    p.add_argument(
        "--time",
        metavar="READER",
        help="where a key's time is: epoch:UNIT[:INDEX[:DIGITS]] (default epoch:s), "
        "reversed:UNIT[:INDEX[:DIGITS]], iso[:INDEX] or be:OFFSET:WIDTH:UNIT",
    )
    p.add_argument("--time-sep", default="#", help="field separator for --time (#)")
    p.add_argument(
        "--unreadable",
        choices=("error", "legacy", "salted"),
        default="error",
        help="where keys without a readable time go",
    )
    p.add_argument("--family", help="column family for a layout record that does not exist yet")
    p.add_argument("--to-table", help="resalt: the destination table (same families)")
    p.add_argument("--to-buckets", type=int, help="resalt: the new bucket count")
    p.add_argument("--to-hash", help="resalt: the new hash (default: unchanged)")
    p.add_argument("--to-key-part", metavar="SPEC", help="resalt: the new key part")
    p.add_argument("--to-separator", help="resalt: the new separator")
    p.add_argument("--to-marker", help="resalt: the new marker")
    p.add_argument(
        "--split-mb", type=float, default=64.0, help="about how much one split reads (MB, 64)"
    )
    p.add_argument(
        "--prune",
        action="store_true",
        help="backfill: also delete copies whose legacy row is gone (reads every bucket)",
    )
    p.add_argument("--progress", action="store_true", help="show progress even if not a terminal")
    return p


def _scheme(args: argparse.Namespace, prefix: str = "") -> SaltScheme:
    def pick(name: str) -> str | None:
        value: str | None = getattr(args, f"to_{name}") if prefix else None
        fallback: str | None = getattr(args, name)
        return value if value is not None else fallback

    buckets = args.to_buckets if prefix and args.to_buckets else args.buckets
    part = args.to_key_part if prefix and args.to_key_part else args.key_part
    return SaltScheme(
        buckets,
        hash=pick("hash") or "crc32",
        key_part=key_part_from_spec(part),
        separator=(pick("separator") or "-").encode(),
        marker=(pick("marker") or "").encode(),
    )


def main(argv: Sequence[str]) -> int:
    """Run one step; return the exit code."""
    args, beam_args = _parser().parse_known_args(argv)
    prog = f"saltedtable migrate {args.step}"
    try:
        scheme = _scheme(args)
        cutoff = cutoff_policy_from_args(args.cutoff, args.time, args.time_sep, args.unreadable)
        target = BigtableTarget(args.bigtable_project, args.instance, args.table, args.app_profile)
        options = PipelineOptions(beam_args)
        common: _Common = {
            "options": options,
            "split_bytes": max(1, int(args.split_mb * 1024 * 1024)),
            "progress": progress_stream(args.progress),
        }
        resalting = args.step == "resalt" or (args.step == "verify" and args.to_table)
        if resalting:
            if not args.to_table:
                raise _Usage("resalt needs --to-table (and --to-buckets or another --to-* option)")
            destination = BigtableTarget(
                args.bigtable_project, args.instance, args.to_table, args.app_profile
            )
            new_scheme = _scheme(args, "to")
            if args.step == "resalt":
                if not args.family:
                    raise _Usage("resalt needs --family for the new table's layout record")
                report = resalt(
                    target,
                    scheme,
                    destination,
                    new_scheme,
                    cutoff=cutoff,
                    family=args.family,
                    **common,
                )
            else:
                report = verify_resalt(
                    target,
                    scheme,
                    destination,
                    new_scheme,
                    cutoff=cutoff,
                    **common,
                )
        else:
            if cutoff is None:
                raise _Usage(f"{args.step} finishes a forward-only migration: give --cutoff")
            if args.step == "backfill":
                report = backfill(
                    target, scheme, cutoff, family=args.family, prune_orphans=args.prune, **common
                )
            elif args.step == "verify":
                report = verify_backfill(target, scheme, cutoff, **common)
            elif args.step == "cutover":
                report = cut_over(target, scheme, cutoff, **common)
            else:
                report = delete_legacy(target, scheme, cutoff, **common)
    except _Usage as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SaltedTableError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return _print(report)


class _Common(TypedDict):
    options: PipelineOptions
    split_bytes: int
    progress: IO[str] | None


class _Usage(Exception):
    """Bad usage found after parsing."""


def _print(report: MigrationReport) -> int:
    print("\n".join(report.lines()))
    done = report.ok and "(" not in report.step
    return 0 if done else 1
