"""``remotetensors.dcp.StorageReader`` under ``torch.distributed.checkpoint``.

Jobs of 2 and 4 spawned ranks (``gloo`` on loopback, :mod:`tests.distributed`) load a small
Llama written by transformers' ``save_pretrained`` in 3 shards into DTensors (``Shard(0)``,
``Shard(1)``, ``Replicate()`` on a 1-D mesh; both dimensions of a 2-D mesh) through
``dcp.load``, from plain HTTP, the hub stand-in, S3 (moto) and DCP's own sharded safetensors
on a local disk. Every rank's local shards equal the matching slices of the reference
(``safetensors`` reading the same files: DTensor's own chunking of it). The servers count each
rank's requests (an ``X-Rank`` header) and bytes: the coordinator alone reads the headers, the
others only check each file's version (8 bytes) and read their boxes.

The methods' contract, errors and the memory bound are tested in one process, without a
process group.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from safetensors.torch import save_file  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner  # noqa: E402
from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageReader  # noqa: E402
from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata  # noqa: E402
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem  # noqa: E402
from torch.distributed.checkpoint.state_dict_loader import load  # noqa: E402

import remotetensors as rt  # noqa: E402
from remotetensors.dcp import StorageReader  # noqa: E402
from remotetensors.integrations.dcp_plan import CheckpointStorage  # noqa: E402
from tests.dcp_ranks import Case, Outcome, load_cases, reference_tensors  # noqa: E402
from tests.distributed import run_guide_example, run_job  # noqa: E402
from tests.hub_standin import HubStandIn  # noqa: E402
from tests.servers import Log, static_server  # noqa: E402

# dcp.load in one process (no process group) warns that it assumes so: it is what we ask.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


PIN = 8  # bytes of the version check a rank makes per file it reads (see sources/reopen.py)
EXACT = rt.ReadOptions(max_gap_bytes=0, progress=False)
"""No hole fetched: each rank's bytes are exactly its boxes (more requests)."""


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Llama in 3 safetensors shards; its vocabulary (130) and MLP width (98) are
    uneven over 4 ranks, the width over 2 odd."""
    config = transformers.LlamaConfig(
        vocab_size=130,
        hidden_size=64,
        intermediate_size=98,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("llama")
    model.save_pretrained(folder, max_shard_size="120KB")
    assert len(list(folder.glob("*.safetensors"))) == 3
    return folder


@pytest.fixture(scope="module")
def served(llama: Path) -> Iterator[tuple[str, Log]]:
    with static_server(llama) as (url, log):
        yield url, log


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored token, in the ranks too
    return hub


def _shards(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.safetensors"))


def _data_start(folder: Path, name: str) -> int:
    return 8 + int.from_bytes((folder / name).read_bytes()[:8], "little")


def _per_rank(log: Log, case: str, folder: Path) -> dict[int, dict[str, int]]:
    """Per rank, what the server saw of ``case``: index reads, header windows (ranges from
    byte 0 longer than the version check), version checks, and data bytes (every range
    past a header)."""
    counts: dict[int, dict[str, int]] = {}
    starts = {name: _data_start(folder, name) for name in _shards(folder)}
    for entry in log.entries:
        if entry.headers.get("X-Case") != case:
            continue
        row = counts.setdefault(
            int(entry.headers["X-Rank"]),
            dict.fromkeys(("probes", "index", "headers", "pins", "data_bytes", "data_requests"), 0),
        )
        name = entry.path.rsplit("/", 1)[-1]
        if entry.status == 404:  # discovery's probe for model.safetensors
            row["probes"] += 1
        elif name.endswith(".json"):
            row["index"] += 1
        else:
            first, last = (int(x) for x in (entry.range or "bytes=0-0")[6:].split("-"))
            if first == 0 and last + 1 == PIN:
                row["pins"] += 1
            elif first < starts[name]:
                row["headers"] += 1
            else:
                row["data_bytes"] += entry.sent_bytes
                row["data_requests"] += 1
    return counts


def _assert_loaded(outcomes: list[Outcome], world: int) -> None:
    assert len(outcomes) == world
    for outcome in outcomes:
        assert outcome.wrong == [], (outcome.case, outcome.rank)
        assert outcome.extra_untouched


def _assert_headers_once(counts: dict[int, dict[str, int]], shards: int, world: int) -> None:
    """The coordinator reads the index and each shard's header once; no other rank reads
    either, only each file's 8-byte version check."""
    assert sorted(counts) == list(range(world))
    assert counts[0]["index"] == 1
    assert counts[0]["probes"] <= 1
    assert counts[0]["headers"] == shards
    for rank in range(1, world):
        assert counts[rank]["index"] == counts[rank]["probes"] == 0
        assert counts[rank]["headers"] == 0
        assert counts[rank]["pins"] <= shards


def test_two_ranks_from_http_the_hub_s3_and_dcp_written_files(
    llama: Path,
    served: tuple[str, Log],
    hub_env: HubStandIn,
    s3_env: str,
    tmp_path: Path,
) -> None:
    url, log = served
    log.clear()
    hub_env.add("org/llama", {p.name: p.read_bytes() for p in llama.iterdir() if p.is_file()})
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_env, skip_instance_cache=True)
    fs.mkdir("dcp-bucket")
    fs.put(f"{llama}/", "dcp-bucket/llama/", recursive=True)
    written = tmp_path / "dcp-written"
    cases = [
        Case("http", url, str(llama), (2,), EXACT),
        Case("hub", "hf://org/llama", str(llama), (2,)),
        Case("s3", "s3://dcp-bucket/llama/", str(llama), (2,)),
        Case("written", str(written), str(llama), (2,), save_first=str(written)),
        Case("missing", f"{url}/nothing/", str(llama), (2,)),
        Case("failing", url, str(llama), (2,), fail_rank=1),
        Case("unshared", url, str(llama), (2,), EXACT, share_headers=False),
    ]
    outcomes = run_job(2, load_cases, cases)
    by_case = {c.name: [o[i] for o in outcomes] for i, c in enumerate(cases)}
    for case in cases:
        if case.name not in ("missing", "failing"):
            _assert_loaded(by_case[case.name], 2)

    # Headers not shared: each rank reads them itself (once each), and loads the same.
    unshared = _per_rank(log, "unshared", llama)
    for rank in (0, 1):
        assert unshared[rank]["index"] == 1
        assert unshared[rank]["headers"] <= 3  # 0 where the header cache answered

    # A rank that fails to read: it raises its error, the other that it failed, and neither
    # waits for an exchange the other will not join.
    failing = {o.rank: o.error for o in by_case["failing"]}
    assert "injected: this rank cannot take model.norm.weight" in failing[1]
    assert "another rank failed to read its part" in failing[0]

    # No checkpoint there: the coordinator's error, on every rank (torch words it "global
    # metadata read failed: <ours>"); the other rank never asked the server.
    for outcome in by_case["missing"]:
        assert f"{url}/nothing/: no model here" in outcome.error, outcome.error
    asked = {e.headers.get("X-Rank") for e in log.entries if e.headers.get("X-Case") == "missing"}
    assert asked == {"0"}

    # Plain HTTP, no hole fetched: each rank's data bytes are exactly its local shards', in a
    # few requests (each Shard(1) weight read as rows, one range, then exchanged).
    counts = _per_rank(log, "http", llama)
    _assert_headers_once(counts, 3, 2)
    for outcome in by_case["http"]:
        row = counts[outcome.rank]
        assert row["data_bytes"] == outcome.local_bytes, outcome.rank
        assert row["data_requests"] <= 20, outcome.rank
        assert outcome.data_bytes == row["data_bytes"] + PIN * row["pins"]
        # The probe for model.safetensors, the index, 3 headers: the coordinator alone.
        assert outcome.header_requests == (0 if outcome.rank else 5)

    # The hub: no rank but the coordinator asks the hub's API or reads a header; the CDN sends
    # each shard's header once in all, whatever the ranks.
    hub_api = [e for e in hub_env.log.entries if "/api/" in e.path or e.path.endswith(".json")]
    assert {e.headers.get("X-Rank") for e in hub_api} <= {"0"}
    cdn_headers = [
        e
        for e in hub_env.cdn_entries()
        if e.range is not None and e.range.startswith("bytes=0-") and e.range != "bytes=0-7"
    ]
    assert len(cdn_headers) <= 3
    assert [o.header_requests for o in by_case["hub"]][1:] == [0]

    # DCP's own files: two shard files, chunks placed by DCP_SHARDING_INFO; torch's reader
    # says the same of them.
    assert sorted(p.name for p in written.glob("*.safetensors")) == [
        "shard-00001-model-00001-of-00001.safetensors",
        "shard-00002-model-00001-of-00001.safetensors",
    ]
    ours = StorageReader(written).read_metadata()
    theirs = HuggingFaceStorageReader(str(written)).read_metadata()
    assert ours.state_dict_metadata.keys() == theirs.state_dict_metadata.keys()
    for name, md in ours.state_dict_metadata.items():
        other = theirs.state_dict_metadata[name]
        assert isinstance(md, TensorStorageMetadata)
        assert isinstance(other, TensorStorageMetadata)
        assert md.size == other.size
        assert md.properties.dtype == other.properties.dtype
        assert sorted(map(tuple, (c.offsets for c in md.chunks))) == sorted(
            map(tuple, (c.offsets for c in other.chunks))
        )


def test_four_ranks_on_one_and_two_dimensional_meshes(llama: Path, served: tuple[str, Log]) -> None:
    url, log = served
    log.clear()
    cases = [
        Case("flat", url, str(llama), (4,), EXACT),
        Case("grid", url, str(llama), (2, 2)),
        # Without the exchange, each Shard(1) box is read run by run: the same bytes, a
        # request per row of each.
        Case("plain", url, str(llama), (4,), EXACT, exchange=False),
    ]
    outcomes = run_job(4, load_cases, cases)
    stored = sum((llama / n).stat().st_size - _data_start(llama, n) for n in _shards(llama))
    for i, case in enumerate(cases):
        found = [o[i] for o in outcomes]
        _assert_loaded(found, 4)
        counts = _per_rank(log, case.name, llama)
        _assert_headers_once(counts, 3, 4)
        for outcome in found:
            row = counts[outcome.rank]
            assert outcome.data_bytes == row["data_bytes"] + PIN * row["pins"]
            if case.options is EXACT and not case.exchange:
                assert row["data_bytes"] == outcome.local_bytes, outcome.rank
                assert row["data_requests"] > 200, outcome.rank  # a request per row
            elif case.options is EXACT:
                # Exchanged: a rank reads the rows of its Shard(0) box, whose bytes differ
                # from its uneven Shard(1) shard's (the MLP width, 98, over 4 ranks).
                assert row["data_bytes"] <= 1.1 * outcome.local_bytes, outcome.rank
                assert row["data_requests"] <= 25, outcome.rank
            else:
                # Holes of up to 32 KiB (the default max_gap_bytes) between the runs of the
                # boxes are fetched: in a model this small, that is most of each file; never
                # a byte twice.
                assert row["data_bytes"] <= stored, outcome.rank
        total = sum(counts[o.rank]["data_bytes"] for o in found)
        if case.options is EXACT:  # each byte once for the job
            assert total == sum(o.local_bytes for o in found)


def test_the_guide_example_runs_on_two_ranks(
    llama: Path, hub_env: HubStandIn, tmp_path: Path
) -> None:
    """The dcp.load example of docs/guides/tensor-parallel.md, as written, under torchrun with two ranks; the
    repo it names is the small Llama here."""
    hub_env.add(
        "HuggingFaceTB/SmolLM2-135M",
        {p.name: p.read_bytes() for p in llama.iterdir() if p.is_file()},
    )
    stdout = run_guide_example("tests/integration/test_dcp.py", tmp_path)
    for rank in (0, 1):
        assert f"rank {rank}: [64, 98] -> local [64, 49]" in stdout
    # One rank read the index (and asked the hub's metadata endpoint); the other never did.
    index = [e for e in hub_env.log.entries if e.path.endswith("model.safetensors.index.json")]
    assert len([e for e in index if "/resolve/" in e.path]) == 1
    assert len([e for e in index if "/api/" in e.path]) <= 1


# --- one process, no process group ---------------------------------------------------------------


def _state(folder: Path) -> dict[str, Any]:
    return {name: torch.zeros_like(t) for name, t in reference_tensors(str(folder)).items()}


def test_the_contract_step_by_step(llama: Path, served: tuple[str, Log]) -> None:
    url, _ = served
    reader = StorageReader(url, options=rt.ReadOptions(progress=False))
    assert StorageReader.validate_checkpoint_id(url)
    assert StorageReader.validate_checkpoint_id("hf://org/model")
    assert StorageReader.validate_checkpoint_id(str(llama))
    assert not StorageReader.validate_checkpoint_id(str(llama / "absent"))
    assert not StorageReader.validate_checkpoint_id("nosuchscheme://x/y")
    reader.reset()
    metadata = reader.read_metadata()
    storage = metadata.storage_data
    assert isinstance(storage, CheckpointStorage)
    assert sorted(storage.recipes) == _shards(llama)
    assert pickle.loads(pickle.dumps(metadata)).storage_data.chunks == storage.chunks
    assert "testing" not in repr(storage)
    state = _state(llama)
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state, metadata, True)
    reader.set_up_storage_reader(metadata, True)
    plan = reader.prepare_local_plan(planner.create_local_plan())
    # In the order the bytes lie: by file, then offset.
    where = [
        (
            storage.chunks[i.storage_index.fqn, tuple(i.storage_index.offset or ())].file,
            storage.chunks[i.storage_index.fqn, tuple(i.storage_index.offset or ())].info.start,
        )
        for i in plan.items
    ]
    assert where == sorted(where, key=lambda w: (list(storage.recipes).index(w[0]), w[1]))
    plans = reader.prepare_global_plan([plan])
    assert plans == [plan]
    reader.read_data(planner.finish_plan(plans[0]), planner).wait()
    for name, tensor in reference_tensors(str(llama)).items():
        assert torch.equal(state[name], tensor), name


def test_a_checkpoint_id_given_to_dcp_load_is_read(llama: Path) -> None:
    """``dcp.load(checkpoint_id=...)`` resets the reader to that location."""
    reader = StorageReader(llama / "elsewhere")
    state = _state(llama)
    load(state, checkpoint_id=str(llama), storage_reader=reader, no_dist=True)
    assert reader.location == str(llama)
    for name, tensor in reference_tensors(str(llama)).items():
        assert torch.equal(state[name], tensor), name


def test_dtypes_conversions_and_the_memory_bound(tmp_path: Path) -> None:
    """BF16 and F8 land as they are or converted; a tensor larger than the bound is read in
    pieces, each within it; a box not contiguous in its tensor is staged."""
    torch.manual_seed(1)
    big = torch.randn(512, 96)  # 192 KiB: three times the smallest bound
    tensors = {
        "big": big,
        "bf16": torch.randn(40, 24).to(torch.bfloat16),
        "f8": torch.randn(16, 8).to(torch.float8_e4m3fn),
        "scalar": torch.tensor(3.5),
    }
    save_file(tensors, tmp_path / "model.safetensors")
    reader = StorageReader(tmp_path, max_in_flight_bytes=64 * 1024)
    same = {k: torch.zeros_like(v) for k, v in tensors.items()}
    load(same, storage_reader=reader, no_dist=True)
    for name, tensor in tensors.items():
        assert torch.equal(same[name], tensor), name
    converted = {k: torch.zeros(v.shape, dtype=torch.float64) for k, v in tensors.items()}
    load(converted, storage_reader=StorageReader(tmp_path), no_dist=True)
    for name, tensor in tensors.items():
        assert torch.equal(converted[name], tensor.to(torch.float64)), name
    # Into a transposed (not contiguous) destination: staged, then copied.
    transposed = torch.zeros(96, 512).t()
    load({"big": transposed}, storage_reader=reader, no_dist=True)
    assert torch.equal(transposed, big)
    # A column block of "big": a box of 512 runs, in pieces within the bound.
    metadata = reader.read_metadata()
    reader.set_up_storage_reader(metadata, True)
    block = torch.zeros(512, 20)
    planner = DefaultLoadPlanner()
    planner.set_up_planner({"big": block}, metadata, True)
    reader.read_data(LoadPlan([_item("big", [0, 10], [512, 20])]), planner).wait()
    assert torch.equal(block, big[:, 10:30])


def _item(fqn: str, offsets: list[int], lengths: list[int]) -> ReadItem:
    """A read of the box ``offsets`` + ``lengths`` of the chunk of ``fqn`` at zeros, into the
    whole of the state dict's ``fqn``."""
    return ReadItem(
        type=LoadItemType.TENSOR,
        dest_index=MetadataIndex(fqn),
        dest_offsets=torch.Size([0] * len(lengths)),
        storage_index=MetadataIndex(fqn, [0] * len(lengths)),
        storage_offsets=torch.Size(offsets),
        lengths=torch.Size(lengths),
    )


def test_what_a_read_holds_stays_within_the_bound(tmp_path: Path) -> None:
    """A 4 MiB tensor converted on the way (staged) under a 256 KiB bound: the buffers that
    the read allocates (numpy's, which tracemalloc sees: staging, scratch, requests) peak at
    the bound, plus the plan's own small objects."""
    import tracemalloc

    torch.manual_seed(2)
    big = torch.randn(1024, 1024)
    save_file({"big": big}, tmp_path / "model.safetensors")
    bound = 256 * 1024
    reader = StorageReader(tmp_path, max_in_flight_bytes=bound)
    reader.read_metadata()
    wider = torch.zeros(1024, 1024, dtype=torch.float64)
    tracemalloc.start()
    try:
        load({"big": wider}, storage_reader=reader, no_dist=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert torch.equal(wider, big.to(torch.float64))
    assert peak <= bound + 128 * 1024


def test_a_file_changed_since_its_header_was_read_is_refused(tmp_path: Path) -> None:
    save_file({"w": torch.zeros(4, 4)}, tmp_path / "model.safetensors")
    reader = StorageReader(tmp_path)
    reader.read_metadata()
    save_file({"w": torch.ones(8, 4)}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointException) as raised:
        load({"w": torch.zeros(4, 4)}, storage_reader=reader, no_dist=True)
    failure = raised.value.failures[0]  # (the error, its traceback) as torch wraps it
    assert isinstance(failure[0], rt.RemoteFileChangedError)
    assert "changed since it was opened" in str(failure[0])


def test_errors_say_what_is_wrong(llama: Path, tmp_path: Path) -> None:
    # No checkpoint at the location.
    with pytest.raises(rt.NotFoundError):
        StorageReader(tmp_path / "nothing-here").read_metadata()
    reader = StorageReader(llama)
    metadata = reader.read_metadata()
    reader.set_up_storage_reader(metadata, True)
    # A shape the checkpoint does not hold: torch's planner says so first (dcp.load hands on
    # each rank's error inside a CheckpointException).
    state = _state(llama)
    state["model.norm.weight"] = torch.zeros(65)
    with pytest.raises(CheckpointException) as raised:
        load(state, storage_reader=StorageReader(llama), no_dist=True)
    assert "Size mismatch" in str(raised.value.failures[0])
    # A missing tensor: torch's planner (strict), or left alone with allow_partial_load.
    with pytest.raises(CheckpointException) as raised:
        load({"absent": torch.zeros(2)}, storage_reader=StorageReader(llama), no_dist=True)
    assert "Missing key" in str(raised.value.failures[0])
    # No checkpoint there: ours, inside torch's.
    with pytest.raises(CheckpointException) as raised:
        load(state, storage_reader=StorageReader(tmp_path / "nothing"), no_dist=True)
    assert "No such file or directory" in str(raised.value.failures[0])
    # Items the reader is handed that do not fit the checkpoint: ours.
    planner = DefaultLoadPlanner()
    planner.set_up_planner(_state(llama), metadata, True)
    with pytest.raises(rt.TensorNotFoundError, match=r"model\.absent"):
        reader.read_data(LoadPlan([_item("model.absent", [0], [4])]), planner)
    with pytest.raises(rt.CheckpointMismatchError, match=r"model.norm.weight.*holds \[64\]"):
        reader.read_data(LoadPlan([_item("model.norm.weight", [60], [8])]), planner)
    with pytest.raises(rt.RemoteTensorsError, match="set_up_storage_reader"):
        StorageReader(llama).read_data(LoadPlan([]), planner)
    foreign = HuggingFaceStorageReader(str(llama)).read_metadata()
    with pytest.raises(rt.RemoteTensorsError, match="not read by"):
        reader.set_up_storage_reader(foreign, True)


def test_a_dcp_sharding_info_that_is_not_json_is_a_header_error(tmp_path: Path) -> None:
    save_file(
        {"w": torch.zeros(2, 2)},
        tmp_path / "shard-1.safetensors",
        metadata={"DCP_SHARDING_INFO": "{not json"},
    )
    with pytest.raises(rt.HeaderError, match="DCP_SHARDING_INFO"):
        StorageReader(tmp_path).read_metadata()


def test_a_pipeline_folder_names_its_components(tmp_path: Path) -> None:
    (tmp_path / "model_index.json").write_text('{"_class_name": "X", "unet": ["diffusers", "U"]}')
    (tmp_path / "unet").mkdir()
    save_file({"w": torch.zeros(2)}, tmp_path / "unet" / "diffusion_pytorch_model.safetensors")
    with pytest.raises(rt.NotFoundError, match="component"):
        StorageReader(tmp_path).read_metadata()
