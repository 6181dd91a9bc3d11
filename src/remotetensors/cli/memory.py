"""``remotetensors memory LOCATION``: the memory to serve a model, weights as stored plus the KV
cache for a context and batch."""

from __future__ import annotations

import argparse
import json

from .options import add_location_options, opened

HELP = "Memory to serve: weights as stored plus the KV cache."


def add_arguments(sub: argparse.ArgumentParser) -> None:
    add_location_options(sub)
    sub.add_argument("--context", type=int, default=None, help="tokens per sequence")
    sub.add_argument("--batch", type=int, default=1, help="sequences at once (default 1)")
    sub.add_argument("--kv-dtype", default=None, help="KV cache dtype: bf16, f16, fp8, ...")


def run(args: argparse.Namespace) -> int:
    from ..views.reports import memory_report, memory_text

    with opened(args) as model:
        report = memory_report(
            model, context=args.context, batch=args.batch, kv_dtype=args.kv_dtype
        )
    print(json.dumps(report) if args.json else "\n".join(memory_text(report)))
    return 0
