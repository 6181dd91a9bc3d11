"""Run each fuzz target for a set time and report executions, coverage and findings.

Usage (atheris is in the ``fuzz`` extra; run from the repository root)::

    python -m tests.fuzz.run --seconds 600                  # every target, one after another
    python -m tests.fuzz.run --seconds 60 --target http_head

Each target runs in a process of its own under libFuzzer (atheris), one core, starting from
its seeds, the findings kept in ``findings/`` and the corpus a previous run left in
``--workdir`` (default ``.fuzz/``, ignored by git). The report gives per target: executions, libFuzzer's final ``cov:`` (edges covered in the
instrumented modules) and ``ft:`` (features), the corpus size, and the findings: each input that
failed is saved as ``crash-*`` (``timeout-*`` past :data:`TIMEOUT_SECONDS`, ``oom-*`` past
libFuzzer's memory limit) in the target's folder, and the run stops at the first one. A
finding becomes a regular test in ``tests/unit/test_fuzz_targets.py``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

TARGETS: dict[str, tuple[str, ...]] = {
    "safetensors_header": (
        "remotetensors.formats.safetensors",
        "remotetensors.formats.strict_json",
        "remotetensors.index",
    ),
    "http_head": ("remotetensors.sources.http.head",),
    "torch_bin": (
        "remotetensors.formats.torch_globals",
        "remotetensors.formats.torch_pickle",
        "remotetensors.formats.torch_zip",
        "remotetensors.formats.torch_bin",
    ),
}
"""Target module (in this package) -> the modules imported under instrumentation before it:
the parser under test. atheris instruments every module of our package imported meanwhile (the
parsers' packages and what they import), so their edges make ``cov``; the oracle (the reference
reader, h11) is imported afterwards, uninstrumented, and guides nothing."""

TIMEOUT_SECONDS = 10
"""An input that runs longer is a finding (libFuzzer's ``-timeout``; its default is 20 minutes).
The targets bound their own reads tighter where they measure them."""

_ARTIFACTS = ("crash-*", "timeout-*", "oom-*", "leak-*")
"""What libFuzzer saves for an input that failed."""

FINDINGS = Path(__file__).parent / "findings"
"""The inputs fuzz runs found, one folder per target (tests/unit/test_fuzz_targets.py runs
them)."""

_PROGRESS = re.compile(rb"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.MULTILINE)
_DONE = re.compile(rb"^Done (\d+) runs in (\d+) second", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """One target's run.

    Attributes:
        target: the target module's name.
        seconds: wall time of the run (s).
        executions: inputs run (libFuzzer's count).
        coverage: the last ``cov:`` libFuzzer printed (instrumented edges reached).
        features: the last ``ft:``.
        corpus: inputs in the corpus at the end.
        findings: paths of the inputs that failed (empty when none did).
        exit_status: the fuzzer process's.
    """

    target: str
    seconds: float
    executions: int
    coverage: int
    features: int
    corpus: int
    findings: list[str]
    exit_status: int


def main(argv: list[str] | None = None) -> int:
    """Run the targets asked for; exit status 1 when any found something."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--workdir", type=Path, default=Path(".fuzz"))
    parser.add_argument("--json", action="store_true", help="one JSON line per target")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.child:
        _fuzz(args.child, rest)  # does not return: libFuzzer exits the process
    outcomes = [_run(name, args.seconds, args.workdir) for name in args.target or TARGETS]
    for outcome in outcomes:
        if args.json:
            print(json.dumps(asdict(outcome)))
        else:
            print(_line(outcome))
    if not args.json:
        print(
            f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
        )
    return 1 if any(o.findings or o.exit_status for o in outcomes) else 0


def _run(name: str, seconds: int, workdir: Path) -> Outcome:
    """Fuzz ``name`` for ``seconds`` in a child process; parse what libFuzzer printed."""
    folder = workdir / name
    corpus, seeds = folder / "corpus", folder / "seeds"
    corpus.mkdir(parents=True, exist_ok=True)
    _write_seeds(name, seeds, folder / "dictionary")
    before = _artifacts(folder)
    command = [
        sys.executable,
        "-m",
        "tests.fuzz.run",
        "--child",
        name,
        f"-max_total_time={seconds}",
        f"-dict={folder / 'dictionary'}",
        f"-artifact_prefix={folder}/",
        f"-timeout={TIMEOUT_SECONDS}",
        "-use_value_profile=1",
        "-print_final_stats=1",
        str(corpus),
        str(seeds),
        str(FINDINGS / name),  # what earlier runs found, fixed since: mutated further
    ]
    started = time.monotonic()
    finished = subprocess.run(command, capture_output=True, check=False)
    elapsed = time.monotonic() - started
    log = finished.stdout + finished.stderr
    (folder / "last-run.log").write_bytes(log)
    progress = _PROGRESS.findall(log)
    done = _DONE.search(log)
    last = progress[-1] if progress else (b"0", b"0", b"0", b"0")
    return Outcome(
        target=name,
        seconds=round(elapsed, 1),
        executions=int(done.group(1) if done else last[0]),
        coverage=int(last[1]),
        features=int(last[2]),
        corpus=len(list(corpus.iterdir())),
        findings=sorted(str(p) for p in _artifacts(folder) - before),
        exit_status=finished.returncode,
    )


def _artifacts(folder: Path) -> set[Path]:
    return {path for pattern in _ARTIFACTS for path in folder.glob(pattern)}


def _write_seeds(name: str, seeds: Path, dictionary: Path) -> None:
    module = importlib.import_module(f"tests.fuzz.{name}")
    seeds.mkdir(parents=True, exist_ok=True)
    for number, data in enumerate(module.seeds()):
        (seeds / f"seed-{number:03d}").write_bytes(data)
    # libFuzzer's dictionary format: one quoted token a line, bytes as \xNN.
    lines = ['"' + "".join(f"\\x{b:02x}" for b in token) + '"' for token in module.DICTIONARY]
    dictionary.write_text("\n".join(lines) + "\n", encoding="ascii")


def _fuzz(name: str, libfuzzer_args: list[str]) -> None:
    """In the child: instrument the target's modules, then hand over to libFuzzer."""
    import atheris  # the fuzz extra; only the child needs it

    with atheris.instrument_imports(include=list(TARGETS[name])):
        for module in TARGETS[name]:
            importlib.import_module(module)
    target = importlib.import_module(f"tests.fuzz.{name}")
    atheris.Setup([sys.argv[0], *libfuzzer_args], target.check)
    atheris.Fuzz()


def _line(outcome: Outcome) -> str:
    found = ", ".join(outcome.findings) if outcome.findings else "none"
    return (
        f"{outcome.target}: {outcome.executions:,} executions in {outcome.seconds:.0f} s, "
        f"cov {outcome.coverage}, ft {outcome.features}, corpus {outcome.corpus}, "
        f"findings: {found} (exit {outcome.exit_status})"
    )


if __name__ == "__main__":
    sys.exit(main())
