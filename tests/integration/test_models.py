"""open_model on local folders, HTTP, the hub stand-in and S3 (moto): rounds, bytes, routing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import remotetensors as rt
from remotetensors.models.discovery import header_window_for
from tests.hub_standin import TOKEN, HubStandIn
from tests.reference import write_reference
from tests.servers import FaultyServer


def sharded(shards: int = 3, layers_per_shard: int = 2) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Files of a sharded model (shards + index) and all its tensors."""
    rng = np.random.default_rng(11)
    files: dict[str, bytes] = {}
    tensors: dict[str, Any] = {}
    weight_map: dict[str, str] = {}
    layer = 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        shard: dict[str, Any] = {}
        for _ in range(layers_per_shard):
            shard[f"model.layers.{layer}.mlp.weight"] = rng.standard_normal((64, 32)).astype(
                ml_dtypes.bfloat16
            )
            shard[f"model.layers.{layer}.norm.weight"] = rng.standard_normal(32).astype(np.float32)
            layer += 1
        if s == 0:
            shard["model.embed_tokens.weight"] = rng.standard_normal((100, 32)).astype(np.float16)
        files[name] = write_reference(shard, metadata={"format": "pt"})
        tensors.update(shard)
        weight_map.update(dict.fromkeys(shard, name))
    total = sum(t.nbytes for t in tensors.values())
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}
    ).encode()
    return files, tensors


def expected_counts(tensors: dict[str, Any]) -> dict[str, int]:
    names = {"bfloat16": "BF16", "float32": "F32", "float16": "F16"}
    counts: dict[str, int] = {}
    for array in tensors.values():
        key = names[str(array.dtype)]
        counts[key] = counts.get(key, 0) + int(array.size)
    return dict(sorted(counts.items()))


def check_model(model: rt.Model, tensors: dict[str, Any]) -> None:
    assert model.keys() == sorted(tensors)
    assert model.parameter_count() == expected_counts(tensors)
    assert model.num_parameters == sum(t.size for t in tensors.values())
    assert model.nbytes == sum(t.nbytes for t in tensors.values())
    got = model.get_tensors("model.layers.1.*")
    assert sorted(got) == ["model.layers.1.mlp.weight", "model.layers.1.norm.weight"]
    for name, array in got.items():
        assert array.tobytes() == tensors[name].tobytes()
    rows = model.get_slice("model.embed_tokens.weight")[10:20]
    assert rows.tobytes() == tensors["model.embed_tokens.weight"][10:20].tobytes()


# --- local ------------------------------------------------------------------------------------


def test_local_folder_with_shards_file_and_file_url(tmp_path: Path) -> None:
    files, tensors = sharded()
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with rt.open_model(tmp_path) as model:
        check_model(model, tensors)
        assert len(model.files) == 3
        assert model.metadata == {"total_size": model.nbytes}
    with rt.open_model(tmp_path / "model.safetensors.index.json") as model:
        assert model.num_parameters == sum(t.size for t in tensors.values())
    shard = tmp_path / "model-00001-of-00003.safetensors"
    with rt.open_model(shard.as_uri()) as model:
        assert model.files == [shard.name]
        assert model.tensors["model.embed_tokens.weight"].file == shard.name
    with rt.safe_open(shard.as_uri()) as f:
        assert "model.embed_tokens.weight" in f.keys()  # noqa: SIM118 (safe_open is no dict)


def test_local_single_file_folder_and_missing_folder(tmp_path: Path) -> None:
    tensors = {"w": np.ones((4, 4), np.float32)}
    (tmp_path / "model.safetensors").write_bytes(write_reference(tensors))
    with rt.open_model(str(tmp_path)) as model:
        assert model.files == ["model.safetensors"]
        assert model.parameter_count() == {"F32": 16}
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(rt.NotFoundError, match="neither"):
        rt.open_model(empty)


def test_weight_map_naming_a_missing_tensor_is_a_clear_error(tmp_path: Path) -> None:
    files, _ = sharded(shards=2)
    index = json.loads(files["model.safetensors.index.json"])
    index["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors"
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(rt.HeaderError, match=r"ghost\.weight") as caught:
        rt.open_model(tmp_path)
    assert "model.safetensors.index.json" in str(caught.value)
    # An index of another name (diffusers') is the one named.
    diffusers = tmp_path / "diffusion_pytorch_model.safetensors.index.json"
    (tmp_path / "model.safetensors.index.json").rename(diffusers)
    with pytest.raises(rt.HeaderError, match=r"ghost\.weight") as caught:
        rt.open_model(diffusers)
    assert diffusers.name in str(caught.value)
    assert "/model.safetensors.index.json" not in str(caught.value)


def test_tensors_absent_from_the_weight_map_are_reported(tmp_path: Path) -> None:
    files, tensors = sharded(shards=2)
    index = json.loads(files["model.safetensors.index.json"])
    del index["weight_map"]["model.layers.0.norm.weight"]
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with rt.open_model(tmp_path) as model:
        assert model.index.unmapped == ("model.layers.0.norm.weight",)
        assert "model.layers.0.norm.weight" not in model.tensors
        assert len(model.tensors) == len(tensors) - 1


# --- HTTP: rounds, bytes, routing ---------------------------------------------------------


def serve(server: FaultyServer, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        server.put(f"repo/{name}", data)
    return f"{server.url}/f/repo/"


def test_single_file_model_costs_one_round(faulty: FaultyServer) -> None:
    tensors = {"w": np.ones((8, 8), np.float32)}
    base = serve(faulty, {"model.safetensors": write_reference(tensors)})
    with rt.open_model(base) as model:
        assert model.parameter_count() == {"F32": 64}
        assert model.get_tensor("w").tobytes() == tensors["w"].tobytes()
    # One round: the file, the index and the configs asked for at once; the small file needs
    # nothing more (tests/integration/test_quantized_models.py proves they are concurrent).
    assert sorted(e.path for e in faulty.log.entries) == [
        "/f/repo/config.json",
        "/f/repo/model.safetensors",
        "/f/repo/model.safetensors.index.json",
        "/f/repo/quantization_config.json",
    ]


def test_sharded_model_costs_two_rounds_within_the_byte_budget(faulty: FaultyServer) -> None:
    files, tensors = sharded(shards=4, layers_per_shard=3)
    base = serve(faulty, files)
    with rt.open_model(base) as model:
        paths = [e.path for e in faulty.log.entries]
        # Round 1: single file (404), index and the two configs (404); round 2: one request per
        # shard, nothing more.
        assert len(paths) == 4 + 4
        configs = ["model.safetensors", "config.json", "quantization_config.json"]
        assert sorted(set(paths)) == sorted(f"/f/repo/{n}" for n in [*files, *configs])
        shard_bytes = sum(
            e.sent_bytes
            for e in faulty.log.entries
            if e.path.endswith("safetensors") and e.status == 206
        )
        headers = model.index.header_bytes
        assert shard_bytes <= 2 * headers, (shard_bytes, headers)
        for name, info in model.index.files.items():
            window = header_window_for(n for n, f in model.tensors.items() if f.file == name)
            assert window >= info.data_offset  # every shard header fit its first window
        check_model(model, tensors)


def test_get_tensors_touches_only_the_shards_involved(faulty: FaultyServer) -> None:
    files, tensors = sharded(shards=4, layers_per_shard=2)
    base = serve(faulty, files)
    options = rt.ReadOptions(header_window_bytes=64)  # shard windows come from the index anyway
    with rt.open_model(base, options=options) as model:
        faulty.log.clear()
        names = ["model.layers.2.mlp.weight", "model.layers.5.mlp.weight"]
        got = model.get_tensors(names)
        for name in names:
            assert got[name].tobytes() == tensors[name].tobytes()
        touched = {e.path.rsplit("/", 1)[1] for e in faulty.log.entries}
        assert touched <= {model.tensors[n].file for n in names}


def test_unknown_names_and_empty_globs(faulty: FaultyServer) -> None:
    files, _ = sharded(shards=2)
    with rt.open_model(serve(faulty, files)) as model:
        with pytest.raises(KeyError, match="Model does not contain tensor nope"):
            model.get_tensor("nope")
        with pytest.raises(rt.TensorNotFoundError, match="no name matches"):
            model.get_tensors("decoder.*")


async def test_async_model(faulty: FaultyServer) -> None:
    files, tensors = sharded(shards=2)
    async with rt.open_model_async(serve(faulty, files)) as model:
        arrays = await model.get_tensors(
            ["model.layers.0.mlp.weight", "model.layers.3.norm.weight"]
        )
        for name, array in arrays.items():
            assert array.tobytes() == tensors[name].tobytes()
        rows = await model.get_slice("model.embed_tokens.weight")[0:5]
        assert rows.shape == (5, 32)


# --- the hub stand-in --------------------------------------------------------------------------


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", _no_stored_token)
    return hub


def _no_stored_token(token: str | bool | None) -> str | None:
    import os

    if token is False:
        return None
    if isinstance(token, str):
        return token
    return os.environ.get("HF_TOKEN")


def test_hub_sharded_model_pins_the_commit(hub_env: HubStandIn) -> None:
    files, tensors = sharded(shards=3)
    commit = hub_env.add("org/sharded", files)
    with rt.open_model("hf://org/sharded") as model:
        check_model(model, tensors)
        shard_requests = [
            e.path for e in hub_env.log.entries if "/resolve/" in e.path and "model-" in e.path
        ]
        assert shard_requests
        assert all(f"/resolve/{commit}/" in p for p in shard_requests)
        # A push to main after opening does not mix versions: reads stay on the pinned commit.
        changed = {
            n: (d[:-8] + b"\x00" * 8 if n.endswith(".safetensors") else d) for n, d in files.items()
        }
        hub_env.push("org/sharded", changed)
        name = "model.layers.5.norm.weight"
        assert model.get_tensor(name).tobytes() == tensors[name].tobytes()


def test_hub_single_file_large_goes_through_the_cdn_once(hub_env: HubStandIn) -> None:
    tensors = {"w": np.arange(50_000, dtype=np.float32).reshape(500, 100)}
    hub_env.add("org/single", {"model.safetensors": write_reference(tensors)})
    options = rt.ReadOptions(header_window_bytes=1024)
    with rt.open_model("hf://org/single", options=options) as model:
        assert model.get_tensor("w").tobytes() == tensors["w"].tobytes()
        assert model.get_slice("w")[7:9].tobytes() == tensors["w"][7:9].tobytes()
    resolves = [
        e
        for e in hub_env.log.entries
        if "/resolve/" in e.path and e.path.endswith("model.safetensors")
    ]
    assert [e.status for e in resolves] == [302]  # one redirect hop for the file
    with rt.safe_open("hf://org/single/model.safetensors") as f:
        assert f.get_tensor("w").tobytes() == tensors["w"].tobytes()


def test_hub_gated_repo_needs_a_token(hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    files, _ = sharded(shards=1)
    hub_env.add("org/gated", files, gated=True)
    with pytest.raises(rt.PermissionDeniedError, match="token"):
        rt.open_model("hf://org/gated")
    with rt.open_model("hf://org/gated", token=TOKEN) as model:
        assert model.num_parameters > 0
        model.get_tensor(model.keys()[0])  # tensor bytes: from the CDN
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with rt.open_model("hf://org/gated") as model:
        assert model.num_parameters > 0
    with pytest.raises(rt.PermissionDeniedError):
        rt.open_model("hf://org/gated", token=False)
    # The token never goes to the CDN.
    assert hub_env.cdn_entries()
    assert all("Authorization" not in e.headers for e in hub_env.cdn_entries())


def test_hub_missing_repo_file_and_revision(hub_env: HubStandIn) -> None:
    hub_env.add("org/there", {"model.safetensors": write_reference({"a": np.ones(2, np.int8)})})
    with pytest.raises(rt.NotFoundError, match="RepoNotFound"):
        rt.safe_open("hf://org/absent/model.safetensors")
    with pytest.raises(rt.NotFoundError, match="EntryNotFound"):
        rt.safe_open("hf://org/there/other.safetensors")
    with pytest.raises(rt.NotFoundError, match="RevisionNotFound"):
        rt.safe_open("hf://org/there@nope/model.safetensors")
    with rt.open_model("hf://org/there", revision="main") as model:
        assert model.parameter_count() == {"I8": 2}


def test_parameter_counts_equal_huggingface_hub(
    hub_env: HubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import HfApi, constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    files, _ = sharded(shards=3)
    hub_env.add("org/sharded", files)
    single = {"model.safetensors": write_reference({"x": np.ones((3, 7), np.float16)})}
    hub_env.add("org/single", single)
    api = HfApi(endpoint=hub_env.endpoint, token=False)
    for repo in ("org/sharded", "org/single"):
        theirs = api.get_safetensors_metadata(repo).parameter_count
        with rt.open_model(f"hf://{repo}") as model:
            assert model.parameter_count() == dict(sorted(theirs.items()))


# --- S3 through moto's server ------------------------------------------------------------------


def put_s3(endpoint: str, bucket: str, files: dict[str, bytes]) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(
        endpoint_url=endpoint, key="testing", secret="testing", skip_instance_cache=True
    )
    try:
        if not fs.exists(bucket):
            fs.mkdir(bucket)
        for name, data in files.items():
            fs.pipe(f"{bucket}/{name}", data)
    finally:
        close_s3(fs)


def close_s3(fs: Any) -> None:
    """Close the session of an unshared sync ``s3fs`` filesystem now, on fsspec's loop: left to
    s3fs's finalizer, the close gets 0.1 s (or a task on whichever loop runs then) and its
    sockets may be collected unclosed, a ResourceWarning in a later test."""
    from fsspec.asyn import sync

    session, fs._s3 = fs._s3, None
    if session is not None:
        sync(fs.loop, session.__aexit__, None, None, None)


def test_s3_file_through_storage_options(moto_endpoint: str) -> None:
    tensors = {"w": np.arange(12, dtype=np.int32).reshape(3, 4)}
    put_s3(moto_endpoint, "opts-bucket", {"m.safetensors": write_reference(tensors)})
    options = {
        "endpoint_url": moto_endpoint,
        "key": "testing",
        "secret": "testing",
        "skip_instance_cache": True,
    }
    with rt.safe_open("s3://opts-bucket/m.safetensors", storage_options=options) as f:
        assert f.get_tensor("w").tobytes() == tensors["w"].tobytes()
        assert f.get_slice("w")[1:2].tobytes() == tensors["w"][1:2].tobytes()


def test_s3_sharded_prefix_through_aws_variables(s3_env: str) -> None:
    files, tensors = sharded(shards=3)
    put_s3(s3_env, "env-bucket", {f"llama/{n}": d for n, d in files.items()})
    with rt.open_model(
        "s3://env-bucket/llama/", storage_options={"skip_instance_cache": True}
    ) as model:
        check_model(model, tensors)


def test_s3_changed_object_is_detected(s3_env: str) -> None:
    tensors = {"w": np.zeros((256, 64), np.float32)}
    data = write_reference(tensors)
    put_s3(s3_env, "change-bucket", {"m.safetensors": data})
    options = rt.ReadOptions(header_window_bytes=256)
    with rt.safe_open(
        "s3://change-bucket/m.safetensors",
        options=options,
        storage_options={"skip_instance_cache": True},
    ) as f:
        put_s3(s3_env, "change-bucket", {"m.safetensors": data[:-4] + b"\x01\x00\x00\x00"})
        with pytest.raises(rt.RemoteFileChangedError, match="changed"):
            f.get_tensor("w")


def test_s3_missing_object(s3_env: str) -> None:
    put_s3(s3_env, "empty-bucket", {})
    with pytest.raises(rt.NotFoundError):
        rt.safe_open(
            "s3://empty-bucket/none.safetensors", storage_options={"skip_instance_cache": True}
        )
    with pytest.raises(rt.NotFoundError, match="neither"):
        rt.open_model("s3://empty-bucket/nothing/", storage_options={"skip_instance_cache": True})


def test_chained_fsspec_url(moto_endpoint: str, tmp_path: Path) -> None:
    tensors = {"w": np.arange(6, dtype=np.int16)}
    put_s3(moto_endpoint, "chain-bucket", {"m.safetensors": write_reference(tensors)})
    options = {
        "s3": {"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing"},
        "simplecache": {"cache_storage": str(tmp_path / "cache")},
    }
    with rt.safe_open("simplecache::s3://chain-bucket/m.safetensors", storage_options=options) as f:
        assert f.get_tensor("w").tobytes() == tensors["w"].tobytes()


def test_hub_locations_parse() -> None:
    from remotetensors.sources.hub.repo import HubPath

    path = HubPath.parse("hf://datasets/org/data@refs%2Fpr%2F1/sub/x.safetensors")
    assert (path.repo_type, path.repo_id, path.revision, path.path) == (
        "datasets",
        "org/data",
        "refs/pr/1",
        "sub/x.safetensors",
    )
    assert str(path) == "hf://datasets/org/data@refs%2Fpr%2F1/sub/x.safetensors"
    assert HubPath.parse("hf://org/model").path == ""
    # One-word legacy repos (gpt2), alone or with a file; the scheme in any case.
    assert HubPath.parse("hf://lonely").repo_id == "lonely"
    legacy = HubPath.parse("hf://gpt2@v1/model.safetensors")
    assert (legacy.repo_id, legacy.revision, legacy.path) == ("gpt2", "v1", "model.safetensors")
    assert HubPath.parse("HF://Org/Model").repo_id == "Org/Model"
    with pytest.raises(ValueError, match="expected"):
        HubPath.parse("hf://")
    with pytest.raises(ValueError, match="nothing after '@'"):
        HubPath.parse("hf://org/model@")
