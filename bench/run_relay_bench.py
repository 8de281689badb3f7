"""What the CSI relay costs: sequential reads through a plain mount and a CSI volume.

Run (root, /dev/fuse): ``python bench/run_relay_bench.py [--size-mib 256] [--passes 6]``.

It starts a local SeaweedFS, uploads one file, then reads it in 1 MiB reads
(page cache dropped before each pass; the first pass fills the node cache):

1. through ``fusecache mount`` (the FUSE server owns /dev/fuse);
2. through a volume staged by a real ``fusecache-csi`` (NodeStageVolume over gRPC),
   where the relay (fusecache/relay.py) holds /dev/fuse and forwards every request
   and reply to the server over a socketpair.

Prints one JSON object: MB/s of each pass for both, and the relay's CPU seconds
(utime+stime from /proc) per GB read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from csi._proto import csi_pb2, csi_pb2_grpc
from fusecache.locals3 import LocalS3

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_bench import cpu_seconds  # noqa: E402

BIN = Path(sys.executable).parent


def passes(path: Path, size: int, n: int) -> list[int]:
    out = []
    for _ in range(n):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            t, got = time.monotonic(), 0
            while chunk := os.read(fd, 1 << 20):
                got += len(chunk)
        finally:
            os.close(fd)
        if got != size:
            raise SystemExit(f"short read: {got} of {size} bytes")
        out.append(round(size / (time.monotonic() - t) / 1e6))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--passes", type=int, default=6)
    a = p.parse_args()
    size = a.size_mib << 20
    with tempfile.TemporaryDirectory(prefix="relay-bench-") as tmp, \
            LocalS3(data_dir=Path(tmp) / "s3") as s3:
        root = Path(tmp)
        s3.client().create_bucket(Bucket="bench")
        s3.client().put_object(Bucket="bench", Key="d/big.bin", Body=os.urandom(size))
        env = {**os.environ, **s3.env()}
        common = ["--endpoint-url", s3.endpoint_url, "--region", "us-east-1",
                  "--ram-cache-size", "64MiB"]
        plain = root / "plain"
        plain.mkdir()
        subprocess.run([str(BIN / "fusecache"), "mount", "s3://bench/d", str(plain),
                        "--cache-dir", str(root / "cache-plain"), *common], env=env, check=True)
        try:
            result = {"plain_mb_s": passes(plain / "big.bin", size, a.passes)}
        finally:
            subprocess.run([str(BIN / "fusecache"), "umount", str(plain)], check=False)

        sock = root / "csi.sock"
        plugin = subprocess.Popen(
            [str(BIN / "fusecache-csi"), "--endpoint", f"unix://{sock}", "--mode", "node",
             "--node-id", "bench", "--cache-dir", str(root / "cache-csi"),
             "--state-dir", str(root / "state"), "--fusecache-bin", str(BIN / "fusecache")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        staging = root / "kubelet" / "plugins" / "globalmount"
        staging.mkdir(parents=True)
        try:
            deadline = time.monotonic() + 60
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            node = csi_pb2_grpc.NodeStub(grpc.insecure_channel(f"unix://{sock}"))
            cap = csi_pb2.VolumeCapability(
                mount=csi_pb2.VolumeCapability.MountVolume(),
                access_mode=csi_pb2.VolumeCapability.AccessMode(mode=3))
            vol = {"volume_id": "bench", "staging_target_path": str(staging)}
            node.NodeStageVolume(csi_pb2.NodeStageVolumeRequest(
                **vol, volume_capability=cap, volume_context={
                    "bucket": "bench", "prefix": "d", "endpointUrl": s3.endpoint_url,
                    "region": "us-east-1", "ramCacheSize": "64MiB"},
                secrets={"accessKeyID": s3.access_key, "secretAccessKey": s3.secret_key}),
                timeout=120)
            record = next((root / "state" / "node" / "volumes").glob("*.json"))
            relay = json.loads(record.read_text())["relay_pid"]
            before = cpu_seconds(relay) or 0.0
            result["relayed_mb_s"] = passes(staging / "big.bin", size, a.passes)
            result["relay_cpu_s_per_gb"] = round(
                ((cpu_seconds(relay) or 0.0) - before) / (a.passes * size / 1e9), 2)
            node.NodeUnstageVolume(csi_pb2.NodeUnstageVolumeRequest(**vol), timeout=60)
        finally:
            plugin.terminate()
            plugin.wait(timeout=30)
    result["size_mib"] = a.size_mib
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
