"""Every request to a hub: one commit per model, one retry policy, one wording of errors.

Against the hub stand-in: a push between two reads of one discovery never gives a model built
from two commits (it reads the pinned commit, or fails naming both); the one-call metadata
call and the file listing are retried as file reads are, by the user's options; and a refusal
is the same error for a listing as for a file.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.sources.hub.api import fetch_sharded_metadata
from remotetensors.sources.hub.repo import HubPath, HubRepo
from tests.hub_standin import HubStandIn
from tests.integration.test_models import sharded
from tests.reference import write_reference

FAST = rt.HttpOptions(backoff_initial_seconds=0.001, backoff_max_seconds=0.002)
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return hub


def answered(hub: HubStandIn, tail: str) -> bool:
    """Whether a request whose path ends with ``tail`` has been answered."""
    return any(e.path.endswith(tail) and e.status for e in hub.log.entries)


def when_asked(fragment: str, ready: Callable[[], bool], then: Callable[[], Any]) -> Any:
    """A ``before`` hook: the first request for ``fragment`` waits until ``ready()`` (at most
    10 s), then ``then()`` runs (a push) before the hub answers it."""
    done: list[bool] = []

    async def hook(path: str) -> None:
        if fragment not in path or done:
            return
        done.append(True)
        for _ in range(1000):
            if ready():
                break
            await asyncio.sleep(0.01)
        then()

    return hook


# --- 4. one commit per model ------------------------------------------------------------------


def test_a_push_between_the_index_and_a_config_read_is_a_changed_file(
    hub_env: HubStandIn,
) -> None:
    files, _ = sharded(shards=2, layers_per_shard=1)
    files["config.json"] = json.dumps({"model_type": "llama", "hidden_size": 32}).encode()
    first = hub_env.add("org/pushed", files)
    moved = {**files, "config.json": json.dumps({"model_type": "mistral"}).encode()}
    others = [f"/resolve/main/{name}" for name in (INDEX, SINGLE, "quantization_config.json")]
    others.append(f"/safetensors-metadata/{INDEX}")
    pushed: list[str] = []
    # config.json is asked in the same round as the index: it is answered last, after a push.
    hub_env.before = when_asked(
        "/config.json",
        lambda: all(answered(hub_env, tail) for tail in others),
        lambda: pushed.append(hub_env.push("org/pushed", moved)),
    )
    with pytest.raises(rt.RemoteFileChangedError) as caught:
        rt.open_model("hf://org/pushed", token=False)
    message = str(caught.value)
    assert message.startswith("hf://org/pushed/config.json: ")
    assert first in message
    assert pushed[0] in message


def test_a_push_between_the_index_and_the_shard_reads_leaves_the_model_on_its_commit(
    hub_env: HubStandIn,
) -> None:
    files, tensors = sharded(shards=3, layers_per_shard=1)
    first = hub_env.add("org/sharded", files)
    hub_env.metadata_api = False  # the shard headers come from range reads of the shards
    moved = {n: d[:-8] + b"\0" * 8 if n.endswith(".safetensors") else d for n, d in files.items()}
    hub_env.before = when_asked(
        "/model-00002-of-00003.safetensors",
        lambda: answered(hub_env, f"/resolve/main/{INDEX}"),
        lambda: hub_env.push("org/sharded", moved),
    )
    with rt.open_model("hf://org/sharded", token=False) as model:
        for name, array in model.get_tensors(list(tensors)).items():
            assert array.tobytes() == tensors[name].tobytes()
    assert hub_env.repos["org/sharded"].branches["main"] != first  # the push happened
    shards = [e.path for e in hub_env.log.entries if "/resolve/" in e.path and "model-" in e.path]
    assert shards
    assert all(f"/resolve/{first}/" in path for path in shards)


def test_a_small_file_opened_at_the_branch_is_read_at_its_commit_after_a_push(
    hub_env: HubStandIn,
) -> None:
    # Small files are served by the hub itself, not the CDN: a later read of one asked for at
    # "main" would land on whatever main is by then.
    w = np.arange(1000, dtype=np.float32)
    first = hub_env.add("org/small", {"model.safetensors": write_reference({"w": w})})
    options = rt.ReadOptions(header_window_bytes=256)  # the tensor needs a read of its own
    with rt.safe_open("hf://org/small/model.safetensors", options=options, token=False) as f:
        hub_env.push("org/small", {"model.safetensors": write_reference({"w": w + 1})})
        assert f.get_tensor("w").tobytes() == w.tobytes()
    reads = [e.path for e in hub_env.log.entries if "/resolve/" in e.path]
    assert reads[0] == "/org/small/resolve/main/model.safetensors"
    assert reads[1:] == [f"/org/small/resolve/{first}/model.safetensors"]


def test_an_answer_from_another_commit_is_refused_naming_both(hub: HubStandIn) -> None:
    data = write_reference({"w": np.arange(4, dtype=np.float32)})
    first = hub.add("org/two", {"a.safetensors": data, "b.safetensors": data})

    async def go() -> None:
        repo = HubRepo(HubPath.parse("hf://org/two"), endpoint=hub.endpoint, token=False)
        early, late = repo.source("a.safetensors"), repo.source("b.safetensors")  # at "main"
        try:
            await early.open_prefix(64)
            second = hub.push("org/two", {"a.safetensors": data, "b.safetensors": data})
            with pytest.raises(rt.RemoteFileChangedError) as caught:
                await late.open_prefix(64)
            message = str(caught.value)
            assert message.startswith("hf://org/two/b.safetensors: ")
            assert first in message
            assert second in message
        finally:
            await early.aclose()
            await late.aclose()

    asyncio.run(go())


# --- 7. one retry policy ----------------------------------------------------------------------


def repo_of(hub: HubStandIn, options: rt.HttpOptions) -> HubRepo:
    return HubRepo(
        HubPath.parse("hf://org/api"), endpoint=hub.endpoint, token=False, http_options=options
    )


def requests_to(hub: HubStandIn, fragment: str) -> int:
    return sum(fragment in e.path for e in hub.log.entries)


RETRIED = [408, 429, 500, 502, 503, 504]


@pytest.mark.parametrize("status", RETRIED)
def test_the_metadata_call_is_retried_as_file_reads_are(hub: HubStandIn, status: int) -> None:
    files, _ = sharded(shards=2, layers_per_shard=1)
    hub.add("org/api", files)
    hub.fail("/safetensors-metadata/", status, times=2, Retry_After="0")
    answer = asyncio.run(fetch_sharded_metadata(repo_of(hub, FAST), INDEX))
    assert answer.status == 200
    assert answer.body is not None
    assert requests_to(hub, "/safetensors-metadata/") == 3


def test_the_metadata_call_gives_up_after_the_users_attempts(hub: HubStandIn) -> None:
    files, _ = sharded(shards=2, layers_per_shard=1)
    hub.add("org/api", files)
    hub.fail("/safetensors-metadata/", 503, times=2)
    options = rt.HttpOptions(max_attempts=2, backoff_initial_seconds=0.001)
    answer = asyncio.run(fetch_sharded_metadata(repo_of(hub, options), INDEX))
    assert (answer.status, answer.body) == (0, None)  # the caller reads the files instead
    assert "gave up after 2 attempts" in answer.reason
    assert requests_to(hub, "/safetensors-metadata/") == 2


@pytest.mark.parametrize("status", RETRIED)
def test_the_file_listing_is_retried_as_file_reads_are(hub: HubStandIn, status: int) -> None:
    hub.add("org/api", {"a.gguf": b"x", "sub/b.json": b"{}"})
    hub.fail("/tree/", status, times=2, Retry_After="0")
    assert asyncio.run(repo_of(hub, FAST).list_files()) == ["a.gguf", "sub/b.json"]
    assert requests_to(hub, "/tree/") == 3


def test_the_file_listing_gives_up_after_the_users_attempts(hub: HubStandIn) -> None:
    hub.add("org/api", {"a.gguf": b"x"})
    hub.fail("/tree/", 500, times=3)
    options = rt.HttpOptions(max_attempts=3, backoff_initial_seconds=0.001)
    with pytest.raises(rt.TransportError, match=r"^hf://org/api: HTTP 500 \(gave up after 3"):
        asyncio.run(repo_of(hub, options).list_files())
    assert requests_to(hub, "/tree/") == 3


# --- 7. one status-to-error mapping -------------------------------------------------------------


def refusal_of_file(hub: HubStandIn, repo: str, token: str | bool) -> Exception:
    with pytest.raises(rt.RemoteTensorsError) as caught:
        rt.safe_open(f"hf://{repo}/model.safetensors", token=token, http_options=FAST)
    return caught.value


def refusal_of_listing(hub: HubStandIn, repo: str, token: str | bool) -> Exception:
    path = HubPath.parse(f"hf://{repo}")
    listing = HubRepo(path, endpoint=hub.endpoint, token=token, http_options=FAST).list_files()
    with pytest.raises(rt.RemoteTensorsError) as caught:
        asyncio.run(listing)
    return caught.value


def words(error: Exception) -> str:
    """The message after the location it names, the URL asked left out."""
    return re.sub(r"from http://\S+\)", "from <url>)", str(error).split(": ", 1)[1])


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no such repo, no token", rt.NotFoundError),
        ("no such repo, a token", rt.NotFoundError),
        ("no such revision", rt.NotFoundError),
        ("gated", rt.PermissionDeniedError),
        ("plain 401", rt.PermissionDeniedError),
        ("plain 403", rt.PermissionDeniedError),
        ("plain 404", rt.NotFoundError),
        ("plain 410", rt.NotFoundError),
    ],
)
def test_a_listing_is_refused_with_the_error_of_a_file_read(
    hub_env: HubStandIn, case: str, expected: type[Exception]
) -> None:
    data = write_reference({"w": np.arange(4, dtype=np.float32)})
    hub_env.add("org/there", {"model.safetensors": data})
    hub_env.add("org/gated", {"model.safetensors": data}, gated=True)
    repo: str = "org/there"
    token: str | bool = False
    if case.startswith("no such repo"):
        repo, token = "org/absent", ("hf_some_token" if "a token" in case else False)
    elif case == "no such revision":
        repo = "org/there@nope"
    elif case == "gated":
        repo = "org/gated"
    errors = []
    for refusal, fragment in ((refusal_of_file, "/resolve/"), (refusal_of_listing, "/tree/")):
        if case.startswith("plain"):
            hub_env.fail(fragment, int(case.split()[1]))
        errors.append(refusal(hub_env, repo, token))
    from_file, from_listing = errors
    assert type(from_file) is type(from_listing) is expected
    assert words(from_file) == words(from_listing), (str(from_file), str(from_listing))
