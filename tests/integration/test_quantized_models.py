"""Quantized models opened where they live: config.json found in the discovery round, true counts
equal to the unquantized model through local folders, the hub stand-in and S3 (moto)."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import remotetensors as rt
from tests import quantized as q
from tests.hub_standin import HubStandIn
from tests.integration.test_models import put_s3
from tests.servers import FaultyServer

ARCH = q.Arch()
MOE = replace(q.Arch(), experts=4, shared_experts=True)


class RoundServer(FaultyServer):
    """A FaultyServer that holds requests until a whole round has arrived.

    ``expect(4, 2)`` says: the first 4 requests come together, then 2. Each round is released
    only when all its requests are waiting, so a client that asks in sequence what it could ask
    at once leaves a request waiting alone; after ``patience_seconds`` that request is served
    anyway and recorded in ``strays``. Tests therefore never hang.
    """

    def __init__(self, patience_seconds: float = 5.0) -> None:
        self.rounds: list[list[str]] = []
        self.strays: list[str] = []
        self._expected: deque[int] = deque()
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []
        self._patience = patience_seconds
        super().__init__()

    def expect(self, *sizes: int) -> None:
        self._expected = deque(sizes)
        self.rounds.clear()
        self.strays.clear()

    async def _serve_file(self, request: web.Request) -> web.StreamResponse:
        size = self._expected[0] if self._expected else 1
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((request.path, future))
        if len(self._waiting) >= size:
            self.rounds.append(sorted(path for path, _ in self._waiting))
            if self._expected:
                self._expected.popleft()
            for _, waiting in self._waiting:
                if not waiting.done():
                    waiting.set_result(None)
            self._waiting = []
        else:
            try:
                await asyncio.wait_for(asyncio.shield(future), self._patience)
            except asyncio.TimeoutError:
                self.strays.append(request.path)
                self._waiting = [(p, f) for p, f in self._waiting if f is not future]
        return await super()._serve_file(request)


@pytest.fixture
def rounds() -> Iterator[RoundServer]:
    server = RoundServer()
    try:
        yield server
    finally:
        server.stop()


def serve(server: FaultyServer, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        server.put(f"repo/{name}", data)
    return f"{server.url}/f/repo/"


# --- discovery: the config costs no round ---------------------------------------------------


def test_single_file_config_and_index_come_in_one_round(rounds: RoundServer) -> None:
    spec, config = q.gptq(ARCH)
    base = serve(rounds, q.files_for(spec, config))
    rounds.expect(4)
    with rt.open_model(base) as model:
        assert model.config == config
        assert model.num_parameters == q.float_count(ARCH)
    assert rounds.strays == []
    assert rounds.rounds == [
        sorted(
            f"/f/repo/{n}"
            for n in (
                "config.json",
                "quantization_config.json",
                "model.safetensors",
                "model.safetensors.index.json",
            )
        )
    ]


def test_sharded_model_takes_two_rounds_with_its_config(rounds: RoundServer) -> None:
    spec, config = q.awq(ARCH)
    base = serve(rounds, q.files_for(spec, config, shards=3))
    rounds.expect(4, 3)
    with rt.open_model(base) as model:
        assert model.num_parameters == q.float_count(ARCH)
        assert model.quantization is not None
        assert model.quantization.method == "awq"
    assert rounds.strays == []
    assert len(rounds.rounds) == 2
    assert "/f/repo/config.json" in rounds.rounds[0]
    assert all("-of-00003" in p for p in rounds.rounds[1])


def test_a_named_file_finds_the_config_beside_it_in_the_same_round(rounds: RoundServer) -> None:
    spec, config = q.gptq(ARCH, bits=8)
    base = serve(rounds, q.files_for(spec, config))
    rounds.expect(3)
    with rt.open_model(base + "model.safetensors") as model:
        assert model.quantization is not None
        assert model.quantization.bits == 8
        assert model.num_parameters == q.float_count(ARCH)
    assert rounds.strays == []
    assert len(rounds.rounds) == 1


def test_config_reading_can_be_switched_off(rounds: RoundServer) -> None:
    spec, config = q.gptq(ARCH)
    base = serve(rounds, q.files_for(spec, config))
    rounds.expect(2)
    with rt.open_model(base, options=rt.ReadOptions(read_configs=False)) as model:
        assert model.config is None
        assert model.quantization is None  # the config was not read ...
        assert model.num_parameters == q.float_count(ARCH)  # ... the layout still is
    assert rounds.strays == []
    assert rounds.rounds == [["/f/repo/model.safetensors", "/f/repo/model.safetensors.index.json"]]


def test_no_config_is_no_error(rounds: RoundServer) -> None:
    files = q.files_for(q.float_spec(ARCH), None)
    base = serve(rounds, files)
    rounds.expect(4)
    with rt.open_model(base) as model:
        assert model.config is None
        assert model.quantization is None
        assert model.num_parameters == model.stored_parameters == q.float_count(ARCH)


# --- every layout, everywhere ---------------------------------------------------------------

Built = tuple[q.Spec, dict[str, Any], int, dict[str, Any]]
"""A layout's spec, config, oracle (the float model's count) and stored tensor values."""


def _with_oracle(
    build: Callable[..., tuple[q.Spec, dict[str, Any]]], arch: q.Arch, **kw: Any
) -> Callable[[], Built]:
    def make() -> Built:
        spec, config = build(arch, **kw)
        values = q.weight_shape_values(arch) if any("weight_shape" in n for n in spec) else {}
        return spec, config, q.float_count(arch), values

    return make


def _gpt_oss() -> Built:
    spec, config, oracle = q.gpt_oss(replace(ARCH, experts=4, expert_intermediate=64))
    return spec, config, oracle, {}


ODD = replace(ARCH, intermediate=372)  # rows that do not fill their last int32

LAYOUTS: dict[str, Callable[[], Built]] = {
    "gptq-4": _with_oracle(q.gptq, ARCH, bits=4),
    "gptq-3-desc-act": _with_oracle(q.gptq, ARCH, bits=3, desc_act=True),
    "gptq-2": _with_oracle(q.gptq, ARCH, bits=2),
    "gptq-8": _with_oracle(q.gptq, ARCH, bits=8),
    "awq-4": _with_oracle(q.awq, ARCH),
    "bnb-nf4": _with_oracle(q.bnb4, ARCH, quant_type="nf4", double=True),
    "bnb-fp4": _with_oracle(q.bnb4, ARCH, quant_type="fp4", double=False),
    "bnb-8bit": _with_oracle(q.bnb8, ARCH),
    "ct-pack-quantized": _with_oracle(q.compressed_pack, ODD, bits=4, group=4),
    "ct-nvfp4": _with_oracle(q.compressed_nvfp4, ARCH),
    "ct-float-quantized": _with_oracle(q.compressed_float, ARCH),
    "fp8-blocks": _with_oracle(q.fp8_blocks, ARCH),
    "mxfp4": _gpt_oss,
    "mlx-4": _with_oracle(
        q.mlx,
        ARCH,
        bits=4,
        overrides={"lm_head": {"bits": 8, "group_size": 32}, "model.layers.1.mlp.up_proj": False},
    ),
    "mlx-3": _with_oracle(q.mlx, ARCH, bits=3, group=32),
    "moe-experts-int4": _with_oracle(q.moe_compressed, MOE),
    "moe-experts-fp4": _with_oracle(q.fp8_fp4_experts, MOE),
}


def _check(model: rt.Model, oracle: int) -> None:
    assert model.num_parameters == oracle
    assert model.true_count.exact
    assert model.quantization is not None


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_local_folder(layout: str, shards: int, tmp_path: Path) -> None:
    spec, config, oracle, values = LAYOUTS[layout]()
    for name, data in q.files_for(spec, config, shards=shards, values=values).items():
        (tmp_path / name).write_bytes(data)
    with rt.open_model(tmp_path) as model:
        _check(model, oracle)
        assert model.stored_parameters == sum(model.parameter_count().values())


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", "")
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", lambda token: None)
    return hub


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_hub(layout: str, shards: int, hub_env: HubStandIn) -> None:
    spec, config, oracle, values = LAYOUTS[layout]()
    hub_env.add(f"org/{layout}", q.files_for(spec, config, shards=shards, values=values))
    with rt.open_model(f"hf://org/{layout}") as model:
        _check(model, oracle)


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_s3(layout: str, shards: int, s3_env: str) -> None:
    spec, config, oracle, values = LAYOUTS[layout]()
    files = q.files_for(spec, config, shards=shards, values=values)
    put_s3(s3_env, "quantized", {f"{layout}-{shards}/{n}": d for n, d in files.items()})
    # The cached filesystem instance: with skip_instance_cache every file builds its own client
    # (about 0.3 s each here), which would only slow the test down.
    with rt.open_model(f"s3://quantized/{layout}-{shards}/") as model:
        _check(model, oracle)


def test_stored_shapes_cost_one_small_round(rounds: RoundServer) -> None:
    spec, config = q.compressed_pack(ODD, bits=4, group=4)
    files = q.files_for(spec, config, shards=3, values=q.weight_shape_values(ODD))
    base = serve(rounds, files)
    rounds.expect(4, 3, 3)
    with rt.open_model(base) as model:
        assert model.true_count.exact
        assert model.num_parameters == q.float_count(ODD)
        packed = model.logical_tensors["model.layers.0.mlp.down_proj.weight_packed"]
        assert packed.shape == (ODD.hidden, ODD.intermediate)
    assert rounds.strays == []
    # Discovery, shard headers, and at most one small range per shard for the shapes: the
    # writer puts the I64 shapes first in the data, so the header windows usually hold them.
    assert len(rounds.rounds) <= 3
    assert all(len(r) <= 3 for r in rounds.rounds[2:])
    after_headers = rounds.log.entries[7:]
    assert sum(e.sent_bytes for e in after_headers) <= 3 * 1024


# --- configs that cannot be believed --------------------------------------------------------


def test_config_that_is_not_json_warns_naming_the_file(tmp_path: Path) -> None:
    spec, config = q.gptq(ARCH)
    files = q.files_for(spec, config)
    files["config.json"] = b"{not json"
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.warns(rt.ConfigWarning, match=r"config\.json: not JSON"):
        model = rt.open_model(tmp_path)
    with model:
        # No config: the layout is still recognised, widths inferred from the siblings.
        assert model.config is None
        assert model.num_parameters == q.float_count(ARCH)


def test_config_warnings_name_the_users_line_sync_and_async(tmp_path: Path) -> None:
    spec, config = q.gptq(ARCH)
    files = q.files_for(spec, config)
    files["config.json"] = b"{not json"
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.warns(rt.ConfigWarning) as caught:
        rt.open_model(tmp_path).close()
    assert [Path(w.filename).name for w in caught] == [Path(__file__).name]

    async def opened() -> None:
        async with rt.open_model_async(tmp_path):
            pass
        await (await rt.open_model_async(tmp_path)).aclose()

    with pytest.warns(rt.ConfigWarning) as caught:
        asyncio.run(opened())
    assert [Path(w.filename).name for w in caught] == [Path(__file__).name] * 2
    # So a filter on the user's module silences them (it matched asyncio's before).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=rt.ConfigWarning, module=__name__)
        rt.open_model(tmp_path).close()


def test_gptq_config_over_float_weights_warns(tmp_path: Path) -> None:
    _, config = q.gptq(ARCH)
    for name, data in q.files_for(q.float_spec(ARCH), config).items():
        (tmp_path / name).write_bytes(data)
    with pytest.warns(rt.ConfigWarning, match="says gptq") as caught:
        model = rt.open_model(tmp_path)
    assert str(tmp_path / "config.json") in str(caught[0].message)
    with model:
        assert model.num_parameters == q.float_count(ARCH)


def test_separate_quantization_config_json(tmp_path: Path) -> None:
    spec, config = q.gptq(ARCH, bits=8)
    quant = config.pop("quantization_config")
    files = q.files_for(spec, config)
    files["quantization_config.json"] = json.dumps(quant).encode()
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with rt.open_model(tmp_path) as model:
        assert model.quantization is not None
        assert model.quantization.source.endswith("quantization_config.json")
        assert model.num_parameters == q.float_count(ARCH)


def test_notebook_view_shows_the_true_count_on_top(tmp_path: Path) -> None:
    spec, config = q.gptq(ARCH, bits=4)
    oracle = q.float_count(ARCH)
    files = q.files_for(spec, config, metadata={"total_parameters": str(oracle)})
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with rt.open_model(tmp_path) as model:
        html = model._repr_html_()
        stored = model.stored_parameters
    head = html.split("<details", 1)[0]  # the totals, above the tree
    assert (
        f"{oracle / 1000:.1f}K parameters ({oracle:,}); {stored / 1000:.1f}K elements as stored"
        in head
    )
    assert "quantized: gptq, 4-bit, group size 128" in head
    assert f"declared: {oracle:,} (metadata total_parameters)" in head
    assert "differs" not in head


def test_declared_total_in_shards_and_a_named_file_on_the_hub(hub_env: HubStandIn) -> None:
    spec, config = q.awq(ARCH)
    oracle = q.float_count(ARCH)
    files = q.files_for(spec, config, shards=2, metadata={"total_parameters": str(oracle)})
    index = json.loads(files["model.safetensors.index.json"])
    del index["metadata"]["total_parameters"]  # only the shards' __metadata__ declare it
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    hub_env.add("org/declared", {f"sub/{n}": d for n, d in files.items()})
    with rt.open_model("hf://org/declared/sub/model.safetensors.index.json") as model:
        assert model.config == config  # sub/config.json, beside the named index
        assert model.true_count.declared_total == oracle == model.num_parameters
    with rt.open_model("hf://org/declared/sub/model-00001-of-00002.safetensors") as shard:
        assert shard.quantization is not None
        assert shard.quantization.method == "awq"


def test_unknown_method_on_s3_warns_and_still_counts(s3_env: str) -> None:
    spec, config = q.gptq(ARCH, bits=8)
    config["quantization_config"]["quant_method"] = "brand-new"
    put_s3(s3_env, "quantized", {f"unknown/{n}": d for n, d in q.files_for(spec, config).items()})
    with pytest.warns(rt.ConfigWarning, match=r"s3://quantized/unknown/config\.json.*brand-new"):
        model = rt.open_model("s3://quantized/unknown/")
    with model:
        assert model.quantization is not None
        assert model.quantization.method == "brand-new"
        assert model.num_parameters == q.float_count(ARCH)
