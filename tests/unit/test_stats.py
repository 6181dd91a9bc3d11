"""Statistics, samples and value differences: pure functions checked against numpy."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from remotetensors.sources.base import Traffic
from remotetensors.views.compare import value_difference
from remotetensors.views.explore import sample_blocks
from remotetensors.views.stats import tensor_stats


def test_stats_count_nan_inf_and_zeros() -> None:
    values = np.array([0.0, 1.0, -2.0, np.nan, np.inf, -np.inf, 0.0, 3.0], np.float32)
    stats = tensor_stats("t", "F32", (8,), values, bins=4)
    assert (stats.nan, stats.inf) == (1, 2)
    assert stats.zeros == pytest.approx(2 / 8)
    finite = values[np.isfinite(values)].astype(np.float64)
    assert (stats.min, stats.max) == (-2.0, 3.0)
    assert stats.mean == pytest.approx(finite.mean())
    assert stats.std == pytest.approx(finite.std())
    assert sum(stats.histogram) == finite.size
    assert len(stats.edges) == len(stats.histogram) + 1 == 5


def test_stats_of_bf16_and_of_nothing_finite() -> None:
    values = np.array([[1.5, -0.5], [0.25, 2.0]], dtype=ml_dtypes.bfloat16)
    stats = tensor_stats("b", "BF16", (2, 2), values)
    assert stats.mean == pytest.approx(0.8125)
    empty = tensor_stats("n", "F32", (2,), np.array([np.nan, np.nan], np.float32))
    assert np.isnan(empty.mean)
    assert empty.histogram == ()
    assert "NaN" in repr(empty)


def test_sample_blocks_stay_within_the_budget_and_spread() -> None:
    assert sample_blocks(100, 10, 10_000) == [(0, 100)]
    blocks = sample_blocks(10_000, 1_000, 64_000)
    assert sum(b - a for a, b in blocks) * 1_000 <= 64_000
    assert blocks[0][0] == 0
    assert blocks[-1][1] == 10_000  # the last block ends at the last row
    assert all(a < b <= c for (a, b), (c, _) in itertools.pairwise(blocks))
    assert sample_blocks(1_000, 10**9, 1) == [(0, 1)]  # at least one row


def test_value_difference_against_numpy() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = a + 0.01 * rng.standard_normal((16, 8)).astype(np.float32)
    got = value_difference("x", a, b)
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    assert got.relative == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(y))
    assert got.cosine == pytest.approx(x @ y / np.linalg.norm(x) / np.linalg.norm(y))
    assert got.max_abs == pytest.approx(np.abs(x - y).max())
    zeros = value_difference("z", np.zeros(3), np.zeros(3))
    assert zeros.relative == 0.0
    assert np.isnan(zeros.cosine)
    with pytest.raises(ValueError, match="shapes differ"):
        value_difference("s", np.zeros(3), np.zeros((3, 1)))


def test_traffic_sums() -> None:
    a, b = Traffic(2, 100, 0.5), Traffic(1, 10, 0.25)
    total = Traffic.total([a, b])
    assert (total.requests, total.bytes, total.seconds) == (3, 110, 0.75)
    assert "_in_flight" not in repr(total)
