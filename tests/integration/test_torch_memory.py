"""Peak memory of load_into: a 512 MiB tensor read with ``max_in_flight_bytes=64 MiB``.

Measured in a fresh process from ``VmHWM`` (the kernel's peak resident set), reset after the
imports and a first open where the kernel allows it: the growth must stay within the module's
tensor plus the bound plus 100 MiB, in place (F32 into F32) and converted (F32 into BF16,
through the staging buffers). The file is served over HTTP by aiohttp's static handler in this
process, so the server's memory is not counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import remotetensors as rt
from tests.servers import Log

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU wheel in CI)")

MiB = 1024 * 1024
ELEMENTS = 128 * MiB  # F32: 512 MiB
BOUND = 64 * MiB
PATTERN = 65536  # element i holds float(i % PATTERN): exact in F32 and checkable piece by piece

_CHILD = r"""
import json, sys
import torch
import remotetensors as rt

url, dtype_name, elements, bound, pattern = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
dtype = getattr(torch, dtype_name)

def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

rt.open_model(url).close()  # the bridge thread, the client and their imports, before measuring
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    reset = True
except OSError:
    reset = False
before = status("VmRSS")

class Big(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.big = torch.nn.Parameter(torch.empty(elements, dtype=dtype, device="meta"))

module = Big()
report = rt.load_into(module, url, max_in_flight_bytes=bound)
peak = status("VmHWM")
step = 16 * 1024 * 1024
right = module.big.dtype == dtype and not module.big.is_meta
for start in range(0, elements, step):
    expected = (torch.arange(start, min(start + step, elements)) % pattern).to(dtype)
    right = right and torch.equal(module.big[start : start + step], expected)
print(json.dumps({"before": before, "peak": peak, "reset": reset, "right": bool(right),
                  "loaded": list(report.loaded)}))
"""


def write_big(path: Path) -> None:
    """A safetensors file with one F32 tensor of ``ELEMENTS`` elements, written in pieces."""
    header = json.dumps(
        {"big": {"dtype": "F32", "shape": [ELEMENTS], "data_offsets": [0, ELEMENTS * 4]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    step = 16 * MiB
    with path.open("wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        for start in range(0, ELEMENTS, step):
            piece = (torch.arange(start, start + step) % PATTERN).to(torch.float32)
            f.write(piece.numpy().tobytes())


@pytest.fixture(scope="module")
def big_url(static: tuple[str, Log, Path]) -> str:
    url, _, root = static
    write_big(root / "big.safetensors")
    return f"{url}/big.safetensors"


@pytest.mark.parametrize(
    ("dtype", "tensor_bytes"), [("float32", 512 * MiB), ("bfloat16", 256 * MiB)]
)
def test_peak_memory_is_the_tensor_plus_the_bound(
    big_url: str, static: tuple[str, Log, Path], dtype: str, tensor_bytes: int
) -> None:
    _, log, _ = static
    log.clear()
    env = {**os.environ, "PYTHONPATH": str(Path(rt.__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, big_url, dtype, str(ELEMENTS), str(BOUND), str(PATTERN)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["right"]
    assert seen["loaded"] == ["big"]
    growth = seen["peak"] - seen["before"]
    assert growth <= tensor_bytes + BOUND + 100 * MiB, (growth / MiB, seen["reset"])
    assert log.total_bytes <= ELEMENTS * 4 + 2 * 64 * 1024  # each byte once, two header reads
