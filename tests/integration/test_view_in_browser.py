"""The notebook view in a real browser: headless Chromium renders the HTML of a quantized
mixture-of-experts model (every section opened) on a light and on a dark page, as JupyterLab
and VS Code themes would, and saves screenshots under the test's temporary folder.

Chromium comes from the system packages (Debian: ``apt-get install chromium``); without it
the test is skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from remotetensors.index import TensorInfo
from remotetensors.quantization import count_parameters
from remotetensors.views.display import tree_html
from remotetensors.views.explore import tensor_card_html
from remotetensors.views.stats import tensor_stats
from remotetensors.views.tree import build_tree
from tests import quantized

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome", "headless_shell")
PAGES = {
    # JupyterLab's light theme and VS Code's dark one: the page sets text and background;
    # the view must inherit the text colour and stay readable on both.
    "light": "background:#ffffff;color:#1f1f1f",
    "dark": "background:#1e1e1e;color:#d4d4d4",
}


def browser() -> str | None:
    found = os.environ.get("REMOTETENSORS_CHROMIUM")
    if found:
        return found
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def view_html() -> str:
    arch = quantized.Arch(layers=6, experts=4, shared_experts=True)
    spec, config = quantized.gptq(arch, bits=4)
    offset = 8
    infos = []
    for i, (name, (dtype, shape)) in enumerate(sorted(spec.items())):
        size = 1
        for d in shape:
            size *= d
        nbytes = size * (4 if dtype in ("I32", "F32", "U32") else 2)
        file = f"model-{i % 2 + 1:05d}-of-00002.safetensors"
        infos.append(TensorInfo(name, dtype, shape, offset, offset + nbytes, file))
        offset += nbytes
    tensors = {i.name: i for i in infos}
    count = count_parameters(tensors, config)
    tree = build_tree(infos, count.tensors)
    html = tree_html(
        "hf://example/tiny-moe-gptq",
        tree,
        show_files=True,
        summary=["quantized: gptq, 4-bit, group size 128"],
    )
    import numpy as np

    values = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    stats = tensor_stats("model.embed_tokens.weight", "F32", (64, 64), values)
    card = tensor_card_html(tensors["model.embed_tokens.weight"])
    return html.replace("<details", "<details open") + card + stats._repr_html_()


@pytest.mark.parametrize("theme", sorted(PAGES))
def test_view_renders_in_headless_chromium(theme: str, tmp_path: Path) -> None:
    binary = browser()
    if binary is None:
        pytest.skip("no chromium binary found (Debian: apt-get install chromium)")
    page = tmp_path / f"view-{theme}.html"
    page.write_text(
        f'<!doctype html><html><body style="{PAGES[theme]};margin:16px">{view_html()}'
        "</body></html>",
        encoding="utf-8",
    )
    shot = tmp_path / f"view-{theme}.png"
    result = subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1200,2000",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG")
    # The page is not blank: the text and tables drew many colours beyond the background.
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[0] >= 1000
    assert pixels.shape[1] >= 1000
    top = pixels[:900, :1100, :3].reshape(-1, 3)
    colours = {tuple((top[i] * 255).astype(int)) for i in range(0, len(top), 7)}
    assert len(colours) > 50
    print(f"screenshot: {shot}")
