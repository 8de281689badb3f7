"""The cache group: which nodes' caches serve each other, and which node owns a block.

Who calls it: the mount's peer client (asks a block's owners before S3), the peer server
(who may call it), ``prefetchd warm --group-striping`` (which blocks are this node's share),
and the prefetchd agent, which writes the group file from Kubernetes (Node annotations).

Data flow: the agent (or an operator, for a static group) writes ``group.json`` into the
node cache's directory, atomically; mounts and the server re-read it when its mtime moves,
so nodes join and leave without a restart. Nothing here talks to the network.

Ownership is weighted rendezvous hashing over (block key, node name): every process that
sees the same member list computes the same owners without a directory service, and a node
leaving or joining moves only the blocks it owned or now owns. The score is the one
``prefetchd.k8s.placement`` uses for datasets, so both rankings behave alike.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

GROUP_FILE = "group.json"


class GroupFileError(ValueError):
    """The group file is not what this module writes; the message names the bad field."""


def unit_hash(key: str | bytes, name: str) -> float:
    """A value strictly inside (0, 1), uniform, from SHA-256 of (key, name)."""
    raw = key if isinstance(key, bytes) else key.encode()
    digest = hashlib.sha256(raw + b"\0" + name.encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2**64


def rendezvous_score(key: str | bytes, name: str, weight: float) -> float:
    """Weighted rendezvous (highest random weight) score; higher wins."""
    return -weight / math.log(unit_hash(key, name))


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of this node's peer identity and the group's CA."""

    ca: str
    cert: str
    key: str


@dataclass(frozen=True)
class Member:
    """One node of the group as it publishes itself."""

    name: str
    endpoint: str  # host:port of its peer server
    weight: float = 1.0
    buckets: tuple[str, ...] = ()  # buckets the node mounts or warms: what it may ask for
    datasets: tuple[str, ...] = ()  # s3://bucket/prefix it holds warm (a hint, not a promise)
    lane: str = ""  # host:port of its block lane (fusecache/peer_lane.py), "" if it has none

    def holds_hint(self, bucket: str, key: str) -> bool:
        want = f"s3://{bucket}/{key}"
        return any(want.startswith(d.rstrip("/") + "/") or want == d for d in self.datasets)


@dataclass(frozen=True)
class Group:
    """The members, this node's name among them, and how blocks are spread."""

    self_name: str
    members: tuple[Member, ...] = ()
    replicas: int = 1
    striping: bool = False
    tls: TlsFiles | None = None
    version: int = 0

    def member(self, name: str) -> Member | None:
        return next((m for m in self.members if m.name == name), None)

    def peers(self) -> list[Member]:
        """Every member but this node."""
        return [m for m in self.members if m.name != self.self_name]

    def owners(self, block_key: bytes, replicas: int | None = None) -> list[Member]:
        """The ``replicas`` members that should hold *block_key*, best first."""
        n = self.replicas if replicas is None else replicas
        return rank(block_key, self.members)[:max(0, n)]

    def owns(self, block_key: bytes) -> bool:
        """Whether this node is among the block's owners (its share under striping)."""
        return any(m.name == self.self_name for m in self.owners(block_key))

    def to_json(self) -> dict:
        out: dict = {
            "self": self.self_name,
            "replicas": self.replicas,
            "striping": self.striping,
            "version": self.version,
            "members": [{"name": m.name, "endpoint": m.endpoint, "weight": m.weight,
                         "buckets": list(m.buckets), "datasets": list(m.datasets),
                         **({"lane": m.lane} if m.lane else {})}
                        for m in self.members],
        }
        if self.tls is not None:
            out["tls"] = {"ca": self.tls.ca, "cert": self.tls.cert, "key": self.tls.key}
        return out


def rank(key: bytes | str, members: Iterable[Member]) -> list[Member]:
    """All members, best first; ties broken by name so every process agrees."""
    return sorted(members, key=lambda m: (-rendezvous_score(key, m.name, m.weight), m.name))


def _str_list(raw: object, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise GroupFileError(f"{where} must be a list of strings")
    return tuple(raw)


def _host_port(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


_GROUP_KEYS = ("self", "members", "replicas", "striping", "tls", "version")
_MEMBER_KEYS = ("name", "endpoint", "weight", "buckets", "datasets", "lane")


def _unknown_keys(obj: dict, known: tuple[str, ...], where: str) -> None:
    """A misspelled key ('membres') is named, not silently left at its default."""
    unknown = [str(k) for k in obj if k not in known]
    if unknown:
        raise GroupFileError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(repr(k) for k in unknown)} (keys: {', '.join(known)})")


def parse_group(doc: object, source: str = "group file") -> Group:
    """A Group from the JSON document *doc*; GroupFileError names the first bad field."""
    if not isinstance(doc, dict):
        raise GroupFileError(f"{source}: top level must be an object")
    _unknown_keys(doc, _GROUP_KEYS, source)
    self_name = doc.get("self")
    if not isinstance(self_name, str) or not self_name:
        raise GroupFileError(f"{source}: 'self' must name this node")
    raw_members = doc.get("members", [])
    if not isinstance(raw_members, list):
        raise GroupFileError(f"{source}: 'members' must be a list")
    members: list[Member] = []
    for i, m in enumerate(raw_members):
        where = f"{source}: members[{i}]"
        if not isinstance(m, dict):
            raise GroupFileError(f"{where} must be an object")
        _unknown_keys(m, _MEMBER_KEYS, where)
        name, endpoint = m.get("name"), m.get("endpoint")
        if not isinstance(name, str) or not name:
            raise GroupFileError(f"{where}.name must be a non-empty string")
        if not isinstance(endpoint, str) or ":" not in endpoint:
            raise GroupFileError(f"{where}.endpoint must be host:port")
        weight = m.get("weight", 1.0)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
            raise GroupFileError(f"{where}.weight must be a positive number")
        lane = m.get("lane", "")
        if not isinstance(lane, str) or lane and not _host_port(lane):
            raise GroupFileError(f"{where}.lane must be host:port")
        members.append(Member(name, endpoint, float(weight),
                              _str_list(m.get("buckets"), f"{where}.buckets"),
                              _str_list(m.get("datasets"), f"{where}.datasets"), lane))
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        raise GroupFileError(f"{source}: member names repeat")
    replicas = doc.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise GroupFileError(f"{source}: 'replicas' must be an integer >= 1")
    striping = doc.get("striping", False)
    if not isinstance(striping, bool):
        raise GroupFileError(f"{source}: 'striping' must be true or false")
    tls = None
    raw_tls = doc.get("tls")
    if raw_tls is not None:
        if not isinstance(raw_tls, dict) or not all(
                isinstance(raw_tls.get(k), str) and raw_tls.get(k) for k in ("ca", "cert", "key")):
            raise GroupFileError(f"{source}: 'tls' must have ca, cert and key paths")
        tls = TlsFiles(raw_tls["ca"], raw_tls["cert"], raw_tls["key"])
    version = doc.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise GroupFileError(f"{source}: 'version' must be an integer")
    return Group(self_name, tuple(members), replicas, striping, tls, version)


def load_group(path: str | os.PathLike) -> Group:
    """Read and check a group file; OSError if unreadable, GroupFileError if malformed."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise GroupFileError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
    return parse_group(doc, str(p))


def write_group(path: str | os.PathLike, group: Group) -> None:
    """Replace the group file atomically (readers never see half a file)."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(group.to_json(), indent=1, sort_keys=True))
    os.replace(tmp, p)


@dataclass
class GroupWatcher:
    """The current group from a file, re-read when its mtime or size moves.

    Cheap enough to call per block: one ``stat`` at most every ``interval`` seconds.
    A file that vanishes or turns malformed leaves the last good group in place (and
    ``error`` says why), so a half-finished edit never empties the group.
    """

    path: Path
    interval: float = 1.0
    group: Group | None = None
    error: str | None = None
    _stamp: tuple[int, int] | None = field(default=None, repr=False)
    _checked: float = field(default=-1e18, repr=False)

    def current(self, now: float) -> Group | None:
        if now - self._checked < self.interval:
            return self.group
        self._checked = now
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return self.group
        except OSError as e:
            self.error = str(e)
            return self.group
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self.group
        try:
            self.group = load_group(self.path)
            self.error = None
        except (OSError, GroupFileError) as e:
            self.error = str(e)
        self._stamp = stamp
        return self.group


def block_owner_names(group: Group, block_keys: Sequence[bytes]) -> list[list[str]]:
    """Owners of each block, by name (for status output and tests)."""
    return [[m.name for m in group.owners(k)] for k in block_keys]
