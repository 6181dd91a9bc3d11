"""``remotetensors verify LOCATION``: read a file whole and check its SHA-256, against the one
its hub repo lists for it (an LFS file), or against ``--sha256``."""

from __future__ import annotations

import argparse
import json

from .options import UsageError, add_location_options, open_options

HELP = "Check a file's SHA-256: against its hub listing, or --sha256."
# One line for --help's list of examples.
EXAMPLE = "remotetensors verify hf://openai-community/gpt2/model.safetensors"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    add_location_options(sub)
    sub.add_argument(
        "--sha256", metavar="HEX", help="the digest to compare with (default: the hub's listing)"
    )


def run(args: argparse.Namespace) -> int:
    from ..models.checksum import verify_checksum_async, verify_listed_async
    from ..models.sync import run_sync

    kwargs = open_options(args)
    location = args.location
    if args.file:
        location = f"{location.rstrip('/')}/{args.file.lstrip('/')}"
    # A checksum streams its chunks in order through its own small window; --concurrency pins it.
    concurrency: int = kwargs["options"].max_concurrency or 4
    if args.sha256 is not None:
        digest = args.sha256.strip().lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise UsageError(f"--sha256 wants 64 hexadecimal digits, got {len(digest)} characters")
        run_sync(
            verify_checksum_async(
                location,
                digest,
                hasher="sha256",
                max_concurrency=concurrency,
                http_options=kwargs["http_options"],
            )
        )
        checked, size = location, None
    else:
        checked, digest, size = run_sync(
            verify_listed_async(
                location,
                token=kwargs["token"],
                revision=kwargs["revision"],
                http_options=kwargs["http_options"],
                max_concurrency=concurrency,
            )
        )
    if args.json:
        print(json.dumps({"location": checked, "sha256": digest, "bytes": size, "ok": True}))
    else:
        print(f"{checked}: sha256 {digest} OK")
    return 0
