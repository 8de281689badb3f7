"""``fusecache`` command line: mount, umount, stats."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from fusecache import errors
from fusecache.config import (
    CacheConfig,
    MountConfig,
    S3Location,
    default_cache_dir,
    parse_duration,
    parse_size,
    parse_ttl,
)

log = logging.getLogger("fusecache")


def _size(what: str):
    def conv(text: str) -> int:
        try:
            return parse_size(text, what)
        except errors.ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv


def _duration(what: str):
    def conv(text: str) -> float:
        try:
            return parse_duration(text, what)
        except errors.ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv


def _ttl(text: str) -> float:
    try:
        return parse_ttl(text)
    except errors.ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the bad argument (no usage dump)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fusecache", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("mount", help="mount s3://BUCKET[/PREFIX] read-only on MOUNTPOINT")
    m.add_argument("source", help="s3://BUCKET[/PREFIX]")
    m.add_argument("mountpoint", type=Path)
    m.add_argument("--endpoint-url", help="S3 endpoint (default: boto3's chain, "
                   "including AWS_ENDPOINT_URL)")
    m.add_argument("--region")
    m.add_argument("--cache-dir", type=Path, default=None,
                   help=f"node cache dir (default {default_cache_dir()})")
    m.add_argument("--disk-cache-size", type=_size("--disk-cache-size"), default=None,
                   help="bound of the node cache, e.g. 20GiB")
    m.add_argument("--ram-cache-size", type=_size("--ram-cache-size"), default=None,
                   help="bound of this mount's RAM tier, e.g. 512MiB")
    m.add_argument("--block-size", type=_size("--block-size"), default=None)
    m.add_argument("--metadata-ttl", type=_ttl, default=None,
                   help="seconds before metadata is revalidated, or 'indefinite'")
    m.add_argument("--readahead-budget", type=_size("--readahead-budget"), default=None,
                   help="bytes of read-ahead in flight for the whole mount")
    m.add_argument("--read-timeout", type=float, default=None,
                   help="seconds after which a read that S3 cannot serve fails with EIO")
    m.add_argument("--offline-auth-max-age", type=_duration("--offline-auth-max-age"),
                   default=None, metavar="DURATION",
                   help="while S3 is unreachable, serve cached data only if S3 authorised "
                   "this mount's credential for the bucket/prefix at most this long ago "
                   "(e.g. 30m, 24h; default 24h)")
    m.add_argument("--allow-other", action="store_true")
    m.add_argument("--metrics-port", type=int, default=None)
    m.add_argument("--log-level", default="info",
                   choices=["debug", "info", "warning", "error"])
    m.add_argument("--log-file", type=Path, default=None)
    m.add_argument("--foreground", "-f", action="store_true",
                   help="stay attached (default: return once the mount is ready)")
    m.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)

    u = sub.add_parser("umount", help="unmount a fusecache mount")
    u.add_argument("mountpoint", type=Path)
    u.add_argument("--lazy", "-z", action="store_true")

    s = sub.add_parser("stats", help="node cache statistics")
    s.add_argument("--cache-dir", type=Path, default=None)
    s.add_argument("--json", action="store_true")
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
        if not 64 * 1024 <= a.block_size <= 256 << 20:
            raise errors.ConfigError("invalid --block-size: must be between 64KiB and 256MiB")
        cache.block_size = a.block_size
    cfg = MountConfig(location=S3Location.parse(a.source), mountpoint=a.mountpoint,
                      cache=cache, endpoint_url=a.endpoint_url, region=a.region,
                      allow_other=a.allow_other, metrics_port=a.metrics_port)
    if a.metadata_ttl is not None:
        cfg.metadata_ttl = a.metadata_ttl
    if a.readahead_budget is not None:
        cfg.readahead_budget = a.readahead_budget
    if a.read_timeout is not None:
        if a.read_timeout <= 0:
            raise errors.ConfigError("invalid --read-timeout: must be > 0")
        cfg.read_timeout = a.read_timeout
    if a.offline_auth_max_age is not None:
        cfg.offline_auth_max_age = a.offline_auth_max_age
    return cfg


def cmd_mount(a: argparse.Namespace, argv: list[str]) -> int:
    from fusecache import mount

    cfg = mount_config(a)
    if not a.foreground:
        mount.check_mountpoint(cfg.mountpoint)
        return mount.spawn_background(argv, a.log_file or _default_log_file(cfg))
    mount.setup_logging(a.log_level, a.log_file)
    return mount.run_foreground(cfg, a.ready_fd)


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
        raise errors.ConfigError(f"no node cache in {cache_dir}")
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
    for scope, sc in sorted(by_mount.items()):
        hits = sc.get("ram_hits", 0) + sc.get("disk_hits", 0)
        reads = hits + sc.get("disk_misses", 0)
        ratio = f"{100 * hits / reads:.1f}% hit" if reads else "no reads"
        print(f"mount {scope}: {ratio}, {_human(sc.get('s3_bytes', 0))} from S3")
    return 0


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    try:
        if a.command == "mount":
            return cmd_mount(a, argv)
        if a.command == "umount":
            from fusecache import mount
            mount.unmount(a.mountpoint, a.lazy)
            return 0
        if a.command == "stats":
            return cmd_stats(a)
    except errors.FusecacheError as e:
        print(f"fusecache: error: {e}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
