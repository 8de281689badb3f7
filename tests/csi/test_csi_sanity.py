"""The checks csi-sanity (kubernetes-csi/csi-test, pkg/sanity) makes for the
capabilities this driver advertises, re-stated in Python over real gRPC.

csi-sanity itself is a Go program that CI cannot build (no Go module access; where a
built one is at hand, test_csi_sanity_real.py runs it: docs/csi.md). Each test names the
csi-sanity spec it mirrors. Advertised: plugin CONTROLLER_SERVICE; controller CREATE_DELETE_VOLUME;
node STAGE_UNSTAGE_VOLUME, GET_VOLUME_STATS, VOLUME_CONDITION. Specs for
capabilities not advertised (snapshots, clones, expansion, ListVolumes,
GetCapacity, ControllerPublish) are skipped by csi-sanity too; here we check that
those RPCs answer UNIMPLEMENTED.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import grpc
import pytest
from csi_helpers import Mode, PluginProc, S3Volume, mount_cap

from csi._proto import csi_pb2

CODE = grpc.StatusCode
SIZE = 10 * 1024 * 1024 * 1024  # csi-sanity's default TestVolumeSize (10 GiB)


def code_of(fn, request) -> grpc.StatusCode:  # noqa: ANN001
    with pytest.raises(grpc.RpcError) as err:
        fn(request)
    return err.value.code()


def params(ds: S3Volume) -> dict[str, str]:
    """What --csi.testvolumeparameters would hold: no PVC metadata, so volumeName."""
    return {**ds.parameters, "prefixPolicy": "volumeName"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ------------------------------------------------------------------ Identity


def test_identity_plugin_info_capabilities_probe(plugin: PluginProc) -> None:
    """identity.go: GetPluginInfo name/vendor_version; capabilities known; Probe."""
    info = plugin.identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest())
    assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9.\-]{0,61}[a-zA-Z0-9]", info.name)
    assert info.vendor_version
    caps = plugin.identity.GetPluginCapabilities(csi_pb2.GetPluginCapabilitiesRequest())
    types = {c.service.type for c in caps.capabilities}
    assert types == {csi_pb2.PluginCapability.Service.CONTROLLER_SERVICE}
    assert plugin.identity.Probe(csi_pb2.ProbeRequest()).ready.value is True


# ---------------------------------------------------------------- Controller


def test_controller_get_capabilities(plugin: PluginProc) -> None:
    caps = plugin.controller.ControllerGetCapabilities(
        csi_pb2.ControllerGetCapabilitiesRequest()).capabilities
    RPC = csi_pb2.ControllerServiceCapability.RPC
    assert [c.rpc.type for c in caps] == [RPC.CREATE_DELETE_VOLUME]


def test_create_volume_argument_errors(plugin: PluginProc, dataset: S3Volume) -> None:
    c = plugin.controller
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        parameters=params(dataset))) == CODE.INVALID_ARGUMENT  # no name
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        name=unique("nocaps"), parameters=params(dataset))) == CODE.INVALID_ARGUMENT
    block = csi_pb2.VolumeCapability(block=csi_pb2.VolumeCapability.BlockVolume(),
                                     access_mode=Mode(mode=Mode.SINGLE_NODE_WRITER))
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        name=unique("block"), volume_capabilities=[block],
        parameters=params(dataset))) == CODE.INVALID_ARGUMENT
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        name=unique("nobucket"), volume_capabilities=[mount_cap()],
        parameters={"prefixPolicy": "fixed"})) == CODE.INVALID_ARGUMENT
    # pvcName needs the PVC metadata from --extra-create-metadata
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        name=unique("nometa"), volume_capabilities=[mount_cap()],
        parameters=dataset.parameters)) == CODE.INVALID_ARGUMENT
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        name=unique("range"), volume_capabilities=[mount_cap()],
        capacity_range=csi_pb2.CapacityRange(required_bytes=2, limit_bytes=1),
        parameters=params(dataset))) == CODE.OUT_OF_RANGE
    snap = csi_pb2.VolumeContentSource(
        snapshot=csi_pb2.VolumeContentSource.SnapshotSource(snapshot_id="x"))
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        name=unique("snap"), volume_capabilities=[mount_cap()], volume_content_source=snap,
        parameters=params(dataset))) == CODE.INVALID_ARGUMENT


def test_create_volume_values_and_idempotency(plugin: PluginProc, dataset: S3Volume) -> None:
    """controller.go: NoCapacity, WithCapacity, same name twice, different capacity,
    maximum-length name."""
    c = plugin.controller
    cap = [mount_cap(Mode.SINGLE_NODE_WRITER)]
    v0 = c.CreateVolume(csi_pb2.CreateVolumeRequest(
        name=unique("nocap"), volume_capabilities=cap, parameters=params(dataset))).volume
    assert v0.volume_id and v0.capacity_bytes == 0
    name = unique("twice")
    rng = csi_pb2.CapacityRange(required_bytes=SIZE)
    v1 = c.CreateVolume(csi_pb2.CreateVolumeRequest(
        name=name, volume_capabilities=cap, capacity_range=rng,
        parameters=params(dataset))).volume
    v2 = c.CreateVolume(csi_pb2.CreateVolumeRequest(
        name=name, volume_capabilities=cap, capacity_range=rng,
        parameters=params(dataset))).volume
    assert v1.capacity_bytes >= SIZE and v1 == v2
    assert v1.volume_context["prefix"] == f"datasets/{name}"
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        name=name, volume_capabilities=cap,
        capacity_range=csi_pb2.CapacityRange(required_bytes=2 * SIZE, limit_bytes=2 * SIZE),
        parameters=params(dataset))) == CODE.ALREADY_EXISTS
    other = {**params(dataset), "prefix": "elsewhere"}
    assert code_of(c.CreateVolume, csi_pb2.CreateVolumeRequest(
        name=name, volume_capabilities=cap, capacity_range=rng,
        parameters=other)) == CODE.ALREADY_EXISTS
    long_name = "sanity-controller-create-maxlen-" + "x" * (128 - 32)
    assert len(long_name) == 128
    v3 = c.CreateVolume(csi_pb2.CreateVolumeRequest(
        name=long_name, volume_capabilities=cap, capacity_range=rng,
        parameters=params(dataset))).volume
    assert len(v3.volume_id.encode()) <= 128
    odd = c.CreateVolume(csi_pb2.CreateVolumeRequest(
        name="name with spaces/and slashes", volume_capabilities=cap,
        parameters=params(dataset))).volume
    assert re.fullmatch(r"[A-Za-z0-9._-]+", odd.volume_id)
    for vid in (v0.volume_id, v1.volume_id, v3.volume_id, odd.volume_id):
        c.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vid))


def test_delete_volume(plugin: PluginProc, dataset: S3Volume) -> None:
    c = plugin.controller
    assert code_of(c.DeleteVolume, csi_pb2.DeleteVolumeRequest()) == CODE.INVALID_ARGUMENT
    c.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id="reallyfakevolumeid"))  # OK
    vol = c.CreateVolume(csi_pb2.CreateVolumeRequest(
        name=unique("del"), volume_capabilities=[mount_cap()],
        parameters=params(dataset))).volume
    c.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id))
    # once deleted, the volume is unknown
    assert code_of(c.ValidateVolumeCapabilities, csi_pb2.ValidateVolumeCapabilitiesRequest(
        volume_id=vol.volume_id, volume_capabilities=[mount_cap()])) == CODE.NOT_FOUND


def test_validate_volume_capabilities(plugin: PluginProc, dataset: S3Volume) -> None:
    c = plugin.controller
    assert code_of(c.ValidateVolumeCapabilities,
                   csi_pb2.ValidateVolumeCapabilitiesRequest()) == CODE.INVALID_ARGUMENT
    vol = c.CreateVolume(csi_pb2.CreateVolumeRequest(
        name=unique("val"), volume_capabilities=[mount_cap()],
        parameters=params(dataset))).volume
    assert code_of(c.ValidateVolumeCapabilities, csi_pb2.ValidateVolumeCapabilitiesRequest(
        volume_id=vol.volume_id)) == CODE.INVALID_ARGUMENT
    for mode in (Mode.SINGLE_NODE_WRITER, Mode.MULTI_NODE_READER_ONLY,
                 Mode.MULTI_NODE_MULTI_WRITER):
        resp = c.ValidateVolumeCapabilities(csi_pb2.ValidateVolumeCapabilitiesRequest(
            volume_id=vol.volume_id, volume_capabilities=[mount_cap(mode)]))
        assert list(resp.confirmed.volume_capabilities) == [mount_cap(mode)]
    block = csi_pb2.VolumeCapability(block=csi_pb2.VolumeCapability.BlockVolume(),
                                     access_mode=Mode(mode=Mode.SINGLE_NODE_WRITER))
    resp = c.ValidateVolumeCapabilities(csi_pb2.ValidateVolumeCapabilitiesRequest(
        volume_id=vol.volume_id, volume_capabilities=[block]))
    assert not resp.HasField("confirmed") and "block" in resp.message
    assert code_of(c.ValidateVolumeCapabilities, csi_pb2.ValidateVolumeCapabilitiesRequest(
        volume_id=unique("fake-vol-id"), volume_capabilities=[mount_cap()])) == CODE.NOT_FOUND
    # a static PV (volumeAttributes carry the location) is known without CreateVolume
    resp = c.ValidateVolumeCapabilities(csi_pb2.ValidateVolumeCapabilitiesRequest(
        volume_id="static-x", volume_context=dataset.context, volume_capabilities=[mount_cap()]))
    assert resp.HasField("confirmed")


def test_unadvertised_rpcs_are_unimplemented(plugin: PluginProc) -> None:
    """RPCs left out of csi.proto are answered UNIMPLEMENTED by gRPC itself."""
    call = plugin.channel.unary_unary(
        "/csi.v1.Controller/ListVolumes", request_serializer=lambda _: b"",
        response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as err:
        call(None)
    assert err.value.code() == CODE.UNIMPLEMENTED


# ---------------------------------------------------------------------- Node


def test_node_capabilities_and_info(plugin: PluginProc) -> None:
    RPC = csi_pb2.NodeServiceCapability.RPC
    caps = plugin.node.NodeGetCapabilities(csi_pb2.NodeGetCapabilitiesRequest()).capabilities
    assert {c.rpc.type for c in caps} == {RPC.STAGE_UNSTAGE_VOLUME, RPC.GET_VOLUME_STATS,
                                          RPC.VOLUME_CONDITION}
    info = plugin.node.NodeGetInfo(csi_pb2.NodeGetInfoRequest())
    assert info.node_id == "test-node" and info.max_volumes_per_node >= 0
    assert not info.HasField("accessible_topology")


def test_node_argument_errors(plugin: PluginProc, csi_root: Path) -> None:
    """node.go: each missing field of each node RPC is INVALID_ARGUMENT."""
    n, vid, cap = plugin.node, unique("fake-vol-id"), mount_cap(Mode.SINGLE_NODE_WRITER)
    staging, target = str(csi_root / "staging"), str(csi_root / "target")
    INV = CODE.INVALID_ARGUMENT
    assert code_of(n.NodePublishVolume, csi_pb2.NodePublishVolumeRequest()) == INV
    assert code_of(n.NodePublishVolume, csi_pb2.NodePublishVolumeRequest(volume_id=vid)) == INV
    assert code_of(n.NodePublishVolume, csi_pb2.NodePublishVolumeRequest(
        volume_id=vid, target_path=target)) == INV
    assert code_of(n.NodePublishVolume, csi_pb2.NodePublishVolumeRequest(
        volume_id=vid, target_path=target, volume_capability=cap)) == INV  # no staging path
    assert code_of(n.NodeUnpublishVolume, csi_pb2.NodeUnpublishVolumeRequest()) == INV
    assert code_of(n.NodeUnpublishVolume,
                   csi_pb2.NodeUnpublishVolumeRequest(volume_id=vid)) == INV
    assert code_of(n.NodeStageVolume, csi_pb2.NodeStageVolumeRequest(
        staging_target_path=staging, volume_capability=cap,
        publish_context={"device": "/dev/mock"})) == INV
    assert code_of(n.NodeStageVolume, csi_pb2.NodeStageVolumeRequest(
        volume_id=vid, volume_capability=cap)) == INV
    assert code_of(n.NodeStageVolume, csi_pb2.NodeStageVolumeRequest(
        volume_id=vid, staging_target_path=staging)) == INV
    assert code_of(n.NodeStageVolume, csi_pb2.NodeStageVolumeRequest(  # no bucket
        volume_id=vid, staging_target_path=staging, volume_capability=cap)) == INV
    assert code_of(n.NodeStageVolume, csi_pb2.NodeStageVolumeRequest(  # typo in a key
        volume_id=vid, staging_target_path=staging, volume_capability=cap,
        volume_context={"bucket": "abc", "regoin": "x"})) == INV
    assert code_of(n.NodeUnstageVolume,
                   csi_pb2.NodeUnstageVolumeRequest(staging_target_path=staging)) == INV
    assert code_of(n.NodeUnstageVolume, csi_pb2.NodeUnstageVolumeRequest(volume_id=vid)) == INV
    assert code_of(n.NodeGetVolumeStats,
                   csi_pb2.NodeGetVolumeStatsRequest(volume_path="some/path")) == INV
    assert code_of(n.NodeGetVolumeStats, csi_pb2.NodeGetVolumeStatsRequest(volume_id=vid)) == INV
    # unknown volume: NOT_FOUND; publish of an unstaged volume: FAILED_PRECONDITION
    assert code_of(n.NodeGetVolumeStats, csi_pb2.NodeGetVolumeStatsRequest(
        volume_id=vid, volume_path="some/path")) == CODE.NOT_FOUND
    assert code_of(n.NodePublishVolume, csi_pb2.NodePublishVolumeRequest(
        volume_id=vid, target_path=target, staging_target_path=staging,
        volume_capability=cap)) == CODE.FAILED_PRECONDITION
    # unpublish / unstage of something never staged: OK (idempotent)
    n.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(volume_id=vid, target_path=target))
    n.NodeUnstageVolume(csi_pb2.NodeUnstageVolumeRequest(volume_id=vid,
                                                          staging_target_path=staging))


@pytest.mark.fuse
@pytest.mark.s3
def test_node_full_lifecycle_like_sanity(plugin: PluginProc, dataset: S3Volume,
                                         csi_root: Path) -> None:
    """node.go "should work" and "should be idempotent" (count 2), "should remove
    target path", NodeGetVolumeStats NOT_FOUND on a wrong path."""
    c, n = plugin.controller, plugin.node
    cap = mount_cap(Mode.SINGLE_NODE_WRITER)
    vol = c.CreateVolume(csi_pb2.CreateVolumeRequest(
        name=unique("sanity-node-full"), volume_capabilities=[cap],
        capacity_range=csi_pb2.CapacityRange(required_bytes=SIZE),
        secrets=dataset.secrets, parameters=params(dataset))).volume
    staging = csi_root / "staging"
    staging.mkdir()
    target = csi_root / "target-parent" / "target"
    target.parent.mkdir()
    for _ in range(2):
        n.NodeStageVolume(csi_pb2.NodeStageVolumeRequest(
            volume_id=vol.volume_id, volume_capability=cap, staging_target_path=str(staging),
            volume_context=vol.volume_context, secrets=dataset.secrets))
    for _ in range(2):
        n.NodePublishVolume(csi_pb2.NodePublishVolumeRequest(
            volume_id=vol.volume_id, target_path=str(target), staging_target_path=str(staging),
            volume_capability=cap, volume_context=vol.volume_context))
    assert target.exists()
    stats = n.NodeGetVolumeStats(csi_pb2.NodeGetVolumeStatsRequest(
        volume_id=vol.volume_id, volume_path=str(target)))
    assert stats.usage
    assert code_of(n.NodeGetVolumeStats, csi_pb2.NodeGetVolumeStatsRequest(
        volume_id=vol.volume_id, volume_path="some/path")) == CODE.NOT_FOUND
    n.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(volume_id=vol.volume_id,
                                                              target_path=str(target)))
    assert not target.exists()
    n.NodeUnstageVolume(csi_pb2.NodeUnstageVolumeRequest(volume_id=vol.volume_id,
                                                          staging_target_path=str(staging)))
    c.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id))
