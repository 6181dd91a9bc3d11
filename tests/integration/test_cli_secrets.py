"""No secret in anything the command line prints: tables, text, ``--json``, errors, the status
line, progress bars.

Secrets in every form a user hands them over: a URL's password, a token as its user name, a
``?token=`` query, a signed URL's parameters (given, and reached by redirect), the values of
``--header`` (an API key, a cookie, a bearer token) and a hub token (``--token``). Every
command that reads a location runs with each of them, succeeding and failing, as text and as
JSON; none of the secrets may appear in its stdout or stderr, and the location it names is the
redacted one.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from remotetensors.cli import main
from tests.hub_standin import TOKEN, HubStandIn
from tests.integration.test_direct_requests import files_handler
from tests.integration.test_models import sharded
from tests.rawservers import RawServer, Reply, Request, head
from tests.reference import write_reference

SECRETS = ("s3cr3t", "tok123", "sig456", "kp789", "key111", "ck222", "au333", TOKEN, "hf444")
HEADERS = (
    "--header",
    "X-Api-Key: key111",
    "--header",
    "Cookie: session=ck222",
    "--header",
    "Authorization: Bearer au333",
)
FAST = ("--retries", "1", "--timeout", "3")

W = np.arange(48, dtype=np.float32).reshape(6, 8)
SINGLE = write_reference({"w": W}, metadata={"format": "pt"})
FOLDER, _ = sharded(shards=2, layers_per_shard=1)
FILES = {"m.safetensors": SINGLE, **FOLDER}
TENSOR = {"single": "w", "folder": "model.layers.0.norm.weight"}
SIGNED = "X-Amz-Signature=sig456&Key-Pair-Id=kp789&Expires=9"


def with_user(url: str, user: str) -> str:
    return url.replace("http://", f"http://{user}@")


def locations(files: RawServer, redirects: RawServer) -> dict[str, tuple[str, str]]:
    """Name -> (the location with its secrets, whether it is a single file or a folder)."""
    return {
        "password and token": (
            with_user(files.url, "user:s3cr3t") + "/files/m.safetensors?token=tok123",
            "single",
        ),
        "token as user name": (with_user(files.url, "tok123") + "/files/m.safetensors", "single"),
        "signed URL": (f"{files.url}/files/m.safetensors?{SIGNED}", "single"),
        "redirect to a signed URL": (f"{redirects.url}/m.safetensors?token=tok123", "single"),
        "folder with a password": (with_user(files.url, "user:s3cr3t") + "/files/", "folder"),
    }


def to_signed(files: RawServer) -> Callable[[Request, int], Reply]:
    """Every request redirected to the same file on ``files``, by a signed URL."""

    def answer(request: Request, number: int) -> Reply:
        name = request.target.split("?", 1)[0].rsplit("/", 1)[-1]
        target = f"{files.url}/files/{name}?{SIGNED}"
        return head("302 Found", [("Location", target), ("Content-Length", "0")])

    return answer


def commands(kind: str, output: Path) -> dict[str, list[str]]:
    """Command -> its arguments after the location (every command that reads one)."""
    return {
        "params": ["params"],
        "memory": ["memory", "--context", "16"],
        "info": ["info"],
        "tree": ["tree"],
        "ls": ["ls"],
        "get": ["get", "@", TENSOR[kind], "-o", str(output)],
    }


NAMING = ("memory", "info", "tree")
"""The commands whose output names the location (as text and as JSON)."""


def argv(command: list[str], location: str) -> list[str]:
    """``command`` with ``location`` in its place: first after the command's name."""
    return [command[0], location, *(a for a in command[1:] if a != "@")]


def assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, (secret, text)


def run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    status = main(args)
    out, err = capsys.readouterr()
    assert_clean(out + err)
    return status, out, err


@pytest.fixture
def servers(serve: Callable[..., RawServer]) -> tuple[RawServer, RawServer]:
    files = serve(files_handler(FILES, queries=True))
    return files, serve(to_signed(files))


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(
    "form",
    [
        "password and token",
        "token as user name",
        "signed URL",
        "redirect to a signed URL",
        "folder with a password",
    ],
)
def test_every_command_prints_no_secret(
    servers: tuple[RawServer, RawServer],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    form: str,
    as_json: bool,
) -> None:
    location, kind = locations(*servers)[form]
    for name, command in commands(kind, tmp_path / "out.npy").items():
        args = [*argv(command, location), *HEADERS, *FAST, *(["--json"] if as_json else [])]
        status, out, err = run(capsys, args)
        assert status == 0, (name, err)
        if as_json:
            json.loads(out)
        if name in NAMING:
            assert "***" in out, (name, out)  # the location is named, redacted


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_every_command_that_fails_names_its_location_without_secrets(
    servers: tuple[RawServer, RawServer],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    as_json: bool,
) -> None:
    files, _ = servers
    missing = with_user(files.url, "user:s3cr3t") + f"/files/gone.safetensors?token=tok123&{SIGNED}"
    shown = f"http://user:***@127.0.0.1:{files.port}/files/gone.safetensors?token=***&X-Amz-Signature=***&Key-Pair-Id=***&Expires=9"
    for command in commands("single", tmp_path / "out.npy").values():
        args = [*argv(command, missing), *HEADERS, *FAST, *(["--json"] if as_json else [])]
        status, out, err = run(capsys, args)
        assert status == 1
        assert out == ""
        assert err.startswith(f"remotetensors: error: {shown}: not found"), err


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_scan_prints_no_secret_in_its_table_or_json_lines(
    servers: tuple[RawServer, RawServer], capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    found = [location for location, _ in locations(*servers).values()]
    files, _ = servers
    missing = with_user(files.url, "user:s3cr3t") + f"/files/gone.safetensors?{SIGNED}"
    args = ["params", *found, missing, *HEADERS, *FAST, *(["--json"] if as_json else [])]
    status, out, _ = run(capsys, args)
    assert status == 1  # one location failed, and is reported
    if as_json:
        results = [json.loads(line) for line in out.splitlines()]
        assert len(results) == len(found) + 1
        assert sum("error" in r for r in results) == 1
        assert all("***" in r["location"] for r in results)  # each named, redacted
    else:
        assert "NotFoundError" in out


def test_a_hub_token_is_never_printed(
    hub: HubStandIn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub.add("org/gated", {"model.safetensors": SINGLE}, gated=True)
    for as_json in ([], ["--json"]):
        status, out, _ = run(capsys, ["info", "hf://org/gated", "--token", TOKEN, *as_json])
        assert status == 0
        assert "hf://org/gated" in out
        status, _, err = run(capsys, ["info", "hf://org/gated", "--token", "hf444", *FAST])
        assert status == 1
        assert "hf://org/gated" in err


@pytest.mark.parametrize(
    "option",
    [
        ["--header", "Authorization: Bearer au333\nX-Injected: 1"],
        ["--header", "X-Api-Key: key111\rX-Injected: 1"],
        ["--header", "Bearer au333"],
        ["--option", 'secret={"key": "sk-key111"'],
        ["--option", "key111"],
        ["--token", "hf444\n"],
    ],
    ids=[
        "header with a newline",
        "header with a CR",
        "header without a name",
        "bad JSON",
        "no key",
        "token with a newline",
    ],
)
@pytest.mark.usefixtures("data_path")
def test_an_option_that_cannot_be_used_is_refused_without_its_value(
    servers: tuple[RawServer, RawServer], capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    files, _ = servers
    status, out, err = run(capsys, ["info", f"{files.url}/files/m.safetensors", *option, *FAST])
    assert status == 1
    assert out == ""
    assert err.startswith(f"remotetensors: error: {option[0]}"), err
    assert "not shown" in err


class Terminal(io.StringIO):
    """stderr as a terminal: the status line and progress bars draw on it."""

    def isatty(self) -> bool:
        return True


def slow_then(
    answer: Callable[[Request, int], Reply], seconds: float
) -> Callable[[Request, int], Reply]:
    """``answer``, each request after a pause of ``seconds``."""

    def slow(request: Request, number: int) -> Reply:
        time.sleep(seconds)
        return answer(request, number)

    return slow


def test_the_status_line_and_progress_bars_name_no_secret(
    serve: Callable[..., RawServer],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # Every answer waits past the moment the status line shows (1.5 s of silence) and the
    # moment a progress bar shows (1 s); the tensor lies beyond the first request's window, so
    # its bytes come in a request of their own, with a bar.
    big = write_reference({"w": np.arange(64 * 1024, dtype=np.float32)})
    files = serve(slow_then(files_handler({"big.safetensors": big}, queries=True), 1.8))
    location = with_user(files.url, "user:s3cr3t") + f"/files/big.safetensors?token=tok123&{SIGNED}"
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv("COLUMNS", "400")  # the status line is cut to the terminal's width
    assert main(["get", location, "w", "-o", str(tmp_path / "w.npy"), *HEADERS]) == 0
    drawn = terminal.getvalue()
    assert_clean(drawn + capsys.readouterr().out)
    shown = f"http://user:***@127.0.0.1:{files.port}/files/big.safetensors?token=***"
    assert f"({shown}&X-Amz-Signature=***&Key-Pair-Id=***&Expires=9)" in drawn, drawn
    assert "big.safetensors?token=***&X-Amz-Signature=***" in drawn.replace(f"({shown}", ""), (
        drawn
    )  # the progress bar's label
