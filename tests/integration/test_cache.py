"""Coming back for free: the persistent header cache on the hub stand-in, counted in requests
and bytes. Second scans, changed repos, offline mode, corrupted entries, two processes sharing
the folder, a fresh process opening a cached model, integrity of listed sizes, and the cache
turned off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import remotetensors as rt
from tests.hub_standin import LFS_THRESHOLD, HubStandIn
from tests.integration.test_models import _no_stored_token, expected_counts, sharded
from tests.integration.test_scan import _fleet
from tests.reference import write_reference

if TYPE_CHECKING:
    from remotetensors.sources.cache.store import CacheStore

SRC = str(Path(rt.__file__).resolve().parents[1])


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", _no_stored_token)
    return hub


def counts(results: Iterable[rt.ScanResult]) -> dict[str, Any]:
    """Location -> its summary as JSON (or its error), for results compared whole."""
    out: dict[str, Any] = {}
    for result in results:
        assert result.summary is not None, result.error
        out[result.location] = result.summary.as_dict()
    return out


def file_bytes(hub: HubStandIn) -> int:
    """Bytes of files the hub and its CDN sent (the API's JSON answers not counted)."""
    return hub.log.total_bytes


def requests_per_repo(hub: HubStandIn, locations: Iterable[str]) -> dict[str, int]:
    per = {}
    for location in locations:
        repo = location.removeprefix("hf://")
        per[location] = sum(f"/{repo}/" in e.path for e in hub.log.entries)
    return per


def header_bytes(data: bytes) -> int:
    """A safetensors file's 8-byte length and header."""
    return 8 + int.from_bytes(data[:8], "little")


def store() -> CacheStore:
    from remotetensors.sources.cache.store import CacheStore  # here: the goals run on any tree

    return CacheStore(os.environ["REMOTETENSORS_CACHE"])


# --- second visits ----------------------------------------------------------------------------


SHAPES = pytest.mark.parametrize("hub_shape", ["2026", "2025"], indirect=True)
"""Today's hub (API answers name no commit) and the one before (they did): both kept working."""


@SHAPES
def test_second_scan_of_unchanged_repos_costs_one_request_each(hub_env: HubStandIn) -> None:
    expected = _fleet(hub_env, 60)
    first = counts(rt.scan(expected, concurrency=16))
    first_requests, first_bytes = len(hub_env.log.entries), file_bytes(hub_env)
    assert {k: v["by_dtype"] for k, v in first.items()} == expected
    hub_env.log.clear()
    second = counts(rt.scan(expected, concurrency=16))
    assert second == first
    per_repo = requests_per_repo(hub_env, expected)
    assert max(per_repo.values()) <= 1, per_repo
    # The one request is the revision's commit: a small API answer, or a one-byte read of a
    # config file whose answer names the commit; no file bytes beyond that byte.
    assert all(
        "/revision/main" in e.path or e.path.endswith("/resolve/main/config.json")
        for e in hub_env.log.entries
    )
    assert file_bytes(hub_env) <= 0.05 * first_bytes
    assert len(hub_env.log.entries) <= len(expected) < first_requests


def test_a_commit_is_never_asked_again(hub_env: HubStandIn) -> None:
    files, tensors = sharded(shards=2)
    commit = hub_env.add("org/a", files)
    for _ in range(2):
        with rt.open_model(f"hf://org/a@{commit}") as model:
            assert model.parameter_count() == expected_counts(tensors)
        if _ == 0:
            assert hub_env.log.entries
            hub_env.log.clear()
    assert hub_env.log.entries == []  # a commit names itself: not even the revision is asked


def test_gguf_and_bintensors_files_come_back_from_the_cache(
    hub_env: HubStandIn, tmp_path: Path
) -> None:
    from bintensors.numpy import save as save_bintensors

    from tests.gguf_files import write_gguf

    # A GGUF header far longer than the window (read in growing windows the first time).
    (path,) = write_gguf(tmp_path / "m.gguf", vocab_size=20_000)
    bt = save_bintensors({"w": np.arange(8, dtype=np.int16)})
    hub_env.add("org/g", {"m.gguf": path.read_bytes(), "w.bt": bt})
    first: dict[str, Any] = {}
    for visit in range(2):
        hub_env.log.clear()
        with rt.safe_open("hf://org/g/m.gguf") as f:
            assert first.setdefault("gguf", f.metadata()) == f.metadata()
        with rt.safe_open("hf://org/g/w.bt") as f:
            assert f.keys() == ["w"]
        if visit:
            # One revision each (two visits), no file: every header byte came from the cache.
            assert [e.path for e in hub_env.log.entries] == ["/api/models/org/g/revision/main"] * 2
        else:
            assert len(hub_env.cdn_entries()) >= 2


def _change_one_file(hub: HubStandIn, repo_id: str) -> tuple[str, dict[str, int]]:
    """Push a commit to ``repo_id`` that changes one file: the single file, or the second
    shard (one more F32 element in its norm). Returns the file's name and the new counts."""
    repo = hub.repos[repo_id]
    files = dict(repo.commits[repo.branches["main"]])
    if "model.safetensors" in files:
        size = int(repo_id.rsplit("m", 1)[1]) + 101
        files["model.safetensors"] = write_reference({"w": np.ones(size, np.int8)})
        hub.push(repo_id, files)
        return "model.safetensors", {"I8": size}
    _, tensors = sharded(shards=2, layers_per_shard=1)
    name = "model-00002-of-00002.safetensors"
    mine = {k: v for k, v in tensors.items() if k.startswith("model.layers.1.")}
    mine["model.layers.1.norm.weight"] = np.ones(48, np.float32)
    files[name] = write_reference(mine, metadata={"format": "pt"})
    tensors.update(mine)
    hub.push(repo_id, files)
    return name, expected_counts(tensors)


@pytest.mark.parametrize("one_call", [True, False], ids=["one-call endpoint", "range reads"])
def test_after_five_repos_change_one_file_each(hub_env: HubStandIn, one_call: bool) -> None:
    hub_env.metadata_api = one_call
    expected = _fleet(hub_env, 60)
    counts(rt.scan(expected, concurrency=16))
    first_bytes = file_bytes(hub_env)
    changed = {}
    for i in (0, 1, 2, 3, 4):
        location = f"hf://fleet/m{i}"
        name, new_counts = _change_one_file(hub_env, location.removeprefix("hf://"))
        expected[location] = new_counts
        repo = hub_env.repos[location.removeprefix("hf://")]
        changed[location] = (name, repo.commits[repo.branches["main"]][name])
    hub_env.log.clear()
    second = counts(rt.scan(expected, concurrency=16))
    assert {k: v["by_dtype"] for k, v in second.items()} == expected
    headers = sum(header_bytes(data) for _, data in changed.values())
    assert file_bytes(hub_env) <= 2 * headers + 0.05 * first_bytes
    per_repo = requests_per_repo(hub_env, expected)
    assert all(n <= 1 for location, n in per_repo.items() if location not in changed)
    # A changed repo reads its changed file alone (or none, when the one-call answer holds
    # its header): every other file is found in the cache under its unchanged content.
    for location, (name, _) in changed.items():
        reads = [
            e.path.rsplit("/", 1)[1]
            for e in hub_env.log.entries
            if "/resolve/" in e.path and f"/{location.removeprefix('hf://')}/" in e.path
        ]
        assert set(reads) <= {name}, (location, reads)


def test_etags_that_are_no_content_ids_never_name_bytes(hub_env: HubStandIn) -> None:
    # A server answering for a hub whose ETags are no content hashes (here: the size): two
    # different files of one size must not be taken for one, on a later visit either.
    hub_env.size_etags = True
    one = {"model.safetensors": write_reference({"w": np.ones(40, np.int8)})}
    other = {"model.safetensors": write_reference({"w": np.ones(20, np.int16)})}
    assert len(one["model.safetensors"]) == len(other["model.safetensors"])
    hub_env.add("org/one", one)
    hub_env.add("org/other", other)
    expected = {"hf://org/one": {"I8": 40}, "hf://org/other": {"I16": 20}}
    for _ in range(3):
        found = {r.location: r.summary.by_dtype for r in rt.scan(expected) if r.summary}
        assert found == expected


# --- offline ------------------------------------------------------------------------------------


@SHAPES
@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "REMOTETENSORS_OFFLINE"])
def test_offline_scan_sends_nothing_and_counts_right(
    hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    expected = _fleet(hub_env, 30)
    online = counts(rt.scan(expected, concurrency=16))
    hub_env.log.clear()
    monkeypatch.setenv(variable, "1")
    assert counts(rt.scan(expected, concurrency=16)) == online
    with rt.open_model("hf://fleet/m3") as model:  # a sharded one: its tensors' headers too
        assert model.parameter_count() == expected["hf://fleet/m3"]
    assert hub_env.log.entries == []
    # A repo never seen offline: one clear error, naming it, saying what to do.
    hub_env.add("org/never", {"model.safetensors": write_reference({"w": np.ones(3)})})
    (result,) = rt.scan(["hf://org/never"])
    assert result.error_type == "OfflineError"
    assert result.error is not None
    assert result.error.startswith("hf://org/never: offline")
    assert variable in result.error
    assert "run once online" in result.error
    with pytest.raises(rt.OfflineError, match=r"hf://org/never.*run once online"):
        rt.open_model("hf://org/never")
    with pytest.raises(ConnectionError):  # what huggingface_hub's offline error is too
        rt.safe_open("hf://org/never/model.safetensors")
    assert hub_env.log.entries == []


def test_offline_reads_of_tensor_data_raise_and_send_nothing(
    hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    files, tensors = sharded(shards=2)
    hub_env.add("org/a", files)
    rt.open_model("hf://org/a").close()
    hub_env.log.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with rt.open_model("hf://org/a") as model:
        assert model.keys() == sorted(tensors)
        with pytest.raises(rt.OfflineError, match="model-0000"):
            model.get_tensor("model.layers.0.norm.weight")
    assert hub_env.log.entries == []


# --- faults --------------------------------------------------------------------------------------


def test_corrupted_entries_are_dropped_and_rewritten(
    hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _fleet(hub_env, 12)
    first = counts(rt.scan(expected, concurrency=4))
    cache = store()
    paths = [info.path for info in cache.entries()]
    assert paths
    assert all(info.ok for info in cache.entries())
    for path in paths:  # one byte flipped in each, in place
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x20
        path.write_bytes(bytes(data))
    assert not any(info.ok for info in cache.entries())
    hub_env.log.clear()
    assert counts(rt.scan(expected, concurrency=4)) == first  # no error, no wrong count
    assert hub_env.log.entries  # read again, over the network
    # Rewritten: offline, every entry the scan needs is whole again.
    hub_env.log.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert counts(rt.scan(expected, concurrency=4)) == first
    assert hub_env.log.entries == []
    # What no scan asked for since (the index read while the one-call route was not known
    # yet) stays as it was until read or pruned: pruning removes it, and only it.
    broken = [info.path for info in cache.entries() if not info.ok]
    assert cache.prune()[0] == len(broken)
    assert all(info.ok for info in cache.entries())


def test_truncated_and_foreign_entries_read_as_misses(
    hub_env: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    files, tensors = sharded(shards=2)
    hub_env.add("org/a", files)
    rt.open_model("hf://org/a").close()
    cache = store()
    paths = sorted(info.path for info in cache.entries())
    # Each entry replaced by another one's bytes (a foreign entry), or cut short.
    originals = [p.read_bytes() for p in paths]
    for i, path in enumerate(paths):
        other = originals[(i + 1) % len(originals)]
        path.write_bytes(other if i % 2 else originals[i][: len(originals[i]) // 3])
    with rt.open_model("hf://org/a") as model:
        assert model.parameter_count() == expected_counts(tensors)
    hub_env.log.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with rt.open_model("hf://org/a") as model:  # all it needs is whole again
        assert model.parameter_count() == expected_counts(tensors)
    assert hub_env.log.entries == []
    cache.prune()
    assert all(info.ok for info in cache.entries())


def test_two_processes_scan_at_once_sharing_the_folder(
    hub_env: HubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _fleet(hub_env, 40)
    script = tmp_path / "scan.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            import remotetensors as rt
            locations = json.loads(sys.argv[1])
            out = {}
            for result in rt.scan(locations, concurrency=8, token=False):
                out[result.location] = result.summary.by_dtype if result.summary else result.error
            print(json.dumps(out))
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": SRC, "HF_ENDPOINT": hub_env.endpoint}
    command = [sys.executable, str(script), json.dumps(list(expected))]
    # Twice: at once on an empty folder, then at once on the folder they filled.
    for _ in range(2):
        runs = [
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        for run in runs:
            out, err = run.communicate(timeout=300)
            assert run.returncode == 0, err.decode()
            assert json.loads(out) == expected
    cache = store()
    infos = list(cache.entries())
    assert infos
    assert all(info.ok for info in infos)
    assert not list((cache.folder / "entries").glob("*/*.part"))
    # Consistent: offline, this process counts every repo from what the two left.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_env.log.clear()
    offline = {r.location: r.summary.by_dtype for r in rt.scan(expected) if r.summary}
    assert offline == expected
    assert hub_env.log.entries == []


def test_open_model_of_a_cached_model_in_a_fresh_process(hub_env: HubStandIn) -> None:
    files, tensors = sharded(shards=3)
    hub_env.add("org/a", files)
    with rt.open_model("hf://org/a") as model:
        assert model.num_parameters == sum(t.size for t in tensors.values())
    script = (
        "import json, remotetensors as rt\n"
        "with rt.open_model('hf://org/a', token=False) as m:\n"
        "    print(json.dumps(m.parameter_count()))\n"
    )
    for offline, requests in (("1", 0), ("", 1)):
        hub_env.log.clear()
        env = {
            **os.environ,
            "PYTHONPATH": SRC,
            "HF_ENDPOINT": hub_env.endpoint,
            "HF_HUB_OFFLINE": offline,
        }
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == expected_counts(tensors)
        assert len(hub_env.log.entries) == requests, [e.path for e in hub_env.log.entries]


# --- integrity ---------------------------------------------------------------------------------


def test_a_size_the_hub_lists_otherwise_is_an_error_naming_both(hub_env: HubStandIn) -> None:
    big = {"w": np.ones(LFS_THRESHOLD, np.float32)}  # served by the CDN, with X-Linked-Size
    data = write_reference(big)
    hub_env.add("org/a", {"model.safetensors": data})
    hub_env.listed_sizes["model.safetensors"] = len(data) + 8
    with pytest.raises(rt.BadResponseError) as caught:
        rt.open_model("hf://org/a")
    message = str(caught.value)
    assert f"lists {len(data) + 8} bytes" in message
    assert f"has {len(data)} bytes" in message
    assert "hf://org/a/model.safetensors" in message
    # Also where only the listing says it: a file of a commit met after an earlier visit (the
    # commit's listing is read to find the files that did not change).
    hub_env.listed_sizes.clear()
    hub_env.add("org/b", {"model.safetensors": write_reference({"w": np.ones(5, np.int8)})})
    rt.open_model("hf://org/b").close()
    hub_env.push("org/b", {"model.safetensors": write_reference({"w": np.ones(6, np.int8)})})
    hub_env.listed_sizes["model.safetensors"] = 3
    with pytest.raises(rt.BadResponseError, match=r"lists 3 bytes .*the repo's file listing"):
        rt.open_model("hf://org/b")
    assert any("/tree/" in e.path for e in hub_env.log.entries)


# --- turned off ----------------------------------------------------------------------------------


def test_cache_false_keeps_nothing_and_asks_everything(hub_env: HubStandIn) -> None:
    expected = _fleet(hub_env, 9)
    off = rt.ReadOptions(cache=False, progress=False)
    counts(rt.scan(expected, options=off))  # the process learns the one-call route
    hub_env.log.clear()
    first = counts(rt.scan(expected, options=off))
    asked = sorted(e.path for e in hub_env.log.entries)
    hub_env.log.clear()
    assert counts(rt.scan(expected, options=off)) == first
    assert sorted(e.path for e in hub_env.log.entries) == asked
    assert store().usage() == (0, 0)
