"""``ReadOptions.max_concurrency`` is one budget: for a file whatever the number of calls, and
for a model whatever the number of shards a read touches (requests counted at the server)."""

from __future__ import annotations

import asyncio

import remotetensors as rt
from tests.integration.test_models import sharded
from tests.servers import FaultyServer

BUDGET = 3
# Parts of 1 KiB, and header windows that hold no tensor: every tensor of every shard is
# several requests, far more than the budget.
OPTIONS = rt.ReadOptions(
    max_concurrency=BUDGET, part_size_bytes=1024, header_window_bytes=2048, read_configs=False
)


def test_a_read_across_many_shards_keeps_the_models_budget(faulty: FaultyServer) -> None:
    files, tensors = sharded(shards=6)
    for name, data in files.items():
        faulty.put(f"m/{name}", data)
    with rt.open_model(f"{faulty.url}/f/m/", options=OPTIONS) as model:
        faulty.hold_seconds = 0.02
        faulty.peak_in_flight = 0
        arrays = model.get_tensors("model.layers.*")
    assert len({model.tensors[n].file for n in arrays}) == 6
    for name, array in arrays.items():
        assert array.tobytes() == tensors[name].tobytes()
    assert faulty.peak_in_flight == BUDGET  # reached, never passed (was 6 x 3)


async def test_concurrent_calls_on_one_file_share_its_budget(faulty: FaultyServer) -> None:
    files, tensors = sharded(shards=1, layers_per_shard=6)
    (shard,) = (n for n in files if n.startswith("model-"))
    url = faulty.put(shard, files[shard])
    async with rt.open_async(url, options=OPTIONS) as f:
        faulty.hold_seconds = 0.02
        faulty.peak_in_flight = 0
        names = [n for n in f.keys() if n.endswith("mlp.weight")]  # noqa: SIM118 (not a dict)
        arrays = await asyncio.gather(*(f.get_tensor(n) for n in names))
    for name, array in zip(names, arrays, strict=True):
        assert array.tobytes() == tensors[name].tobytes()
    assert faulty.peak_in_flight == BUDGET  # was 3 per call
