"""A tensor read through fsspec comes from the version of the file whose header was read, or
the read fails with RemoteFileChangedError: never bytes of two versions in one array.

The file's tensor straddles the end of the first window (64 KiB), so its first bytes come
from the cached window and the rest from a later read: the case that mixed versions. S3 has
its own test (``test_models.py::test_s3_changed_object_is_detected``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import fsspec
import numpy as np
import pytest

import remotetensors as rt
from remotetensors.reading.opening import open_tensor_file
from remotetensors.sources.fsspec import FsspecSource
from tests.reference import write_reference
from tests.servers import FaultyServer

OLD = {"w": np.arange(32768, dtype=np.float32)}  # 128 KiB: beyond the 64 KiB window
NEW = {"w": -OLD["w"]}  # the same size and header, other values


@pytest.fixture
def memory_file(request: pytest.FixtureRequest) -> Iterator[str]:
    """A path on fsspec's memory filesystem holding OLD; removed afterwards."""
    fs = fsspec.filesystem("memory")
    path = f"/versions-{abs(hash(request.node.nodeid))}/m.safetensors"
    fs.pipe(path, write_reference(OLD))
    yield path
    fs.rm(path)


def test_memory_rewrite_between_open_and_read(memory_file: str) -> None:
    fs = fsspec.filesystem("memory")
    with rt.safe_open(f"memory://{memory_file}") as f:
        fs.pipe(memory_file, write_reference(NEW))
        with pytest.raises(rt.RemoteFileChangedError, match="changed") as err:
            f.get_tensor("w")
    assert f"memory://{memory_file}" in str(err.value)
    assert "created" in str(err.value)  # what changed: the memory filesystem's only version


def test_memory_unchanged_file_reads_whole(memory_file: str) -> None:
    with rt.safe_open(f"memory://{memory_file}") as f:
        assert f.get_tensor("w").tobytes() == OLD["w"].tobytes()


def test_local_file_through_fsspec(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(write_reference(OLD))
    with rt.safe_open(f"local://{path}") as f:
        assert f.get_slice("w")[:10].tobytes() == OLD["w"][:10].tobytes()
        opened = path.stat().st_mtime_ns
        path.write_bytes(write_reference(NEW))
        os.utime(path, ns=(opened + 10**9, opened + 10**9))  # a later write, whatever the clock
        with pytest.raises(rt.RemoteFileChangedError, match="mtime"):
            f.get_tensor("w")


async def test_fsspec_http_rewrite_is_refused(faulty: FaultyServer) -> None:
    url = faulty.put("m.safetensors", write_reference(OLD))
    f = await open_tensor_file(FsspecSource(url))
    try:
        faulty.files["m.safetensors"] = write_reference(NEW)
        with pytest.raises(rt.RemoteFileChangedError, match="no longer matches"):
            await f.get_tensor("w")
    finally:
        await f.aclose()
    assert faulty.log.entries[-1].status == 412  # the server refused the If-Match read


def test_version_fields_and_their_fallback() -> None:
    from remotetensors.sources.fsspec import FileVersion

    # A local file's ctime moves on chmod: with mtime and inode at hand it is not compared.
    local = FileVersion.of({"size": 3, "mtime": 1.5, "ino": 7, "created": 2.0}, "x")
    assert local.fields == (("mtime", "1.5"), ("ino", "7"))
    memory = FileVersion.of({"size": 3, "created": "t1", "type": "file"}, "x")
    assert memory.validator == "created=t1"
    assert FileVersion.of({"size": 3}, "x").validator is None  # only the size to go by
    later = FileVersion.of({"size": 4, "created": "t2"}, "x")
    assert memory.changes_to(later) == "size 3 -> 4, created t1 -> t2"
    with pytest.raises(rt.BadResponseError, match="x: the filesystem reports no size"):
        FileVersion.of({"type": "file"}, "x")
