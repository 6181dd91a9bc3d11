"""The release as a newcomer meets it: ``python -m build`` makes an sdist and, from it, a wheel;
``twine check`` accepts both; the wheel installs into a fresh virtual environment and runs
``remotetensors demo`` there.

Offline, as every test: the build runs without isolation (hatchling, build and twine come with
the ``dev`` extra) and the fresh environment borrows this one's dependencies through a ``.pth``
line instead of fetching them, so what it proves is that the wheel holds a working package, its
entry point and its data, not that the registry serves its dependencies. About half a minute."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path, *, fresh: bool = False) -> str:
    """``argv``'s output; ``fresh``: without this run's PYTHONPATH (which names the tree)."""
    env = {k: v for k, v in os.environ.items() if not (fresh and k == "PYTHONPATH")}
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_and_sdist_build_check_install_and_run_the_demo(tmp_path: Path) -> None:
    pytest.importorskip("build", reason="python -m build comes with the dev extra")
    pytest.importorskip("twine", reason="twine comes with the dev extra")
    pytest.importorskip("hatchling", reason="the offline build needs hatchling (dev extra)")
    dist = tmp_path / "dist"
    # Without --sdist/--wheel, build makes the sdist, then the wheel from the unpacked sdist:
    # a file missing from the sdist fails here.
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)], ROOT)
    (wheel,) = dist.glob("remotetensors-*.whl")
    (sdist,) = dist.glob("remotetensors-*.tar.gz")
    checked = _run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)], ROOT
    )
    assert checked.count("PASSED") == 2, checked

    venv = tmp_path / "fresh"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel)],
        tmp_path,
    )  # fmt: skip
    purelib = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            tmp_path,
            fresh=True,
        ).strip()
    )
    # This environment's packages after the fresh one's own: plain paths, so the editable
    # install of the working tree (a .pth in a site folder) is not processed there.
    borrowed = [sysconfig.get_path("purelib"), *site.getsitepackages()]
    (purelib / "borrowed.pth").write_text("\n".join(dict.fromkeys(borrowed)) + "\n")

    where = _run(
        [str(python), "-c", "import remotetensors; print(remotetensors.__file__)"],
        tmp_path,
        fresh=True,
    )
    assert Path(where.strip()).is_relative_to(venv), where  # the wheel's copy, not the tree's
    shown = _run([str(venv / "bin" / "remotetensors"), "demo"], tmp_path, fresh=True)
    assert "Serving a sample sharded checkpoint" in shown
    assert "crossed the network:" in shown
