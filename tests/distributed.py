"""Real ``torch.distributed`` jobs for the tests: ``world`` spawned processes joined in one
process group over loopback (``gloo`` on the CPU; ``nccl`` where a test asks for it and CUDA
has the devices), each running a module-level function and handing back a picklable result.

A job that does not finish within its time is killed and fails the test (never a hang); a rank
that raises fails it with the rank's traceback.
"""

from __future__ import annotations

import os
import pickle
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU wheel in CI)")
dist = torch.distributed
if not dist.is_available():  # pragma: no cover - a torch built without distributed support
    pytest.skip("this torch has no torch.distributed", allow_module_level=True)

T = TypeVar("T")

JOB_SECONDS = 240.0
"""A job's time, start-up included (each process imports torch: seconds on two cores)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_job(
    world: int,
    work: Callable[[int, int, Any], T],
    argument: Any,
    *,
    backend: str = "gloo",
    seconds: float = JOB_SECONDS,
) -> list[T]:
    """Run ``work(rank, world, argument)`` on each rank of a new process group; the results
    in rank order.

    Raises:
        AssertionError: the job outlived ``seconds`` (its processes are killed).
        torch.multiprocessing.ProcessRaisedException: a rank raised (its traceback inside).
    """
    with tempfile.TemporaryDirectory(prefix="rt-job-") as folder:
        context = torch.multiprocessing.start_processes(
            _rank_main,
            args=(world, free_port(), backend, work, argument, folder),
            nprocs=world,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + seconds
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise AssertionError(f"a job of {world} ranks ran past {seconds} s")
        return [
            pickle.loads((Path(folder) / f"{rank}.pickle").read_bytes()) for rank in range(world)
        ]


def _rank_main(
    rank: int,
    world: int,
    port: int,
    backend: str,
    work: Callable[[int, int, Any], Any],
    argument: Any,
    folder: str,
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        result = work(rank, world, argument)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    (Path(folder) / f"{rank}.pickle").write_bytes(pickle.dumps(result))


GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "tensor-parallel.md"
"""The guide whose examples run under torchrun: "Tensor-parallel and expert-parallel loading"."""


def run_guide_example(runner: str, folder: Path, ranks: int = 2) -> str:
    """Run the guide's example marked ``<!-- example: run by RUNNER -->`` (``runner``: the test
    file's path from the repository root), as written, under ``torchrun --standalone`` with
    ``ranks`` processes in ``folder``; its standard output.

    Raises:
        AssertionError: no such example, or the job failed (its stderr's end in the message).
    """
    found = re.search(
        rf"<!-- example: run by {re.escape(runner)} -->\n```python\n(.*?)^```",
        GUIDE.read_text(encoding="utf-8"),
        re.S | re.M,
    )
    assert found is not None, f"no example of {GUIDE.name} is marked as run by {runner}"
    script = folder / "load.py"
    script.write_text(found.group(1), encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    result = subprocess.run(
        [*command, "--nproc-per-node", str(ranks), str(script)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=folder,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def header_bytes(url: str, log: Any) -> int:
    """Bytes that opening ``url`` as ``load_into`` opens it (no configs, no cache) costs at the
    server whose request log is ``log``: the header phase a rank pays besides its tensors."""
    import warnings

    import remotetensors as rt

    log.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.ConfigWarning)  # an MoE's active count: not asked
        with rt.open_model(url, options=rt.ReadOptions(read_configs=False, cache=False)):
            pass
    cost = int(log.total_bytes)
    log.clear()
    return cost
