"""The command line and the persistent cache: ``cache info|ls|prune|clear``, ``--no-cache`` and
``verify`` against the hub stand-in."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from remotetensors.cli import main
from remotetensors.reading.links import LinkMemory
from remotetensors.reading.streams import Setting
from remotetensors.sources.cache.store import CacheStore
from tests.hub_standin import LFS_THRESHOLD, HubStandIn
from tests.integration.test_cli import run
from tests.integration.test_models import _no_stored_token, sharded
from tests.reference import write_reference


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", _no_stored_token)
    files, _ = sharded(shards=2)
    hub.add("org/a", files)
    return hub


def test_cache_info_ls_prune_and_clear(
    hub_env: HubStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = os.environ["REMOTETENSORS_CACHE"]
    status, out, _ = run(capsys, "cache", "info", "--json")
    assert status == 0
    assert json.loads(out) == {
        "folder": folder,
        "entries": 0,
        "bytes": 0,
        "max_bytes": 256 * 1024 * 1024,
        "offline": False,
    }
    assert run(capsys, "params", "hf://org/a", "--json")[0] == 0
    entries, size = CacheStore(folder).usage()
    assert entries > 0
    info = json.loads(run(capsys, "cache", "info", "--json")[1])
    assert (info["entries"], info["bytes"]) == (entries, size)
    listed = json.loads(run(capsys, "cache", "ls", "--json")[1])
    assert len(listed) == entries
    assert {"ref", "file", "absent"} <= {e["kind"] for e in listed}
    assert all(e["ok"] for e in listed)
    assert any(e["shown"] == "hf://org/a" for e in listed)
    status, out, _ = run(capsys, "cache", "ls")
    assert status == 0
    assert "hf://org/a/model.safetensors.index.json" in out
    # Nothing is older than an hour; then down to nothing; then everything, again.
    pruned = json.loads(run(capsys, "cache", "prune", "--older-than", "1h", "--json")[1])
    assert (pruned["removed"], pruned["entries"]) == (0, entries)
    pruned = json.loads(run(capsys, "cache", "prune", "--max-size", "0", "--json")[1])
    assert (pruned["removed"], pruned["freed_bytes"], pruned["entries"]) == (entries, size, 0)
    assert run(capsys, "params", "hf://org/a", "--json")[0] == 0
    LinkMemory(CacheStore(folder)).remember("http://127.0.0.1:9", Setting(16, 8 << 20))
    entries = CacheStore(folder).usage()[0]
    status, out, _ = run(capsys, "cache", "clear")
    assert status == 0
    assert f"removed: {entries}" in out
    assert CacheStore(folder).usage() == (0, 0)
    # What the links taught is an entry like the others: gone too.
    assert LinkMemory(CacheStore(folder)).recall("http://127.0.0.1:9") is None
    status, _, err = run(capsys, "cache", "prune")
    assert status == 1
    assert "--max-size" in err


def test_no_cache_keeps_nothing_and_asks_again(
    hub_env: HubStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(2):
        hub_env.log.clear()
        status, out, _ = run(capsys, "params", "hf://org/a", "--no-cache", "--json")
        assert status == 0
        assert json.loads(out)["stored_parameters"] > 0
        assert hub_env.log.entries
    assert CacheStore(os.environ["REMOTETENSORS_CACHE"]).usage() == (0, 0)
    run(capsys, "params", "hf://org/a", "--json")
    hub_env.log.clear()
    run(capsys, "params", "hf://org/a", "--json")
    assert len(hub_env.log.entries) == 1  # kept: only the revision is asked


def test_verify_checks_the_listed_sha256(
    hub_env: HubStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_reference({"w": np.arange(LFS_THRESHOLD, dtype=np.float32)})
    commit = hub_env.add("org/big", {"model.safetensors": data, "config.json": b"{}"})
    sha = hashlib.sha256(data).hexdigest()
    status, out, err = run(capsys, "verify", "hf://org/big/model.safetensors", "--json")
    assert status == 0, err
    assert json.loads(out) == {
        "location": f"hf://org/big@{commit}/model.safetensors",
        "sha256": sha,
        "bytes": len(data),
        "ok": True,
    }
    status, out, _ = run(capsys, "verify", "hf://org/big/model.safetensors")
    assert out.strip().endswith(f"sha256 {sha} OK")
    # The listing and the bytes disagree: both digests named, exit status 1.
    hub_env.listed_sha256["model.safetensors"] = "0" * 64
    hub_env.push("org/big", {"model.safetensors": data, "config.json": b"{ }"})
    status, out, err = run(capsys, "verify", "hf://org/big/model.safetensors")
    assert status == 1
    assert "0" * 64 in err
    assert sha in err
    # A digest given, for any location; a small file has no listed sha256.
    status, _, err = run(capsys, "verify", "hf://org/big/model.safetensors", "--sha256", sha)
    assert status == 0, err
    status, _, err = run(capsys, "verify", "hf://org/big/config.json")
    assert status == 1
    assert "not an LFS file" in err
    assert main(["verify", "hf://org/big/model.safetensors", "--sha256", "xyz"]) == 1
