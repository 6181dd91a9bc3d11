from __future__ import annotations

import os

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
