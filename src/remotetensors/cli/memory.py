"""``remotetensors memory LOCATION``: the memory to serve a model, weights as stored plus the KV
cache for a context and batch."""

from __future__ import annotations

import argparse
import json

from .options import UsageError, add_location_options, opened

HELP = "Memory to serve: weights as stored plus the KV cache."
# One line for --help's list of examples.
EXAMPLE = "remotetensors memory hf://Qwen/Qwen3-8B --context 32768 --batch 4"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    add_location_options(sub)
    sub.add_argument("--context", type=int, default=None, help="tokens per sequence")
    sub.add_argument("--batch", type=int, default=1, help="sequences at once (default 1)")
    sub.add_argument("--kv-dtype", default=None, help="KV cache dtype: bf16, f16, fp8, ...")


def run(args: argparse.Namespace) -> int:
    from ..views.reports import memory_report, memory_text

    _check(args)
    with opened(args) as model:
        report = memory_report(
            model, context=args.context, batch=args.batch, kv_dtype=args.kv_dtype
        )
    print(json.dumps(report) if args.json else "\n".join(memory_text(report)))
    return 0


def _check(args: argparse.Namespace) -> None:
    """Refuse a bad ``--batch``, ``--context`` or ``--kv-dtype`` before any request.

    Raises:
        UsageError: naming the option.
    """
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}")
    if args.context is not None and args.context < 0:
        raise UsageError(f"--context must not be negative, got {args.context}")
    if args.kv_dtype is not None and args.kv_dtype != "auto":
        from ..quantization.memory import kv_dtype_name  # here: not needed for --help

        try:
            kv_dtype_name(args.kv_dtype)
        except ValueError as exc:
            raise UsageError(f"--kv-dtype: {exc}") from None
