"""A download in a Jupyter kernel shows a progress bar, without tqdm's warnings."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import numpy as np

from tests.reference import write_reference
from tests.servers import static_server


def _run_cells(location: str) -> list[Any]:
    import nbformat
    from nbclient import NotebookClient

    cells = [
        # Show bars at once instead of after a second, so that a quick read shows one.
        "import remotetensors as rt, remotetensors.reading.progress\n"
        "remotetensors.reading.progress.SHOW_AFTER_SECONDS = 0\n"
        "print('wanted:', remotetensors.reading.progress.wanted(None))",
        f"with rt.safe_open({location!r}) as f:\n    w = f.get_tensor('w')\nprint(w.shape)",
    ]
    notebook = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    notebook.cells = [nbformat.v4.new_code_cell(c) for c in cells]  # type: ignore[no-untyped-call]
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    return [o for cell in notebook.cells for o in cell.outputs]


def test_a_notebook_shows_a_progress_bar(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    path.write_bytes(write_reference({"w": np.ones((512, 1024), np.float32)}))
    # A download: local reads of this size take a direct path that shows no bar.
    with static_server(tmp_path) as (url, _):
        outputs = _run_cells(f"{url}/big.safetensors")
    assert not [o for o in outputs if o.output_type == "error"], outputs
    stdout = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
    assert "wanted: True" in stdout  # the kernel is recognised without a terminal
    assert "(512, 1024)" in stdout
    stderr = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
    widgets = [
        o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    if importlib.util.find_spec("ipywidgets") is not None:
        assert widgets  # tqdm's notebook widget
    else:
        # tqdm's text bar, named after the file: "big.safetensors:   0%|   | 0.00/1.94M [...B/s]"
        assert re.search(r"big\.safetensors: +\d+%\|.*\d+(\.\d+)?M .*B/s", stderr), stderr
    assert "Warning" not in stderr
    assert "IProgress" not in stderr
