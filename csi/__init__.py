"""fusecache-csi: a CSI v1 driver that mounts S3 datasets through fusecache.

Modules: ``identity``, ``controller`` and ``node`` hold one gRPC servicer each;
``rpc`` holds the cross-cutting decorators (argument checks, per-volume
serialization, logging without secrets); ``volumes`` maps StorageClass parameters,
PVC metadata and PV attributes to an S3 location; ``mounts`` wraps mount(2),
/proc/self/mountinfo and each volume's relay (``fusecache.relay``, started directly
or through ``fusecache.holder``) and FUSE server; ``state`` persists what
a node has staged so that a restarted plugin can re-establish it; ``main`` is the
``fusecache-csi`` entry point. Generated protobuf stubs live in ``_proto``.
"""

from __future__ import annotations

from importlib import metadata as _metadata

#: The CSI driver name (GetPluginInfo, CSIDriver object, StorageClass provisioner).
DRIVER_NAME = "csi.fusecache.io"


def vendor_version() -> str:
    """The installed fusecache package version (the CSI vendor_version)."""
    try:
        return _metadata.version("fusecache")
    except _metadata.PackageNotFoundError:  # running from a bare source tree
        return "0.0.0+unknown"
