"""The training experiment's parts on real files and real worker processes: datasets,
the multi-process loader (and torch's, when installed) and the epoch accounting."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from bench.training.accelerator import SimulatedAccelerator, choose
from bench.training.datasets import (
    KiB,
    MiB,
    check_sample,
    make_files,
    make_shards,
)
from bench.training.emulator import epoch_order, run_epoch
from bench.training.loader import Batch, LoaderError, ProcessLoader, make_loader
from bench.training.sources import DirSource


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, object]:
    root = tmp_path_factory.mktemp("train-data")
    files = make_files(root, "imagenet", 300, 7, seed=3)
    shards = make_shards(root, "shards", 3, 1 * MiB, 3 * MiB, seed=4)
    return root, files, shards


class RecordingSource(DirSource):
    """A DirSource that appends every name it reads to a file (shared by workers)."""

    def __init__(self, root: Path, log: Path) -> None:
        super().__init__(root)
        self.log = log

    def read_file(self, rel: str) -> bytes:
        with open(self.log, "a") as f:
            f.write(rel + "\n")
        return super().read_file(rel)


def test_datasets_shape(data) -> None:
    root, files, shards = data
    sizes = [s for _, s in files.files]
    assert 95 * KiB < sum(sizes) / len(sizes) < 125 * KiB  # "around 110 KiB"
    assert len({rel.split("/")[1] for rel, _ in files.files}) == 7
    for rel, size in files.files:
        check_sample(rel, (root / "imagenet" / rel).read_bytes(), size)
    for sh in shards.shards:
        blob = (root / "shards" / sh.key).read_bytes()
        assert len(blob) == sh.size and 1 * MiB <= sh.size <= 3 * MiB + 1 * MiB
        end = 0
        for rec in sh.records:
            assert rec.offset == end  # records are contiguous, front to back
            check_sample(rec.name, blob[rec.offset:rec.offset + rec.size], rec.size)
            end += rec.size
        assert end == sh.size


def test_check_sample_rejects_short_and_wrong_bytes(data) -> None:
    root, files, _ = data
    (rel, size), (rel2, _) = files.files[0], files.files[1]
    body = (root / "imagenet" / rel).read_bytes()
    with pytest.raises(ValueError, match="expected"):
        check_sample(rel, body[:-1], size)
    with pytest.raises(ValueError, match="tag mismatch"):
        check_sample(rel2, body, size)


def test_epoch_order_is_a_seeded_permutation() -> None:
    a, b = epoch_order(500, 1, 0), epoch_order(500, 1, 1)
    assert sorted(a) == sorted(b) == list(range(500))
    assert a != b and a == epoch_order(500, 1, 0)


def test_map_epoch_reads_every_sample_once_in_request_order(data, tmp_path: Path) -> None:
    root, files, _ = data
    log = tmp_path / "reads.log"
    loader = ProcessLoader(RecordingSource(root / "imagenet", log), workers=3, batch_size=16)
    order = epoch_order(len(files.files), 1, 0)
    batches = list(loader.map_epoch(files, order))
    assert [b.index for b in batches] == list(range(len(batches)))
    assert [b.samples for b in batches] == [16] * 18 + [12]  # 300 = 18 x 16 + 12
    assert sum(b.nbytes for b in batches) == files.total_bytes
    reads = Counter(log.read_text().split())
    assert reads == Counter(rel for rel, _ in files.files)  # each file once


def test_shard_epoch_streams_every_record_once(data) -> None:
    root, _, shards = data
    # more workers than shards: the spare worker is exhausted at once
    loader = ProcessLoader(DirSource(root / "shards"), workers=4, batch_size=10)
    batches = list(loader.shard_epoch(shards, [2, 0, 1]))
    assert sum(b.samples for b in batches) == shards.samples
    assert sum(b.nbytes for b in batches) == shards.total_bytes
    # each of the three busy workers ends with its own partial batch at most
    assert sum(1 for b in batches if b.samples < 10) <= 3


def test_features_are_the_first_bytes_of_each_sample(data) -> None:
    root, files, _ = data
    loader = ProcessLoader(DirSource(root / "imagenet"), workers=2, batch_size=4,
                           feature_bytes=64)
    b = next(iter(loader.map_epoch(files, [5, 6, 7, 8])))
    want = b"".join((root / "imagenet" / files.files[i][0]).read_bytes()[:64]
                    for i in (5, 6, 7, 8))
    assert b.features == want


def test_bad_sample_is_an_error_naming_it(data, tmp_path: Path) -> None:
    root, files, _ = data
    broken = tmp_path / "broken"
    broken.mkdir()
    for rel, _ in files.files:
        dst = broken / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes((root / "imagenet" / rel).read_bytes())
    victim = files.files[42][0]
    with open(broken / victim, "r+b") as f:
        f.truncate(1000)
    loader = ProcessLoader(DirSource(broken), workers=3, batch_size=8)
    before = set(multiprocessing.active_children())
    with pytest.raises(LoaderError, match=victim):
        for _ in loader.map_epoch(files, list(range(len(files.files)))):
            pass
    assert set(multiprocessing.active_children()) <= before  # no worker left behind


class SlowSource(DirSource):
    def read_file(self, rel: str) -> bytes:
        time.sleep(0.05)
        return super().read_file(rel)


def test_dead_worker_is_reported_not_waited_for(data) -> None:
    root, files, _ = data
    loader = ProcessLoader(SlowSource(root / "imagenet"), workers=2, batch_size=4)
    it = loader.map_epoch(files, list(range(len(files.files))))
    next(it)
    victim = next(p for p in multiprocessing.active_children() if p.name == "loader-1")
    os.kill(victim.pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(LoaderError, match="died"):
        for _ in it:
            pass
    assert time.monotonic() - t0 < 30


def test_run_epoch_accounts_for_every_second(data) -> None:
    root, files, _ = data
    step = 0.01
    loader = ProcessLoader(SlowSource(root / "imagenet"), workers=2, batch_size=10)
    st = run_epoch(loader, files, SimulatedAccelerator(step), epoch=0, seed=1)
    assert st.samples == 300 and st.batches == 30 and st.bytes == files.total_bytes
    assert st.compute_s >= 30 * step
    # wall = stalls + steps + the loop's own time (exact accounting: the next test)
    assert st.stall_s + st.compute_s <= st.wall_s
    # 2 workers at 50 ms a file cannot feed 10 files per 10 ms step: the loop stalls
    assert st.stall_s > st.compute_s and st.utilization == st.compute_s / st.wall_s
    assert 0 < st.first_batch_s <= st.stall_s
    d = st.as_dict()
    assert d["samples_per_s"] == round(300 / st.wall_s, 1)


class _Clock:
    """A clock that moves only when told: the epoch's accounting becomes exact."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


class _ClockedLoader(ProcessLoader):
    """The real loader; the wait for batch i is stalls[i] seconds of the test's clock."""

    def __init__(self, clock: _Clock, stalls: list[float], *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.clock, self.stalls = clock, stalls

    def map_epoch(self, ds, order):
        for i, batch in enumerate(super().map_epoch(ds, order)):
            self.clock.now += self.stalls[i]
            yield batch


class _ClockedAccelerator:
    feature_bytes = 0

    def __init__(self, clock: _Clock, steps: list[float]) -> None:
        self.clock, self.steps, self.i = clock, steps, 0

    def step(self, batch: Batch) -> float:
        took = self.steps[self.i]
        self.i += 1
        self.clock.now += took
        return took


def test_run_epoch_accounts_for_every_second_exactly(data, monkeypatch) -> None:
    """Every second of the epoch is a stall or a step, none counted twice or lost (on
    the test's clock, so the loop's own time is zero and no speed is assumed)."""
    import types

    from bench.training import emulator

    root, files, _ = data
    clock = _Clock()
    monkeypatch.setattr(emulator, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    stalls = [0.5 + i / 64 for i in range(30)]  # binary fractions: sums are exact
    steps = [0.25 + (i % 3) / 8 for i in range(30)]
    loader = _ClockedLoader(clock, stalls, DirSource(root / "imagenet"), workers=2,
                            batch_size=10)
    st = run_epoch(loader, files, _ClockedAccelerator(clock, steps), epoch=0, seed=1)
    assert st.batches == 30 and st.samples == 300
    assert st.stall_s == sum(stalls) and st.compute_s == sum(steps)
    assert st.wall_s == sum(stalls) + sum(steps)
    assert st.first_batch_s == stalls[0]
    assert st.utilization == sum(steps) / st.wall_s


def test_run_epoch_refuses_a_short_epoch(data) -> None:
    root, files, _ = data

    class Dropping(ProcessLoader):
        def map_epoch(self, ds, order):
            for b in super().map_epoch(ds, order):
                if b.index != 3:
                    yield b

    loader = Dropping(DirSource(root / "imagenet"), workers=2, batch_size=10)
    with pytest.raises(RuntimeError, match="delivered 290 samples, expected 300"):
        run_epoch(loader, files, SimulatedAccelerator(0), epoch=0, seed=1)


def test_auto_choices_without_gpu_or_torch() -> None:
    accel, sampler, why = choose("sim", 0.02)
    assert sampler is None and accel.name.startswith("simulated") and accel.feature_bytes == 0
    assert make_loader("process", DirSource(Path("/")), 1, 1, 1, 0).name == "process-pool"


def test_torch_dataloader_gives_the_same_epochs(data) -> None:
    pytest.importorskip("torch")
    root, files, shards = data
    tl = make_loader("torch", DirSource(root / "imagenet"), 3, 16, 2, 0)
    order = epoch_order(len(files.files), 1, 0)
    got = list(tl.map_epoch(files, order))
    assert [b.samples for b in got] == [16] * 18 + [12]
    assert sum(b.nbytes for b in got) == files.total_bytes
    ts = make_loader("torch", DirSource(root / "shards"), 2, 10, 2, 0)
    got = list(ts.shard_epoch(shards, [0, 1, 2]))
    assert sum(b.samples for b in got) == shards.samples
    assert all(isinstance(b, Batch) for b in got)


def test_real_model_fills_the_step_time_with_whole_passes() -> None:
    """The real model (here on the CPU) runs as many passes per batch as fill the asked
    step time, at least one; a batch without sample bytes is refused."""
    pytest.importorskip("torch")
    import os

    from bench.training.accelerator import FEATURE_BYTES, TorchGpuAccelerator

    one = TorchGpuAccelerator(device="cpu", batch_size=4)
    assert one.passes == 1
    raw = os.urandom(4 * FEATURE_BYTES)
    single = min(one.step(Batch(0, 4, len(raw), raw)) for _ in range(3))
    many = TorchGpuAccelerator(device="cpu", step_s=single * 4, batch_size=4)
    assert 2 <= many.passes <= 8, (single, many.passes)
    assert f"{many.passes} pass(es) per batch" in many.name
    assert many.step(Batch(1, 4, len(raw), raw)) >= single * (many.passes - 1)
    with pytest.raises(ValueError, match="sample bytes"):
        many.step(Batch(2, 4, len(raw), None))
