"""Every notebook in notebooks/ runs top to bottom against a loopback hub stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import quantized
from tests.hub_standin import HubStandIn
from tests.integration.test_models import sharded

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))

# What each notebook must show; a notebook not listed here fails the test until it is.
EXPECTED = {
    "explore_hub_model.ipynb": [
        "cosine similarity",
        "<details",  # the model's HTML view rendered
        "model.layers.[0-11] \u2014 12 \u00d7 (",  # twelve layers folded into one section
        "image/png",  # the histogram and the heatmap
        "sample: ",  # stats of a sample, stated as such
        "byte range",  # the tensor card
        ">packed<",  # the quantized model's marks
        ">aux<",
        "network so far",
        "memory to serve one sequence of 4,096 tokens",  # the quantized model's config
        # the quantized model served below, unpacked to its float model's count
        f"true count: {quantized.float_count(quantized.Arch()):,} parameters",
        "qweight",
    ],
    "dask_on_a_cluster.ipynb": [
        "dashboard: http://",
        "per-row norms of",
        "max difference from numpy in this process: 0.0",
    ],
}
IMAGES = {"explore_hub_model.ipynb": 3}  # two histograms and a heatmap
NEEDS = {"dask_on_a_cluster.ipynb": "distributed"}


@pytest.fixture
def hub_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    hub = HubStandIn()
    files, _ = sharded(shards=2, layers_per_shard=6)
    hub.add("example/tiny-model", files)
    spec, config = quantized.gptq(quantized.Arch(), bits=4)
    hub.add("example/tiny-gptq", quantized.files_for(spec, config, shards=2))
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("REMOTETENSORS_EXAMPLE_MODEL", "hf://example/tiny-model")
    monkeypatch.setenv("REMOTETENSORS_QUANTIZED_MODEL", "hf://example/tiny-gptq")
    monkeypatch.setenv("HF_TOKEN", "")
    try:
        yield "hf://example/tiny-model"
    finally:
        hub.stop()


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, hub_model: str, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    if path.name in NEEDS:
        pytest.importorskip(NEEDS[path.name], reason="an optional extra is not installed")

    notebook = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {})) for o in outputs)
    for marker in EXPECTED[path.name]:
        assert marker in text, marker
    # The executed notebook, with its images, for a person to look at.
    nbformat.write(notebook, tmp_path / path.name)  # type: ignore[no-untyped-call]
    assert text.count("image/png") >= IMAGES.get(path.name, 0)
