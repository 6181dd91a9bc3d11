"""Pages of large destinations are populated in a thread, and never a byte is changed."""

from __future__ import annotations

import asyncio
import sys

import numpy as np
import pytest

from remotetensors.reading import prefault

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or prefault._madvise() is None,
    reason="MADV_POPULATE_WRITE is a Linux call",
)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@linux_only
def test_a_large_buffer_is_mapped_before_anything_is_written() -> None:
    size = 96 * 1024 * 1024
    array = np.empty(size, dtype=np.uint8)  # untouched: not resident yet
    before = resident_bytes()

    async def finish() -> None:
        populating = prefault.Populating([array.data])
        await populating.__aenter__()
        assert populating._job is not None
        await populating._job
        await populating.__aexit__(None, None, None)

    asyncio.run(finish())
    grown = resident_bytes() - before
    if grown < size // 2:  # the kernel refused (EINVAL on kernels before 5.14): nothing happened
        pytest.skip(f"this kernel did not populate ({grown} bytes grew)")
    assert grown >= size - 2 * 4096


@linux_only
def test_populating_while_bytes_are_written_changes_none_of_them() -> None:
    size = 64 * 1024 * 1024
    array = np.empty(size, dtype=np.uint8)
    pattern = np.arange(size, dtype=np.uint64).astype(np.uint8)

    async def go() -> None:
        async with prefault.Populating([array.data]):
            for start in range(0, size, 4 * 1024 * 1024):  # a writer racing the thread
                array[start : start + 4 * 1024 * 1024] = pattern[start : start + 4 * 1024 * 1024]
                await asyncio.sleep(0)

    asyncio.run(go())
    assert np.array_equal(array, pattern)


def test_small_buffers_start_no_thread() -> None:
    small = memoryview(bytearray(prefault.MIN_BYTES - 1))

    async def go() -> prefault.Populating:
        async with prefault.Populating([small]) as populating:
            return populating

    assert asyncio.run(go())._job is None
