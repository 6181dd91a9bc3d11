"""The persistent cache over S3 (moto's server): a kept object is revalidated with one GET
carrying ``IfNoneMatch`` (304: no body), a changed one is read anew by it, an object named by
its VersionId needs no request at all, and offline a kept object opens with none."""

from __future__ import annotations

import os

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.sources.cache.store import CacheStore
from tests.integration.test_models import close_s3, put_s3
from tests.reference import write_reference


def test_a_kept_s3_object_is_revalidated_and_a_changed_one_read_anew(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_s3(s3_env, "kept-bucket", {"m.safetensors": write_reference({"w": np.ones(6, np.int8)})})
    url = "s3://kept-bucket/m.safetensors"
    with rt.safe_open(url) as f:
        assert (f.traffic.requests, f.keys()) == (1, ["w"])
        assert f.traffic.bytes > 0
    with rt.safe_open(url) as f:  # one conditional GET answered 304: no body
        assert (f.traffic.requests, f.traffic.bytes, f.keys()) == (1, 0, ["w"])
        np.testing.assert_array_equal(f.get_tensor("w"), np.ones(6, np.int8))  # IfMatch
    put_s3(s3_env, "kept-bucket", {"m.safetensors": write_reference({"v": np.ones(3, np.int16)})})
    with rt.safe_open(url) as f:  # changed: the same request brought the new version
        assert f.traffic.requests == 1
        assert f.traffic.bytes > 0
        assert f.keys() == ["v"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with rt.safe_open(url) as f:
        assert (f.traffic.requests, f.keys()) == (0, ["v"])
    with pytest.raises(rt.OfflineError, match=r"s3://kept-bucket/other\.safetensors"):
        rt.safe_open("s3://kept-bucket/other.safetensors")
    kinds = sorted(info.kind for info in CacheStore(os.environ["REMOTETENSORS_CACHE"]).entries())
    assert kinds == ["file", "file", "latest"]  # two versions, the latest pointing at one


def test_an_s3_object_named_by_its_version_needs_no_request(s3_env: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_env, skip_instance_cache=True, version_aware=True)
    fs.mkdir("versioned-bucket")
    fs.make_bucket_versioned("versioned-bucket")
    data = write_reference({"w": np.arange(5, dtype=np.float32)})
    fs.pipe("versioned-bucket/m.safetensors", data)
    version = fs.info("versioned-bucket/m.safetensors")["VersionId"]
    fs.pipe("versioned-bucket/m.safetensors", b"a newer version, not this one")
    url = f"s3://versioned-bucket/m.safetensors?versionId={version}"
    close_s3(fs)
    with rt.safe_open(url) as f:
        assert f.traffic.requests == 1
    with rt.safe_open(url) as f:
        assert f.traffic.requests == 0
        assert f.keys() == ["w"]
        np.testing.assert_array_equal(f.get_tensor("w"), np.arange(5, dtype=np.float32))
