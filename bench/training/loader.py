"""A multi-process data loader with torch DataLoader's semantics, and the torch one.

``ProcessLoader`` is what runs when torch is not installed. It behaves as
``torch.utils.data.DataLoader(num_workers=N, prefetch_factor=P,
persistent_workers=False)``: workers are forked at the start of each epoch, at most
P x N batches are requested ahead, requests go round-robin to the workers, and
batches are handed to the training loop in request order. A map-style epoch
(small files) requests batches of shuffled sample indices; a shard epoch (large
files, like WebDataset) gives each worker every N-th shard of the shuffled shard
order and asks it for "its next batch" until it says it is exhausted.

Workers check every sample (length and tag, see datasets.py) and return only sizes,
plus the first ``feature_bytes`` of each sample when a real model consumes them: the
bytes themselves do not cross the process boundary, as with torch's shared-memory
tensors.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import queue
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

from .datasets import FilesDataset, ShardDataset, check_sample
from .sources import Source

_CTX = mp.get_context("fork")


@dataclass
class Batch:
    index: int
    samples: int
    nbytes: int
    features: bytes | None = None  # feature_bytes per sample, concatenated


class LoaderError(RuntimeError):
    """A worker failed to read a sample, died, or went silent."""


def _features(data: bytes, n: int) -> bytes:
    return data[:n].ljust(n, b"\0")


def _worker(w: int, requests, results, source: Source, files: FilesDataset | None,
            shard_ds: ShardDataset | None, my_shards: list[int], batch_size: int,
            feature_bytes: int) -> None:
    """Serve requests (k, indices-or-None) until None; one result per request."""
    stream = _shard_batches(source, shard_ds, my_shards, batch_size) if shard_ds else None
    while True:
        req = requests.get()
        if req is None:
            return
        k, indices = req
        try:
            if stream is not None:
                batch = next(stream, None)
                if batch is None:
                    results.put((k, w, "exhausted", None))
                    continue
            else:
                batch = []
                for i in indices:
                    rel, size = files.files[i]
                    data = source.read_file(rel)
                    check_sample(rel, data, size)
                    batch.append(data)
            feats = (b"".join(_features(d, feature_bytes) for d in batch)
                     if feature_bytes else None)
            results.put((k, w, "ok", (len(batch), sum(map(len, batch)), feats)))
        except Exception as e:  # reported to the parent, which raises LoaderError
            results.put((k, w, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
            return


def _shard_batches(source: Source, ds: ShardDataset, my_shards: list[int],
                   batch_size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for si in my_shards:
        shard = ds.shards[si]
        for rec, data in zip(shard.records, source.read_shard(shard), strict=False):
            check_sample(rec.name, data, rec.size)
            batch.append(data)
            if len(batch) == batch_size:
                yield batch
                batch = []
    if batch:
        yield batch


class ProcessLoader:
    name = "process-pool"

    def __init__(self, source: Source, workers: int, batch_size: int,
                 prefetch_factor: int = 2, feature_bytes: int = 0,
                 timeout: float = 300.0) -> None:
        if workers < 1 or batch_size < 1 or prefetch_factor < 1:
            raise ValueError("workers, batch_size and prefetch_factor must be >= 1")
        self.source, self.workers, self.batch_size = source, workers, batch_size
        self.prefetch, self.feature_bytes, self.timeout = prefetch_factor, feature_bytes, timeout

    def map_epoch(self, ds: FilesDataset, order: list[int]) -> Iterator[Batch]:
        b = self.batch_size
        chunks = iter([order[i:i + b] for i in range(0, len(order), b)])
        return self._run(ds, None, [[] for _ in range(self.workers)], chunks)

    def shard_epoch(self, ds: ShardDataset, shard_order: list[int]) -> Iterator[Batch]:
        n = self.workers
        return self._run(None, ds, [shard_order[w::n] for w in range(n)], None)

    def _run(self, files: FilesDataset | None, shards: ShardDataset | None,
             assignment: list[list[int]], chunks: Iterator[list[int]] | None
             ) -> Iterator[Batch]:
        n = self.workers
        reqs = [_CTX.Queue() for _ in range(n)]
        results = _CTX.Queue()
        procs = [_CTX.Process(target=_worker, name=f"loader-{w}", daemon=True,
                              args=(w, reqs[w], results, self.source, files, shards,
                                    assignment[w], self.batch_size, self.feature_bytes))
                 for w in range(n)]
        for p in procs:
            p.start()
        active = [w for w in range(n) if chunks is not None or assignment[w]]
        turn = itertools.cycle(range(n))
        sent = 0  # requests made
        nxt = 0   # next request index to hand out
        outstanding: set[int] = set()
        ready: dict[int, tuple] = {}
        more = True
        try:
            while True:
                while more and active and len(outstanding) < self.prefetch * n:
                    if chunks is not None:
                        payload = next(chunks, None)
                        if payload is None:
                            more = False
                            break
                    else:
                        payload = None
                    w = next(turn)
                    while w not in active:
                        w = next(turn)
                    reqs[w].put((sent, payload))
                    outstanding.add(sent)
                    sent += 1
                if nxt == sent and not outstanding:
                    return
                while nxt not in ready:
                    k, w, status, value = self._get(results, procs)
                    outstanding.discard(k)
                    if status == "error":
                        raise LoaderError(f"loader worker {w} ({self.source.label}): {value}")
                    if status == "exhausted" and w in active:
                        active.remove(w)
                    ready[k] = (status, value)
                status, value = ready.pop(nxt)
                nxt += 1
                if status == "ok":
                    samples, nbytes, feats = value
                    yield Batch(nxt - 1, samples, nbytes, feats)
        finally:
            for q in reqs:
                q.put(None)
            deadline = time.monotonic() + 5
            for p in procs:
                p.join(max(0.1, deadline - time.monotonic()))
                if p.is_alive():
                    p.kill()
                    p.join(5)
            for q in (*reqs, results):
                q.cancel_join_thread()
                q.close()

    def _get(self, results, procs) -> tuple:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return results.get(timeout=1.0)
            except queue.Empty:
                dead = [(p.name, p.exitcode) for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise LoaderError(f"loader worker died: {dead}") from None
                if time.monotonic() > deadline:
                    raise LoaderError(f"no batch from any loader worker in {self.timeout:.0f}s"
                                      ) from None


class TorchLoader:
    """The same two epochs through ``torch.utils.data.DataLoader`` (used when torch is
    installed): a map-style Dataset with the shuffled order as sampler, and an
    IterableDataset that splits the shard order between workers."""

    name = "torch.utils.data.DataLoader"

    def __init__(self, source: Source, workers: int, batch_size: int,
                 prefetch_factor: int = 2, feature_bytes: int = 0,
                 timeout: float = 300.0) -> None:
        import torch.utils.data  # noqa: F401  (fails early when torch is missing)

        self.source, self.workers, self.batch_size = source, workers, batch_size
        self.prefetch, self.feature_bytes, self.timeout = prefetch_factor, feature_bytes, timeout

    def _loader(self, dataset, sampler=None):
        from torch.utils.data import DataLoader

        return DataLoader(dataset, batch_size=self.batch_size, sampler=sampler,
                          num_workers=self.workers, prefetch_factor=self.prefetch,
                          persistent_workers=False, collate_fn=_collate,
                          timeout=self.timeout, multiprocessing_context=_CTX)

    def map_epoch(self, ds: FilesDataset, order: list[int]) -> Iterator[Batch]:
        from torch.utils.data import Dataset

        source, fb = self.source, self.feature_bytes

        class Files(Dataset):
            def __len__(self) -> int:
                return len(ds.files)

            def __getitem__(self, i: int) -> tuple[int, bytes | None]:
                rel, size = ds.files[i]
                data = source.read_file(rel)
                check_sample(rel, data, size)
                return len(data), (_features(data, fb) if fb else None)

        return self._batches(self._loader(Files(), sampler=order))

    def shard_epoch(self, ds: ShardDataset, shard_order: list[int]) -> Iterator[Batch]:
        from torch.utils.data import IterableDataset, get_worker_info

        source, fb = self.source, self.feature_bytes

        class Shards(IterableDataset):
            def __iter__(self):
                info = get_worker_info()
                mine = shard_order[info.id::info.num_workers] if info else shard_order
                for si in mine:
                    shard = ds.shards[si]
                    for rec, data in zip(shard.records, source.read_shard(shard),
                                         strict=False):
                        check_sample(rec.name, data, rec.size)
                        yield len(data), (_features(data, fb) if fb else None)

        return self._batches(self._loader(Shards()))

    @staticmethod
    def _batches(loader) -> Iterator[Batch]:
        try:
            for k, (samples, nbytes, feats) in enumerate(loader):
                yield Batch(k, samples, nbytes, feats)
        except LoaderError:
            raise
        except Exception as e:  # torch re-raises a worker's exception in the parent
            raise LoaderError(f"torch DataLoader: {type(e).__name__}: {e}") from e


def _collate(items: list[tuple[int, bytes | None]]) -> tuple[int, int, bytes | None]:
    feats = [f for _, f in items if f is not None]
    return len(items), sum(n for n, _ in items), (b"".join(feats) if feats else None)


def loader_class(kind: str) -> type[ProcessLoader] | type[TorchLoader]:
    """*kind*: 'torch', 'process' or 'auto' (torch when it imports)."""
    if kind == "auto":
        try:
            import torch.utils.data  # noqa: F401

            kind = "torch"
        except ImportError:
            kind = "process"
    return TorchLoader if kind == "torch" else ProcessLoader


def make_loader(kind: str, source: Source, workers: int, batch_size: int,
                prefetch_factor: int, feature_bytes: int) -> ProcessLoader | TorchLoader:
    return loader_class(kind)(source, workers, batch_size, prefetch_factor, feature_bytes)
