"""An offline demo: a small sharded checkpoint and a small mixture of experts served on a
loopback port, counted byte by byte.

The server is Python's ``http.server`` with single-range support added, in a daemon thread; it
counts requests and body bytes so the demo can show what crossed the network.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np

from ..dtypes import DTYPES


def write_safetensors(path: Path, tensors: dict[str, np.ndarray[Any, Any]]) -> None:
    """Write ``tensors`` as a safetensors file (little-endian, tensors back to back)."""
    names = {d.numpy: name for name, d in DTYPES.items() if not d.packed}
    header: dict[str, Any] = {"__metadata__": {"format": "np"}}
    offset = 0
    for name, array in tensors.items():
        header[name] = {
            "dtype": names[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as out:
        out.write(len(raw).to_bytes(8, "little") + raw)
        for array in tensors.values():
            out.write(np.ascontiguousarray(array).tobytes())


def write_sample_checkpoint(folder: Path, *, layers: int = 6, hidden: int = 256) -> None:
    """A small Llama-shaped checkpoint in three shards with its index (about 7 MB)."""
    rng = np.random.default_rng(0)
    shards: list[dict[str, np.ndarray[Any, Any]]] = [{}, {}, {}]
    shards[0]["model.embed_tokens.weight"] = rng.standard_normal((2048, hidden)).astype(np.float16)
    for i in range(layers):
        shard = shards[1 + i * 2 // layers]
        prefix = f"model.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shard[f"{prefix}.self_attn.{proj}.weight"] = (
                rng.standard_normal((hidden, hidden)).astype(np.float16) * 0.02
            )
        shard[f"{prefix}.input_layernorm.weight"] = np.ones(hidden, np.float32)
    shards[2]["model.norm.weight"] = np.ones(hidden, np.float32)
    weight_map: dict[str, str] = {}
    for number, tensors in enumerate(shards, start=1):
        name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(folder / name, tensors)
        weight_map.update(dict.fromkeys(tensors, name))
    total = sum(a.nbytes for tensors in shards for a in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


def write_moe_checkpoint(folder: Path, *, layers: int = 2, hidden: int = 128) -> None:
    """A small Mixtral-shaped mixture of experts (8 routed experts, 2 used per token) with its
    ``config.json``, in ``folder`` (made if missing; about 4 MB)."""
    folder.mkdir(parents=True, exist_ok=True)
    experts, inter, vocab = 8, 2 * hidden, 1024
    tensors: dict[str, np.ndarray[Any, Any]] = {
        "model.embed_tokens.weight": np.zeros((vocab, hidden), np.float16)
    }
    for i in range(layers):
        prefix = f"model.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"{prefix}.self_attn.{proj}.weight"] = np.zeros((hidden, hidden), np.float16)
        moe = f"{prefix}.block_sparse_moe"
        tensors[f"{moe}.gate.weight"] = np.zeros((experts, hidden), np.float16)
        for e in range(experts):
            for w, shape in (
                ("w1", (inter, hidden)),
                ("w2", (hidden, inter)),
                ("w3", (inter, hidden)),
            ):
                tensors[f"{moe}.experts.{e}.{w}.weight"] = np.zeros(shape, np.float16)
        tensors[f"{prefix}.input_layernorm.weight"] = np.ones(hidden, np.float32)
    tensors["model.norm.weight"] = np.ones(hidden, np.float32)
    tensors["lm_head.weight"] = np.zeros((vocab, hidden), np.float16)
    write_safetensors(folder / "model.safetensors", tensors)
    config = {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_local_experts": experts,
        "num_experts_per_tok": 2,
        "vocab_size": vocab,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))


class _QuietServer(ThreadingHTTPServer):
    """A server that says nothing when a client leaves before its answer is written (a reader
    that no longer needs a file cancels its request); other errors are printed as usual."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class CountingServer:
    """Serves a folder over HTTP with byte ranges on 127.0.0.1, counting requests and bytes."""

    def __init__(self, folder: Path) -> None:
        self.requests = 0
        self.bytes_sent = 0
        server = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with lock:
                    server.requests += 1
                # Files in subfolders too (the demo serves several models); nothing outside.
                asked = unquote(self.path.split("?", 1)[0]).lstrip("/")
                path = (folder / asked).resolve()
                if not path.is_relative_to(folder.resolve()) or not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                asked_range = self.headers.get("Range", "")
                suffix = re.fullmatch(
                    r"bytes=-(\d+)", asked_range
                )  # the last N bytes (a zip's end)
                if suffix is not None:
                    asked_range = f"bytes={max(0, len(data) - int(suffix.group(1)))}-"
                match = re.fullmatch(r"bytes=(\d+)-(\d*)", asked_range)
                if match is None:
                    body, status, extra = data, 200, {}
                else:
                    start = int(match.group(1))
                    last = min(int(match.group(2) or len(data) - 1), len(data) - 1)
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    body, status = data[start : last + 1], 206
                    extra = {"Content-Range": f"bytes {start}-{last}/{len(data)}"}
                self.send_response(status)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", f'"{len(data)}-{path.stat().st_mtime_ns}"')
                self.end_headers()
                self.wfile.write(body)
                with lock:
                    server.bytes_sent += len(body)

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        """Start counting afresh."""
        self.requests = 0
        self.bytes_sent = 0

    def stop(self) -> None:
        """Shut the server down."""
        self._httpd.shutdown()
        self._httpd.server_close()
