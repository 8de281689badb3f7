"""The training loop: take a batch from the loader, run a step, and account for time.

Per epoch: wall time (from asking for the first batch to the end of the last step),
compute time (the sum of the steps), data-stall time (the time the loop waited for
a batch: wall minus compute, measured directly), accelerator utilisation = compute /
wall as in MLPerf Storage, samples/s, and the wait for the first batch (worker
start-up plus the first reads).
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field

from .accelerator import Accelerator, NvmlSampler
from .datasets import FilesDataset, ShardDataset
from .loader import ProcessLoader, TorchLoader


@dataclass
class EpochStats:
    epoch: int
    wall_s: float
    compute_s: float
    stall_s: float
    first_batch_s: float
    batches: int
    samples: int
    bytes: int
    nvml_util_pct: float | None = None
    # the data stall in each tenth of the epoch's batches: at the start (a cold fill, a
    # first batch) or spread over the epoch (every read slower)
    stall_by_tenth: list[float] = field(default_factory=list)

    @property
    def utilization(self) -> float:
        return self.compute_s / self.wall_s if self.wall_s else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["accelerator_utilization"] = round(self.utilization, 4)
        d["samples_per_s"] = round(self.samples / self.wall_s, 1) if self.wall_s else None
        d["mb_per_s"] = round(self.bytes / self.wall_s / 1e6, 1) if self.wall_s else None
        for k in ("wall_s", "compute_s", "stall_s", "first_batch_s"):
            d[k] = round(d[k], 4)
        d["stall_by_tenth"] = [round(x, 3) for x in self.stall_by_tenth]
        return d


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of epoch *epoch*: the same for every contender."""
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def run_epoch(loader: ProcessLoader | TorchLoader, ds: FilesDataset | ShardDataset,
              accel: Accelerator, epoch: int, seed: int,
              sampler: NvmlSampler | None = None) -> EpochStats:
    """One pass over *ds*; raises the loader's error if a sample cannot be read."""
    if isinstance(ds, FilesDataset):
        batches = loader.map_epoch(ds, epoch_order(len(ds.files), seed, epoch))
        expected = len(ds.files)
    else:
        batches = loader.shard_epoch(ds, epoch_order(len(ds.shards), seed, epoch))
        expected = ds.samples
    if sampler is not None:
        sampler.window()  # start a fresh window
    compute = stall = 0.0
    stalls: list[float] = []
    first = None
    n_batches = n_samples = n_bytes = 0
    t_start = t_prev = time.perf_counter()
    for batch in batches:
        t_ready = time.perf_counter()
        stall += t_ready - t_prev
        stalls.append(t_ready - t_prev)
        if first is None:
            first = t_ready - t_start
        compute += accel.step(batch)
        n_batches += 1
        n_samples += batch.samples
        n_bytes += batch.nbytes
        t_prev = time.perf_counter()
    wall = t_prev - t_start
    if n_samples != expected:
        raise RuntimeError(f"epoch {epoch} delivered {n_samples} samples, expected {expected}")
    tenths = [sum(stalls[len(stalls) * i // 10:len(stalls) * (i + 1) // 10]) for i in range(10)]
    return EpochStats(epoch, wall, compute, stall, first or 0.0, n_batches, n_samples,
                      n_bytes, sampler.window() if sampler else None, tenths)
