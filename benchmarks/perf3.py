"""Performance round three in one run: large reads on three links beside curl, memory, local
reads beside safetensors, and the round-two rows.

Usage:
    python benchmarks/perf3.py [--rounds 3] [--base-src PATH] [--skip-round-two]

``--base-src`` names the ``src`` folder of another version of remotetensors (for instance the
code before round three: ``git archive base3 src | tar -x -C /tmp/base3``, then
``--base-src /tmp/base3/src``); its rows are measured in the same rounds, and the round-two
scripts run once with it too. Writes ``benchmarks/results/DATE-perf3.md`` (``--out``).

What is measured (see benchmarks/README.md for the harness of ``run.big_tensor``):

1. **One 512 MiB tensor over three loopback links**, nginx serving the file (``nginx.py``):
   plain; ``limit_rate 100m`` (each connection capped at 100 MB/s, the shape of a WAN or S3);
   HTTPS with a CA made here (trustme), trusted through ``SSL_CERT_FILE`` by our reader and
   ``--cacert`` by curl. Every tool in a fresh process, ``--rounds`` rounds in which the tools
   take turns; GB/s of the best and the median run, peak RSS (``VmHWM``; curl's polled), and the
   requests and bytes nginx logged for the best run. Beside ours: a single curl (the bar on the
   plain and HTTPS links), curl writing to a file on tmpfs (what keeping the bytes costs), and on
   the capped link N curl processes started together, each fetching its 1/N share (N in 1, 2, 4,
   8, 16; the bar is the best of them). Our reader runs at its defaults (adaptive streams) and
   with round two's fixed layout (``max_concurrency=8, part_size_bytes=16 MiB``) pinned.
2. **Local files** (``local_read.py``, its own process): a 512 MiB tensor and 2,000 small
   tensors (one call per tensor, one call for all), ours against ``safetensors.safe_open``.
3. **Round two, unchanged** (each script in its own process): parameter counting of one file,
   a 650 kB header and 72 shards against huggingface_hub at 0 and 50 ms, and headers of 10, 100
   and 1,000 files (``run.py --only count scale``); a 300-repo scan (``scan.py``); start-up CPU
   (``import_cost.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nginx
import run

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
SIZE = 512 * MIB

IMPORTS = (
    "import remotetensors as rt\n"
    "rt.safe_open, rt.HttpOptions  # names load on first use: before the clock\n"
)
OURS = "with rt.safe_open(URL) as f: a = f.get_tensor('big')\n"
ROUND_TWO_LAYOUT = (
    "o = rt.ReadOptions(max_concurrency=8, part_size_bytes=16 << 20)\n"
    "with rt.safe_open(URL, options=o) as f: a = f.get_tensor('big')\n"
)
CACERT = "CA = ['--cacert', os.environ['PERF3_CA']] if os.environ.get('PERF3_CA') else []\n"
CURL = "run_child(['curl', '-s', *CA, '-o', '/dev/null', URL])\n"
CURL_TMPFS = (
    "import tempfile\nSCRATCH = tempfile.TemporaryDirectory(dir='/dev/shm')\n",
    "run_child(['curl', '-s', *CA, '-o', os.path.join(SCRATCH.name, 't'), URL])\n",
)
# N curl processes at once, each its share of the file (its size asked before the clock).
SHARES_SETUP = (
    "import urllib.request\n"
    "SIZE = int(urllib.request.urlopen(urllib.request.Request(URL, method='HEAD'))"
    ".headers['Content-Length'])\n"
)
SHARES = """
procs = [
    subprocess.Popen(['curl', '-s', '-r', f'{{SIZE * i // {n}}}-{{SIZE * (i + 1) // {n} - 1}}',
                      '-o', '/dev/null', URL])
    for i in range({n})
]
while any(p.poll() is None for p in procs):
    for p in procs:
        try:
            child_peak = max(child_peak, hwm(p.pid))
        except OSError:
            pass
    time.sleep(0.002)
assert all(p.returncode == 0 for p in procs)
"""


def ours(label: str, base_src: Path | None) -> dict[str, tuple[str, str]]:
    """Our rows: the defaults, round two's layout pinned, and the base's defaults."""
    rows = {
        f"remotetensors{label}": (IMPORTS, OURS),
        f"remotetensors{label}, round two's layout pinned (8 x 16 MiB)": (
            IMPORTS,
            ROUND_TWO_LAYOUT,
        ),
    }
    if base_src is not None:
        first = f"import sys\nsys.path.insert(0, {str(base_src)!r})\n"
        rows[f"remotetensors at base ({base_src}){label}"] = (first + IMPORTS, OURS)
    return rows


def tools(link: str, base_src: Path | None) -> dict[str, tuple[str, str]]:
    """The tools of ``link``, the bar first (on the capped link, the curls: the best is it)."""
    if link == "limit_rate 100m":
        curls = {f"curl x{n} (each 1/{n})": ("", SHARES.format(n=n)) for n in (1, 2, 4, 8, 16)}
        return curls | ours("", base_src)
    return {"curl": ("", CURL), "curl -o file on tmpfs": CURL_TMPFS} | ours("", base_src)


def certificate(folder: Path) -> tuple[Path, Path, Path]:
    """A CA made here and a certificate for 127.0.0.1 it signed: (cert chain, key, CA)."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    chain, key, ca_pem = folder / "cert.pem", folder / "key.pem", folder / "ca.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_pem))
    return chain, key, ca_pem


def large_reads(
    root: Path, path: Path, rounds: int, base_src: Path | None, warm_memory: bool = True
) -> list[str]:
    chain, key, ca = certificate(root)
    settings: dict[str, dict[str, Any]] = {
        "plain": {},
        "limit_rate 100m": {"limit_rate": 100 * 1000 * 1000},
        "https": {"tls": (chain, key)},
    }
    report = []
    for link, nginx_settings in settings.items():
        print(f"{link} ...", file=sys.stderr, flush=True)
        setup = "import os\n" + CACERT + (SHARES_SETUP if link.startswith("limit") else "")
        if link == "https":  # our reader trusts the CA as a user would; curl gets --cacert
            os.environ["SSL_CERT_FILE"] = os.environ["PERF3_CA"] = str(ca)
        try:
            with nginx.serving(root, **nginx_settings) as server:
                if server is None:
                    return ["nginx is not installed (apt-get install nginx-light): no tables"]
                started = time.perf_counter()
                rows = run.big_tensor(
                    server, path, SIZE, tools(link, base_src), setup, rounds, warm_memory
                )
                seconds = time.perf_counter() - started
        finally:
            os.environ.pop("SSL_CERT_FILE", None)
            os.environ.pop("PERF3_CA", None)
        report += [f"### {link} ({rounds} rounds, {seconds:.0f} s)", "", link_table(rows), ""]
    return report


def link_table(rows: list[dict[str, Any]]) -> str:
    """Rows with their ratios to the bar: the first row, or on the capped link the curl row
    with the best median (the best of N parallel curls)."""
    curls = [r for r in rows if r["tool"].startswith("curl x")]
    bar = max(curls, key=lambda r: r["median_gbps"]) if curls else rows[0]
    headers = ["tool", "GB/s best", "GB/s median", "peak RSS", "over 512 MiB", "requests"]
    headers += [f"vs {bar['tool']}, median", "vs bar, best"]
    lines = []
    for r in rows:
        lines.append(
            [
                r["tool"],
                f"{r['gbps']:.2f}",
                f"{r['median_gbps']:.2f}",
                f"{r['rss_mib']:.0f} MiB",
                f"{r['rss_mib'] - 512:+.0f} MiB" if r["tool"].startswith("remote") else "",
                str(r["requests"]),
                f"{r['median_gbps'] / bar['median_gbps']:.2f}",
                f"{r['gbps'] / bar['gbps']:.2f}",
            ]
        )
    return run.table(headers, lines)


LOCAL_LINE = re.compile(r"^(.+?)\s+best\s+([\d.]+) ms\s+median\s+([\d.]+) ms")


def local_reads(python_path: str | None) -> list[str]:
    out = child([sys.executable, str(HERE / "local_read.py")], python_path)
    return ["```", out.strip(), "```", "", *local_ratios(out, "512 MiB tensor"), ""]


def local_ratios(out: str, big: str) -> list[str]:
    """The table of ``local_read.py``'s medians (its output, ``out``), ours over
    safetensors' time; ``big`` names the large tensor's row."""
    medians = {
        m.group(1).strip(): float(m.group(3))
        for m in map(LOCAL_LINE.match, out.splitlines())
        if m is not None
    }
    pairs = [
        (big, "remotetensors big", "safetensors big"),
        (
            "2,000 tensors, one call each",
            "remotetensors 2000 tensors, one call each",
            "safetensors 2000 tensors, one call each",
        ),
        (
            "2,000 tensors, one call for all",
            "remotetensors 2000 tensors, one call for all",
            "safetensors 2000 tensors, one call each",
        ),
    ]
    ratios = [
        [what, f"{medians[a]:.1f} ms", f"{medians[b]:.1f} ms", f"{medians[a] / medians[b]:.2f}"]
        for what, a, b in pairs
        if a in medians and b in medians
    ]
    return [run.table(["read", "ours, median", "safetensors, median", "time ours/theirs"], ratios)]


def child(argv: list[str], python_path: str | None) -> str:
    """What ``argv`` printed, or its failure (the last lines of its stderr) for the report: one
    script that fails does not lose the rows measured before it."""
    env = dict(os.environ)
    if python_path is not None:
        env["PYTHONPATH"] = python_path
    done = subprocess.run(argv, capture_output=True, text=True, cwd=run.ROOT, env=env)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        return f"(failed: {' '.join(argv[1:])}, exit {done.returncode})\n\n```\n{tail}\n```"
    return done.stdout


def round_two(python_path: str | None) -> list[str]:
    """The round-two scripts, each in its own process, with the code at ``python_path``."""
    with tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, str(HERE / "run.py"), "--only", "count", "scale"]
        counts = child([*argv, "--latency-ms", "0", "50", "--out", out], python_path)
    body = counts.split("\n", 3)[-1]  # without run.py's title and machine line
    scan = child([sys.executable, str(HERE / "scan.py")], python_path)
    imports = child([sys.executable, str(HERE / "import_cost.py")], python_path)
    return [
        body.strip(),
        "",
        "### 300-repo scan (scan.py)",
        "",
        scan.strip(),
        "",
        "### Start-up (import_cost.py)",
        "",
        "```",
        imports.strip(),
        "```",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base-src", type=Path, default=None)
    parser.add_argument("--skip-round-two", action="store_true")
    parser.add_argument(
        "--cold-memory",
        action="store_true",
        help="do not touch memory before each large-read run (see run.big_tensor)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    ours_src = str(run.ROOT / "src")
    report = [
        f"# Performance round three, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Machine: {run.machine()}; load average at the start "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
        f"Command: `python benchmarks/perf3.py {' '.join(sys.argv[1:])}`",
        "",
        "## One 512 MiB tensor, three links (nginx on loopback)",
        "",
    ]
    os.environ["PYTHONPATH"] = ours_src  # every child reads this tree's code
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        path = run.write_big_tensor(root)
        report += large_reads(root, path, args.rounds, args.base_src, not args.cold_memory)
    print("local ...", file=sys.stderr, flush=True)
    report += ["## Local files (local_read.py, medians of 5 alternated rounds)", ""]
    report += local_reads(ours_src)
    if not args.skip_round_two:
        versions = [("this tree", ours_src)]
        if args.base_src is not None:
            versions.append((f"base ({args.base_src})", str(args.base_src)))
        for name, python_path in versions:
            print(f"round two, {name} ...", file=sys.stderr, flush=True)
            report += [f"## Round two's rows, {name}", "", *round_two(python_path)]
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{time.strftime('%Y-%m-%d')}-perf3.md"
    target.write_text("\n".join(report) + "\n")
    print("\n".join(report))
    print(f"\nwritten to {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
