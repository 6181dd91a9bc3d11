"""Every example in README.md and docs/ is collected here: each ```python block runs (the blocks
of one page in order, in one namespace that starts with ``rt``, in a temporary folder, against
a hub stand-in serving the repos they name), or carries a marker saying why not, on the line
before its fence:

- ``<!-- example: run by tests/...py -->``: another test runs it as written (checked: that test
  reads this page);
- ``<!-- example: not run: REASON -->``: a placeholder host or bucket, a repo too large to stand
  in, a cluster.

Each ```console block's ``$ remotetensors ...`` line that is followed by output is run against
the same stand-in unless the block is marked, and its output must be the one shown; each
``remotetensors`` line of a ```bash block runs and must succeed.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remotetensors.cli.sample import (
    write_moe_checkpoint,
    write_safetensors,
    write_sample_checkpoint,
)
from tests.hub_standin import HubStandIn

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [p for p in PAGES if "_build" not in p.parts]
MARKER = re.compile(r"<!-- example: (run by (?P<by>\S+)|not run: (?P<why>.+?)) -->")


@dataclass(frozen=True)
class Block:
    page: Path
    number: int  # among the page's blocks of its language, from 0
    language: str
    code: str
    marker: re.Match[str] | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}#{self.language}{self.number}"


def blocks(page: Path, language: str) -> list[Block]:
    """The page's fenced blocks of ``language``, each with the marker on the line before."""
    found = []
    text = page.read_text(encoding="utf-8")
    for number, match in enumerate(re.finditer(rf"^```{language}\n(.*?)^```", text, re.S | re.M)):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        found.append(Block(page, number, language, match.group(1), MARKER.fullmatch(before)))
    return found


PYTHON = [b for page in PAGES for b in blocks(page, "python")]
CONSOLE = [b for page in PAGES for b in blocks(page, "console")]
BASH = [b for page in PAGES for b in blocks(page, "bash")]


def test_every_python_example_is_collected() -> None:
    # The README's and the guides' blocks: a page that gains one is counted here too.
    assert len(PYTHON) >= 22
    assert {b.page.name for b in PYTHON} >= {"README.md", "getting-started.md", "torch.md"}


@pytest.mark.parametrize("block", [b for b in PYTHON if b.marker], ids=lambda b: b.name)
def test_a_marked_example_says_why(block: Block) -> None:
    assert block.marker is not None
    by = block.marker.group("by")
    if by is not None:  # the named test exists and reads this page
        test = (ROOT / by).read_text(encoding="utf-8")
        assert str(block.page.relative_to(ROOT).name) in test or block.page.stem in test
    else:
        assert len(block.marker.group("why").split()) >= 3  # a reason, not a shrug


# --- the stand-in repos the examples name ------------------------------------------------------


def _gpt2_files() -> dict[str, bytes]:
    """A GPT-2-named checkpoint: the names and widths of openai-community/gpt2, fewer rows."""
    rng = np.random.default_rng(2)
    tensors = {
        "wte.weight": rng.standard_normal((2048, 768)).astype(np.float32),
        "wpe.weight": rng.standard_normal((64, 768)).astype(np.float32),
        "h.0.attn.c_attn.weight": rng.standard_normal((768, 2304)).astype(np.float32),
        "ln_f.weight": np.ones(768, np.float32),
    }
    return _files_of(lambda folder: write_safetensors(folder / "model.safetensors", tensors))


def _files_of(write: Any) -> dict[str, bytes]:
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        write(folder)
        return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture
def stand_in(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("REMOTETENSORS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", lambda token: None)
    hub.add("openai-community/gpt2", _gpt2_files())
    hub.add("Qwen/Qwen3-30B-A3B", _files_of(write_moe_checkpoint))  # Mixtral-shaped, small
    hub.add("org/model", _files_of(write_sample_checkpoint))  # the demo's checkpoint
    monkeypatch.chdir(tmp_path)
    return hub


def _needs(code: str) -> None:
    for module in ("torch", "transformers"):
        if re.search(rf"^\s*import .*\b{module}\b|^\s*from {module}\b", code, re.M):
            pytest.importorskip(module)


@pytest.mark.parametrize(
    "page", sorted({b.page for b in PYTHON if not b.marker}), ids=lambda p: p.name
)
def test_the_examples_of_a_page_run(page: Path, stand_in: HubStandIn) -> None:
    import remotetensors as rt

    namespace: dict[str, Any] = {"rt": rt, "__name__": "example"}
    # The local file a page reads from the current folder (the test's temporary one).
    write_safetensors(Path("model.safetensors"), {"embed": np.zeros((2048, 8), np.float16)})
    for block in blocks(page, "python"):
        if block.marker:
            continue
        _needs(block.code)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block.code, block.name, "exec"), namespace)
    if page.name == "README.md":
        assert namespace["rows"].shape == (10, 768)
    if page.name == "cache.md":  # "0: no file was read" the second time
        assert namespace["model"].traffic.requests == 0
    for block in blocks(page, "console"):
        if not block.marker:
            _check_console(block)
    for block in blocks(page, "bash"):
        if not block.marker:
            _run_commands(block)


def _run_commands(block: Block) -> None:
    """Run each line of a ```bash block that is a ``remotetensors`` command (``NAME=value``
    prefixes set for it); each must succeed. Other lines (set-up, pip) are not run here."""
    import os

    from remotetensors.cli import main

    for line in block.code.splitlines():
        argv = shlex.split(line, comments=True)
        variables = {}
        while argv and re.fullmatch(r"[A-Z_]+=.*", argv[0]):
            name, value = argv.pop(0).split("=", 1)
            variables[name] = value
        if not argv or argv[0] != "remotetensors":
            continue
        saved = {k: os.environ.get(k) for k in variables}
        os.environ.update(variables)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                status = main(argv[1:])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        assert status == 0, f"{block.name}: {line}"


def _check_console(block: Block) -> None:
    """Run each ``$ remotetensors`` line that has output shown; the output must be that."""
    from remotetensors.cli import main

    shown: dict[str, list[str]] = {}
    command = None
    for line in block.code.splitlines():
        if line.startswith("$ "):
            command = line[2:]
            shown[command] = []
        elif command is not None:
            shown[command].append(line)
    for command, lines in shown.items():
        argv = shlex.split(command, comments=True)
        if not lines or argv[0] != "remotetensors":
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(argv[1:])
        assert status == 0, command
        assert out.getvalue().splitlines() == lines, f"{block.name}: $ {command}"


@pytest.mark.parametrize(
    "page",
    sorted(
        {b.page for b in CONSOLE + BASH if not b.marker} - {b.page for b in PYTHON if not b.marker}
    ),
    ids=lambda p: p.name,
)
def test_the_cli_examples_of_a_page_show_their_output(page: Path, stand_in: HubStandIn) -> None:
    for block in blocks(page, "console"):
        if not block.marker:
            _check_console(block)
    for block in blocks(page, "bash"):
        if not block.marker:
            _run_commands(block)


def test_the_stand_in_repos_are_what_the_examples_read(stand_in: HubStandIn) -> None:
    import remotetensors as rt

    with rt.open_model("hf://Qwen/Qwen3-30B-A3B") as m:
        active = m.num_active_parameters
        assert active is not None
        assert active < m.num_parameters
    config = json.loads(_files_of(write_moe_checkpoint)["config.json"])
    assert config["num_experts_per_tok"] < config["num_local_experts"]
