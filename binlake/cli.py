"""The `binlake` command line. Each subcommand parses its options and calls one service function."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__
from .binlog.errors import BinlogError
from .binlog.output import OutputError


def _add_decode_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", help="binlog files (plain or gzip), read in the order given")
    p.add_argument("--sort", action="store_true", help="read the files in binlog sequence-number order")
    p.add_argument("--start-position", type=int, help="first event position to read (applies to the first file)")
    p.add_argument("--stop-position", type=int, help="stop before the event at this position (last file)")
    p.add_argument("--start-time", help="skip events before this ISO 8601 time (UTC unless a zone is given)")
    p.add_argument("--stop-time", help="skip events at or after this ISO 8601 time")
    p.add_argument("--databases", help="comma-separated databases to keep")
    p.add_argument("--tables", help="regular expression on db.table to keep")
    p.add_argument("--ops", help="comma-separated operations to keep: insert,update,delete")


def _options_from(args: argparse.Namespace, all_events: bool = False):
    from .binlog.api import build_options

    return build_options(
        start_position=args.start_position,
        stop_position=args.stop_position,
        start_time=args.start_time,
        stop_time=args.stop_time,
        databases=args.databases,
        tables=args.tables,
        ops=args.ops,
        all_events=all_events,
    )


def cmd_decode(args: argparse.Namespace) -> int:
    from .binlog.api import decode_to, order_files

    files = order_files(args.files, args.sort)
    opts = _options_from(args, all_events=args.all_events)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    try:
        n, decoder = decode_to(files, out, args.format, opts)
    finally:
        if args.output:
            out.close()
    for r in decoder.results:
        if r.end is not None and r.end.status != "complete":
            print(f"binlake: {r.name}: read ended at position {r.end.pos} ({r.end.status})", file=sys.stderr)
    if args.output:
        print(f"binlake: wrote {n} records to {args.output}", file=sys.stderr)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from .binlog.api import compute_stats, order_files
    from .binlog.stats import render_text

    report = compute_stats(order_files(args.files, args.sort), _options_from(args), top=args.top)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_text(report))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.workdir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="binlake",
        description="MySQL/MariaDB binary logs into Delta Lake: decode, inspect and ingest binlog files.",
    )
    parser.add_argument("--version", action="version", version=f"binlake {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("decode", help="decode binlog files to JSON lines, SQL or rollback SQL")
    _add_decode_filters(p)
    p.add_argument("--format", choices=("jsonl", "sql", "rollback"), default="jsonl")
    p.add_argument("--all-events", action="store_true", help="also emit non-row events (statements, DDL, GTIDs...)")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.set_defaults(func=cmd_decode)

    p = sub.add_parser("stats", help="row counts per table and operation, transactions, throughput over time")
    _add_decode_filters(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--top", type=int, default=10, help="how many largest/longest transactions to list")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("demo", help="write sample binlogs and decode them (no server, no network)")
    p.add_argument("--workdir", default=".binlake-demo", help="where the demo writes its files")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except BinlogError as exc:
        print(f"binlake: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except OutputError as exc:
        print(f"binlake: error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"binlake: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
