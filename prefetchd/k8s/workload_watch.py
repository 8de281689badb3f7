"""The node agent's watches of training work beyond pipelines, and what it warms for them.

Who calls this: :func:`prefetchd.k8s.agent.run_kubernetes` makes one :class:`WorkloadWatch`
beside the workflow :class:`~prefetchd.k8s.agent.Agent` and starts it once this node is
annotated; :func:`prefetchd.k8s.agent.run` wires the worker's finished hook and the metrics.

Data flow:

* Watches: CustomResourceDefinitions are watched; for every entry of
  :data:`prefetchd.workloads.KINDS` and :data:`~prefetchd.workloads.LIBRARY_WATCHES` whose CRD
  is Established (at a version prefetchd reads), one :class:`~prefetchd.k8s.watch.Watcher` is
  started; it is stopped when the CRD goes. A kind whose CRD is missing is logged once and
  never stops the agent; a CRD installed later is noticed. batch/v1 Jobs and CronJobs (built
  in) are always watched.
* Lookup objects (runtimes, WorkloadPriorityClasses, ResourceFlavors) fill a
  :class:`~prefetchd.workloads.Library`; every remembered object is then read again (a job
  whose runtime was unknown becomes readable). One not held yet is fetched by one GET (a
  trial-template ConfigMap, or a runtime its watch has not listed yet).
* Every object event -> :func:`prefetchd.workloads.read`. An unreadable object is logged once
  per (uid, resourceVersion) and skipped. Work with an ``owner`` is skipped (its owner
  describes the same pods), except a ``queue_record`` (a Kueue Workload), which supplies the
  queue state and priority of its owner's ``release_key``.
* Warm: for each :meth:`~prefetchd.workloads.UpcomingWork.targets` entry this node is chosen
  for by :func:`prefetchd.k8s.placement.should_warm` with ``max(--replicas, target nodes)``
  replicas (a job with W workers is warmed on W nodes), a ``WarmRequest`` whose source is the
  work's ``release_key``. Admitted or running work goes to the worker at once. Queued work
  waits in a lane here, ordered by :func:`~prefetchd.workloads.order_key` (Kueue priority,
  then age): one queued warm is in the worker at a time (so admitted work waits behind at most
  one queued warm, and queued work uses one warm's share of the link), the lane opens only
  after the first listing of every kind watched at start (so the order is the queue's, not
  the listing's), and stops while the bytes pinned here for still-queued work reach
  ``queued_limit_bytes`` (``--queued-share`` of the node cache).
* Release: every dataset pinned under a ``release_key`` is released when the object whose key
  is that ``release_key`` is done or deleted, or its queue record reports finished/inactive
  (a Trial finishing never releases; its Experiment ending does).
* Restart: pins recorded under these kinds' sources are claimed back by their work; after
  each kind's first listing, those of work that no longer exists are released.
* Node changes (the agent's re-placement pass) evaluate every remembered work again.
* Pending pods of known work are left to this module (:meth:`WorkloadWatch.claim_pod`): the
  agent's pod path would pin their data again under the pod, with a TTL. One already bound to
  this node (where placement may not have warmed: its preferred nodes were full, or the
  scheduler chose otherwise) gets the datasets it names (``datasets.pod_datasets``) warmed at
  once, in the worker's urgent lane, under its work's ``release_key`` (so they go with the
  work), once per pod; already warmed here, the worker skips it at once.

Bounded: works, raw objects and queued lane entries are LRU-capped at ``max_works``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prefetchd import workloads as wl
from prefetchd.k8s import datasets as ds_mod
from prefetchd.k8s import placement
from prefetchd.k8s import watch as kw
from prefetchd.k8s.agent import WarmRequest

log = logging.getLogger(__name__)

CRDS = kw.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
BUILT_IN = "batch"  # the group of built-in kinds (Job, CronJob): watched without a CRD


@dataclass(frozen=True)
class Watchable:
    """One resource kind to watch: API group, kind, versions read (first preferred), plural."""

    group: str
    kind: str
    versions: tuple[str, ...]
    plural: str
    namespaced: bool
    lookup: bool  # a Library object (runtime, priority class, flavor), not work


def watchables() -> list[Watchable]:
    out = [Watchable(k.group, k.kind, k.versions, k.plural, k.namespaced, False)
           for k in wl.KINDS]
    out += [Watchable(g, k, v, p, n, True) for g, k, v, p, n in wl.LIBRARY_WATCHES]
    return out


def established_version(crd: dict[str, Any], versions: tuple[str, ...]) -> str | None:
    """The first of ``versions`` the CRD serves, if the CRD is Established; else None."""
    conds = (crd.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
        return None
    served = {v.get("name") for v in (crd.get("spec") or {}).get("versions") or []
              if v.get("served", True)}
    return next((v for v in versions if v in served), None)


@dataclass(frozen=True)
class WorkloadConfig:
    node_name: str
    replicas: int = 1
    namespace: str | None = None
    max_works: int = 10_000
    queued_limit_bytes: int | None = None  # bytes pinned for queued work; None: no bound
    # True when a finished hook reports each warm's end (the real worker); without one the
    # lane cannot know when a queued warm ends and sends them all (test seams).
    paced: bool = True
    metrics: Any = field(default=None, compare=False)  # prefetchd.k8s.metrics.AgentMetrics
    # The worker's finished hooks (WarmWorker.finished_hooks): attach() adds warm_finished.
    finished_hooks: list[Any] | None = field(default=None, compare=False)
    striping: bool = False  # --group-striping: every agent warms its share of every dataset


@dataclass
class _Job:
    """What is known of one release key: its work, queue record, datasets asked for here."""

    works: dict[str, wl.UpcomingWork] = field(default_factory=dict)  # key -> work
    record: wl.UpcomingWork | None = None  # the queue record (Kueue Workload)
    requested: set[str] = field(default_factory=set)  # datasets sent to the worker
    lane: dict[str, Any] = field(default_factory=dict)  # dataset -> WarmRequest, queued
    warmed: dict[str, int] = field(default_factory=dict)  # dataset -> bytes pinned here
    seen_queued: bool = False
    admitted: bool = False


def attach(agent: Any, config: WorkloadConfig, warm: Callable[[Any], None],
           release: Callable[[str, str], None],
           held: Iterable[tuple[str, str]] = ()) -> WorkloadWatch:
    """A WorkloadWatch sharing the agent's nodes and view, re-placed with the agent's pass."""
    watch = WorkloadWatch(config, agent.view, agent.nodes, warm, release, held, config.metrics)
    agent.replan_hooks.append(watch.replan)
    agent.pod_owners.append(watch.claim_pod)
    if config.finished_hooks is not None:
        config.finished_hooks.append(watch.warm_finished)
    return watch


class WorkloadWatch:
    """Handlers and watches for training work (thread-safe; see the module docstring)."""

    def __init__(self, config: WorkloadConfig, view: ds_mod.ClusterView,
                 nodes: Callable[[], list[placement.NodeInfo]], warm: Callable[[Any], None],
                 release: Callable[[str, str], None], held: Iterable[tuple[str, str]] = (),
                 metrics: Any = None) -> None:
        self._request = WarmRequest
        self.config, self.view, self.nodes = config, view, nodes
        self.warm, self.release, self.metrics = warm, release, metrics
        get_json = getattr(view, "get_json", None)
        # A lookup object not held is fetched by one GET: trial-template ConfigMaps are not
        # watched, and a job may be listed before its runtime's watch has listed that.
        self.library = wl.Library(fetch=wl.fetcher(get_json) if get_json is not None else None)
        self._lock = threading.RLock()
        self._jobs: OrderedDict[str, _Job] = OrderedDict()  # release key -> _Job
        self._objects: OrderedDict[str, dict[str, Any]] = OrderedDict()  # uid -> latest object
        self._bad: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._done_logged: OrderedDict[str, None] = OrderedDict()
        # Release keys released here (bounded): a late pending pod of finished work is still
        # that work's (and needs no warm), not a stranger for the agent's pod path.
        self._released: OrderedDict[str, None] = OrderedDict()
        # Work skipped for its owner (a CronJob's Job, a Trial's run object) -> the owner's
        # key (bounded): its pods, labelled only with the skipped work, are the owner's.
        self._described: OrderedDict[str, str] = OrderedDict()
        # Pods of known work whose bound-here warm was asked for (bounded): once per pod.
        self._bound_pods: OrderedDict[str, None] = OrderedDict()
        # Pods bound here before their work's own watch event came (bounded): the agent's pod
        # path warms them at once, under the pod; the work takes them when it comes, so its
        # data is pinned under the work too (a race seen on a real control plane).
        self._early_pods: OrderedDict[str, dict[str, Any]] = OrderedDict()
        kinds = {w.kind.lower() for w in watchables() if not w.lookup}
        self._held: dict[str, set[str]] = {}
        for source, dataset in held:
            if source.split(" ", 1)[0] in kinds:
                self._held.setdefault(source, set()).add(dataset)
        self._inflight: tuple[str, str] | None = None
        self._lane_open = False
        self._awaiting_lists: set[tuple[str, str]] = set()
        self._crds_listed = False
        self._missing_logged: set[tuple[str, str]] = set()
        self._watchers: dict[tuple[str, str], tuple[kw.Watcher, threading.Thread, str]] = {}
        self._make_transport: Callable[[], kw.Transport] | None = None
        self._options = kw.WatchOptions(namespace=config.namespace)
        self._crd_watch: kw.Watcher | None = None
        self._crd_thread: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------ watches

    def start(self, make_transport: Callable[[], kw.Transport],
              options: kw.WatchOptions | None = None) -> None:
        """Watch CRDs (and the built-in Jobs and CronJobs); the other watches follow the CRDs."""
        self._make_transport = make_transport
        if options is not None:
            self._options = options
        for what in watchables():
            if what.group == BUILT_IN:
                self._start_watch(what, what.versions[0])
        cluster = kw.WatchOptions(namespace=None, timeout_seconds=self._options.timeout_seconds,
                                  backoff_initial=self._options.backoff_initial,
                                  backoff_max=self._options.backoff_max)
        self._crd_watch = kw.Watcher(make_transport(), CRDS, self.on_crd, cluster,
                                     on_listed=self._crds_listed_once)
        self._crd_thread = threading.Thread(target=self._crd_watch.run, daemon=True,
                                            name="watch-customresourcedefinitions")
        self._crd_thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._closed = True
            watchers = list(self._watchers.values())
            self._watchers.clear()
        if self._crd_watch is not None:
            self._crd_watch.stop()
        for w, _, _ in watchers:
            w.stop()
        for _, t, _ in watchers:
            t.join(timeout)
        if self._crd_thread is not None:
            self._crd_thread.join(timeout)

    def listed(self) -> bool:
        """True once the CRDs and every kind watched at start have been listed once."""
        with self._lock:
            return self._lane_open

    def watching(self) -> list[str]:
        """The resources watched now (``plural.group/version``), for logs and tests."""
        with self._lock:
            return sorted(f"{p}.{g}/{v}" for (g, p), (_, _, v) in self._watchers.items())

    def _start_watch(self, what: Watchable, version: str) -> None:
        key = (what.group, what.plural)
        with self._lock:
            if self._closed or self._make_transport is None:
                return
            if key in self._watchers:
                if self._watchers[key][2] == version:
                    return
                old = self._watchers.pop(key)
                old[0].stop()
            resource = kw.Resource(what.group, version, what.plural, what.namespaced)
            options = self._options if what.namespaced else kw.WatchOptions(
                namespace=None, timeout_seconds=self._options.timeout_seconds,
                backoff_initial=self._options.backoff_initial,
                backoff_max=self._options.backoff_max)
            gating = not self._lane_open
            if gating:
                self._awaiting_lists.add(key)
            listed = {"first": True}

            def on_listed() -> None:
                first, listed["first"] = listed["first"], False
                if first:
                    self._first_listing(what, key)

            watcher = kw.Watcher(self._make_transport(), resource, self.on_object, options,
                                 on_listed=on_listed)
            thread = threading.Thread(target=watcher.run, daemon=True, name=f"watch-{resource}")
            self._watchers[key] = (watcher, thread, version)
        log.info("watching %s/%s %s", what.group, version, what.plural)
        thread.start()

    def _stop_watch(self, key: tuple[str, str]) -> None:
        with self._lock:
            entry = self._watchers.pop(key, None)
            self._awaiting_lists.discard(key)
        if entry is not None:
            log.info("CRD %s.%s gone: no longer watched", key[1], key[0])
            entry[0].stop()
        self._maybe_open_lane()

    def on_crd(self, etype: str, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
        if not group or not plural:  # a synthesised DELETED carries only metadata
            name = (obj.get("metadata") or {}).get("name", "")
            plural, _, group = name.partition(".")
        for what in watchables():
            if (what.group, what.plural) != (group, plural):
                continue
            version = None if etype == "DELETED" else established_version(obj, what.versions)
            if version is None:
                self._stop_watch((group, plural))
            else:
                self._start_watch(what, version)

    def _crds_listed_once(self) -> None:
        with self._lock:
            first = not self._crds_listed
            self._crds_listed = True
            watched = set(self._watchers)
        if not first:
            return
        for what in watchables():
            if (what.group, what.plural) not in watched and \
                    (what.group, what.plural) not in self._missing_logged:
                self._missing_logged.add((what.group, what.plural))
                log.info("%s (%s): CRD not installed; watched once it is", what.kind,
                         what.group)
        self._maybe_open_lane()

    def _first_listing(self, what: Watchable, key: tuple[str, str]) -> None:
        if not what.lookup:
            self.reconcile(what.kind.lower())
        with self._lock:
            self._awaiting_lists.discard(key)
        self._maybe_open_lane()

    def _maybe_open_lane(self) -> None:
        with self._lock:
            if self._lane_open or not self._crds_listed or self._awaiting_lists:
                return
            self._lane_open = True
        log.info("first listings done: warming queued work in queue order")
        self._pump()

    # ------------------------------------------------------------ objects

    def on_object(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or ""
        if wl.is_library_object(obj):
            held = self.library.held(str(obj.get("kind")), meta.get("namespace"),
                                     str(meta.get("name", "")))
            if etype == "DELETED":
                self.library.remove(obj)
            else:
                self.library.add(obj)
            if etype == "DELETED" or not _same_spec(held, obj):
                self._reread()
            return
        if etype == "DELETED":
            with self._lock:
                old = self._objects.pop(uid, None)
            self._deleted(old or obj)
            return
        with self._lock:
            self._objects[uid] = obj
            self._objects.move_to_end(uid)
            while len(self._objects) > self.config.max_works:
                self._objects.popitem(last=False)
        self._read(obj)

    def _reread(self) -> None:
        with self._lock:
            objs = list(self._objects.values())
        for obj in objs:
            self._read(obj)

    def _warn_once(self, about: str, message: str) -> None:
        """Log *message* about an object once, not again at each status update of it (a
        blind test of the agent: one Job's bad PV said nine times in three seconds); a new
        message about it is said. Bounded: the last 1000 (object, message) pairs."""
        key = (about, message)
        with self._lock:
            first = key not in self._bad
            self._bad[key] = None
            self._bad.move_to_end(key)
            while len(self._bad) > 1000:
                self._bad.popitem(last=False)
        if first:
            log.warning("%s", message)

    def _read(self, obj: dict[str, Any]) -> wl.UpcomingWork | None:
        meta = obj.get("metadata") or {}
        try:
            work = wl.read(obj, self.library)
        except wl.WorkloadError as exc:
            self._warn_once(meta.get("uid") or "", f"cannot read, skipped: {exc}")
            return None
        if work.owner and not work.queue_record:
            log.debug("%s: described by its owner %s; skipped", work.key, work.owner)
            with self._lock:
                self._described[work.key] = work.owner
                self._described.move_to_end(work.key)
                while len(self._described) > self.config.max_works:
                    self._described.popitem(last=False)
            return None
        with self._lock:
            job = self._job(work.release_key)
            if work.queue_record:
                job.record = work
            else:
                job.works[work.key] = work
            taken = [uid for uid, pod in self._early_pods.items()
                     if {k for k, _ in wl.pod_work(pod)} & {work.key, work.release_key}]
            early = [self._early_pods.pop(uid) for uid in taken]
        self._evaluate(work.release_key)
        for pod in early:  # bound here before this work was known: its data is the work's
            if self.claim_pod(pod):  # (not while only its queue record is known)
                self._release_pod_pins(pod)
        return work

    def _release_pod_pins(self, pod: dict[str, Any]) -> None:
        """Drop what the agent's pod path pinned under *pod* before its work was known: the
        work holds that data now, and its end releases it."""
        meta = pod.get("metadata") or {}
        try:
            found = ds_mod.pod_datasets(pod, self.view)
        except Exception as exc:  # noqa: BLE001 - API trouble resolving a claim
            log.debug("pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
            return
        for dataset in found:
            self.release(dataset, f"pod {meta.get('namespace')}/{meta.get('name')}")

    def _deleted(self, obj: dict[str, Any]) -> None:
        try:
            work = wl.read(obj, self.library)
        except wl.WorkloadError:
            work = None
        if work is None:  # a synthesised DELETED (metadata only): find it by its key
            meta = obj.get("metadata") or {}
            with self._lock:
                for job in self._jobs.values():
                    for w in job.works.values():
                        if w.uid and w.uid == meta.get("uid"):
                            work = w
                    if job.record is not None and job.record.uid == meta.get("uid"):
                        work = job.record
                    if work is not None:
                        break
            if work is None:
                return
        with self._lock:
            job = self._jobs.get(work.release_key)
            if job is None:
                return
            if work.queue_record:
                job.record = None
            else:
                job.works.pop(work.key, None)
        if work.key == work.release_key:
            self._release(work.release_key, "deleted")
        else:
            self._evaluate(work.release_key)

    def _job(self, release_key: str) -> _Job:
        """The _Job of a release key (lock held), seeded with pins held before a restart."""
        job = self._jobs.get(release_key)
        if job is None:
            job = self._jobs[release_key] = _Job()
            job.requested |= self._held.pop(release_key, set())
        self._jobs.move_to_end(release_key)
        while len(self._jobs) > self.config.max_works:
            self._jobs.popitem(last=False)
        return job

    # ------------------------------------------------------------ decisions

    def _merged(self, job: _Job, work: wl.UpcomingWork) -> wl.UpcomingWork:
        """The work with its queue record's state and priority (the record knows the queue)."""
        if job.record is None or not wl.record_of(job.record, work):
            return work  # (a Workload of an earlier job of that name lends it nothing)
        return wl.with_queue_record(work, job.record)

    def _evaluate(self, release_key: str) -> None:
        with self._lock:
            job = self._jobs.get(release_key)
            if job is None:
                return
            works = [self._merged(job, w) for w in job.works.values()]
            if not works and job.record is not None and not job.record.owner:
                works = [job.record]  # a queue record of a kind not read: its pods are its own
        if not works:
            if job.record is not None and job.record.state.done:
                self._release(release_key, f"its queue record is {job.record.state.value}")
            return
        own = next((w for w in works if w.key == release_key), None)
        if (own is not None and own.state.done) or (
                job.record is not None and job.record.state.done):
            state = own.state.value if own is not None and own.state.done else \
                f"{job.record.state.value} in its queue"  # type: ignore[union-attr]
            self._release(release_key, state)
            return
        for w in works:
            if w.state.done and w.key != release_key:
                self._note_done(w, release_key)
        states = {w.state for w in works}
        now = time.time()
        with self._lock:
            if wl.State.QUEUED in states and not (states & {wl.State.ADMITTED, wl.State.RUNNING}):
                job.seen_queued = True
            admitted = bool(states & {wl.State.ADMITTED, wl.State.RUNNING}) and (
                job.seen_queued or wl.State.RUNNING in states)
            first_admission = admitted and not job.admitted
            job.admitted = job.admitted or admitted
            was_queued = job.seen_queued
        if first_admission and self.metrics is not None:
            self.metrics.job_admitted(release_key, now, was_queued)
        nodes = self.nodes()
        runs_here: dict[str, bool] = {}  # dataset -> whether some pod reading it can run here
        here = next((n for n in nodes if n.name == self.config.node_name), None)
        for work in sorted(works, key=wl.order_key):
            if work.state.done:
                continue
            resolve = wl.resolver_from_view(self.view, work.namespace)
            try:  # (placed where its bound claims' PVs let its pods run: a local PV's host)
                targets = work.targets(resolve, wl.pins_from_view(self.view, work.namespace))
            except Exception as exc:  # noqa: BLE001 - API trouble resolving a claim
                self._warn_once(work.key, f"{work.key}: cannot resolve its datasets now: {exc}")
                here = None  # (not all targets known: drop nothing)
                continue
            for t in targets:
                if here is not None:
                    runs_here[t.dataset] = runs_here.get(t.dataset, False) or \
                        placement.labels_fit(t.requirements, here)
                self._consider(job, release_key, work, t, nodes)
        if here is not None and states == {wl.State.QUEUED}:
            self._drop_where_pods_cannot_run(job, release_key, runs_here)
        self._pump()

    def _drop_where_pods_cannot_run(self, job: _Job, release_key: str,
                                    runs_here: dict[str, bool]) -> None:
        """Queued work whose pods can no longer run on this node (its constraints became
        known or changed: the flavors of its ClusterQueue, a new nodeSelector), or that no
        longer reads a dataset here (Kueue cannot admit it as it is, its spec changed), drops
        what it warmed or lined up here. Only the node's labels are weighed: being out-ranked
        by another node (the ranking moves with free space), a taint, a cordon or resources
        in use come and go, and dropping on them would churn."""
        with self._lock:
            gone = sorted(d for d in job.requested | set(job.lane)
                          if not runs_here.get(d))
            for d in gone:
                job.requested.discard(d)
                job.lane.pop(d, None)
                job.warmed.pop(d, None)
                if self._inflight == (release_key, d):
                    self._inflight = None
        for d in gone:
            log.info("%s: %s; releasing %s", release_key,
                     "its pods can no longer run on this node" if d in runs_here else
                     "it no longer reads it while queued", d)
            self.release(d, release_key)

    def _note_done(self, work: wl.UpcomingWork, release_key: str) -> None:
        """Log once that a part of longer work ended (a Trial): its data stays."""
        with self._lock:
            if work.uid in self._done_logged:
                return
            self._done_logged[work.uid] = None
            while len(self._done_logged) > 1000:
                self._done_logged.popitem(last=False)
        log.info("%s %s; its data stays pinned for %s", work.key, work.state.value,
                 release_key)

    def _consider(self, job: _Job, release_key: str, work: wl.UpcomingWork,
                  t: wl.WarmTarget, nodes: list[placement.NodeInfo]) -> None:
        queued = work.state is wl.State.QUEUED
        with self._lock:
            if t.dataset in job.requested:
                return
            if queued and t.dataset in job.lane:  # keep its place up to date (priority)
                job.lane[t.dataset] = (wl.order_key(work), t.stage, job.lane[t.dataset][2])
                return
        replicas = max(self.config.replicas, t.nodes)
        if not self.config.striping and not placement.should_warm(
                self.config.node_name, t.dataset, nodes, t.requirements, replicas):
            return
        req = self._request(t.dataset, release_key, ",".join(t.groups), t.stage)
        if self.metrics is not None:
            self.metrics.job_requested(release_key, t.dataset)
        with self._lock:
            if queued:
                job.lane[t.dataset] = (wl.order_key(work), t.stage, req)
                log.info("%s queued (priority %s): %s on %d nodes, this one among them",
                         work.key, work.priority, t.dataset, replicas)
                return
            job.lane.pop(t.dataset, None)
            job.requested.add(t.dataset)
        log.info("%s %s: warming %s here (%d nodes)", work.key, work.state.value, t.dataset,
                 replicas)
        self.warm(req)

    def _pump(self) -> None:
        """Send the next queued warm to the worker when the lane allows (see module doc)."""
        while True:
            with self._lock:
                if not self._lane_open or (self.config.paced and self._inflight is not None):
                    return
                limit = self.config.queued_limit_bytes
                if limit is not None:
                    used = sum(sum(j.warmed.values()) for j in self._jobs.values()
                               if j.seen_queued and not j.admitted)
                    if used >= limit:
                        log.debug("queued work holds %d bytes here (bound %d): waiting", used,
                                  limit)
                        return
                best = None
                for rk, job in self._jobs.items():
                    for dataset, (order, stage, req) in job.lane.items():
                        k = (order, stage, dataset)
                        if best is None or k < best[0]:
                            best = (k, rk, dataset, req)
                if best is None:
                    return
                _, rk, dataset, req = best
                job = self._jobs[rk]
                del job.lane[dataset]
                job.requested.add(dataset)
                if self.config.paced:
                    self._inflight = (rk, dataset)
            log.info("%s: warming %s here while it is queued", rk, dataset)
            self.warm(req)

    def warm_finished(self, req: Any, nbytes: int, finished: float) -> None:
        """The worker's finished hook: account the bytes, let the next queued warm go."""
        with self._lock:
            job = self._jobs.get(req.source)
            if job is not None and req.dataset in job.requested:
                job.warmed[req.dataset] = job.warmed.get(req.dataset, 0) + nbytes
            if self._inflight == (req.source, req.dataset):
                self._inflight = None
            ours = job is not None
        if ours and self.metrics is not None and nbytes:
            self.metrics.job_warmed(req.source, req.dataset, finished)
        self._pump()

    def _release(self, release_key: str, why: str) -> None:
        with self._lock:
            job = self._jobs.pop(release_key, None)
            self._released[release_key] = None
            self._released.move_to_end(release_key)
            while len(self._released) > self.config.max_works:
                self._released.popitem(last=False)
            datasets = set(job.requested) if job is not None else set()
            datasets |= self._held.pop(release_key, set())
            if self._inflight is not None and self._inflight[0] == release_key:
                self._inflight = None
        if datasets:
            log.info("%s: %s; releasing %d datasets", release_key, why, len(datasets))
        for dataset in sorted(datasets):
            self.release(dataset, release_key)
        self._pump()

    def reconcile(self, kind: str) -> None:
        """After a kind's first listing: release pins held for its work that no longer exists."""
        ns = self.config.namespace
        with self._lock:
            gone = {s: d for s, d in self._held.items() if s.split(" ", 1)[0] == kind
                    and (ns is None or s.split(" ", 1)[1].split("/", 1)[0] == ns)}
            for s in gone:
                del self._held[s]
        for source, datasets in sorted(gone.items()):
            log.info("%s: gone while the agent was down; releasing %d datasets", source,
                     len(datasets))
            for dataset in sorted(datasets):
                self.release(dataset, source)

    def claim_pod(self, pod: dict[str, Any]) -> bool:
        """True when the pending pod belongs to work known here: its data is that work's
        (pinned under its release key), so the agent's pod path leaves it alone. The first
        time such a pod is seen bound to this node, its datasets are warmed here now."""
        work = wl.pod_work(pod)
        keys = {k for k, _ in work}
        if not keys:
            return False
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or ""
        bound_here = (pod.get("spec") or {}).get("nodeName") == self.config.node_name
        with self._lock:
            keys |= {self._described[k] for k in keys if k in self._described}
            if keys & self._released.keys():
                return True  # finished work: its pods need nothing
            rk = next((rk for rk, job in self._jobs.items()
                       if rk in keys or keys & job.works.keys()), None)
            if rk is not None and not (keys & self._jobs[rk].works.keys()) and (
                    self._jobs[rk].record is None or self._jobs[rk].record.owner):
                # only its queue record is known here (a Kueue Workload's event came before
                # its RayJob's, on another stream): the pod waits for the work, whose model
                # says what the pod reads (real control plane, stop 57: a Ray worker, which
                # names nothing itself, was marked done with nothing warmed)
                rk = None
            if rk is None:
                early = bound_here and uid and uid not in self._early_pods
                if bound_here and uid:
                    self._early_pods[uid] = pod
                    self._early_pods.move_to_end(uid)
                    while len(self._early_pods) > self.config.max_works:
                        self._early_pods.popitem(last=False)
                if early:
                    log.info("pod %s/%s bound here before its work (%s) is known here: "
                             "warmed once it is", meta.get("namespace"), meta.get("name"),
                             ", ".join(sorted(keys)))
                return False
            if not bound_here or not uid or uid in self._bound_pods:
                return True
            self._bound_pods[uid] = None
            while len(self._bound_pods) > self.config.max_works:
                self._bound_pods.popitem(last=False)
            models = [w for k, w in self._jobs[rk].works.items() if k in keys]
        self._warm_bound_pod(pod, rk, work[0][1], models)
        return True

    def _warm_bound_pod(self, pod: dict[str, Any], release_key: str, group: str,
                        models: list[wl.UpcomingWork]) -> None:
        """The urgent warm of a pod bound here: every dataset it names (its fusecache
        volumes, the s3:// URIs of its containers), then those its group of the work's
        *models* reads without naming them (what an MPI launcher's command line or a
        RayJob's entrypoint runs on it), under its work's release key (taken out of the
        queued lane if it waited there)."""
        meta = pod.get("metadata") or {}
        try:
            found = ds_mod.pod_datasets(pod, self.view)
            for w in models:
                resolve = wl.resolver_from_view(self.view, w.namespace)
                found += [d for d in wl.group_datasets(w.targets(resolve), group)
                          if d not in found]
        except Exception as exc:  # noqa: BLE001 - API trouble resolving a claim
            log.warning("pod %s/%s: cannot resolve datasets: %s", meta.get("namespace"),
                        meta.get("name"), exc)
            return
        if not found:
            log.info("%s: pod %s bound here: nothing to warm for its group %s (%s)",
                     release_key, meta.get("name"), group,
                     "; ".join(f"{w.key} {w.state.value}" for w in models) or "no model")
        for dataset in found:
            with self._lock:
                job = self._jobs.get(release_key)
                if job is None:
                    return
                job.lane.pop(dataset, None)
                asked = dataset in job.requested
                job.requested.add(dataset)
            if not asked and self.metrics is not None:
                self.metrics.job_requested(release_key, dataset)
            log.info("%s: pod %s bound here%s: warming %s now", release_key, meta.get("name"),
                     "" if asked else " before its data", dataset)
            self.warm(self._request(dataset, release_key, group, 0, urgent=True))

    def replan(self) -> None:
        """Nodes changed: place every remembered work's datasets again."""
        with self._lock:
            keys = list(self._jobs)
        for key in keys:
            self._evaluate(key)


def _same_spec(held: Mapping[str, Any] | None, obj: Mapping[str, Any]) -> bool:
    """Whether *obj* is *held* with only its status changed: the same object (uid) at the same
    ``metadata.generation``, which the API server bumps on every change of the spec. A
    ClusterQueue's or LocalQueue's status changes with every admission: re-reading all work
    for each would be wasted."""
    if held is None:
        return False
    old, new = held.get("metadata") or {}, obj.get("metadata") or {}
    return (old.get("uid") == new.get("uid") and new.get("generation") is not None
            and old.get("generation") == new.get("generation"))
