"""Peak memory of load_into: a 512 MiB tensor read with ``max_in_flight_bytes=64 MiB``; and
every buffer the library holds counted against the bound: many small tensors converted by
load_into (staging and the buffers coalesced requests pass through), quantized GGUF tensors
handed out by iter_tensors (the float32 arrays they are dequantized into).

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
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from tests.servers import Log

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU wheel in CI)")
safetensors_torch = pytest.importorskip("safetensors.torch")

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
    seen = _run_child(_CHILD, big_url, dtype, ELEMENTS, BOUND, PATTERN, need_reset=False)
    assert seen["right"]
    assert seen["loaded"] == ["big"]
    growth = seen["peak"] - seen["before"]
    assert growth <= tensor_bytes + BOUND + 100 * MiB, (growth / MiB, seen["reset"])
    assert log.total_bytes <= ELEMENTS * 4 + 2 * 64 * 1024  # each byte once, two header reads


# --- every buffer the library holds counts against the bound -----------------------------------

_MEASURE = r"""
import json, sys, time

def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

def reset():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        return True
    except OSError:
        return False
"""

_SMALL_CONVERTED_CHILD = (
    _MEASURE
    + r"""
import torch
import remotetensors as rt

url, count, elements, bound = sys.argv[1], *map(int, sys.argv[2:])

class Many(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(count):
            self.register_parameter(f"t{i:04d}", torch.nn.Parameter(
                torch.zeros(elements, dtype=torch.bfloat16)))

module = Many()  # real, in bfloat16: filled in place, so the growth is the library's alone
rt.open_model(url).close()  # the bridge thread, the client and their imports
was_reset = reset()
before = status("VmRSS")
report = rt.load_into(module, url, max_in_flight_bytes=bound)
peak = status("VmHWM")
base = torch.arange(elements) % 251
right = all(
    torch.equal(getattr(module, f"t{i:04d}"), (base + i % 5).to(torch.bfloat16))
    for i in range(count)
)
print(json.dumps({"before": before, "peak": peak, "reset": was_reset, "right": right,
                  "loaded": len(report.loaded)}))
"""
)

_GGUF_CHILD = (
    _MEASURE
    + r"""
import numpy as np
import gguf.quants  # imported before measuring, as the dequantizer needs it
import remotetensors as rt

url, count, bound = sys.argv[1], *map(int, sys.argv[2:])
rt.open_model(url).close()
was_reset = reset()
before = status("VmRSS")
seen = 0
for name, tensor in rt.iter_tensors(url, max_in_flight_bytes=bound, framework="numpy"):
    seen += tensor.dtype == np.float32
    del tensor  # nothing kept: what is held is the library's
    time.sleep(0.01)  # a slow consumer: the producer runs as far ahead as the bound lets it
peak = status("VmHWM")
print(json.dumps({"before": before, "peak": peak, "reset": was_reset, "right": seen == count}))
"""
)


def _run_child(code: str, *args: object, need_reset: bool = True) -> dict[str, Any]:
    """What the child ``code`` printed last (JSON), run with ``args``; with ``need_reset``,
    skipped where the kernel does not let it reset its peak resident set."""
    env = {**os.environ, "PYTHONPATH": str(Path(rt.__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if need_reset and not seen["reset"]:
        pytest.skip("this kernel does not let a process reset its peak resident set")
    return seen


SMALL_COUNT = 512
SMALL_ELEMENTS = 64 * 1024  # F32: 256 KiB each, 128 MiB in all
SMALL_BOUND = 16 * MiB


def test_converting_small_tensors_holds_no_scratch_beyond_the_bound(
    static: tuple[str, Log, Path],
) -> None:
    """Many small F32 tensors into a bfloat16 module, in place: the staging buffers and any
    buffer a coalesced request is read into count against the bound together."""
    url, log, root = static
    base = torch.arange(SMALL_ELEMENTS) % 251
    tensors = {f"t{i:04d}": (base + i % 5).to(torch.float32) for i in range(SMALL_COUNT)}
    safetensors_torch.save_file(tensors, root / "small.safetensors")
    log.clear()
    seen = _run_child(
        _SMALL_CONVERTED_CHILD,
        f"{url}/small.safetensors",
        SMALL_COUNT,
        SMALL_ELEMENTS,
        SMALL_BOUND,
    )
    assert seen["right"]
    assert seen["loaded"] == SMALL_COUNT
    growth = seen["peak"] - seen["before"]
    assert growth <= SMALL_BOUND + 6 * MiB, growth / MiB
    # Still coalesced: a request serves several tensors (a lane's batch holds 8).
    assert len(log.entries) <= SMALL_COUNT // 6


GGUF_COUNT = 48
GGUF_SHAPE = (64, 4096)  # Q4_0: 144 KiB stored, 1 MiB as float32
GGUF_BOUND = 8 * MiB


def test_iter_tensors_counts_dequantized_arrays_against_the_bound(
    static: tuple[str, Log, Path],
) -> None:
    """Q4_0 tensors come out as float32, 7 times their stored bytes: what the iterator holds
    (read and produced, not yet handed out) stays within the bound."""
    from tests.gguf_files import Q, write_gguf

    url, _, root = static
    rng = np.random.default_rng(9)
    block, size = 32, 18
    tensors = {}
    for i in range(GGUF_COUNT):
        raw = rng.integers(0, 256, (GGUF_SHAPE[0], GGUF_SHAPE[1] // block * size), dtype=np.uint8)
        halves = raw.view("<u2")  # the f16 scales: no infinities or NaNs among them
        halves[(halves & 0x7C00) == 0x7C00] &= 0xBFFF
        tensors[f"blk.{i}.weight"] = (raw, Q.Q4_0)
    write_gguf(root / "q4.gguf", tensors, vocab_size=0, every_value=False)
    seen = _run_child(_GGUF_CHILD, f"{url}/q4.gguf", GGUF_COUNT, GGUF_BOUND)
    assert seen["right"]
    growth = seen["peak"] - seen["before"]
    assert growth <= GGUF_BOUND + 6 * MiB, growth / MiB
