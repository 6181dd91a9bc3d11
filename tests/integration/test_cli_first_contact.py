"""The command line as a new user meets it: ``python -m remotetensors`` in a subprocess.

Every case checks the exit status, that stderr is one line (no traceback, nothing at exit) and
the words that make the message useful. The cases that need nothing but a server run
concurrently in one module fixture (a Python start-up costs ~0.8 s), and each is reported as a
test of its own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from remotetensors.dtypes import DTYPES, pack
from tests.hub_standin import HubStandIn
from tests.reference import raw_file, write_reference
from tests.servers import FaultyServer


@dataclass
class Result:
    status: int
    out: str
    err: str

    def one_line_error(self, *words: str) -> None:
        """Exit 1, stderr one ``remotetensors: error:`` line holding every one of ``words``."""
        assert self.status == 1, (self.status, self.out, self.err)
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        assert lines[0].startswith("remotetensors: error: "), self.err
        for word in words:
            assert word in lines[0], (word, lines[0])


def cli(*argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
    """Run ``python -m remotetensors ARGV`` as a user would (PYTHONPATH inherited)."""
    result = subprocess.run(
        [sys.executable, "-m", "remotetensors", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    return Result(result.returncode, result.stdout, result.stderr)


# --- servers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[FaultyServer]:
    running = FaultyServer()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def hub() -> Iterator[HubStandIn]:
    running = HubStandIn()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


NAMES = [f"model.layers.{i}.self_attn.{p}_proj.weight" for i in range(3) for p in "qkvo"]
ROWS = np.arange(40 * 6, dtype=np.float32).reshape(40, 6)
BF16 = (np.arange(12, dtype=np.float32) / 8 - 0.5).astype(ml_dtypes.bfloat16).reshape(3, 4)
F8 = np.array([0.5, -2, 448, 0.015625], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
F4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -6, -0.5], dtype=np.float32).astype(
    ml_dtypes.float4_e2m1fn
)


def low_precision_file() -> bytes:
    """A file with BF16, F8_E4M3 and packed F4 tensors (F4 packed as the format stores it)."""
    tensors = [("bf16", "BF16", BF16), ("f4", "F4", F4), ("f8", "F8_E4M3", F8)]
    header: dict[str, Any] = {}
    data = b""
    for name, dtype, array in tensors:
        dt = DTYPES[dtype]
        raw = (pack(array, dt) if dt.packed else array).tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    return raw_file(json.dumps(header), data, pad=True)


@pytest.fixture(scope="module")
def urls(server: FaultyServer) -> dict[str, str]:
    tensors = {name: np.full((8, 4), i, np.float32) for i, name in enumerate(NAMES)}
    tensors["rows"] = ROWS
    small = write_reference({"x": ROWS[:2]})
    found = {
        "model": server.put("model.safetensors", write_reference(tensors)),
        "never": server.put("never.safetensors", write_reference(tensors)),
        "low": server.put("low.safetensors", low_precision_file()),
        "random": server.put("random.safetensors", np.random.default_rng(7).bytes(4096)),
        # nginx answers a ranged GET of an empty file with 200 and no body
        "empty": server.put("empty.safetensors", b""),
        "ranges-ignored": server.put("small.safetensors", small),
        "whole-body": server.put("small2.safetensors", small),
    }
    for name in ("empty.safetensors", "small.safetensors", "small2.safetensors"):
        server.fault(name, "ignore-range")
    return found


@pytest.fixture(scope="module")
def hub_env(hub: HubStandIn, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    small = {"model.safetensors": write_reference({"w": np.ones((2, 3), np.float16)})}
    hub.add("org/model", small)
    hub.add("gpt2", small)  # a legacy one-word repo name
    hub.add("org/no-weights", {"config.json": b"{}"})
    home = tmp_path_factory.mktemp("hf-home")  # no stored token
    return {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": "", "HF_HOME": str(home)}


@pytest.fixture(scope="module")
def no_s3fs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which ``import s3fs`` fails as if it were not installed."""
    shadow = tmp_path_factory.mktemp("no-s3fs")
    (shadow / "s3fs.py").write_text(
        "raise ModuleNotFoundError(\"No module named 's3fs'\", name='s3fs')\n"
    )
    path = os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path}


# --- the quick cases, run concurrently -------------------------------------------------------

Case = tuple[tuple[str, ...], dict[str, str]]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the cases write their files."""
    return tmp_path_factory.mktemp("out")


class Results:
    """The cases' results, each group run concurrently when one of its cases is first asked
    for, so no single test waits for all of them."""

    def __init__(self, groups: dict[str, dict[str, Case]]) -> None:
        self._groups = groups
        self._done: dict[str, Result] = {}

    def __getitem__(self, name: str) -> Result:
        if name not in self._done:
            group = next(g for g in self._groups.values() if name in g)
            with ThreadPoolExecutor(4) as pool:
                futures = {n: pool.submit(cli, *argv, env=env) for n, (argv, env) in group.items()}
                self._done.update({n: future.result() for n, future in futures.items()})
        return self._done[name]


@pytest.fixture(scope="module")
def results(
    urls: dict[str, str],
    hub_env: dict[str, str],
    no_s3fs: dict[str, str],
    silent_port: int,
    out: Path,
) -> Results:
    model, low = urls["model"], urls["low"]
    with_bad_config = out / "bad-config"
    with_bad_config.mkdir()
    (with_bad_config / "model.safetensors").write_bytes(write_reference({"w": ROWS}))
    (with_bad_config / "config.json").write_text("not json")
    ftp = f"ftp://127.0.0.1:{closed_port()}/models/x.safetensors"
    silent = f"http://127.0.0.1:{silent_port}/x.safetensors"
    basics: dict[str, Case] = {
        "version": (("--version",), {}),
        "missing s3fs": (("info", "s3://bucket/x.safetensors"), no_s3fs),
        "random bytes": (("info", urls["random"]), {}),
        "empty file": (("info", urls["empty"]), {}),
        "ftp": (("info", ftp), {}),
        "unknown protocol": (("info", "foo://host/x.safetensors"), {}),
        "warning": (("params", str(with_bad_config)), {}),
    }
    hub: dict[str, Case] = {
        "uppercase HF": (("params", "HF://org/model", "--json"), hub_env),
        "legacy repo": (("params", "hf://gpt2", "--json"), hub_env),
        "empty revision": (("params", "hf://org/model@"), hub_env),
        "missing repo": (("params", "hf://org/absent"), hub_env),
        "missing revision": (("params", "hf://org/model@v9"), hub_env),
        "no safetensors": (("params", "hf://org/no-weights"), hub_env),
    }
    get: dict[str, Case] = {
        "bad slice": (("get", model, "rows", "--slice", "a:b", "-o", str(out / "a.npy")), {}),
        "last ten": (("get", model, "rows", "--slice", "-10:", "-o", str(out / "ten.npy")), {}),
        "last ten, columns": (
            ("get", model, "rows", "--slice", "-3:, -2:", "-o", str(out / "corner.npy")),
            {},
        ),
        "misspelt": (
            ("get", model, "model.layers.1.self_attn.q_prj.weight", "-o", str(out / "m.npy")),
            {},
        ),
        "no folder": (("get", urls["never"], "rows", "-o", "/nonexistent/dir/a.npy"), {}),
        "concurrency 0": (("ls", model, "--concurrency", "0"), {}),
        "get json": (("get", model, "rows", "--json", "-o", str(out / "j.npy")), {}),
    }
    dtypes: dict[str, Case] = {
        "bf16 npy": (("get", low, "bf16", "-o", str(out / "bf16.npy")), {}),
        "f8 npy": (("get", low, "f8", "-o", str(out / "f8.npy")), {}),
        "f4 npy": (("get", low, "f4", "-o", str(out / "f4.npy")), {}),
        "f4 safetensors": (("get", low, "f4", "-o", str(out / "f4.safetensors")), {}),
        "f4 slice safetensors": (
            ("get", low, "f4", "--slice", "2:6", "-o", str(out / "f4s.safetensors")),
            {},
        ),
    }
    http: dict[str, Case] = {
        "silent server": (("info", silent, "--timeout", "0.5", "--retries", "1"), {}),
        "ranges ignored": (("info", urls["ranges-ignored"]), {}),
        "whole body opt-in": (
            ("info", urls["whole-body"], "--accept-whole-body-below", "1MB", "--json"),
            {},
        ),
        "header": (("info", model, "--header", "X-Test: first contact", "--json"), {}),
        "bad header": (("info", model, "--header", "no colon"), {}),
    }
    return Results({"basics": basics, "hub": hub, "get": get, "dtypes": dtypes, "http": http})


def test_version(results: Results) -> None:
    from remotetensors import __version__

    assert results["version"].status == 0
    assert results["version"].out.strip() == f"remotetensors {__version__}"


def test_missing_s3fs_says_what_to_install(results: Results) -> None:
    results["missing s3fs"].one_line_error(
        "s3://bucket/x.safetensors", 'pip install "remotetensors[s3]"'
    )


def test_random_bytes_are_not_a_safetensors_file(results: Results) -> None:
    results["random bytes"].one_line_error("random.safetensors", "not a safetensors file")


def test_an_empty_file_is_not_blamed_on_ranges(results: Results) -> None:
    result = results["empty file"]
    result.one_line_error("empty.safetensors", "0 bytes")
    assert "Range" not in result.err


def test_ftp_names_the_location(results: Results) -> None:
    results["ftp"].one_line_error("ftp://127.0.0.1:", "/models/x.safetensors", "cannot connect")


def test_unknown_protocol(results: Results) -> None:
    results["unknown protocol"].one_line_error("foo://host/x.safetensors", "unknown protocol 'foo'")


@pytest.mark.parametrize("case", ["uppercase HF", "legacy repo"])
def test_hub_scheme_in_any_case_and_legacy_names(results: Results, case: str) -> None:
    result = results[case]
    assert result.status == 0, result.err
    assert json.loads(result.out)["total"] == 6
    assert result.err == ""


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("empty revision", ["hf://org/model@", "nothing after '@'"]),
        ("missing repo", ["no repo org/absent", "RepoNotFound", "token"]),
        ("missing revision", ["no revision 'v9'", "RevisionNotFound"]),
        (
            "no safetensors",
            ["hf://org/no-weights", "no safetensors, PyTorch or GGUF weights", "pytorch_model"],
        ),
    ],
)
def test_hub_says_what_is_missing(results: Results, case: str, words: list[str]) -> None:
    results[case].one_line_error(*words)


def test_bad_slice(results: Results) -> None:
    results["bad slice"].one_line_error("--slice", "'a' is not an integer")


def test_negative_slices_count_from_the_end(results: Results, out: Path) -> None:
    assert results["last ten"].status == 0, results["last ten"].err
    assert np.array_equal(np.load(out / "ten.npy"), ROWS[-10:])
    assert results["last ten, columns"].status == 0, results["last ten, columns"].err
    assert np.array_equal(np.load(out / "corner.npy"), ROWS[-3:, -2:])


def test_misspelt_tensor_gets_a_suggestion(results: Results) -> None:
    results["misspelt"].one_line_error(
        "does not contain tensor", "did you mean 'model.layers.1.self_attn.q_proj.weight'"
    )


def test_output_folder_is_checked_before_any_request(
    results: Results, server: FaultyServer
) -> None:
    results["no folder"].one_line_error("/nonexistent/dir", "does not exist")
    assert not server.log.for_path("never.safetensors")


def test_concurrency_zero_is_refused(results: Results) -> None:
    results["concurrency 0"].one_line_error("--concurrency", "at least 1")


def test_get_json_is_parseable(results: Results) -> None:
    result = results["get json"]
    assert result.status == 0, result.err
    data = json.loads(result.out)
    assert data["name"] == "rows"
    assert data["shape"] == [40, 6]
    assert data["dtype"] == "F32"
    assert np.array_equal(np.load(data["output"]), ROWS)


@pytest.mark.parametrize(
    ("case", "dtype", "values"), [("bf16", "BF16", BF16), ("f8", "F8_E4M3", F8), ("f4", "F4", F4)]
)
def test_low_precision_npy_is_exact_float32(
    results: Results, out: Path, case: str, dtype: str, values: np.ndarray[Any, Any]
) -> None:
    result = results[f"{case} npy"]
    assert result.status == 0, result.err
    assert "stored as float32" in result.out
    assert dtype in result.out
    loaded = np.load(out / f"{case}.npy")
    assert loaded.dtype == np.float32
    assert np.array_equal(loaded, values.astype(np.float32))


def test_f4_safetensors_keeps_the_packed_bytes(results: Results, out: Path) -> None:
    import remotetensors as rt

    for case, name, expected in [
        ("f4 safetensors", "f4.safetensors", F4),
        ("f4 slice safetensors", "f4s.safetensors", F4[2:6]),
    ]:
        assert results[case].status == 0, results[case].err
        with rt.safe_open(out / name) as f:
            assert f.index.tensors["f4"].dtype == "F4"
            assert f.get_tensor_bytes("f4").tobytes() == pack(expected, DTYPES["F4"]).tobytes()
            assert np.array_equal(
                f.get_tensor("f4").astype(np.float32), expected.astype(np.float32)
            )


def test_a_silent_server_fails_soon_with_the_cli_options(results: Results) -> None:
    results["silent server"].one_line_error("timed out", "gave up after 2 attempts")


def test_ranges_ignored_points_to_the_cli_opt_in(results: Results, server: FaultyServer) -> None:
    results["ranges ignored"].one_line_error(
        "small.safetensors", "ignored the Range header", "--accept-whole-body-below"
    )
    assert results["whole body opt-in"].status == 0, results["whole body opt-in"].err
    assert json.loads(results["whole body opt-in"].out)["tensors"] == 1


def test_header_reaches_the_server(results: Results, server: FaultyServer) -> None:
    assert results["header"].status == 0, results["header"].err
    assert any(e.headers.get("X-Test") == "first contact" for e in server.log.entries)
    results["bad header"].one_line_error("--header", "'NAME: VALUE'")


# --- S3 with an endpoint of its own ----------------------------------------------------------


def test_s3_with_a_non_aws_endpoint_leaves_nothing_at_exit(
    moto_endpoint: str, tmp_path: Path
) -> None:
    from tests.integration.test_models import put_s3

    put_s3(moto_endpoint, "first-contact", {"m.safetensors": write_reference({"w": ROWS})})
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    endpoint = f"endpoint_url={moto_endpoint}"
    target = tmp_path / "w.npy"
    with ThreadPoolExecutor(2) as pool:
        good = pool.submit(
            cli,
            "get",
            "s3://first-contact/m.safetensors",
            "w",
            "-o",
            str(target),
            "--option",
            endpoint,
            env=env,
        )
        missing = pool.submit(
            cli, "info", "s3://first-contact/absent.safetensors", "--option", endpoint, env=env
        )
        ok, absent = good.result(), missing.result()
    assert ok.status == 0, ok.err
    assert ok.err == ""  # nothing at exit either
    assert np.array_equal(np.load(target), ROWS)
    absent.one_line_error("s3://first-contact/absent.safetensors", "not found")


# --- Ctrl-C ----------------------------------------------------------------------------------


class TrickleServer:
    """Serves one large file with byte ranges, slowly (64 KiB every 20 ms per request), so a
    download is surely in flight when the test interrupts it."""

    def __init__(self, data: bytes) -> None:
        self.data_requests: dict[str, int] = {}  # by query string: one per client under test

        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if not self.path.partition("?")[0].endswith("/big.safetensors"):
                    self.send_error(404)  # config.json and the like: there are none
                    return
                first, _, last = self.headers["Range"].removeprefix("bytes=").partition("-")
                start, end = int(first), min(int(last), len(data) - 1)
                body = data[start : end + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", '"trickle"')
                self.end_headers()
                if start > 0:
                    query = self.path.partition("?")[2]
                    outer.data_requests[query] = outer.data_requests.get(query, 0) + 1
                try:
                    for offset in range(0, len(body), 65536):
                        self.wfile.write(body[offset : offset + 65536])
                        if start > 0:
                            time.sleep(0.02)
                except OSError:
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/big.safetensors"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture(scope="module")
def trickle() -> Iterator[TrickleServer]:
    running = TrickleServer(write_reference({"big": np.zeros((2048, 4096), np.float32)}))
    try:
        yield running
    finally:
        running.stop()


def interrupted(argv: list[str], trickle: TrickleServer, client: str) -> tuple[int, str]:
    """Start ``argv``, which reads ``trickle.url + "?" + client``; press Ctrl-C once two of its
    data requests are under way; (status, stderr)."""
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A shell may start jobs with SIGINT ignored; a user's terminal never does.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 30
    while trickle.data_requests.get(client, 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    return process.returncode, err


def test_ctrl_c_is_one_line_and_130(trickle: TrickleServer, tmp_path: Path) -> None:
    for trial in ("cli-1", "cli-2"):
        url = f"{trickle.url}?{trial}"
        argv = [
            sys.executable,
            "-m",
            "remotetensors",
            "get",
            url,
            "big",
            "-o",
            str(tmp_path / "b.npy"),
        ]
        status, err = interrupted(argv, trickle, trial)
        assert status == 130, err
        assert err == "remotetensors: interrupted\n"


def test_ctrl_c_in_the_python_api_leaves_no_unretrieved_futures(trickle: TrickleServer) -> None:
    # The program goes on after the interrupt, as a notebook or a server would: whatever the
    # cancelled work left behind is collected while it still runs.
    script = (
        "import gc, sys, time\n"
        "import remotetensors as rt\n"
        f"model = rt.open_model({trickle.url + '?api'!r})\n"
        "try:\n"
        "    model.get_tensor('big')\n"
        "except KeyboardInterrupt:\n"
        "    print('caught', file=sys.stderr)\n"
        "time.sleep(0.5)\n"
        "gc.collect()\n"
        "model.close()\n"
    )
    status, err = interrupted([sys.executable, "-c", script], trickle, "api")
    assert status == 0, err
    assert err == "caught\n"
    assert "never retrieved" not in err
    assert "Task was destroyed" not in err


# --- the Python API after close ----------------------------------------------------------------


def test_a_closed_model_names_itself(urls: dict[str, str]) -> None:
    import remotetensors as rt

    model = rt.open_model(urls["model"])
    model.close()
    with pytest.raises(rt.FileClosedError, match="Model is closed") as caught:
        model.get_tensor("rows")
    assert urls["model"] in str(caught.value)
    with pytest.raises(rt.FileClosedError):
        model.get_slice("rows")


def test_a_closed_pipe_ends_quietly(server: FaultyServer) -> None:
    many = {f"model.layers.{i}.weight": np.ones(2, np.float16) for i in range(5_000)}
    url = server.put("many.safetensors", write_reference(many))
    process = subprocess.Popen(
        [sys.executable, "-m", "remotetensors", "ls", url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdout.readline().split() == [b"name", b"dtype", b"shape", b"size", b"file"]
    process.stdout.close()  # as `| head -1` does
    _, err = process.communicate(timeout=60)
    assert process.returncode == 141
    assert err == b""


def test_warnings_are_one_line(results: Results) -> None:
    result = results["warning"]
    assert result.status == 0, result.err
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("remotetensors: warning: ")
    assert "config.json: not JSON" in lines[0]
