"""safe_open over HTTP: reference equality, request patterns, and a hostile network."""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
import threading
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open as reference_open

import remotetensors as rt
from remotetensors.ranges import ByteRange, plan_reads
from remotetensors.sources.http.source import HttpSource
from tests.reference import ReferenceView, raw_file, reference_read, write_reference
from tests.servers import FaultyServer, Log
from tests.unit.test_safetensors_format import every_writable_dtype
from tests.waiting import until

FAST = rt.HttpOptions(backoff_initial_seconds=0.01, backoff_max_seconds=0.05)


@pytest.fixture(autouse=True, params=["direct", "httpx"])
def data_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run every test with data bodies read directly into arrays, and through httpx alone."""
    if request.param == "httpx":
        # A configured proxy turns the direct reader off; pretend there is one.
        monkeypatch.setattr("remotetensors.sources.http.client.proxy_in_environment", lambda: True)
    return str(request.param)


def model_bytes(layers: int = 4, rows: int = 256, cols: int = 64) -> tuple[bytes, dict[str, Any]]:
    rng = np.random.default_rng(7)
    tensors: dict[str, Any] = {"embed": rng.standard_normal((rows * 4, cols)).astype(np.float32)}
    for i in range(layers):
        tensors[f"layers.{i}.w"] = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
        tensors[f"layers.{i}.b"] = rng.standard_normal(cols).astype(np.float16)
    return write_reference(tensors, metadata={"format": "np"}), tensors


def header_end(data: bytes) -> int:
    return 8 + int(struct.unpack_from("<Q", data)[0])


# --- equality with the reference ---------------------------------------------------------------


def test_every_dtype_over_http_equals_the_reference(
    static: tuple[str, Log, Path], tmp_path: Path
) -> None:
    base, _, root = static
    data = write_reference(every_writable_dtype(), metadata={"k": "v"})
    (root / "all.safetensors").write_bytes(data)
    local = tmp_path / "all.safetensors"
    local.write_bytes(data)
    view = reference_read(data)
    assert isinstance(view, ReferenceView)
    with rt.safe_open(f"{base}/all.safetensors") as f, reference_open(str(local), "numpy") as ref:
        assert f.keys() == ref.keys()
        assert f.metadata() == ref.metadata()
        ours = f.get_tensors()
        assert list(ours) == f.offset_keys()
        for name in ref.keys():  # noqa: SIM118
            dtype_name, shape, payload = view.tensors[name]
            got = f.get_tensor(name)
            assert got.dtype == rt.DTYPES[dtype_name].numpy, name
            assert got.shape == shape, name
            assert got.tobytes() == payload, name
            assert ours[name].tobytes() == payload, name
            assert got.flags.writeable
            assert got.flags.c_contiguous
            if not dtype_name.startswith("F8"):  # the reference's numpy path fails on F8
                expected = ref.get_tensor(name)
                assert got.dtype == expected.dtype
                assert got.tobytes() == expected.tobytes()


def test_large_tensors_read_in_parallel_while_their_pages_are_populated(
    static: tuple[str, Log, Path], monkeypatch: pytest.MonkeyPatch, data_path: str
) -> None:
    # Small limits, so that a few MiB take the path of a 512 MiB tensor: the populating
    # thread walks four destinations in 64 KiB steps while four parts fill them. Except where
    # the direct reader receives the bodies in threads (plain HTTP): they fault their own
    # pages on every core, and nothing is populated ahead.
    from remotetensors.reading import prefault

    monkeypatch.setattr(prefault, "MIN_BYTES", 1024 * 1024)
    monkeypatch.setattr(prefault, "STEP_BYTES", 64 * 1024)
    started: list[int] = []
    real = prefault._populate

    def populate(buffers: list[memoryview], stop: threading.Event) -> None:
        started.append(len(buffers))
        real(buffers, stop)

    monkeypatch.setattr(prefault, "_populate", populate)
    base, _, root = static
    rng = np.random.default_rng(3)
    tensors = {f"t{i}": rng.standard_normal(600_000).astype(np.float32) for i in range(4)}
    (root / "large.safetensors").write_bytes(write_reference(tensors))
    with rt.safe_open(f"{base}/large.safetensors") as f:
        got = f.get_tensors()
    for name, expected in tensors.items():
        assert got[name].tobytes() == expected.tobytes(), name
    assert started == ([] if data_path == "direct" else [4])


def test_slices_over_http_equal_reference_get_slice(
    static: tuple[str, Log, Path], tmp_path: Path
) -> None:
    base, _, root = static
    data, _ = model_bytes()
    (root / "m.safetensors").write_bytes(data)
    (tmp_path / "m.safetensors").write_bytes(data)
    cases = [
        ("embed", (slice(100, 300),)),
        ("embed", (slice(None), slice(3, 9))),
        ("embed", (slice(0, 1000, 7), 5)),
        ("layers.2.w", (Ellipsis, slice(0, 64, 2))),
        ("layers.0.b", (slice(10, 20),)),
        ("embed", ()),
    ]
    with (
        rt.safe_open(f"{base}/m.safetensors") as f,
        reference_open(str(tmp_path / "m.safetensors"), "numpy") as ref,
    ):
        for name, index in cases:
            view = f.get_slice(name)
            assert view.get_shape() == ref.get_slice(name).get_shape()
            assert view.get_dtype() == ref.get_slice(name).get_dtype()
            expected = ref.get_slice(name)[index]
            got = view[index]
            assert got.shape == expected.shape
            assert got.tobytes() == expected.tobytes()


def test_sub_byte_dtypes_decode_over_http(faulty: FaultyServer) -> None:
    codes = np.arange(16, dtype=np.uint8)
    packed = bytes((codes[0::2] | (codes[1::2] << 4)).tolist())
    header = json.dumps({"f4": {"dtype": "F4", "shape": [4, 4], "data_offsets": [0, 8]}})
    url = faulty.put("f4.safetensors", raw_file(header, packed, pad=True))
    with rt.safe_open(url) as f:
        values = f.get_tensor("f4")
        assert values.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
        assert values.view(np.uint8).reshape(-1).tolist() == codes.tolist()
        assert f.get_tensor_bytes("f4").tobytes() == packed
        assert f.get_slice("f4")[1:3].view(np.uint8).reshape(-1).tolist() == list(range(4, 12))


# --- request patterns --------------------------------------------------------------------------


def test_header_in_window_is_one_request_and_small_file_needs_no_more(
    faulty: FaultyServer,
) -> None:
    data, tensors = model_bytes(layers=1, rows=16, cols=8)
    assert len(data) < rt.ReadOptions().header_window_bytes
    url = faulty.put("small.safetensors", data)
    with rt.safe_open(url) as f:
        assert faulty.log.ranges() == [(0, rt.ReadOptions().header_window_bytes)]
        for name, array in tensors.items():
            assert f.get_tensor(name).tobytes() == array.tobytes()
        assert f.get_slice("embed")[3:5].tobytes() == tensors["embed"][3:5].tobytes()
    assert len(faulty.log.entries) == 1  # the tensors came from the first window


def test_longer_header_costs_one_more_request_for_only_the_tail(faulty: FaultyServer) -> None:
    tensors = {f"t{i:04d}": np.zeros(1, np.float32) for i in range(400)}
    data = write_reference(tensors)
    end = header_end(data)
    window = 1024
    assert end > window
    url = faulty.put("long.safetensors", data)
    with rt.safe_open(url, options=rt.ReadOptions(header_window_bytes=window)) as f:
        assert len(f.keys()) == 400
    assert faulty.log.ranges() == [(0, window), (window, end)]


def test_k_tensors_fetch_exactly_the_coalesced_plan(faulty: FaultyServer) -> None:
    data, tensors = model_bytes(layers=6, rows=512, cols=128)
    url = faulty.put("m.safetensors", data)
    options = rt.ReadOptions(header_window_bytes=4096, max_gap_bytes=1000, part_size_bytes=50_000)
    names = ["layers.1.w", "layers.1.b", "layers.4.w", "embed"]
    with rt.safe_open(url, options=options) as f:
        faulty.log.clear()
        infos = [f.index.tensors[n] for n in names]
        got = f.get_tensors(names)
        for name in names:
            assert got[name].tobytes() == tensors[name].tobytes()
    window = options.header_window_bytes  # bytes already held from the first request
    expected = plan_reads(
        [ByteRange(max(i.start, window), i.end) for i in infos if i.end > window],
        max_gap_bytes=options.max_gap_bytes,
        part_size_bytes=options.fixed_part_size_bytes,
    )
    seen = sorted(faulty.log.ranges())
    assert seen == [(p.range.start, p.range.end) for p in expected.parts]
    # Every byte once: the ranges do not overlap, and they hold no more than the plan.
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(seen))
    assert all(end - start <= options.fixed_part_size_bytes for start, end in seen)
    assert faulty.log.total_bytes == expected.fetched_bytes


def test_rows_of_a_matrix_fetch_only_those_rows(faulty: FaultyServer) -> None:
    data, tensors = model_bytes()
    url = faulty.put("m.safetensors", data)
    with rt.safe_open(url, options=rt.ReadOptions(header_window_bytes=2048)) as f:
        info = f.index.tensors["embed"]
        faulty.log.clear()
        rows = f.get_slice("embed")[500:600]
        assert rows.tobytes() == tensors["embed"][500:600].tobytes()
    row_bytes = 64 * 4
    assert faulty.log.ranges() == [(info.start + 500 * row_bytes, info.start + 600 * row_bytes)]


def test_one_redirect_hop_per_file_and_reresolve_when_it_expires(faulty: FaultyServer) -> None:
    data, tensors = model_bytes()
    faulty.put("m.safetensors", data)
    options = rt.ReadOptions(header_window_bytes=2048)
    with rt.safe_open(f"{faulty.url}/redirect/m.safetensors", options=options) as f:
        for name in ("embed", "layers.0.w", "layers.3.b"):
            assert f.get_tensor(name).tobytes() == tensors[name].tobytes()
        assert faulty.redirects == 1
        faulty.expire()  # the signed CDN URL stops working
        assert f.get_tensor("layers.2.w").tobytes() == tensors["layers.2.w"].tobytes()
        assert faulty.redirects == 2
        assert f.get_tensor("layers.1.w").tobytes() == tensors["layers.1.w"].tobytes()
        assert faulty.redirects == 2


def test_server_ignoring_range_on_512_mib_costs_little(faulty: FaultyServer) -> None:
    size = 512 * 1024 * 1024
    header = b'{"big":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' % (size, size)
    url = faulty.put("big.safetensors", raw_file(header, bytes(size), pad=True))
    faulty.fault("big.safetensors", "ignore-range")
    with pytest.raises(rt.RangeNotSupportedError, match="ignored the Range header") as err:
        rt.safe_open(url)
    assert url in str(err.value)
    assert faulty.log.entries[0].status == 200
    assert faulty.log.total_bytes < 8 * 1024 * 1024, faulty.log.total_bytes


# --- a hostile network ---------------------------------------------------------------------------


@pytest.fixture
def model_on_faulty(faulty: FaultyServer) -> tuple[FaultyServer, str, dict[str, Any]]:
    data, tensors = model_bytes()
    return faulty, faulty.put("m.safetensors", data), tensors


SMALL_WINDOW = rt.ReadOptions(header_window_bytes=2048)


@pytest.mark.parametrize("fault", ["short-body", "drop"])
def test_cut_bodies_resume_from_the_first_missing_byte(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]], fault: str
) -> None:
    server, url, tensors = model_on_faulty
    with rt.safe_open(url, options=SMALL_WINDOW, http_options=FAST) as f:
        info = f.index.tensors["embed"]
        server.log.clear()
        server.fault("m.safetensors", fault)
        assert f.get_tensor("embed").tobytes() == tensors["embed"].tobytes()
    first, second = server.log.ranges()
    start = max(info.start, SMALL_WINDOW.header_window_bytes)  # the window holds the rest
    assert first == (start, info.end)
    half = (info.end - start) // 2
    assert second == (start + half, info.end)


@pytest.mark.parametrize("fault", ["short-body", "drop"])
async def test_a_cut_suffix_resumes_as_a_plain_range(faulty: FaultyServer, fault: str) -> None:
    data = bytes(range(256)) * 40
    url = faulty.put("f.bin", data)
    faulty.fault("f.bin", fault)
    source = HttpSource(url, options=FAST)
    try:
        suffix = await source.open_suffix(4000)
    finally:
        await source.aclose()
    assert (suffix.data, suffix.start) == (data[-4000:], len(data) - 4000)
    assert [e.range for e in faulty.log.entries] == [
        "bytes=-4000",
        f"bytes={len(data) - 2000}-{len(data) - 1}",  # the half that was cut off
    ]


async def test_a_suffix_served_whole_keeps_the_tail(faulty: FaultyServer) -> None:
    data = bytes(range(256)) * 4
    url = faulty.put("f.bin", data)
    faulty.fault("f.bin", "ignore-range")
    source = HttpSource(url, options=rt.HttpOptions(accept_whole_body_below_bytes=10_000))
    try:
        suffix = await source.open_suffix(100)
        assert (suffix.data, suffix.size) == (data[-100:], len(data))
        assert await source.read(5, 9) == data[5:9]  # from the body held, no request
    finally:
        await source.aclose()
    assert len(faulty.log.entries) == 1


@pytest.mark.parametrize("status", ["429", "503", "500"])
def test_rate_limits_and_server_errors_are_retried(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]], status: str
) -> None:
    server, url, tensors = model_on_faulty
    server.retry_after = "0"
    server.fault("m.safetensors", status, status)
    with rt.safe_open(url, options=SMALL_WINDOW, http_options=FAST) as f:
        assert f.get_tensor("layers.1.w").tobytes() == tensors["layers.1.w"].tobytes()
    assert [e.status for e in server.log.entries[:3]] == [int(status), int(status), 206]


def test_retry_after_is_honoured(model_on_faulty: tuple[FaultyServer, str, dict[str, Any]]) -> None:
    server, url, _ = model_on_faulty
    server.retry_after = "1"
    server.fault("m.safetensors", "429")
    loop = asyncio.new_event_loop()
    try:
        started = loop.time()
        rt.safe_open(url, http_options=FAST).close()
        assert loop.time() - started >= 0.9  # the backoff alone would wait at most 0.05 s
    finally:
        loop.close()


def test_too_long_retry_after_fails_at_once(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    server, url, _ = model_on_faulty
    server.retry_after = "3600"
    server.fault("m.safetensors", "429")
    with pytest.raises(rt.TransportError, match="retry after 3600"):
        rt.safe_open(url, http_options=FAST)
    assert len(server.log.entries) == 1


def test_persistent_errors_give_up_after_the_attempt_budget(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    server, url, _ = model_on_faulty
    server.retry_after = "0"
    server.fault("m.safetensors", *["503"] * 10)
    with pytest.raises(rt.TransportError, match=r"HTTP 503 \(gave up after 3 attempts\)") as err:
        rt.safe_open(url, http_options=rt.HttpOptions(max_attempts=3, backoff_initial_seconds=0))
    assert url in str(err.value)
    assert len(server.log.entries) == 3


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("wrong-content-range", "expected bytes"),
        ("no-total", "does not give the file size"),
        ("gzip", "gzip-encoded"),
        ("extra-bytes", "longer than"),
    ],
)
def test_untrustworthy_answers_are_errors_not_wrong_bytes(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]], fault: str, message: str
) -> None:
    server, url, _ = model_on_faulty
    with rt.safe_open(url, options=SMALL_WINDOW, http_options=FAST) as f:
        server.fault("m.safetensors", fault)
        with pytest.raises(rt.BadResponseError, match=message) as err:
            f.get_tensor("layers.0.w")
        assert url in str(err.value)


def test_gzip_when_offered_does_not_reach_us(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    server, url, tensors = model_on_faulty
    server.gzip_when_offered = True
    with rt.safe_open(url, options=SMALL_WINDOW) as f:
        assert f.get_tensor("embed").tobytes() == tensors["embed"].tobytes()
    assert all(e.headers.get("Accept-Encoding") == "identity" for e in server.log.entries)


def test_file_changed_between_requests_is_detected_by_if_match(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    server, url, tensors = model_on_faulty
    with rt.safe_open(url, options=SMALL_WINDOW) as f:
        assert f.get_tensor("layers.0.b").tobytes() == tensors["layers.0.b"].tobytes()
        etag = FaultyServer.etag(server.files["m.safetensors"])
        assert server.log.entries[-1].headers.get("If-Match") == etag
        server.files["m.safetensors"] = server.files["m.safetensors"][:-4] + b"\x00\x00\x00\x01"
        with pytest.raises(rt.RemoteFileChangedError, match="changed since it was opened"):
            f.get_tensor("layers.0.b")
    assert server.log.entries[-1].status == 412


def test_file_changed_is_detected_without_if_match_support(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    server, url, _ = model_on_faulty
    server.honour_if_match = False
    with rt.safe_open(url, options=SMALL_WINDOW) as f:
        server.files["m.safetensors"] += b"\x00" * 8
        with pytest.raises(rt.RemoteFileChangedError, match="size"):
            f.get_tensor("embed")
        server.fault("m.safetensors", "stale-etag")
        server.files["m.safetensors"] = server.files["m.safetensors"][:-8]
        with pytest.raises(rt.RemoteFileChangedError, match="ETag"):
            f.get_tensor("embed")


@pytest.mark.parametrize(
    ("status", "error", "builtin"),
    [
        ("404", rt.NotFoundError, FileNotFoundError),
        ("401", rt.PermissionDeniedError, PermissionError),
        ("403", rt.PermissionDeniedError, PermissionError),
    ],
)
def test_http_errors_map_to_builtins(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
    status: str,
    error: type[Exception],
    builtin: type[Exception],
) -> None:
    server, url, _ = model_on_faulty
    server.fault("m.safetensors", status)
    with pytest.raises(error) as err:
        rt.safe_open(url)
    assert isinstance(err.value, builtin)
    assert url in str(err.value)
    if status != "404":
        assert "token" in str(err.value)


def test_missing_file(faulty: FaultyServer) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        rt.safe_open(f"{faulty.url}/f/nothing.safetensors")


def test_timeouts_are_configurable_and_name_the_url(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    server, url, _ = model_on_faulty
    server.fault("m.safetensors", "stall", "stall")
    options = rt.HttpOptions(read_timeout_seconds=0.2, max_attempts=2, backoff_initial_seconds=0)
    with pytest.raises(rt.RequestTimeoutError, match="timed out") as err:
        rt.safe_open(url, http_options=options)
    assert isinstance(err.value, TimeoutError)
    assert url in str(err.value)


def test_stalled_data_reads_time_out(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    server, url, _ = model_on_faulty
    options = rt.HttpOptions(read_timeout_seconds=0.2, max_attempts=2, backoff_initial_seconds=0)
    with rt.safe_open(url, options=SMALL_WINDOW, http_options=options) as f:
        server.fault("m.safetensors", "stall", "stall")
        with pytest.raises(rt.RequestTimeoutError, match="timed out") as err:
            f.get_tensor("embed")
    assert url in str(err.value)


def test_connection_refused_is_a_transport_error() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(rt.TransportError, match="network error"):
        rt.safe_open(f"http://127.0.0.1:{port}/m.safetensors", http_options=FAST)


def test_not_a_safetensors_file_says_what_it_is(faulty: FaultyServer) -> None:
    url = faulty.put("page.html", b"<!DOCTYPE html><html><body>Login</body></html>")
    with pytest.raises(rt.HeaderError, match="HTML") as err:
        rt.safe_open(url)
    assert url in str(err.value)


def test_whole_body_opt_in_for_small_files(faulty: FaultyServer) -> None:
    data, tensors = model_bytes(layers=1, rows=16, cols=8)
    url = faulty.put("small.safetensors", data)
    faulty.fault("small.safetensors", "ignore-range")
    options = rt.HttpOptions(accept_whole_body_below_bytes=1 << 20)
    with rt.safe_open(
        url, http_options=options, options=rt.ReadOptions(header_window_bytes=64)
    ) as f:
        assert f.get_tensor("embed").tobytes() == tensors["embed"].tobytes()
    assert len(faulty.log.entries) == 1


# --- the API: closed files, unknown names, async, threads, loops -------------------------------


def test_reference_messages_for_unknown_names_and_closed_files(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    _, url, _ = model_on_faulty
    f = rt.safe_open(url)
    with pytest.raises(KeyError, match="File does not contain tensor nope"):
        f.get_tensor("nope")
    f.close()
    with pytest.raises(rt.FileClosedError, match="File is closed"):
        f.get_tensor("embed")
    with pytest.raises(rt.FileClosedError, match="File is closed"):
        f.keys()


async def test_async_api(model_on_faulty: tuple[FaultyServer, str, dict[str, Any]]) -> None:
    _server, url, tensors = model_on_faulty
    async with rt.open_async(url, options=SMALL_WINDOW) as f:
        assert f.keys() == sorted(tensors)
        assert f.metadata() == {"format": "np"}
        embed = await f.get_tensor("embed")
        assert embed.tobytes() == tensors["embed"].tobytes()
        rows = await f.get_slice("embed")[10:20]
        assert rows.tobytes() == tensors["embed"][10:20].tobytes()
        both = await f.get_tensors(["layers.0.w", "layers.0.b"])
        assert list(both) == ["layers.0.w", "layers.0.b"]
    opened = await rt.open_async(url)
    assert len(opened.index) == len(tensors)
    await opened.aclose()


def test_the_async_api_on_uvloop(model_on_faulty: tuple[FaultyServer, str, dict[str, Any]]) -> None:
    # Servers and notebooks often run uvloop, whose transports do not derive from asyncio's.
    uvloop = pytest.importorskip("uvloop")
    _server, url, tensors = model_on_faulty

    async def read() -> None:
        async with rt.open_async(url, options=SMALL_WINDOW) as f:
            embed = await f.get_tensor("embed")
            assert embed.tobytes() == tensors["embed"].tobytes()
            rows = await f.get_slice("embed")[10:20]
            assert rows.tobytes() == tensors["embed"][10:20].tobytes()
        results = [r async for r in rt.scan_async([url, url], concurrency=2)]
        assert [r.error for r in results] == [None, None]

    uvloop.run(read())


async def test_sync_api_inside_a_running_loop(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    _, url, tensors = model_on_faulty
    asyncio.get_running_loop()  # as in Jupyter: a loop is running in this thread
    with rt.safe_open(url) as f:
        assert f.get_tensor("embed").tobytes() == tensors["embed"].tobytes()


def test_sync_api_from_eight_threads(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    _, url, tensors = model_on_faulty
    shared = rt.safe_open(url, options=SMALL_WINDOW)
    names = sorted(tensors)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for name in names[i % len(names) :] + names[: i % len(names)]:
                assert shared.get_tensor(name).tobytes() == tensors[name].tobytes()
            with rt.safe_open(url) as own:
                assert (
                    own.get_slice("embed")[i : i + 3].tobytes()
                    == tensors["embed"][i : i + 3].tobytes()
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    shared.close()
    assert errors == []


def test_framework_pt_or_a_clear_error(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    import importlib.util

    _, url, tensors = model_on_faulty
    if importlib.util.find_spec("torch") is None:
        with pytest.raises(rt.FrameworkError, match="needs torch"):
            rt.safe_open(url, framework="pt")
        return
    import torch

    with rt.safe_open(url, framework="pt") as f:
        w = f.get_tensor("layers.0.w")
        assert w.dtype == torch.bfloat16
        assert w.view(torch.int16).numpy().tobytes() == tensors["layers.0.w"].tobytes()
        assert f.get_tensor("embed").dtype == torch.float32
    with pytest.raises(rt.FrameworkError, match="framework jax is invalid"):
        rt.safe_open(url, framework="jax")


def test_ctrl_c_cancels_the_work_in_flight(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
) -> None:
    import signal

    from remotetensors.models.sync import _bridge_loop

    server, url, _ = model_on_faulty
    # Nothing of ours gives up on the stalled answer (no read timeout, no throughput floor),
    # and the server holds it back for an hour or until its client leaves: only the
    # cancellation can close the connection.
    forever = rt.HttpOptions(read_timeout_seconds=3600, min_bytes_per_second=0)
    f = rt.safe_open(url, options=SMALL_WINDOW, http_options=forever)
    server.stall_seconds = 3600
    server.log.clear()
    server.fault("m.safetensors", "stall")
    main = threading.main_thread().ident
    assert main is not None
    assert threading.current_thread() is threading.main_thread()
    # A run started in the background or under nohup inherits SIGINT as ignored, and Python
    # then installs no handler: the signal would do nothing. A terminal's Ctrl-C raises
    # KeyboardInterrupt, so the test sets that disposition itself and puts back the one it found.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, signal.pthread_kill, args=(main, signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            f.get_tensor("embed")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, inherited)
    # The call did not wait for the stalled answer: its request was cancelled and its
    # connection closed while the server still held the answer back (499, not 206).
    (stalled,) = server.log.entries
    assert until(lambda: stalled.ended), "the stalled handler never saw its client leave"
    assert stalled.status == 499

    async def pending() -> int:
        current = asyncio.current_task()
        return len([t for t in asyncio.all_tasks() if t is not current])

    loop = _bridge_loop()
    assert until(lambda: asyncio.run_coroutine_threadsafe(pending(), loop).result() == 0)
    f.close()


def test_progress_bars_only_when_asked_or_on_a_terminal(
    model_on_faulty: tuple[FaultyServer, str, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, url, tensors = model_on_faulty
    monkeypatch.setattr("remotetensors.reading.progress.SHOW_AFTER_SECONDS", 0)
    with rt.safe_open(url, options=rt.ReadOptions(header_window_bytes=2048)) as f:
        f.get_tensor("embed")
    assert capsys.readouterr().err == ""  # stderr is not a terminal here: no bar
    options = rt.ReadOptions(header_window_bytes=2048, progress=True)
    with rt.safe_open(url, options=options) as f:
        assert f.get_tensor("embed").tobytes() == tensors["embed"].tobytes()
    err = capsys.readouterr().err
    assert "m.safetensors" in err
    assert "/255k" in err  # the bar's total: the tensor's bytes beyond the first window, in KiB
    assert "B/s" in err
