"""The hooks through which values reach the views and integrations above them.

Each hook is plugged in by the public face when the package is imported, whatever module a user
imports first, and imports its implementation only when it is first called.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from remotetensors import hooks
from remotetensors.index import FileIndex, TensorInfo, TensorTable

HOOKS = {
    "tensor_card_html",
    "tensors_html",
    "model_html",
    "model_text",
    "model_tree",
    "tensor_view",
    "tensor_to_dask",
    "open_pipeline",
    "model_zarr_store",
    "model_kerchunk",
}


def test_the_face_plugs_in_every_hook_the_docstring_names() -> None:
    assert set(hooks._plugged) == HOOKS
    assert all(f"``{name}(" in (hooks.__doc__ or "") for name in HOOKS)


def test_an_unknown_hook_is_a_lookup_error() -> None:
    with pytest.raises(LookupError, match="'nope'"):
        hooks.call("nope")


def test_a_value_imported_first_still_reaches_its_view_and_only_when_drawn() -> None:
    # A fresh interpreter that imports a value module directly: its package's __init__ ran first
    # and plugged the hooks in, yet no view was imported until the value was drawn.
    body = (
        "import json, sys\n"
        "from remotetensors.index import TensorInfo\n"
        "info = TensorInfo('w', 'F32', (2, 3), 0, 24)\n"
        "before = 'remotetensors.views.explore' in sys.modules\n"
        "html = info._repr_html_()\n"
        "print(json.dumps([before, 'remotetensors.views.explore' in sys.modules, 'w' in html]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [False, True, True]


def test_values_draw_themselves_through_the_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, tuple[object, ...]]] = []

    def recorder(name: str) -> object:
        def record(*args: object, **kwargs: object) -> str:
            seen.append((name, args))
            return f"<{name}>"

        return record

    for name in ("tensor_card_html", "tensors_html"):
        monkeypatch.setitem(hooks._plugged, name, recorder(name))
    info = TensorInfo("w", "F32", (2, 3), 0, 24)
    index = FileIndex(TensorTable({"w": ("F32", (2, 3), 0, 24, None)}), None, 64, 96)
    assert info._repr_html_() == "<tensor_card_html>"
    assert index._repr_html_() == "<tensors_html>"
    assert [name for name, _ in seen] == ["tensor_card_html", "tensors_html"]
    assert seen[0][1] == (info,)
