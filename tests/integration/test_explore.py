"""Exploring a model over HTTP on loopback: network counters that match what the server saw,
a tensor's card, statistics (whole and sampled) and pictures, comparisons that fetch only what
they need, and ``remotetensors tree``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.cli import main
from remotetensors.views.display import traffic_words
from remotetensors.views.explore import sample_runs
from tests.reference import raw_file, write_reference
from tests.servers import FaultyServer, Log, static_server

LAYERS = 12


def checkpoint(seed: int, *, drop: str | None = None, reshape: str | None = None) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    tensors: dict[str, Any] = {
        "model.embed_tokens.weight": rng.standard_normal((512, 64)).astype(np.float32)
    }
    for i in range(LAYERS):
        tensors[f"model.layers.{i}.mlp.up_proj.weight"] = rng.standard_normal((256, 64)).astype(
            np.float32
        )
        tensors[f"model.layers.{i}.norm.weight"] = np.ones(64, np.float32)
    tensors["model.layers.3.mlp.up_proj.weight"][0, :8] = 0.0
    if drop:
        del tensors[drop]
    if reshape:
        tensors[reshape] = np.zeros((2, 2), np.float32)
    return tensors


def write_sharded(root: Path, tensors: dict[str, Any]) -> None:
    root.mkdir(parents=True)
    names = sorted(tensors)
    weight_map = {}
    for s in range(2):
        file = f"model-{s + 1:05d}-of-00002.safetensors"
        part = {n: tensors[n] for n in names[s::2]}
        (root / file).write_bytes(write_reference(part))
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Log, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("explore")
    tensors = checkpoint(1)
    write_sharded(root / "a", tensors)
    other = checkpoint(1, drop="model.layers.11.norm.weight", reshape="model.layers.10.norm.weight")
    other["model.layers.0.mlp.up_proj.weight"] = other["model.layers.0.mlp.up_proj.weight"] * 2
    write_sharded(root / "b", other)
    with static_server(root) as (url, log):
        yield url, log, tensors


def received(log: Log) -> int:
    return sum(e.sent_bytes for e in log.entries if e.status in (200, 206))


def test_counters_match_what_the_server_saw(served: tuple[str, Log, dict[str, Any]]) -> None:
    url, log, tensors = served
    log.clear()
    with rt.open_model(f"{url}/a/") as model:
        # Discovery: probes that found nothing count too (as requests without bytes).
        assert model.traffic.requests == len(log.entries)
        assert model.traffic.bytes == received(log)
        for name, traffic in model.traffic_by_file.items():
            assert traffic.requests == sum(e.path == f"/a/{name}" for e in log.entries), name
        before = model.traffic
        name = "model.layers.5.mlp.up_proj.weight"
        log.clear()
        np.testing.assert_array_equal(model.get_tensor(name), tensors[name])
        after = model.traffic
        assert after.requests - before.requests == len(log.entries) == 1
        assert after.bytes - before.bytes == received(log) == tensors[name].nbytes
        assert after.seconds >= before.seconds
        html = model._repr_html_()
        assert "network so far" in html
        assert traffic_words(after) in html  # "7 requests, 45.2 kB, 0.01 s"
        shard = model.tensors[name].file
        assert shard is not None
        assert shard in html
        # One file opened alone counts the same way.
        log.clear()
        with rt.safe_open(f"{url}/a/{shard}") as f:
            f.get_tensor(name)
            assert f.traffic.requests == len(log.entries) == 2  # header window, tensor
            assert f.traffic.bytes == received(log)


def test_tensor_card_stats_and_pictures(served: tuple[str, Log, dict[str, Any]]) -> None:
    url, log, tensors = served
    name = "model.layers.3.mlp.up_proj.weight"
    reference = tensors[name]
    with rt.open_model(f"{url}/a/") as model:
        view = model.tensor(name)
        info = model.tensors[name]
        card = view._repr_html_()
        for part in (name, "F32", "[256, 64]", f"[{info.start:,}, {info.end:,})", info.file):
            assert part is not None
            assert part in card
        assert "byte range" in repr(view)
        log.clear()
        stats = view.stats()
        assert stats.sample is None
        assert stats.count == reference.size
        assert stats.min == pytest.approx(float(reference.min()))
        assert stats.max == pytest.approx(float(reference.max()))
        assert stats.mean == pytest.approx(float(reference.astype(np.float64).mean()))
        assert stats.std == pytest.approx(float(reference.astype(np.float64).std()))
        assert stats.zeros == pytest.approx(8 / reference.size)
        assert (stats.nan, stats.inf) == (0, 0)
        assert sum(stats.histogram) == reference.size
        assert stats.histogram_png().startswith(b"\x89PNG")
        assert "data:image/png;base64," in stats._repr_html_()
        assert received(log) == reference.nbytes
        # Over the limit: a stated sample of rows, and about that many bytes fetched.
        log.clear()
        sampled = view.stats(max_bytes=8 * 1024)
        assert sampled.sample is not None
        assert "values, in" in sampled.sample
        assert sampled.count * 4 <= 8 * 1024
        assert received(log) <= 8 * 1024
        assert "sample:" in sampled._repr_html_()
        heat = view.heatmap(rows=slice(0, 16), cols=slice(0, 32))
        np.testing.assert_array_equal(heat.values, reference[0:16, 0:32])
        assert heat.png().startswith(b"\x89PNG")
        with pytest.raises(rt.TensorNotFoundError):
            model.tensor("model.layers.99.mlp.up_proj.weight")


def test_heatmap_defaults_fit_any_shape(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    tensors = {
        "router": rng.standard_normal((8, 4096)).astype(np.float32),  # a Mixtral router
        "bias": rng.standard_normal(5).astype(np.float32),
        "cube": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "empty": np.zeros((0, 3), np.float32),
        "none": np.zeros(0, np.float32),
        "empty_lead": np.zeros((0, 2, 3), np.float32),
    }
    (tmp_path / "model.safetensors").write_bytes(write_reference(tensors))
    with static_server(tmp_path) as (url, log), rt.open_model(f"{url}/") as model:
        log.clear()
        router = model.tensor("router").heatmap()
        np.testing.assert_array_equal(router.values, tensors["router"][:8, :64])
        assert router.region == "[0:8, 0:64]"
        assert received(log) <= 8 * 4096 * 4  # the rows shown, at most
        np.testing.assert_array_equal(
            model.tensor("bias").heatmap().values, tensors["bias"].reshape(1, 5)
        )
        np.testing.assert_array_equal(model.tensor("cube").heatmap().values, tensors["cube"][0])
        log.clear()
        for name, shape in (("empty", (0, 3)), ("none", (1, 0)), ("empty_lead", (0, 3))):
            heat = model.tensor(name).heatmap()
            assert heat.values.shape == shape, name
            assert "empty, nothing to draw" in heat._repr_html_()
        assert log.entries == []  # an empty tensor has no bytes to fetch


def sampled_tensors(faulty: FaultyServer) -> tuple[dict[str, str], np.ndarray[Any, Any]]:
    """A [4, 1000, 1000] F32 stack of experts and an F4 [20002, 3] tensor (rows of 12 bits),
    one file each: their URLs, and the experts."""
    rng = np.random.default_rng(8)
    experts = rng.standard_normal((4, 1000, 1000)).astype(np.float32)
    codes = rng.integers(0, 16, 20002 * 3).astype(np.uint8)
    packed = bytes((codes[0::2] | (codes[1::2] << 4)).tolist())
    f4 = json.dumps({"f4": {"dtype": "F4", "shape": [20002, 3], "data_offsets": [0, len(packed)]}})
    urls = {
        "experts": faulty.put("experts.safetensors", write_reference({"experts": experts})),
        "f4": faulty.put("f4.safetensors", raw_file(f4, packed, pad=True)),
    }
    return urls, experts


@pytest.mark.parametrize(("name", "budget"), [("experts", 64 * 1024), ("f4", 2048)])
def test_sampled_stats_fetch_about_max_bytes_inside_rows(
    faulty: FaultyServer, name: str, budget: int
) -> None:
    # Before, stats(max_bytes=64 KiB) of a [4, 1000, 1000] F32 stack fetched one whole expert
    # (4 MB), and an F4 [20002, 3] tensor raised SliceError (row blocks at odd rows).
    urls, _ = sampled_tensors(faulty)
    with rt.open_model(urls[name], options=rt.ReadOptions(header_window_bytes=1024)) as model:
        view = model.tensor(name)
        faulty.log.clear()
        stats = view.stats(max_bytes=budget)
        assert 0 < received(faulty.log) <= budget
        assert stats.count * view.info.dtype_info.bits <= budget * 8
        assert stats.sample is not None
        assert f"of {view.info.num_elements:,} values" in stats.sample


def test_sampled_stats_summarise_exactly_the_runs_read(faulty: FaultyServer) -> None:
    urls, experts = sampled_tensors(faulty)
    with rt.open_model(urls["experts"]) as model:
        sample = model.tensor("experts").stats(max_bytes=64 * 1024)
    runs = sample_runs(experts.shape, 32, 64 * 1024)
    assert runs is not None
    taken = np.concatenate([experts[key].reshape(-1) for key in runs.keys]).astype(np.float64)
    assert sample.count == taken.size
    assert (sample.min, sample.max) == (float(taken.min()), float(taken.max()))
    assert sample.mean == pytest.approx(float(taken.mean()))


def test_pictures_without_matplotlib_say_how_to_install(
    served: tuple[str, Log, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _, _ = served
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with rt.open_model(f"{url}/a/") as model:
        stats = model.tensor("model.layers.0.norm.weight").stats()
    assert "pip install matplotlib" in stats._repr_html_()
    assert stats.mean == 1.0
    with pytest.raises(rt.MissingDependencyError, match="pip install matplotlib"):
        stats.histogram_png()


def test_compare_two_models_fetches_only_the_chosen_tensors(
    served: tuple[str, Log, dict[str, Any]],
) -> None:
    url, log, tensors = served
    with rt.open_model(f"{url}/a/") as a, rt.open_model(f"{url}/b/") as b:
        log.clear()
        structure = rt.compare(a, b)
        assert log.entries == []  # the headers say it all
        assert structure.only_in_a == ("model.layers.11.norm.weight",)
        assert structure.only_in_b == ()
        assert structure.changed == (("model.layers.10.norm.weight", "F32 [64]", "F32 [2, 2]"),)
        chosen = rt.compare(a, b, names="model.layers.[01].mlp.*")
        fetched = {e.path for e in log.entries}
        wanted = 2 * sum(tensors[f"model.layers.{i}.mlp.up_proj.weight"].nbytes for i in (0, 1))
        # Only those bytes; a few of them may already be held from a header window.
        assert wanted - 4 * 65536 < received(log) <= wanted
        assert len(fetched) <= 4  # two shards of each model at most
        by_name = {v.name: v for v in chosen.values}
        doubled = by_name["model.layers.0.mlp.up_proj.weight"]
        assert doubled.relative == pytest.approx(0.5)  # |a - 2a| / |2a|
        assert doubled.cosine == pytest.approx(1.0)
        same = by_name["model.layers.1.mlp.up_proj.weight"]
        assert (same.relative, same.max_abs) == (0.0, 0.0)
        assert "cosine similarity" in repr(chosen)
        # Two tensors of one model: views are fetched, arrays compared as they are.
        pair = rt.compare(
            a.tensor("model.layers.0.mlp.up_proj.weight"),
            a.tensor("model.layers.1.mlp.up_proj.weight"),
        )
        (value,) = pair.values
        x = tensors["model.layers.0.mlp.up_proj.weight"].astype(np.float64).ravel()
        y = tensors["model.layers.1.mlp.up_proj.weight"].astype(np.float64).ravel()
        assert value.cosine == pytest.approx(x @ y / np.linalg.norm(x) / np.linalg.norm(y))
        assert "cosine similarity" in pair._repr_html_()
        with pytest.raises(TypeError):
            rt.compare(a, np.zeros(3))
        with pytest.raises(ValueError, match="shapes differ"):
            rt.compare(np.zeros(3), np.zeros(4))


def test_tree_command(
    served: tuple[str, Log, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, _, tensors = served
    assert main(["tree", f"{url}/a/", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tensors"] == len(tensors)
    (layers,) = [i for i in data["items"] if "section" in i]
    assert layers["section"] == f"model.layers.[0-{LAYERS - 1}]"
    assert layers["count"] == LAYERS
    assert layers["tensors_each"] == 2
    assert data["network"]["model.safetensors.index.json"]["requests"] == 1
    assert main(["tree", f"{url}/a/"]) == 0  # piped: plain text
    text = capsys.readouterr().out
    assert f"model.layers.[0-{LAYERS - 1}] \u2014 {LAYERS} \u00d7 (2 tensors" in text
    assert "network so far:" in text
    # On a terminal: a rich tree, the same folded sections.
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["tree", f"{url}/a/"]) == 0
    shown = capsys.readouterr().out
    assert f"model.layers.[0-{LAYERS - 1}]" in shown
    assert f"{LAYERS} \u00d7 (2 tensors" in shown
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert main(["ls", f"{url}/a/", "--filter", "model.layers.*.norm.weight"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == [f"model.layers.{i}.norm.weight" for i in range(LAYERS)]
