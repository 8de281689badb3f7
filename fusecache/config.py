"""Configuration of a mount and of the node cache, with the reasons for each default.

The CLI starts from these defaults and overrides only what the user passed.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from fusecache.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB
# What a mount accepts for --max-connections and --folder-readahead (the CLI and a CSI
# volume's maxConnections and folderReadahead check against the same bounds).
BLOCK_SIZE_RANGE = (64 << 10, 256 << 20)  # --block-size: one ranged GET, one cache entry
MAX_CONNECTIONS_RANGE = (1, 512)
FOLDER_READAHEAD_RANGE = (0, 256)
# What --uid and --gid accept (a CSI volume's uid and gid too): 2^32 - 1 is the kernel's
# "no id" (-1), never an owner.
ID_RANGE = (0, 2**32 - 2)
GiB = 1024 * MiB

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "ki": KiB, "kib": KiB,
    "m": 1000**2, "mb": 1000**2, "mi": MiB, "mib": MiB,
    "g": 1000**3, "gb": 1000**3, "gi": GiB, "gib": GiB,
    "t": 1000**4, "tb": 1000**4, "ti": 1024**4, "tib": 1024**4,
}


def parse_mode(text: str, what: str) -> int:
    """Parse an octal permission mode for the read-only mount's files or folders ('0440',
    '550'); ConfigError naming *what* for anything else, a write bit or a special bit
    (setuid, sticky) among them: the mount takes no writes, so a mode offering them would
    only mislead."""
    t = str(text).strip()
    if not re.fullmatch(r"0?[0-7]{3}|0o[0-7]{3}", t):
        raise ConfigError(f"invalid {what} {text!r}: expected an octal mode such as 0444")
    mode = int(t[2:] if t.startswith("0o") else t, 8)
    if mode & 0o222:
        raise ConfigError(f"invalid {what} {text!r}: the mount is read-only, so no write "
                          f"bits (such as {mode & ~0o222:04o})")
    return mode


def parse_size(text: str | int, what: str = "size") -> int:
    """Parse '512MiB', '20GiB', '4M', '1000' into bytes; ConfigError names *what*."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"invalid {what} {text!r}: expected a number with an optional unit "
                          "such as 512MiB, 20GiB, 4M")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_ttl(text: str | float) -> float:
    """Parse a metadata TTL: seconds (float) or 'indefinite' (math.inf)."""
    if isinstance(text, int | float):
        value = float(text)
    elif str(text).strip().lower() in ("indefinite", "inf", "infinite", "forever"):
        return math.inf
    else:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"invalid --metadata-ttl {text!r}: expected seconds or "
                              "'indefinite'") from None
    if value < 0 or math.isnan(value):
        raise ConfigError(f"invalid --metadata-ttl {text!r}: must be >= 0")
    return value


def default_cache_dir() -> Path:
    """/var/lib/fusecache for root (a node cache), else the user's cache dir."""
    if os.geteuid() == 0:
        return Path("/var/lib/fusecache")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "fusecache"


_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,254}[a-z0-9]")


def valid_bucket(name: str) -> bool:
    """A bucket name a mount takes (S3's rules, with the legacy '_' and lengths up to 255
    that other S3 servers allow); prefetchd warms only what could be mounted."""
    return bool(_BUCKET_NAME.fullmatch(name))


@dataclass(frozen=True)
class S3Location:
    """Where a mount's objects live: bucket and a key prefix ('' or ending in '/')."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        m = re.fullmatch(r"s3://([^/]+)(?:/(.*))?", uri or "")
        if not m:
            raise ConfigError(f"invalid S3 URI {uri!r}: expected s3://BUCKET[/PREFIX]")
        bucket, prefix = m.group(1), m.group(2) or ""
        if not valid_bucket(bucket):
            raise ConfigError(f"invalid bucket name {bucket!r} in {uri!r}")
        if prefix.startswith("/"):
            # (a key of an empty first segment: it was mounted as the prefix without it,
            # another folder, without a word; a blind test of the mount)
            raise ConfigError(f"invalid S3 URI {uri!r}: an empty segment after the bucket "
                              f"(did you mean s3://{bucket}/{prefix.lstrip('/')}? keys that "
                              "start with '/' cannot be mounted)")
        if "//" in prefix or any(seg in (".", "..") for seg in prefix.split("/") if seg):
            raise ConfigError(f"invalid prefix {prefix!r} in {uri!r}")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return cls(bucket, prefix)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass
class CacheConfig:
    """The node cache (LMDB tier) and the per-process RAM tier."""

    cache_dir: Path = field(default_factory=default_cache_dir)
    # The node cache's bound is node-wide, stored in the cache: None keeps it as it is
    # (20 GiB for a new cache, see NodeCache._init: a typical node-local SSD share;
    # the LMDB file never grows past it by much). Only an explicit size changes it.
    disk_cache_size: int | None = None
    # 256 MiB per process: enough to hold the read-ahead window of a few sequential
    # readers and the hot small files; the node-wide working set lives in LMDB.
    ram_cache_size: int = 256 * MiB
    # None: the node cache's own block size (8 MiB for a new cache, see
    # nodecache.DEFAULT_BLOCK_SIZE), so mounts and prefetchd share blocks.
    block_size: int | None = None


@dataclass
class MountConfig:
    """One mount: location, endpoint and the tunables of the read path."""

    location: S3Location
    mountpoint: Path
    cache: CacheConfig = field(default_factory=CacheConfig)
    endpoint_url: str | None = None
    region: str | None = None
    # 60 s: like Mountpoint's default for mutable data; 'indefinite' for datasets
    # that never change (the training case) removes all revalidation traffic.
    metadata_ttl: float = 60.0
    allow_other: bool = False
    # The owner and permission bits every file and folder shows (Mountpoint's --uid, --gid,
    # --file-mode, --dir-mode): the mounting user's, readable by all, unless told.
    uid: int | None = None
    gid: int | None = None
    file_mode: int = 0o444
    dir_mode: int = 0o555
    metrics_port: int | None = None
    # Read-ahead budget per mount: bytes in flight or fetched ahead of the reader.
    # 96 MiB: enough for 12 parallel 8 MiB GETs (saturates a 10 Gb/s link at
    # ~40 ms latency) while keeping RSS within RAM tier + 200 MiB.
    readahead_budget: int = 96 * MiB
    # Largest read-ahead window of one sequential reader.
    readahead_max: int = 64 * MiB
    # Parallel GETs to S3 across the whole mount (both clients' connection pools), folder
    # read-ahead at most half of them. 48: behind a 1 Gbit/s link with 20 ms first-byte
    # latency, cold small files (600 of 60-160 KiB, bench/run_bench.py, two rounds against
    # 24) 655-717 against 540-550 files/s with 4 readers and 682-714 against 591-670 with
    # 16; a small file's GET waits on latency, not bandwidth. No change on loopback.
    max_connections: int = 48
    # Folder read-ahead (dirahead.py): once two files of a folder were opened, each open
    # fetches up to this many of its next small files (up to folder_readahead_max_file)
    # ahead, at most half of max_connections at once; 0 turns it off. 4: a folder read
    # whole in shuffled order is fetched ahead after a fifth of it was opened, and a job
    # reading only some files of a big folder fetches at most 4 more per file it opens.
    folder_readahead: int = 4
    folder_readahead_max_file: int = 2 * MiB
    # A file of at most this size whose bytes the RAM tier or the node cache holds is
    # handed to the kernel's page cache while its first open is answered (FUSE notify
    # store), so reading it costs no READ request on the mount's loop; 0 turns it off.
    # Never fetches: an open that reads nothing costs no GET.
    open_prefill: int = 1 * MiB
    # Kernel read-ahead for the mount (sysfs read_ahead_kb); FUSE's default is 128 KiB.
    kernel_readahead: int = 4 * MiB
    # The bound of one whole FUSE operation that needs S3 (a listing: of each page):
    # past it the operation returns EIO, or cached state (stale-if-error), never hangs.
    read_timeout: float = 60.0
    # Per-request S3 timeouts, each capped by read_timeout. Server errors (5xx,
    # throttling) and dropped connections are retried with backoff (jitter, up to
    # 5 s apart) until read_timeout; max_attempts 0 means no other cap. No answer at
    # all (refused, DNS, timeout) is not retried: it opens the circuit breaker
    # (circuit.py) and the operation fails or serves the cache at once. A request waits
    # for its answer as long as read_timeout (None; blind FUSE round 3: a fixed 20 s
    # made every stall of S3 past 20 s an EIO, whatever --read-timeout said).
    connect_timeout: float = 5.0
    request_timeout: float | None = None
    max_attempts: int = 0
    # S3 unreachable: the mount serves cached data only if S3 authorised this mount's
    # credential for the bucket/prefix (a successful request, recorded in the node
    # cache) at most this long ago. 24 h: a training job rides out an outage of up
    # to a day (an active mount refreshes its record at least every 10 minutes while
    # S3 answers), and a credential revoked in S3 keeps offline access to bytes
    # already on this node for at most a day, and only during an outage.
    offline_auth_max_age: float = 24 * 3600.0
    # The cache group (peer_client.py): the group file (None: <cache-dir>/group.json,
    # which may appear later), how long one try at a peer may take (the reason for 1.5 s
    # is at peer_client.DEFAULT_TIMEOUT), plaintext peers only when asked (tests), and
    # whether a block from a peer is also stored in this node's cache (like one from S3).
    group_file: Path | None = None
    peer_timeout: float = 1.5
    peer_insecure: bool = False
    peer_store: bool = True
