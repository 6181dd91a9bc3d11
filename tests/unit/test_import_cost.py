"""``import remotetensors`` and ``remotetensors --help`` leave the heavy optional modules alone.

Counted, not timed: a fresh interpreter imports the package (or runs the CLI's ``--help``) and
reports which of the heavy modules ended up in ``sys.modules``. Each is imported where it is
used (fsspec for fsspec URLs, ml_dtypes for the dtypes it defines, tqdm for progress bars,
huggingface_hub for its stored token, torch for torch output).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("fsspec", "ml_dtypes", "tqdm", "huggingface_hub", "aiohttp", "torch", "safetensors")

_REPORT = (
    "import json, sys\n"
    "{body}\n"
    "print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))\n"
)


def loaded_after(body: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", _REPORT.format(body=body, heavy=HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    result: list[str] = json.loads(out.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    "body",
    [
        "import remotetensors",
        "import remotetensors.cli",
        "from remotetensors.cli import main_exit\n"
        "sys.argv = ['remotetensors', '--help']\n"
        "try:\n    main_exit()\nexcept SystemExit:\n    pass",
    ],
    ids=["import", "import cli", "--help"],
)
def test_heavy_modules_are_not_imported(body: str) -> None:
    assert loaded_after(body) == []


def test_they_are_imported_when_used() -> None:
    # The lazy imports still happen: a BF16 dtype needs ml_dtypes, an fsspec URL needs fsspec.
    body = (
        "import remotetensors as rt\n"
        "rt.DTYPES['BF16'].numpy\n"
        "from remotetensors.sources.resolve import open_source\n"
        "open_source('memory://x/y.safetensors')"
    )
    assert loaded_after(body) == ["fsspec", "ml_dtypes"]
