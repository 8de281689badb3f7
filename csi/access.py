"""Which volume capabilities fusecache volumes support, and why.

fusecache is a read-only file system, but Kubernetes users ask for ReadWriteOnce,
ReadWriteMany or ReadOnlyMany out of habit; refusing writer modes would only make
PVCs fail to provision. So every access mode is accepted for mount access, and a
write through the mount fails with EROFS (documented in docs/csi.md). Block access
has no meaning for an S3 prefix and is refused.
"""

from __future__ import annotations

import grpc

from csi._proto import csi_pb2
from csi.rpc import CsiError

Mode = csi_pb2.VolumeCapability.AccessMode

#: Modes that promise read-only use: NodePublishVolume mounts read-only for them.
READER_ONLY_MODES = {Mode.SINGLE_NODE_READER_ONLY, Mode.MULTI_NODE_READER_ONLY}
SUPPORTED_MODES = {Mode.SINGLE_NODE_WRITER, Mode.SINGLE_NODE_READER_ONLY,
                   Mode.MULTI_NODE_READER_ONLY, Mode.MULTI_NODE_SINGLE_WRITER,
                   Mode.MULTI_NODE_MULTI_WRITER, Mode.SINGLE_NODE_SINGLE_WRITER,
                   Mode.SINGLE_NODE_MULTI_WRITER}


def unsupported_reason(cap: csi_pb2.VolumeCapability) -> str | None:
    """Why *cap* cannot be served, or None when it can."""
    if cap.HasField("block"):
        return "block access is not supported: fusecache volumes are file systems"
    if not cap.HasField("mount"):
        return "volume capability needs an access type (mount)"
    if not cap.HasField("access_mode") or cap.access_mode.mode not in SUPPORTED_MODES:
        return "volume capability needs a known access mode"
    return None


def check_capability(cap: csi_pb2.VolumeCapability) -> None:
    """INVALID_ARGUMENT for a capability this driver cannot serve."""
    reason = unsupported_reason(cap)
    if reason:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, reason)
