"""Pure-Python parts of the driver: location rules, ids, redaction, locks, mountinfo."""

from __future__ import annotations

import threading

import grpc
import pytest

from csi import mounts, volumes
from csi._proto import csi_pb2
from csi.rpc import CsiError, KeyedLocks, redacted, scrub

PVC = {volumes.PVC_NAME_KEY: "imagenet", volumes.PVC_NAMESPACE_KEY: "ml"}


@pytest.mark.parametrize(("policy", "prefix"), [
    ("", "datasets/imagenet"), ("pvcName", "datasets/imagenet"),
    ("namespacePvcName", "datasets/ml/imagenet"), ("fixed", "datasets"),
    ("volumeName", "datasets/pvc-123"),
])
def test_prefix_policies(policy: str, prefix: str) -> None:
    params = {"bucket": "data", "prefix": "/datasets/", "prefixPolicy": policy, **PVC,
              "csi.storage.k8s.io/pv/name": "pvc-123"}
    src = volumes.source_for_new_volume("pvc-123", params)
    assert (src.bucket, src.prefix) == ("data", prefix)
    assert src.uri == f"s3://data/{prefix}"


@pytest.mark.parametrize("params", [
    {"bucket": "data", "prefixPolicy": "pvcName"},  # no PVC metadata
    {"bucket": "data", "prefixPolicy": "bogus", **PVC},
    {"bucket": "Bad_Bucket!", **PVC},
    {"bucket": "data", "prefix": "a/../b", **PVC},
    {"bucket": "data", "endpointUrl": "ftp://x", **PVC},
    {"bucket": "data", "metadataTtl": "soon", **PVC},
    {"bucket": "data", "blockSize": "big", **PVC},
    # (a blind test of the plugin: the mount refused these, and NodeStage said only that
    # the FUSE server exited; a password in the URL reached three logs)
    {"bucket": "data", "blockSize": "1", **PVC},
    {"bucket": "data", "blockSize": "300MiB", **PVC},
    {"bucket": "data", "endpointUrl": "http://minio:9000/s3", **PVC},
    {"bucket": "data", "endpointUrl": "http://user:hunter2@minio:9000", **PVC},
    {"bucket": "data", "folderReadahead": "-1", **PVC},
    {"bucket": "data", "folderReadahead": "999", **PVC},
    {"bucket": "data", "maxConnections": "0", **PVC},
    {"bucket": "data", "maxConnections": "lots", **PVC},
    {"bucket": "data", "openPrefill": "lots", **PVC},
    {"bucket": "data", "regoin": "eu-west-1", **PVC},
    {"bucket": "data", "uid": "-1", **PVC},
    {"bucket": "data", "gid": "4294967295", **PVC},
    {"bucket": "data", "fileMode": "0644", **PVC},
    {"bucket": "data", "dirMode": "rwx", **PVC},
])
def test_bad_parameters_are_invalid_argument(params: dict[str, str]) -> None:
    with pytest.raises(CsiError) as e:
        volumes.source_for_new_volume("pvc-1", params)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    for key in ("uid", "gid", "fileMode", "dirMode", "blockSize"):  # named, with what it takes
        if key in params:
            assert f"{key} {params[key]!r}" in e.value.message, e.value.message
    assert "hunter2" not in e.value.message


def test_relays_reaped_by_two_rpcs_at_once_are_forgotten_once() -> None:
    """Two teardowns reaping at once: the second's pop found the pid gone (KeyError ->
    INTERNAL for 9 of 50 concurrent NodeUnstage calls in a blind test of the plugin)."""
    class Ended:
        def poll(self) -> int:
            mounts._children.pop(4242, None)  # another RPC's reap got there first
            return 0

    mounts._children[4242] = Ended()  # type: ignore[assignment]
    try:
        mounts.reap()
    finally:
        mounts._children.pop(4242, None)
    assert 4242 not in mounts._children


def test_context_round_trip_and_mount_options() -> None:
    src = volumes.VolumeSource.from_map({
        "bucket": "data", "prefix": "a//b/", "endpointUrl": "http://127.0.0.1:9000",
        "metadataTtl": "indefinite", "ramCacheSize": "256MiB", "folderReadahead": "0",
        "maxConnections": "96", "openPrefill": "0",
        "storage.kubernetes.io/csiProvisionerIdentity": "x"})
    assert src.prefix == "a/b"
    assert volumes.VolumeSource.from_map(src.to_context()) == src
    assert src.mount_options() == ["--endpoint-url", "http://127.0.0.1:9000",
                                   "--metadata-ttl", "indefinite", "--ram-cache-size", "256MiB",
                                   "--max-connections", "96", "--folder-readahead", "0",
                                   "--open-prefill", "0"]
    owned = volumes.VolumeSource.from_map({"bucket": "data", "uid": "1000", "gid": "100",
                                           "fileMode": "0440", "dirMode": "0550"})
    assert volumes.VolumeSource.from_map(owned.to_context()) == owned
    assert owned.mount_options() == ["--uid", "1000", "--gid", "100", "--file-mode", "0440",
                                     "--dir-mode", "0550"]


def test_volume_ids_are_deterministic_and_safe() -> None:
    assert volumes.volume_id_for_name("pvc-0a1b") == "pvc-0a1b"
    # pinned: the id must be the same in every process and release (a controller that lost its
    # registry answers a repeated CreateVolume with it), so compare with a value computed once
    assert volumes.volume_id_for_name("a name/with slashes") == \
        "fc-26f26c11cb960a43b1a40847e5853aa967b4c326"
    assert volumes.volume_id_for_name("x" * 300) == "fc-0d4e2ca9e9cbced7a7a5380eb29e1a3783b9b6d0"


def test_redaction_masks_secrets_and_mount_flags_only() -> None:
    req = csi_pb2.NodeStageVolumeRequest(
        volume_id="v", secrets={"secretAccessKey": "TOPSECRET"},
        volume_capability=csi_pb2.VolumeCapability(
            mount=csi_pb2.VolumeCapability.MountVolume(mount_flags=["password=hunter2"])),
        volume_context={"bucket": "data"})
    text = str(redacted(req))
    assert "TOPSECRET" not in text and "hunter2" not in text
    assert "secretAccessKey" in text and "data" in text
    assert req.secrets["secretAccessKey"] == "TOPSECRET"  # the original is untouched


def test_scrub() -> None:
    assert scrub("denied for key ABCDEFGH and ABCD", ["ABCDEFGH", "xy"]) == \
        "denied for key *** and ABCD"


def test_keyed_locks_serialize_per_key_only() -> None:
    locks = KeyedLocks()
    assert locks.acquire("a", 1)
    assert locks.acquire("b", 1)  # another key is independent
    got = []
    t = threading.Thread(target=lambda: got.append(locks.acquire("a", 0.2)))
    t.start()
    t.join()
    assert got == [False]
    locks.release("a")
    assert locks.acquire("a", 0.2)
    locks.release("a")
    locks.release("b")
    assert locks._locks == {}  # noqa: SLF001 - entries do not leak


def test_mountinfo_is_parsed_with_escapes() -> None:
    assert mounts._unescape(r"/a\040b\134c") == "/a b\\c"  # noqa: SLF001
    table = mounts.mount_table()
    assert any(e.mountpoint == "/" for e in table)
    assert mounts.path_state("/proc") is mounts.PathState.LIVE
    assert mounts.normalize("/tmp/../tmp/x") == "/tmp/x"


def test_the_logs_of_ended_volumes_are_kept_for_the_last_few_only(tmp_path) -> None:
    """Every inline volume has a key of its own: their logs grew without end (a blind test
    of the plugin found 167 files with no volume staged). The newest KEPT_LOGS ended
    volumes keep theirs, a staged volume always does, and stale hand-over files go."""
    import os
    import time

    from csi import state

    store = state.NodeStateStore(tmp_path / "st", tmp_path / "sec")
    now = time.time()
    for i in range(state.KEPT_LOGS + 5):
        for suffix in (".log", ".relay.log", ".log.1"):
            p = store.logs_dir / f"vol{i:03d}{suffix}"
            p.write_text("x")
            os.utime(p, (now - 1000 + i, now - 1000 + i))
    (store.volumes_dir / "vol000.json").write_text("{}")  # the oldest, but still staged
    stale = store.relays_dir / "fusecache-restore-abc.json"
    stale.write_text("{}")
    os.utime(stale, (now - 7200, now - 7200))
    store.delete("gone")
    keys = {p.name.split(".", 1)[0] for p in store.logs_dir.iterdir()}
    assert "vol000" in keys
    assert keys - {"vol000"} == {f"vol{i:03d}" for i in range(5, state.KEPT_LOGS + 5)}
    assert not stale.exists()
