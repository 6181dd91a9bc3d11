"""``remotetensors params LOCATION``: the true parameter count, then the count by dtype as
stored. Several locations (or ``--from-file``) make a scan: see :mod:`.scan`."""

from __future__ import annotations

import argparse
import json

from . import scan
from .options import add_location_options, open_options, opened
from .table import print_table

HELP = "Count parameters: the true total, then by dtype as stored."
# One line for --help's list of examples.
EXAMPLE = "remotetensors params hf://Qwen/Qwen3-30B-A3B"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    add_location_options(sub, many=True)
    scan.add_arguments(sub)


def run(args: argparse.Namespace) -> int:
    from ..views.pipelines import components_table
    from ..views.reports import params_report, params_text

    if scan.is_scan(args):
        return scan.run(args, open_options(args))
    args.location = args.location[0]
    with opened(args) as model:
        report = params_report(model)
    if args.json:
        print(json.dumps(report))
        return 0
    lines, headers, rows = params_text(report)
    print("\n".join(lines))
    if "components" in report:
        print_table(*components_table(report), right=("parameters", "human", "size"))
    print_table(headers, rows, right=("parameters", "human", "bits/weight"))
    return 0
