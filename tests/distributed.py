"""Real ``torch.distributed`` jobs for the tests: ``world`` spawned processes joined in one
process group over loopback (``gloo`` on the CPU; ``nccl`` where a test asks for it and CUDA
has the devices), each running a module-level function and handing back a picklable result.

A job that does not finish within its time is killed and fails the test (never a hang); a rank
that raises fails it with the rank's traceback.
"""

from __future__ import annotations

import os
import pickle
import socket
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
