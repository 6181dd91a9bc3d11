"""Many models at once, on the hub stand-in: the one-call metadata endpoint (request counts with
and without it), lazy shard offsets, count parity with huggingface_hub, rate limits, and scans
(results, errors, flat memory, pickling)."""

from __future__ import annotations

import asyncio
import json
import pickle
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.models.scan import POOL_CONNECTIONS
from tests.hub_standin import TOKEN, HubStandIn
from tests.integration.test_models import _no_stored_token, expected_counts, sharded
from tests.reference import write_reference


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", _no_stored_token)
    return hub


NO_CONFIGS = rt.ReadOptions(read_configs=False, progress=False)
NO_CACHE = rt.ReadOptions(read_configs=False, progress=False, cache=False)


def kinds(hub: HubStandIn) -> list[str]:
    """Each request to the hub (not the CDN) as a short kind: api, index, single, shard:N, …"""
    out = []
    cdn = {id(e) for e in hub.cdn_entries()}
    for entry in hub.log.entries:
        path = entry.path
        if id(entry) in cdn:
            continue
        if "/safetensors-metadata/" in path:
            out.append("api")
        elif path.endswith(".index.json"):
            out.append("index")
        elif path.endswith("/model.safetensors"):
            out.append("single")
        elif "model-0" in path:
            out.append("shard:" + path.rsplit("/", 1)[1])
        else:
            out.append(path.rsplit("/", 1)[1])
    return out


# --- the one-call endpoint ------------------------------------------------------------------


def test_header_phase_is_one_request_when_the_endpoint_exists(hub_env: HubStandIn) -> None:
    files, tensors = sharded(shards=4, layers_per_shard=2)
    hub_env.add("org/a", files)
    hub_env.add("org/b", files)
    # First model of an endpoint: the index is read in the same round (support not known yet).
    with rt.open_model("hf://org/a", options=NO_CONFIGS) as model:
        assert model.parameter_count() == expected_counts(tensors)
    assert sorted(kinds(hub_env)) == ["api", "index", "single"]
    hub_env.log.clear()
    # Known now: the endpoint is the header phase, in one round; no shard reads. The index is
    # read in that round too, so that the answer (which names no commit) is tied to the
    # commit the index was read at and kept in the cache (without the cache: the endpoint
    # alone, see below).
    with rt.open_model("hf://org/b", options=NO_CONFIGS) as model:
        assert sorted(kinds(hub_env)) == ["api", "index", "single"]
        assert model.parameter_count() == expected_counts(tensors)
        assert model.num_parameters == sum(t.size for t in tensors.values())
        assert model.nbytes == sum(t.nbytes for t in tensors.values())
        assert model.keys() == sorted(tensors)
        hub_env.log.clear()
        # The first data read of a shard fetches its 8-byte length before any tensor byte.
        name = "model.layers.3.mlp.weight"
        assert model.get_tensor(name).tobytes() == tensors[name].tobytes()
        shard = model.tensors[name].file
        reads = [e.range for e in hub_env.log.entries if e.path.endswith(str(shard))]
        assert reads[0] == "bytes=0-7"
        assert len(reads) == 2
        assert model.index.files[str(shard)].data_offset == 8 + int.from_bytes(
            files[str(shard)][:8], "little"
        )
        rows = model.get_slice("model.embed_tokens.weight")[3:9]
        assert rows.tobytes() == tensors["model.embed_tokens.weight"][3:9].tobytes()
        both = model.get_tensors("model.layers.*.norm.weight")
        for key, array in both.items():
            assert array.tobytes() == tensors[key].tobytes()
    # Every shard read is pinned to the commit the round's resolve answers named.
    commit = hub_env.repos["org/b"].branches["main"]
    assert all(f"/resolve/{commit}/" in e.path for e in hub_env.log.entries if "model-0" in e.path)
    hub_env.add("org/c", files)
    hub_env.log.clear()
    with rt.open_model("hf://org/c", options=NO_CACHE) as model:
        assert model.parameter_count() == expected_counts(tensors)
    assert sorted(kinds(hub_env)) == ["api", "single"]  # one request, the endpoint alone


def test_header_phase_in_two_rounds_without_the_endpoint(hub_env: HubStandIn) -> None:
    hub_env.metadata_api = False
    files, tensors = sharded(shards=3)
    for repo in ("org/a", "org/b"):
        hub_env.add(repo, files)
    with rt.open_model("hf://org/a", options=NO_CONFIGS) as model:
        assert model.parameter_count() == expected_counts(tensors)
    # Round 1: single file, index, endpoint (unknown route); round 2: the shards.
    shards = sorted(f"shard:{n}" for n in files if n.startswith("model-"))
    assert sorted(kinds(hub_env)) == sorted(["api", "index", "single", *shards])
    hub_env.log.clear()
    with rt.open_model("hf://org/b", options=NO_CONFIGS) as model:
        assert model.parameter_count() == expected_counts(tensors)
    # Learnt: the endpoint is not asked again.
    assert sorted(kinds(hub_env)) == sorted(["index", "single", *shards])


@pytest.mark.parametrize("hub_shape", ["2025"], indirect=True)
def test_endpoint_skipped_for_other_revisions_and_used_for_mains_commit(
    hub_env: HubStandIn,
) -> None:
    # The 2025 shape: the endpoint's answers named their commit, and a commit named as the
    # revision used them when it was main's.
    files, tensors = sharded(shards=2)
    old = hub_env.add("org/a", files)
    changed = dict(files)
    changed["model.safetensors.index.json"] = files["model.safetensors.index.json"] + b" "
    new = hub_env.push("org/a", changed)
    with rt.open_model("hf://org/a", options=NO_CONFIGS) as model:  # learn support
        assert model.num_parameters == sum(t.size for t in tensors.values())
    hub_env.log.clear()
    with rt.open_model(f"hf://org/a@{old}", options=NO_CONFIGS) as model:
        assert model.parameter_count() == expected_counts(tensors)
    # An older commit: the endpoint (main only) answers for another commit: range reads.
    assert "index" in kinds(hub_env)
    hub_env.log.clear()
    # Main's commit was read above: without the persistent cache, to see what the network does.
    with rt.open_model(f"hf://org/a@{new}", options=NO_CACHE) as model:
        assert model.parameter_count() == expected_counts(tensors)
    assert sorted(kinds(hub_env)) == ["api", "single"]
    hub_env.log.clear()
    with pytest.raises(rt.NotFoundError, match=r"RevisionNotFound|neither"):
        rt.open_model("hf://org/a@some-branch", options=NO_CONFIGS)
    assert "api" not in kinds(hub_env)


def test_endpoint_not_asked_for_a_commit_once_its_answers_name_none(hub_env: HubStandIn) -> None:
    # Today's hub: the endpoint's answer is main's and names no commit, so it cannot describe
    # a commit named as the revision; learnt from its first answer, it is not asked for one.
    files, tensors = sharded(shards=2)
    commit = hub_env.add("org/a", files)
    with rt.open_model("hf://org/a", options=NO_CACHE) as model:  # learn support
        assert model.parameter_count() == expected_counts(tensors)
    hub_env.log.clear()
    with rt.open_model(f"hf://org/a@{commit}", options=NO_CACHE) as model:
        assert model.parameter_count() == expected_counts(tensors)
    assert "api" not in kinds(hub_env)
    assert "index" in kinds(hub_env)


def test_hub_metadata_is_validated_like_a_file_header() -> None:
    from remotetensors.formats.hub_metadata import parse_sharded_metadata, serialise_header
    from remotetensors.formats.safetensors import parse_file, rebase

    data = write_reference({"a": np.ones((2, 3), np.float32), "b": np.zeros(4, np.int8)})
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    body = json.dumps({"index": {"metadata": {"total_size": 28}}, "headers": {"s": header}})
    provisional = parse_sharded_metadata(body.encode()).headers["s"]
    real = rebase(provisional, header_length=n, file_size=len(data))
    assert real == parse_file(data)
    assert len(serialise_header(header)) % 8 == 0
    # The same rules as a file's header: a hole between tensors, an unknown dtype, bad sizes.
    bad_cases = [
        ("data_offsets", [4, 28], rt.HeaderErrorKind.INVALID_OFFSET),
        ("dtype", "F33", rt.HeaderErrorKind.INVALID_JSON),
        ("shape", [2, 4], rt.HeaderErrorKind.INVALID_TENSOR_INFO),
    ]
    for key, value, kind in bad_cases:
        broken = json.loads(json.dumps(header))
        broken["a"][key] = value
        payload = json.dumps({"index": {}, "headers": {"s": broken}}).encode()
        with pytest.raises(rt.HeaderError) as caught:
            parse_sharded_metadata(payload, location="hf://org/x")
        assert caught.value.kind == kind
    # The length prefix and the size the file really has must agree with the header.
    with pytest.raises(rt.HeaderError) as caught:
        rebase(provisional, header_length=n, file_size=len(data) + 8)
    assert caught.value.kind == rt.HeaderErrorKind.INCOMPLETE_BUFFER


# --- count parity with huggingface_hub ------------------------------------------------------------


def test_counts_equal_huggingface_hub_with_unmapped_tensors_and_both_layouts(
    hub_env: HubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import HfApi, constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    files, _ = sharded(shards=3)
    index = json.loads(files["model.safetensors.index.json"])
    del index["weight_map"]["model.layers.0.norm.weight"]  # still in its shard
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    hub_env.add("org/unmapped", files)
    hub_env.add("org/unmapped2", files)
    both = dict(files)
    both["model.safetensors"] = write_reference({"x": np.ones((3, 7), np.float16)})
    hub_env.add("org/both", both)
    api = HfApi(endpoint=hub_env.endpoint, token=False)
    # unmapped: range reads (first model), then the one-call endpoint (second one).
    for repo in ("org/unmapped", "org/unmapped2", "org/both"):
        theirs = dict(sorted(api.get_safetensors_metadata(repo).parameter_count.items()))
        # Without the cache, the second model takes the endpoint's answer alone (with it, the
        # index is read in the same round to tie the answer to a commit).
        options = NO_CACHE if repo == "org/unmapped2" else NO_CONFIGS
        with rt.open_model(f"hf://{repo}", options=options) as model:
            assert model.parameter_count() == theirs, repo
            if repo == "org/unmapped":  # the index was read (in the endpoint's round)
                assert model.index.unmapped == ("model.layers.0.norm.weight",)
                assert "model.layers.0.norm.weight" not in model.tensors
            elif repo == "org/unmapped2":  # the endpoint alone: no weight map, headers route
                assert model.index.unmapped == ()
                assert model.tensors["model.layers.0.norm.weight"].file is not None
            else:
                assert model.files == ["model.safetensors"]
    # A local folder holding both uses the single file too.
    for name, data in both.items():
        (tmp_path / name).write_bytes(data)
    with rt.open_model(tmp_path) as model:
        assert model.files == ["model.safetensors"]


# --- scans --------------------------------------------------------------------------------------


def _fleet(hub: HubStandIn, count: int) -> dict[str, dict[str, int]]:
    """``count`` distinct small repos (single files and sharded ones): location -> counts."""
    expected = {}
    files, tensors = sharded(shards=2, layers_per_shard=1)
    for i in range(count):
        repo = f"fleet/m{i}"
        if i % 3 == 0:
            hub.add(repo, files)
            expected[f"hf://{repo}"] = expected_counts(tensors)
        else:
            hub.add(repo, {"model.safetensors": write_reference({"w": np.ones(i + 1, np.int8)})})
            expected[f"hf://{repo}"] = {"I8": i + 1}
    return expected


def test_scan_results_errors_and_pickling(hub_env: HubStandIn) -> None:
    expected = _fleet(hub_env, 6)
    files, _ = sharded(shards=1)
    hub_env.add("org/gated", files, gated=True)
    hub_env.add("org/empty", {"README.md": b"nothing here"})
    broken = dict(files)
    broken["model.safetensors.index.json"] = b"{not json"
    hub_env.add("org/malformed", broken)
    bad = ["hf://org/absent", "hf://org/gated", "hf://org/empty", "hf://org/malformed", "hf://x"]
    results = list(rt.scan([*expected, *bad], concurrency=3, options=NO_CONFIGS))
    assert sorted(r.location for r in results) == sorted([*expected, *bad])
    by_location = {r.location: r for r in results}
    for location, counts in expected.items():
        summary = by_location[location].summary
        assert summary is not None, by_location[location].error
        assert summary.by_dtype == counts
        assert summary.parameters == summary.stored_parameters == sum(counts.values())
    errors = {r.location: r.error_type for r in results if not r.ok}
    assert errors == {
        "hf://org/absent": "NotFoundError",
        "hf://org/gated": "PermissionDeniedError",
        "hf://org/empty": "NotFoundError",
        "hf://org/malformed": "HeaderError",
        "hf://x": "NotFoundError",  # no org/name: named as such
    }
    assert all(r.error and r.summary is None for r in results if not r.ok)
    for result in results:
        assert pickle.loads(pickle.dumps(result)) == result
        assert json.loads(json.dumps(result.as_dict()))["location"] == result.location
    with rt.open_model("hf://org/gated", token=TOKEN, options=NO_CONFIGS) as model:
        assert model.num_parameters > 0


def test_a_scan_leaves_no_cycles_for_the_collector(hub_env: HubStandIn) -> None:
    # Every request, answered or refused (the configs' 404s), and every lazily opened shard
    # must be freed when its last reference goes: cycles kept each request's task, buffer and
    # source alive until the cyclic collector ran, and its passes were a tenth of a scan's CPU.
    import gc

    expected = _fleet(hub_env, 6)
    list(rt.scan(expected))  # the first scan: imports, connections, the cache's first entries
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        results = list(rt.scan(expected, options=rt.ReadOptions(cache=False, progress=False)))
        gc.collect()
        ours = sorted(
            {
                type(o).__module__ + "." + type(o).__qualname__
                for o in gc.garbage
                if type(o).__module__.startswith("remotetensors")
                or type(o).__qualname__ in ("Task", "frame", "traceback")
            }
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
    assert all(r.ok for r in results), [r.error for r in results]
    assert ours == []


async def test_scan_async_yields_as_completed(hub_env: HubStandIn) -> None:
    expected = _fleet(hub_env, 5)

    async def locations() -> AsyncIterator[str]:
        for location in expected:
            yield location

    seen = {}
    async for result in rt.scan_async(locations(), concurrency=2, options=NO_CONFIGS):
        assert result.summary is not None
        seen[result.location] = result.summary.by_dtype
    assert seen == expected


def local_models(folder: Path, count: int) -> list[str]:
    """``count`` one-file models in ``folder`` (a tensor of i + 1 int8 elements each)."""
    locations = []
    for i in range(count):
        path = folder / f"m{i}.safetensors"
        path.write_bytes(write_reference({"w": np.ones(i + 1, np.int8)}))
        locations.append(str(path))
    return locations


async def test_scan_takes_locations_only_as_workers_free_up(tmp_path: Path) -> None:
    # Each worker holds one location, and at most one finished result waits in the queue per
    # worker, plus one held by a worker waiting to hand it over: never the whole iterable.
    locations = local_models(tmp_path, 60)
    taken = 0

    async def lazily() -> AsyncIterator[str]:
        nonlocal taken
        for location in locations:
            taken += 1
            yield location

    seen = 0
    ahead = []
    async for result in rt.scan_async(lazily(), concurrency=3, options=NO_CONFIGS):
        assert result.summary is not None, result.error
        seen += 1
        ahead.append(taken - seen)
        await asyncio.sleep(0.002)  # a slow consumer: the workers must wait for it
    assert seen == 60
    assert max(ahead) <= 3 * 3


async def test_an_error_of_the_locations_iterable_ends_the_scan(tmp_path: Path) -> None:
    locations = local_models(tmp_path, 3)

    async def failing() -> AsyncIterator[str]:
        for location in locations:
            yield location
        raise OSError("the list of models could not be read")

    seen: list[str] = []

    async def consume() -> None:
        async for result in rt.scan_async(failing(), concurrency=2, options=NO_CONFIGS):
            seen.append(result.location)

    with pytest.raises(OSError, match="could not be read"):
        await consume()
    assert set(seen) <= set(locations)


def test_leaving_a_scan_early_closes_it(tmp_path: Path) -> None:
    locations = local_models(tmp_path, 20)
    for result in rt.scan(locations, concurrency=4, options=NO_CONFIGS):
        assert result.ok
        break
    # The bridge and its loop are free again: a whole scan runs after the abandoned one.
    assert sum(r.ok for r in rt.scan(locations, concurrency=4, options=NO_CONFIGS)) == 20


def test_scan_spreads_its_connections_over_small_pools(
    hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # httpcore 1.0's pool does work quadratic in its connections per request (see
    # POOL_CONNECTIONS): 64 models at once get 128 connections in pools of at most 16.
    made: list[int] = []
    new_client = rt.HttpOptions.new_client

    def recording(self: rt.HttpOptions) -> Any:
        made.append(self.max_connections)
        return new_client(self)

    monkeypatch.setattr(rt.HttpOptions, "new_client", recording)
    expected = _fleet(hub_env, 20)
    results = list(rt.scan(expected, concurrency=64, options=NO_CONFIGS))
    assert {r.location: r.summary.by_dtype for r in results if r.summary} == expected
    assert made == [POOL_CONNECTIONS] * (128 // POOL_CONNECTIONS)


def test_scan_of_1000_locations_in_flat_memory(tmp_path: Path) -> None:
    # Local folders: the machine's CPU, not the network, bounds a 1,000-model scan here; the hub
    # path (same scan code) is covered by the other scan tests.
    expected = {}
    for i in range(1000):
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(
            write_reference({"w": np.ones(i + 1, np.int8), "b": np.ones(2, np.float16)})
        )
        expected[str(folder)] = {"F16": 2, "I8": i + 1}
    locations = list(expected)
    small, small_right = _peak_scan_bytes(locations[:100], expected)
    large, large_right = _peak_scan_bytes(locations, expected)
    assert (small_right, large_right) == (100, 1000)  # every result correct
    # Memory does not grow with the number of locations (bounded in flight, nothing kept).
    assert large < 1.5 * small + 256 * 1024, (small, large)


def _peak_scan_bytes(locations: list[str], expected: dict[str, dict[str, int]]) -> tuple[int, int]:
    """Peak traced bytes of a scan, and how many results were right. Results are checked as
    they come and not kept, so that the test's own bookkeeping does not grow with the count."""
    right = 0
    tracemalloc.start()
    try:
        for result in rt.scan(iter(locations), concurrency=16, options=NO_CONFIGS):
            assert result.summary is not None, result.error
            right += result.summary.by_dtype == expected[result.location]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, right


def test_scan_under_rate_limits_slows_down_and_leaves_no_429_unhandled(
    hub_env: HubStandIn,
) -> None:
    expected = _fleet(hub_env, 60)
    # 8 requests per 0.5 s window, announced in RateLimit headers; 429 + Retry-After beyond.
    hub_env.rate_limit = (8, 0.5)
    results = {}
    waited = 0.0
    for result in rt.scan(expected, concurrency=16, options=NO_CONFIGS):
        assert result.summary is not None, result.error  # every 429 was handled
        results[result.location] = result.summary.by_dtype
        waited += result.waited_seconds
    assert results == expected
    assert waited > 0  # the limiter held requests back


# --- the command line -----------------------------------------------------------------------------


def test_cli_scan_table_json_lines_from_file_and_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from remotetensors.cli import main

    good = []
    for i in range(3):
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(write_reference({"w": np.ones(i + 2, np.int8)}))
        good.append(str(folder))
    missing = str(tmp_path / "missing")
    assert main(["params", *good, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((d["location"], d["by_dtype"]) for d in lines) == sorted(
        (g, {"I8": i + 2}) for i, g in enumerate(good)
    )
    listing = tmp_path / "list.txt"
    listing.write_text(f"# models\n{good[0]}\n\n{missing}  # gone\n{good[1]}\n")
    assert main(["params", "--from-file", str(listing), "--json"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 3
    errors = [d for d in lines if "error" in d]
    assert [d["location"] for d in errors] == [missing]
    assert errors[0]["error_type"] == "NotFoundError"
    assert main(["params", good[2], missing]) == 1  # a table, still printing the good one
    out = capsys.readouterr().out
    assert good[2] in out
    assert missing in out
    assert "NotFoundError" in out
    assert "2 location(s), 1 failed" in out
    # One location keeps the single-model output.
    assert main(["params", good[0], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["by_dtype"] == {"I8": 2}


def test_lazy_shards_serve_dask_after_their_length_is_read(hub_env: HubStandIn) -> None:
    pytest.importorskip("dask")
    files, tensors = sharded(shards=2)
    hub_env.add("org/a", files)
    hub_env.add("org/b", files)
    rt.open_model("hf://org/a", options=NO_CONFIGS).close()  # learn the endpoint
    with rt.open_model("hf://org/b", options=NO_CONFIGS) as model:
        name = "model.layers.2.mlp.weight"
        array = model.to_dask([name])[name].compute()  # type: ignore[no-untyped-call]
        assert array.tobytes() == tensors[name].tobytes()


def test_opening_many_lazy_shards_moves_only_their_own_rows(
    hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    files, tensors = sharded(shards=40, layers_per_shard=3)
    hub_env.add("org/a", files)
    hub_env.add("org/b", files)
    rt.open_model("hf://org/a", options=NO_CONFIGS).close()  # learn the endpoint
    built = []  # rows of every table made while the shards open
    original = rt.index.TensorTable.__init__

    def counting(self: Any, rows: dict[str, Any], **kwargs: Any) -> None:
        built.append(len(rows))
        original(self, rows, **kwargs)

    with rt.open_model("hf://org/b", options=NO_CONFIGS) as model:
        monkeypatch.setattr(rt.index.TensorTable, "__init__", counting)
        arrays = model.get_tensors("*")  # opens the 40 shards, one by one
        monkeypatch.undo()
        for name, array in arrays.items():
            assert array.tobytes() == tensors[name].tobytes()
        for name, info in model.tensors.items():  # the model's offsets are the files' own
            assert info.start == model.index.files[str(info.file)].tensors[name].start
    # Each shard's own table is made once (its offsets moved); the model's is never made again
    # (it was: every tensor of the model once per shard, 40 x 121 rows).
    assert sum(built) <= len(tensors)


async def test_an_async_models_unopened_shard_asks_for_open_shards_before_to_dask(
    hub_env: HubStandIn,
) -> None:
    pytest.importorskip("dask")
    files, tensors = sharded(shards=2)
    hub_env.add("org/a", files)
    hub_env.add("org/b", files)
    async with rt.open_model_async("hf://org/a", options=NO_CONFIGS):
        pass  # learn the endpoint
    async with rt.open_model_async("hf://org/b", options=NO_CONFIGS) as model:
        name = "model.layers.2.mlp.weight"
        with pytest.raises(rt.ShardNotOpenedError, match=r"open_shards") as caught:
            model.to_dask([name])
        assert not isinstance(caught.value, rt.FileClosedError)  # the file is open
        await model.open_shards([name])
        array = await asyncio.to_thread(model.to_dask([name])[name].compute)
        assert array.tobytes() == tensors[name].tobytes()
