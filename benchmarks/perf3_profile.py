"""Where the time goes: one 512 MiB tensor over three loopback links, and small local reads.

Usage: python benchmarks/perf3_profile.py [--links plain capped https] [--no-perf] [--top 18]

For each link (nginx on loopback: plain; ``limit_rate 100m`` per connection; HTTPS with a CA made
here by trustme and given through ``SSL_CERT_FILE``), in fresh processes:

- curl (``-o /dev/null``): wall time and CPU (its own, from ``wait4``) and nginx's CPU;
- remotetensors at the defaults (``open_async`` + ``get_tensor`` with the loop in the main
  thread, so cProfile sees the loop's work): wall time, the CPU of every thread by name
  (``/proc/self/task``: the loop, the body threads, the page-populating thread), nginx's CPU,
  the connections used, and cProfile's top functions of the loop's thread by own time;
- ``perf record`` of the same run, when perf is installed: the top symbols of the whole process
  (the kernel's copies and page faults, OpenSSL's decryption), which cProfile cannot see.

Then the 2,000 small tensors of ``benchmarks/local_read.py``, ours and ``safetensors.safe_open``,
each under cProfile. Results: ``benchmarks/results/2026-11-25-perf3-profile.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nginx
import numpy as np
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MIB = 1 << 20

CHILD = r"""
import asyncio, cProfile, io, os, pstats, sys, threading, time
import remotetensors as rt
rt.open_async, rt.HttpOptions

def threads():
    # Python 3.11 gives its threads no native names: map the kernel's ids to Python's names,
    # numbers stripped (remotetensors-body_3 -> remotetensors-body), so a pool adds up.
    names = {t.native_id: t.name.rstrip('0123456789').rstrip('_-') for t in threading.enumerate()}
    out = {}  # by thread id: a thread's CPU before the read is taken off after it
    for tid in os.listdir('/proc/self/task'):
        try:
            name = names.get(int(tid), 'other (not a Python thread: BLAS, ...)')
            fields = open(f'/proc/self/task/{tid}/stat').read().rpartition(')')[2].split()
        except OSError:
            continue
        ticks = int(fields[11]) + int(fields[12])
        out[tid] = (name, ticks / os.sysconf('SC_CLK_TCK'))
    return out

def spent(before, after):
    by_name = {}
    for tid, (name, cpu) in after.items():
        by_name[name] = by_name.get(name, 0) + cpu - before.get(tid, (name, 0.0))[1]
    return by_name

async def read(url):
    async with await rt.open_async(url) as f:
        return await f.get_tensor('big')

def perf_control(command):
    # Under perf record --control (see perf() below): sample the read only, not the imports.
    if 'PERF_CTL' in os.environ:
        with open(os.environ['PERF_CTL'], 'w') as ctl, open(os.environ['PERF_ACK']) as ack:
            ctl.write(command + '\n')
            ctl.flush()
            ack.readline()

profile = cProfile.Profile() if sys.argv[2] == 'profile' else None
before = threads()
perf_control('enable')
start = time.perf_counter()
if profile is not None:
    profile.enable()
array = asyncio.run(read(sys.argv[1]))
if profile is not None:
    profile.disable()
elapsed = time.perf_counter() - start
perf_control('disable')
print(f'wall {elapsed:.3f} s  {array.nbytes / elapsed / 1e9:.2f} GB/s')
for name, cpu in sorted(spent(before, threads()).items(), key=lambda kv: -kv[1]):
    if cpu >= 0.01:
        print(f'  cpu {name:24s} {cpu:.2f} s')
if profile is not None:
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats('tottime').print_stats(int(sys.argv[3]))
    lines = text.getvalue().splitlines()
    at = next(i for i, line in enumerate(lines) if 'ncalls' in line)
    print('\n'.join(lines[at - 4 : ]))
"""

LOCAL_CHILD = r"""
import cProfile, io, pstats, sys, time
from safetensors import safe_open as reference_open
import remotetensors as rt
rt.safe_open
path, top = sys.argv[1], int(sys.argv[2])

def ours_each():
    with rt.safe_open(path) as f:
        {k: f.get_tensor(k) for k in f.keys()}

def ours_all():
    with rt.safe_open(path) as f:
        f.get_tensors()

def reference():
    with reference_open(path, 'numpy') as f:
        {k: f.get_tensor(k) for k in f.keys()}

for fn in (ours_each, ours_all, reference):  # warm: imports, first-use costs
    fn()
def timed(fn):
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started

for fn in (reference, ours_each, ours_all):
    best = min(timed(fn) for _ in range(7))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20):
        fn()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats('tottime').print_stats(top)
    lines = text.getvalue().splitlines()
    at = next(i for i, line in enumerate(lines) if 'ncalls' in line)
    print(f'### {fn.__name__}: best of 7 {best * 1000:.2f} ms (profile: 20 calls)')
    print('\n'.join(lines[at - 2 :]))
"""


def curl(url: str, server: nginx.Nginx, cacert: Path | None) -> str:
    argv = ["curl", "-s", "-o", "/dev/null", url]
    if cacert is not None:
        argv[1:1] = ["--cacert", str(cacert)]
    before = server.worker_cpu_seconds()
    started = time.perf_counter()
    process = subprocess.Popen(argv)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    assert status == 0, status
    cpu = usage.ru_utime + usage.ru_stime
    return (
        f"curl: wall {elapsed:.3f} s  {512 * MIB / elapsed / 1e9:.2f} GB/s  cpu {cpu:.2f} s"
        f"  nginx cpu {server.worker_cpu_seconds() - before:.2f} s"
    )


def ours(url: str, server: nginx.Nginx, env: dict[str, str], mode: str, top: int) -> str:
    before = server.worker_cpu_seconds()
    server.stats()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, mode, str(top)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    ).stdout
    stats = server.stats()
    return (
        f"remotetensors ({mode}): requests {stats['requests']}  "
        f"nginx cpu {server.worker_cpu_seconds() - before:.2f} s\n{out}"
    )


def perf(url: str, env: dict[str, str], top: int) -> str:
    """``perf record`` of one unprofiled run, the read only (the child turns sampling on and
    off through perf's control FIFO): the top symbols over every thread."""
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "perf.data"
        ctl, ack = Path(folder) / "ctl", Path(folder) / "ack"
        os.mkfifo(ctl)
        os.mkfifo(ack)
        subprocess.run(
            [
                *("perf", "record", "-q", "-F", "1999", "-D", "-1", "-o", str(data)),
                *(f"--control=fifo:{ctl},{ack}", "--", sys.executable, "-c", CHILD),
                *(url, "plain", "0"),
            ],
            capture_output=True,
            check=True,
            env={**env, "PERF_CTL": str(ctl), "PERF_ACK": str(ack)},
            cwd=ROOT,
        )
        shown = []
        for sort, limit in (("dso", "2"), ("dso,sym", "0.7")):
            report = subprocess.run(
                [
                    *("perf", "report", "-i", str(data), "--stdio"),
                    *("--sort", sort, "--percent-limit", limit),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            rows = [line for line in report.splitlines() if line.strip() and line[0] != "#"]
            shown.append(f"perf, every thread of our process, by {sort}:\n" + "\n".join(rows[:top]))
    return "\n".join(shown)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--links", nargs="+", default=["plain", "capped", "https", "local"])
    parser.add_argument("--top", type=int, default=18)
    parser.add_argument("--no-perf", action="store_true")
    args = parser.parse_args()
    use_perf = not args.no_perf and shutil.which("perf") is not None
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "files").mkdir()
        big = root / "files" / "big.safetensors"
        save_file({"big": np.ones(512 * MIB // 4, np.float32)}, str(big))
        import trustme

        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        cert_pem, key_pem, ca_pem = root / "cert.pem", root / "key.pem", root / "ca.pem"
        cert.cert_chain_pems[0].write_to_path(str(cert_pem))
        for extra in cert.cert_chain_pems[1:]:
            with cert_pem.open("ab") as out:
                out.write(extra.bytes())
        cert.private_key_pem.write_to_path(str(key_pem))
        ca.cert_pem.write_to_path(str(ca_pem))
        links = {
            "plain": ({}, None),
            "capped": ({"limit_rate": 100 * 1000 * 1000}, None),
            "https": ({"tls": (cert_pem, key_pem)}, ca_pem),
        }
        for link in args.links:
            if link == "local":
                continue
            kwargs, cacert = links[link]
            env = dict(os.environ)
            if cacert is not None:
                env["SSL_CERT_FILE"] = str(cacert)
            with nginx.serving(root, **kwargs) as server:  # type: ignore[arg-type]
                assert server is not None, "nginx is not installed"
                url = f"{server.url}/files/big.safetensors"
                print(f"## {link} ({server.url})\n", flush=True)
                print(curl(url, server, cacert))
                print(ours(url, server, env, "plain", args.top))
                print(ours(url, server, env, "profile", args.top))
                if use_perf:
                    print(perf(url, env, 40))
                print(flush=True)
        if "local" in args.links:
            many = root / "many.safetensors"
            save_file({f"t{i}": np.full(256, i, np.float32) for i in range(2000)}, str(many))
            print("## local, 2,000 tensors of 1 KiB\n")
            print(
                subprocess.run(
                    [sys.executable, "-c", LOCAL_CHILD, str(many), str(args.top)],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=ROOT,
                ).stdout
            )


if __name__ == "__main__":
    main()
