"""``remotetensors cache info|ls|prune|clear``: the persistent header cache's folder.

``info`` says where the folder is and what it holds (entries, bytes, the bound, whether offline
mode is on); ``ls`` lists the entries, least recently used first; ``prune`` removes entries unused
for ``--older-than`` and then the least recently used until the folder holds ``--max-size``
(entries that are not whole go too); ``clear`` removes every entry. ``--json`` on each.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import TYPE_CHECKING, Any

from .options import UsageError, parse_size
from .table import print_table

if TYPE_CHECKING:
    from ..sources.cache.store import CacheStore

HELP = "Show, list, prune or clear the persistent header cache."
# One line for --help's list of examples.
EXAMPLE = "remotetensors cache prune --older-than 30d"

_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", re.IGNORECASE)
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def add_arguments(sub: argparse.ArgumentParser) -> None:
    actions = sub.add_subparsers(dest="action", required=True, metavar="ACTION")
    info = actions.add_parser("info", help="the folder, its entries and bytes, the bound")
    listing = actions.add_parser("ls", help="every entry, least recently used first")
    prune = actions.add_parser("prune", help="remove old entries, or down to a size")
    prune.add_argument(
        "--max-size", metavar="SIZE", help="keep at most SIZE (e.g. 100MB), newest first"
    )
    prune.add_argument(
        "--older-than", metavar="AGE", help="remove entries unused for AGE (e.g. 30d, 12h)"
    )
    clear = actions.add_parser("clear", help="remove every entry")
    for action in (info, listing, prune, clear):
        action.add_argument("--json", action="store_true", help="print JSON")


def parse_age(text: str) -> float:
    """``"30d"`` -> seconds (units s, m, h, d, w; seconds without one).

    Raises:
        UsageError: not an age.
    """
    match = _AGE.fullmatch(text)
    if match is None:
        raise UsageError(f"--older-than wants an age such as 3600, 90m, 12h or 30d, got {text!r}")
    return float(match.group(1)) * _AGE_UNITS[match.group(2).lower()]


def run(args: argparse.Namespace) -> int:
    from ..sources.cache.offline import offline_variable
    from ..sources.cache.store import default_store

    store = default_store()
    if args.action == "info":
        entries, size = store.usage()
        report: dict[str, Any] = {
            "folder": str(store.folder),
            "entries": entries,
            "bytes": size,
            "max_bytes": store.max_bytes,
            "offline": offline_variable() is not None,
        }
        _print(args, report)
    elif args.action == "ls":
        _list(args, store)
    elif args.action == "prune":
        max_bytes = None if args.max_size is None else parse_size(args.max_size, "--max-size")
        age = None if args.older_than is None else parse_age(args.older_than)
        if max_bytes is None and age is None:
            raise UsageError("cache prune wants --max-size SIZE, --older-than AGE, or both")
        removed, freed = store.prune(max_bytes=max_bytes, older_than_seconds=age)
        _done(args, store, removed, freed)
    else:
        removed, freed = store.clear()
        _done(args, store, removed, freed)
    return 0


def _list(args: argparse.Namespace, store: CacheStore) -> None:
    from ..views.display import human_bytes

    infos = sorted(store.entries(), key=lambda info: info.last_used)
    if args.json:
        print(json.dumps([info.as_dict() for info in infos]))
        return
    now = time.time()
    rows = [
        [
            info.shown or info.path.name,
            info.kind if info.ok else f"{info.kind} (not whole)",
            human_bytes(info.bytes),
            _ago(now - info.last_used),
        ]
        for info in infos
    ]
    print_table(["what", "kind", "size", "used"], rows, right=("size", "used"))


def _done(args: argparse.Namespace, store: CacheStore, removed: int, freed: int) -> None:
    entries, size = store.usage()
    report = {"removed": removed, "freed_bytes": freed, "entries": entries, "bytes": size}
    _print(args, report)


def _print(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """``report`` as JSON, or as ``key: value`` lines."""
    if args.json:
        print(json.dumps(report))
    else:
        print("\n".join(f"{key}: {value}" for key, value in report.items()))


def _ago(seconds: float) -> str:
    """``"3 s ago"``, ``"5 min ago"``, ``"2 h ago"``, ``"4 d ago"``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"
