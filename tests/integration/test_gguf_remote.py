"""GGUF files over HTTP, S3 (moto), the hub stand-in and local disks, against gguf.GGUFReader:
same metadata, same tensor infos, dequantized tensors equal to the package's; request counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.cli import main
from remotetensors.formats.gguf import parse_header
from tests.gguf_files import (
    Q,
    ReferenceView,
    quantized,
    reference_view,
    sample_tensors,
    vocabulary,
    write_gguf,
)
from tests.hub_standin import HubStandIn
from tests.integration.test_models import put_s3
from tests.servers import Log


@pytest.fixture(scope="module")
def gguf_root(static: tuple[str, Log, Path]) -> dict[str, Any]:
    """Files in the static server's root: one model, a split model and a 10 MB header."""
    base, log, root = static
    single = write_gguf(root / "model.gguf")[0]
    (root / "split").mkdir()
    parts = write_gguf(root / "split" / "m.gguf", split_max_tensors=5)
    tensors = {**sample_tensors(), "big": (np.ones((2048, 2048), np.float16), None)}
    big = write_gguf(
        root / "big.gguf", tensors, vocab_size=120_000, merges=130_000, every_value=False
    )[0]
    return {
        "base": base,
        "log": log,
        "root": root,
        "single": single,
        "parts": parts,
        "big": big,
        "ref": reference_view(single),
    }


def check_file(f: rt.safe_open, ref: ReferenceView, data: bytes) -> None:
    assert f.index.format == "gguf"
    assert f.metadata() == ref.metadata
    assert f.offset_keys() == list(ref.tensors)
    assert f.keys() == sorted(ref.tensors)
    for name, t in ref.tensors.items():
        info = f.index.tensors[name]
        assert (info.dtype, info.shape, info.start, info.nbytes) == (
            t.type_name,
            t.shape,
            t.start,
            t.nbytes,
        )
        got = f.get_tensor(name)
        assert got.shape == t.shape
        if t.type_name == "BF16":  # native dtype; the package gives float32 of the same values
            assert got.dtype == rt.DTYPES["BF16"].numpy
            np.testing.assert_array_equal(got.astype(np.float32), t.values)
        else:
            assert got.dtype == t.values.dtype, name
            np.testing.assert_array_equal(got, t.values)
        assert f.get_tensor_bytes(name).tobytes() == data[t.start : t.start + t.nbytes]


def check_slices(f: rt.safe_open, ref: ReferenceView) -> None:
    embd = ref.tensors["token_embd.weight"].values
    np.testing.assert_array_equal(f.get_slice("token_embd.weight")[5:9], embd[5:9])
    np.testing.assert_array_equal(f.get_slice("token_embd.weight")[3, 10:20], embd[3, 10:20])
    np.testing.assert_array_equal(f.get_slice("token_embd.weight")[::7, -3:], embd[::7, -3:])
    down = ref.tensors["blk.0.ffn_down.weight"].values
    np.testing.assert_array_equal(f.get_slice("blk.0.ffn_down.weight")[1:, 2, :8], down[1:, 2, :8])
    np.testing.assert_array_equal(f.get_slice("blk.0.ffn_down.weight")[...], down)
    norm = ref.tensors["blk.0.attn_norm.weight"].values
    np.testing.assert_array_equal(f.get_slice("blk.0.attn_norm.weight")[10:20], norm[10:20])
    with pytest.raises(rt.SliceError):
        f.get_slice("token_embd.weight")[40]


@pytest.mark.parametrize("where", ["http", "local", "file-url", "s3"])
def test_single_file_equals_the_reference(
    gguf_root: dict[str, Any], where: str, request: pytest.FixtureRequest
) -> None:
    single: Path = gguf_root["single"]
    data = single.read_bytes()
    options: dict[str, Any] = {}
    if where == "s3":
        endpoint = request.getfixturevalue("moto_endpoint")
        put_s3(endpoint, "gguf-bucket", {"model.gguf": data})
        location = "s3://gguf-bucket/model.gguf"
        options["storage_options"] = {
            "endpoint_url": endpoint,
            "key": "testing",
            "secret": "testing",
            "skip_instance_cache": True,
        }
    else:
        location = {
            "http": f"{gguf_root['base']}/model.gguf",
            "local": str(single),
            "file-url": single.as_uri(),
        }[where]
    with rt.safe_open(location, **options) as f:
        check_file(f, gguf_root["ref"], data)
        check_slices(f, gguf_root["ref"])


def test_a_small_file_takes_one_request(gguf_root: dict[str, Any]) -> None:
    log: Log = gguf_root["log"]
    log.clear()
    with rt.safe_open(f"{gguf_root['base']}/model.gguf") as f:
        assert len(log.for_path("model.gguf")) == 1
        f.get_tensor("output.weight")  # the 31 kB file came whole in the first window
        assert len(log.for_path("model.gguf")) == 1


@pytest.mark.parametrize(
    ("count", "kind"),
    [(2**25, rt.HeaderErrorKind.TOO_LARGE), (2**20, rt.HeaderErrorKind.TRUNCATED)],
)
def test_a_hostile_header_over_http_fails_before_any_big_read(
    gguf_root: dict[str, Any], count: int, kind: rt.HeaderErrorKind
) -> None:
    log: Log = gguf_root["log"]
    root: Path = gguf_root["root"]
    # A 4 MB file whose only metadata pair claims `count` strings (8 bytes each at least):
    # 256 MiB is over the header cap, 8 MiB is past the end of the file.
    head = (
        b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little")
    )
    pair = (1).to_bytes(8, "little") + b"k" + (9).to_bytes(4, "little")
    pair += (8).to_bytes(4, "little") + count.to_bytes(8, "little")
    (root / "hostile.gguf").write_bytes(head + pair + b"\1" * 4_000_000)
    log.clear()
    with pytest.raises(rt.HeaderError) as err:
        rt.safe_open(f"{gguf_root['base']}/hostile.gguf")
    assert err.value.kind is kind
    assert "hostile.gguf" in str(err.value)
    assert len(log.for_path("hostile.gguf")) == 1
    assert log.total_bytes <= 65536


def test_torch_tensors(gguf_root: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    ref: ReferenceView = gguf_root["ref"]
    with rt.safe_open(gguf_root["single"], framework="pt") as f:
        got = f.get_tensor("blk.0.ffn_up.weight")
        assert got.dtype == torch.float32
        np.testing.assert_array_equal(got.numpy(), ref.tensors["blk.0.ffn_up.weight"].values)
        assert f.get_tensor("blk.0.ffn_gate.weight").dtype == torch.bfloat16
        embd = ref.tensors["token_embd.weight"].values
        for key in ((slice(2, 4),), (Ellipsis,), (1, slice(0, 5))):
            part = f.get_slice("token_embd.weight")[key]
            assert isinstance(part, torch.Tensor)
            np.testing.assert_array_equal(part.numpy(), embd[key])


def test_s3_prefix_with_gguf_files(gguf_root: dict[str, Any], s3_env: str) -> None:
    single = gguf_root["single"].read_bytes()
    options = {"skip_instance_cache": True}
    put_s3(s3_env, "gguf-one", {"llama/model-Q8_0.gguf": single, "llama/README.md": b"x"})
    with rt.open_model("s3://gguf-one/llama/", storage_options=options) as model:
        assert model.files == ["model-Q8_0.gguf"]
        assert model.index.files["model-Q8_0.gguf"].format == "gguf"
    put_s3(s3_env, "gguf-two", {"m/a.gguf": single, "m/b.gguf": single})
    with pytest.raises(rt.AmbiguousModelError) as err:
        rt.open_model("s3://gguf-two/m/", storage_options=options)
    assert err.value.choices == ["a.gguf", "b.gguf"]


def test_quantized_row_slices_fetch_whole_rows_only(gguf_root: dict[str, Any]) -> None:
    log: Log = gguf_root["log"]
    rng = np.random.default_rng(5)
    path = gguf_root["root"] / "rows.gguf"
    write_gguf(path, {"w": (quantized(rng, Q.Q4_K, (256, 2048)), Q.Q4_K)}, vocab_size=0)
    expected = reference_view(path).tensors["w"].values
    with rt.safe_open(
        f"{gguf_root['base']}/rows.gguf", options=rt.ReadOptions(max_gap_bytes=0)
    ) as f:
        info = f.index.tensors["w"]
        row_bytes = info.nbytes // 256  # 8 blocks of 144 bytes
        log.clear()
        rows = f.get_slice("w")[[200, 201, 240]]
        np.testing.assert_array_equal(rows, expected[[200, 201, 240]])
        assert sorted(log.ranges("rows.gguf")) == [
            (info.start + 200 * row_bytes, info.start + 202 * row_bytes),
            (info.start + 240 * row_bytes, info.start + 241 * row_bytes),
        ]
        log.clear()
        cut = f.get_slice("w")[250, 100:110]  # one whole row fetched, cut in memory
        np.testing.assert_array_equal(cut, expected[250, 100:110])
        assert log.ranges("rows.gguf") == [
            (info.start + 250 * row_bytes, info.start + 251 * row_bytes)
        ]


def test_quantized_slices_follow_numpys_rules(gguf_root: dict[str, Any]) -> None:
    # Before, [None, 0] of an [8, 64] Q8_0 tensor gave column 0 with shape (1, 8): the first
    # item was taken for the rows whatever it was. numpy gives row 0 with shape (1, 64).
    log: Log = gguf_root["log"]
    rng = np.random.default_rng(13)
    path = gguf_root["root"] / "numpy.gguf"
    tensors = {
        "q8": (quantized(rng, Q.Q8_0, (8, 64)), Q.Q8_0),
        "q4k": (quantized(rng, Q.Q4_K, (3, 4, 256)), Q.Q4_K),
        "v": (quantized(rng, Q.Q8_0, (256,)), Q.Q8_0),
        "rows": (quantized(rng, Q.Q8_0, (64, 8192)), Q.Q8_0),
    }
    write_gguf(path, tensors, vocab_size=0)
    ref = reference_view(path)
    mask = np.zeros((8, 64), bool)
    mask[3, 5] = mask[6, 1] = mask[6, 2] = True
    cases: list[tuple[str, Any]] = [
        ("q8", (None, 0)),
        ("q8", (0, None)),
        ("q8", (Ellipsis, None, 3)),
        ("q8", mask),
        ("q8", mask[:, 0]),
        ("q8", (slice(1, 3), [0, 1])),
        ("q8", (3, 5)),
        ("q8", (False, [0])),
        ("q4k", (None, slice(None, None, -1), [1, 2])),
        ("q4k", (Ellipsis, 7)),
        ("v", (None, slice(200, 10, -9))),
        ("v", np.arange(256) % 5 == 0),
    ]
    url = f"{gguf_root['base']}/numpy.gguf"
    with rt.safe_open(url, options=rt.ReadOptions(header_window_bytes=4096)) as f:
        for name, key in cases:
            expected = ref.tensors[name].values[key]
            got = f.get_slice(name)[key]
            assert got.shape == expected.shape, (name, key)
            np.testing.assert_array_equal(got, expected)
        with pytest.raises(rt.SliceError, match="boolean index did not match"):
            f.get_slice("q8")[np.ones(3, bool)]
        info = f.index.tensors["rows"]
        row_bytes = info.nbytes // 64
        big_mask = np.zeros((64, 8192), bool)
        big_mask[9, 5] = big_mask[40, 1] = True
        row_cases: list[tuple[Any, list[int]]] = [((None, 5), [5]), (big_mask, [9, 40])]
        for key, rows in row_cases:
            log.clear()
            got = f.get_slice("rows")[key]
            np.testing.assert_array_equal(got, ref.tensors["rows"].values[key])
            assert sorted(log.ranges("numpy.gguf")) == [
                (info.start + r * row_bytes, info.start + (r + 1) * row_bytes) for r in rows
            ]


def test_a_10_mb_header_takes_three_requests(gguf_root: dict[str, Any]) -> None:
    big: Path = gguf_root["big"]
    log: Log = gguf_root["log"]
    local = parse_header(big.read_bytes())
    assert local.header_end > 9_000_000
    log.clear()
    with rt.safe_open(f"{gguf_root['base']}/big.gguf") as f:
        requests = log.for_path("big.gguf")
        assert len(requests) <= 3
        fetched = log.total_bytes
        metadata = f.metadata()
        assert metadata == dict(local.metadata)
        assert metadata["tokenizer.ggml.tokens"] == tuple(vocabulary(120_000))
        assert f.index.data_offset == local.data_start
    # The header, and less than a third more: never the whole file's tensor data.
    assert local.header_end <= fetched <= local.header_end * 1.3 + 65536
    assert big.stat().st_size - fetched > 6_000_000  # most of the 8 MB tensor stayed there


@pytest.mark.parametrize("where", ["http", "local", "hub"])
def test_split_files_open_as_one_model(
    gguf_root: dict[str, Any], where: str, hub: HubStandIn
) -> None:
    parts: list[Path] = gguf_root["parts"]
    assert len(parts) == 3
    refs = {p.name: reference_view(p) for p in parts}
    if where == "hub":
        hub.add("org/split", {f"q4/{p.name}": p.read_bytes() for p in parts})
        location = f"hf://org/split/q4/{parts[1].name}"  # any part names the whole set
        env = {"HF_ENDPOINT": hub.endpoint}
    else:
        location = {
            "http": f"{gguf_root['base']}/split/{parts[0].name}",
            "local": str(parts[0]),
        }[where]
        env = {}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        with rt.open_model(location, token=False) as model:
            assert model.files == [p.name for p in parts]
            expected = {n: (r, t) for r in refs.values() for n, t in r.tensors.items()}
            assert model.keys() == sorted(expected)
            assert model.metadata == refs[parts[0].name].metadata
            counts: dict[str, int] = {}
            for _, t in expected.values():
                counts[t.type_name] = counts.get(t.type_name, 0) + t.values.size
            assert model.parameter_count() == dict(sorted(counts.items()))
            assert model.nbytes == sum(t.nbytes for _, t in expected.values())
            got = model.get_tensors(list(expected))
            for name, (_, t) in expected.items():
                np.testing.assert_array_equal(np.asarray(got[name], dtype=t.values.dtype), t.values)
            assert model.tensors["output.weight"].file == parts[2].name


def test_hub_repo_with_several_gguf_files(
    gguf_root: dict[str, Any], hub: HubStandIn, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    single = gguf_root["single"].read_bytes()
    parts = gguf_root["parts"]
    files = {"README.md": b"# model", "m-Q8_0.gguf": single, "m-Q4_K_M.gguf": single}
    files.update({f"big/{p.name}": p.read_bytes() for p in parts})
    commit = hub.add("org/many", files)
    with pytest.raises(rt.AmbiguousModelError) as err:
        rt.open_model("hf://org/many", token=False)
    message = str(err.value)
    for name in ("m-Q8_0.gguf", "m-Q4_K_M.gguf", f"big/{parts[0].name} (3 parts)"):
        assert name in message
    assert err.value.choices == [f"big/{parts[0].name}", "m-Q4_K_M.gguf", "m-Q8_0.gguf"]
    # Listed at the commit the first answers named (not at main, which may move meanwhile).
    assert any(f"/api/models/org/many/tree/{commit}" in e.path for e in hub.log.entries)
    # The command line names one with --file.
    status = main(["params", "hf://org/many", "--file", "m-Q8_0.gguf", "--json"])
    out = capsys.readouterr().out
    assert status == 0
    assert json.loads(out)["by_dtype"]["Q8_0"] == 40 * 64
    status = main(["params", "hf://org/many"])
    assert status == 1
    assert "m-Q4_K_M.gguf" in capsys.readouterr().err
    # A repo with one GGUF model opens it without naming it.
    hub.add("org/one", {"README.md": b"x", "only.gguf": single})
    with rt.open_model("hf://org/one", token=False) as model:
        assert model.files == ["only.gguf"]


def test_hub_listing_follows_pages(
    gguf_root: dict[str, Any], hub: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tests.hub_standin

    monkeypatch.setattr(tests.hub_standin, "TREE_PAGE", 2)
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    single = gguf_root["single"].read_bytes()
    hub.add("org/paged", {f"m{i}.gguf": single for i in range(5)})
    with pytest.raises(rt.AmbiguousModelError) as err:
        rt.open_model("hf://org/paged", token=False)
    assert err.value.choices == [f"m{i}.gguf" for i in range(5)]
    assert len([e for e in hub.log.entries if "/tree/" in e.path]) == 3


def test_a_gguf_file_of_a_one_word_hub_repo(
    gguf_root: dict[str, Any], hub: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``.gguf`` names a file as ``.safetensors`` does: gpt2 is the repo, model.gguf its file.
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    hub.add("gpt2", {"model.gguf": gguf_root["single"].read_bytes()})
    with rt.safe_open("hf://gpt2/model.gguf", token=False) as f:
        assert f.keys() == sorted(gguf_root["ref"].tensors)
    with rt.open_model("hf://gpt2/model.gguf", token=False) as model:
        assert model.files == ["model.gguf"]


def test_local_folder_with_one_gguf_model(gguf_root: dict[str, Any]) -> None:
    folder = gguf_root["parts"][0].parent
    with rt.open_model(folder) as model:
        assert len(model.files) == 3
        assert model.index.files[model.files[0]].format == "gguf"


def test_cli_on_gguf(gguf_root: dict[str, Any], capsys: Any) -> None:
    url = f"{gguf_root['base']}/model.gguf"
    ref: ReferenceView = gguf_root["ref"]
    assert main(["params", url, "--json"]) == 0
    params = json.loads(capsys.readouterr().out)
    assert params["total"] == sum(t.values.size for t in ref.tensors.values())
    assert params["bits_per_weight"]["Q4_K"] == 4.5
    assert params["bits_per_weight"]["Q8_0"] == 8.5
    assert main(["params", url]) == 0
    assert "bits/weight" in capsys.readouterr().out
    assert main(["info", url]) == 0
    out = capsys.readouterr().out
    for text in ("gguf", "architecture: llama", "context:      4096", "Q4_K_M", "300 tokens"):
        assert text in out
    assert vocabulary(300)[42] not in out
    assert main(["info", url, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    summary = info["files"]["model.gguf"]["metadata"]
    assert summary["tokenizer_size"] == 300
    assert summary["metadata"]["t.u64"] == 2**64 - 1
    assert "tokenizer.ggml.tokens" not in summary["metadata"]
    assert main(["ls", url, "--filter", "blk.0.ffn_*", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {e["dtype"] for e in listed} == {"Q4_K", "Q6_K", "BF16"}
    out_file = gguf_root["root"] / "rows.npy"
    assert main(["get", url, "output.weight", "--slice", "2:5", "-o", str(out_file)]) == 0
    np.testing.assert_array_equal(np.load(out_file), ref.tensors["output.weight"].values[2:5])


def test_html_view_of_a_gguf_model(gguf_root: dict[str, Any]) -> None:
    with rt.open_model(gguf_root["single"]) as model:
        html = model._repr_html_()
    assert "Q4_K" in html
    assert "blk.0" in html
    assert "24.4K parameters" in html


def test_missing_gguf_package_is_a_clear_error(
    gguf_root: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gguf", None)
    with rt.safe_open(gguf_root["single"]) as f:
        assert f.get_tensor("blk.0.attn_v.weight").dtype == np.float16  # no package needed
        raw = f.get_tensor_bytes("blk.0.ffn_up.weight")
        assert raw.size == f.index.tensors["blk.0.ffn_up.weight"].nbytes
        with pytest.raises(rt.MissingDependencyError, match=r"remotetensors\[gguf\]"):
            f.get_tensor("blk.0.ffn_up.weight")


async def test_open_async_and_a_split_set_that_does_not_add_up(
    gguf_root: dict[str, Any], tmp_path: Path
) -> None:
    ref: ReferenceView = gguf_root["ref"]
    async with rt.open_async(f"{gguf_root['base']}/model.gguf") as f:
        assert f.index.format == "gguf"
        got = await f.get_tensor("output.weight")
        np.testing.assert_array_equal(got, ref.tensors["output.weight"].values)
        rows = await f.get_slice("output.weight")[1:3]
        np.testing.assert_array_equal(rows, ref.tensors["output.weight"].values[1:3])
    # Two of three parts renamed as a set of two: split.count (3) disagrees.
    parts = gguf_root["parts"]
    for i in (0, 1):
        (tmp_path / f"m-{i + 1:05d}-of-00002.gguf").write_bytes(parts[i].read_bytes())
    with pytest.raises(rt.HeaderError) as err:
        rt.open_model(tmp_path / "m-00001-of-00002.gguf")
    assert err.value.kind is rt.HeaderErrorKind.INVALID_METADATA
    assert "split.count says 3" in str(err.value)


def test_to_dask_chunks_plain_types_and_names_block_types(gguf_root: dict[str, Any]) -> None:
    pytest.importorskip("dask.array", reason="the dask extra is not installed")
    with rt.safe_open(gguf_root["single"]) as f:
        plain = f.to_dask("blk.0.ffn_gate.weight", chunk_bytes=64)  # 2 rows a chunk
        assert plain.numblocks[0] == 4
        computed = plain.compute(scheduler="threads")  # type: ignore[no-untyped-call]
        np.testing.assert_array_equal(computed, f.get_tensor("blk.0.ffn_gate.weight"))
        with pytest.raises(rt.UnsupportedDtypeError, match="use get_tensor"):
            f.to_dask("blk.0.ffn_up.weight")
