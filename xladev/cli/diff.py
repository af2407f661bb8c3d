"""`xladev diff`: what changed between two graphs of a dump, or at each trigger site of one dump.

    xladev diff dump.txt:3 dump.txt:4      # records 3 and 4 (or hash prefixes: dump.txt:8109fb)
    xladev diff a.txt b.txt                # the last graph of each file
    xladev diff --file dump.txt 3 8109fb   # selectors within one dump
    xladev diff --file dump.txt            # per site: consecutive distinct graphs, and why they differ
"""

from __future__ import annotations

import argparse
import os
import sys

from xladev.dumps.ir_parser import parse_ir
from xladev.dumps.dump_file import DumpError, find, read_records
from xladev.schema.graph_dump import Record
from xladev.graphdiff import differences


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("diff", help="compare graphs from XLA_SAVE_TENSORS_FILE dumps",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", nargs="*", metavar="GRAPH",
                        help="PATH[:N|:HASH] (or N|HASH with --file); two of them, or none with --file")
    parser.add_argument("--file", "-f", help="the dump file the selectors refer to; alone: group it by site")


def _describe(record: Record, path: str) -> str:
    return (f"record {record.index} (step {record.step}) of {os.path.basename(path)}, graph {record.graph_hash}, "
            f"at {_short(record.site)}")


def _short(site: str) -> str:
    path, _, rest = site.partition(":")
    return f"{os.path.basename(path)}:{rest}"


def _summary(record: Record):
    try:
        return parse_ir(record.graph_text, record.graph_hash)
    except ValueError:
        raise DumpError(f"record {record.index} (line {record.line}) is not in the text format "
                        "(diff needs XLA_SAVE_TENSORS_FMT=text)") from None


def _load(path: str, warnings: list[str], cache: dict) -> list[Record]:
    if path not in cache:
        cache[path] = read_records(path, warnings)
    return cache[path]


def _resolve(spec: str, default_file: str | None, warnings: list[str], cache: dict) -> tuple[Record, str]:
    if default_file is not None:
        return find(_load(default_file, warnings, cache), spec), default_file
    path, selector = spec, None
    if not os.path.exists(spec) and ":" in spec:
        path, _, selector = spec.rpartition(":")
    records = _load(path, warnings, cache)
    return (find(records, selector) if selector else records[-1]), path


def _print_changes(old: Record, new: Record, out) -> None:
    for line in differences(_summary(old), _summary(new)):
        print(f"  - {line}", file=out)


def compare(args, out) -> int:
    warnings: list[str] = []
    cache: dict = {}
    (a, path_a), (b, path_b) = (_resolve(s, args.file, warnings, cache) for s in args.graphs)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"A: {_describe(a, path_a)}", file=out)
    print(f"B: {_describe(b, path_b)}", file=out)
    if a.graph_hash == b.graph_hash:
        print("The graphs are identical (same hash).", file=out)
        return 0
    print("What changed from A to B:", file=out)
    _print_changes(a, b, out)
    return 0


def group_by_site(path: str, out) -> int:
    warnings: list[str] = []
    records = read_records(path, warnings)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    sites: dict[str, list[Record]] = {}
    for record in records:
        sites.setdefault(record.site, []).append(record)
    distinct = len({r.graph_hash for r in records})
    print(f"{os.path.basename(path)}: {len(records)} records, {distinct} distinct graphs, {len(sites)} trigger site(s)",
          file=out)
    for site, group in sites.items():
        hashes = []
        for r in group:
            if r.graph_hash not in hashes:
                hashes.append(r.graph_hash)
        print(f"\n{_short(site)}: {len(group)} record(s), {len(hashes)} distinct graph(s)", file=out)
        previous = group[0]
        for record in group[1:]:
            if record.graph_hash == previous.graph_hash:
                continue
            print(f"  step {record.step} (record {record.index}): graph {previous.graph_hash[:12]} -> "
                  f"{record.graph_hash[:12]}", file=out)
            for line in differences(_summary(previous), _summary(record)):
                print(f"    - {line}", file=out)
            previous = record
        if len(hashes) == 1:
            print("  the same graph every time: no recompilation here", file=out)
    return 0


def run(args) -> int:
    out = sys.stdout
    try:
        if len(args.graphs) == 2:
            return compare(args, out)
        if not args.graphs and args.file:
            return group_by_site(args.file, out)
        print("xladev diff: give two graphs (PATH[:N|:HASH]), or --file DUMP alone to group it by site",
              file=sys.stderr)
        return 2
    except DumpError as exc:
        print(f"xladev diff: {exc}", file=sys.stderr)
        return 2
