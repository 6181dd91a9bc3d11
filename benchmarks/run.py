"""Side-by-side benchmarks against the tools users would pick instead, in one run.

Usage:  python benchmarks/run.py [--latency-ms 0 50] [--out benchmarks/results]

Starts the loopback file server of ``benchmarks/server.py`` in its own process (once per latency),
builds the test files in a temporary folder, runs every workload with every tool, and writes a
Markdown report named after the date. See benchmarks/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx
import nginx
import numpy as np
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# --- the server ---------------------------------------------------------------------------------


class Server:
    def __init__(self, folder: Path, latency_ms: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "server.py"), str(folder), str(latency_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{self.process.stdout.readline().strip()}"

    def stats(self) -> dict[str, int]:
        result: dict[str, int] = httpx.get(f"{self.url}/__stats").json()
        return result

    def cpu_seconds(self) -> float:
        """CPU the server process has used so far (user and system), from /proc."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


@contextmanager
def serving(folder: Path, latency_ms: float) -> Iterator[Server]:
    server = Server(folder, latency_ms)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def first_contact() -> Iterator[dict[str, str]]:
    """The environment for a child process that meets its files for the first time: its own
    empty ``REMOTETENSORS_CACHE``, removed afterwards (the persistent cache would otherwise
    answer later rounds from what earlier ones kept, and keep the benchmark's files in the
    user's cache; it has its own benchmark, ``cache.py``)."""
    with tempfile.TemporaryDirectory(prefix="rt-bench-cache-") as folder:
        yield dict(os.environ, REMOTETENSORS_CACHE=folder)


WARM_BYTES = 1 << 30
"""Memory touched and freed before each large-read run (see :func:`big_tensor`)."""


def touch_and_free(nbytes: int) -> None:
    """Fault in ``nbytes`` of fresh memory and free it: the guest's free pages are then backed
    by the host for the next few seconds (until they are reported free again)."""
    np.ones(nbytes, np.uint8)


def run_first_contact(argv: list[str]) -> str:
    """What ``argv`` prints, run from the project's root in :func:`first_contact`'s
    environment.

    Raises:
        subprocess.CalledProcessError: it failed.
    """
    with first_contact() as env:
        done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return done.stdout


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall and CPU seconds of one call; CPU is ``time.process_time`` (every thread of this
    process, so an IO thread or event loop thread counts; the server's own CPU does not)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


# --- test files ----------------------------------------------------------------------------------


def write_models(root: Path) -> None:
    """bench/single (one file), bench/wide (a ~650 KB header), bench/shard72 (72 shards)."""
    rng = np.random.default_rng(0)
    single = root / "bench" / "single"
    single.mkdir(parents=True)
    save_file(
        {
            f"model.layers.{i}.w{j}": rng.standard_normal((64, 64)).astype(np.float16)
            for i in range(12)
            for j in range(4)
        },
        str(single / "model.safetensors"),
    )
    wide = root / "bench" / "wide"
    wide.mkdir(parents=True)
    save_file(
        {
            f"model.encoder.block.{i}.layer.{j}.attention.projection.weight": np.zeros(
                (2, 2), np.float16
            )
            for i in range(1000)
            for j in range(7)
        },
        str(wide / "model.safetensors"),
    )
    sharded = root / "bench" / "shard72"
    sharded.mkdir(parents=True)
    weight_map = {}
    for s in range(72):
        name = f"model-{s + 1:05d}-of-00072.safetensors"
        tensors = {
            f"model.layers.{s}.{part}.weight": np.zeros((8, 8), np.float16)
            for part in (
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
                "mlp.gate_proj",
                "mlp.up_proj",
                "mlp.down_proj",
                "input_layernorm",
                "post_attention_layernorm",
            )
        }
        save_file(tensors, str(sharded / name))
        weight_map.update(dict.fromkeys(tensors, name))
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map})
    )


def write_big_model(root: Path) -> list[str]:
    """~1 GB in 4 shards of 256 MiB (F32); returns five tensor names spread over three shards."""
    folder = root / "files" / "big"
    folder.mkdir(parents=True)
    weight_map = {}
    for s in range(4):
        name = f"model-{s + 1:05d}-of-00004.safetensors"
        tensors = {
            f"layers.{s}.{k}": np.full((1024, 2048), s * 100 + k, np.float32) for k in range(32)
        }
        save_file(tensors, str(folder / name))
        weight_map.update(dict.fromkeys(tensors, name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return ["layers.0.3", "layers.0.17", "layers.1.5", "layers.3.0", "layers.3.31"]


def write_big_tensor(root: Path) -> Path:
    path = root / "files" / "tensor512.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"big": np.ones(512 * 1024 * 1024 // 4, np.float32)}, str(path))
    return path


PARALLEL_COUNT, PARALLEL_MIB = 4, 128  # the table's title says "Four 128 MiB tensors"


def write_parallel_tensors(root: Path) -> Path:
    """Four F32 tensors of 128 MiB in one file (512 MiB of data), each a different value."""
    path = root / "files" / f"tensors{PARALLEL_COUNT}x{PARALLEL_MIB}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(
        {f"t{i}": np.full(PARALLEL_MIB * 2**20 // 4, i, np.float32) for i in range(PARALLEL_COUNT)},
        str(path),
    )
    return path


def write_many(root: Path, count: int) -> Path:
    folder = root / "files" / f"many{count}"
    folder.mkdir(parents=True)
    for i in range(count):
        save_file(
            {f"t{j}": np.zeros(16, np.float32) for j in range(50)},
            str(folder / f"f{i}.safetensors"),
        )
    return folder


# --- 1. parameter counting ----------------------------------------------------------------------


# Models of the count table: (label, repo, endpoint path). The endpoint ``/noapi`` is the same
# server as a hub without the one-call safetensors-metadata route (see server.py).
COUNT_MODELS = (
    ("single", "single", ""),
    ("wide", "wide", ""),
    ("shard72", "shard72", ""),
    ("shard72, no metadata endpoint", "shard72", "/noapi"),
)


def count_ours(server: Server, repo: str, prefix: str = "") -> dict[str, int]:
    import remotetensors as rt

    os.environ["HF_ENDPOINT"] = server.url + prefix
    # A first contact every round: the persistent cache has its own benchmark (cache.py).
    options = rt.ReadOptions(cache=False)
    with rt.open_model(f"hf://bench/{repo}", token=False, options=options) as model:
        return model.parameter_count()


def count_hub(server: Server, repo: str, cache: Path, prefix: str = "") -> dict[str, int]:
    from huggingface_hub import HfApi, constants

    constants.HF_HUB_CACHE = str(cache)
    meta = HfApi(endpoint=server.url + prefix, token=False).get_safetensors_metadata(
        f"bench/{repo}"
    )
    return dict(sorted(meta.parameter_count.items()))


def count_fsspec(server: Server, repo: str, prefix: str = "") -> dict[str, int]:
    import fsspec

    fs = fsspec.filesystem("http", skip_instance_cache=True)
    base = f"{server.url}{prefix}/bench/{repo}/resolve/main"
    try:
        index = json.loads(fs.cat_file(f"{base}/model.safetensors.index.json"))
        files = sorted(set(index["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    counts: dict[str, int] = {}
    for name in files:
        n = int.from_bytes(fs.cat_file(f"{base}/{name}", start=0, end=8), "little")
        header = json.loads(fs.cat_file(f"{base}/{name}", start=8, end=8 + n))
        for key, entry in header.items():
            if key != "__metadata__":
                counts[entry["dtype"]] = counts.get(entry["dtype"], 0) + int(
                    np.prod(entry["shape"])
                )
    return dict(sorted(counts.items()))


# --- 2. partial load ----------------------------------------------------------------------------


def partial_ours(server: Server, names: list[str]) -> dict[str, Any]:
    import remotetensors as rt

    with rt.open_model(f"{server.url}/files/big/", options=rt.ReadOptions(cache=False)) as model:
        return model.get_tensors(names)


def partial_download(server: Server, names: list[str], scratch: Path) -> dict[str, Any]:
    from safetensors import safe_open

    index = httpx.get(f"{server.url}/files/big/model.safetensors.index.json").json()["weight_map"]
    result = {}
    for shard in sorted({index[n] for n in names}):
        target = scratch / shard
        with (
            httpx.stream("GET", f"{server.url}/files/big/{shard}") as response,
            target.open("wb") as out,
        ):
            for chunk in response.iter_bytes(1 << 20):
                out.write(chunk)
        with safe_open(str(target), "numpy") as f:
            result.update({n: f.get_tensor(n) for n in names if index[n] == shard})
        target.unlink()
    return result


def partial_fsspec(server: Server, names: list[str]) -> dict[str, Any]:
    import fsspec

    fs = fsspec.filesystem("http", skip_instance_cache=True)
    base = f"{server.url}/files/big"
    index = json.loads(fs.cat_file(f"{base}/model.safetensors.index.json"))["weight_map"]
    paths, starts, ends, wanted = [], [], [], []
    for shard in sorted({index[n] for n in names}):
        n = int.from_bytes(fs.cat_file(f"{base}/{shard}", start=0, end=8), "little")
        header = json.loads(fs.cat_file(f"{base}/{shard}", start=8, end=8 + n))
        for name in names:
            if index[name] == shard:
                begin, stop = header[name]["data_offsets"]
                paths.append(f"{base}/{shard}")
                starts.append(8 + n + begin)
                ends.append(8 + n + stop)
                wanted.append(name)
    blobs = fs.cat_ranges(paths, starts, ends)
    return {n: np.frombuffer(b, np.float32) for n, b in zip(wanted, blobs, strict=True)}


def partial_obstore(server: Server, names: list[str]) -> dict[str, Any]:
    """obstore reading the headers (length, then header) and the ranges with get_ranges_async."""
    import asyncio

    import obstore
    from obstore.store import HTTPStore

    store = HTTPStore.from_url(f"{server.url}/files/big", client_options={"allow_http": True})

    async def go() -> dict[str, Any]:
        raw = await obstore.get_async(store, "model.safetensors.index.json")
        index = json.loads(bytes(await raw.bytes_async()))["weight_map"]
        result: dict[str, Any] = {}
        for shard in sorted({index[n] for n in names}):
            n = int.from_bytes(
                bytes(await obstore.get_range_async(store, shard, start=0, end=8)), "little"
            )
            header = json.loads(
                bytes(await obstore.get_range_async(store, shard, start=8, end=8 + n))
            )
            wanted = [name for name in names if index[name] == shard]
            spans = [header[name]["data_offsets"] for name in wanted]
            blobs = await obstore.get_ranges_async(
                store,
                shard,
                starts=[8 + n + b for b, _ in spans],
                ends=[8 + n + e for _, e in spans],
            )
            result.update(
                {
                    w: np.frombuffer(memoryview(b), np.float32)
                    for w, b in zip(wanted, blobs, strict=True)
                }
            )
        return result

    return asyncio.run(go())


# --- 3. one big tensor, each tool in its own process ------------------------------------------

# Each tool: (imports, body). Imports happen before the clock starts.
#
# A peer's coroutine keeps its buffer in a global and returns None. On Python 3.11, when
# asyncio.run has installed its SIGINT handler (the default, when the process does not ignore
# SIGINT), it ends with signal.getsignal(), whose failed Enum lookup formats the repr of that
# handler, which holds the main task, whose repr holds the task's result: a 512 MiB bytearray
# or obstore.Bytes returned from the coroutine is rendered in full (about 3.9 GB and 30 s;
# python/cpython#112559). The earlier results' aiohttp and obstore rows (0.01-0.05 GB/s, 3.9 GB
# RSS) measured that, not the clients.
BIG_TOOLS = {
    "curl": ("", "run_child(['curl', '-s', '-o', '/dev/null', URL])\n"),
    # What a user who downloads the tensor pays: the bytes land in page-cache memory (a file on
    # tmpfs, removed after), as they land in the array for the readers below.
    "curl -o file on tmpfs": (
        "import os, tempfile\nSCRATCH = tempfile.TemporaryDirectory(dir='/dev/shm')\n",
        "run_child(['curl', '-s', '-o', os.path.join(SCRATCH.name, 't'), URL])\n",
    ),
    "remotetensors": (
        "import remotetensors as rt\nrt.safe_open, rt.HttpOptions  # names load on first use: before the clock\n",
        "with rt.safe_open(URL) as f: a = f.get_tensor('big')\n",
    ),
    "httpx": (
        "import httpx\n",
        "buf = bytearray()\n"
        "with httpx.stream('GET', URL, timeout=60) as r:\n"
        "    for c in r.iter_raw(): buf += c\n",
    ),
    # aiohttp as its documentation suggests for large bodies: read in chunks, here straight
    # into a buffer of the Content-Length allocated once (not ``await r.read()``).
    "aiohttp (chunks into a preallocated buffer)": (
        "import asyncio, aiohttp\n",
        "async def go():\n"
        "    global buf\n"
        "    async with aiohttp.ClientSession() as s, s.get(URL) as r:\n"
        "        buf = bytearray(int(r.headers['Content-Length']))\n"
        "        view, at = memoryview(buf), 0\n"
        "        async for chunk in r.content.iter_chunked(1 << 20):\n"
        "            view[at : at + len(chunk)] = chunk\n"
        "            at += len(chunk)\n"
        "asyncio.run(go())\n",
    ),
    # obstore (Rust object_store): one get_range of the tensor's bytes, default client options.
    "obstore (HTTPStore.get_range_async)": (
        "import asyncio, obstore\nfrom obstore.store import HTTPStore\n",
        "base, name = URL.rsplit('/', 1)\n"
        "store = HTTPStore.from_url(base, client_options={'allow_http': True})\n"
        "async def go():\n"
        "    global buf\n"
        "    size = (await obstore.head_async(store, name))['size']\n"
        "    buf = await obstore.get_range_async(store, name, start=0, end=size)\n"
        "asyncio.run(go())\n",
    ),
}

# Several large tensors of one file in parallel. The peers fetch the tensors' byte ranges,
# computed before the clock from the file's header (``RANGES``: [start, end) per tensor, read by
# PARALLEL_SETUP with two plain range requests); remotetensors opens the file (reads the header)
# on the clock, as in the one-tensor table.
PARALLEL_SETUP = """
import json, urllib.request
def fetch(start, end):
    request = urllib.request.Request(URL, headers={'Range': f'bytes={start}-{end - 1}'})
    with urllib.request.urlopen(request) as response:
        return response.read()
n = int.from_bytes(fetch(0, 8), 'little')
header = json.loads(fetch(8, 8 + n))
RANGES = sorted(
    (8 + n + e['data_offsets'][0], 8 + n + e['data_offsets'][1])
    for k, e in header.items() if k != '__metadata__'
)
"""
PARALLEL_TOOLS = {
    # One operation per range (``--next`` starts the next one with its own options), all run
    # at once: ``-Z --parallel-max 4``; each range with ``-r first-last`` to /dev/null.
    "curl --parallel --parallel-max 4": (
        "",
        "argv = ['curl', '--parallel', '--parallel-max', str(len(RANGES))]\n"
        "for i, (a, b) in enumerate(RANGES):\n"
        "    argv += (['--next'] if i else []) + ['-s', '-r', f'{a}-{b - 1}', '-o', '/dev/null', URL]\n"
        "run_child(argv)\n",
    ),
    # The same, each range into its own file on tmpfs (page-cache memory, as an array is).
    "curl --parallel, files on tmpfs": (
        "import os, tempfile\nSCRATCH = tempfile.TemporaryDirectory(dir='/dev/shm')\n",
        "argv = ['curl', '--parallel', '--parallel-max', str(len(RANGES))]\n"
        "for i, (a, b) in enumerate(RANGES):\n"
        "    out = os.path.join(SCRATCH.name, str(i))\n"
        "    argv += (['--next'] if i else []) + ['-s', '-r', f'{a}-{b - 1}', '-o', out, URL]\n"
        "run_child(argv)\n",
    ),
    "remotetensors (safe_open + get_tensors)": (
        "import remotetensors as rt\nrt.safe_open, rt.HttpOptions  # names load on first use: before the clock\n",
        "with rt.safe_open(URL) as f: d = f.get_tensors(f.keys())\n",
    ),
    # The same call with curl's layout: a request per tensor, four connections. Not the default
    # (16 MiB parts on up to 8 connections, for one big tensor over a real network); shown
    # because on two cores and loopback the number of streams decides (benchmarks/README.md).
    "remotetensors, curl's layout (max_concurrency=4, 128 MiB parts)": (
        "import remotetensors as rt\nrt.safe_open, rt.HttpOptions  # names load on first use: before the clock\n",
        "o = rt.ReadOptions(max_concurrency=4, part_size_bytes=128 << 20)\n"
        "with rt.safe_open(URL, options=o) as f: d = f.get_tensors(f.keys())\n",
    ),
    # obstore's own call for several ranges of one object (it coalesces ranges closer than
    # 1 MiB, so adjacent tensors become one request, and fetches the rest concurrently).
    "obstore (get_ranges_async)": (
        "import asyncio, obstore\nfrom obstore.store import HTTPStore\n",
        "base, name = URL.rsplit('/', 1)\n"
        "store = HTTPStore.from_url(base, client_options={'allow_http': True})\n"
        "async def go():\n"
        "    global bufs\n"
        "    bufs = await obstore.get_ranges_async(\n"
        "        store, name, starts=[a for a, _ in RANGES], ends=[b for _, b in RANGES])\n"
        "asyncio.run(go())\n",
    ),
    # get_ranges_async makes the adjacent tensors one request, so one stream: the same ranges
    # as four concurrent get_range_async calls, as a user wanting parallel streams would write.
    "obstore (get_range_async per tensor, gathered)": (
        "import asyncio, obstore\nfrom obstore.store import HTTPStore\n",
        "base, name = URL.rsplit('/', 1)\n"
        "store = HTTPStore.from_url(base, client_options={'allow_http': True})\n"
        "async def go():\n"
        "    global bufs\n"
        "    bufs = await asyncio.gather(*(\n"
        "        obstore.get_range_async(store, name, start=a, end=b) for a, b in RANGES))\n"
        "asyncio.run(go())\n",
    ),
}

# Peak RSS is the VmHWM of /proc/PID/status, which exec resets (getrusage's ru_maxrss is
# inherited through fork and would report the parent's peak). A child (curl) is polled. The
# process leaves with os._exit once it has printed: obstore 0.12.1 aborts (SIGABRT) in about
# half the exits after concurrent get_range_async calls, and teardown is not measured anyway.
BIG_WRAPPER = """
import subprocess, sys, time
def hwm(pid='self'):
    for line in open(f'/proc/{{pid}}/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1])
    return 0
child_peak = 0
def run_child(argv):
    global child_peak
    process = subprocess.Popen(argv)
    while process.poll() is None:
        try:
            child_peak = max(child_peak, hwm(process.pid))
        except OSError:
            pass
        time.sleep(0.002)
URL = sys.argv[1]
{imports}
start = time.perf_counter()
{body}
elapsed = time.perf_counter() - start
print(elapsed, child_peak or hwm(), flush=True)
if 'SCRATCH' in globals():
    SCRATCH.cleanup()  # os._exit skips finalizers: 512 MiB of tmpfs per run would stay behind
import os
os._exit(0)
"""


class StaticServer(Protocol):
    """What the large-tensor tables need of a server: its URL and its request and byte counts."""

    url: str

    def stats(self) -> dict[str, int]: ...


def big_tensor(
    server: StaticServer,
    path: Path,
    size: int,
    tools: dict[str, tuple[str, str]] = BIG_TOOLS,
    setup: str = "",
    rounds: int = 7,
    warm_memory: bool = True,
) -> list[dict[str, Any]]:
    """Each tool ``rounds`` times, each run in a fresh process, the tools taking turns within a
    round (so a slow spell of the machine falls on all of them, not on one tool's runs), in an
    order shuffled from round to round (seeded: the same in every run of the script).

    Before every run, this process touches and frees :data:`WARM_BYTES` of memory. On a virtual
    machine whose guest hands freed memory back to its host (free page reporting: this
    project's machine), a process that allocates its array a few seconds after the last large
    free pays the host's faults too, up to 1 s more per 512 MiB, and which tool that is
    depended on its place in the round: the one after the curls, which allocate nothing. With
    the memory touched just before, every tool finds it backed, as on a machine without such
    reporting (``warm_memory=False`` measures as the machine is).

    ``size`` is the bytes that count for GB/s. Rows give the best and the median time; requests
    and bytes the server answered are those of the best run, and must cover ``size`` (a tool
    that fetched less would otherwise look fast)."""
    url = f"{server.url}/files/{path.name}"
    runs: dict[str, list[tuple[float, int, dict[str, int]]]] = {tool: [] for tool in tools}
    order = list(tools.items())
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for tool, (imports, body) in order:
            if warm_memory:
                touch_and_free(WARM_BYTES)
            server.stats()
            code = BIG_WRAPPER.format(imports=setup + imports, body=body)
            out = run_first_contact([sys.executable, "-c", code, url]).split()
            stats = server.stats()
            assert stats["bytes"] >= size, (tool, stats, size)
            runs[tool].append((float(out[0]), int(out[1]), stats))
    rows = []
    for tool, results in runs.items():
        best = min(results, key=lambda r: r[0])
        median = statistics.median(r[0] for r in results)
        rows.append(
            {
                "tool": tool,
                "gbps": size / best[0] / 1e9,
                "median_gbps": size / median / 1e9,
                "rss_mib": best[1] / 1024,
                "requests": best[2]["requests"],
                "bytes": best[2]["bytes"],
            }
        )
    return rows


def big_rows(rows: list[dict[str, Any]], counts: bool) -> str:
    """The table of :func:`big_tensor`'s rows; ratios against the first row (curl)."""
    curl = rows[0]
    headers = ["tool", "GB/s best", "GB/s median", "peak RSS"]
    headers += ["requests", "bytes"] if counts else []
    headers += ["vs curl, best", "vs curl, median"]
    lines = []
    for r in rows:
        line = [r["tool"], f"{r['gbps']:.2f}", f"{r['median_gbps']:.2f}", f"{r['rss_mib']:.0f} MiB"]
        line += [str(r["requests"]), f"{r['bytes'] / 2**20:.1f} MiB"] if counts else []
        line += [f"{r['gbps'] / curl['gbps']:.2f}", f"{r['median_gbps'] / curl['median_gbps']:.2f}"]
        lines.append(line)
    return table(headers, lines)


# --- 5. scale -----------------------------------------------------------------------------------


SCALE_WAYS = {
    # Every file opened at once, each with its own HTTP client (open_async's default).
    "open_async, all at once": (
        "import asyncio\n"
        "async def go(urls):\n"
        "    files = await asyncio.gather(*(rt.open_async(u) for u in urls))\n"
        "    n = sum(len(f.index) for f in files)\n"
        "    await asyncio.gather(*(f.aclose() for f in files))\n"
        "    return n\n"
        "n = asyncio.run(go(urls))\n"
    ),
    # The API for many locations: 64 at once, each closed when summarised (flat memory).
    "scan, 64 at once": (
        "options = rt.ReadOptions(read_configs=False, progress=False, cache=False)\n"
        "n = sum(len(r.summary.by_dtype) and r.summary.files for r in "
        "rt.scan(urls, concurrency=64, options=options) if r.summary)\n"
    ),
}


def scale(server: Server, count: int, way: str) -> dict[str, Any]:
    snippet = (
        "import sys, time\nimport remotetensors as rt\n"
        "rt.open_async, rt.scan, rt.HttpOptions  # names load on first use: before the clock\n"
        "urls = [f'{sys.argv[1]}/f{i}.safetensors' for i in range(int(sys.argv[2]))]\n"
        "start = time.perf_counter(); cpu = time.process_time()\n"
        f"{SCALE_WAYS[way]}"
        "elapsed = time.perf_counter() - start; cpu = time.process_time() - cpu\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "print(elapsed, cpu, hwm, n)\n"
    )
    server_cpu = server.cpu_seconds()
    argv = [sys.executable, "-c", snippet, f"{server.url}/files/many{count}", str(count)]
    out = run_first_contact(argv).split()
    return {
        "files": count,
        "way": way,
        "seconds": float(out[0]),
        "cpu": float(out[1]),
        "server_cpu": server.cpu_seconds() - server_cpu,
        "rss_mib": int(out[2]) / 1024,
        "count": int(out[3]),
    }


# --- the report ---------------------------------------------------------------------------------


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.platform()}, {os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, Python {platform.python_version()}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def big_tables(
    fallback: StaticServer, root: Path, big: Path, parallel: Path, rounds: int
) -> list[str]:
    """The two large-tensor tables, served by nginx when it is installed (else ``fallback``)."""
    with nginx.serving(root) as served:
        server: StaticServer = served or fallback
        by = "nginx" if served else "the aiohttp server (nginx is not installed)"
        how = (
            f"{rounds} rounds, the tools taking turns, each run in its own process; served by {by}"
        )
        rows_big = big_tensor(server, big, big.stat().st_size, rounds=rounds)
        data = PARALLEL_COUNT * PARALLEL_MIB * 2**20
        rows_par = big_tensor(server, parallel, data, PARALLEL_TOOLS, PARALLEL_SETUP, rounds)
    return [
        f"## One 512 MiB tensor ({how})",
        "",
        big_rows(rows_big, counts=False),
        "",
        f"## Four 128 MiB tensors in parallel (one file; {how})",
        "",
        "GB/s of the tensors' bytes. Requests and bytes as the server answered them in the best "
        "run; the peers' counts include the two header reads that compute the ranges before the "
        "clock (ours reads the header on the clock).",
        "",
        big_rows(rows_par, counts=True),
        "",
    ]


WORKLOADS = ("count", "partial", "big", "scale", "local")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=WORKLOADS,
        default=list(WORKLOADS),
        help="workloads to run (default: all)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="parameter counting: best of this many runs"
    )
    parser.add_argument(
        "--big-rounds", type=int, default=7, help="large tensors: runs of each tool, alternated"
    )
    parser.add_argument(
        "--scale-counts", type=int, nargs="+", default=[10, 100, 1000], help="files per scale run"
    )
    args = parser.parse_args()
    only = set(args.only)
    report = [
        f"# remotetensors benchmarks, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Machine: {machine()}",
        "",
    ]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        print("writing test files ...", file=sys.stderr)
        write_models(root)
        (root / "files").mkdir()  # the server serves it even when no workload writes to it
        names = write_big_model(root) if "partial" in only else []
        big = write_big_tensor(root) if "big" in only else root
        parallel = write_parallel_tensors(root) if "big" in only else root
        for count in args.scale_counts if "scale" in only else []:
            write_many(root, count)
        for latency in args.latency_ms:
            with serving(root, latency) as server:
                print(f"latency {latency} ms ...", file=sys.stderr)
                if "count" in only:
                    report += [f"## Parameter counting, {latency:g} ms added per request", ""]
                    rows = []
                    for label, repo, prefix in COUNT_MODELS:
                        results = {}
                        for tool, fn in (
                            ("remotetensors", lambda: count_ours(server, repo, prefix)),
                            (
                                "huggingface_hub",
                                lambda: count_hub(server, repo, root / "hf-cache", prefix),
                            ),
                            ("fsspec HTTP", lambda: count_fsspec(server, repo, prefix)),
                        ):
                            timed(fn)  # warm-up: imports and first-use costs stay off the clock
                            server.stats()
                            seconds, cpu, counts = timed_cpu(fn)
                            stats = server.stats()
                            for _ in range(args.repeat - 1):  # best wall and best CPU of the runs
                                more_seconds, more_cpu, _ = timed_cpu(fn)
                                seconds, cpu = min(seconds, more_seconds), min(cpu, more_cpu)
                            results[tool] = (seconds, cpu, stats, counts)
                        ours = results["remotetensors"]
                        for tool, (seconds, cpu, stats, counts) in results.items():
                            assert counts == ours[3], (tool, counts, ours[3])
                            rows.append(
                                [
                                    label,
                                    tool,
                                    f"{seconds * 1000:.0f} ms",
                                    f"{cpu * 1000:.0f} ms",
                                    str(stats["requests"]),
                                    f"{stats['bytes'] / 1e3:.1f} kB",
                                    f"{ours[0] / seconds:.2f}",
                                    f"{ours[1] / max(cpu, 1e-6):.2f}",
                                    f"{ours[2]['bytes'] / max(1, stats['bytes']):.2f}",
                                ]
                            )
                    report += [
                        f"Best of {args.repeat} (wall and CPU each); requests and bytes of the "
                        "first run after a warm-up.",
                        "",
                        table(
                            [
                                "model",
                                "tool",
                                "wall",
                                "CPU",
                                "requests",
                                "bytes",
                                "time ours/theirs",
                                "CPU ours/theirs",
                                "bytes ours/theirs",
                            ],
                            rows,
                        ),
                        "",
                    ]
                if "partial" in only:
                    report += [
                        f"## Partial load: 5 tensors (40 MiB) of a 1 GiB 4-shard model, {latency:g} ms",
                        "",
                    ]
                    rows = []
                    partial: dict[str, tuple[float, dict[str, int]]] = {}
                    for tool, fn in (
                        ("remotetensors", lambda: partial_ours(server, names)),
                        ("download + safetensors", lambda: partial_download(server, names, root)),
                        ("fsspec HTTP cat_ranges", lambda: partial_fsspec(server, names)),
                        ("obstore get_ranges_async", lambda: partial_obstore(server, names)),
                    ):
                        server.stats()
                        seconds, arrays = timed(fn)
                        stats = server.stats()
                        assert sorted(arrays) == sorted(names)
                        partial[tool] = (seconds, stats)
                    ours_p = partial["remotetensors"]
                    for tool, (seconds, stats) in partial.items():
                        rows.append(
                            [
                                tool,
                                f"{seconds * 1000:.0f} ms",
                                str(stats["requests"]),
                                f"{stats['bytes'] / 2**20:.1f} MiB",
                                f"{ours_p[0] / seconds:.2f}",
                            ]
                        )
                    report += [
                        table(["tool", "wall", "requests", "bytes", "time ours/theirs"], rows),
                        "",
                    ]
                if latency == args.latency_ms[0]:
                    if "big" in only:
                        report += big_tables(server, root, big, parallel, args.big_rounds)
                    if "scale" in only:
                        report += [
                            f"## Headers of many files from one server, {latency:g} ms",
                            "",
                            "Each way in a fresh process. `count`: tensors indexed (open_async) "
                            "or files summarised (scan). `server CPU`: what the loopback server "
                            "spent meanwhile (on the same cores).",
                            "",
                        ]
                        report += [
                            table(
                                ["files", "way", "wall", "CPU", "server CPU", "peak RSS", "count"],
                                [
                                    [
                                        str(r["files"]),
                                        r["way"],
                                        f"{r['seconds'] * 1000:.0f} ms",
                                        f"{r['cpu'] * 1000:.0f} ms",
                                        f"{r['server_cpu'] * 1000:.0f} ms",
                                        f"{r['rss_mib']:.0f} MiB",
                                        str(r["count"]),
                                    ]
                                    for r in (
                                        scale(server, c, way)
                                        for c in args.scale_counts
                                        for way in SCALE_WAYS
                                    )
                                ],
                            ),
                            "",
                        ]
    if "local" in only:
        local = subprocess.run(
            [sys.executable, str(HERE / "local_read.py")],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        report += [
            "## Local files (benchmarks/local_read.py)",
            "",
            "```",
            local.stdout.strip(),
            "```",
            "",
        ]
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{time.strftime('%Y-%m-%d')}.md"
    target.write_text("\n".join(report))
    print("\n".join(report))
    print(f"\nwritten to {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
