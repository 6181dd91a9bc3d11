"""The examples of docs/guides/cloud-storage.md, run against the emulators (tests/emulators.py)
as a reader would run them against the services: gcsfs finds fake-gcs-server through
``STORAGE_EMULATOR_HOST``, adlfs finds Azurite through ``AZURE_STORAGE_CONNECTION_STRING``.
The doc-examples collector (test_doc_examples.py) leaves these blocks to this test: each is
marked ``<!-- example: run by tests/integration/test_cloud_docs.py -->``."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import urllib.error
from typing import Any

import numpy as np
import pytest

from remotetensors.cli import main
from tests import minilm
from tests.emulators import Azurite, FakeGcs
from tests.integration.test_doc_examples import ROOT, Block, blocks

PAGE = ROOT / "docs" / "guides" / "cloud-storage.md"
MODEL = "all-MiniLM-L6-v2"


def ours(language: str) -> list[Block]:
    """The page's blocks of ``language`` that are left to this test."""
    found = [b for b in blocks(PAGE, language) if b.marker and b.marker.group("by")]
    assert all(
        b.marker and b.marker.group("by") == "tests/integration/test_cloud_docs.py" for b in found
    )
    return found


@pytest.fixture
def services(gcs_emulator: FakeGcs, azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both emulators holding the model under ``models/all-MiniLM-L6-v2/``, and the variables
    that point gcsfs and adlfs at them."""
    from azure.core.exceptions import ResourceExistsError

    files = minilm.files()
    # The emulators live for the session: the second test finds the bucket made (409).
    with contextlib.suppress(urllib.error.HTTPError):
        gcs_emulator.make_bucket("models")
    with contextlib.suppress(ResourceExistsError):
        azurite.make_container("models")
    for name, data in files.items():
        gcs_emulator.put("models", f"{MODEL}/{name}", data)
        azurite.put("models", f"{MODEL}/{name}", data)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.endpoint)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)


def test_the_page_has_an_example_per_backend() -> None:
    python = ours("python")
    assert ["gs://" in b.code for b in python] == [True, False]
    assert ["az://" in b.code for b in python] == [False, True]
    assert len(ours("bash")) == 2


def test_the_python_examples_run(services: None) -> None:
    import safetensors.numpy

    reference = safetensors.numpy.load(minilm.files()["model.safetensors"])
    expected = reference[minilm.EMBEDDINGS][1000:1010]
    total = sum(array.size for array in reference.values())
    for block in ours("python"):
        namespace: dict[str, Any] = {"__name__": "example"}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, block.name, "exec"), namespace)
        np.testing.assert_array_equal(namespace["rows"], expected)
        assert out.getvalue().split()[0] == str(total)
    assert f"# {total}: headers only" in ours("python")[0].code  # the count the page shows


def test_the_command_lines_run(services: None) -> None:
    for block in ours("bash"):
        for line in block.code.splitlines():
            argv = [os.path.expandvars(arg) for arg in shlex.split(line, comments=True)]
            assert argv[0] == "remotetensors"
            with contextlib.redirect_stdout(io.StringIO()):
                assert main(argv[1:]) == 0, line
