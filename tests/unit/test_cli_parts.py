"""The command line's pure parts: option values, slices, table layout."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from remotetensors.cli.options import (
    UsageError,
    add_location_options,
    open_options,
    parse_size,
    parse_slice,
    resolve_negative,
)
from remotetensors.cli.table import render


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_location_options(parser)
    return parser.parse_args(["x", *argv])


def test_sizes() -> None:
    assert parse_size("512", "--x") == 512
    assert parse_size("10MB", "--x") == 10_000_000
    assert parse_size("64KiB", "--x") == 65536
    assert parse_size("1.5 GB", "--x") == 1_500_000_000
    with pytest.raises(UsageError, match="--x wants a size"):
        parse_size("lots", "--x")


def test_options_map_to_http_and_storage_options() -> None:
    kwargs = open_options(
        parsed(
            "--timeout", "3", "--retries", "0", "--header", "Authorization: Bearer t",
            "--accept-whole-body-below", "1MB", "--option", "anon=true",
            "--option", "key=0123", "--option", 'config_kwargs={"read_timeout": 5}',
            "--ca-bundle", __file__,
        )
    )  # fmt: skip
    http = kwargs["http_options"]
    assert (http.read_timeout_seconds, http.connect_timeout_seconds, http.max_attempts) == (3, 3, 1)
    assert http.headers == {"Authorization": "Bearer t"}
    assert http.accept_whole_body_below_bytes == 1_000_000
    assert http.ca_bundle == __file__
    assert kwargs["storage_options"] == {
        "anon": True,
        "key": "0123",  # digits stay text
        "config_kwargs": {"read_timeout": 5},
    }
    for argv, message in [
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--timeout", "0"], "--timeout must be more than 0"),
        (["--retries", "-1"], "--retries must be 0 or more"),
        (["--header", "nocolon"], "--header wants"),
        (["--option", "novalue"], "--option wants KEY=VALUE"),
        (["--option", "x={bad"], "not valid JSON"),
        (["--ca-bundle", "/no/such/ca.pem"], "--ca-bundle names no file"),
    ]:
        with pytest.raises(UsageError, match=message):
            open_options(parsed(*argv))


def test_slices_with_negative_bounds_resolve_like_python() -> None:
    data = np.arange(7 * 5 * 3).reshape(7, 5, 3)
    for expr in ["-3:", ":-2", "-4:-1, 1:", "..., -1:", "-1", "2:, ..., -2", ":, -5:-1:2"]:
        index = parse_slice(expr)
        resolved = resolve_negative(index, data.shape)
        assert all(
            b is None or b >= 0
            for item in resolved
            if isinstance(item, slice)
            for b in (item.start, item.stop)
        )
        assert np.array_equal(data[resolved], data[index]), expr
    with pytest.raises(UsageError, match="before the start of axis 0"):
        resolve_negative(parse_slice("-8:"), data.shape)
    with pytest.raises(UsageError, match="'a' is not an integer"):
        parse_slice("a:b")
    with pytest.raises(UsageError, match="at most start:stop:step"):
        parse_slice("1:2:3:4")


def test_tables_drop_columns_before_cutting_and_align_numbers() -> None:
    headers = ["name", "dtype", "shape", "size", "file"]
    rows = [["a.very.long.tensor.name.q_proj", "F16", "[4096, 4096]", "33.6 MB", "model-1.st"]]
    rows.append(["b.k_proj", "BF16", "[8]", "16 B", "model-2.st"])
    piped = render(headers, rows, right=["size"])
    lines = piped.splitlines()
    assert lines[1].startswith("a.very.long.tensor.name.q_proj  F16")
    assert lines[1].endswith("model-1.st")  # piped output keeps every column
    ends = [
        line.index(c) + len(c) for line, c in zip(lines, ["size", "33.6 MB", "16 B"], strict=True)
    ]
    assert len(set(ends)) == 1  # right-aligned, header included
    narrow = render(headers, rows, right=["size"], width=52, drop_first=["file", "size", "dtype"])
    assert narrow.splitlines()[0].split() == ["name", "dtype", "shape"]
    assert max(len(line) for line in narrow.splitlines()) <= 52
    tiny = render(headers, rows, right=["size"], width=20, drop_first=["file", "size", "dtype"])
    lines = tiny.splitlines()
    assert "a.very.long.tensor.name.q_proj" in lines  # whole, on a line of its own
    assert lines[lines.index("b.k_proj") + 1].split() == ["[8]"]
