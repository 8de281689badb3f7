"""The cache group from Kubernetes: each agent publishes its peer endpoint on its Node; every
agent turns the annotated Nodes into ``<cache-dir>/group.json``.

Who calls this: :func:`prefetchd.k8s.agent.run` (with ``--peer-listen``) builds a
:class:`GroupMembership`, feeds it every Node event (the agent's Node watcher, through
``Agent.node_hooks``) and hands :meth:`GroupMembership.annotation` to the Node publisher
(:class:`prefetchd.k8s.worker.NodePublisher`), which merge-patches it onto this agent's Node.

Data flow: Node objects (``metadata.annotations[PEER_ANNOTATION]``, ``status.addresses``) ->
:func:`member_from_node` -> the member table (one entry per annotated Node; a Node without
the annotation, or with one that does not parse, is not a member; a deleted Node leaves) ->
when the table changes, :func:`fusecache.group.write_group` rewrites the group file
atomically, and mounts, the peer server and ``prefetchd warm`` re-read it
(:class:`fusecache.group.GroupWatcher`) without a restart. ``on_change`` callbacks (the
striping rebalance) run after each rewrite.

The annotation is JSON: ``{"endpoint": "10.0.3.7:7471", "weight": 200.0,
"buckets": [...], "datasets": [...]}``. ``weight`` is the node cache's size in GiB (block
ownership is proportional to it); ``buckets`` are the buckets this node's mounts and warms were
authorised for by S3 (what the peer server lets this node ask for); ``datasets`` the datasets it
holds warm (a hint). An endpoint given as ``:PORT`` takes its host from the Node's
``InternalIP`` address (``status.addresses``, as the kubelet reports it): the agent runs
with the host network, or advertises its pod IP (``--peer-advertise``, default ``$POD_IP``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fusecache.group import GROUP_FILE, Group, Member, TlsFiles, write_group

log = logging.getLogger(__name__)

PEER_ANNOTATION = "fusecache.io/peer"
MAX_LISTED = 64  # buckets / datasets named in one annotation (annotations are small)
MAX_BAD_LOGGED = 1_000  # (node, resourceVersion) pairs remembered to log a bad one once


def peer_annotation(endpoint: str, weight: float, buckets: Iterable[str] = (),
                    datasets: Iterable[str] = (), lane_port: int = 0) -> str:
    """The annotation value this node publishes (sorted, bounded, so it changes only
    when what it says changes). *lane_port*: its block lane's port, on the endpoint's host
    (0: none)."""
    return json.dumps({
        "endpoint": endpoint,
        "weight": round(float(weight), 3),
        "buckets": sorted(set(buckets))[:MAX_LISTED],
        "datasets": sorted(set(datasets))[:MAX_LISTED],
        **({"lane_port": int(lane_port)} if lane_port else {}),
    }, sort_keys=True, separators=(",", ":"))


def internal_ip(node: Mapping[str, Any]) -> str | None:
    """The Node's InternalIP from ``status.addresses`` (the kubelet's report), else None."""
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP" and addr.get("address"):
            return str(addr["address"])
    return None


def member_from_node(node: Mapping[str, Any]) -> Member | None:
    """The group member a Node publishes, None if it publishes none.

    Raises ValueError naming the bad field when the annotation is there but unusable.
    """
    meta = node.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(PEER_ANNOTATION)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ValueError(f"{PEER_ANNOTATION} is not JSON") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{PEER_ANNOTATION} must be a JSON object")
    endpoint = doc.get("endpoint")
    if not isinstance(endpoint, str) or ":" not in endpoint:
        raise ValueError(f"{PEER_ANNOTATION}: endpoint must be host:port or :port")
    host, _, port = endpoint.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{PEER_ANNOTATION}: endpoint port {port!r} is not a port")
    if not host:
        host = internal_ip(node) or ""
        if not host:
            raise ValueError(f"{PEER_ANNOTATION}: endpoint {endpoint!r} has no host and the "
                             "Node reports no InternalIP")
        endpoint = f"{host}:{port}"
    weight = doc.get("weight", 1.0)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
        raise ValueError(f"{PEER_ANNOTATION}: weight must be a positive number")
    lists = []
    for field_name in ("buckets", "datasets"):
        value = doc.get(field_name) or []
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise ValueError(f"{PEER_ANNOTATION}: {field_name} must be a list of strings")
        lists.append(tuple(value[:MAX_LISTED]))
    lane_port = doc.get("lane_port", 0)
    if not isinstance(lane_port, int) or isinstance(lane_port, bool) or \
            not 0 <= lane_port < 65536:
        raise ValueError(f"{PEER_ANNOTATION}: lane_port {lane_port!r} is not a port")
    return Member(meta.get("name", ""), endpoint, float(weight), lists[0], lists[1],
                  f"{host}:{lane_port}" if lane_port else "")


class GroupMembership:
    """The member table and the group file it writes; thread-safe (watcher threads call it)."""

    def __init__(self, node_name: str, cache_dir: str, replicas: int = 1,
                 striping: bool = False, tls: TlsFiles | None = None,
                 path: str | None = None) -> None:
        self.node_name, self.replicas, self.striping, self.tls = (
            node_name, replicas, striping, tls)
        self.path = Path(path) if path else Path(cache_dir) / GROUP_FILE
        self._lock = threading.Lock()
        self._members: dict[str, Member] = {}
        self._version = 0
        self._bad: dict[tuple[str, str], None] = {}
        self._written: Group | None = None
        self.on_change: list[Callable[[Group, Group | None], None]] = []

    def on_node(self, etype: str, obj: dict[str, Any]) -> None:
        """A Node event: add, update or drop its member, and rewrite the file if it changed."""
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        member: Member | None = None
        if etype != "DELETED":
            try:
                member = member_from_node(obj)
            except ValueError as e:
                key = (name, str(meta.get("resourceVersion", "")))
                if key not in self._bad:
                    if len(self._bad) >= MAX_BAD_LOGGED:
                        self._bad.clear()
                    self._bad[key] = None
                    log.warning("node %s: not a cache-group member: %s", name, e)
        with self._lock:
            if self._members.get(name) == member:
                return
            if member is None:
                self._members.pop(name, None)
            else:
                self._members[name] = member
        self.write()

    def group(self) -> Group:
        with self._lock:
            members = tuple(sorted(self._members.values(), key=lambda m: m.name))
            return Group(self.node_name, members, self.replicas, self.striping, self.tls,
                         self._version)

    def write(self) -> Group:
        """Rewrite the group file now (a new version) and call the change callbacks."""
        with self._lock:
            self._version += 1
        group = self.group()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_group(self.path, group)
        old, self._written = self._written, group
        log.info("cache group: %d members (%s), version %d", len(group.members),
                 ", ".join(m.name for m in group.members) or "none", group.version)
        for hook in self.on_change:
            try:
                hook(group, old)
            except Exception:  # noqa: BLE001 - a hook must not stop the Node watch
                log.exception("cache group: change hook failed")
        return group
