"""The command line against loopback servers: human and JSON output, errors, the demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from remotetensors.cli import main, parse_slice
from remotetensors.quantization.moe import ACTIVE_CONVENTION
from tests.integration.test_models import expected_counts, serve, sharded
from tests.reference import write_reference
from tests.servers import FaultyServer


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_params_human_and_json(faulty: FaultyServer, capsys: pytest.CaptureFixture[str]) -> None:
    files, tensors = sharded(shards=3)
    base = serve(faulty, files)
    status, out, _ = run(capsys, "params", base, "--json")
    assert status == 0
    data = json.loads(out)
    total = sum(t.size for t in tensors.values())
    assert data == {
        "parameters": total,
        "exact": True,
        "active_parameters": total,  # a dense model: all of it
        "active_exact": True,
        "active_convention": ACTIVE_CONVENTION,
        "moe": None,
        "quantization": None,
        "declared_parameters": None,
        "stored_parameters": total,
        "parameters_by_dtype": expected_counts(tensors),
        "unpacked_tensors": 0,
        "auxiliary_tensors": 0,
        "total": total,
        "by_dtype": expected_counts(tensors),
        "bytes": sum(t.nbytes for t in tensors.values()),
        "files": 3,
        "bits_per_weight": {"BF16": 16.0, "F16": 16.0, "F32": 32.0},
        "bits_per_parameter": sum(t.nbytes for t in tensors.values()) * 8 / total,
    }
    status, out, _ = run(capsys, "params", base)
    assert status == 0
    assert out.startswith(f"{total / 1000:.1f}K parameters ({total:,})")
    assert "BF16" in out


def test_info_and_ls(faulty: FaultyServer, capsys: pytest.CaptureFixture[str]) -> None:
    files, tensors = sharded(shards=2)
    base = serve(faulty, files)
    status, out, _ = run(capsys, "info", base, "--json")
    assert status == 0
    info = json.loads(out)
    assert info["tensors"] == len(tensors)
    assert {f["format"] for f in info["files"].values()} == {"safetensors"}
    assert all(f["metadata"] == {"format": "pt"} for f in info["files"].values())
    status, out, _ = run(capsys, "info", base)
    assert "format:     safetensors" in out
    status, out, _ = run(capsys, "ls", base, "--filter", "model.layers.0.*", "--json")
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["model.layers.0.mlp.weight", "model.layers.0.norm.weight"]
    assert rows[0]["shape"] == [64, 32]
    assert rows[0]["file"] == "model-00001-of-00002.safetensors"
    status, out, _ = run(capsys, "ls", base, "--filter", "model.layers.0.*")
    assert out.splitlines()[0].split() == ["name", "dtype", "shape", "size", "file"]
    assert len(out.splitlines()) == 3


def test_get_writes_npy_and_safetensors(
    faulty: FaultyServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file

    files, tensors = sharded(shards=2)
    base = serve(faulty, files)
    name = "model.embed_tokens.weight"
    target = tmp_path / "rows.npy"
    status, _out, _ = run(capsys, "get", base, name, "--slice", "10:20, 0:8", "-o", str(target))
    assert status == 0
    assert np.load(target).tobytes() == tensors[name][10:20, 0:8].tobytes()
    target = tmp_path / "norm.safetensors"
    status, _, _ = run(capsys, "get", base, "model.layers.0.norm.weight", "-o", str(target))
    assert status == 0
    loaded = load_file(str(target))
    assert (
        loaded["model.layers.0.norm.weight"].tobytes()
        == tensors["model.layers.0.norm.weight"].tobytes()
    )


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing file", "No such file or directory"),
        ("404", "not found"),
        ("not safetensors", "not a safetensors file"),
        ("unknown tensor", "does not contain tensor"),
        ("bad slice", "out of bounds"),
    ],
)
def test_errors_are_one_line_and_non_zero(
    faulty: FaultyServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    message: str,
) -> None:
    good = faulty.put("m.safetensors", write_reference({"w": np.ones((4, 4), np.float32)}))
    text = tmp_path / "notes.safetensors"
    text.write_text("just some text, not tensors at all")
    argv = {
        "missing file": ["params", str(tmp_path / "absent.safetensors")],
        "404": ["params", f"{faulty.url}/f/absent.safetensors"],
        "not safetensors": ["info", str(text)],
        "unknown tensor": ["get", good, "nope", "-o", str(tmp_path / "x.npy")],
        "bad slice": ["get", good, "w", "--slice", "9:10", "-o", str(tmp_path / "x.npy")],
    }[case]
    status, out, err = run(capsys, *argv)
    assert status == 1
    assert out == ""
    assert err.startswith("remotetensors: error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_parse_slice() -> None:
    assert parse_slice("1000:2000") == (slice(1000, 2000),)
    assert parse_slice(":, 0:8:2, 3, ...") == (slice(None), slice(0, 8, 2), 3, Ellipsis)
    with pytest.raises(ValueError, match="bad slice"):
        parse_slice("1:2:3:4")


def test_demo_runs_offline_as_a_module(tmp_path: Path) -> None:
    users_cache = tmp_path / "users-cache"
    result = subprocess.run(
        [sys.executable, "-m", "remotetensors", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "REMOTETENSORS_CACHE": str(users_cache)},
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "$ remotetensors params" in out
    assert "$ remotetensors get" in out
    assert "Traceback" not in result.stderr
    assert result.stderr == ""  # no warning either
    # The folder the demo wrote to is gone when it ends: its path is never shown.
    assert tempfile.gettempdir() not in out
    assert "-> rows.npy" in out
    # Round three: a mixture of experts' active parameters (8 experts of 3 x 256 x 128, 2 used
    # per token, in 2 layers: 6 unused experts x 98,304 x 2 layers fewer than the total).
    moe = out.split("/moe/\n", 1)[1]
    total = int(moe.split("(", 1)[1].split(")", 1)[0].replace(",", ""))
    active = int(moe.split("active per token (", 1)[1].split(")", 1)[0].replace(",", ""))
    assert total - active == 6 * 3 * 256 * 128 * 2
    # Coming back with the network off: nothing crossed it, and the demo's cache was its own.
    assert "requests sent: 0" in out
    assert "crossed the network: 0 requests (the headers came from the cache)" in out
    assert not users_cache.exists()
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "torch is not installed" in out
        assert out.count("crossed the network") == 5
    else:  # the .bin repo counted, one layer loaded into torch
        assert "131,584" in out.split("/bin/\n", 1)[1]  # 2 x (256 x 256 + 256)
        assert "loaded (256, 256)" in out
        assert out.count("crossed the network") == 7


def test_an_unexpected_failure_is_one_line_unless_debugging(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import remotetensors.cli as cli
    import remotetensors.cli.params as params_command

    def broken(args: object) -> int:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(params_command, "run", broken)
    monkeypatch.delenv(cli.DEBUG_VARIABLE, raising=False)
    status, out, err = run(capsys, "params", "anywhere")
    assert status == 1
    assert out == ""
    assert err.count("\n") == 1
    assert "RuntimeError: boom second line" in err
    assert "REMOTETENSORS_DEBUG=1" in err
    monkeypatch.setenv(cli.DEBUG_VARIABLE, "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["params", "anywhere"])


@pytest.mark.parametrize("bug", [ValueError, KeyError, IndexError, TypeError])
def test_a_builtin_error_from_a_bug_is_unexpected_not_a_user_error(
    bug: type[Exception], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import remotetensors.cli as cli
    import remotetensors.cli.params as params_command

    def broken(args: object) -> int:
        raise bug("a bug")

    monkeypatch.setattr(params_command, "run", broken)
    monkeypatch.delenv(cli.DEBUG_VARIABLE, raising=False)
    status, _, err = run(capsys, "params", "anywhere")
    assert status == 1
    assert f"{bug.__name__}:" in err
    assert "please report it" in err
    monkeypatch.setenv(cli.DEBUG_VARIABLE, "1")
    with pytest.raises(bug):
        main(["params", "anywhere"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["memory", "LOC", "--batch", "0"], "--batch must be at least 1, got 0"),
        (["memory", "LOC", "--context", "-1"], "--context must not be negative"),
        (["memory", "LOC", "--kv-dtype", "f13"], "--kv-dtype: unknown KV-cache dtype 'f13'"),
        (["params"], "params needs a location"),
    ],
)
def test_user_mistakes_are_one_line_errors_without_the_bug_notice(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = [str(tmp_path) if a == "LOC" else a for a in argv]
    status, _, err = run(capsys, *argv)
    assert status == 1
    assert err.startswith("remotetensors: error: ")
    assert message in err
    assert "please report it" not in err


def test_safe_open_of_a_repo_is_a_location_error() -> None:
    import remotetensors as rt

    with pytest.raises(rt.LocationError, match="names a repo or folder, not a file"):
        rt.safe_open("hf://org/repo")


def test_the_demo_server_is_quiet_when_a_client_leaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reader that cancels a request it no longer needs (discovery, once the single file has
    answered) leaves the demo's server writing to a closed socket: no traceback for that."""
    from remotetensors.cli.sample import CountingServer

    server = CountingServer(tmp_path)
    try:
        for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
            try:
                raise gone
            except OSError:
                server._httpd.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
        try:
            raise ValueError("a real fault")
        except ValueError:
            server._httpd.handle_error(None, ("127.0.0.1", 1))
        assert "ValueError: a real fault" in capsys.readouterr().err
    finally:
        server.stop()
