"""The mounts both read benchmarks compare: s3fs, rclone and fusecache, with their settings.

Every mount and child process is recorded so that ``cleanup_all`` can tear it down in
a ``finally`` (fusermount3 -u -z, then SIGTERM/SIGKILL of the process group). The
settings are the same for every benchmark: metadata cached for long on all three,
each peer's own on-disk cache switched on (bench/README.md explains each option).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from _common import PROCS, log, stop_proc

if TYPE_CHECKING:
    from fusecache.locals3 import LocalS3

LONG_TTL_S = 86400  # "indefinite" for the peers: one day of stat/dir caching

_MOUNTS: list[Path] = []


@dataclass(frozen=True)
class Remote:
    """Where the readers find S3 (may differ from the server's own address, e.g. a
    latency proxy in front of it) and with which keys (the server's)."""

    endpoint_url: str
    server: LocalS3

    @property
    def access_key(self) -> str:
        return self.server.access_key

    @property
    def secret_key(self) -> str:
        return self.server.secret_key

    def env(self) -> dict[str, str]:
        return self.server.env(self.endpoint_url)

    def mask(self, cmd: list[str]) -> str:
        """The command line for a report, with the secret key masked."""
        return " ".join(cmd).replace(self.secret_key, "***")


def is_mounted(mp: Path) -> bool:
    target = os.path.realpath(mp)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4].encode().decode("unicode_escape") == target:
                return True
    return False


def wait_mounted(mp: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_mounted(mp):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"mount process for {mp} exited with {proc.returncode}")
        time.sleep(0.1)
    raise RuntimeError(f"{mp} not mounted after {timeout}s")


def unmount(mp: Path) -> None:
    if is_mounted(mp):
        subprocess.run(["fusermount3", "-u", "-z", str(mp)], capture_output=True)
    with contextlib.suppress(ValueError):
        _MOUNTS.remove(mp)


def unmount_and_stop(mp: Path, proc: subprocess.Popen, grace: float = 20.0) -> None:
    """Unmount, let the mount process finish by itself (fusecache writes its counters
    to the node cache on the way out), then stop whatever is left of it."""
    unmount(mp)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    stop_proc(proc)


def spawn(cmd: list[str], logfile: Path, env: dict | None = None, **kw) -> subprocess.Popen:
    """Start *cmd* in a session of its own (so its whole group can be stopped)."""
    with open(logfile, "ab") as lf:
        p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True, **kw)
    PROCS.append(p)
    return p


def cleanup_all() -> None:
    for mp in list(_MOUNTS):
        unmount(mp)
    for p in list(PROCS):
        stop_proc(p)


def mount_s3fs(remote: Remote, bucket: str, work: Path
               ) -> tuple[subprocess.Popen, Path, list[str]]:
    mp, cache = work / "mnt-s3fs", work / "cache-s3fs"
    mp.mkdir(exist_ok=True)
    cache.mkdir(exist_ok=True)
    pw = work / "s3fs.passwd"
    pw.write_text(f"{remote.access_key}:{remote.secret_key}\n")
    os.chmod(pw, 0o600)
    opts = [
        f"passwd_file={pw}", f"url={remote.endpoint_url}", "use_path_request_style",
        "endpoint=us-east-1", "ro",
        f"use_cache={cache}", "check_cache_dir_exist",   # the on-disk file cache
        f"stat_cache_expire={LONG_TTL_S}", "max_stat_cache_size=200000",
        "enable_noobj_cache",                          # cache negative lookups too
        "parallel_count=16", "multipart_size=8",       # 16 parallel 8 MiB ranged GETs
        "notsup_compat_dir",                           # no per-dir probe objects
    ]
    cmd = ["s3fs", bucket, str(mp), "-f", "-o", ",".join(opts)]
    p = spawn(cmd, work / "s3fs.log")
    _MOUNTS.append(mp)
    wait_mounted(mp, p)
    return p, mp, cmd


def mount_rclone(remote: Remote, bucket: str, work: Path
                 ) -> tuple[subprocess.Popen, Path, list[str]]:
    mp, cache = work / "mnt-rclone", work / "cache-rclone"
    mp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update({
        "RCLONE_CONFIG_FCB_TYPE": "s3", "RCLONE_CONFIG_FCB_PROVIDER": "Other",
        "RCLONE_CONFIG_FCB_ENV_AUTH": "false",
        "RCLONE_CONFIG_FCB_ACCESS_KEY_ID": remote.access_key,
        "RCLONE_CONFIG_FCB_SECRET_ACCESS_KEY": remote.secret_key,
        "RCLONE_CONFIG_FCB_ENDPOINT": remote.endpoint_url,
        "RCLONE_CONFIG_FCB_REGION": "us-east-1",
        "RCLONE_CONFIG_FCB_FORCE_PATH_STYLE": "true",
    })
    cmd = ["rclone", "mount", f"fcb:{bucket}", str(mp), "--read-only",
           "--vfs-cache-mode", "full", "--cache-dir", str(cache),
           "--vfs-cache-max-age", "24h", "--vfs-cache-max-size", "20G",
           "--dir-cache-time", "24h", "--attr-timeout", "24h", "--poll-interval", "0",
           "--no-modtime",               # no HEAD per file for the mtime metadata
           "--vfs-fast-fingerprint",     # cache validity from the listing alone
           "--config", "/dev/null"]
    p = spawn(cmd, work / "rclone.log", env=env)
    _MOUNTS.append(mp)
    wait_mounted(mp, p)
    return p, mp, cmd


def mount_fusecache(remote: Remote, bucket: str, work: Path, cache: Path, ram: str,
                    tag: str, extra: list[str], extra_env: dict | None = None
                    ) -> tuple[subprocess.Popen, Path, list[str]]:
    """``fusecache mount --foreground`` in a session of its own, so its PID is known.

    It runs in *work*, not in the caller's directory: ``python -m`` puts its working
    directory first on sys.path, so from the checkout the checkout's code would shadow a
    PYTHONPATH given in *extra_env* (a variant meant to run other code)."""
    mp = work / "mnt-fusecache"
    mp.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update(remote.env())
    env.update(extra_env or {})
    cmd = [sys.executable, "-m", "fusecache.cli", "mount", f"s3://{bucket}", str(mp),
           "--endpoint-url", remote.endpoint_url, "--cache-dir", str(cache),
           "--metadata-ttl", "indefinite", "--ram-cache-size", ram,
           "--log-level", "warning", "--log-file", str(work / f"fusecache-{tag}.log"),
           *extra, "--foreground"]
    p = spawn(cmd, work / f"fusecache-{tag}.out", env=env, cwd=work)
    _MOUNTS.append(mp)
    wait_mounted(mp, p)
    return p, mp, cmd


def fusecache_code(work: Path, extra_env: dict | None = None) -> str:
    """The folder of the fusecache package a mount_fusecache mount with *extra_env* runs
    (recorded with each variant, so a pairing of two versions of the code shows that it
    ran two)."""
    env = {**os.environ, **(extra_env or {})}
    r = subprocess.run([sys.executable, "-c", "import fusecache; print(fusecache.__file__)"],
                       env=env, cwd=work, capture_output=True, text=True, check=True)
    return str(Path(r.stdout.strip()).parent)


# -- profiling a mount (py-spy, when installed) -------------------------------------------

def start_pyspy(pid: int, out: Path, work: Path, gil: bool = False) -> subprocess.Popen | None:
    """*gil*: sample only the thread holding the GIL (where the Python CPU goes; threads
    waiting in native code, e.g. on a socket, are left out)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(exe):
        log("py-spy not found; no profile")
        return None
    # --nonblocking: sampling without stopping the process (a stopped mount made a cold
    # small-file pass 2x slower, which is not the profile of the pass being measured)
    return spawn([exe, "record", "--pid", str(pid), "--rate", "200", "--threads",
                  "--nonblocking",
                  *(["--gil"] if gil else []), "--format", "raw", "-o", str(out)],
                 work / "py-spy.log")


def stop_pyspy(p: subprocess.Popen | None) -> None:
    if p is None:
        return
    # SIGINT makes py-spy write its output and exit
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        stop_proc(p)
    with contextlib.suppress(ValueError):
        PROCS.remove(p)
