"""The checked-in gRPC stubs (CSI's and the cache group's) match their .proto files, and
csi/proto/csi.proto keeps the field numbers the CSI specification assigns (a wrong number
breaks the wire format silently, so the numbers are pinned here, copied from the spec)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from csi._proto import csi_pb2

REPO = Path(__file__).resolve().parents[2]
STUBS = [f"{pkg}/_proto/{name}{suffix}" for pkg, name in (("csi", "csi"), ("fusecache", "peer"))
         for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]


# the generators stamp their own versions; a newer grpcio-tools or protobuf (a fresh
# install picks the newest) makes the same code with another stamp, not stale stubs
_STAMPS = [re.compile(r"GRPC_GENERATED_VERSION = '[^']*'"),
           re.compile(r"# Protobuf Python Version: \S+"),
           re.compile(r"(ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.\w+,)"
                      r"\s*\d+,\s*\d+,\s*\d+,")]


def _unstamped(text: str) -> str:
    for stamp in _STAMPS:
        text = stamp.sub(lambda m: (m.group(1) if m.groups() else "") + "<version>", text)
    return text


def test_checked_in_stubs_are_not_stale(tmp_path: Path) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "gen-proto.sh"), str(tmp_path)],
                   check=True, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    for path in STUBS:
        fresh = _unstamped((tmp_path / path).read_text())
        checked_in = _unstamped((REPO / path).read_text())
        assert fresh == checked_in, f"{path} is stale: run scripts/gen-proto.sh"


def test_the_stamps_left_out_are_only_versions() -> None:
    text = (REPO / "csi/_proto/csi_pb2_grpc.py").read_text()
    assert _unstamped(text.replace("1.85.1", "1.99.0")) == _unstamped(text)
    assert _unstamped(text.replace("NodePublishVolume", "NodePublishVolumeX")) != \
        _unstamped(text)
    pb2 = (REPO / "csi/_proto/csi_pb2.py").read_text()
    assert "<version>" in _unstamped(pb2) and _unstamped(pb2).count("<version>") == 2


# (message, field, number) from the CSI v1 specification's csi.proto
SPEC_NUMBERS = [
    ("GetPluginInfoResponse", "name", 1), ("GetPluginInfoResponse", "vendor_version", 2),
    ("GetPluginInfoResponse", "manifest", 3),
    ("GetPluginCapabilitiesResponse", "capabilities", 1), ("ProbeResponse", "ready", 1),
    ("CreateVolumeRequest", "name", 1), ("CreateVolumeRequest", "capacity_range", 2),
    ("CreateVolumeRequest", "volume_capabilities", 3), ("CreateVolumeRequest", "parameters", 4),
    ("CreateVolumeRequest", "secrets", 5), ("CreateVolumeRequest", "volume_content_source", 6),
    ("CreateVolumeRequest", "accessibility_requirements", 7),
    ("CreateVolumeResponse", "volume", 1),
    ("Volume", "capacity_bytes", 1), ("Volume", "volume_id", 2), ("Volume", "volume_context", 3),
    ("Volume", "content_source", 4), ("Volume", "accessible_topology", 5),
    ("CapacityRange", "required_bytes", 1), ("CapacityRange", "limit_bytes", 2),
    ("VolumeCapability", "block", 1), ("VolumeCapability", "mount", 2),
    ("VolumeCapability", "access_mode", 3),
    ("DeleteVolumeRequest", "volume_id", 1), ("DeleteVolumeRequest", "secrets", 2),
    ("ValidateVolumeCapabilitiesRequest", "volume_id", 1),
    ("ValidateVolumeCapabilitiesRequest", "volume_context", 2),
    ("ValidateVolumeCapabilitiesRequest", "volume_capabilities", 3),
    ("ValidateVolumeCapabilitiesRequest", "parameters", 4),
    ("ValidateVolumeCapabilitiesRequest", "secrets", 5),
    ("ValidateVolumeCapabilitiesResponse", "confirmed", 1),
    ("ValidateVolumeCapabilitiesResponse", "message", 2),
    ("NodeStageVolumeRequest", "volume_id", 1), ("NodeStageVolumeRequest", "publish_context", 2),
    ("NodeStageVolumeRequest", "staging_target_path", 3),
    ("NodeStageVolumeRequest", "volume_capability", 4), ("NodeStageVolumeRequest", "secrets", 5),
    ("NodeStageVolumeRequest", "volume_context", 6),
    ("NodeUnstageVolumeRequest", "volume_id", 1),
    ("NodeUnstageVolumeRequest", "staging_target_path", 2),
    ("NodePublishVolumeRequest", "volume_id", 1),
    ("NodePublishVolumeRequest", "publish_context", 2),
    ("NodePublishVolumeRequest", "staging_target_path", 3),
    ("NodePublishVolumeRequest", "target_path", 4),
    ("NodePublishVolumeRequest", "volume_capability", 5),
    ("NodePublishVolumeRequest", "readonly", 6), ("NodePublishVolumeRequest", "secrets", 7),
    ("NodePublishVolumeRequest", "volume_context", 8),
    ("NodeUnpublishVolumeRequest", "volume_id", 1),
    ("NodeUnpublishVolumeRequest", "target_path", 2),
    ("NodeGetVolumeStatsRequest", "volume_id", 1),
    ("NodeGetVolumeStatsRequest", "volume_path", 2),
    ("NodeGetVolumeStatsRequest", "staging_target_path", 3),
    ("NodeGetVolumeStatsResponse", "usage", 1),
    ("NodeGetVolumeStatsResponse", "volume_condition", 2),
    ("VolumeUsage", "available", 1), ("VolumeUsage", "total", 2), ("VolumeUsage", "used", 3),
    ("VolumeUsage", "unit", 4), ("VolumeCondition", "abnormal", 1),
    ("VolumeCondition", "message", 2),
    ("NodeGetInfoResponse", "node_id", 1), ("NodeGetInfoResponse", "max_volumes_per_node", 2),
    ("NodeGetInfoResponse", "accessible_topology", 3),
]


def test_field_numbers_match_the_spec() -> None:
    for message, fld, number in SPEC_NUMBERS:
        desc = csi_pb2.DESCRIPTOR.message_types_by_name[message]
        assert desc.fields_by_name[fld].number == number, (message, fld)


def test_enum_values_and_package_match_the_spec() -> None:
    assert csi_pb2.DESCRIPTOR.package == "csi.v1"  # the wire names: /csi.v1.Node/...
    mode = csi_pb2.VolumeCapability.AccessMode
    assert (mode.SINGLE_NODE_WRITER, mode.MULTI_NODE_READER_ONLY,
            mode.MULTI_NODE_MULTI_WRITER, mode.SINGLE_NODE_MULTI_WRITER) == (1, 3, 5, 7)
    node = csi_pb2.NodeServiceCapability.RPC
    assert (node.STAGE_UNSTAGE_VOLUME, node.GET_VOLUME_STATS, node.VOLUME_CONDITION) == (1, 2, 4)
    ctrl = csi_pb2.ControllerServiceCapability.RPC
    assert (ctrl.CREATE_DELETE_VOLUME, ctrl.PUBLISH_READONLY, ctrl.MODIFY_VOLUME) == (1, 8, 14)
    assert csi_pb2.PluginCapability.Service.CONTROLLER_SERVICE == 1
    secret = csi_pb2.CreateVolumeRequest.DESCRIPTOR.fields_by_name["secrets"]
    assert secret.GetOptions().Extensions[csi_pb2.csi_secret]
    assert csi_pb2.csi_secret.number == 1059
