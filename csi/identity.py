"""CSI Identity service: who the plugin is, what it offers, whether it is ready.

Probe answers ready=false while the node plugin re-establishes staged mounts at
start-up (see ``csi.node``); the livenessprobe sidecar only needs Probe to answer
at all, the CO treats ready=false as "initialising".
"""

from __future__ import annotations

from google.protobuf import wrappers_pb2

from csi import DRIVER_NAME, vendor_version
from csi._proto import csi_pb2, csi_pb2_grpc
from csi.rpc import Readiness, log_rpc


class IdentityServicer(csi_pb2_grpc.IdentityServicer):
    """Identity for one plugin process; *controller* says whether it serves Controller."""

    def __init__(self, readiness: Readiness, controller: bool) -> None:
        self.readiness = readiness
        self.controller = controller

    @log_rpc
    def GetPluginInfo(self, request, context) -> csi_pb2.GetPluginInfoResponse:
        return csi_pb2.GetPluginInfoResponse(name=DRIVER_NAME, vendor_version=vendor_version())

    @log_rpc
    def GetPluginCapabilities(self, request, context) -> csi_pb2.GetPluginCapabilitiesResponse:
        caps = []
        if self.controller:
            caps.append(csi_pb2.PluginCapability(service=csi_pb2.PluginCapability.Service(
                type=csi_pb2.PluginCapability.Service.CONTROLLER_SERVICE)))
        return csi_pb2.GetPluginCapabilitiesResponse(capabilities=caps)

    @log_rpc
    def Probe(self, request, context) -> csi_pb2.ProbeResponse:
        return csi_pb2.ProbeResponse(ready=wrappers_pb2.BoolValue(value=self.readiness.is_set()))
