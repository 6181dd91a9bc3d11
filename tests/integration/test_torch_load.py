"""load_into: torch modules filled from checkpoints on loopback servers (the hub stand-in, HTTP,
S3, local), against the reference path (safetensors.torch + load_state_dict). Bytes and
requests are counted on the servers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import remotetensors as rt
from tests.hub_standin import HubStandIn
from tests.servers import FaultyServer
from tests.torch_checkpoints import (
    OneLayer,
    accelerate,
    bert_checkpoint,
    bert_config,
    empty_bert,
    fixed_input,
    gpt2_checkpoint,
    gpt2_config,
    layer_nbytes,
    safetensors_torch,
    torch,
    transformers,
)

_Module: Any = torch.nn.Module  # a base class mypy accepts from an optional import


@pytest.fixture(scope="module")
def minilm() -> tuple[Any, Any, bytes]:
    """all-MiniLM-L6-v2's architecture with seeded random weights: (config, model, file)."""
    config = bert_config()
    model, data = bert_checkpoint(config)
    return config, model, data


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", "")
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", lambda token: None)
    return hub


def reference_model(config: Any, data: bytes, tmp_path: Path) -> Any:
    """The same model loaded the reference way: the local file, safetensors.torch.load_file,
    then load_state_dict (the checkpoint's position_ids is the only name it does not take)."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    torch.manual_seed(1234)  # other weights than the checkpoint's, all overwritten
    model = transformers.BertModel(config).eval()
    result = model.load_state_dict(safetensors_torch.load_file(path), strict=False)
    assert result.missing_keys == []
    assert result.unexpected_keys == ["embeddings.position_ids"]
    return model


def data_requests(hub: HubStandIn, file: str = "model.safetensors") -> list[tuple[int, int]]:
    """The ranged reads of ``file`` that reach past its first request (the header window)."""
    ranges = hub.cdn_ranges()
    assert ranges, "the CDN saw no ranged read"
    return [r for r in ranges if r[0] > 0]


# --- the goals ---------------------------------------------------------------------------------


def test_minilm_built_empty_is_filled_from_the_hub_bit_exact(
    hub_env: HubStandIn, minilm: tuple[Any, Any, bytes], tmp_path: Path
) -> None:
    config, _, data = minilm
    hub_env.add("sentence-transformers/all-MiniLM-L6-v2", {"model.safetensors": data})
    module = empty_bert(config)
    report = rt.load_into(module, "hf://sentence-transformers/all-MiniLM-L6-v2")
    assert report.missing == ()
    assert report.unexpected == ()
    assert set(report.loaded) == set(module.state_dict())
    assert report.left_on_meta == ()
    assert all(not p.is_meta for p in module.parameters())
    served = sum(e.sent_bytes for e in hub_env.log.entries)
    assert served <= len(data)
    assert report.bytes_read == served
    reference = reference_model(config, data, tmp_path)
    tokens = fixed_input(config)
    with torch.no_grad():
        ours = module(tokens).last_hidden_state
        theirs = reference(tokens).last_hidden_state
    assert torch.equal(ours, theirs)
    # The checkpoint's position_ids is the module's own non-persistent buffer: left as made.
    assert "embeddings.position_ids" not in report.loaded
    assert torch.equal(module.embeddings.position_ids, torch.arange(512).expand((1, -1)))


def test_one_layer_moves_that_layers_bytes_only(
    hub_env: HubStandIn, minilm: tuple[Any, Any, bytes]
) -> None:
    config, model, data = minilm
    hub_env.add("org/minilm", {"model.safetensors": data})
    with accelerate.init_empty_weights():
        module = OneLayer(config)
    report = rt.load_into(module, "hf://org/minilm", strict=False)
    layer = layer_nbytes(model, "encoder.layer.0.")
    served = sum(e.sent_bytes for e in hub_env.log.entries)
    assert served <= 1.1 * layer
    assert set(report.loaded) == set(module.state_dict())
    assert report.missing == ()
    assert "encoder.layer.1.output.dense.weight" in report.unexpected
    for name, tensor in module.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name


def test_a_lone_layer_with_a_prefix_is_strict_about_its_own_names(
    hub_env: HubStandIn, minilm: tuple[Any, Any, bytes]
) -> None:
    config, model, data = minilm
    hub_env.add("org/minilm", {"model.safetensors": data})
    with accelerate.init_empty_weights():
        layer = transformers.models.bert.modeling_bert.BertLayer(config)
    report = rt.load_into(layer, "hf://org/minilm", prefix="encoder.layer.3.")
    assert report.unexpected == ()
    assert report.missing == ()
    expected = {
        n.removeprefix("encoder.layer.3."): t
        for n, t in model.state_dict().items()
        if n.startswith("encoder.layer.3.")
    }
    assert layer.state_dict().keys() == expected.keys()
    for name, tensor in layer.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    served = sum(e.sent_bytes for e in hub_env.log.entries)
    assert served <= 1.1 * layer_nbytes(model, "encoder.layer.3.")


def test_another_hidden_size_raises_before_any_data_request(
    hub_env: HubStandIn, minilm: tuple[Any, Any, bytes]
) -> None:
    _, _, data = minilm
    hub_env.add("org/minilm", {"model.safetensors": data})
    module = empty_bert(bert_config(hidden_size=512, num_attention_heads=8))
    with pytest.raises(rt.CheckpointMismatchError) as caught:
        rt.load_into(module, "hf://org/minilm")
    message = str(caught.value)
    assert "embeddings.word_embeddings.weight: shape [30522, 512] in the module, [30522, 384]" in (
        message
    )
    assert caught.value.mismatched["encoder.layer.0.attention.self.query.weight"] == (
        (512, 512),
        (384, 384),
    )
    assert isinstance(caught.value, RuntimeError)
    assert data_requests(hub_env) == []  # the header window only
    assert len(hub_env.cdn_ranges()) == 1
    assert all(p.is_meta for p in module.parameters())  # nothing was touched


def test_a_missing_tensor_raises_with_strict_and_names_it(faulty: FaultyServer) -> None:
    config = bert_config(num_hidden_layers=1, vocab_size=100)
    model, _ = bert_checkpoint(config)
    state = {k: v for k, v in model.state_dict().items() if k != "pooler.dense.bias"}
    url = faulty.put("m.safetensors", safetensors_torch.save(state))
    module = empty_bert(config)
    with pytest.raises(rt.CheckpointMismatchError) as caught:
        rt.load_into(module, url)
    assert "missing from the checkpoint (1): pooler.dense.bias" in str(caught.value)
    assert caught.value.missing == ("pooler.dense.bias",)
    assert [e.range for e in faulty.log.entries] == ["bytes=0-65535"]  # no data request
    # strict=False: reported, and the name stays on meta.
    report = rt.load_into(module, url, strict=False)
    assert report.missing == ("pooler.dense.bias",)
    assert report.left_on_meta == ("pooler.dense.bias",)
    assert module.pooler.dense.bias.is_meta
    assert torch.equal(module.pooler.dense.weight, model.pooler.dense.weight)


def test_unexpected_names_raise_with_strict(faulty: FaultyServer) -> None:
    linear = torch.nn.Linear(4, 3)
    state = {**linear.state_dict(), "extra": torch.zeros(2)}
    url = faulty.put("m.safetensors", safetensors_torch.save(state))
    with pytest.raises(rt.CheckpointMismatchError, match=r"not in the module \(1\): extra"):
        rt.load_into(torch.nn.Linear(4, 3), url)
    report = rt.load_into(torch.nn.Linear(4, 3), url, strict=False)
    assert report.unexpected == ("extra",)


def _linear_stack(layers: int, width: int) -> torch.nn.Sequential:
    torch.manual_seed(5)
    return torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))


@pytest.mark.parametrize("built", ["meta", "real"])
def test_a_dropped_connection_claims_no_half_filled_tensor(
    faulty: FaultyServer, built: str
) -> None:
    source = _linear_stack(8, 64)
    url = faulty.put("m.safetensors", safetensors_torch.save(source.state_dict()))
    # The header, three data requests, then every request is cut half way.
    faulty.fault("m.safetensors", "ok", "ok", "ok", "ok", *["drop"] * 200)
    if built == "meta":
        with torch.device("meta"):
            module = _linear_stack(8, 64)
    else:
        module = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(8)))
        for p in module.parameters():
            torch.nn.init.zeros_(p)
    with pytest.raises(rt.IncompleteLoadError) as caught:
        rt.load_into(
            module,
            url,
            max_in_flight_bytes=64 * 1024,
            options=rt.ReadOptions(header_window_bytes=1024, max_concurrency=1),
            http_options=rt.HttpOptions(max_attempts=1),
        )
    err = caught.value
    assert isinstance(err.__cause__, rt.TransportError | rt.BadResponseError)
    assert err.loaded
    assert err.not_loaded
    assert err.report.loaded == err.loaded
    assert set(err.loaded) | set(err.not_loaded) == set(source.state_dict())
    assert not set(err.loaded) & set(err.not_loaded)
    assert f"{len(err.loaded)} of 16 names loaded" in str(err)
    state = dict(module.named_parameters())
    for name in err.loaded:
        assert torch.equal(state[name], source.state_dict()[name]), name
    for name in err.not_loaded:
        if built == "meta":
            assert state[name].is_meta, name  # never replaced by a partly read tensor
        else:
            assert not torch.equal(state[name], source.state_dict()[name]), name


def test_tied_weights_are_read_once_and_stay_tied(faulty: FaultyServer) -> None:
    reference, head_kept, embedding_kept = gpt2_checkpoint()
    tokens = torch.tensor([[1, 5, 9, 2]])
    for name, data in [("head.safetensors", head_kept), ("embedding.safetensors", embedding_kept)]:
        url = faulty.put(name, data)
        with accelerate.init_empty_weights():
            module = transformers.GPT2LMHeadModel(gpt2_config()).eval()
        assert module.lm_head.weight is not module.transformer.wte.weight  # the tie is lost
        faulty.log.clear()
        report = rt.load_into(module, url, options=rt.ReadOptions(header_window_bytes=1024))
        assert module.lm_head.weight is module.transformer.wte.weight
        assert {"lm_head.weight", "transformer.wte.weight"} <= set(report.loaded)
        assert report.missing == ()
        assert report.unexpected == ()
        assert faulty.log.total_bytes == len(data)  # the shared tensor once
        with torch.no_grad():
            assert torch.equal(module(tokens).logits, reference(tokens).logits)


def test_the_reference_save_model_file_loads_tied(tmp_path: Path) -> None:
    reference, _, _ = gpt2_checkpoint()
    path = tmp_path / "gpt2.safetensors"
    safetensors_torch.save_model(reference, str(path))
    with torch.device("meta"):  # here the tie survives the build
        module = transformers.GPT2LMHeadModel(gpt2_config()).eval()
    report = rt.load_into(module, path)
    assert module.lm_head.weight is module.transformer.wte.weight
    assert report.unexpected == ()
    assert report.missing == ()
    assert torch.equal(module.lm_head.weight, reference.lm_head.weight)


def test_non_persistent_buffers_on_meta_are_filled_when_the_checkpoint_has_them(
    tmp_path: Path,
) -> None:
    config = bert_config(num_hidden_layers=1, vocab_size=64)
    model, data = bert_checkpoint(config)
    path = tmp_path / "bert.safetensors"
    path.write_bytes(data)
    with torch.device("meta"):  # buffers on meta too
        module = transformers.BertModel(config).eval()
    report = rt.load_into(module, path)
    assert "embeddings.position_ids" in report.loaded
    assert torch.equal(module.embeddings.position_ids, model.embeddings.position_ids)
    # token_type_ids is not in the checkpoint: the module's own, left on meta and said so.
    assert report.left_on_meta == ("embeddings.token_type_ids",)
    assert report.unexpected == ()
    assert report.missing == ()


def test_real_parameters_are_filled_in_place_and_converted(tmp_path: Path) -> None:
    source = torch.nn.Linear(16, 8).to(torch.bfloat16)
    path = tmp_path / "bf16.safetensors"
    safetensors_torch.save_file(source.state_dict(), path)
    module = torch.nn.Linear(16, 8)  # float32, real
    weight = module.weight
    pointer = weight.data_ptr()
    report = rt.load_into(module, path)
    assert module.weight is weight
    assert weight.data_ptr() == pointer
    assert weight.dtype == torch.float32
    expected = torch.nn.Linear(16, 8)
    expected.load_state_dict(safetensors_torch.load_file(path))  # copy_ converts the same way
    assert torch.equal(module.weight, expected.weight)
    assert set(report.converted) == {"weight", "bias"}
    # dtype= makes floating-point tensors end in that dtype: bf16 lands as it is.
    report = rt.load_into(module, path, dtype=torch.bfloat16)
    assert module.weight.dtype == torch.bfloat16
    assert report.converted == ()
    assert torch.equal(module.weight, source.weight)


def test_bf16_and_f8_arrive_as_torch_dtypes(tmp_path: Path) -> None:
    class Holder(_Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(4, 8, dtype=torch.bfloat16, device="meta"))
            self.register_buffer("scales", torch.empty(8, dtype=torch.float8_e4m3fn, device="meta"))

    tensors = {
        "w": torch.randn(4, 8).to(torch.bfloat16),
        "scales": torch.linspace(-2, 2, 8).to(torch.float8_e4m3fn),
    }
    path = tmp_path / "low.safetensors"
    safetensors_torch.save_file(tensors, path)
    module = Holder()
    report = rt.load_into(module, path)
    assert report.converted == ()
    assert module.w.dtype == torch.bfloat16
    assert torch.equal(module.w, tensors["w"])
    assert module.scales.dtype == torch.float8_e4m3fn
    assert torch.equal(module.scales.view(torch.uint8), tensors["scales"].view(torch.uint8))


def test_unsupported_dtypes_are_refused_before_any_data(faulty: FaultyServer) -> None:
    from tests.reference import raw_file

    header = '{"w": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]}}'
    url = faulty.put("f6.safetensors", raw_file(header, b"\x00" * 3, pad=True))

    class Holder(_Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(4, device="meta"))

    with pytest.raises(rt.UnsupportedDtypeError, match="tensor w: F6_E2M3"):
        rt.load_into(Holder(), url)
    assert len(faulty.log.entries) == 1


# --- every location kind, sharded checkpoints ---------------------------------------------------


def _small_bert() -> tuple[Any, Any, bytes]:
    config = bert_config(num_hidden_layers=2, vocab_size=128)
    model, data = bert_checkpoint(config, seed=4)
    return config, model, data


def _check_filled(module: Any, model: Any) -> None:
    for name, tensor in model.state_dict().items():
        assert torch.equal(module.state_dict()[name], tensor), name


@pytest.fixture
def s3_bucket(moto_endpoint: str) -> dict[str, Any]:
    import s3fs

    fs = s3fs.S3FileSystem(
        endpoint_url=moto_endpoint, key="testing", secret="testing", skip_instance_cache=True
    )
    if not fs.exists("torch-bucket"):
        fs.mkdir("torch-bucket")
    return {"fs": fs, "endpoint_url": moto_endpoint, "key": "testing", "secret": "testing"}


def test_every_location_kind(
    hub_env: HubStandIn, faulty: FaultyServer, s3_bucket: dict[str, Any], tmp_path: Path
) -> None:
    config, model, data = _small_bert()
    hub_env.add("org/small", {"model.safetensors": data})
    s3_bucket["fs"].pipe("torch-bucket/m.safetensors", data)
    (tmp_path / "m.safetensors").write_bytes(data)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "model.safetensors").write_bytes(data)
    storage = {k: v for k, v in s3_bucket.items() if k != "fs"}
    locations: list[tuple[str | os.PathLike[str], dict[str, Any]]] = [
        ("hf://org/small", {}),
        (faulty.put("m.safetensors", data), {}),
        ("s3://torch-bucket/m.safetensors", {"storage_options": storage}),
        (tmp_path / "m.safetensors", {}),
        (f"file://{tmp_path}/folder/", {}),
    ]
    for location, kwargs in locations:
        module = empty_bert(config)
        report = rt.load_into(module, location, **kwargs)
        assert (report.missing, report.unexpected) == ((), ()), location
        _check_filled(module, model)


def test_sharded_checkpoint_touches_only_the_shards_it_needs(hub_env: HubStandIn) -> None:
    import hashlib
    import json

    config, model, _ = _small_bert()
    state = dict(model.state_dict())
    first = {k: v for k, v in state.items() if not k.startswith("encoder.layer.1.")}
    second = {k: v for k, v in state.items() if k.startswith("encoder.layer.1.")}
    files = {
        "model-00001-of-00002.safetensors": safetensors_torch.save(first),
        "model-00002-of-00002.safetensors": safetensors_torch.save(second),
    }
    weight_map = {
        **dict.fromkeys(first, "model-00001-of-00002.safetensors"),
        **dict.fromkeys(second, "model-00002-of-00002.safetensors"),
    }
    files["model.safetensors.index.json"] = json.dumps({"weight_map": weight_map}).encode()
    hub_env.add("org/sharded", files)
    module = empty_bert(config)
    rt.load_into(module, "hf://org/sharded")
    _check_filled(module, model)
    with accelerate.init_empty_weights():
        layer = transformers.models.bert.modeling_bert.BertLayer(config)
    hub_env.log.clear()
    report = rt.load_into(layer, "hf://org/sharded", prefix="encoder.layer.1.")
    assert report.missing == ()
    assert report.unexpected == ()
    first_shard = hashlib.sha256(files["model-00001-of-00002.safetensors"]).hexdigest()
    assert not hub_env.log.for_path("model-00001-of-00002")
    assert not hub_env.log.for_path(first_shard)
    served = sum(e.sent_bytes for e in hub_env.log.entries)
    assert served <= len(files["model-00002-of-00002.safetensors"])
    for name, tensor in layer.state_dict().items():
        assert torch.equal(tensor, state[f"encoder.layer.1.{name}"]), name


async def test_the_async_twin(tmp_path: Path) -> None:
    config, model, data = _small_bert()
    (tmp_path / "m.safetensors").write_bytes(data)
    module = empty_bert(config)
    report = await rt.load_into_async(module, tmp_path / "m.safetensors")
    assert report.missing == ()
    _check_filled(module, model)
    # Read from worker threads, lane by lane, and every byte counted once.
    assert report.bytes_read == len(data)


def test_a_non_contiguous_parameter_is_filled_in_place(tmp_path: Path) -> None:
    class Transposed(_Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(4, 3).t())  # (3, 4), not contiguous

    source = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    path = tmp_path / "w.safetensors"
    safetensors_torch.save_file({"w": source}, path)
    module = Transposed()
    weight = module.w
    assert not weight.is_contiguous()
    rt.load_into(module, path)
    assert module.w is weight
    assert not weight.is_contiguous()
    assert torch.equal(weight, source)


def test_conversions_through_the_smallest_staging_lanes(tmp_path: Path) -> None:
    config = bert_config(num_hidden_layers=1, vocab_size=512)
    model, _ = bert_checkpoint(config)
    half = {
        k: v.to(torch.float16) if v.is_floating_point() else v
        for k, v in model.state_dict().items()
    }
    path = tmp_path / "f16.safetensors"
    safetensors_torch.save_file(half, path)
    module = empty_bert(config)  # float32 on meta: every float tensor converted on arrival
    report = rt.load_into(module, path, max_in_flight_bytes=64 * 1024)
    assert len(report.converted) == len([v for v in half.values() if v.is_floating_point()])
    for name, tensor in half.items():
        assert torch.equal(module.state_dict()[name], tensor.to(module.state_dict()[name].dtype))
    bf16 = empty_bert(config)
    rt.load_into(bf16, path, dtype=torch.bfloat16, max_in_flight_bytes=64 * 1024)
    for name, tensor in half.items():
        expected = tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
        assert torch.equal(bf16.state_dict()[name], expected), name


def test_arguments_are_checked_before_anything_is_opened(faulty: FaultyServer) -> None:
    url = faulty.put("m.safetensors", safetensors_torch.save(torch.nn.Linear(2, 2).state_dict()))
    with pytest.raises(ValueError, match="max_in_flight_bytes must be at least 65536"):
        rt.load_into(torch.nn.Linear(2, 2), url, max_in_flight_bytes=1000)
    with pytest.raises(rt.FrameworkError, match="meta"):
        rt.load_into(torch.nn.Linear(2, 2), url, device="meta")
    with pytest.raises(rt.FrameworkError, match="not a torch device"):
        rt.load_into(torch.nn.Linear(2, 2), url, device="nowhere")
    with pytest.raises(TypeError, match=r"dtype must be a torch\.dtype"):
        rt.load_into(torch.nn.Linear(2, 2), url, dtype="float16")  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(rt.FrameworkError, match="sees no CUDA device"):
            rt.load_into(torch.nn.Linear(2, 2), url, device="cuda")
    assert faulty.log.entries == []
