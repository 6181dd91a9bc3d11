"""Performance, round four: our reader beside the tools users would pick instead, every run shown.

Usage:
    python benchmarks/perf4.py [--runs 5] [--model-runs 3] [--size-mib 512] [--model-gib 2]
                               [--only links model local s3] [--src PATH] [--out FOLDER]

Writes ``benchmarks/results/DATE-perf4.md`` (``--out`` names another folder). Every run of every
tool is a fresh Python process (``WRAPPER``): imports and setup (a store object, a torch module
on the meta device, the file's size) happen before the clock starts, the clock covers the read,
and the process prints the seconds, its peak RSS (``VmHWM`` of ``/proc``, which exec resets; a
curl child's is polled) and its RSS when the clock started. Before every run this process
touches and frees 1 GiB (``run.touch_and_free``, see ``run.big_tensor``), and the tools take
turns within a round, in an order shuffled from round to round (seeded), so that a slow spell of
the machine falls on all of them. GB/s is the bytes read divided by the read's seconds; ratios
are against the bar of the same table, in the same run. A tool that fails (an exception, a
non-zero exit, a time-out, or fewer bytes served than it had to read) keeps its failure text in
its table and is not run again; the other tools go on. Our reader runs from ``--src`` (this
tree's ``src`` by default) through ``PYTHONPATH``, each run with its own empty
``REMOTETENSORS_CACHE`` unless the row says otherwise.

Sections (``--only`` takes their names):

``links``
    One tensor of ``--size-mib`` MiB (F32) served by nginx on loopback over three links: plain;
    ``limit_rate`` 100 MB/s per connection; HTTPS with a CA made in the run (trustme), trusted
    through ``SSL_CERT_FILE`` by our reader, ``--cacert`` by curl and ``root_certificate`` by
    obstore. The bar: one curl to ``/dev/null`` on the plain and HTTPS links; on the capped link
    the best (by median) of N curl processes started together, each fetching its 1/N (N in 1, 2,
    4, 8, 16; perf3's ``SHARES``). ``remotetensors, cold``: ``rt.safe_open(URL).get_tensor``
    at the defaults, a fresh empty cache folder per run; ``remotetensors, warm``: the same, with
    one cache folder shared by all its runs on that link, primed by one untimed run before the
    timed ones (the header, and the entry of what the origin's link taught the reader).
    obstore: ``HTTPStore.from_url(base)`` and one ``get_range_async(start=0, end=size)``;
    ``get_ranges_async`` of 16 equal ranges (obstore coalesces ranges less than 1 MiB apart,
    so adjacent ones become one request: the requests column shows it); and the 16
    ranges as 16 ``get_range_async`` under ``asyncio.gather`` (16 requests at once).
``model``
    A Llama-shaped checkpoint of about ``--model-gib`` GiB (TinyLlama-1.1B's layout, its hidden
    size scaled to the size asked: BF16 matrices, F32 norms and an F32 LM head) in 8 shards with
    ``model.safetensors.index.json``, served by nginx capped at 100 MB/s per connection. The bar:
    the best of 8, 16 and 32 curl processes at once over the shards' byte ranges. Ours:
    ``open_model(folder URL).get_tensors(all)``, and ``rt.load_into`` a torch module built on the
    meta device with the checkpoint's names, shapes and dtypes (before the clock).
    ``--model-runs`` runs each. Run:ai Model Streamer reads local files and object stores, not
    HTTP (an ``http://`` path is opened as a local file): it has no row here.
``local``
    ``local_read.py`` in its own process (a tensor of ``--size-mib`` MiB and 2,000 small tensors,
    one call each and one for all, against ``safetensors.safe_open``), then the tensor's file and
    the model's shards, page cache warm: ``rt.safe_open(path).get_tensor`` and
    ``rt.open_model(folder).get_tensors`` against Run:ai's ``SafetensorsStreamer``
    (``stream_files`` of the file or every shard, then every tensor of ``get_tensors``, kept).
``s3``
    The same files as objects of a bucket ``files``, path-style (``http://HOST/files/KEY``),
    answered by nginx with the same per-connection cap (``--s3-limit-mbps``): nginx answers a
    ranged GET in microseconds, where moto's Python server would be every client's bottleneck;
    the clients sign with dummy credentials and nginx ignores the signature. Ours through
    ``AWS_ENDPOINT_URL`` (s3fs), Run:ai through the same variables with
    ``RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0``, obstore's ``S3Store`` (path-style). The
    tensor: ours ``safe_open('s3://...').get_tensor`` against Run:ai (the bar), obstore, and 16
    curls as the link's reference. The model: ours ``get_tensors`` and ``load_into`` a meta
    module, against Run:ai's tensors kept in a dict and copied into the same module
    (``to_empty`` then ``param.copy_`` of each streamed tensor, ``owned=False`` as each is
    consumed at once).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nginx
import numpy as np
import perf3
import run
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
GIB = 1 << 30
CAP = 100 * 1000 * 1000  # bytes per second and connection, nginx's limit_rate
SECTIONS = ("links", "model", "local", "s3")
BUCKET = "files"  # the folder nginx serves is the bucket, for path-style S3 GETs

# --- one run of one tool, in its own process ------------------------------------------------------

# run.BIG_WRAPPER with two more things: a child that exits non-zero fails the run, and the RSS
# when the clock starts is printed too (what the imports and the setup cost, torch's included).
# The line with the figures starts with PERF4 (a library may print to stdout). os._exit: obstore
# 0.12.1 may abort at exit after concurrent requests, and teardown is not measured.
WRAPPER = """
import os, subprocess, sys, time
def status(field, pid='self'):
    for line in open(f'/proc/{{pid}}/status'):
        if line.startswith(field + ':'):
            return int(line.split()[1])
    return 0
def hwm(pid='self'):
    return status('VmHWM', pid)
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
    if process.returncode != 0:
        raise SystemExit(f'{{argv[0]}} exited with {{process.returncode}}')
URL = sys.argv[1]
{imports}
before = status('VmRSS')
start = time.perf_counter()
{body}
elapsed = time.perf_counter() - start
print('PERF4', elapsed, child_peak or hwm(), before, flush=True)
if 'SCRATCH' in globals():
    SCRATCH.cleanup()
os._exit(0)
"""


@dataclass(frozen=True)
class Tool:
    """One row: code run before the clock (``imports``) and on it (``body``), in ``WRAPPER``.

    ``env`` is added to the run's environment last (a ``REMOTETENSORS_CACHE`` there replaces the
    fresh one); ``prime`` runs the tool once, untimed, before the timed runs; ``reader`` says the
    row keeps the bytes in memory (its peak RSS beyond the data is shown)."""

    name: str
    imports: str
    body: str
    env: Mapping[str, str] = field(default_factory=dict)
    prime: bool = False
    reader: bool = True


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_kib: int
    before_kib: int
    requests: int | None = None


@dataclass
class Result:
    tool: Tool
    runs: list[Run] = field(default_factory=list)
    failure: str | None = None


def one_run(
    tool: Tool, location: str, env: Mapping[str, str], setup: str, timeout: float
) -> Run | str:
    """One run of ``tool`` in a fresh process, or why it failed (the last lines of stderr)."""
    code = WRAPPER.format(imports=setup + tool.imports, body=tool.body)
    with tempfile.TemporaryDirectory(prefix="rt-perf4-cache-") as cache:
        child_env = {**os.environ, **env, "REMOTETENSORS_CACHE": cache, **tool.env}
        process = subprocess.Popen(
            [sys.executable, "-c", code, location],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=run.ROOT,
            env=child_env,
            start_new_session=True,  # its own group: a time-out ends its curls too
        )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return f"timed out after {timeout:.0f} s"
    for line in out.splitlines():
        if line.startswith("PERF4 "):
            seconds, peak, before = line.split()[1:4]
            return Run(float(seconds), int(peak), int(before))
    tail = "\n".join((err.strip() or out.strip()).splitlines()[-6:])
    return f"exit {process.returncode}: {tail}"


def measure(
    tools: Sequence[Tool],
    location: str,
    *,
    runs: int,
    data_bytes: int,
    server: run.StaticServer | None = None,
    env: Mapping[str, str] | None = None,
    setup: str = "",
) -> list[Result]:
    """Each tool ``runs`` times at ``location``, the tools taking turns (see the module's
    docstring). With a ``server``, each run's requests are counted, and a run the server sent
    fewer than ``data_bytes`` to fails its tool (it cannot look fast by reading less)."""
    env = env or {}
    timeout = 120 + data_bytes / 20e6  # a stalled tool must not stall the others (20 MB/s)
    results = {tool.name: Result(tool) for tool in tools}
    for tool in tools:
        if tool.prime:
            outcome = one_run(tool, location, env, setup, timeout)
            if isinstance(outcome, str):
                results[tool.name].failure = f"priming run: {outcome}"
    order = list(tools)
    shuffle = random.Random(0).shuffle
    for _ in range(runs):
        shuffle(order)
        for tool in order:
            result = results[tool.name]
            if result.failure is not None:
                continue
            run.touch_and_free(run.WARM_BYTES)
            if server is not None:
                server.stats()
            outcome = one_run(tool, location, env, setup, timeout)
            if isinstance(outcome, str):
                result.failure = outcome
                continue
            if server is not None:
                stats = server.stats()
                if stats["bytes"] < data_bytes:
                    result.failure = (
                        f"the server sent {stats['bytes']:,} bytes, fewer than the "
                        f"{data_bytes:,} to read"
                    )
                    continue
                outcome = Run(
                    outcome.seconds, outcome.peak_kib, outcome.before_kib, stats["requests"]
                )
            result.runs.append(outcome)
            print(f"  {tool.name}: {data_bytes / outcome.seconds / 1e9:.2f} GB/s", file=sys.stderr)
    return [results[tool.name] for tool in tools]


# --- tables ---------------------------------------------------------------------------------------


def rates(result: Result, data_bytes: int) -> list[float]:
    return [data_bytes / r.seconds / 1e9 for r in result.runs]


def best_bar(results: Sequence[Result], names: Sequence[str], data_bytes: int) -> Result | None:
    """Of the rows named, the one with the best median GB/s (None if none has a run)."""
    candidates = [r for r in results if r.tool.name in names and r.runs]
    if not candidates:
        return None
    return max(candidates, key=lambda r: statistics.median(rates(r, data_bytes)))


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def cell(text: str) -> str:
    """Text fit for one cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")


def results_table(
    results: Sequence[Result], bar: Result | None, data_bytes: int, *, before: bool = False
) -> list[str]:
    """Every run's GB/s in the order run, median and worst, both against the bar's median;
    peak RSS (the highest run) and, for readers, that peak beyond the data; requests per run.
    Failures follow the table, each in full."""
    bar_median = statistics.median(rates(bar, data_bytes)) if bar is not None else None
    headers = ["tool", "GB/s, every run", "median", "worst", "worst / bar", "median / bar"]
    headers += ["peak RSS", "peak - data"] + (["RSS before the clock"] if before else [])
    headers += ["requests"]
    lines, failures = [], []
    for result in results:
        name = result.tool.name + (" (the bar)" if result is bar else "")
        got = rates(result, data_bytes)
        if result.failure is not None:
            failures.append((result.tool.name, result.failure))
        if not got:
            failed = (result.failure or "no run").splitlines()
            lines.append([cell(name), cell(f"failed: {failed[-1]}")] + [""] * (len(headers) - 2))
            continue
        median, worst = statistics.median(got), min(got)
        peak = max(r.peak_kib for r in result.runs) * 1024
        requests = [r.requests for r in result.runs if r.requests is not None]
        row = [
            cell(name + (" (then failed)" if result.failure else "")),
            ", ".join(f"{g:.2f}" for g in got),
            f"{median:.2f}",
            f"{worst:.2f}",
            f"{worst / bar_median:.2f}x" if bar_median else "n/a",
            f"{median / bar_median:.2f}x" if bar_median else "n/a",
            f"{peak / MIB:.0f} MiB",
            f"{(peak - data_bytes) / MIB:+.0f} MiB" if result.tool.reader else "",
        ]
        if before:
            most = max(r.before_kib for r in result.runs) / 1024
            row.append(f"{most:.0f} MiB" if result.tool.reader else "")
        row.append(
            f"{min(requests)}-{max(requests)}"
            if requests and min(requests) != max(requests)
            else (str(requests[0]) if requests else "")
        )
        lines.append(row)
    out = [run.table(headers, lines), ""]
    for name, text in failures:
        out += [f"`{name}` failed:", "", "```", text.strip(), "```", ""]
    return out


# --- code of the tools ----------------------------------------------------------------------------

OURS = perf3.IMPORTS + "rt.open_model, rt.load_into\n"
# Our S3 backend (s3fs, aiobotocore) is imported on the first s3:// open: 0.57 s here. Before
# the clock, as Run:ai's and obstore's modules are imported before theirs.
S3_BACKEND = "import s3fs  # imported by the first s3:// open otherwise\n"
SIZE = "SIZE = int(os.environ['PERF4_SIZE'])\n"
SPEC = "import json\nSPEC = json.load(open(os.environ['PERF4_SPEC']))\n"
CA = "CA = ['--cacert', os.environ['PERF4_CA']] if os.environ.get('PERF4_CA') else []\n"
CURL = ("", "run_child(['curl', '-s', *CA, '-o', '/dev/null', URL])\n")
OBSTORE_HTTP = (
    "import asyncio, obstore\nfrom obstore.store import HTTPStore\n"
    "OPTIONS = {'allow_http': True}\n"
    "if os.environ.get('PERF4_CA'):\n"
    "    OPTIONS['root_certificate'] = open(os.environ['PERF4_CA']).read()\n"
    "BASE, NAME = URL.rsplit('/', 1)\n"
    "store = HTTPStore.from_url(BASE, client_options=OPTIONS)\n"
    "BOUNDS = [SIZE * i // 16 for i in range(17)]\n"
)
OBSTORE_S3 = (
    "import asyncio, obstore\nfrom obstore.store import S3Store\n"
    "BUCKET, NAME = URL.removeprefix('s3://').split('/', 1)\n"
    "store = S3Store(BUCKET, endpoint=os.environ['AWS_ENDPOINT_URL'], region='us-east-1',\n"
    "                virtual_hosted_style_request=False, client_options={'allow_http': True})\n"
    "BOUNDS = [SIZE * i // 16 for i in range(17)]\n"
)
# Each coroutine keeps its result in a global and returns None (python/cpython#112559: see the
# benchmarks README, "The peers and how each is configured").
OBSTORE_ONE = (
    "async def go():\n"
    "    global BUF\n"
    "    BUF = await obstore.get_range_async(store, NAME, start=0, end=SIZE)\n"
    "asyncio.run(go())\n"
)
OBSTORE_RANGES = (
    "async def go():\n"
    "    global BUFS\n"
    "    BUFS = await obstore.get_ranges_async(store, NAME, starts=BOUNDS[:-1], ends=BOUNDS[1:])\n"
    "asyncio.run(go())\n"
)
OBSTORE_GATHER = (
    "async def go():\n"
    "    global BUFS\n"
    "    BUFS = await asyncio.gather(*(obstore.get_range_async(store, NAME, start=a, end=b)\n"
    "                                  for a, b in zip(BOUNDS[:-1], BOUNDS[1:])))\n"
    "asyncio.run(go())\n"
)
OURS_TENSOR = "with rt.safe_open(URL) as f: A = f.get_tensor('big')\n"
OURS_MODEL = "with rt.open_model(URL) as m: D = m.get_tensors(m.keys())\n"
OURS_LOAD_INTO = (
    "report = rt.load_into(MODULE, URL)\nassert not report.missing and not report.unexpected\n"
)
RUNAI = "from runai_model_streamer import SafetensorsStreamer\n"
SHARD_PATHS = "PATHS = [URL + shard for shard, _ in SPEC['shards']]\n"
RUNAI_TENSOR = (
    "with SafetensorsStreamer() as streamer:\n"
    "    streamer.stream_files([URL])\n"
    "    D = dict(streamer.get_tensors())\n"
)
RUNAI_MODEL = (
    "with SafetensorsStreamer() as streamer:\n"
    "    streamer.stream_files(PATHS)\n"
    "    D = dict(streamer.get_tensors())\n"
)
# A module whose parameters have the checkpoint's names, shapes and dtypes, on the meta device.
MODULE = """
import torch
DTYPES = {'BF16': torch.bfloat16, 'F32': torch.float32}
MODULE = torch.nn.Module()
for name, shape, dtype in SPEC['tensors']:
    *path, leaf = name.split('.')
    owner = MODULE
    for part in path:
        if part not in owner._modules:
            owner.add_module(part, torch.nn.Module())
        owner = owner._modules[part]
    empty = torch.empty(shape, dtype=DTYPES[dtype], device='meta')
    owner.register_parameter(leaf, torch.nn.Parameter(empty, requires_grad=False))
"""
# Run:ai's tensors copied into the module: its storage made (to_empty, on the clock, as our
# load_into allocates on it), then each tensor copied in as it comes (owned=False: views into
# the streamer's buffers, valid until the next one, which is all a copy needs).
RUNAI_COPY = (
    "MODULE.to_empty(device='cpu')\n"
    "PARAMS = dict(MODULE.named_parameters())\n"
    "with torch.no_grad(), SafetensorsStreamer() as streamer:\n"
    "    streamer.stream_files(PATHS, owned=False)\n"
    "    for name, tensor in streamer.get_tensors():\n"
    "        PARAMS[name].copy_(tensor)\n"
)
# N curl processes at once over the shards, each shard cut in N / shards equal ranges.
CURL_SHARDS = """
procs = []
for shard, size in SPEC['shards']:
    for i in range({k}):
        first, last = size * i // {k}, size * (i + 1) // {k} - 1
        procs.append(subprocess.Popen(['curl', '-s', '-r', f'{{first}}-{{last}}', '-o', '/dev/null', URL + shard]))
while any(p.poll() is None for p in procs):
    for p in procs:
        try:
            child_peak = max(child_peak, hwm(p.pid))
        except OSError:
            pass
    time.sleep(0.002)
assert all(p.returncode == 0 for p in procs)
"""


def curl_shares(n: int) -> Tool:
    """perf3's N curls at once, each its 1/N of the file (``SHARES_SETUP`` asks the size)."""
    return Tool(f"curl x{n} (each 1/{n})", "", perf3.SHARES.format(n=n), reader=False)


# --- the files ------------------------------------------------------------------------------------

VOCAB, LAYERS, SHARDS = 32000, 22, 8
ITEM = {"BF16": 2, "F32": 4}


@dataclass(frozen=True)
class ModelSpec:
    """A checkpoint written by :func:`write_model`: its shards (name, file size) and its tensors
    (name, shape, dtype), in file order."""

    shards: list[tuple[str, int]]
    tensors: list[tuple[str, list[int], str]]

    @property
    def tensor_bytes(self) -> int:
        return sum(nbytes(shape, dtype) for _, shape, dtype in self.tensors)

    @property
    def file_bytes(self) -> int:
        return sum(size for _, size in self.shards)


def nbytes(shape: Sequence[int], dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * ITEM[dtype]


def llama_layout(hidden: int) -> list[tuple[str, list[int], str]]:
    """TinyLlama-1.1B's tensors (22 layers, a 32,000 vocabulary, 8x grouped-query attention, an
    MLP 2.75x wide) at hidden size ``hidden``: BF16 matrices, F32 norms, an F32 LM head."""
    kv, mlp = max(8, hidden // 8), max(64, round(hidden * 2.75 / 64) * 64)
    tensors: list[tuple[str, list[int], str]] = [
        ("model.embed_tokens.weight", [VOCAB, hidden], "BF16")
    ]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors += [
            (p + "self_attn.q_proj.weight", [hidden, hidden], "BF16"),
            (p + "self_attn.k_proj.weight", [kv, hidden], "BF16"),
            (p + "self_attn.v_proj.weight", [kv, hidden], "BF16"),
            (p + "self_attn.o_proj.weight", [hidden, hidden], "BF16"),
            (p + "mlp.gate_proj.weight", [mlp, hidden], "BF16"),
            (p + "mlp.up_proj.weight", [mlp, hidden], "BF16"),
            (p + "mlp.down_proj.weight", [hidden, mlp], "BF16"),
            (p + "input_layernorm.weight", [hidden], "F32"),
            (p + "post_attention_layernorm.weight", [hidden], "F32"),
        ]
    tensors.append(("model.norm.weight", [hidden], "F32"))
    tensors.append(("lm_head.weight", [VOCAB, hidden], "F32"))
    return tensors


def layout_for(target: int) -> list[tuple[str, list[int], str]]:
    """The :func:`llama_layout` (hidden size a multiple of 64) whose bytes are nearest
    ``target``."""
    layouts = [llama_layout(hidden) for hidden in range(64, 1 << 14, 64)]
    return min(layouts, key=lambda t: abs(sum(nbytes(s, d) for _, s, d in t) - target))


def shard_groups(
    tensors: list[tuple[str, list[int], str]],
) -> list[list[tuple[str, list[int], str]]]:
    """``tensors`` in order, cut in :data:`SHARDS` shards: each closed once it holds its share
    of the bytes left when it was opened (or when the tensors left are only enough for one
    each of the shards still to open)."""
    groups: list[list[tuple[str, list[int], str]]] = [[]]
    left = sum(nbytes(s, d) for _, s, d in tensors)
    share, held = left / SHARDS, 0
    for i, tensor in enumerate(tensors):
        to_open = SHARDS - len(groups)
        if groups[-1] and to_open and (held >= share or len(tensors) - i <= to_open):
            groups.append([])
            share, held = left / to_open, 0
        groups[-1].append(tensor)
        held += nbytes(tensor[1], tensor[2])
        left -= nbytes(tensor[1], tensor[2])
    return groups


def write_model(folder: Path, target: int) -> ModelSpec:
    """A :func:`layout_for` ``target`` checkpoint in :data:`SHARDS` shards of about equal bytes
    (:func:`shard_groups`) with an index as transformers writes it. Every element is one (BF16 0x3F80, F32 1.0)."""
    tensors = layout_for(target)
    total = sum(nbytes(s, d) for _, s, d in tensors)
    groups = shard_groups(tensors)
    folder.mkdir(parents=True, exist_ok=True)
    chunk = 32 * MIB
    fill = {
        "BF16": np.full(chunk // 2, 0x3F80, np.uint16).tobytes(),
        "F32": np.ones(chunk // 4, np.float32).tobytes(),
    }
    shards, weight_map = [], {}
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        at = 0
        for tensor_name, shape, dtype in group:
            size = nbytes(shape, dtype)
            header[tensor_name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + size]}
            at += size
            weight_map[tensor_name] = name
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        with (folder / name).open("wb") as out:
            out.write(len(blob).to_bytes(8, "little") + blob)
            for _, shape, dtype in group:
                left = nbytes(shape, dtype)
                while left:
                    piece = min(left, chunk)
                    out.write(fill[dtype][:piece])
                    left -= piece
        shards.append((name, (folder / name).stat().st_size))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return ModelSpec(shards, tensors)


def data_bytes_of(path: Path) -> int:
    """The bytes of a safetensors file after its header (its tensors')."""
    with path.open("rb") as f:
        return path.stat().st_size - 8 - int.from_bytes(f.read(8), "little")


def write_tensor(folder: Path, size_mib: int) -> Path:
    """One F32 tensor ``big`` of ``size_mib`` MiB, as ``run.write_big_tensor`` writes 512."""
    path = folder / f"tensor{size_mib}.safetensors"
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"big": np.ones(size_mib * MIB // 4, np.float32)}, str(path))
    return path


@contextmanager
def nginx_or_fail(root: Path, **settings: Any) -> Iterator[nginx.Nginx]:
    with nginx.serving(root, **settings) as server:
        if server is None:
            raise RuntimeError("nginx is not installed (apt-get install nginx-light)")
        yield server


# --- 1. every run, three links --------------------------------------------------------------------


def links(root: Path, tensor: Path, runs: int, env: Mapping[str, str]) -> list[str]:
    size = data_bytes_of(tensor)
    chain, key, ca = perf3.certificate(root)
    report = [
        "## 1. Every run: one tensor, three links",
        "",
        f"A {size / MIB:.0f} MiB F32 tensor served by nginx on loopback; {plural(runs, 'run')} of each "
        "tool, each run a fresh process, the tools taking turns in a shuffled order. GB/s of "
        "every run in the order run; `worst / bar` and `median / bar` divide that row's worst "
        "run and median by the bar's median GB/s. `remotetensors, warm` shares one "
        "`REMOTETENSORS_CACHE` folder across its runs on a link, and one untimed run before the "
        "timed ones primed it (the file's header, and in its link entry the requests in flight and "
        "their size that the origin's link taught the reader); `cold` starts each run with an "
        "empty folder. `peak - data`: the highest run's peak RSS beyond the "
        "tensor.",
        "",
    ]
    links_settings: dict[str, dict[str, Any]] = {
        "plain": {},
        "limit_rate 100 MB/s per connection": {"limit_rate": CAP},
        "HTTPS": {"tls": (chain, key)},
    }
    for link, settings in links_settings.items():
        print(f"links: {link} ...", file=sys.stderr, flush=True)
        link_env = {**env, "PERF4_SIZE": str(size)}
        if "tls" in settings:  # ours trusts it as a user would; curl --cacert; obstore its option
            link_env |= {"SSL_CERT_FILE": str(ca), "PERF4_CA": str(ca)}
        capped = "limit_rate" in settings
        bar_names = [f"curl x{n} (each 1/{n})" for n in (1, 2, 4, 8, 16)] if capped else ["curl"]
        curls = (
            [curl_shares(n) for n in (1, 2, 4, 8, 16)]
            if capped
            else [Tool("curl", *CURL, reader=False)]
        )
        with tempfile.TemporaryDirectory(prefix="rt-perf4-warm-") as warm:
            tools = [
                *curls,
                Tool("remotetensors, cold", perf3.IMPORTS, OURS_TENSOR),
                Tool(
                    "remotetensors, warm",
                    perf3.IMPORTS,
                    OURS_TENSOR,
                    env={"REMOTETENSORS_CACHE": warm},
                    prime=True,
                ),
                Tool("obstore, get_range_async", OBSTORE_HTTP, OBSTORE_ONE),
                Tool("obstore, get_ranges_async of 16 ranges", OBSTORE_HTTP, OBSTORE_RANGES),
                Tool("obstore, 16 get_range_async gathered", OBSTORE_HTTP, OBSTORE_GATHER),
            ]
            started = time.perf_counter()
            try:
                with nginx_or_fail(root, **settings) as server:
                    results = measure(
                        tools,
                        f"{server.url}/{BUCKET}/{tensor.name}",
                        runs=runs,
                        data_bytes=size,
                        server=server,
                        env=link_env,
                        setup="import os\n" + CA + SIZE + (perf3.SHARES_SETUP if capped else ""),
                    )
            except (RuntimeError, OSError) as error:
                report += [f"### {link}", "", f"Not measured: {error}", ""]
                continue
        bar = best_bar(results, bar_names, size)
        seconds = time.perf_counter() - started
        report += [f"### {link} ({seconds:.0f} s)", ""]
        report += results_table(results, bar, size)
    return report


# --- 2. a whole model ----------------------------------------------------------------------------


def model(
    root: Path, spec: ModelSpec, spec_path: Path, runs: int, env: Mapping[str, str]
) -> list[str]:
    data = spec.tensor_bytes
    tools = [
        *(
            Tool(f"curl x{n} over the shards", "", CURL_SHARDS.format(k=n // SHARDS), reader=False)
            for n in (8, 16, 32)
        ),
        Tool("remotetensors, open_model + get_tensors (all)", OURS, OURS_MODEL),
        Tool("remotetensors, load_into a meta module", OURS + MODULE, OURS_LOAD_INTO),
    ]
    print("model ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    report = [
        "## 2. A whole model",
        "",
        f"A Llama-shaped checkpoint (TinyLlama-1.1B's layout, hidden size "
        f"{spec.tensors[0][1][1]}): {len(spec.tensors)} tensors, {data / GIB:.2f} GiB of tensor "
        f"data (BF16 matrices, F32 norms and LM head) in {len(spec.shards)} shards with "
        "`model.safetensors.index.json`, served by nginx capped at 100 MB/s per connection. "
        f"{plural(runs, 'run')} each. GB/s of the tensor bytes (the curls also fetch the headers, a few "
        "kB). The bar: the best median of N curls at once, each a 1/(N/8) share of a shard. "
        "`peak - data` is the highest run's peak RSS beyond the tensor bytes; `RSS before the "
        "clock` is what the process held when the clock started (imports, torch's included, and "
        "the meta module). Run:ai Model Streamer has no row: it reads local paths and object "
        "stores (`s3://`, `gs://`, `az://`), and opens an `http://` URL as a local file "
        "(`File access error`).",
        "",
    ]
    try:
        with nginx_or_fail(root, limit_rate=CAP) as server:
            results = measure(
                tools,
                f"{server.url}/{BUCKET}/model/",
                runs=runs,
                data_bytes=data,
                server=server,
                env={**env, "PERF4_SPEC": str(spec_path)},
                setup="import os\n" + SPEC,
            )
    except (RuntimeError, OSError) as error:
        return [*report, f"Not measured: {error}", ""]
    bar = best_bar(results, [t.name for t in tools[:3]], data)
    report[0] += f" ({time.perf_counter() - started:.0f} s)"
    return report + results_table(results, bar, data, before=True)


# --- 3. local files ------------------------------------------------------------------------------


def local(
    tensor: Path, folder: Path, spec: ModelSpec, spec_path: Path, args: argparse.Namespace
) -> list[str]:
    print("local: local_read.py ...", file=sys.stderr, flush=True)
    argv = [sys.executable, str(HERE / "local_read.py"), "--size-mib", str(args.size_mib)]
    out = perf3.child([*argv, "--repeat", str(args.runs)], args.src)
    report = [
        "## 3. Local files",
        "",
        f"### local_read.py (`--size-mib {args.size_mib} --repeat {args.runs}`, rounds "
        "alternated in one process, page cache warm)",
        "",
        "```",
        out.strip(),
        "```",
        "",
    ]
    report += [*perf3.local_ratios(out, f"{args.size_mib} MiB tensor"), ""]
    for path in [tensor, *(folder / name for name, _ in spec.shards)]:
        path.read_bytes()  # the page cache warm for every run
    size = data_bytes_of(tensor)
    print("local: Run:ai and ours ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    file_results = measure(
        [
            Tool("Run:ai SafetensorsStreamer", RUNAI, RUNAI_TENSOR),
            Tool("remotetensors, safe_open + get_tensor", perf3.IMPORTS, OURS_TENSOR),
        ],
        str(tensor),
        runs=args.runs,
        data_bytes=size,
        env=env_of(args),
    )
    report += [
        f"### One {size / MIB:.0f} MiB tensor, local file ({time.perf_counter() - started:.0f} s)",
        "",
        f"{plural(args.runs, 'run')} each, fresh processes, page cache warm. The bar: Run:ai's "
        "`SafetensorsStreamer` (`stream_files([path])`, every tensor of `get_tensors()` kept).",
        "",
        *results_table(
            file_results, best_bar(file_results, ["Run:ai SafetensorsStreamer"], size), size
        ),
    ]
    started = time.perf_counter()
    model_results = measure(
        [
            Tool("Run:ai SafetensorsStreamer, every shard", RUNAI + SHARD_PATHS, RUNAI_MODEL),
            Tool("remotetensors, open_model + get_tensors (all)", OURS, OURS_MODEL),
        ],
        f"{folder}/",
        runs=args.runs,
        data_bytes=spec.tensor_bytes,
        env={**env_of(args), "PERF4_SPEC": str(spec_path)},
        setup="import os\n" + SPEC,
    )
    bar = best_bar(model_results, ["Run:ai SafetensorsStreamer, every shard"], spec.tensor_bytes)
    report += [
        f"### The {spec.tensor_bytes / GIB:.2f} GiB model, local shards "
        f"({time.perf_counter() - started:.0f} s)",
        "",
        *results_table(model_results, bar, spec.tensor_bytes, before=True),
    ]
    return report


# --- 4. S3 ---------------------------------------------------------------------------------------


def s3(
    root: Path,
    tensor: Path | None,
    spec: ModelSpec | None,
    spec_path: Path,
    args: argparse.Namespace,
) -> list[str]:
    limit = args.s3_limit_mbps * 1000 * 1000 if args.s3_limit_mbps else None
    link = f"capped at {args.s3_limit_mbps} MB/s per connection" if limit else "uncapped"
    report = [
        "## 4. S3",
        "",
        f"The same files as objects of the bucket `{BUCKET}`, answered by nginx ({link}) as "
        f"path-style GETs (`http://127.0.0.1:PORT/{BUCKET}/KEY`). nginx rather than moto: moto's "
        "server is Python and would be every client's bottleneck long before a client's own "
        "cost showed (earlier rounds left S3 unmeasured for that reason); nginx answers the "
        "ranged GETs and HEADs the clients send (and `If-Match` on its ETag), ignoring the "
        "signature. Every client signs with dummy credentials: `AWS_ENDPOINT_URL`, "
        "`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION=us-east-1` for all; "
        "`RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0` and `AWS_EC2_METADATA_DISABLED=true` for "
        "Run:ai; obstore's `S3Store(endpoint=..., virtual_hosted_style_request=False)`; ours "
        "through s3fs, which reads the same variables (s3fs is imported before the clock, as "
        "Run:ai's and obstore's modules are: the first `s3://` open imports it otherwise, "
        "0.57 s here).",
        "",
    ]
    env = {
        **env_of(args),
        "AWS_ACCESS_KEY_ID": "perf4",
        "AWS_SECRET_ACCESS_KEY": "perf4",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
        "PERF4_SPEC": str(spec_path),
    }
    try:
        with nginx_or_fail(root, limit_rate=limit) as server:
            env["AWS_ENDPOINT_URL"] = server.url
            if tensor is not None:
                print("s3: tensor ...", file=sys.stderr, flush=True)
                size = data_bytes_of(tensor)
                started = time.perf_counter()
                results = measure(
                    [
                        Tool("Run:ai SafetensorsStreamer", RUNAI, RUNAI_TENSOR),
                        Tool(
                            "remotetensors, safe_open + get_tensor",
                            perf3.IMPORTS + S3_BACKEND,
                            OURS_TENSOR,
                        ),
                        Tool("obstore S3Store, get_range_async", OBSTORE_S3, OBSTORE_ONE),
                        Tool(
                            "obstore S3Store, 16 get_range_async gathered",
                            OBSTORE_S3,
                            OBSTORE_GATHER,
                        ),
                        Tool(
                            "curl x16 (each 1/16; the link's reference)",
                            "",
                            perf3.SHARES.format(n=16),
                            env={"PERF4_HTTP_URL": f"{server.url}/{BUCKET}/{tensor.name}"},
                            reader=False,
                        ),
                    ],
                    f"s3://{BUCKET}/{tensor.name}",
                    runs=args.runs,
                    data_bytes=size,
                    server=server,
                    env={**env, "PERF4_SIZE": str(size)},
                    setup="import os\n" + SIZE + CURL_URL,
                )
                bar = best_bar(results, ["Run:ai SafetensorsStreamer"], size)
                report += [
                    f"### One {size / MIB:.0f} MiB tensor ({time.perf_counter() - started:.0f} s)",
                    "",
                    f"{plural(args.runs, 'run')} each. The bar: Run:ai.",
                    "",
                    *results_table(results, bar, size),
                ]
            if spec is not None:
                print("s3: model ...", file=sys.stderr, flush=True)
                started = time.perf_counter()
                runai = RUNAI + SHARD_PATHS
                results = measure(
                    [
                        Tool("Run:ai SafetensorsStreamer, every shard, kept", runai, RUNAI_MODEL),
                        Tool("Run:ai, copied into the meta module", runai + MODULE, RUNAI_COPY),
                        Tool(
                            "remotetensors, open_model + get_tensors (all)",
                            OURS + S3_BACKEND,
                            OURS_MODEL,
                        ),
                        Tool(
                            "remotetensors, load_into the meta module",
                            OURS + MODULE + S3_BACKEND,
                            OURS_LOAD_INTO,
                        ),
                    ],
                    f"s3://{BUCKET}/model/",
                    runs=args.model_runs,
                    data_bytes=spec.tensor_bytes,
                    server=server,
                    env=env,
                    setup="import os\n" + SPEC,
                )
                bar = best_bar(
                    results, ["Run:ai SafetensorsStreamer, every shard, kept"], spec.tensor_bytes
                )
                report += [
                    f"### The {spec.tensor_bytes / GIB:.2f} GiB model "
                    f"({time.perf_counter() - started:.0f} s)",
                    "",
                    f"{plural(args.model_runs, 'run')} each. The bar: Run:ai's tensors kept in a dict. Both "
                    "module rows fill the same module, built on the meta device before the clock: "
                    "`load_into` replaces each parameter; the Run:ai row calls `to_empty(device="
                    "'cpu')` on the clock and copies each streamed tensor in with "
                    "`param.copy_(tensor)` (`stream_files(..., owned=False)`).",
                    "",
                    *results_table(results, bar, spec.tensor_bytes, before=True),
                ]
    except (RuntimeError, OSError) as error:
        report += [f"Not measured: {error}", ""]
    return report


# perf3's SHARES fetches URL; in the S3 table it fetches the object's plain HTTP address.
CURL_URL = (
    "if os.environ.get('PERF4_HTTP_URL'):\n"
    "    URL = os.environ['PERF4_HTTP_URL']\n"
    "    import urllib.request\n"
    "    SIZE = int(urllib.request.urlopen(urllib.request.Request(URL, method='HEAD'))"
    ".headers['Content-Length'])\n"
)


# --- the report ----------------------------------------------------------------------------------


def env_of(args: argparse.Namespace) -> dict[str, str]:
    """What every child gets: the code measured first on the path."""
    return {"PYTHONPATH": str(args.src)}


def main() -> None:
    parser = argparse.ArgumentParser(description="Performance, round four (benchmarks/perf4.py)")
    parser.add_argument(
        "--runs", type=int, default=5, help="runs of each tool (model: --model-runs)"
    )
    parser.add_argument(
        "--model-runs", type=int, default=3, help="runs of each tool, the model tables"
    )
    parser.add_argument("--size-mib", type=int, default=512, help="the one tensor's size")
    parser.add_argument("--model-gib", type=float, default=2.0, help="the model's size (about)")
    parser.add_argument(
        "--s3-limit-mbps", type=int, default=100, help="S3: MB/s per connection, 0: uncapped"
    )
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument(
        "--src", type=Path, default=run.ROOT / "src", help="remotetensors to measure"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    only = set(args.only)
    report = [
        f"# Performance, round four, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Machine: {run.machine()}; load average at the start "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
        f"Command: `{shlex.join(['python', 'benchmarks/perf4.py', *sys.argv[1:]])}`",
        "",
        f"Code measured: `{args.src}`. Each run a fresh process; imports and setup before the "
        "clock; memory touched before every run; tools interleaved, shuffled from round to "
        "round (`benchmarks/perf4.py`'s docstring says how each row is made). GB/s are 1e9 "
        "bytes per second.",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="rt-perf4-") as folder:
        root = Path(folder)
        files = root / BUCKET
        print("writing the files ...", file=sys.stderr, flush=True)
        tensor = write_tensor(files, args.size_mib) if only & {"links", "local", "s3"} else None
        spec_path = root / "spec.json"
        spec = None
        if only & {"model", "local", "s3"}:
            spec = write_model(files / "model", int(args.model_gib * GIB))
            spec_path.write_text(json.dumps({"shards": spec.shards, "tensors": spec.tensors}))
        for name in SECTIONS:
            if name not in only:
                continue
            try:
                if name == "links" and tensor is not None:
                    report += links(root, tensor, args.runs, env_of(args))
                elif name == "model" and spec is not None:
                    report += model(root, spec, spec_path, args.model_runs, env_of(args))
                elif name == "local" and tensor is not None and spec is not None:
                    report += local(tensor, files / "model", spec, spec_path, args)
                elif name == "s3":
                    report += s3(root, tensor, spec, spec_path, args)
            except Exception as error:  # one broken section must not lose the others
                report += [f"## {name}", "", f"Failed: `{error!r}`", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{time.strftime('%Y-%m-%d')}-perf4.md"
    target.write_text("\n".join(report) + "\n")
    print("\n".join(report))
    print(f"\nwritten to {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
