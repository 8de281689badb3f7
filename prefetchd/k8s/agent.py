"""``prefetchd run --kubernetes``: the node agent that warms upcoming steps' data.

Who calls this: prefetchd/cli.py (``add_arguments`` + ``run``), or tests via :class:`Agent`.

Data flow: :mod:`prefetchd.k8s.watch` watchers (workflows, workflow templates, cluster
workflow templates, pending pods, nodes) call the ``on_*`` handlers below from their threads;
handlers only compute and call the injected ``warm`` / ``release`` callbacks, so the real
warmer (prefetchd/warm.py, a later wiring) and test doubles plug in the same way.

* Workflow -> :func:`prefetchd.pipeline.analyze_documents` (with the WorkflowTemplates and
  ClusterWorkflowTemplates seen so far, so templateRefs resolve; KFP v2 runs are handled by
  the analysis, which reads their driver templates' JSON parameters). ``status.nodes`` gives
  each DAG task's phase by ``displayName`` (= step id): started steps are not warmed for;
  datasets whose every reading step has finished are released (eviction follows the DAG).
  Remaining datasets are warmed earliest stage first, on this node only if
  :func:`prefetchd.k8s.placement.should_warm` says so (workflow-level nodeSelector, affinity
  and tolerations as the pod requirements: step-level ones are not in the plan yet).
* Pending pod -> :func:`prefetchd.k8s.datasets.pod_datasets` -> warm if this node is chosen.
* Node -> the NodeInfo table used for ranking.

Bounded memory: per workflow we keep only the set of datasets already requested (capped
LRU over workflows); templates are kept by name (capped). A workflow the analysis cannot
parse is logged once per (uid, resourceVersion) and skipped; it never stops a watch.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefetchd.k8s import datasets as ds_mod
from prefetchd.k8s import placement
from prefetchd.k8s import watch as kw

log = logging.getLogger(__name__)

STARTED_PHASES = ("Running", "Succeeded", "Failed", "Error", "Skipped", "Omitted")
FINISHED_PHASES = ("Succeeded", "Failed", "Error", "Skipped", "Omitted")
DONE_WORKFLOW_PHASES = ("Succeeded", "Failed", "Error")


@dataclass(frozen=True)
class WarmRequest:
    """One dataset to warm on this node, and why (for logs and metrics)."""

    dataset: str
    source: str  # "workflow ns/name" or "pod ns/name"
    step: str
    stage: int


WarmFn = Callable[[WarmRequest], None]
ReleaseFn = Callable[[str, str], None]  # (dataset, source)


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    replicas: int = 1
    namespace: str | None = None  # None: all namespaces
    max_workflows: int = 10_000  # workflows remembered at once (their requested datasets)
    max_templates: int = 2_000


class Agent:
    """The handlers; thread-safe (each watcher calls from its own thread)."""

    def __init__(
        self, config: AgentConfig, view: ds_mod.ClusterView, warm: WarmFn,
        release: ReleaseFn | None = None,
    ) -> None:
        self.config, self.view, self.warm = config, view, warm
        self.release = release or (lambda dataset, source: None)
        self._lock = threading.Lock()
        self._nodes: dict[str, placement.NodeInfo] = {}
        self._templates: OrderedDict[tuple[str, str, str], dict[str, Any]] = OrderedDict()
        self._requested: OrderedDict[str, set[str]] = OrderedDict()  # uid -> datasets
        self._bad: OrderedDict[tuple[str, str], None] = OrderedDict()

    # ------------------------------------------------------------ nodes and templates

    def on_node(self, etype: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        with self._lock:
            if etype == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = placement.NodeInfo.from_node(obj)

    def nodes(self) -> list[placement.NodeInfo]:
        with self._lock:
            return list(self._nodes.values())

    def on_template(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (obj.get("kind", ""), meta.get("namespace") or "", meta.get("name", ""))
        with self._lock:
            if etype == "DELETED":
                self._templates.pop(key, None)
                return
            self._templates[key] = obj
            self._templates.move_to_end(key)
            while len(self._templates) > self.config.max_templates:
                self._templates.popitem(last=False)

    # ------------------------------------------------------------ workflows

    def on_workflow(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        source = f"workflow {meta.get('namespace')}/{meta.get('name')}"
        phase = (obj.get("status") or {}).get("phase")
        if etype == "DELETED" or phase in DONE_WORKFLOW_PHASES:
            with self._lock:
                done = self._requested.pop(uid, set())
            for dataset in sorted(done):
                self.release(dataset, source)
            return
        plans = self._analyze(obj, uid, meta.get("resourceVersion", ""), source)
        if plans is None:
            return
        tasks = (obj.get("status") or {}).get("nodes") or {}
        phases = {n.get("displayName"): n.get("phase") for n in tasks.values()}
        spec = obj.get("spec") or {}
        pod = placement.PodRequirements.from_pod_spec(spec)  # workflow-level constraints
        nodes = self.nodes()
        readers: dict[str, list[tuple[int, str, bool, bool]]] = {}
        for plan in plans:
            for step in plan.steps:
                ph = phases.get(step.id)
                for read in step.reads:
                    if read.static and read.uri and read.uri.startswith("s3://"):
                        readers.setdefault(read.uri, []).append(
                            (step.stage, step.id, ph in STARTED_PHASES, ph in FINISHED_PHASES))
        with self._lock:
            requested = self._requested.setdefault(uid, set())
            self._requested.move_to_end(uid)
            while len(self._requested) > self.config.max_workflows:
                self._requested.popitem(last=False)
        todo: list[WarmRequest] = []
        for dataset, steps in readers.items():
            if all(finished for *_, finished in steps):
                if dataset in requested:
                    requested.discard(dataset)
                    self.release(dataset, source)
                continue
            pending = sorted((stage, sid) for stage, sid, started, _ in steps if not started)
            if not pending or dataset in requested:
                continue
            if placement.should_warm(self.config.node_name, dataset, nodes, pod,
                                     self.config.replicas):
                todo.append(WarmRequest(dataset, source, pending[0][1], pending[0][0]))
        for req in sorted(todo, key=lambda r: (r.stage, r.dataset)):  # earliest first
            requested.add(req.dataset)
            self.warm(req)

    def _analyze(self, obj: dict[str, Any], uid: str, rv: str, source: str) -> Any:
        from prefetchd import pipeline  # the analysis package (issue 3)

        with self._lock:
            templates = list(self._templates.values())
        try:
            return pipeline.analyze_documents([obj, *templates], source=source)
        except Exception as exc:  # PipelineError, or anything the analysis chokes on
            with self._lock:
                first = (uid, rv) not in self._bad
                self._bad[(uid, rv)] = None
                while len(self._bad) > 1000:
                    self._bad.popitem(last=False)
            if first:
                log.warning("%s: cannot analyse, skipped: %s", source, exc)
            return None

    # ------------------------------------------------------------ pending pods

    def on_pod(self, etype: str, obj: dict[str, Any]) -> None:
        if etype == "DELETED" or (obj.get("status") or {}).get("phase") != "Pending":
            return
        if (obj.get("spec") or {}).get("nodeName") not in (None, "", self.config.node_name):
            return  # already bound elsewhere
        meta = obj.get("metadata") or {}
        source = f"pod {meta.get('namespace')}/{meta.get('name')}"
        try:
            found = ds_mod.pod_datasets(obj, self.view)
        except Exception as exc:
            log.warning("%s: cannot resolve datasets: %s", source, exc)
            return
        pod = placement.PodRequirements.from_pod_spec(obj.get("spec") or {})
        bound_here = (obj.get("spec") or {}).get("nodeName") == self.config.node_name
        for dataset in found:
            if bound_here or placement.should_warm(
                    self.config.node_name, dataset, self.nodes(), pod, self.config.replicas):
                self.warm(WarmRequest(dataset, source, meta.get("name", ""), 0))


def build_watchers(
    make_transport: Callable[[], kw.Transport], agent: Agent, options: kw.WatchOptions
) -> kw.WatchGroup:
    """The agent's watchers, one transport each (stop() aborts only its own streams).

    Nodes and templates come first so that workflows listed at start resolve against them.
    """
    cluster = dataclasses.replace(options, namespace=None)
    pending = dataclasses.replace(options, field_selector="status.phase=Pending")
    return kw.WatchGroup([
        kw.Watcher(make_transport(), kw.NODES, agent.on_node, cluster),
        kw.Watcher(make_transport(), kw.CLUSTER_WORKFLOW_TEMPLATES, agent.on_template, cluster),
        kw.Watcher(make_transport(), kw.WORKFLOW_TEMPLATES, agent.on_template, options),
        kw.Watcher(make_transport(), kw.WORKFLOWS, agent.on_workflow, options),
        kw.Watcher(make_transport(), kw.PODS, agent.on_pod, pending),
    ])


def run_kubernetes(
    api_client: Any, config: AgentConfig, warm: WarmFn, release: ReleaseFn | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run the agent until ``stop`` is set (blocking)."""
    stop = stop or threading.Event()
    agent = Agent(config, ds_mod.ApiClusterView(api_client), warm, release)
    group = build_watchers(lambda: kw.ClientTransport(api_client), agent,
                           kw.WatchOptions(namespace=config.namespace)).start()
    log.info("prefetchd agent on node %s watching %s", config.node_name,
             config.namespace or "all namespaces")
    try:
        stop.wait()
    finally:
        group.stop()


# ---------------------------------------------------------------- CLI hooks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``prefetchd run --kubernetes`` (the CLI adds ``--kubernetes`` itself)."""
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", help="watch workflows and pods in this namespace only")
    scope.add_argument("--all-namespaces", action="store_true", help="watch all namespaces")
    parser.add_argument("--replicas", type=int, default=1,
                        help="nodes that warm each dataset (the webhook must use the same)")
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""),
                        help="this node (default: $NODE_NAME from the downward API)")


def load_api_client(kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    if kubeconfig:
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config()
        cfg = client.Configuration.get_default_copy()
    return client.ApiClient(cfg)


def run(args: argparse.Namespace, warm: WarmFn | None = None,
        release: ReleaseFn | None = None) -> int:
    """Entry point for ``prefetchd run --kubernetes``; SIGTERM/SIGINT stop it gracefully."""
    if not args.node_name:
        log.error("--node-name (or $NODE_NAME) is required")
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if warm is None:
        def warm(req: WarmRequest) -> None:
            log.info("would warm %s for %s (step %s); no warmer wired", req.dataset,
                     req.source, req.step)
    config = AgentConfig(node_name=args.node_name, replicas=args.replicas,
                         namespace=None if args.all_namespaces else args.namespace)
    with load_api_client(args.kubeconfig) as api_client:
        run_kubernetes(api_client, config, warm, release, stop)
    return 0


def add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``prefetchd webhook``."""
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-key-file", required=True)
    parser.add_argument("--replicas", type=int, default=1,
                        help="must equal the agents' --replicas")


def run_webhook(args: argparse.Namespace) -> int:
    """Entry point for ``prefetchd webhook``; SIGTERM stops it."""
    from prefetchd.k8s import webhook

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with load_api_client(args.kubeconfig) as api_client:
        view = ds_mod.ApiClusterView(api_client)
        with webhook.WebhookServer(view, webhook.WebhookConfig(replicas=args.replicas),
                                   args.tls_cert_file, args.tls_key_file, port=args.port):
            log.info("prefetchd webhook listening on :%d", args.port)
            stop.wait()
    return 0
