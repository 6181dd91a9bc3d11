"""Config files (pure part): parsed, or a message naming the file; never an exception."""

from __future__ import annotations

from remotetensors.models.configs import parse_config


def test_an_object_is_returned() -> None:
    assert parse_config(b'{"model_type": "llama"}', location="x/config.json") == (
        {"model_type": "llama"},
        None,
    )


def test_bad_bytes_give_a_message_naming_the_file() -> None:
    for data, words in (
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'"text"', "expected a JSON object, got str"),
    ):
        config, problem = parse_config(data, location="s3://b/m/config.json")
        assert config is None
        assert problem is not None
        assert problem.startswith("s3://b/m/config.json: ")
        assert words in problem
