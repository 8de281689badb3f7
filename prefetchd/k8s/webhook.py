"""``prefetchd webhook``: a mutating admission webhook that steers pods toward their data.

Who calls this: the API server, for Pod CREATE in the namespaces the
MutatingWebhookConfiguration selects (manifests/prefetchd/base/webhook.yaml), over HTTPS.

For each pod: find its datasets (:mod:`prefetchd.k8s.datasets`), choose the nodes the agents
warm for each (:func:`prefetchd.k8s.placement.choose`, the same ranking the agents compute,
restricted to nodes the pod can run on), and answer with a JSONPatch that *appends*
``preferredDuringSchedulingIgnoredDuringExecution`` node-affinity terms:

* weight 80: ``kubernetes.io/hostname In [chosen nodes]`` (hostname label values read from
  the Node objects); for a pod of a training job prefetchd reads (PyTorchJob, TrainJob, Job,
  Trial, ...), the one warm node :mod:`prefetchd.k8s.job_steering` picks for it, distinct
  from its siblings' (a job with W workers is warmed on W nodes);
* weight 20: ``holds.fusecache.io/bNN Exists``: nodes that already hold data hashing to the
  dataset's bucket (bounded labels, see placement).

Invariants: the answer is always ``allowed: true`` (a webhook must never block pod creation;
failurePolicy is Ignore as well); existing affinity is never replaced, only appended to;
nothing is ever *required*, so a full node only makes the preference moot; a pod already
steered (annotation ``fusecache.io/preferred-nodes``, e.g. on reinvocation) is left alone.
Failures are logged (never with request bodies, which may hold secrets in env) and answered
with an unpatched allow.

The TLS certificate is re-read when its file changes (cert-manager rotates it in place).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prefetchd.k8s import datasets as ds_mod
from prefetchd.k8s import job_steering, placement

log = logging.getLogger(__name__)

STEERED_ANNOTATION = "fusecache.io/preferred-nodes"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CHOSEN_WEIGHT = 80
HOLDS_WEIGHT = 20
MAX_BODY = 4 * 1024 * 1024  # AdmissionReviews of pods are far smaller; refuse absurd bodies
# Connections served at once (a thread and up to MAX_BODY each); one past it is closed at
# once. The API server sends a handful at a time; a flood of idle connections must not
# grow threads and memory without bound (each waits at most its 10 s socket timeout).
MAX_CONNECTIONS = 64
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class WebhookConfig:
    """What the webhook needs besides the cluster view."""

    replicas: int = 1  # must equal the agents' --replicas, or webhook and agents disagree
    driver: str = ds_mod.DRIVER_NAME
    # The agents' --group-striping: every dataset is spread over the cache group, no node
    # holds one whole, so pods are not steered at all (any node reads from the group).
    striping: bool = False


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def affinity_terms(
    pod: Mapping[str, Any], view: ds_mod.ClusterView, config: WebhookConfig
) -> tuple[list[dict[str, Any]], list[str]]:
    """The preferred terms to add and the chosen node names (both empty: nothing to do)."""
    if config.striping:
        return [], []
    datasets = ds_mod.pod_datasets(pod, view, config.driver)
    job = job_steering.job_targets(pod, view)  # a pod of a training job prefetchd reads
    if job is not None:  # and what its group reads without naming it (MPI, Ray workers)
        datasets += [d for d in job.datasets() if d not in datasets]
    if not datasets:
        return [], []
    nodes = view.nodes()
    hostnames = {n.name: n.labels.get(HOSTNAME_LABEL, n.name) for n in nodes}
    spec = pod.get("spec") or {}
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    requirements = placement.PodRequirements.from_pod_spec(spec).pinned(
        ds_mod.spec_pins(view, namespace, spec))
    terms: list[dict[str, Any]] = []
    chosen_all: list[str] = []
    holds: list[str] = []
    for dataset in datasets:
        chosen = job_steering.job_node(pod, dataset, nodes, requirements, config.replicas,
                                       view, job) if job else None  # a job's worker: its own
        if chosen is None:
            chosen = placement.choose(dataset, nodes, requirements, config.replicas)
        if chosen:
            values = sorted({hostnames[c] for c in chosen})
            term = {"weight": CHOSEN_WEIGHT, "preference": {"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "In", "values": values}]}}
            if term not in terms:
                terms.append(term)
            chosen_all += [c for c in chosen if c not in chosen_all]
        label = placement.holds_label(dataset)
        if label not in holds:
            holds.append(label)
    terms += [{"weight": HOLDS_WEIGHT, "preference": {"matchExpressions": [
        {"key": label, "operator": "Exists"}]}} for label in holds]
    return terms, chosen_all


def pod_patch(pod: Mapping[str, Any], terms: list[dict[str, Any]], chosen: list[str]) -> list[dict]:
    """JSONPatch ops that append ``terms`` without touching any existing affinity."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity")
    ops: list[dict[str, Any]] = []
    if not affinity:
        ops.append({"op": "add", "path": "/spec/affinity",
                    "value": {"nodeAffinity": {PREFERRED: terms}}})
    elif not affinity.get("nodeAffinity"):
        ops.append({"op": "add", "path": "/spec/affinity/nodeAffinity",
                    "value": {PREFERRED: terms}})
    elif not affinity["nodeAffinity"].get(PREFERRED):
        ops.append({"op": "add", "path": f"/spec/affinity/nodeAffinity/{PREFERRED}",
                    "value": terms})
    else:
        ops += [{"op": "add", "path": f"/spec/affinity/nodeAffinity/{PREFERRED}/-",
                 "value": t} for t in terms]
    annotations = (pod.get("metadata") or {}).get("annotations")
    value = ",".join(chosen)
    if annotations is None:
        ops.append({"op": "add", "path": "/metadata/annotations",
                    "value": {STEERED_ANNOTATION: value}})
    else:
        ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(STEERED_ANNOTATION)}",
                    "value": value})
    return ops


def review(body: Any, view: ds_mod.ClusterView, config: WebhookConfig) -> dict[str, Any]:
    """Answer one AdmissionReview (v1) dict; always allowed, patched when there is data."""
    request = body.get("request") if isinstance(body, dict) else None
    uid = (request or {}).get("uid", "")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    out = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    if not request:
        log.warning("webhook: AdmissionReview without a request; allowing")
        return out
    try:
        pod = request.get("object") or {}
        kind = (request.get("kind") or {}).get("kind")
        if kind != "Pod" or request.get("operation") != "CREATE":
            return out
        meta = pod.get("metadata") or {}
        if STEERED_ANNOTATION in (meta.get("annotations") or {}):
            return out
        terms, chosen = affinity_terms(pod, view, config)
        if not terms:
            return out
        ops = pod_patch(pod, terms, chosen)
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        log.info("webhook: pod %s/%s prefers %s", request.get("namespace"),
                 meta.get("name") or meta.get("generateName"), ",".join(chosen) or "(holders)")
    except Exception as exc:  # never block pod creation
        log.warning("webhook: could not steer pod %s/%s (%s: %s); allowing unchanged",
                    request.get("namespace"), request.get("name"), type(exc).__name__, exc)
    return out


class _ReloadingContext:
    """An SSLContext that reloads cert and key when the certificate file changes."""

    def __init__(self, certfile: str, keyfile: str) -> None:
        self.certfile, self.keyfile = certfile, keyfile
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._mtime = 0.0
        self._lock = threading.Lock()
        self.maybe_reload()

    def maybe_reload(self) -> None:
        try:
            mtime = os.stat(self.certfile).st_mtime
        except OSError as exc:
            log.warning("webhook: cannot stat certificate %s: %s", self.certfile, exc)
            return
        with self._lock:
            if mtime != self._mtime:
                self.context.load_cert_chain(self.certfile, self.keyfile)
                if self._mtime:
                    log.info("webhook: reloaded certificate %s", self.certfile)
                self._mtime = mtime


class WebhookServer:
    """HTTPS server: POST /mutate (AdmissionReview), GET /healthz. ``stop()`` joins threads."""

    def __init__(
        self, view: ds_mod.ClusterView, config: WebhookConfig, certfile: str, keyfile: str,
        host: str = "0.0.0.0", port: int = 8443,
    ) -> None:
        self.view, self.config = view, config
        self.tls = _ReloadingContext(certfile, keyfile)
        outer = self
        slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        refused = [0.0]  # when the last refusal was logged: one line a minute in a flood

        class Httpd(ThreadingHTTPServer):
            daemon_threads = True  # a stuck client must not block shutdown
            allow_reuse_address = True

            def process_request(self, request: Any, client_address: Any) -> None:
                if not slots.acquire(blocking=False):
                    if time.monotonic() - refused[0] > 60:
                        refused[0] = time.monotonic()
                        log.warning("webhook: %d connections open; closing new ones (this "
                                    "one from %s)", MAX_CONNECTIONS, client_address[0])
                    self.shutdown_request(request)
                    return
                try:
                    super().process_request(request, client_address)
                except BaseException:
                    slots.release()  # no thread started to release it
                    raise

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    slots.release()

            def get_request(self) -> Any:
                sock, addr = self.socket.accept()
                sock.settimeout(10.0)  # the API server gives up after timeoutSeconds anyway
                outer.tls.maybe_reload()
                return outer.tls.context.wrap_socket(sock, server_side=True,
                                                     do_handshake_on_connect=False), addr

            def handle_error(self, request: Any, client_address: Any) -> None:
                # Scanners and clients that reject our certificate end here; not our failure.
                log.debug("webhook: connection from %s failed", client_address, exc_info=True)

        handler = type("Handler", (_Handler,), {"server_ref": self})
        self.httpd = Httpd((host, port), handler)
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> WebhookServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.1}, name="webhook")
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread:
            self._thread.join()

    def __enter__(self) -> WebhookServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_ref: WebhookServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("webhook: " + format, *args)

    def setup(self) -> None:
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError) as exc:
            log.debug("webhook: TLS handshake failed: %s", exc)
            raise
        super().setup()

    def do_GET(self) -> None:
        if self.path.split("?")[0] in ("/healthz", "/readyz"):
            self._send(200, b"ok", "text/plain")
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.path.split("?")[0] != "/mutate" or not 0 < length <= MAX_BODY:
            self._send(400, b"bad request", "text/plain")
            return
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            log.warning("webhook: request body is not JSON")
            self._send(400, b"body is not JSON", "text/plain")
            return
        answer = review(body, self.server_ref.view, self.server_ref.config)
        self._send(200, json.dumps(answer).encode(), "application/json")

    def _send(self, code: int, data: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
