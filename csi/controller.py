"""CSI Controller service: dynamic provisioning of fusecache volumes.

A fusecache volume is an S3 location, so "creating" one creates no storage: it
decides the location (``csi.volumes.source_for_new_volume``, from the
StorageClass parameters and the PVC's name and namespace) and returns it as the
volume_context, which Kubernetes keeps in the PV and hands to the node plugin.

DeleteVolume never deletes S3 objects: the driver creates none (the data set was
there before the PVC and is shared with other readers), so it only forgets the
volume. A capacity request is recorded and echoed back (S3 has no capacity to
reserve); it matters only for the ALREADY_EXISTS check.

The registry of created volumes (``csi.state.ControllerRegistry``) serves the
spec's idempotency rules: the same name with the same request returns the same
volume; with an incompatible request, ALREADY_EXISTS; ValidateVolumeCapabilities
of an unknown id, NOT_FOUND. Volume ids are derived from the name, so a
controller that lost its registry still answers a repeated CreateVolume with the
same id.
"""

from __future__ import annotations

import logging

import grpc

from csi import access, volumes
from csi._proto import csi_pb2, csi_pb2_grpc
from csi.rpc import CsiError, KeyedLocks, Readiness, log_rpc, require, serialized_by, when_ready
from csi.state import ControllerRegistry, VolumeRecord

log = logging.getLogger(__name__)

RPC = csi_pb2.ControllerServiceCapability.RPC


class ControllerServicer(csi_pb2_grpc.ControllerServicer):
    """Create/Delete/Validate for S3-prefix volumes; state in *registry*."""

    def __init__(self, registry: ControllerRegistry, readiness: Readiness) -> None:
        self.registry = registry
        self.readiness = readiness
        self.locks = KeyedLocks()

    @log_rpc
    @require("name", "volume_capabilities")
    @when_ready
    @serialized_by("name")
    def CreateVolume(self, request, context) -> csi_pb2.CreateVolumeResponse:
        for cap in request.volume_capabilities:
            access.check_capability(cap)
        if request.HasField("volume_content_source"):
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           "volume content sources (snapshots, clones) are not supported")
        required = request.capacity_range.required_bytes
        limit = request.capacity_range.limit_bytes
        if required < 0 or limit < 0:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "capacity must not be negative")
        if limit and required > limit:
            raise CsiError(grpc.StatusCode.OUT_OF_RANGE,
                           f"required_bytes {required} exceeds limit_bytes {limit}")
        source = volumes.source_for_new_volume(request.name, request.parameters)
        volume_id = volumes.volume_id_for_name(request.name)
        key = volumes.volume_key(volume_id)
        capacity = required or limit
        record = VolumeRecord(name=request.name, volume_id=volume_id, capacity_bytes=capacity,
                              required_bytes=required, limit_bytes=limit,
                              context=source.to_context())
        existing = self.registry.get(key)
        if existing is not None:
            if existing.name != request.name:
                raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                               f"volume id {volume_id} already belongs to another name")
            have = existing.capacity_bytes
            if have < required or (limit and have > limit):
                # (the spec: OK when the volume's capacity fits the range asked for, as a
                # blind test of the plugin found it did not for a wider range)
                raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                               f"volume {request.name!r} exists with capacity {have} bytes, "
                               f"outside the range asked for ({required}-{limit or 'any'})")
            if existing.context != record.context:
                differ = sorted(k for k in existing.context.keys() | record.context.keys()
                                if existing.context.get(k) != record.context.get(k))
                raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                               f"volume {request.name!r} exists with other parameters "
                               f"({', '.join(differ)}; it reads "
                               f"{existing.context.get('bucket')}/"
                               f"{existing.context.get('prefix', '')})")
            record = existing
        else:
            self.registry.save(key, record)
            log.info("volume %s: %s", volume_id, source.uri)
        return csi_pb2.CreateVolumeResponse(volume=csi_pb2.Volume(
            volume_id=record.volume_id, capacity_bytes=record.capacity_bytes,
            volume_context=record.context))

    @log_rpc
    @require("volume_id")
    @when_ready
    @serialized_by("volume_id")
    def DeleteVolume(self, request, context) -> csi_pb2.DeleteVolumeResponse:
        # Forget the volume; its S3 objects stay (see module docstring).
        self.registry.delete(volumes.volume_key(request.volume_id))
        return csi_pb2.DeleteVolumeResponse()

    @log_rpc
    @require("volume_id", "volume_capabilities")
    @when_ready
    def ValidateVolumeCapabilities(self, request, context
                                   ) -> csi_pb2.ValidateVolumeCapabilitiesResponse:
        record = self.registry.get(volumes.volume_key(request.volume_id))
        if record is None:
            if "bucket" not in request.volume_context:
                raise CsiError(grpc.StatusCode.NOT_FOUND,
                               f"volume {request.volume_id!r} does not exist")
            volumes.VolumeSource.from_map(request.volume_context)  # a static PV
        elif request.volume_context and dict(request.volume_context) != record.context:
            # (the spec: the context MUST match the volume's; a blind test of the plugin
            # had another bucket confirmed and echoed back)
            return csi_pb2.ValidateVolumeCapabilitiesResponse(
                message=f"volume_context does not match volume {request.volume_id!r}'s")
        for cap in request.volume_capabilities:
            reason = access.unsupported_reason(cap)
            if reason:
                return csi_pb2.ValidateVolumeCapabilitiesResponse(message=reason)
        return csi_pb2.ValidateVolumeCapabilitiesResponse(
            confirmed=csi_pb2.ValidateVolumeCapabilitiesResponse.Confirmed(
                volume_context=request.volume_context,
                volume_capabilities=request.volume_capabilities,
                parameters=request.parameters))

    @log_rpc
    def ControllerGetCapabilities(self, request, context
                                  ) -> csi_pb2.ControllerGetCapabilitiesResponse:
        return csi_pb2.ControllerGetCapabilitiesResponse(capabilities=[
            csi_pb2.ControllerServiceCapability(rpc=RPC(type=RPC.CREATE_DELETE_VOLUME))])
