"""The node agent's side effects: warming, releasing and publishing its Node, on one thread.

Who calls this: :func:`prefetchd.k8s.agent.run` wires :meth:`WarmWorker.warm` and
:meth:`WarmWorker.release` as the :class:`~prefetchd.k8s.agent.Agent` callbacks, and runs
:meth:`WarmWorker.run` in its own thread. Tests drive it through ``prefetchd run --kubernetes``.

Data flow: watcher threads call ``warm(req)`` / ``release(dataset, source)``; both only put an
item on ONE bounded queue (a warm for a pod already bound to this node, ``req.urgent``, goes to
a second one, the urgent lane, whose own thread starts it at once: that pod reads its data
now, while the worker may be busy with a long warm for later work). ``put`` blocks while the
queue is full: backpressure onto the watch streams (they resume from their resourceVersion),
so no request is dropped and memory stays bounded; it gives up only when the agent stops.
One worker thread takes items in order:

* warm: skipped when this (source, dataset) was already warmed (the pin records survive
  restarts) or was released while queued; otherwise :class:`prefetchd.warm.Warmer` fetches
  what the node cache lacks and pins it under an owner derived from the source (workflow or
  pod), the step and the dataset (:func:`pin_owner`), so a release unpins exactly those pins
  and never another workflow's. The pin is recorded in ``<cache_dir>/prefetchd/k8s-pins.json``.
  The endpoint, region and credentials come from the dataset's volume
  (:mod:`prefetchd.k8s.credentials`); the record names their origin, never their values.
* release: drops the pins of every record of (source, dataset) and the records themselves.
* publish, on its own thread (``prefetchd-node-publisher``) so a long warm does not delay it:
  soon after each warm or release and every ``publish_interval`` seconds, a merge patch
  of this agent's own Node setting ``fusecache.io/cache-free-bytes`` (limit - used, from
  ``NodeCache.stats()``) and the bounded ``holds.fusecache.io/bNN`` labels of the datasets the
  records say this node holds. Without the annotation no agent counts this node as a candidate.
  With a peer endpoint (the cache group, :meth:`WarmWorker.set_peer_endpoint`) the same patch
  sets ``fusecache.io/peer`` (:func:`prefetchd.k8s.group_watch.peer_annotation`).
* cache-group striping (``striping``): a warm fetches and pins only this node's blocks by the
  group file, its record is marked ``striped`` (not published as held), and ``rebalance``
  (queued when the group's members change) warms the striped records again.

The node cache may be opened by several threads at once (warm, unpin, stats): the core
shares one LMDB environment per process between all handles, as LMDB requires.
Pod-sourced warms pin with a TTL (``pod_pin_ttl``): nothing tells the agent when a pod's data is
no longer needed. Workflow-sourced pins are released by the DAG (or expire after ``pin_ttl``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fusecache
from prefetchd import _jsonfile
from prefetchd import warm as warm_mod
from prefetchd.k8s import credentials, group_watch, placement, rest

log = logging.getLogger(__name__)

# Items waiting for the worker: each is small (a few strings), and a full queue blocks the
# watchers instead of growing. 256 covers a burst of large workflows' datasets.
QUEUE_SIZE = 256
# Records of pins (one per warmed (source, dataset)); beyond this the oldest are released.
MAX_RECORDS = 10_000
# A warm S3 failed part of is asked for again after these delays (seconds), then left to the
# pod's reads; at most MAX_RETRYING datasets wait for a retry at once.
RETRY_DELAYS = (30.0, 60.0, 120.0, 300.0, 600.0)
MAX_RETRYING = 256
# Do not rewrite the Node for a free-space change smaller than this (or 1% of the limit):
# ranking uses free GiB on a log2 scale, and every patch is a write to etcd.
PUBLISH_MIN_DELTA = 64 << 20


def pin_owner(source: str, step: str, dataset: str) -> str:
    """The pin owner of one warm: ``prefetchd:workflow/ns/name:step:s3://...``."""
    return f"{warm_mod.PIN_OWNER_PREFIX}{source.replace(' ', '/', 1)}:{step}:{dataset}"


@dataclass(frozen=True)
class WorkerConfig:
    cache_dir: str
    node_name: str
    endpoint_url: str | None = None
    concurrency: int = 16  # parallel object fetches per warm (Warmer's default)
    bandwidth: float | None = None
    pin_ttl: float | None = None  # workflow pins: None = until the DAG releases them
    pod_pin_ttl: float = 6 * 3600.0  # pod pins: nobody releases them, so they expire
    publish_interval: float = 30.0
    # The cache group (prefetchd.k8s.group_watch): this node's peer endpoint, published in the
    # Node's peer annotation (None: not a member); with ``striping`` each warm fetches and pins
    # only the blocks this node owns by the group file, and :meth:`WarmWorker.rebalance`
    # warms the records again when the group changes.
    peer_endpoint: str | None = None
    peer_lane_port: int = 0  # the block lane's port on the endpoint's host (0: none)
    striping: bool = False
    replicas: int = 1


class PinRecords:
    """prefetchd's record of the pins the agent holds (JSON, written atomically).

    ``{owner: {"dataset", "uri", "source", "step", "warmed_at", "bytes", "expires_at"}}``;
    ``dataset`` is the requested URI, ``uri`` the one warmed (``s3://b/dir`` -> ``.../dir/``).
    """

    def __init__(self, cache_dir: str) -> None:
        self.path = os.path.join(cache_dir, "prefetchd", "k8s-pins.json")
        self._lock = threading.RLock()  # the worker writes while the publisher reads
        self._data: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        return _jsonfile.load_dict(self.path)

    def _save(self) -> None:
        _jsonfile.save_dict(self.path, self._data)

    def live(self, now: float | None = None) -> dict[str, dict[str, Any]]:
        now = time.time() if now is None else now
        with self._lock:
            return {o: r for o, r in self._data.items()
                    if not r.get("expires_at") or r["expires_at"] > now}

    def find(self, source: str, dataset: str) -> list[str]:
        with self._lock:
            return [o for o, r in self._data.items()
                    if r.get("source") == source and r.get("dataset") == dataset]

    def complete(self, source: str, dataset: str) -> list[str]:
        """``find``'s records of warms that fetched all (not ``partial``)."""
        with self._lock:
            return [o for o in self.find(source, dataset) if not self._data[o].get("partial")]

    def add(self, owner: str, record: dict[str, Any]) -> None:
        with self._lock:
            self._data[owner] = record
            self._save()

    def remove(self, owners: list[str]) -> None:
        with self._lock:
            for o in owners:
                self._data.pop(o, None)
            self._save()

    def oldest(self, n: int) -> list[str]:
        with self._lock:
            return sorted(self._data, key=lambda o: self._data[o].get("warmed_at") or 0)[:n]

    def __len__(self) -> int:
        return len(self._data)


class NodePublisher:
    """Reads this agent's Node and merge-patches its annotation and bucket labels."""

    def __init__(self, api_client: Any, node_name: str) -> None:
        self.api, self.node_name = api_client, node_name
        self._last_free: int | None = None

    def _call(self, method: str, body: Any = None) -> dict[str, Any]:
        reply = rest.request(self.api, method, f"/api/v1/nodes/{self.node_name}", body=body,
                             content_type=rest.MERGE_PATCH)
        if reply.status != 200:
            raise RuntimeError(f"{method} node {self.node_name}: HTTP {reply.status} "
                               f"{reply.message()}")
        return reply.json()

    def publish(self, free_bytes: int, limit_bytes: int, held: list[str],
                peer: str | None = None) -> bool:
        """Patch the Node if needed; True when a patch was sent.

        *peer*: this node's cache-group annotation value (``group_watch.peer_annotation``),
        patched when it differs from the Node's.
        """
        meta = self._call("GET").get("metadata") or {}
        annotations = meta.get("annotations") or {}
        peer_stale = peer is not None and annotations.get(group_watch.PEER_ANNOTATION) != peer
        labels_patch = placement.holds_labels_patch(meta.get("labels") or {}, held)
        try:
            published = int(annotations.get(placement.CACHE_FREE_ANNOTATION, ""))
        except ValueError:
            published = None
        min_delta = max(PUBLISH_MIN_DELTA, limit_bytes // 100)
        free_stale = published is None or abs(published - free_bytes) >= min_delta
        if not free_stale and labels_patch is None and not peer_stale:
            return False
        patch: dict[str, Any] = {"metadata": {}}
        if free_stale:
            patch["metadata"]["annotations"] = {placement.CACHE_FREE_ANNOTATION: str(free_bytes)}
        if peer_stale:
            patch["metadata"].setdefault("annotations", {})[group_watch.PEER_ANNOTATION] = peer
        if labels_patch is not None:
            patch["metadata"]["labels"] = labels_patch["metadata"]["labels"]
        self._call("PATCH", patch)
        log.info("node %s: published cache-free-bytes=%d, %d held datasets%s", self.node_name,
                 free_bytes, len(held),
                 f", labels {sorted(patch['metadata']['labels'])}" if labels_patch else "")
        return True


_STOP = object()


class WarmWorker:
    """One thread that warms, releases and publishes (see the module docstring)."""

    def __init__(
        self, config: WorkerConfig, publisher: NodePublisher | None = None,
        metrics: Any = None, stop: threading.Event | None = None,
        queue_size: int = QUEUE_SIZE, make_warmer: Callable[..., Any] = warm_mod.Warmer,
        store_configs: Callable[[Any], credentials.StoreConfig] | None = None,
    ) -> None:
        self.config, self.publisher, self.metrics = config, publisher, metrics
        self.stop_event = stop or threading.Event()
        self.records = PinRecords(config.cache_dir)
        self._q: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        # Warms for pods already bound here (WarmRequest.urgent): their own thread, so they
        # start at once, not after the queue and a warm for later work under way.
        self._urgent_q: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        # (source, dataset, urgent) of the warms waiting: one may wait in each lane
        self._queued: set[tuple[str, str, bool]] = set()
        self._cancelled: set[tuple[str, str]] = set()  # released while queued
        self._thread: threading.Thread | None = None
        self._urgent_thread: threading.Thread | None = None
        self._urgent_running: set[tuple[str, str]] = set()  # (source, dataset) warming now
        # (source, dataset) a lane is warming now -> set when it is done (either lane)
        self._warming: dict[tuple[str, str], threading.Event] = {}
        # (source, dataset) warming now -> set to stop that warm (released, or the agent
        # stops): a deleted job's warm went on fetching to the end (a blind test of the agent)
        self._halts: dict[tuple[str, str], threading.Event] = {}
        # (source, dataset) -> retries made of a warm S3 failed part of (RETRY_DELAYS)
        self._retries: dict[tuple[str, str], int] = {}
        self._publisher_thread: threading.Thread | None = None
        self._publish_soon = threading.Event()  # set after a warm or release
        self._make_warmer = make_warmer  # prefetchd.warm.Warmer; a named seam for tests
        # request -> endpoint/region/credentials of the dataset's volume
        # (prefetchd.k8s.credentials.VolumeCredentials); None: the agent's own, for every warm
        self._store_configs = store_configs
        # Called on the worker thread after each warm request is done with, whatever the
        # outcome: (request, bytes pinned for it here, time). The job warmer uses it to send
        # the next queued job's warm and to measure lead times.
        self.finished_hooks: list[Callable[[Any, int, float], None]] = []

    def held(self) -> list[tuple[str, str]]:
        """(source, dataset) of every recorded pin (call before :meth:`start`)."""
        return sorted({(r.get("source", ""), r.get("dataset", ""))
                       for r in self.records.live(now=0).values()
                       if r.get("source") and r.get("dataset")})

    # ------------------------------------------------------------ called from watchers

    def warm(self, req: Any) -> None:
        """Agent callback (watcher thread): queue a WarmRequest, blocking while full."""
        urgent = bool(getattr(req, "urgent", False))
        key = (req.source, req.dataset, urgent)
        with self._lock:
            if key in self._queued:
                return
            self._queued.add(key)
            self._cancelled.discard(key[:2])
        if not self._put(("warm", req), self._urgent_q if urgent else self._q):
            with self._lock:
                self._queued.discard(key)

    def release(self, dataset: str, source: str) -> None:
        """Agent callback (watcher thread): queue the release of (source, dataset)'s pins;
        a warm of it under way stops fetching at once."""
        with self._lock:
            if self._waiting(source, dataset):
                self._cancelled.add((source, dataset))
            halt = self._halts.get((source, dataset))
            self._retries.pop((source, dataset), None)
        if halt is not None:
            log.info("%s: %s released while warming: stopping that warm", source, dataset)
            halt.set()
        self._put(("release", dataset, source))

    def _waiting(self, source: str, dataset: str) -> bool:
        """Whether a warm of (source, dataset) waits in either lane (under _lock)."""
        return (source, dataset, False) in self._queued or (source, dataset, True) in self._queued

    def _put(self, item: Any, q: queue.Queue[Any] | None = None) -> bool:
        q = self._q if q is None else q
        while not self.stop_event.is_set():
            try:
                q.put(item, timeout=0.5)
                self._observe_depth()
                return True
            except queue.Full:
                continue  # backpressure: the watcher waits for the worker
        return False

    def _observe_depth(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth(self._q.qsize() + self._urgent_q.qsize())

    # ------------------------------------------------------------ the worker thread

    def start(self) -> WarmWorker:
        self._thread = threading.Thread(target=self.run, name="prefetchd-warm-worker",
                                        daemon=True)
        self._thread.start()
        self._urgent_thread = threading.Thread(target=self.run_urgent,
                                               name="prefetchd-urgent-warm", daemon=True)
        self._urgent_thread.start()
        self._publisher_thread = threading.Thread(
            target=self.publish_loop, name="prefetchd-node-publisher", daemon=True)
        self._publisher_thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the current item (a running warm stops fetching at once)."""
        self.stop_event.set()
        with self._lock:
            for halt in self._halts.values():
                halt.set()
        for q in (self._q, self._urgent_q):
            try:
                q.put_nowait(_STOP)
            except queue.Full:
                pass  # the worker sees stop_event within its get timeout
        self._publish_soon.set()  # wakes the publisher, which then sees stop_event
        for t in (self._thread, self._urgent_thread, self._publisher_thread):
            if t is not None:
                t.join(timeout)

    def set_peer_endpoint(self, endpoint: str | None, lane_port: int = 0) -> None:
        """Publish (or stop publishing) this node in the cache group: called once its peer
        server serves, so no peer dials an endpoint that is not listening yet."""
        self.config = dataclasses.replace(self.config, peer_endpoint=endpoint,
                                          peer_lane_port=lane_port)
        self._publish_soon.set()

    def publish_loop(self) -> None:
        """The publisher loop (blocking; runs on the publisher thread)."""
        while not self.stop_event.is_set():
            self._publish_soon.wait(self.config.publish_interval)
            self._publish_soon.clear()
            if self.stop_event.is_set():
                break
            try:
                self.publish()
            except Exception:  # noqa: BLE001 - the next interval tries again
                log.exception("node %s: publication failed", self.config.node_name)

    def run(self) -> None:
        """The worker loop (blocking; runs on the worker thread)."""
        self._serve(self._q, self._do_item)
        log.info("warm worker stopped")

    def run_urgent(self) -> None:
        """The urgent lane's loop (blocking; its own thread): warms for pods already bound
        to this node, each started as soon as it comes, while the worker may be warming a
        dataset for later work. Both fetch into the one node cache; a dataset warmed by
        one is skipped by the other (its pin record)."""
        self._serve(self._urgent_q, self._do_urgent)

    def _serve(self, q: queue.Queue[Any], handle: Callable[[Any], None]) -> None:
        """Take *q*'s items one at a time until stopped; one that fails is logged."""
        while not self.stop_event.is_set():
            try:
                item = q.get(timeout=1.0)
            except queue.Empty:
                continue
            if item is _STOP:
                break
            try:
                handle(item)
            except Exception:  # noqa: BLE001 - one bad item must not stop the agent
                log.exception("prefetchd agent: %s failed", item[0])
            self._observe_depth()
            self._publish_soon.set()

    def _do_item(self, item: Any) -> None:
        if item[0] == "warm":
            self._do_warm(item[1])
            self._finished(item[1])
        elif item[0] == "rebalance":
            self._do_rebalance()
        else:
            self._do_release(item[1], item[2])

    def _do_urgent(self, item: Any) -> None:
        key = (item[1].source, item[1].dataset)
        with self._lock:
            self._urgent_running.add(key)
        try:
            self._do_warm(item[1])
            self._finished(item[1])
        finally:
            with self._lock:
                self._urgent_running.discard(key)

    def _finished(self, req: Any) -> None:
        records = self.records.live(now=0)
        nbytes = sum(int(records.get(o, {}).get("bytes") or 0)
                     for o in self.records.find(req.source, req.dataset))
        for hook in self.finished_hooks:
            try:
                hook(req, nbytes, time.time())
            except Exception:  # noqa: BLE001 - a hook must not stop the worker
                log.exception("after warming %s: hook failed", req.dataset)

    def _do_warm(self, req: Any) -> None:
        """Warm *req*, after the other lane's warm of the same (source, dataset) if one is
        under way: a pod bound before its data asks the urgent lane for what the queued lane
        may be fetching already, and fetching it twice doubles the S3 traffic; waited for, it
        is found warmed and skipped."""
        key = (req.source, req.dataset)
        while True:
            with self._lock:
                busy = self._warming.get(key)
                if busy is None:
                    done = self._warming[key] = threading.Event()
                    break
            while not busy.wait(0.5):
                if self.stop_event.is_set():
                    return
        try:
            self._warm_now(req)
        finally:
            with self._lock:
                del self._warming[key]
            done.set()

    def _warm_now(self, req: Any) -> None:
        key = (req.source, req.dataset)
        with self._lock:
            self._queued.discard((*key, bool(getattr(req, "urgent", False))))
            if key in self._cancelled:
                if not self._waiting(*key):
                    self._cancelled.discard(key)  # the last of its queued warms
                log.info("%s: %s released before its warm started; skipped",
                         req.source, req.dataset)
                return
        if self.records.complete(req.source, req.dataset):
            log.info("%s: %s already warmed on this node; skipped", req.source, req.dataset)
            if self.metrics is not None:
                self.metrics.warm_skipped(req)
            return
        is_pod = req.source.startswith("pod ")
        ttl = self.config.pod_pin_ttl if is_pod else self.config.pin_ttl
        owner = pin_owner(req.source, req.step, req.dataset)
        try:
            store = (self._store_configs(req) if self._store_configs is not None else
                     credentials.StoreConfig(self.config.endpoint_url, None, "agent identity"))
        except credentials.CredentialError as e:
            log.warning("%s: cannot warm %s: %s", req.source, req.dataset, e)
            if self.metrics is not None:
                self.metrics.warm_failed(req)
            # (a Secret made after its job, or let read later, is used then: a blind test of
            # the agent found the warm never asked for again once the Secret existed)
            self._retry_later(req, "not warmed")
            return
        log.info("warming %s for %s (step %s, stage %d) with the credentials of %s",
                 req.dataset, req.source, req.step, req.stage, store.origin)
        started = time.time()
        group = self._striping_group()
        halt = threading.Event()
        with self._lock:
            self._halts[key] = halt
            if self.stop_event.is_set():
                halt.set()
        try:
            res = self._run_warmer(req.dataset, owner, ttl, store, group, halt)
        except warm_mod.WarmError as e:
            log.warning("%s: cannot warm %s: %s", req.source, req.dataset, e)
            if self.metrics is not None:
                self.metrics.warm_failed(req)
            return
        finally:
            with self._lock:
                self._halts.pop(key, None)
        finished = time.time()
        held = res.bytes - res.skipped_bytes - res.others_bytes
        if res.failed:  # what it holds of the dataset, not what it was asked for
            held = self._held_bytes(res.uri)
        # (skipped for a release or a stop were logged "cache full": blind agent round 2)
        why = "released" if halt.is_set() and not self.stop_event.is_set() else \
            "stopping" if self.stop_event.is_set() else "cache full"
        log.info("%s %s for %s (step %s): %d objects, %d bytes, %d transferred, "
                 "%d skipped (%s), %d failed, %.1fs; %d bytes held here",
                 "warmed part of" if res.failed else "warmed", res.uri, req.source, req.step,
                 res.objects, res.bytes, res.transferred, res.skipped, why, len(res.failed),
                 finished - started, held)
        if halt.is_set() and not self.stop_event.is_set():
            self._unpin(owner)  # released while it ran: nothing of it is kept
            return
        if self.stop_event.is_set() and (res.skipped or res.failed):
            # interrupted: not recorded as warmed, so a restart warms it again
            self._unpin(owner)
            return
        # (objects the cache had no room for, beside pinned data: asked for again as a
        # failed part is, for room may free; a blind test of the agent: six such warms were
        # never fetched after 64 MiB were freed)
        partial = bool(res.failed or res.skipped)
        if partial:
            self._retry_later(req)
        else:
            with self._lock:
                self._retries.pop(key, None)
        self.records.add(owner, {
            "dataset": req.dataset, "uri": res.uri, "source": req.source, "step": req.step,
            # a warm S3 failed part of (an outage): its pins hold what came; not warmed, so
            # the next ask (a retry, the pod bound here) fetches the rest (a blind test of
            # the agent: it stayed 38% cached, counted warm, after S3 was back)
            **({"partial": True} if partial else {}),
            "warmed_at": finished, "bytes": held,
            # a share of the dataset (group striping): not advertised as held here
            **({"striped": True} if group is not None else {}),
            "credentials_from": store.origin,  # names the PV/Secret, never a secret value
            "transferred": res.transferred,
            "expires_at": (finished + ttl) if ttl else None,
        })
        if len(self.records) > MAX_RECORDS:
            for old in self.records.oldest(len(self.records) - MAX_RECORDS):
                rec = self.records.live().get(old) or {}
                if rec.get("uri"):
                    self._unpin(old)
                self.records.remove([old])
        if self.metrics is not None:
            self.metrics.warm_done(req, res, started, finished)

    def _retry_later(self, req: Any, why: str = "partly warmed") -> None:
        """Ask for *req* again after RETRY_DELAYS[n] (its n-th retry), while it is still
        wanted (a release drops it); at most MAX_RETRYING datasets wait so, and none past
        the last delay."""
        key = (req.source, req.dataset)
        with self._lock:
            n = self._retries.get(key, 0)
            if n >= len(RETRY_DELAYS) or (key not in self._retries
                                          and len(self._retries) >= MAX_RETRYING):
                log.warning("%s: %s stays %s (%d retries); the pod's own reads fetch the "
                            "rest", req.source, req.dataset, why, n)
                self._retries.pop(key, None)
                return
            self._retries[key] = n + 1
        log.info("%s: %s %s; trying again in %.0fs", req.source, req.dataset, why,
                 RETRY_DELAYS[n])
        timer = threading.Timer(RETRY_DELAYS[n], self._retry, args=(req,))
        timer.daemon = True
        timer.start()

    def _retry(self, req: Any) -> None:
        with self._lock:
            wanted = (req.source, req.dataset) in self._retries
        if wanted and not self.stop_event.is_set():
            self.warm(req)

    def _held_bytes(self, uri: str) -> int:
        cache = fusecache.NodeCache.open(self.config.cache_dir)
        try:
            return warm_mod.cached_share(cache, uri)[1]
        finally:
            cache.close()

    def _run_warmer(self, dataset: str, owner: str, ttl: float | None,
                    store: credentials.StoreConfig, group: Any, stop: threading.Event) -> Any:
        w = self._make_warmer(self.config.cache_dir, store.endpoint_url,
                              self.config.concurrency, self.config.bandwidth, ttl,
                              stop=stop, pin_owner=owner, region=store.region,
                              credentials=store.credentials,
                              **({"group": group} if group is not None else {}))
        return w.warm([dataset])[0]

    def _striping_group(self) -> Any:
        """The group whose share this node warms (striping), else None.

        A missing or unreadable group file is a group of none: nothing is fetched, and
        :meth:`rebalance` fetches this node's share once the group is known.
        """
        if not self.config.striping:
            return None
        import dataclasses

        from fusecache.group import GROUP_FILE, Group, GroupFileError, load_group

        try:
            group = load_group(os.path.join(self.config.cache_dir, GROUP_FILE))
        except (OSError, GroupFileError) as e:
            log.warning("group striping: no usable group file yet (%s): warming nothing "
                        "until the group is known", e)
            return Group(self.config.node_name, striping=True)
        return dataclasses.replace(group, replicas=self.config.replicas)

    def rebalance(self) -> None:
        """Queue a pass warming every striped record again with the current group (called
        when the group's members change): this node fetches the blocks it now owns; the
        blocks it no longer owns stay cached and pinned until the dataset is released."""
        if self.config.striping:
            self._put(("rebalance",))

    def _do_rebalance(self) -> None:
        group = self._striping_group()
        now = time.time()
        for owner, rec in sorted(self.records.live(now).items()):
            if not rec.get("striped") or self.stop_event.is_set():
                continue
            exp = rec.get("expires_at")
            if rec.get("credentials_from", "agent identity") != "agent identity":
                # a volume's endpoint and Secret are not kept in the record: its share is
                # completed when the dataset is warmed again
                log.info("rebalance: %s uses %s; not rebalanced", rec.get("uri"),
                         rec.get("credentials_from"))
                continue
            store = credentials.StoreConfig(self.config.endpoint_url, None, "agent identity")
            try:
                res = self._run_warmer(rec.get("uri") or rec["dataset"], owner,
                                       max(1.0, exp - now) if exp else None, store, group,
                                       self.stop_event)
            except warm_mod.WarmError as e:
                log.warning("rebalance: cannot warm %s: %s", rec.get("uri"), e)
                continue
            log.info("rebalanced %s for %s: %d bytes transferred (group of %d)",
                     res.uri, rec.get("source"), res.transferred, len(group.members))
            self.records.add(owner, {**rec, "bytes": res.bytes - res.skipped_bytes
                                     - res.others_bytes})

    def _do_release(self, dataset: str, source: str) -> None:
        # an urgent warm of it under way pins as it goes: release what it pinned, after it
        while (source, dataset) in self._urgent_running and not self.stop_event.is_set():
            self.stop_event.wait(0.2)
        owners = self.records.find(source, dataset)
        if not owners:
            log.debug("%s: nothing of %s pinned here to release", source, dataset)
            return
        n = sum(self._unpin(owner) for owner in owners)
        self.records.remove(owners)
        self._mark_unpinned(owners)
        log.info("released %s for %s: dropped %d pins", dataset, source, n)

    def _unpin(self, owner: str) -> int:
        """Drop *owner*'s pins (every one: objects whose blocks never came too) and the
        warm's own status record when it is *owner*'s (``prefetchd status`` showed a
        released warm pinned for a day). Returns the pins dropped."""
        cache = fusecache.NodeCache.open(self.config.cache_dir)
        try:
            n = cache.unpin_owner(owner)
        finally:
            cache.close()

        def forget(d: dict[str, Any]) -> None:
            for key in [k for k, rec in d.items()
                        if isinstance(rec, dict) and rec.get("pin_owner") == owner]:
                del d[key]

        warm_mod.StateFile(self.config.cache_dir).update(forget)
        return n

    def _scoped_counters(self) -> dict[str, dict[str, int]]:
        cache = fusecache.NodeCache.open(self.config.cache_dir)
        try:
            return cache.scoped_counters()
        finally:
            cache.close()

    def cache_limit(self) -> int:
        """The node cache's size limit in bytes."""
        return int(self._stats().limit_bytes)

    def _stats(self) -> Any:
        """NodeCache.stats(); safe while a warm holds the cache (one shared environment)."""
        cache = fusecache.NodeCache.open(self.config.cache_dir)
        try:
            return cache.stats()
        finally:
            cache.close()

    def _buckets(self, records: list[dict[str, Any]]) -> list[str]:
        """Buckets this node warms (its records) or its mounts read (offline-auth records)."""
        from fusecache.offline_auth import authorised_buckets

        out = set()
        for r in records:
            try:
                out.add(warm_mod.parse_s3_uri(r.get("uri") or r.get("dataset") or "")[0])
            except warm_mod.WarmError:
                continue
        cache = fusecache.NodeCache.open(self.config.cache_dir)
        try:
            out.update(authorised_buckets(cache))
        except Exception as e:  # noqa: BLE001 - the records alone still say something
            log.debug("cannot read the offline-auth records: %s", e)
        finally:
            cache.close()
        return sorted(out)

    def _mark_unpinned(self, owners: list[str]) -> None:
        """Keep ``prefetchd status`` honest: the warm records of these owners are unpinned."""
        gone = set(owners)

        def upd(d: dict[str, Any]) -> None:
            for rec in d.values():
                if isinstance(rec, dict) and rec.get("pin_owner") in gone:
                    rec["pinned"] = False

        warm_mod.StateFile(self.config.cache_dir).update(upd)

    def publish(self) -> None:
        """Node cache stats -> metrics and the Node (publisher thread, or before start)."""
        try:
            st = self._stats()
        except Exception as e:  # noqa: BLE001 - cache unreadable now: the next interval
            log.warning("node %s: cannot read the node cache stats: %s",
                        self.config.node_name, e)
            return
        if self.metrics is not None:
            self.metrics.node_stats(st)
            self.metrics.mount_stats(self._scoped_counters())
        if self.publisher is None:
            return
        records = list(self.records.live().values())
        held = sorted({r.get("uri") or r["dataset"] for r in records if not r.get("striped")})
        peer = None
        if self.config.peer_endpoint is not None:
            peer = group_watch.peer_annotation(
                self.config.peer_endpoint, max(st.limit_bytes / 2**30, 1e-3),
                self._buckets(records), held, self.config.peer_lane_port)
        try:
            self.publisher.publish(max(0, st.limit_bytes - st.used_bytes), st.limit_bytes, held,
                                   **({"peer": peer} if peer is not None else {}))
        except Exception as e:  # noqa: BLE001 - API down: retried at the next interval
            log.warning("cannot publish node %s: %s", self.config.node_name, e)
