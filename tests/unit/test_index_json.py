"""A sharded index names files inside its model only: the parser refuses every other name, and
the hub's one-call metadata is held to the same rule. No IO."""

from __future__ import annotations

import json

import pytest

from remotetensors.errors import HeaderError, HeaderErrorKind
from remotetensors.formats.hub_metadata import parse_sharded_metadata
from remotetensors.formats.index_json import check_shard_name, parse_index

INDEX = "/models/m/model.safetensors.index.json"

OUTSIDE = {
    "parent": "../outside/x.safetensors",
    "parent inside a subfolder": "sub/../../outside/x.safetensors",
    "dot dot alone": "..",
    "absolute": "/etc/outside/x.safetensors",
    "http": "http://127.0.0.1:9/outside/x.safetensors",
    "https with a token": "https://host/x.safetensors?token=tok123",
    "hub": "hf://org/other/x.safetensors",
    "s3": "s3://bucket/x.safetensors",
    "file": "file:///etc/x.safetensors",
    "fsspec chain": "simplecache::s3://bucket/x.safetensors",
    "windows drive": "C:x.safetensors",
    "backslash": "sub\\..\\..\\outside\\x.safetensors",
    "windows absolute": "\\\\server\\share\\x.safetensors",
    "percent-encoded parent": "%2e%2e/outside/x.safetensors",
    "percent-encoded slash": "..%2foutside%2fx.safetensors",
    "empty": "",
    "NUL": "x.safetensors\x00.png",
    "newline": "x\n.safetensors",
}


def index(file: str) -> bytes:
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": file}
    return json.dumps({"metadata": {"total_size": 8}, "weight_map": weight_map}).encode()


@pytest.mark.parametrize("name", list(OUTSIDE))
def test_an_index_naming_a_file_outside_its_model_is_refused(name: str) -> None:
    with pytest.raises(HeaderError) as caught:
        parse_index(index(OUTSIDE[name]), location=INDEX)
    error = caught.value
    assert error.kind is HeaderErrorKind.FILE_OUTSIDE_MODEL
    assert str(error).startswith(f"{INDEX}: shard file outside the model: the entry `b` -> ")
    assert "tok123" not in str(error)  # an entry's URL is named redacted


@pytest.mark.parametrize(
    "file",
    [
        "model-00002-of-00002.safetensors",
        "sub/model-00002-of-00002.safetensors",
        "sub/./deeper/x.safetensors",
        "a..b.safetensors",
        "...safetensors",
        "sub/x:y.safetensors",
        "caf\u00e9 w.safetensors",
    ],
)
def test_files_inside_the_model_stay_allowed(file: str) -> None:
    parsed = parse_index(index(file), location=INDEX)
    assert parsed.weight_map["b"] == file
    check_shard_name(file)


def test_the_hubs_metadata_names_files_inside_its_model_only() -> None:
    header = {"w": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}}
    for name in ("../other/x.safetensors", "https://host/x.safetensors", "/x.safetensors"):
        body = json.dumps({"index": {}, "headers": {name: header}}).encode()
        with pytest.raises(HeaderError) as caught:
            parse_sharded_metadata(body, location="hf://org/m/model.safetensors.index.json")
        assert caught.value.kind is HeaderErrorKind.FILE_OUTSIDE_MODEL
    body = json.dumps({"index": {}, "headers": {"sub/x.safetensors": header}}).encode()
    assert list(parse_sharded_metadata(body).headers) == ["sub/x.safetensors"]
