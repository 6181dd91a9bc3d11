"""Diffusers pipelines open as one model of their components' models.

The pipeline is laid out as diffusers writes it (:mod:`tests.pipelines`: ``model_index.json``,
text encoders saved by transformers, one of them sharded with its own index, diffusers models
under diffusers' names, one sharded, every model also as the ``fp16`` variant, a scheduler and
tokenizers without weights). The oracle of every count is the sum of the elements of the
tensors in the component's files, read by the reference safetensors reader; which files make a
component is found from their names (:func:`tests.pipelines.weight_files`), as the libraries'
loaders find them.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.cli.app import main
from tests.hub_standin import HubStandIn
from tests.integration.test_models import put_s3, serve
from tests.pipelines import (
    WEIGHTED,
    WITHOUT_WEIGHTS,
    count_of,
    sdxl_pipeline,
    tensors_of,
    weight_files,
)
from tests.servers import FaultyServer


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """The pipeline on disk (its root) and every file of it (relative path -> bytes)."""
    root = tmp_path_factory.mktemp("sdxl")
    return root, sdxl_pipeline(root)


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return hub


def by_dtype(tensors: dict[str, np.ndarray]) -> dict[str, int]:
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    counts: dict[str, int] = {}
    for t in tensors.values():
        counts[names[t.dtype]] = counts.get(names[t.dtype], 0) + math.prod(t.shape)
    return dict(sorted(counts.items()))


def check_pipeline(m: rt.Model, files: dict[str, bytes], variant: str | None = None) -> None:
    """Each component's count, dtypes and files, and the total, against its files' tensors."""
    assert list(m.components) == list(WEIGHTED)
    everything: dict[str, np.ndarray] = {}
    for name in WEIGHTED:
        names = weight_files(files, name, variant)
        component = m.components[name]
        assert component.num_parameters == count_of(files, names), name
        assert component.true_count.exact
        assert component.files == [n.removeprefix(f"{name}/") for n in names]
        tensors = tensors_of(files, names)
        assert component.parameter_count() == by_dtype(tensors)
        everything.update({f"{name}/{t}": a for t, a in tensors.items()})
    assert m.num_parameters == sum(
        count_of(files, weight_files(files, n, variant)) for n in WEIGHTED
    )
    assert m.parameter_count() == by_dtype(everything)
    assert sorted(m.tensors) == sorted(everything)
    assert m.pipeline is not None
    assert m.pipeline.class_name == "StableDiffusionXLPipeline"
    assert m.adapter is None


def test_a_pipeline_folder_opens_as_its_components(
    written: tuple[Path, dict[str, bytes]],
) -> None:
    root, files = written
    with rt.open_model(root) as m:
        check_pipeline(m, files)
        # Tensors are read from the component that holds them, as the reference reads them.
        vae = tensors_of(files, weight_files(files, "vae"))
        got = m.get_tensors("vae/*")
        assert list(got) == sorted(f"vae/{n}" for n in vae)
        for name, array in got.items():
            np.testing.assert_array_equal(array, vae[name.removeprefix("vae/")])
        encoder = tensors_of(files, weight_files(files, "text_encoder_2"))
        name = sorted(encoder)[0]
        np.testing.assert_array_equal(m.get_tensor(f"text_encoder_2/{name}"), encoder[name])
        rows = m.get_slice(f"text_encoder_2/{name}")[1:3]
        np.testing.assert_array_equal(rows, encoder[name][1:3])
        # A component is a model of its own files.
        unet = m.components["unet"]
        assert unet.files == ["diffusion_pytorch_model.safetensors"]
        assert unet.config == {"_class_name": "UNet2DConditionModel"}


def test_a_pipeline_on_the_hub_reads_nothing_of_the_components_without_weights(
    written: tuple[Path, dict[str, bytes]], hub_env: HubStandIn
) -> None:
    _, files = written
    hub_env.add("org/sdxl", files)
    with rt.open_model("hf://org/sdxl") as m:
        check_pipeline(m, files)
        assert all(f"{n}/" in " ".join(m.traffic_by_file) for n in WEIGHTED)
    paths = [e.path for e in hub_env.log.entries]
    assert not [p for p in paths if any(f"/{n}/" in p for n in WITHOUT_WEIGHTS)]
    # One listing of the whole repo serves every component: no folder is listed again.
    assert len([p for p in paths if "/tree/" in p]) == 1
    # Each weight file's header is read, no file's data.
    for name in WEIGHTED:
        for file in weight_files(files, name):
            assert [p for p in paths if p.endswith(f"/{file}")], file


def test_a_pipeline_comes_back_from_the_cache(
    written: tuple[Path, dict[str, bytes]], hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # model_index.json, the listing, each component's configs and headers are kept (issue 30):
    # coming back costs the revision alone, and offline nothing.
    _, files = written
    hub_env.add("org/sdxl", files)
    with rt.open_model("hf://org/sdxl") as m:
        first = {name: c.num_parameters for name, c in m.components.items()}
    hub_env.log.clear()
    with rt.open_model("hf://org/sdxl") as m:
        assert {name: c.num_parameters for name, c in m.components.items()} == first
    assert [e.path for e in hub_env.log.entries] == ["/api/models/org/sdxl/revision/main"]
    hub_env.log.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with rt.open_model("hf://org/sdxl") as m:
        check_pipeline(m, files)
    assert hub_env.log.entries == []


def test_a_variant_reads_its_files_and_counts_the_same(
    written: tuple[Path, dict[str, bytes]], hub_env: HubStandIn
) -> None:
    _, files = written
    hub_env.add("org/sdxl", files)
    with rt.open_model("hf://org/sdxl", variant="fp16") as m:
        check_pipeline(m, files, "fp16")
        assert m.parameter_count() == {"F16": m.num_parameters}
    with rt.open_model("hf://org/sdxl") as plain:
        assert plain.num_parameters == m.num_parameters
        assert "F16" not in plain.parameter_count()


def test_components_without_the_variant_or_with_only_one_read_what_they_have(
    written: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    root, files = written
    copy = tmp_path / "sdxl"
    shutil.copytree(root, copy)
    # The unet lacks the fp16 variant: it reads its plain file (diffusers does the same).
    (copy / "unet/diffusion_pytorch_model.fp16.safetensors").unlink()
    # The VAE has only its fp16 files: without a variant asked for, those are its weights.
    for name in weight_files(files, "vae"):
        (copy / name).unlink()
    (copy / "vae/diffusion_pytorch_model.safetensors.index.json").unlink()
    with rt.open_model(copy, variant="fp16") as m:
        assert m.components["unet"].parameter_count() == {
            "F32": count_of(files, ["unet/diffusion_pytorch_model.safetensors"])
        }
        assert set(m.components["text_encoder"].parameter_count()) == {"F16"}
    with rt.open_model(copy) as m:
        vae = m.components["vae"]
        assert vae.files == [n.removeprefix("vae/") for n in weight_files(files, "vae", "fp16")]
        assert vae.num_parameters == count_of(files, weight_files(files, "vae", "fp16"))
        assert set(m.components["text_encoder"].parameter_count()) == {"F32"}


def test_a_component_with_several_variants_only_asks_which(
    written: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    root, _files = written
    copy = tmp_path / "sdxl"
    shutil.copytree(root, copy)
    unet = copy / "unet"
    (unet / "diffusion_pytorch_model.safetensors").rename(
        unet / "diffusion_pytorch_model.ema.safetensors"
    )
    with pytest.raises(rt.AmbiguousModelError, match=r"unet .*ema, fp16") as caught:
        rt.open_model(copy)
    assert caught.value.choices == ["ema", "fp16"]
    with rt.open_model(copy, variant="ema") as m:
        assert m.components["unet"].files == ["diffusion_pytorch_model.ema.safetensors"]


def test_a_component_without_weights_files_is_named(
    written: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    root, _ = written
    copy = tmp_path / "sdxl"
    shutil.copytree(root, copy)
    for path in (copy / "unet").glob("*.safetensors"):
        path.unlink()
    with pytest.raises(
        rt.NotFoundError,
        match=r"sdxl/unet: component unet \(diffusers UNet2DConditionModel\) has no weight files",
    ):
        rt.open_model(copy)


def test_a_pipeline_over_plain_http_asks_for_the_libraries_names(
    written: tuple[Path, dict[str, bytes]], faulty: FaultyServer
) -> None:
    _, files = written
    base = serve(faulty, files)
    with rt.open_model(base) as m:
        check_pipeline(m, files)
    paths = [e.path for e in faulty.log.entries]
    assert not [p for p in paths if any(f"/{n}/" in p for n in WITHOUT_WEIGHTS)]
    with rt.open_model(base, variant="fp16") as m:
        check_pipeline(m, files, "fp16")


def test_a_component_named_in_an_error_keeps_the_roots_secrets_out(
    written: tuple[Path, dict[str, bytes]], faulty: FaultyServer
) -> None:
    _, files = written
    without_unet = {n: d for n, d in files.items() if not n.startswith("unet/")}
    base = serve(faulty, without_unet).replace("http://", "http://user:s3cr3t@")
    with pytest.raises(rt.NotFoundError, match="unet") as caught:
        rt.open_model(base)
    assert "s3cr3t" not in str(caught.value)
    assert "user:***@" in str(caught.value)


def test_a_pipeline_on_s3_lists_each_component_folder(
    written: tuple[Path, dict[str, bytes]], s3_env: str
) -> None:
    _, files = written
    put_s3(s3_env, "pipelines", {f"sdxl/{n}": d for n, d in files.items()})
    with rt.open_model(
        "s3://pipelines/sdxl/", storage_options={"skip_instance_cache": True}, variant="fp16"
    ) as m:
        check_pipeline(m, files, "fp16")


def test_a_component_folder_opens_by_itself(
    written: tuple[Path, dict[str, bytes]], hub_env: HubStandIn
) -> None:
    _, files = written
    hub_env.add("org/sdxl", files)
    with rt.open_model("hf://org/sdxl/vae") as vae:
        assert vae.num_parameters == count_of(files, weight_files(files, "vae"))
        assert vae.components == {}


def test_params_prints_each_component_and_the_total(
    written: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, files = written
    counts = {n: count_of(files, weight_files(files, n)) for n in WEIGHTED}
    assert main(["params", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["parameters"] == sum(counts.values())
    assert {n: c["parameters"] for n, c in report["components"].items()} == counts
    assert report["components"]["unet"]["class"] == "UNet2DConditionModel"
    assert report["components"]["vae"]["files"] == 2
    assert report["pipeline"] == {
        "class": "StableDiffusionXLPipeline",
        "diffusers_version": "0.30.0",
        "without_weights": ["scheduler", "tokenizer", "tokenizer_2"],
        "not_saved": ["feature_extractor", "image_encoder"],
    }
    assert main(["params", str(root), "--variant", "fp16", "--json"]) == 0
    fp16 = json.loads(capsys.readouterr().out)
    assert fp16["by_dtype"] == {"F16": sum(counts.values())}
    assert main(["params", str(root)]) == 0
    out = capsys.readouterr().out
    assert "pipeline: StableDiffusionXLPipeline" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    for name, count in counts.items():
        assert f"{count:,}" in rows[name]
    assert f"{sum(counts.values()):,}" in rows["total"]
    assert main(["info", str(root)]) == 0
    out = capsys.readouterr().out
    assert "without weights: scheduler, tokenizer, tokenizer_2" in out
    assert "unet/diffusion_pytorch_model.safetensors" in out
