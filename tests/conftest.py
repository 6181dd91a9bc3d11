from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from remotetensors.sources import ratelimit

# CI runs more examples; a developer's run stays quick.
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True)
def fresh_rate_limiters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no host's rate-limit state. The limiters are per process and keyed
    by host and port, and the OS hands a freed port to the next test's server: a 429 or an
    exhausted policy of one test's server would hold back the next one's requests (up to
    ``MAX_WAIT_SECONDS``, five minutes), a hang with nothing on the wire."""
    monkeypatch.setattr(ratelimit, "_registry", {})


@pytest.fixture(autouse=True, scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache folder for the whole session, set before any other fixture runs: processes that
    session- or module-wide fixtures start (a Dask cluster's workers) inherit it, so nothing a
    test does writes to the user's real cache. Each test then has its own (:func:`own_cache`)."""
    folder = tmp_path_factory.mktemp("session-cache")
    before = os.environ.get("REMOTETENSORS_CACHE")
    os.environ["REMOTETENSORS_CACHE"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("REMOTETENSORS_CACHE", None)
    else:
        os.environ["REMOTETENSORS_CACHE"] = before


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has a persistent cache of its own, in a fresh folder: a test never writes to
    the user's real cache, and one test's entries never serve another's requests (tests count
    requests). Offline mode is off unless a test turns it on."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("REMOTETENSORS_CACHE", str(folder))
    monkeypatch.delenv("REMOTETENSORS_CACHE_MAX_BYTES", raising=False)
    for variable in ("REMOTETENSORS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    return folder
