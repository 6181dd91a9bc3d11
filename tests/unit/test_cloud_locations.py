"""A version in a GCS or Azure location stays with its file (no IO: split_location only)."""

from __future__ import annotations

import pytest

from remotetensors.sources.resolve import FsspecPlace, HttpPlace, split_location


@pytest.mark.parametrize(
    ("location", "base", "name", "opened"),
    [
        ("gs://b/m/model.safetensors#1700000000", "gs://b/m", "model.safetensors", "#1700000000"),
        ("gs://b/model.safetensors?generation=17", "gs://b", "model.safetensors", "?generation=17"),
        (
            "az://c/model.safetensors?versionid=2026-01-01",
            "az://c",
            "model.safetensors",
            "?versionid=2026-01-01",
        ),
        ("gs://b/m/", "gs://b/m", None, None),
    ],
)
def test_a_version_stays_with_its_file(
    location: str, base: str, name: str | None, opened: str | None
) -> None:
    place, found = split_location(location, cache=False)
    assert isinstance(place, FsspecPlace)
    assert (place.base, found) == (base, name)
    if name is not None:
        assert place.location(name) == location
        assert place.queries.get(name, "") == opened


def test_an_http_fragment_is_not_a_version() -> None:
    """Over HTTP a fragment is never sent: the location is read as before (a prefix)."""
    place, name = split_location("https://host/m.safetensors#x", cache=False)
    assert isinstance(place, HttpPlace)
    assert name is None
