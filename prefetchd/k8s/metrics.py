"""Prometheus metrics of the node agent, per workflow step and node-wide.

Who calls this: :class:`prefetchd.k8s.worker.WarmWorker` (warm results, node cache stats) and
the :class:`prefetchd.k8s.agent.Agent` observer (``observe_workflow``, on watcher threads, with
each Workflow's ``status.nodes``). Served by ``prefetchd run --kubernetes --metrics-port P``.

Per step (labels ``workflow="ns/name"``, ``step``; the step a warm was requested for, i.e. the
earliest not-started step reading the dataset):

* ``prefetchd_step_warm_lead_seconds``: the step's ``startedAt`` (from ``status.nodes``) minus
  the time its warm finished. Positive: the data was ready that long before the step started;
  negative: the warm finished that late. Set once both times are known, whichever comes last.
* ``prefetchd_step_warmed_bytes`` / ``prefetchd_step_transferred_bytes``: dataset bytes made
  resident for the step, and bytes actually fetched from S3 for it (less when already cached).
* ``prefetchd_step_node_cache_hit_ratio``: for steps that ran on THIS node (``hostNodeName``),
  the hit ratio of the node cache between the step's observed start and finish. fusecache's
  counters are node-wide (every mount on the node adds to them), so this is the node's ratio
  during the step's window, not the step's own; the counters are sampled at each publish
  (every ``publish_interval`` s), so short steps may show no value.

Node-wide: ``prefetchd_node_cache_hit_ratio`` (since the cache was created),
``prefetchd_node_cache_used_bytes`` / ``_limit_bytes``, and the raw counters as
``prefetchd_node_cache_counter{name}``. Agent: ``prefetchd_warms_total{outcome}``,
``prefetchd_warm_seconds``, ``prefetchd_warm_queue_depth``.

Per job (label ``job``, the work's release key, e.g. ``"pytorchjob ml/train"``; fed by
:mod:`prefetchd.k8s.workload_watch` for training jobs, Katib experiments and Kueue work):

* ``prefetchd_job_warm_lead_seconds``: the job's admission (the first time the agent sees it
  admitted after seeing it queued; for a job never queued, the first time it is seen running:
  its pods made, for a batch Job ``status.active``, Pending pods included) minus the
  time the last warm of its data on this node finished. Positive: warm that long before;
  negative: late. Set once both are known, from this node's share of the job's data.
* ``prefetchd_job_warm_at_admission_ratio``: of the job's datasets this node was chosen to
  warm while the job was queued, the fraction already warm here when it was admitted.

Bounded: per-job series are kept for the last ``max_steps`` jobs, per-step series for the
last ``max_steps`` (workflow, step) pairs; older ones
are removed from the registry, as are the remembered start/finish times.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
from collections import OrderedDict
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)


MAX_SCOPES = 256  # mount sources tracked (label values are bounded)


def _covers(scope: str, dataset: str) -> bool:
    """A mount of *scope* serves *dataset* (or part of it)."""
    a, b = scope.rstrip("/") + "/", dataset.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def hit_ratio(counters: dict[str, int]) -> float | None:
    """Reads served from RAM or disk over all block reads; None before any read.

    A block read is a RAM hit, or a RAM miss that is then a disk hit or a disk miss (S3).
    """
    hits = counters.get("ram_hits", 0) + counters.get("disk_hits", 0)
    total = hits + counters.get("disk_misses", 0)
    return hits / total if total else None


def _parse_time(value: Any) -> float | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_NODE_SUFFIX = re.compile(r"\[\d+\]|\(\d+(?::[^()]*)?\)")  # a step group, an item, an attempt


def _node_path(node: str, workflow: str) -> str:
    """The task names from the root to a node (``wf.prep-a.fetch`` -> ``prep-a/fetch``,
    ``wf[0].prep[1].fetch(0:x)`` -> ``prep/fetch``); "" for the root or another workflow's."""
    if not node.startswith(workflow + ".") and not node.startswith(workflow + "["):
        return ""
    rest = _NODE_SUFFIX.sub("", node[len(workflow):])
    return "/".join(p for p in rest.split(".") if p)


def _workflow(source: str) -> str:
    return source.split(" ", 1)[1] if " " in source else source


class AgentMetrics:
    """Thread-safe; one registry per instance (tests can run several)."""

    def __init__(self, node_name: str, max_steps: int = 1000) -> None:
        self.node_name, self.max_steps = node_name, max_steps
        self.registry = r = CollectorRegistry(auto_describe=True)
        step = ["workflow", "step"]
        self.lead = Gauge("prefetchd_step_warm_lead_seconds",
                          "Step start minus warm completion (negative: warm was late)", step,
                          registry=r)
        self.warmed = Gauge("prefetchd_step_warmed_bytes",
                            "Dataset bytes made resident in the node cache for the step", step,
                            registry=r)
        self.transferred = Gauge("prefetchd_step_transferred_bytes",
                                 "Bytes fetched from S3 while warming for the step", step,
                                 registry=r)
        self.step_ratio = Gauge("prefetchd_step_node_cache_hit_ratio",
                                "Node-wide cache hit ratio during the step (steps on this node)",
                                step, registry=r)
        self.warms = Counter("prefetchd_warms", "Warm requests handled", ["outcome"],
                             registry=r)
        self.warm_seconds = Histogram("prefetchd_warm_seconds", "Duration of one dataset warm",
                                      registry=r, buckets=(.1, .5, 1, 5, 15, 60, 300, 900, 3600))
        self.depth = Gauge("prefetchd_warm_queue_depth", "Items waiting for the warm worker",
                           registry=r)
        self.node_ratio = Gauge("prefetchd_node_cache_hit_ratio",
                                "Node-wide cache hit ratio since the cache was created",
                                registry=r)
        self.used = Gauge("prefetchd_node_cache_used_bytes", "Node cache bytes used",
                          registry=r)
        self.limit = Gauge("prefetchd_node_cache_limit_bytes", "Node cache size limit",
                           registry=r)
        self.counter = Gauge("prefetchd_node_cache_counter",
                             "fusecache node-wide counters (all mounts on the node)", ["name"],
                             registry=r)
        self.mount_ratio = Gauge("prefetchd_mount_cache_hit_ratio",
                                 "Cache hit ratio seen by this node's mounts of a dataset "
                                 "(fusecache counters per mount source)", ["dataset"],
                                 registry=r)
        self.step_mount_ratio = Gauge(
            "prefetchd_step_mount_cache_hit_ratio",
            "Cache hit ratio of the mounts of the step's datasets while the step ran "
            "(steps on this node)", step, registry=r)
        self.job_lead = Gauge("prefetchd_job_warm_lead_seconds",
                              "Job admission (or first pod start) minus the last warm of its "
                              "data on this node finishing (negative: warm was late)", ["job"],
                              registry=r)
        self.job_ratio = Gauge("prefetchd_job_warm_at_admission_ratio",
                               "Fraction of the queued job's datasets chosen for this node that "
                               "were warm here at admission", ["job"], registry=r)
        # job -> {"requested": set, "warm": {dataset: finished}, "admitted": t, "lead_set"}
        self._jobs: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._scoped: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()
        # (workflow, step) -> {"warm_done", "started", "start_counters", "ratio_done", ...}
        self._steps: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._counters: dict[str, int] = {}

    def _scoped_delta(self, st: dict[str, Any]) -> dict[str, int]:
        """Counter growth, over the step, of the mounts that show its datasets."""
        start = st.get("start_scoped") or {}
        total: dict[str, int] = {}
        for scope, now in self._scoped.items():
            if not any(_covers(scope, d) for d in st.get("datasets", ())):
                continue
            for k, v in now.items():
                total[k] = total.get(k, 0) + v - start.get(scope, {}).get(k, 0)
        return total

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:  # noqa: S104 - a pod's port
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server

    # ------------------------------------------------------------ bookkeeping

    def _step(self, workflow: str, step: str) -> dict[str, Any]:
        key = (workflow, step)
        st = self._steps.get(key)
        if st is None:
            st = self._steps[key] = {}
        self._steps.move_to_end(key)
        while len(self._steps) > self.max_steps:
            (wf, sid), _ = self._steps.popitem(last=False)
            for g in (self.lead, self.warmed, self.transferred, self.step_ratio):
                try:
                    g.remove(wf, sid)
                except KeyError:
                    pass
        return st

    def _maybe_lead(self, workflow: str, step: str, st: dict[str, Any]) -> None:
        if "warm_done" in st and "started" in st and "lead_set" not in st:
            st["lead_set"] = True
            lead = st["started"] - st["warm_done"]
            self.lead.labels(workflow, step).set(lead)
            log.info("%s step %s: warm %s %.1fs %s the step started", workflow, step,
                     "finished" if lead >= 0 else "was", abs(lead),
                     "before" if lead >= 0 else "late:")

    # ------------------------------------------------------------ from the worker

    def queue_depth(self, n: int) -> None:
        self.depth.set(n)

    def warm_skipped(self, req: Any) -> None:
        self.warms.labels("already_warm").inc()

    def warm_failed(self, req: Any) -> None:
        self.warms.labels("failed").inc()

    def warm_done(self, req: Any, res: Any, started: float, finished: float) -> None:
        # (a warm the cache had no room for all of was counted done: blind agent round 2)
        self.warms.labels("failed_objects" if res.failed else
                          "no_room" if res.skipped else "done").inc()
        self.warm_seconds.observe(finished - started)
        if not req.source.startswith("workflow "):
            return
        wf = _workflow(req.source)
        with self._lock:
            st = self._step(wf, req.step)
            st["warm_done"] = finished
            st.setdefault("datasets", set()).add(req.dataset)
            self.warmed.labels(wf, req.step).inc(res.bytes - res.skipped_bytes)
            self.transferred.labels(wf, req.step).inc(res.transferred)
            self._maybe_lead(wf, req.step, st)

    def mount_stats(self, scoped: dict[str, dict[str, int]]) -> None:
        """Per-mount-source counters from the node cache (``NodeCache.scoped_counters``)."""
        for scope, counters in list(scoped.items())[:MAX_SCOPES]:
            ratio = hit_ratio(counters)
            if ratio is not None:
                self.mount_ratio.labels(scope).set(ratio)
        with self._lock:
            self._scoped = {k: dict(v) for k, v in list(scoped.items())[:MAX_SCOPES]}

    def node_stats(self, stats: Any) -> None:
        self.used.set(stats.used_bytes)
        self.limit.set(stats.limit_bytes)
        for name, value in stats.counters.items():
            self.counter.labels(name).set(value)
        ratio = hit_ratio(stats.counters)
        if ratio is not None:
            self.node_ratio.set(ratio)
        with self._lock:
            self._counters = dict(stats.counters)

    # ------------------------------------------------------------ jobs (workload_watch)

    def _job(self, job: str) -> dict[str, Any]:
        st = self._jobs.get(job)
        if st is None:
            st = self._jobs[job] = {"requested": set(), "warm": {}}
        self._jobs.move_to_end(job)
        while len(self._jobs) > self.max_steps:
            old, _ = self._jobs.popitem(last=False)
            for g in (self.job_lead, self.job_ratio):
                try:
                    g.remove(old)
                except KeyError:
                    pass
        return st

    def job_requested(self, job: str, dataset: str) -> None:
        """This node was chosen to warm ``dataset`` for ``job``."""
        with self._lock:
            self._job(job)["requested"].add(dataset)

    def job_warmed(self, job: str, dataset: str, finished: float) -> None:
        """A warm of ``dataset`` for ``job`` is done (worker thread)."""
        with self._lock:
            st = self._job(job)
            st["warm"].setdefault(dataset, finished)
            self._job_lead(job, st)

    def job_admitted(self, job: str, at: float, was_queued: bool) -> None:
        """The job was admitted (or, never queued, its first pod runs) at ``at``; once."""
        with self._lock:
            st = self._job(job)
            if "admitted" in st:
                return
            st["admitted"] = at
            if was_queued and st["requested"]:
                warm = sum(1 for d in st["requested"] if d in st["warm"])
                self.job_ratio.labels(job).set(warm / len(st["requested"]))
            self._job_lead(job, st)

    def _job_lead(self, job: str, st: dict[str, Any]) -> None:
        if "admitted" not in st or st.get("lead_set") or not st["requested"]:
            return
        if any(d not in st["warm"] for d in st["requested"]):
            return
        st["lead_set"] = True
        lead = st["admitted"] - max(st["warm"][d] for d in st["requested"])
        self.job_lead.labels(job).set(lead)
        log.info("%s: its data was warm here %.1fs %s", job, abs(lead),
                 "before admission" if lead >= 0 else "after admission (late)")

    # ------------------------------------------------------------ from the watchers

    def observe_workflow(self, source: str, obj: dict[str, Any]) -> None:
        """Step start/finish times from ``status.nodes`` (watcher thread)."""
        wf = _workflow(source)
        nodes = ((obj.get("status") or {}).get("nodes") or {}).values()
        name = str((obj.get("metadata") or {}).get("name") or "")
        by_step: dict[str, list[dict[str, Any]]] = {}
        with self._lock:
            for n in nodes:
                if n.get("displayName"):
                    # a step sharing its task name with another has its path as its id
                    # (prefetchd.pipeline._model.name_shared_steps): the one warmed for
                    path = _node_path(str(n.get("name") or ""), name)
                    key = path if path and (wf, path) in self._steps else n["displayName"]
                    by_step.setdefault(key, []).append(n)
            for step, entries in by_step.items():
                known = (wf, step) in self._steps
                starts = [t for t in (_parse_time(e.get("startedAt")) for e in entries) if t]
                here = any(e.get("hostNodeName") == self.node_name for e in entries)
                if not starts or not (known or here):
                    continue  # only steps we warmed for, or that ran on this node
                st = self._step(wf, step)
                if "started" not in st:
                    st["started"] = min(starts)
                    if here:
                        st["start_counters"] = dict(self._counters)
                        st["start_scoped"] = {k: dict(v) for k, v in self._scoped.items()}
                    self._maybe_lead(wf, step, st)
                finished = all(e.get("finishedAt") for e in entries)
                if here and finished and "start_counters" in st and "ratio_set" not in st:
                    delta = {k: v - st["start_counters"].get(k, 0)
                             for k, v in self._counters.items()}
                    ratio = hit_ratio(delta)
                    if ratio is not None:
                        st["ratio_set"] = True
                        self.step_ratio.labels(wf, step).set(ratio)
                    mount_ratio = hit_ratio(self._scoped_delta(st))
                    if mount_ratio is not None:
                        self.step_mount_ratio.labels(wf, step).set(mount_ratio)
