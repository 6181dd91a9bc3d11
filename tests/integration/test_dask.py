"""Tensors as Dask arrays, computed on a real cluster (distributed.LocalCluster, process
workers) against loopback servers: exact values, each byte once, version pins, worker loss."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import signal
import time
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import remotetensors as rt
from remotetensors.dtypes import DTYPES, pack
from tests.hub_standin import TOKEN, HubStandIn
from tests.reference import raw_file, write_reference
from tests.servers import FaultyServer

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
da = pytest.importorskip("dask.array", reason="the dask extra is not installed")

CHUNK = 4096


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """Two worker processes (not threads), one thread each: chunks really cross processes."""
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address="127.0.0.1:0",  # a free port: 8787 may be taken
            host="127.0.0.1",
            silence_logs=40,
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        yield dask_client


def shards() -> dict[str, dict[str, np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(7)
    return {
        "model-00001-of-00002.safetensors": {
            "embed": rng.standard_normal((300, 17)).astype(np.float32),
            "norm": rng.standard_normal(17).astype(np.float16),
            "bf": rng.standard_normal((40, 9)).astype(ml_dtypes.bfloat16),
        },
        "model-00002-of-00002.safetensors": {
            "f8": rng.standard_normal((64, 33)).astype(ml_dtypes.float8_e4m3fn),
            "ids": rng.integers(-(2**40), 2**40, (77, 3)).astype(np.int64),
            "mask": rng.integers(0, 2, (50, 50)).astype(np.bool_),
            "scalar": np.array(3.5, dtype=np.float64),
        },
    }


def one(model: rt.Model, name: str, chunk_bytes: int) -> Any:
    array = model.to_dask(name, chunk_bytes=chunk_bytes)
    assert isinstance(array, da.Array)
    return array


def serve_sharded(server: FaultyServer) -> dict[str, bytes]:
    files = {name: write_reference(tensors) for name, tensors in shards().items()}
    weight_map = {t: name for name, tensors in shards().items() for t in tensors}
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {}, "weight_map": weight_map}
    ).encode()
    for name, data in files.items():
        server.put(name, data)
    return files


def data_ranges(server: FaultyServer, fragment: str) -> list[tuple[int, int]]:
    """Ranged reads of a shard after the header phase, without the 8-byte version checks."""
    return sorted(r for r in server.log.ranges(fragment) if r != (0, 8))


def expected(name: str) -> np.ndarray[Any, Any]:
    for tensors in shards().values():
        if name in tensors:
            return tensors[name]
    raise KeyError(name)


def same_bits(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_sharded_model_bit_exact_and_each_byte_read_once(client: Any, faulty: FaultyServer) -> None:
    serve_sharded(faulty)
    with rt.open_model(f"{faulty.url}/f/") as m:
        arrays = m.to_dask("*", chunk_bytes=CHUNK)
        assert isinstance(arrays, dict)
        infos = dict(m.tensors)
    assert set(arrays) == {t for tensors in shards().values() for t in tensors}
    assert arrays["embed"].numblocks[0] > 1  # chunked along rows, so workers share the work
    faulty.log.clear()

    computed = client.compute(list(arrays.values()), sync=True)

    for (name, array), result in zip(arrays.items(), computed, strict=True):
        assert same_bits(result, expected(name)), name
        assert array.dtype == expected(name).dtype
    # Each tensor byte crossed the network once: the data reads tile the tensors exactly.
    for shard in shards():
        reads = data_ranges(faulty, shard)
        for (_, end), (start, _) in itertools.pairwise(reads):
            assert end <= start, f"overlapping reads of {shard}: {reads}"
        wanted = sum(info.nbytes for info in infos.values() if info.file == shard)
        assert sum(end - start for start, end in reads) == wanted
        # Opening the file on a worker costs one 8-byte request per worker, no header again.
        assert faulty.log.ranges(shard).count((0, 8)) <= len(client.scheduler_info()["workers"])


def test_full_reduction_reads_each_byte_once(client: Any, faulty: FaultyServer) -> None:
    serve_sharded(faulty)
    with rt.open_model(f"{faulty.url}/f/") as m:
        embed = one(m, "embed", CHUNK)
        info = m.tensors["embed"]
    faulty.log.clear()
    norms = client.compute(da.sqrt((embed.astype(np.float64) ** 2).sum(axis=1)), sync=True)
    reference = np.sqrt((expected("embed").astype(np.float64) ** 2).sum(axis=1))
    np.testing.assert_array_equal(norms, reference)
    reads = data_ranges(faulty, "00001")
    assert sum(end - start for start, end in reads) == info.nbytes
    assert len(reads) == embed.numblocks[0]  # one range read per chunk


def test_sliced_array_reads_only_the_chunks_it_touches(client: Any, faulty: FaultyServer) -> None:
    serve_sharded(faulty)
    with rt.open_model(f"{faulty.url}/f/") as m:
        embed = one(m, "embed", CHUNK)
        info = m.tensors["embed"]
    rows_per_chunk = embed.chunks[0][0]
    row_bytes = 17 * 4
    faulty.log.clear()
    part = client.compute(embed[rows_per_chunk + 3 : rows_per_chunk + 10], sync=True)
    np.testing.assert_array_equal(part, expected("embed")[rows_per_chunk + 3 : rows_per_chunk + 10])
    reads = data_ranges(faulty, "00001")
    chunk_start = info.start + rows_per_chunk * row_bytes
    assert reads, "nothing was read"
    for start, end in reads:  # inside the second chunk only
        assert chunk_start <= start
        assert end <= chunk_start + rows_per_chunk * row_bytes
    assert sum(end - start for start, end in reads) <= rows_per_chunk * row_bytes


@pytest.mark.parametrize("workers_hold_it_open", [True, False])
def test_file_replaced_mid_computation_fails_on_the_worker(
    client: Any, faulty: FaultyServer, workers_hold_it_open: bool
) -> None:
    files = serve_sharded(faulty)
    shard = "model-00001-of-00002.safetensors"
    with rt.open_model(f"{faulty.url}/f/") as m:
        embed = one(m, "embed", CHUNK * 2 + 8)  # a chunk size no other test uses
    if workers_hold_it_open:  # If-Match catches it; otherwise the version pin of the task does
        first = client.compute(embed[:5], sync=True)
        np.testing.assert_array_equal(first, expected("embed")[:5])
    changed = bytearray(files[shard])
    changed[-1] ^= 0xFF  # same size, other bytes, so another ETag
    faulty.put(shard, bytes(changed))
    with pytest.raises(rt.RemoteFileChangedError) as caught:
        client.compute(embed.sum(), sync=True)
    assert shard in str(caught.value)


def test_worker_killed_mid_read_is_retried_and_exact(client: Any, faulty: FaultyServer) -> None:
    serve_sharded(faulty)
    shard = "model-00002-of-00002.safetensors"
    with rt.open_model(f"{faulty.url}/f/") as m:
        f8 = one(m, "f8", 1 << 20)  # one chunk: one task, on one worker
    assert f8.numblocks == (1, 1)
    faulty.log.clear()
    faulty.fault(shard, "none", "stall")  # the version check passes, the data read hangs
    future = client.compute(f8)
    deadline = time.monotonic() + 30
    while len(faulty.log.for_path(shard)) < 2:
        assert time.monotonic() < deadline, "the data read never started"
        time.sleep(0.02)
    busy = [address for address, keys in client.processing().items() if keys]
    assert len(busy) == 1
    pid = client.run(os.getpid, workers=busy)[busy[0]]
    os.kill(pid, signal.SIGKILL)
    result = future.result(timeout=60)
    assert same_bits(result, expected("f8"))
    stalled = faulty.log.for_path(shard)[1]
    ends = time.monotonic() + 30
    while not stalled.ended:  # let the server's handler end before the server stops
        assert time.monotonic() < ends, "the stalled handler never ended"
        time.sleep(0.05)
    client.wait_for_workers(2, timeout=60)  # the nanny's new worker, for the tests after this


def test_sub_byte_chunks_start_on_byte_boundaries(client: Any, faulty: FaultyServer) -> None:
    values = np.array(
        [0.5, 1.0, -1.5, 6.0, 0.0, -0.5, 2.0, 3.0, -6.0, 4.0] * 3, dtype=ml_dtypes.float4_e2m1fn
    )  # 10 rows of 3: a row is 12 bits, so chunks hold an even number of rows
    header = json.dumps({"f4": {"dtype": "F4", "shape": [10, 3], "data_offsets": [0, 15]}})
    url = faulty.put(
        "f4.safetensors", raw_file(header, pack(values, DTYPES["F4"]).tobytes(), pad=True)
    )
    with rt.safe_open(url, framework="numpy") as f:
        array = f.to_dask("f4", chunk_bytes=4)
        whole = f.get_tensor("f4")
    assert all(rows % 2 == 0 for rows in array.chunks[0])
    assert same_bits(client.compute(array, sync=True), whole)
    assert same_bits(client.compute(array[3:8:2], sync=True), whole[3:8:2])


def test_credentials_travel_in_the_task_not_in_its_names(
    client: Any, hub: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    tensors = shards()["model-00001-of-00002.safetensors"]
    hub.add("org/gated", {"model.safetensors": write_reference(tensors)}, gated=True)
    with rt.open_model("hf://org/gated", token=TOKEN) as m:
        bf = one(m, "bf", CHUNK)
    graph = dict(bf.__dask_graph__())
    shown = " ".join([repr(bf), bf.name, *map(str, graph), *map(repr, graph.values())])
    assert TOKEN not in shown
    assert TOKEN.encode() in pickle.dumps(graph)  # the worker needs it, inside the task
    hub.log.clear()
    assert same_bits(client.compute(bf, sync=True), tensors["bf"])
    worker_requests = [e for e in hub.log.entries if "resolve" in e.path]
    assert worker_requests
    assert all(e.headers.get("Authorization") == f"Bearer {TOKEN}" for e in worker_requests)
    assert all("Authorization" not in e.headers for e in hub.log.entries if "resolve" not in e.path)


def test_local_files_on_process_workers(client: Any, tmp_path: Any) -> None:
    tensors = shards()["model-00002-of-00002.safetensors"]
    (tmp_path / "model.safetensors").write_bytes(write_reference(tensors))
    with rt.open_model(tmp_path) as m:
        arrays = m.to_dask(["ids", "mask"], chunk_bytes=512)
    results = client.compute(arrays, sync=True)
    assert same_bits(results["ids"], tensors["ids"])
    assert same_bits(results["mask"], tensors["mask"])


def test_a_scan_runs_as_a_dask_bag_within_each_workers_rate_limit(
    client: Any, hub: HubStandIn
) -> None:
    from remotetensors.integrations.dask import scan_bag
    from tests.integration.test_scan import NO_CONFIGS, _fleet

    expected = _fleet(hub, 40)
    expected["hf://fleet/missing"] = {}  # one bad location: an error result, not a failed bag
    hub.rate_limit = (8, 0.5)  # 8 requests per 0.5 s; 429 with Retry-After beyond
    # The workers were started before this test: give them the stand-in's endpoint.
    # (A lambda travels by value and runs against the worker's own os.environ.)
    endpoint = hub.endpoint
    client.wait_for_workers(2, timeout=60)  # every worker there to be told
    client.run(lambda: os.environ.__setitem__("HF_ENDPOINT", endpoint))
    try:
        bag = scan_bag(expected, partition_size=10, concurrency=4, options=NO_CONFIGS)
        assert bag.npartitions == 5
        results = client.compute(bag, sync=True)
    finally:
        client.run(lambda: os.environ.pop("HF_ENDPOINT", None))
    by_location = {r.location: r for r in results}
    assert set(by_location) == set(expected)
    missing = by_location.pop("hf://fleet/missing")
    assert missing.error_type == "NotFoundError", missing.error
    for location, result in by_location.items():
        assert result.summary is not None, result.error  # every 429 was handled
        assert result.summary.by_dtype == expected[location]
    assert sum(r.waited_seconds for r in by_location.values()) > 0  # the limiters held back
    assert not [e for e in hub.log.entries if e.status == 429 and e.path.endswith("missing")]


def test_worker_clients_follow_every_option_a_client_is_made_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from remotetensors.integrations import dask as integration
    from remotetensors.sources.http.client import HttpClient
    from remotetensors.sources.recipe import SourceRecipe

    monkeypatch.setattr(integration, "_clients", {})  # this process's cache, left as it was

    def recipe(options: rt.HttpOptions | None) -> SourceRecipe:
        return SourceRecipe("http", "http://h/f", "http://h/f", 8, None, http_options=options)

    direct = integration._client_for(recipe(None))
    pooled = integration._client_for(recipe(rt.HttpOptions(direct_reads=False)))
    assert isinstance(direct, HttpClient)
    assert isinstance(pooled, HttpClient)
    assert direct.goes_direct
    assert not pooled.goes_direct
    assert integration._client_for(recipe(rt.HttpOptions(direct_reads=False))) is pooled
    assert integration._client_for(recipe(rt.HttpOptions(max_attempts=2))) is direct
