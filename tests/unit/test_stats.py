"""Statistics, samples and value differences: pure functions checked against numpy."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from remotetensors.index import TensorInfo
from remotetensors.reading.slicing import plan_slice
from remotetensors.sources.base import Traffic
from remotetensors.views.compare import value_difference
from remotetensors.views.explore import SAMPLE_BLOCKS, sample_runs
from remotetensors.views.stats import COMPLEX_NOTE, tensor_stats


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


def test_stats_of_complex_values_are_of_their_magnitude_and_say_so() -> None:
    # Before, C64 values were cast to float: the imaginary part was dropped (with numpy's
    # ComplexWarning at most), and the card did not say.
    values = np.array([3 + 4j, -1j, 0, 1e30 + 1e30j, complex(np.nan, 1)], np.complex64)
    stats = tensor_stats("c", "C64", (5,), values, note="stored values")
    magnitude = np.abs(values.astype(np.complex128))
    finite = magnitude[np.isfinite(magnitude)]
    assert stats.min == 0.0
    assert stats.max == pytest.approx(float(finite.max()))
    assert stats.mean == pytest.approx(float(finite.mean()))
    assert stats.nan == 1
    assert stats.zeros == pytest.approx(1 / 5)
    assert stats.note == f"stored values; {COMPLEX_NOTE}"
    assert "magnitude |z|" in repr(stats)
    assert tensor_stats("r", "F32", (1,), np.ones(1, np.float32)).note is None


def test_value_difference_of_complex_arrays_is_complex() -> None:
    rng = np.random.default_rng(4)
    a = (rng.standard_normal(12) + 1j * rng.standard_normal(12)).astype(np.complex64)
    b = a * np.complex64(1j)  # same magnitudes, a quarter turn: real parts unrelated
    got = value_difference("z", a, b)
    x, y = a.astype(np.complex128), b.astype(np.complex128)
    assert got.relative == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(y))
    assert got.cosine == pytest.approx(np.vdot(y, x).real / np.linalg.norm(x) / np.linalg.norm(y))
    assert got.cosine == pytest.approx(0.0, abs=1e-6)  # orthogonal, as complex vectors
    assert got.max_abs == pytest.approx(np.abs(x - y).max())


def test_a_sample_reads_runs_inside_rows_within_the_budget() -> None:
    # A stack of 4 experts of 1000 x 1000 F32 (rows of 4 kB, experts of 4 MB): before, the
    # sample was one whole expert (4 MB) for a budget of 64 KiB.
    sample = sample_runs((4, 1000, 1000), 32, 64 * 1024)
    assert sample is not None
    assert (len(sample.keys), sample.run_values) == (SAMPLE_BLOCKS, 2 * 1000)
    assert sample.values * 4 <= 64 * 1024
    assert sample.keys[0] == (0, slice(0, 2))
    assert sample.keys[-1] == (3, slice(998, 1000))  # spread to the end
    assert "16,000 of 4,000,000 values, in 8 runs" in sample.describe(4_000_000)
    assert sample_runs((4, 1000, 1000), 32, 16 * 10**6) is None  # the whole tensor fits


def test_a_sub_byte_sample_starts_and_ends_on_bytes() -> None:
    # F4 rows of 12 bits: before, row blocks at odd rows raised SliceError.
    shape = (2002, 3)
    sample = sample_runs(shape, 4, 256)
    assert sample is not None
    info = TensorInfo("f4", "F4", shape, 0, 2002 * 3 // 2)
    plans = [plan_slice(info, key) for key in sample.keys]
    assert sum(plan.nbytes for plan in plans) <= 256
    assert all(key[0].start % 2 == 0 for key in sample.keys)


DTYPE_BITS = {"F4": 4, "F6_E2M3": 6, "U8": 8, "BF16": 16, "F32": 32, "F64": 64}


@given(
    shape=st.lists(st.integers(1, 40), min_size=1, max_size=4).map(tuple),
    dtype=st.sampled_from(sorted(DTYPE_BITS)),
    max_bytes=st.integers(1, 20_000),
)
def test_sample_runs_are_readable_disjoint_and_within_the_budget(
    shape: tuple[int, ...], dtype: str, max_bytes: int
) -> None:
    bits = DTYPE_BITS[dtype]
    total = math.prod(shape)
    assume(total * bits % 8 == 0)  # a file holds whole bytes
    info = TensorInfo("t", dtype, shape, 0, total * bits // 8)
    sample = sample_runs(shape, bits, max_bytes)
    if info.nbytes <= max_bytes:
        assert sample is None
        return
    assert sample is not None
    plans = [plan_slice(info, key) for key in sample.keys]  # the reference's rules accept them
    assert all(plan.counts == () for plan in plans)  # one byte range each
    assert all(plan.num_elements == sample.run_values for plan in plans)
    assert sample.values == len(plans) * sample.run_values <= total
    spans = [plan.covering for plan in plans]
    assert all(a.end <= b.start for a, b in itertools.pairwise(spans))  # in order, disjoint
    fetched = sum(plan.nbytes for plan in plans)
    if bits % 8 == 0 and max_bytes * 8 >= SAMPLE_BLOCKS * bits:
        assert fetched <= max_bytes


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
