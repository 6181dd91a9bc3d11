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
from pathlib import Path

import pytest

# Not listed: safetensors and bintensors (1-2 ms together), imported on purpose when installed so
# that our errors are also instances of their exception classes (the drop-in, see errors.py).
HEAVY = ("fsspec", "ml_dtypes", "tqdm", "huggingface_hub", "aiohttp", "torch")
# Not even these for the package alone and for --help: our names are imported on first use.
BASE = ("numpy", "httpx", "asyncio", "remotetensors.models.sync", "remotetensors.models.model")

_REPORT = (
    "import json, sys\n"
    "{body}\n"
    "print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))\n"
)


def loaded_after(body: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", _REPORT.format(body=body, heavy=heavy)],
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


@pytest.mark.parametrize(
    "body",
    [
        "import remotetensors",
        "from remotetensors.cli import main_exit\n"
        "sys.argv = ['remotetensors', '--help']\n"
        "try:\n    main_exit()\nexcept SystemExit:\n    pass",
    ],
    ids=["import", "--help"],
)
def test_the_package_and_help_import_neither_numpy_nor_httpx(body: str) -> None:
    assert loaded_after(body, BASE) == []


def test_names_and_submodules_load_on_first_use() -> None:
    body = (
        "import remotetensors as rt\n"
        "assert rt.open_model.__module__ == 'remotetensors.models.sync'\n"
        "assert rt.models.sync.safe_open is rt.safe_open\n"
        "import remotetensors.views.compare, remotetensors.models.scan\n"  # their functions stay
        "assert callable(rt.compare) and callable(rt.scan)\n"
        "from remotetensors import HttpOptions, ScanResult\n"
        "assert sorted(rt.__all__) == sorted(n for n in dir(rt))\n"
        "assert all(getattr(rt, n) is not None for n in rt.__all__)\n"
    )
    assert loaded_after(body, ("numpy",)) == ["numpy"]


def test_they_are_imported_when_used() -> None:
    # The lazy imports still happen: a BF16 dtype needs ml_dtypes, an fsspec URL needs fsspec.
    body = (
        "import remotetensors as rt\n"
        "rt.DTYPES['BF16'].numpy\n"
        "from remotetensors.sources.resolve import open_source\n"
        "open_source('memory://x/y.safetensors')"
    )
    assert loaded_after(body) == ["fsspec", "ml_dtypes"]


def test_the_user_agent_names_the_installed_version_without_importlib_metadata() -> None:
    # The version is a constant (remotetensors.version), kept equal to the distribution's:
    # every request names it, and looking it up through importlib.metadata cost ~50 ms.
    import importlib.metadata

    from remotetensors.sources.http.policy import user_agent
    from remotetensors.version import __version__

    assert __version__ == importlib.metadata.version("remotetensors")
    assert user_agent() == f"remotetensors/{__version__}"
    body = (
        "from remotetensors.sources.http.policy import user_agent\n"
        "assert user_agent().startswith('remotetensors/')"
    )
    assert loaded_after(body, ("importlib.metadata",)) == []


def test_a_safetensors_model_imports_no_other_formats_parser(tmp_path: Path) -> None:
    # Every open sniffs the first bytes (formats.magic); GGUF's and PyTorch's parsers and
    # readers (tens of milliseconds) are imported only for their files.
    import numpy as np
    from safetensors.numpy import save_file

    path = tmp_path / "model.safetensors"
    save_file({"w": np.ones(4, np.float32)}, str(path))
    parsers = (
        "remotetensors.formats.gguf",
        "remotetensors.formats.torch_bin",
        "remotetensors.formats.torch_pickle",
        "remotetensors.formats.torch_zip",
        "remotetensors.reading.gguf",
        "remotetensors.reading.torch_bin",
    )
    body = (
        "import remotetensors as rt\n"
        f"with rt.open_model({str(tmp_path)!r}) as m:\n"
        "    assert m.parameter_count() == {'F32': 4}\n"
        "    m.true_count\n"
    )
    assert loaded_after(body, parsers) == []
