"""Watching Kubernetes resources the way kopf does: list, then watch from the list's version.

Who calls this: :mod:`prefetchd.k8s.agent` runs one :class:`Watcher` per resource (workflows,
workflow templates, pending pods, nodes, PVCs, PVs), each in its own thread, and hands every
change to a handler. Tests run it against the fake API server of tests/k8s/fake_apiserver.py.

Data flow, in three layers (as kopf's ``watching.py``):

* :func:`watch_once` makes one ``watch=true`` request from a resourceVersion and yields raw
  events until the server ends the stream (``timeoutSeconds``). An ERROR event with code 410
  raises :class:`ResourceGone`; any other ERROR raises :class:`ApiFailure`.
* :func:`continuous_watch` lists (paginated: at most ``page_size`` objects in memory), yields
  the listing as ``RELIST_BEGIN`` / ``LISTED`` ... / ``RELIST_END``, then watches from the
  list's resourceVersion, updating a :class:`Position` on every event (BOOKMARKs included) and
  re-watching from it when a stream ends. It returns on 410 Gone, clearing the position.
* :func:`infinite_watch` repeats :func:`continuous_watch` until stopped, backing off
  (exponential, jittered, capped; reset once a listing succeeds) after API errors (403, 500,
  ...) and dropped connections, with one clear log line each. Unlike kopf, it resumes from the
  last position after a dropped connection or a server restart (listing thousands of
  workflows again is the expensive part); only 410 Gone, or an error before the first
  listing, makes it list again. ``_iterations`` is the test seam bounding the cycles.

:class:`Watcher` sits on top and turns the stream into handler calls exactly once per object
version: an LRU cache keyed by uid remembers the last resourceVersion handed on (and the
object's namespace/name only, never the object, so memory stays bounded with thousands of
workflows). A re-list after 410 or a restart re-delivers only objects whose resourceVersion
changed, and synthesises DELETED for remembered objects the new listing lacks (deleted while
the watch was down). Unknown event types are logged and skipped. Handler exceptions are
logged and never stop the watch; handlers must still be idempotent, because an object evicted
from the cache (more than ``cache_size`` live objects) is handed on again after a re-list.
``on_listed`` (optional) is called once each complete listing has been handed on: the agent
uses the first one to reconcile pins recorded before a restart with what still exists.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import urllib3

from prefetchd.k8s import rest

log = logging.getLogger(__name__)

RawEvent = dict[str, Any]
Handler = Callable[[str, dict[str, Any]], None]

# Synthetic event types produced by continuous_watch around a listing.
RELIST_BEGIN, LISTED, RELIST_END = "RELIST_BEGIN", "LISTED", "RELIST_END"
_OBJECT_EVENTS = ("ADDED", "MODIFIED", "DELETED")


@dataclass(frozen=True)
class Resource:
    """A resource collection: enough to build its list/watch URL."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


WORKFLOWS = Resource("argoproj.io", "v1alpha1", "workflows")
WORKFLOW_TEMPLATES = Resource("argoproj.io", "v1alpha1", "workflowtemplates")
CLUSTER_WORKFLOW_TEMPLATES = Resource(
    "argoproj.io", "v1alpha1", "clusterworkflowtemplates", namespaced=False
)
PODS = Resource("", "v1", "pods")
PVCS = Resource("", "v1", "persistentvolumeclaims")
PVS = Resource("", "v1", "persistentvolumes", namespaced=False)
NODES = Resource("", "v1", "nodes", namespaced=False)


class WatchError(Exception):
    """Base of the failures infinite_watch recovers from."""


class ResourceGone(WatchError):
    """410 Gone: the resourceVersion we watch from is too old; list again."""


class ApiFailure(WatchError):
    """The API server answered with an error status (403, 500, ...)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"HTTP {code}: {message}")
        self.code = code


@dataclass(frozen=True)
class WatchOptions:
    """What to watch and how patiently."""

    namespace: str | None = None  # None: all namespaces
    label_selector: str = ""
    field_selector: str = ""
    # Server-side end of each watch request; re-watching from the last version is cheap, and a
    # bounded request also bounds how long a silently dead connection can hold us.
    timeout_seconds: int = 300
    # Objects per list page: bounds memory while listing thousands of workflows.
    page_size: int = 500
    # First retry after an error, then doubling up to the cap (kopf uses similar values).
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    # Remembered (uid -> resourceVersion) entries; ~200 bytes each.
    cache_size: int = 50_000
    bookmarks: bool = True


class Transport(Protocol):
    """The two API calls the watcher needs (a seam; the real one wraps the kubernetes client)."""

    def list_pages(
        self, resource: Resource, options: WatchOptions
    ) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """Yield (list resourceVersion, items) per page."""

    def watch(
        self, resource: Resource, options: WatchOptions, resource_version: str,
        stop: threading.Event,
    ) -> Iterator[RawEvent]:
        """Yield raw watch events of one request; end early once ``stop`` is set."""

    def abort(self) -> None:
        """Cut open streams so a blocked reader returns (used by stop)."""


class ClientTransport:
    """Transport over a configured ``kubernetes.client.ApiClient`` (auth, TLS, proxies).

    Goes through :func:`prefetchd.k8s.rest.request` (raw JSON, not the generated models: one
    code path for core and custom resources, and no model objects for big workflows); a watch
    streams the response, read line by line.
    """

    # Connect timeout, and how much longer than timeoutSeconds a read may stall before we
    # treat the connection as dead.
    CONNECT_TIMEOUT = 10.0
    READ_GRACE = 30.0
    MAX_LINE = 16 * 1024 * 1024  # objects are at most ~1.5 MiB in etcd

    def __init__(self, api_client: Any) -> None:
        self.api = api_client
        self._open: set[Any] = set()
        self._lock = threading.Lock()

    def _request(self, path: str, query: list[tuple[str, str]], read_timeout: float,
                 stream: bool = False) -> rest.Reply:
        reply = rest.request(self.api, "GET", path, query=query, stream=stream,
                             timeout=(self.CONNECT_TIMEOUT, read_timeout))
        if not reply.ok:
            raise ApiFailure(reply.status, reply.message())
        return reply

    def list_pages(
        self, resource: Resource, options: WatchOptions
    ) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        token = ""
        while True:
            query = _selectors(options) + [("limit", str(options.page_size))]
            if token:
                query.append(("continue", token))
            doc = self._request(resource.path(options.namespace), query, 60.0).json()
            meta = doc.get("metadata") or {}
            yield str(meta.get("resourceVersion", "")), with_kind(doc)
            token = meta.get("continue") or ""
            if not token:
                return

    def watch(
        self, resource: Resource, options: WatchOptions, resource_version: str,
        stop: threading.Event,
    ) -> Iterator[RawEvent]:
        query = _selectors(options) + [
            ("watch", "true"), ("resourceVersion", resource_version),
            ("timeoutSeconds", str(options.timeout_seconds)),
        ]
        if options.bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        resp = self._request(resource.path(options.namespace), query,
                             options.timeout_seconds + self.READ_GRACE, stream=True).response
        with self._lock:
            self._open.add(resp)
        try:
            # stop() sets the event before abort(): either abort() saw this response, or we
            # see the event here. Without this check a stop racing the request would hang.
            if stop.is_set():
                return
            buf = bytearray()
            for chunk in resp.stream(amt=None, decode_content=True):
                buf.extend(chunk)
                if len(buf) > self.MAX_LINE:
                    raise ApiFailure(0, f"watch line longer than {self.MAX_LINE} bytes")
                while (nl := buf.find(b"\n")) >= 0:
                    line, buf = bytes(buf[:nl]), buf[nl + 1:]
                    if line.strip():
                        yield json.loads(line)
        finally:
            with self._lock:
                self._open.discard(resp)
            resp.release_conn()

    def abort(self) -> None:
        with self._lock:
            responses = list(self._open)
        for resp in responses:
            sock = getattr(getattr(resp, "connection", None), "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def with_kind(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The items of a list reply, each with its ``kind`` and ``apiVersion``: the API server
    leaves them out of the items of a built-in type's list (a JobList's Jobs), where a watch
    event's object and a custom resource's list items carry them. Without them the agent
    read no Job or CronJob it listed at start, or after a 410, and released the pins of live
    ones (a blind test of the agent on a real control plane; the fake API had stripped them
    for the core group only)."""
    items = [i for i in doc.get("items") or [] if isinstance(i, dict)]
    kind = str(doc.get("kind") or "")
    if kind.endswith("List") and len(kind) > 4:
        for item in items:
            item.setdefault("kind", kind[:-4])
            if doc.get("apiVersion"):
                item.setdefault("apiVersion", doc["apiVersion"])
    return items


def _selectors(options: WatchOptions) -> list[tuple[str, str]]:
    query = []
    if options.label_selector:
        query.append(("labelSelector", options.label_selector))
    if options.field_selector:
        query.append(("fieldSelector", options.field_selector))
    return query


# ---------------------------------------------------------------- the three loops


def watch_once(
    transport: Transport, resource: Resource, options: WatchOptions, resource_version: str,
    stop: threading.Event,
) -> Iterator[RawEvent]:
    """One watch request; ERROR events become exceptions (410 -> ResourceGone)."""
    for event in transport.watch(resource, options, resource_version, stop):
        if event.get("type") == "ERROR":
            status = event.get("object") or {}
            code, message = int(status.get("code") or 0), status.get("message", "")
            if code == 410:
                raise ResourceGone(message)
            raise ApiFailure(code, message)
        yield event


@dataclass
class Position:
    """Where a watch stands: the last resourceVersion seen ("" means: list first)."""

    version: str = ""


def continuous_watch(
    transport: Transport, resource: Resource, options: WatchOptions, stop: threading.Event,
    position: Position | None = None,
) -> Iterator[RawEvent]:
    """List (unless ``position`` says where to resume), then watch until 410 Gone or stop.

    ``position`` is updated on every event, so a caller that comes back after a dropped
    connection resumes from the last version instead of listing everything again.
    """
    position = position if position is not None else Position()
    if not position.version:
        yield {"type": RELIST_BEGIN}
        version = ""
        for page_version, items in transport.list_pages(resource, options):
            version = version or page_version  # every page of one listing shares the snapshot
            for item in items:
                yield {"type": LISTED, "object": item}
        position.version = version
        yield {"type": RELIST_END, "resourceVersion": version}
    while not stop.is_set():
        try:
            for event in watch_once(transport, resource, options, position.version, stop):
                rv = ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion")
                if rv:
                    position.version = rv
                yield event
                if stop.is_set():
                    return
        except ResourceGone as exc:
            log.info("watch of %s: resourceVersion %s is gone (%s); listing again",
                     resource, position.version, exc)
            position.version = ""
            return


@dataclass
class _Counters:
    lists: int = 0
    relists_after_gone: int = 0
    watch_requests: int = 0
    errors: int = 0
    events: int = 0
    handled: int = 0
    duplicates_skipped: int = 0
    unknown_skipped: int = 0


@dataclass(frozen=True)
class WatchStatistics:
    """A snapshot of a watcher's counters (what tests and metrics look at)."""

    lists: int
    relists_after_gone: int
    errors: int
    events: int
    handled: int
    duplicates_skipped: int
    unknown_skipped: int
    cached_objects: int


def infinite_watch(
    transport: Transport, resource: Resource, options: WatchOptions, stop: threading.Event,
    *, _iterations: int | None = None, _counters: _Counters | None = None,
) -> Iterator[RawEvent]:
    """Repeat continuous_watch until ``stop``; back off after errors and dropped connections."""
    counters = _counters or _Counters()
    position = Position()
    failures = 0
    cycle = 0
    absent_said = False
    while not stop.is_set() and (_iterations is None or cycle < _iterations):
        cycle += 1
        try:
            for event in continuous_watch(transport, resource, options, stop, position):
                if event["type"] == RELIST_END:
                    counters.lists += 1
                    failures = 0  # the API works again
                yield event
            if not stop.is_set():
                counters.relists_after_gone += 1
            continue
        except ApiFailure as exc:
            what = f"API error {exc}"
            absent = exc.code == 404
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            # ValueError: a truncated or garbled JSON line from a dying connection.
            what = f"connection problem {type(exc).__name__}: {exc}"
            absent = False
        if stop.is_set():
            return
        counters.errors += 1
        delay = min(options.backoff_max, options.backoff_initial * 2 ** min(failures, 30))
        delay *= random.uniform(0.5, 1.0)  # jitter: agents on all nodes must not stampede
        failures += 1
        what = " ".join(what.split())  # (one line: the API server's 404 body ends in one)
        if absent:
            # a kind the cluster does not serve (Argo not installed): said once, as the other
            # optional kinds are, not a warning every backoff (a blind first-hour test: 18
            # warnings in 90 s, each broken over two lines)
            log.log(logging.DEBUG if absent_said else logging.INFO,
                    "%s: not served by the API server (%s; its CRD not installed?): "
                    "watched once it is", resource, what)
            absent_said = True
        else:
            log.warning("watch of %s: %s; retrying in %.1fs (attempt %d)",
                        resource, what, delay, failures)
        event = None  # the last one is not kept through the backoff (up to an etcd object)
        stop.wait(delay)


# ---------------------------------------------------------------- dedupe and dispatch


@dataclass
class _Seen:
    resource_version: str
    namespace: str
    name: str


class SeenCache:
    """uid -> last handed-on resourceVersion, LRU-bounded (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, _Seen] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries

    def unchanged(self, uid: str, resource_version: str) -> bool:
        seen = self._entries.get(uid)
        return seen is not None and seen.resource_version == resource_version

    def remember(self, uid: str, resource_version: str, namespace: str, name: str) -> None:
        self._entries[uid] = _Seen(resource_version, namespace, name)
        self._entries.move_to_end(uid)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def forget(self, uid: str) -> _Seen | None:
        return self._entries.pop(uid, None)

    def uids(self) -> list[str]:
        return list(self._entries)


class Watcher:
    """Runs infinite_watch for one resource and calls ``handler(type, obj)`` once per version.

    ``run()`` blocks (call it in a thread); ``stop()`` from any thread ends it promptly.
    """

    def __init__(
        self, transport: Transport, resource: Resource, handler: Handler,
        options: WatchOptions | None = None, on_listed: Callable[[], None] | None = None,
    ) -> None:
        self.transport, self.resource, self.handler = transport, resource, handler
        self.on_listed = on_listed  # called after each complete listing has been handed on
        self.options = options or WatchOptions()
        self.seen = SeenCache(self.options.cache_size)
        self._stop = threading.Event()
        self._counters = _Counters()
        self._listed: set[str] | None = None
        self._unknown_logged: set[str] = set()

    def stop(self) -> None:
        self._stop.set()
        self.transport.abort()

    def statistics(self) -> WatchStatistics:
        c = self._counters
        return WatchStatistics(c.lists, c.relists_after_gone, c.errors, c.events, c.handled,
                               c.duplicates_skipped, c.unknown_skipped, len(self.seen))

    def run(self, *, _iterations: int | None = None) -> None:
        for event in infinite_watch(self.transport, self.resource, self.options, self._stop,
                                    _iterations=_iterations, _counters=self._counters):
            self.dispatch(event)

    def dispatch(self, event: RawEvent) -> None:
        """Turn one raw or synthetic event into handler calls (several only on RELIST_END)."""
        etype = event.get("type")
        if etype == RELIST_BEGIN:
            self._listed = set()
            return
        if etype == RELIST_END:
            listed, self._listed = self._listed or set(), None
            for uid in self.seen.uids():
                if uid not in listed:
                    gone = self.seen.forget(uid)
                    assert gone is not None
                    self._call("DELETED", {"metadata": {
                        "uid": uid, "namespace": gone.namespace, "name": gone.name,
                        "resourceVersion": gone.resource_version}})
            if self.on_listed is not None:
                try:
                    self.on_listed()
                except Exception:
                    log.exception("after listing %s: hook failed; the watch goes on",
                                  self.resource)
            return
        if etype == "BOOKMARK":
            return
        if etype not in (LISTED, *_OBJECT_EVENTS):
            self._counters.unknown_skipped += 1
            if etype not in self._unknown_logged and len(self._unknown_logged) < 100:
                self._unknown_logged.add(str(etype))
                log.warning("watch of %s: skipping unknown event type %r", self.resource, etype)
            return
        self._counters.events += 1
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        uid, rv = meta.get("uid") or "", meta.get("resourceVersion") or ""
        if etype == LISTED:
            self._listed = self._listed if self._listed is not None else set()
            self._listed.add(uid)
        if etype == "DELETED":
            self.seen.forget(uid)
            self._call("DELETED", obj)
            return
        if uid and self.seen.unchanged(uid, rv):
            self._counters.duplicates_skipped += 1
            return
        if etype == LISTED:
            etype = "MODIFIED" if uid in self.seen else "ADDED"
        self.seen.remember(uid, rv, meta.get("namespace") or "", meta.get("name") or "")
        self._call(etype, obj)

    def _call(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        try:
            self.handler(etype, obj)
            self._counters.handled += 1
        except Exception:
            log.exception("handler for %s %s/%s failed; the watch goes on",
                          self.resource, meta.get("namespace"), meta.get("name"))


@dataclass
class WatchGroup:
    """Several watchers in threads, stopped and joined together (what the agent runs)."""

    watchers: list[Watcher] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> WatchGroup:
        for w in self.watchers:
            t = threading.Thread(target=w.run, name=f"watch-{w.resource}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        for w in self.watchers:
            w.stop()
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()
