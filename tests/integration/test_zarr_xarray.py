"""xarray over the Zarr store of all-MiniLM-L6-v2 on the hub stand-in: opening moves no tensor
data, ten rows move one chunk; and the README's "Zarr and xarray" example runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from tests import minilm
from tests.hub_standin import HubStandIn

zarr = pytest.importorskip("zarr", reason="the zarr extra is not installed")
xr = pytest.importorskip("xarray", reason="xarray is not installed")

# The example moved from the README to its guide in the documentation site.
README = Path(__file__).resolve().parents[2] / "docs" / "guides" / "zarr.md"


@pytest.fixture
def on_hub(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    hub.add(minilm.REPO, minilm.files())
    return hub


def test_xarray_lists_every_tensor_without_moving_tensor_data(on_hub: HubStandIn) -> None:
    with rt.open_model(f"hf://{minilm.REPO}") as m:
        start = m.tensors[minilm.EMBEDDINGS].start
        ds = xr.open_zarr(m.as_zarr_store(), consolidated=False)
        assert set(ds.data_vars) == set(minilm.tensors())
        for name, want in minilm.tensors().items():
            assert (ds[name].shape, ds[name].dtype) == (want.shape, want.dtype), name
        # Opening the model and the dataset: the header window and the config, no tensor data.
        assert on_hub.log.total_bytes <= 1 << 20
        on_hub.log.clear()
        rows = ds[minilm.EMBEDDINGS][1000:1010].values
        np.testing.assert_array_equal(rows, minilm.tensors()[minilm.EMBEDDINGS][1000:1010])
        chunk = ds[minilm.EMBEDDINGS].encoding["chunks"]
        chunk_bytes = chunk[0] * chunk[1] * 4
        served = [e for e in on_hub.log.entries if e.sent_bytes]
        assert len(served) == 1
        assert served[0].sent_bytes <= chunk_bytes
        # The one chunk holding rows 1000:1010, not the 47 MB matrix.
        first = 1000 // chunk[0] * chunk[0]
        assert on_hub.cdn_ranges() == [(start + first * 1536, start + (first + chunk[0]) * 1536)]


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("# Zarr and xarray\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return str(blocks[0])


def test_the_readme_example_runs(on_hub: HubStandIn) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(readme_example(), str(README), "exec"), namespace)
    tensors = minilm.tensors()
    np.testing.assert_array_equal(namespace["rows"], tensors[minilm.EMBEDDINGS][1000:1010])
    query = tensors["encoder.layer.0.attention.self.query.weight"][:8, :8]
    np.testing.assert_array_equal(namespace["query"], query)
