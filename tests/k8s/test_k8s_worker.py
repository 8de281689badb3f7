"""WarmWorker: the Node is published on its own thread, also while a long warm runs."""

from __future__ import annotations

import threading
import time

import pytest

import fusecache
from prefetchd.k8s import agent as ag
from prefetchd.k8s import worker as wk

pytestmark = pytest.mark.k8s


class Publisher:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, list[str]]] = []
        self.threads: list[int] = []
        self.cond = threading.Condition()

    def publish(self, free: int, limit: int, held: list[str]) -> bool:
        with self.cond:
            self.calls.append((free, limit, held))
            self.threads.append(threading.get_ident())
            self.cond.notify_all()
        return True

    def wait(self, count: int, timeout: float = 20.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= count, timeout), self.calls


class BlockingWarmer:
    """Stands in for prefetchd.warm.Warmer: its warm() runs until released (a long warm)."""

    started = threading.Event()
    release = threading.Event()
    finished = threading.Event()  # set by warm() itself when it returns
    thread = 0

    def __init__(self, cache_dir: str, *args, stop: threading.Event, **kw) -> None:
        self.stop = stop

    def warm(self, uris: list[str]) -> list:
        BlockingWarmer.thread = threading.get_ident()
        BlockingWarmer.started.set()
        deadline = time.monotonic() + 30
        while not (BlockingWarmer.release.wait(0.05) or self.stop.is_set()):
            assert time.monotonic() < deadline
        BlockingWarmer.finished.set()
        raise wk.warm_mod.WarmError("stopped")


def test_node_is_published_while_a_long_warm_runs(tmp_path, log_police):
    log_police.allow(r"cannot warm s3://b/d/: stopped")
    fusecache.NodeCache.open(tmp_path, limit_bytes=1 << 30).close()
    pub = Publisher()
    worker = wk.WarmWorker(
        wk.WorkerConfig(cache_dir=str(tmp_path), node_name="me", publish_interval=0.2),
        pub, make_warmer=BlockingWarmer).start()
    try:
        worker.warm(ag.WarmRequest("s3://b/d/", "workflow ml/w", "s", 0))
        assert BlockingWarmer.started.wait(10)
        before = len(pub.calls)
        pub.wait(before + 2)  # two publications while the worker thread is busy warming
        # ... really while it warms: the warm has not returned, and they came from elsewhere
        assert not BlockingWarmer.finished.is_set()
        assert BlockingWarmer.thread not in pub.threads[before:]
        assert pub.calls[-1][1] == 1 << 30  # stats read (in a helper process) are real
    finally:
        BlockingWarmer.release.set()
        worker.stop()
    assert not any(t.name.startswith("prefetchd-") and t.is_alive()
                   for t in threading.enumerate())


class LaneWarmer:
    """prefetchd.warm.Warmer's stand-in: the dataset "s3://bkt/later/" runs until released
    (a long warm for later work); any other returns at once, recording what ran and when."""

    later_started = threading.Event()
    later_release = threading.Event()
    done: list[tuple[str, bool]] = []  # (dataset, whether the long warm was still running)
    lock = threading.Lock()

    def __init__(self, cache_dir: str, *args, stop: threading.Event, **kw) -> None:
        self.stop = stop

    def warm(self, uris: list[str]) -> list:
        if uris[0] == "s3://bkt/later/":
            LaneWarmer.later_started.set()
            while not (LaneWarmer.later_release.wait(0.05) or self.stop.is_set()):
                pass
        with LaneWarmer.lock:
            LaneWarmer.done.append((uris[0], not LaneWarmer.later_release.is_set()))
        return [wk.warm_mod.DatasetResult(uris[0], objects=1, bytes=10)]


def test_a_pod_bound_here_is_warmed_while_a_warm_for_later_work_runs(tmp_path):
    """The urgent lane: a pod already on this node does not wait for the worker's long warm
    for a later workflow, nor for the queue behind it; a release of the urgent dataset
    waits for its warm to finish, then drops its pins."""
    fusecache.NodeCache.open(tmp_path, limit_bytes=1 << 30).close()
    worker = wk.WarmWorker(wk.WorkerConfig(cache_dir=str(tmp_path), node_name="me"),
                           Publisher(), make_warmer=LaneWarmer).start()
    try:
        worker.warm(ag.WarmRequest("s3://bkt/later/", "workflow ml/later", "s", 2))
        assert LaneWarmer.later_started.wait(10)
        worker.warm(ag.WarmRequest("s3://bkt/queued/", "workflow ml/next", "s", 1))
        worker.warm(ag.WarmRequest("s3://bkt/now/", "pod ml/p", "p", 0, urgent=True))
        deadline = time.monotonic() + 10
        while not LaneWarmer.done and time.monotonic() < deadline:
            time.sleep(0.05)
        assert LaneWarmer.done == [("s3://bkt/now/", True)]  # done while the long one runs
        assert worker.records.find("pod ml/p", "s3://bkt/now/")
    finally:
        LaneWarmer.later_release.set()
    try:
        deadline = time.monotonic() + 10
        while len(LaneWarmer.done) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [d for d, _ in LaneWarmer.done] == ["s3://bkt/now/", "s3://bkt/later/",
                                                   "s3://bkt/queued/"]
        worker.release("s3://bkt/now/", "pod ml/p")
        deadline = time.monotonic() + 10
        while worker.records.find("pod ml/p", "s3://bkt/now/") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not worker.records.find("pod ml/p", "s3://bkt/now/")
    finally:
        worker.stop()
    assert not any(t.name.startswith("prefetchd-") and t.is_alive()
                   for t in threading.enumerate())


class CountingWarmer:
    """prefetchd.warm.Warmer's stand-in: every warm runs until released, counted."""

    started = threading.Semaphore(0)
    release = threading.Event()
    calls: list[str] = []

    def __init__(self, cache_dir: str, *args, stop: threading.Event, **kw) -> None:
        self.stop = stop

    def warm(self, uris: list[str]) -> list:
        CountingWarmer.calls.append(uris[0])
        CountingWarmer.started.release()
        while not (CountingWarmer.release.wait(0.05) or self.stop.is_set()):
            pass
        return [wk.warm_mod.DatasetResult(uris[0], objects=1, bytes=10)]


def test_a_dataset_both_lanes_ask_for_at_once_is_fetched_once(tmp_path):
    """A job's dataset being warmed in the queued lane, and one of its pods bound here
    before it is done (the urgent lane, same job and dataset): seen on a real control
    plane, both fetched it from S3 at once. The urgent one waits for the running one and
    finds it warmed."""
    fusecache.NodeCache.open(tmp_path, limit_bytes=1 << 30).close()
    worker = wk.WarmWorker(wk.WorkerConfig(cache_dir=str(tmp_path), node_name="me"),
                           Publisher(), make_warmer=CountingWarmer).start()
    try:
        worker.warm(ag.WarmRequest("s3://bkt/ds/", "job ml/scan", "main", 0))
        assert CountingWarmer.started.acquire(timeout=10)
        worker.warm(ag.WarmRequest("s3://bkt/ds/", "job ml/scan", "main", 0, urgent=True))
        assert not CountingWarmer.started.acquire(timeout=1.0)  # not a second fetch
        CountingWarmer.release.set()
        deadline = time.monotonic() + 10
        while not worker.records.find("job ml/scan", "s3://bkt/ds/") and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the urgent lane's turn, after the first warm
        assert CountingWarmer.calls == ["s3://bkt/ds/"]
        assert worker.records.find("job ml/scan", "s3://bkt/ds/")
    finally:
        CountingWarmer.release.set()
        worker.stop()


@pytest.mark.s3
def test_a_dataset_released_while_it_warms_stops_fetching(local_s3, s3_env, bucket,
                                                            tmp_path):
    """A blind test of the agent on a real control plane: a Job deleted 3 s into a 9 s warm
    had all 200 MB fetched, then unpinned. Its warm stops now, and nothing stays pinned."""
    import os

    c = local_s3.client()
    for i in range(8):
        c.put_object(Bucket=bucket, Key=f"big/f{i}.bin", Body=os.urandom(1 << 20))
    fusecache.NodeCache.open(tmp_path, limit_bytes=1 << 30).close()
    worker = wk.WarmWorker(wk.WorkerConfig(cache_dir=str(tmp_path), node_name="me",
                                           concurrency=1, bandwidth=1 << 20,
                                           publish_interval=60)).start()
    done = threading.Event()
    worker.finished_hooks.append(lambda req, n, t: done.set())
    try:
        started = time.monotonic()
        worker.warm(ag.WarmRequest(f"s3://{bucket}/big/", "job ml/j", "main", 0))
        time.sleep(1.5)
        worker.release(f"s3://{bucket}/big/", "job ml/j")
        assert done.wait(30)
        took = time.monotonic() - started
    finally:
        worker.stop()
    assert took < 5, f"the warm went on for {took:.1f}s after its release (8 s at 1 MiB/s)"
    cache = fusecache.NodeCache.open(tmp_path)
    try:
        assert not [o for o in cache.iter_objects(bucket, "big/") if cache.is_pinned(o)]
        # (a blind test of the agent: the object being fetched when the warm stopped kept
        # its pin, with none of its blocks, and `prefetchd status` showed the dataset pinned
        # for a day)
        assert cache.stats().pinned_entries == 0
    finally:
        cache.close()
    assert not worker.records.find("job ml/j", f"s3://{bucket}/big/")
    assert not wk.warm_mod.StateFile(str(tmp_path)).load()


class CutShortWarmer:
    """prefetchd.warm.Warmer's stand-in: the first warm gets two objects of three no
    further (``first``: S3 failed them in an outage, or the cache, full of pinned data, had
    no room for them); the next fetches them."""

    calls = 0
    first = "failed"

    def __init__(self, cache_dir: str, *args, stop: threading.Event, **kw) -> None:
        pass

    def warm(self, uris: list[str]) -> list:
        CutShortWarmer.calls += 1
        cut = 2 if CutShortWarmer.calls == 1 else 0
        if CutShortWarmer.first == "failed":
            return [wk.warm_mod.DatasetResult(uris[0], objects=3, bytes=30,
                                              failed=["a", "b"][:cut])]
        return [wk.warm_mod.DatasetResult(uris[0], objects=3, bytes=30, skipped=cut,
                                          skipped_bytes=10 * cut)]


@pytest.mark.parametrize("first", ["failed", "no room"])
def test_a_warm_cut_short_is_not_warm_and_is_tried_again(first, tmp_path, monkeypatch,
                                                         log_police):
    """A blind test of the agent: a warm cut by an S3 outage was recorded as warmed, never
    tried again, and skipped ('already warmed') when the job's pod was bound there. Blind
    agent round 2: so were warms that skipped objects for a cache full of pinned data, even
    once 64 MiB had been freed."""
    log_police.allow(r"partly warmed")
    monkeypatch.setattr(wk, "RETRY_DELAYS", (0.2, 0.2))
    monkeypatch.setattr(CutShortWarmer, "calls", 0)
    monkeypatch.setattr(CutShortWarmer, "first", first)
    fusecache.NodeCache.open(tmp_path, limit_bytes=1 << 30).close()
    worker = wk.WarmWorker(wk.WorkerConfig(cache_dir=str(tmp_path), node_name="me",
                                           publish_interval=60),
                           make_warmer=CutShortWarmer).start()
    try:
        worker.warm(ag.WarmRequest("s3://bkt/ds/", "job ml/j", "main", 0))
        deadline = time.monotonic() + 20
        while CutShortWarmer.calls < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        worker.stop()
    assert CutShortWarmer.calls == 2  # tried again once, and no more once all came
    (owner,) = worker.records.complete("job ml/j", "s3://bkt/ds/")
    assert not worker.records.live()[owner].get("partial")


def test_a_warm_whose_secret_comes_later_is_asked_for_again(tmp_path, monkeypatch,
                                                           log_police):
    """A blind test of the agent (round 2): a warm refused for a node-stage Secret that
    did not exist yet was never asked for again once it did."""
    log_police.allow(r"cannot warm")
    monkeypatch.setattr(wk, "RETRY_DELAYS", (0.2, 0.2))
    monkeypatch.setattr(CutShortWarmer, "calls", 1)  # (its next warms fetch everything)
    asked = []

    def store_configs(req):
        asked.append(req.dataset)
        if len(asked) == 1:
            raise wk.credentials.CredentialError("Secret ml/s3 does not exist")
        return wk.credentials.StoreConfig(None, None, "Secret ml/s3")

    fusecache.NodeCache.open(tmp_path, limit_bytes=1 << 30).close()
    worker = wk.WarmWorker(wk.WorkerConfig(cache_dir=str(tmp_path), node_name="me",
                                           publish_interval=60),
                           make_warmer=CutShortWarmer, store_configs=store_configs).start()
    try:
        worker.warm(ag.WarmRequest("s3://bkt/ds/", "job ml/j", "main", 0))
        deadline = time.monotonic() + 20
        while not worker.records.complete("job ml/j", "s3://bkt/ds/") and \
                time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
    assert len(asked) == 2
    assert worker.records.complete("job ml/j", "s3://bkt/ds/")
