"""``fusecache`` command line: mount, umount, stats, peer-serve (this node's cache to the cache
group), and s3 (a local S3 to try things with).

Who calls it: the ``fusecache`` console script, ``python -m fusecache.cli``, the CSI plugin
(csi/mounts.py runs ``fusecache mount``) and the tests. Data flow: argv -> the parser (argument
types from fusecache/cliargs.py) -> the checks that need no network (source URI, mountpoint,
metrics port, endpoint) -> fusecache/mount.py, which checks the bucket, mounts, and reports
back through the ready pipe. Exit codes: 0 done, 1 a failure that is not the user's input,
2 bad input (an argument, the source, the mountpoint, endpoint, bucket or credentials), each
with one line on stderr naming it and no traceback.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import socket
import sys
import tempfile
from pathlib import Path

from fusecache import cliargs, errors
from fusecache.config import (
    BLOCK_SIZE_RANGE,
    FOLDER_READAHEAD_RANGE,
    ID_RANGE,
    MAX_CONNECTIONS_RANGE,
    CacheConfig,
    MountConfig,
    S3Location,
    default_cache_dir,
    parse_mode,
    parse_size,
    parse_ttl,
)

log = logging.getLogger("fusecache")

_MOUNT_DEFAULTS = MountConfig(S3Location("x"), Path("/"))
_CACHE_DEFAULTS = CacheConfig()


def _size(what: str, positive: bool = False):
    def conv(text: str) -> int:
        try:
            n = parse_size(text, what)
        except errors.ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if positive and n <= 0:
            raise argparse.ArgumentTypeError(
                f"invalid {what} {text!r}: must be > 0 (the disk tier cannot be switched off; "
                "omit the option to keep the node cache's bound)")
        return n
    return conv


def _mode(what: str):
    def conv(text: str) -> int:
        try:
            return parse_mode(text, what)
        except errors.ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv


def _ttl(text: str) -> float:
    try:
        return parse_ttl(text)
    except errors.ConfigError:
        pass
    try:  # a duration with a unit: 30m, 1h
        return cliargs.parse_duration(text, "--metadata-ttl")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid --metadata-ttl {text!r}: expected seconds, a duration such as 10m, "
            "or 'indefinite'") from None


# What S3 accepts for a new bucket (3-63 lower-case letters, digits, dots, hyphens): a name
# it refuses is bad input before SeaweedFS is started, not a warning once it serves.
_NEW_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def _new_bucket(text: str) -> str:
    if not _NEW_BUCKET.fullmatch(text) or ".." in text:
        raise argparse.ArgumentTypeError(
            f"invalid bucket name {text!r}: 3-63 lower-case letters, digits, dots and hyphens, "
            "starting and ending with a letter or digit")
    return text


def _human_default(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def build_parser() -> argparse.ArgumentParser:
    p = cliargs.Parser(prog="fusecache",
                       description="fusecache: a read-only, caching FUSE file system for S3. "
                                   "Commands: mount, umount, stats, peer-serve (this node's "
                                   "cache to the cache group), and s3 (a local S3 to try "
                                   "things with).")
    cliargs.add_version(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    md, cd = _MOUNT_DEFAULTS, _CACHE_DEFAULTS

    m = sub.add_parser("mount", help="mount s3://BUCKET[/PREFIX] read-only on MOUNTPOINT",
                       description="Mount s3://BUCKET[/PREFIX] read-only on MOUNTPOINT; returns "
                                   "once the mount is ready.")
    m.add_argument("source", help="s3://BUCKET[/PREFIX]: a bucket or a folder in it")
    m.add_argument("mountpoint", type=Path, help="an existing, empty directory")
    m.add_argument("--endpoint-url", type=cliargs.endpoint_url, metavar="URL",
                   help="S3 endpoint, http(s)://HOST[:PORT] (default: boto3's chain, "
                        "including AWS_ENDPOINT_URL)")
    m.add_argument("--region", help="S3 region (default: boto3's chain)")
    m.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help=f"node cache dir, shared by all mounts and prefetchd (default "
                        f"{default_cache_dir()})")
    m.add_argument("--disk-cache-size", type=_size("--disk-cache-size", positive=True),
                   default=None, metavar="SIZE",
                   help="set the node cache's bound, e.g. 20GiB (default: keep the cache's "
                        "current bound; 20GiB for a new cache). Node-wide: it applies to "
                        "every mount and prefetchd on this cache")
    m.add_argument("--ram-cache-size", type=_size("--ram-cache-size"), default=None,
                   metavar="SIZE", help=f"bound of this mount's RAM tier (default "
                                        f"{_human_default(cd.ram_cache_size)})")
    m.add_argument("--block-size", type=_size("--block-size"), default=None, metavar="SIZE",
                   help="cache block, one ranged GET, 64KiB-256MiB (default: the node "
                        "cache's own, 8MiB for a new cache)")
    m.add_argument("--metadata-ttl", type=_ttl, default=None, metavar="TTL",
                   help=f"how long listings, sizes and ETags are trusted: seconds, a duration "
                        f"(10m) or 'indefinite' (default {md.metadata_ttl:g})")
    m.add_argument("--readahead-budget", type=_size("--readahead-budget"), default=None,
                   metavar="SIZE", help=f"bytes of read-ahead in flight for the whole mount "
                                        f"(default {_human_default(md.readahead_budget)})")
    m.add_argument("--max-connections", type=cliargs.int_range("--max-connections",
                                                                *MAX_CONNECTIONS_RANGE),
                   default=None, metavar="N",
                   help="ranged GETs to S3 in flight at once for the whole mount; folder "
                        f"read-ahead uses at most half (default {md.max_connections})")
    m.add_argument("--folder-readahead", type=cliargs.int_range("--folder-readahead",
                                                                 *FOLDER_READAHEAD_RANGE),
                   default=None, metavar="FILES",
                   help="once two files of a folder were opened, each open fetches up to "
                        "FILES of its next small files ahead; 0: off "
                        f"(default {md.folder_readahead})")
    m.add_argument("--open-prefill", type=_size("--open-prefill"), default=None,
                   metavar="SIZE",
                   help="a cached file of at most SIZE is handed to the kernel's page cache "
                        "as it is opened, so its reads cost no FUSE request; 0: off "
                        f"(default {_human_default(md.open_prefill)})")
    m.add_argument("--read-timeout", type=cliargs.positive_float("--read-timeout"),
                   default=None, metavar="SECONDS",
                   help=f"a read S3 cannot serve in this time fails with EIO "
                        f"(default {md.read_timeout:g})")
    m.add_argument("--offline-auth-max-age", type=cliargs.duration("--offline-auth-max-age"),
                   default=None, metavar="DURATION",
                   help="while S3 is unreachable, serve cached data only if S3 authorised "
                   "this mount's credential for the bucket/prefix at most this long ago "
                   "(e.g. 30m, 24h; default 24h)")
    m.add_argument("--allow-other", action="store_true",
                   help="let other users (e.g. a pod's user) see the mount (default off)")
    for what, whose in (("uid", "user"), ("gid", "group")):
        m.add_argument(f"--{what}", type=cliargs.int_range(f"--{what}", *ID_RANGE),
                       default=None, metavar="ID",
                       help=f"the {whose} id every file and folder is owned by (default: the "
                            f"mounting {whose}'s)")
    m.add_argument("--file-mode", type=_mode("--file-mode"), default=None, metavar="MODE",
                   help=f"permission bits of every file, octal, no write bits (default "
                        f"{md.file_mode:04o})")
    m.add_argument("--dir-mode", type=_mode("--dir-mode"), default=None, metavar="MODE",
                   help=f"permission bits of every folder, octal, no write bits (default "
                        f"{md.dir_mode:04o})")
    m.add_argument("--metrics-port", type=cliargs.port("--metrics-port"), default=None,
                   metavar="PORT", help="serve Prometheus metrics on 127.0.0.1:PORT "
                                        "(default off)")
    m.add_argument("--log-file", type=Path, default=None, metavar="FILE",
                   help="the mount's log (default <cache-dir>/logs/mount-<hash>.log; stderr "
                        "with --foreground)")
    m.add_argument("--nonempty", action="store_true",
                   help="mount over a directory that is not empty, hiding its files "
                        "(default: refused)")
    m.add_argument("--foreground", "-f", action="store_true",
                   help="stay attached until unmounted (default: return once mounted)")
    m.add_argument("--group", type=Path, default=None, metavar="FILE",
                   help="the cache group file: peers asked for a block before S3 (default "
                        "<cache-dir>/group.json, used once it exists)")
    m.add_argument("--peer-timeout", type=cliargs.positive_float("--peer-timeout"),
                   default=None, metavar="SECONDS",
                   help=f"one try at a peer gives up after this, and S3 is asked "
                        f"(default {md.peer_timeout:g})")
    m.add_argument("--peer-insecure", action="store_true",
                   help="ask peers over plaintext when the group file has no tls (tests "
                        "and development only; default off: such a group is not used)")
    m.add_argument("--no-peer-store", action="store_true",
                   help="do not store blocks read from peers in this node's cache "
                        "(default: stored, like blocks from S3)")
    m.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)

    ps = sub.add_parser(
        "peer-serve", help="serve this node's cache to the cache group's peers (gRPC)",
        description="Serve the node cache's blocks, read-only, to the other members of the "
                    "cache group over gRPC with mutual TLS (the group file's tls), until "
                    "SIGTERM or Ctrl-C. Prints 'listening on HOST:PORT' once ready (and "
                    "'block lane on HOST:PORT' with --lane-listen).")
    ps.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                    help=f"node cache dir (default {default_cache_dir()})")
    ps.add_argument("--listen", required=True, metavar="HOST:PORT",
                    help="address to serve on (port 0: any free port)")
    ps.add_argument("--lane-listen", default=None, metavar="HOST:PORT",
                    help="also serve single blocks over the block lane here (HTTP/1.1 over "
                         "the same mutual TLS; the group file names it as the member's "
                         "'lane'; port 0: any free port) (default off)")
    ps.add_argument("--group", type=Path, default=None, metavar="FILE",
                    help="the cache group file: members, their buckets, tls (default "
                         "<cache-dir>/group.json)")
    ps.add_argument("--peer-insecure", action="store_true",
                    help="serve without TLS or authentication: anyone who can reach the "
                         "port reads any cached block (tests and development only; default "
                         "off)")
    ps.add_argument("--peer-max-mbps", type=cliargs.positive_float("--peer-max-mbps"),
                    default=None, metavar="MBIT/S",
                    help="bandwidth share for serving peers, megabits per second "
                         "(default: no limit)")
    ps.add_argument("--peer-max-concurrency",
                    type=cliargs.int_range("--peer-max-concurrency", 1, 1024), default=16,
                    metavar="N", help="blocks served at once; more are refused at once "
                                      "(RESOURCE_EXHAUSTED) (default 16)")
    ps.add_argument("--metrics-port", type=cliargs.port("--metrics-port"), default=None,
                    metavar="PORT", help="serve Prometheus metrics on 127.0.0.1:PORT "
                                         "(default off)")

    u = sub.add_parser("umount", help="unmount a fusecache mount")
    u.add_argument("mountpoint", type=Path, help="where it is mounted")
    u.add_argument("--lazy", "-z", action="store_true",
                   help="detach now, even while files are open (default off)")

    s = sub.add_parser("stats", help="node cache statistics")
    s.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help=f"node cache dir (default {default_cache_dir()})")
    s.add_argument("--json", action="store_true", help="machine-readable output (default off)")

    s3 = sub.add_parser("s3", help="run a local S3 (SeaweedFS) in the foreground to try "
                                   "fusecache with",
                        description="Start a local S3 (SeaweedFS) on 127.0.0.1, print its "
                                    "endpoint, keys and the export lines to use it, and run "
                                    "until Ctrl-C or SIGTERM, which stop it and remove its "
                                    "keys (and its data, unless --data-dir is given).")
    s3.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                    help="keep the server's data here across runs (default: a temporary "
                         "folder, removed at exit)")
    s3.add_argument("--port", type=cliargs.port("--port"), default=None,
                    help="S3 port on 127.0.0.1 (default: a free port)")
    s3.add_argument("--bucket", action="append", type=_new_bucket, default=None, metavar="NAME",
                    help="create this bucket at start; repeatable (default: none)")
    cliargs.add_log_level(p, [m, u, s, ps, s3], "info")
    return p


def mount_config(a: argparse.Namespace) -> MountConfig:
    cache = CacheConfig()
    if a.cache_dir is not None:
        cache.cache_dir = a.cache_dir
    if a.disk_cache_size is not None:
        cache.disk_cache_size = a.disk_cache_size
    if a.ram_cache_size is not None:
        cache.ram_cache_size = a.ram_cache_size
    if a.block_size is not None:
        if not BLOCK_SIZE_RANGE[0] <= a.block_size <= BLOCK_SIZE_RANGE[1]:
            raise errors.ConfigError("invalid --block-size: must be between 64KiB and 256MiB")
        cache.block_size = a.block_size
    cfg = MountConfig(location=S3Location.parse(a.source), mountpoint=a.mountpoint,
                      cache=cache, endpoint_url=a.endpoint_url, region=a.region,
                      allow_other=a.allow_other, metrics_port=a.metrics_port,
                      uid=a.uid, gid=a.gid)
    if a.file_mode is not None:
        cfg.file_mode = a.file_mode
    if a.dir_mode is not None:
        cfg.dir_mode = a.dir_mode
    if a.metadata_ttl is not None:
        cfg.metadata_ttl = a.metadata_ttl
    if a.readahead_budget is not None:
        cfg.readahead_budget = a.readahead_budget
    if a.max_connections is not None:
        cfg.max_connections = a.max_connections
    if a.folder_readahead is not None:
        cfg.folder_readahead = a.folder_readahead
    if a.open_prefill is not None:
        cfg.open_prefill = a.open_prefill
    if a.read_timeout is not None:
        cfg.read_timeout = a.read_timeout
    if a.offline_auth_max_age is not None:
        cfg.offline_auth_max_age = a.offline_auth_max_age
    cfg.group_file = a.group
    if a.peer_timeout is not None:
        cfg.peer_timeout = a.peer_timeout
    cfg.peer_insecure = a.peer_insecure
    cfg.peer_store = not a.no_peer_store
    return cfg


def check_before_mount(cfg: MountConfig, nonempty: bool) -> None:
    """What can be checked without S3: ConfigError (exit 2) naming the bad thing."""
    from fusecache import mount

    mount.check_mountpoint(cfg.mountpoint)
    if not nonempty:
        try:
            with os.scandir(cfg.mountpoint) as it:
                first = next(iter(it), None)
        except OSError as e:
            raise errors.ConfigError(f"mountpoint {cfg.mountpoint} cannot be listed "
                                     f"({e.strerror})") from None
        if first is not None:
            raise errors.ConfigError(
                f"mountpoint {cfg.mountpoint} is not empty (it holds {first.name!r}); "
                "pass --nonempty to mount over it")
    if cfg.endpoint_url is None and os.environ.get("AWS_ENDPOINT_URL"):
        try:
            cliargs.check_endpoint_url(os.environ["AWS_ENDPOINT_URL"], "AWS_ENDPOINT_URL")
        except ValueError as e:
            raise errors.ConfigError(str(e)) from None
    if cfg.metrics_port is not None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sk:
            # as the metrics server binds (http.server: SO_REUSEADDR), so a port whose last
            # scrape left a TIME_WAIT is free (a remount within a minute was refused)
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sk.bind(("127.0.0.1", cfg.metrics_port))
            except OSError as e:
                raise errors.ConfigError(f"--metrics-port {cfg.metrics_port}: cannot listen on "
                                         f"127.0.0.1:{cfg.metrics_port} ({e.strerror})") from None
    cache_dir = cfg.cache.cache_dir
    if cache_dir.exists() and not cache_dir.is_dir():
        raise errors.ConfigError(f"--cache-dir {cache_dir} is not a directory")
    if cfg.group_file is not None:
        check_group_file(cfg.group_file)


def check_group_file(path: Path) -> None:
    """An explicit --group must exist and parse (ConfigError naming it otherwise)."""
    from fusecache.group import GroupFileError, load_group

    try:
        load_group(path)
    except FileNotFoundError:
        raise errors.ConfigError(f"--group {path}: no such file") from None
    except OSError as e:
        raise errors.ConfigError(f"--group {path}: {e.strerror}") from None
    except GroupFileError as e:
        raise errors.ConfigError(f"--group: {e}") from None


def cmd_mount(a: argparse.Namespace, argv: list[str]) -> int:
    from fusecache import mount

    cfg = mount_config(a)
    if a.ready_fd is None:  # the detached child of a mount: its parent checked all this
        if a.log_file is not None:
            check_log_file(a.log_file)
        check_before_mount(cfg, a.nonempty)
    if not a.foreground:
        return mount.spawn_background(argv, a.log_file or _default_log_file(cfg))
    mount.setup_logging(a.log_level, a.log_file)
    return mount.run_foreground(cfg, a.ready_fd)


def check_log_file(path: Path) -> None:
    """--log-file must be a file that can be appended to, in a folder that exists: a folder,
    or a path whose folders are missing, was a traceback's class name and exit 1, or made
    those folders anywhere on the machine (a new-user walkthrough, 2026-12-07)."""
    if path.is_dir():
        raise errors.ConfigError(f"--log-file {path}: is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise errors.ConfigError(f"--log-file {path}: no such directory {parent}")
    try:
        with open(path, "ab"):
            pass
    except OSError as e:
        raise errors.ConfigError(f"--log-file {path}: {e.strerror or e}") from None


def _default_log_file(cfg: MountConfig) -> Path:
    """<cache-dir>/logs/mount-<hash of mountpoint>.log, or under /tmp if unusable."""
    name = "mount-" + hashlib.sha1(str(cfg.mountpoint.resolve()).encode()).hexdigest()[:12]
    for base in (cfg.cache.cache_dir / "logs", Path(tempfile.gettempdir()) / "fusecache"):
        try:
            base.mkdir(parents=True, exist_ok=True)
            if os.access(base, os.W_OK):
                return base / (name + ".log")
        except OSError:
            continue
    raise errors.ConfigError("no writable directory for the mount's log: pass --log-file")


def cmd_stats(a: argparse.Namespace) -> int:
    from fusecache.nodecache import NodeCache

    cache_dir = a.cache_dir or default_cache_dir()
    if not (cache_dir / "cache.lmdb").exists():
        raise errors.ConfigError(f"--cache-dir: no node cache in {cache_dir}")
    cache = NodeCache.open(cache_dir)
    try:
        st = cache.stats()
        by_mount = cache.scoped_counters()
    finally:
        cache.close()
    if a.json:
        print(json.dumps({**st.to_json(), "by_mount": by_mount}, indent=2))
        return 0
    c = st.counters
    ram = c["ram_hits"] + c["ram_misses"]
    disk = c["disk_hits"] + c["disk_misses"]
    print(f"node cache      {st.path}")
    print(f"used            {_human(st.used_bytes)} of {_human(st.limit_bytes)} "
          f"({100 * st.used_bytes / max(1, st.limit_bytes):.1f}%), file {_human(st.file_bytes)}")
    print(f"blocks          {st.blocks} in {st.objects} objects, {st.pinned_entries} pins")
    print(f"RAM tier        {c['ram_hits']} hits, {c['ram_misses']} misses"
          + (f" ({100 * c['ram_hits'] / ram:.1f}% hit)" if ram else ""))
    print(f"disk tier       {c['disk_hits']} hits, {c['disk_misses']} misses"
          + (f" ({100 * c['disk_hits'] / disk:.1f}% hit)" if disk else ""))
    print(f"from S3         {_human(c['s3_bytes'])} in {c['s3_gets']} GETs, "
          f"{c['s3_retries']} retries")
    print(f"evictions       {c['evictions']}, integrity errors {c['integrity_errors']}")
    if c["peer_hits"] or c["peer_misses"] or c["peer_blocks_served"]:
        print(f"cache group     {c['peer_hits']} blocks ({_human(c['peer_bytes'])}) from peers, "
              f"{c['peer_misses']} peer misses, {c['peer_fallbacks']} fallbacks to S3; "
              f"served {c['peer_blocks_served']} blocks ({_human(c['peer_bytes_served'])})")
    for scope, sc in sorted(by_mount.items()):
        hits = sc.get("ram_hits", 0) + sc.get("disk_hits", 0)
        reads = hits + sc.get("disk_misses", 0)
        ratio = f"{100 * hits / reads:.1f}% hit" if reads else "no reads"
        if scope == "prefetchd":  # prefetchd's warms (prefetchd/warm.py)
            print(f"prefetchd warm: {_human(sc.get('s3_bytes', 0))} from S3 in "
                  f"{sc.get('s3_gets', 0)} GETs")
            continue
        print(f"mount {scope}: {ratio}, {_human(sc.get('s3_bytes', 0))} from S3")
    return 0


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def cmd_peer_serve(a: argparse.Namespace) -> int:
    import signal
    import threading

    from fusecache.peer_server import PeerServer, keep_block_buffers

    cliargs.configure_logging(a.log_level, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    cache_dir = a.cache_dir or default_cache_dir()
    if cache_dir.exists() and not cache_dir.is_dir():
        raise errors.ConfigError(f"--cache-dir {cache_dir} is not a directory")
    server = PeerServer(cache_dir, a.listen, group_path=a.group, insecure=a.peer_insecure,
                        max_concurrency=a.peer_max_concurrency, max_mbps=a.peer_max_mbps,
                        lane_listen=a.lane_listen)
    keep_block_buffers()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    if a.metrics_port is not None:
        try:
            server.metrics.serve(a.metrics_port)
        except OSError as e:
            server.stop(0)
            raise errors.ConfigError(f"--metrics-port {a.metrics_port}: cannot listen "
                                     f"({e.strerror})") from None
    host = a.listen.rpartition(":")[0]
    print(f"listening on {host}:{server.port}", flush=True)
    if server.lane_port:
        print(f"block lane on {a.lane_listen.rpartition(':')[0]}:{server.lane_port}", flush=True)
    try:
        while not stop.wait(3600):
            pass
    finally:
        server.stop(1.0)
    return 0


def cmd_s3(a: argparse.Namespace) -> int:
    from fusecache import locals3

    cliargs.configure_logging(a.log_level, "%(levelname)s %(name)s: %(message)s")
    return locals3.serve(data_dir=a.data_dir, port=a.port, buckets=a.bucket or [])


def _run(a: argparse.Namespace, argv: list[str]) -> int:
    if a.command == "mount":
        return cmd_mount(a, argv)
    if a.command == "umount":
        from fusecache import mount
        mount.unmount(a.mountpoint, a.lazy)
        return 0
    if a.command == "stats":
        return cmd_stats(a)
    if a.command == "peer-serve":
        return cmd_peer_serve(a)
    if a.command == "s3":
        return cmd_s3(a)
    return cliargs.EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    try:
        rc = _run(a, argv)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return rc
    except errors.ConfigError as e:
        print(f"fusecache: error: {e}", file=sys.stderr)
        return cliargs.EXIT_USAGE
    except errors.FusecacheError as e:
        print(f"fusecache: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fusecache: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `fusecache stats | head -3`
        cliargs.quiet_broken_pipe()
        return 0
    except Exception as e:  # noqa: BLE001 - one line on the terminal, never a traceback
        log.debug("unexpected error", exc_info=True)
        print(f"fusecache: error: {type(e).__name__}: {' '.join(str(e).split())}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
