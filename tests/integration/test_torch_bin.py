"""PyTorch ``.bin`` checkpoints read where they live: all-MiniLM-L6-v2's architecture saved by
``torch.save``, single and sharded as transformers shards, on the hub stand-in, over plain
HTTP and on disk; ``torch.load(weights_only=True)`` as the oracle; bytes and requests counted
on the servers."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.reading.torch_bin import AsyncTorchFile
from tests.hub_standin import HubStandIn
from tests.servers import Log
from tests.torch_bin_files import (
    MINILM_CONFIG,
    legacy_bin,
    loaded,
    minilm_bin,
    minilm_state,
    payload_bin,
    saved,
    shard_like_transformers,
    torch,
)

REPO = "sentence-transformers/all-MiniLM-L6-v2"
QUERY = "encoder.layer.3.attention.self.query.weight"
CONFIG = json.dumps(MINILM_CONFIG).encode()


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    return hub


def counts_by_dtype(state: dict[str, Any]) -> dict[str, int]:
    """torch's count of ``state`` per dtype, named as remotetensors names dtypes."""
    names = {torch.float32: "F32", torch.int64: "I64"}
    counts: dict[str, int] = {}
    for tensor in state.values():
        counts[names[tensor.dtype]] = counts.get(names[tensor.dtype], 0) + tensor.numel()
    return counts


def bytes_sent(log: Log, *files: bytes) -> int:
    """Bytes the hub and its CDN sent of ``files`` (their CDN paths are their sha256)."""
    import hashlib

    shas = [hashlib.sha256(data).hexdigest() for data in files]
    return sum(e.sent_bytes for e in log.entries if any(sha in e.path for sha in shas))


def test_minilm_bin_on_the_hub_counts_and_reads_as_torch_does(hub_env: HubStandIn) -> None:
    data = minilm_bin()
    hub_env.add(REPO, {"pytorch_model.bin": data, "config.json": CONFIG})
    reference = loaded(data)
    with rt.open_model(f"hf://{REPO}") as model:
        assert model.files == ["pytorch_model.bin"]
        assert model.num_parameters == sum(t.numel() for t in reference.values())
        assert model.parameter_count() == counts_by_dtype(reference)
        np.testing.assert_array_equal(model.get_tensor(QUERY), reference[QUERY].numpy())
        rows = model.get_slice("embeddings.word_embeddings.weight")[1000:1010]
        np.testing.assert_array_equal(
            rows, reference["embeddings.word_embeddings.weight"][1000:1010]
        )
    # The header and two reads moved a sliver of the 90 MB file.
    assert bytes_sent(hub_env.log, data) < len(data) / 5
    first = next(e for e in hub_env.log.entries if e.path.endswith("/pytorch_model.bin"))
    assert first.range == f"bytes=-{rt.ReadOptions().header_window_bytes}"  # the zip's end


def test_one_tensor_moves_its_bytes_and_the_header_only(hub_env: HubStandIn) -> None:
    data = minilm_bin()
    hub_env.add(REPO, {"pytorch_model.bin": data, "config.json": CONFIG})
    with rt.open_model(f"hf://{REPO}") as model:
        header = bytes_sent(hub_env.log, data)
        model.get_tensor(QUERY)
        info = model.tensors[QUERY]
    # One request for the tensor, with its storage's local header (checked on first read).
    moved = bytes_sent(hub_env.log, data) - header
    assert info.nbytes <= moved <= info.nbytes + 128
    assert moved + header < len(data) / 5


def test_sharded_bins_as_transformers_writes_them(hub_env: HubStandIn) -> None:
    state = minilm_state()
    files = shard_like_transformers(state, max_shard_bytes=30_000_000)
    shards = sorted(n for n in files if n.endswith(".bin"))
    assert len(shards) == 3
    hub_env.add("org/sharded-bin", {**files, "config.json": CONFIG})
    reference = {name: t for shard in shards for name, t in loaded(files[shard]).items()}
    with rt.open_model("hf://org/sharded-bin") as model:
        assert model.files == shards
        assert model.num_parameters == sum(t.numel() for t in reference.values())
        assert model.parameter_count() == counts_by_dtype(reference)
        assert model.metadata == json.loads(files["pytorch_model.bin.index.json"])["metadata"]
        last = "encoder.layer.5.output.dense.weight"
        assert model.tensors[last].file == shards[-1]
        np.testing.assert_array_equal(model.get_tensor(last), reference[last].numpy())
    total = sum(len(files[s]) for s in shards)
    assert bytes_sent(hub_env.log, *(files[s] for s in shards)) < total / 5


def test_safetensors_wins_when_a_repo_has_both(hub_env: HubStandIn) -> None:
    from safetensors.torch import save

    state = {"w": torch.ones(4, 4)}
    hub_env.add("org/both", {"model.safetensors": save(state), "pytorch_model.bin": saved(state)})
    with rt.open_model("hf://org/both") as model:
        assert model.files == ["model.safetensors"]
    assert not [e for e in hub_env.log.entries if "pytorch_model" in e.path]


def test_a_bin_named_explicitly_and_one_beside_no_safetensors(
    static: tuple[str, Log, Path],
) -> None:
    base, log, root = static
    state = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)}
    folder = root / "bin-folder"
    folder.mkdir()
    (folder / "pytorch_model.bin").write_bytes(saved(state))
    log.clear()
    with rt.open_model(f"{base}/bin-folder/pytorch_model.bin") as model:
        assert model.parameter_count() == {"BF16": 2, "F32": 6}
    bin_requests = [e.range for e in log.for_path("pytorch_model.bin")]
    assert bin_requests == ["bytes=-65536"]  # a small file: its end is all of it
    with rt.open_model(folder) as model:  # a local folder: discovered
        np.testing.assert_array_equal(model.get_tensor("a"), state["a"].numpy())
    log.clear()
    with rt.open_model(f"{base}/bin-folder/") as model:  # an HTTP folder: cannot be listed
        np.testing.assert_array_equal(model.get_tensor("a"), state["a"].numpy())
    # safetensors' two files, then in one round the pipeline's, the adapter's and PyTorch's
    assert log.for_path("pytorch_model.bin.index.json")
    assert log.for_path("model_index.json")
    assert log.for_path("adapter_config.json")


def test_a_torch_zip_under_another_name_is_read_from_its_start(
    static: tuple[str, Log, Path],
) -> None:
    base, log, root = static
    state = {f"w{i}": torch.full((256, 64), float(i)) for i in range(4)}
    (root / "weights.ckpt").write_bytes(saved(state))
    log.clear()
    with rt.safe_open(f"{base}/weights.ckpt") as f:
        assert f.keys() == sorted(state)
        np.testing.assert_array_equal(f.get_tensor("w2"), state["w2"].numpy())
    ranges = [e.range for e in log.for_path("weights.ckpt")]
    assert ranges[0] == "bytes=0-65535"  # the prefix: data.pkl is there
    assert str(ranges[1]).startswith("bytes=")  # then the zip's end
    assert len(ranges) == 3  # and the tensor


def test_views_of_one_storage_read_it_once(static: tuple[str, Log, Path]) -> None:
    base, log, root = static
    weight = torch.arange(64 * 1024, dtype=torch.float32).reshape(256, 256)
    state = {"w": weight, "wt": weight.t(), "row": weight[7], "other": torch.ones(1000)}
    data = saved(state)
    (root / "views.bin").write_bytes(data)
    reference = loaded(data)
    with rt.safe_open(f"{base}/views.bin") as f:
        log.clear()
        got = f.get_tensors(["w", "wt", "row"])
        moved = log.total_bytes
        for name, array in got.items():
            np.testing.assert_array_equal(array, reference[name].numpy())
            assert array.flags.c_contiguous
            assert array.flags.writeable
        np.testing.assert_array_equal(f.get_slice("wt")[3:5, 10:20], weight.t()[3:5, 10:20])
        np.testing.assert_array_equal(f.get_slice("row")[5:9], weight[7, 5:9])
    assert weight.numel() * 4 <= moved <= weight.numel() * 4 + 128  # the storage once


def test_a_local_header_that_disagrees_fails_the_read(tmp_path: Path) -> None:
    data = bytearray(saved({"a": torch.arange(16.0)}))
    storage = data.index(b"archive/data/0") - 30  # its local header
    (extra,) = struct.unpack_from("<H", data, storage + 28)
    struct.pack_into("<H", data, storage + 28, extra - 4)
    path = tmp_path / "tampered.bin"
    path.write_bytes(bytes(data))
    with rt.safe_open(path) as f, pytest.raises(rt.HeaderError, match="puts its bytes at"):
        f.get_tensor("a")


async def test_to_dask_after_the_storage_offsets_are_confirmed(tmp_path: Path) -> None:
    pytest.importorskip("dask")
    path = tmp_path / "d.bin"
    weight = torch.arange(12.0).reshape(3, 4)
    path.write_bytes(saved({"w": weight, "wt": weight.t()}))
    async with rt.open_async(path) as f:
        assert isinstance(f, AsyncTorchFile)
        with pytest.raises(rt.ShardNotOpenedError, match="confirm_offsets"):
            f.to_dask("w")
        await f.confirm_offsets(["w"])
        np.testing.assert_array_equal(np.asarray(f.to_dask("w")), weight.numpy())
        with pytest.raises(rt.LayoutError, match="strided view"):
            f.to_dask("wt")


def test_torch_is_not_needed_to_read_a_bin(tmp_path: Path) -> None:
    path = tmp_path / "pytorch_model.bin"
    weight = torch.arange(12.0).reshape(3, 4)
    path.write_bytes(saved({"w": weight, "wt": weight.t()}))
    program = (
        "import sys; sys.modules['torch'] = None  # import torch now fails\n"
        "import remotetensors as rt\n"
        f"m = rt.open_model({str(path)!r})\n"
        "print(m.num_parameters, m.get_tensor('wt').tolist())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == f"24 {weight.t().tolist()}"


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ("os.system", ["pickle global not allowed", ".system", "nothing is imported or called"]),
        ("legacy", ["legacy PyTorch file", "save it again"]),
    ],
)
def test_the_cli_refuses_a_hostile_or_legacy_bin_in_one_line(
    hub_env: HubStandIn, tmp_path: Path, payload: str, words: list[str]
) -> None:
    marker = tmp_path / "payload-ran"
    data = payload_bin(str(marker)) if payload == "os.system" else legacy_bin()
    hub_env.add("org/hostile", {"pytorch_model.bin": data})
    for command in ("params", "info", "ls"):
        result = subprocess.run(
            [sys.executable, "-m", "remotetensors", command, "hf://org/hostile"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HF_ENDPOINT": hub_env.endpoint},
        )
        assert result.returncode == 1, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("remotetensors: error: hf://org/hostile/pytorch_model.bin: ")
        assert all(word in lines[0] for word in words), lines[0]
        assert "Traceback" not in result.stderr
    assert not marker.exists()


def test_a_bin_repo_comes_back_from_the_cache(
    hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The zip's end, directory and pickle are kept as a safetensors header is (issue 30):
    # coming back costs the revision alone, and offline nothing.
    state = {"a": torch.arange(12.0).reshape(3, 4), "b": torch.ones(5, dtype=torch.bfloat16)}
    data = saved(state)
    hub_env.add("org/bin-cached", {"pytorch_model.bin": data, "config.json": b"{}"})
    counts = []
    for _ in range(2):
        hub_env.log.clear()
        with rt.open_model("hf://org/bin-cached") as model:
            counts.append(model.parameter_count())
        requests = [e.path for e in hub_env.log.entries]
    assert counts == [{"F32": 12, "BF16": 5}] * 2
    assert requests == ["/api/models/org/bin-cached/revision/main"]
    hub_env.log.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with rt.open_model("hf://org/bin-cached") as model:
        assert model.parameter_count() == counts[0]
        assert [e.path for e in hub_env.log.entries] == []
        with pytest.raises(rt.OfflineError):  # tensor data is never kept
            model.get_tensor("a")
