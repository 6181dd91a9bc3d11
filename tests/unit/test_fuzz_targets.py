"""The fuzz targets of ``tests/fuzz/`` run without a fuzzer: every seed, and every input a
fuzz run found (kept in ``tests/fuzz/findings/<target>/``, one file each), must pass its
target's check. A finding's fix is tested here, and in the module that owns the rule (a request
header's ASCII separators: ``test_http1.py``)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.run import TARGETS

FINDINGS = Path(__file__).parent.parent / "fuzz" / "findings"


def inputs() -> list[tuple[str, str, bytes]]:
    cases = []
    for target in TARGETS:
        module = importlib.import_module(f"tests.fuzz.{target}")
        cases += [(target, f"seed {i}", data) for i, data in enumerate(module.seeds())]
        for path in sorted((FINDINGS / target).glob("*")):
            cases.append((target, path.name, path.read_bytes()))
    return cases


CASES = inputs()


@pytest.mark.parametrize(
    ("target", "data"), [(t, d) for t, _, d in CASES], ids=[f"{t}: {n}" for t, n, _ in CASES]
)
def test_every_seed_and_finding_passes_its_target(target: str, data: bytes) -> None:
    importlib.import_module(f"tests.fuzz.{target}").check(data)


def test_every_target_has_its_findings_folder() -> None:
    assert sorted(p.name for p in FINDINGS.iterdir()) == sorted(TARGETS)


def test_pytest_collects_no_fuzz_target() -> None:
    # The targets run under libFuzzer (run.py), with atheris, which the tests do without.
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            str(FINDINGS.parent),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert collected.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, collected.stdout
    assert "atheris" not in collected.stdout + collected.stderr
