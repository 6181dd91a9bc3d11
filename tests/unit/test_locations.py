"""What a location's text says: its scheme, whether it names a file, local or not. No IO
beyond asking a local path whether it is a folder."""

from __future__ import annotations

import pytest

from remotetensors.sources.hub.repo import HubPath
from remotetensors.sources.local import LocalSource
from remotetensors.sources.names import FILE_SUFFIXES, scheme_of
from remotetensors.sources.resolve import (
    FsspecPlace,
    HttpPlace,
    HubPlace,
    LocalPlace,
    open_local_source,
    split_location,
)


@pytest.mark.parametrize("suffix", FILE_SUFFIXES)
def test_every_file_suffix_names_a_file_everywhere(suffix: str) -> None:
    # One list: a legacy one-word hub repo, a hub path, a URL and a local path agree.
    legacy = HubPath.parse(f"hf://gpt2/model{suffix}")
    assert (legacy.repo_id, legacy.path) == ("gpt2", f"model{suffix}")
    place, name = split_location(f"hf://gpt2/model{suffix}")
    assert isinstance(place, HubPlace)
    assert (place.repo.repo.repo_id, name) == ("gpt2", f"model{suffix}")
    place, name = split_location(f"https://host/dir/model{suffix}?sig=1")
    assert isinstance(place, HttpPlace)
    assert (place.base, name) == ("https://host/dir", f"model{suffix}")
    # The query stays with the file, out of its name (a signed URL's secret).
    assert place.location(f"model{suffix}") == f"https://host/dir/model{suffix}?sig=***"


def test_a_gguf_file_of_a_legacy_repo() -> None:
    path = HubPath.parse("hf://gpt2@v1/model-Q8_0.gguf")
    assert (path.repo_id, path.revision, path.path) == ("gpt2", "v1", "model-Q8_0.gguf")


@pytest.mark.parametrize(
    ("location", "scheme"),
    [
        ("HTTPS://Host/x", "https"),
        ("s3://bucket/key", "s3"),
        ("simplecache::s3://bucket/key", "simplecache"),
        ("file:///tmp/x", "file"),
        ("/tmp/x", ""),
        ("relative/x", ""),
        ("C:/models/x", ""),
        ("C:\\models\\x", ""),
        ("C://models/x", ""),  # a drive, as fsspec reads it on every system
    ],
)
def test_the_scheme_of_a_location(location: str, scheme: str) -> None:
    assert scheme_of(location) == scheme


@pytest.mark.parametrize(
    "location", ["C:\\models\\m.safetensors", "C:/models/m.safetensors", "C://models/m.safetensors"]
)
def test_a_windows_drive_path_is_local(location: str) -> None:
    assert isinstance(open_local_source(location), LocalSource)
    place, name = split_location(location)
    assert isinstance(place, LocalPlace)
    assert name is not None
    assert name.endswith("m.safetensors")


def test_other_schemes_are_not_local() -> None:
    assert open_local_source("hf://org/m/model.safetensors") is None
    assert open_local_source("HF://org/m/model.safetensors") is None
    assert open_local_source("https://host/m.safetensors") is None
    assert isinstance(split_location("s3://bucket/prefix/")[0], FsspecPlace)
