"""CSI Node service: one fusecache mount per volume per node, bind-mounted into pods.

Data flow for a volume on a node::

    NodeStageVolume    fusecache mount s3://B/P <staging_target_path>   (the FUSE
                       server; its cache dir is the node's one shared cache)
    NodePublishVolume  bind staging_target_path -> target_path (read-only when asked,
                       or for a reader-only access mode); one per pod, any number
    NodeUnpublish      unmount target_path, remove it
    NodeUnstage        fusecache umount <staging_target_path>, forget the volume

A pod's inline volume (``volumes: - csi: {driver: csi.fusecache.io, volumeAttributes:
{bucket, prefix, ...}, nodePublishSecretRef}``, CSI ephemeral) is never staged: its
NodePublishVolume mounts the FUSE server at the target itself, and its NodeUnpublish
unmounts it and forgets the volume.

The FUSE file system is mounted nowhere but at the staging path and the publish
targets. The kubelet refuses to unstage (UnmountDevice: "still mounted by other
references") while any other mount of the same file system exists outside its
plugins directory, so the plugin keeps none of its own.

Every volume on the node uses the same ``--cache-dir``, so two pods (or two
volumes over the same bucket) reading one data set fetch each block once.

Mount survival. Each staged volume is recorded in ``csi.state`` (its S3 location,
staging path and published targets; its credentials apart, in the secrets dir).
``reconcile()`` runs at start-up before Probe reports ready, and then every
``health_interval`` seconds: a volume whose FUSE server died (a dead mount answers
ENOTCONN, "Transport endpoint is not connected") is mounted again at the staging
path and every target is bound to it again, in place. A volume of which nothing is
mounted any more (the kubelet forgot it, or the node rebooted) is forgotten.

Credentials come from the node-stage secret (``accessKeyID``, ``secretAccessKey``,
optional ``sessionToken``; the AWS_* spellings also work) and reach ``fusecache
mount`` only through its environment. Without a secret the mount inherits the
plugin's own environment (IAM roles for service accounts, instance profiles).
Error messages built from the mount's stderr are scrubbed of secret values.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from csi import access, mounts, volumes
from csi._proto import csi_pb2, csi_pb2_grpc
from csi.mounts import FusecacheCommand, MountError, PathState
from csi.rpc import (
    CsiError,
    KeyedLocks,
    Readiness,
    log_rpc,
    require,
    scrub,
    serialized_by,
    when_ready,
)
from csi.state import NodeStateStore, StagedVolume

log = logging.getLogger(__name__)

# What a failed mount's KIND (csi.mounts.MountError) is to the CO: the kubelet shows the code
# with the message, and retries UNAVAILABLE and INTERNAL alike (a blind test: every failure
# was INTERNAL, bad credentials and a missing bucket as much as S3 down).
_MOUNT_ERROR_CODES = {
    "denied": grpc.StatusCode.PERMISSION_DENIED,
    "notfound": grpc.StatusCode.NOT_FOUND,
    "unreachable": grpc.StatusCode.UNAVAILABLE,
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
}

NodeRPC = csi_pb2.NodeServiceCapability.RPC
# volume_context key the kubelet sets on a pod's inline (CSI ephemeral) volume
EPHEMERAL = "csi.storage.k8s.io/ephemeral"

# Secret keys accepted from the node-stage secret -> environment variable.
_SECRET_ENV = {
    "accessKeyID": "AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
    "secretAccessKey": "AWS_SECRET_ACCESS_KEY",
    "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
    "sessionToken": "AWS_SESSION_TOKEN", "AWS_SESSION_TOKEN": "AWS_SESSION_TOKEN",
}
# Inherited variables that would compete with credentials from a secret.
_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                   "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                   "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN")


def _path(path: str, field: str) -> str:
    """*path* made canonical (``mounts.normalize``); INVALID_ARGUMENT when it is relative:
    the spec asks an absolute path in the plugin's root file system (a blind test of the
    plugin had ``relative/path`` mounted under its working directory)."""
    if not os.path.isabs(path):
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                       f"{field} {path!r} must be an absolute path")
    if os.path.isfile(path) and not os.path.ismount(path):
        # (a blind test of the plugin: INTERNAL, a FileExistsError traceback in the log)
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                       f"{field} {path} is a file; a fusecache volume mounts on a directory "
                       "(no block volumes)")
    return mounts.normalize(path)


def mount_env(base_env: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """The environment of ``fusecache mount``: the plugin's, with secret credentials."""
    env = dict(base_env)
    if not secrets:
        return env
    creds = {_SECRET_ENV[k]: v for k, v in secrets.items() if k in _SECRET_ENV and v}
    if "AWS_ACCESS_KEY_ID" not in creds or "AWS_SECRET_ACCESS_KEY" not in creds:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                       "the node-stage secret must hold accessKeyID and secretAccessKey "
                       f"(it has keys: {', '.join(sorted(secrets)) or 'none'})")
    for name in _CREDENTIAL_ENV:
        env.pop(name, None)
    env.update(creds)
    return env


@dataclass(frozen=True)
class NodeConfig:
    """What the node service needs, read and validated once at start-up."""

    node_id: str
    fusecache: FusecacheCommand
    base_env: Mapping[str, str]


class NodeServicer(csi_pb2_grpc.NodeServicer):
    """Stage/publish fusecache volumes on this node; see the module docstring."""

    def __init__(self, config: NodeConfig, store: NodeStateStore, readiness: Readiness) -> None:
        self.config = config
        self.store = store
        self.readiness = readiness
        self.locks = KeyedLocks()

    # ------------------------------------------------------------------ helpers

    def _ensure_fuse(self, vol: StagedVolume, secrets: Mapping[str, str]) -> None:
        """Make the staging path a live fusecache mount (mount it, or mount it again)."""
        staging = vol.staging_path
        state = mounts.path_state(staging)
        if state is PathState.LIVE:
            return
        if state is PathState.DEAD:  # the relay died: the connection is gone for good
            log.warning("volume %s: FUSE connection gone (%s is not connected); "
                        "remounting", vol.volume_id, staging)
            mounts.unmount_all(staging)
        mounts.stop_relay(vol.relay_pid)
        os.makedirs(staging, exist_ok=True)
        source = volumes.VolumeSource.from_map(vol.context)
        env = mount_env(self.config.base_env, secrets)
        try:
            vol.relay_pid = self.config.fusecache.mount(
                source.uri, staging, source.mount_options(), env,
                str(self.store.log_file_for(vol.key)), str(self.store.spec_file_for(vol.key)))
        except MountError as e:
            raise CsiError(_MOUNT_ERROR_CODES.get(e.kind, grpc.StatusCode.INTERNAL),
                           scrub(str(e), secrets.values())) from None
        self.store.save(vol)

    def _record_and_mount(self, vol: StagedVolume, secrets: Mapping[str, str], is_new: bool,
                          rpc: str) -> None:
        """Record the volume (and its secret), then mount its FUSE server: persisted first,
        a crash half-way leaves a record to repair or undo; a volume this call made is
        undone again if the mount fails."""
        self.store.save_secrets(vol.key, dict(secrets))
        self.store.save(vol)
        try:
            self._ensure_fuse(vol, secrets)
        except BaseException:
            if is_new:
                try:
                    self._teardown(vol)
                except CsiError as e:
                    log.warning("volume %s: cleanup after failed %s: %s", vol.volume_id,
                                rpc, e.message)
            raise

    def _upgrade_server(self, vol: StagedVolume) -> None:
        """Have the relay run this plugin's server command (a new plugin version): it
        starts the new server and hands it the connection; the mount stays."""
        source = volumes.VolumeSource.from_map(vol.context)
        spec = str(self.store.spec_file_for(vol.key))
        argv = self.config.fusecache.server_argv(source.uri, source.mount_options(),
                                                 str(self.store.log_file_for(vol.key)))
        if mounts.read_spec(spec) == argv or not mounts.relay_alive(vol.relay_pid):
            return
        log.info("volume %s: new server command; the relay restarts its server",
                 vol.volume_id)
        mounts.write_spec(spec, argv)
        os.kill(vol.relay_pid, signal.SIGHUP)

    def _ensure_bind(self, source: str, path: str, readonly: bool) -> None:
        """Make *path* a live bind of *source*, replacing a dead mount there."""
        if mounts.path_state(path) is PathState.LIVE and mounts.same_filesystem(path, source):
            return
        if mounts.is_mountpoint(path):
            mounts.unmount_all(path)
        os.makedirs(path, exist_ok=True)
        try:
            mounts.bind_mount(source, path, readonly)
        except MountError as e:
            raise CsiError(grpc.StatusCode.INTERNAL, str(e)) from None

    def _teardown(self, vol: StagedVolume) -> None:
        """Undo a stage: unmount the staging path, stop the relay and its server (it
        closes the FUSE connection), forget the volume."""
        try:
            mounts.unmount_all(vol.staging_path)
        except MountError as e:
            raise CsiError(grpc.StatusCode.INTERNAL, str(e)) from None
        mounts.stop_relay(vol.relay_pid)
        self.store.delete(vol.key)

    def restore(self, vol: StagedVolume) -> None:
        """Re-establish one staged volume in place (FUSE mount, then targets). A FUSE mount
        made anew is a new connection: the containers using its targets keep the dead one
        until their pods are published again, which NodeGetVolumeStats reports (a blind
        test of the plugin: 'ok' while such a pod read ENOTCONN)."""
        lost = mounts.path_state(vol.staging_path) is not PathState.LIVE
        self._ensure_fuse(vol, self.store.load_secrets(vol.key))
        changed = False
        if lost and vol.targets:
            vol.remounted.update({t: time.time() for t in vol.targets})
            changed = True
        for target, readonly in list(vol.targets.items()):
            if mounts.is_mountpoint(target) or os.path.isdir(target):
                self._ensure_bind(vol.staging_path, target, readonly)
            else:  # the CO removed the target directory: nothing to publish into
                log.info("volume %s: target %s is gone; forgetting it", vol.volume_id, target)
                del vol.targets[target]
                changed = True
        if changed:
            self.store.save(vol)

    def _needs_restore(self, vol: StagedVolume) -> bool:
        paths = [vol.staging_path, *vol.targets]
        return any(mounts.path_state(p) is not PathState.LIVE for p in paths)

    @staticmethod
    def _forgotten(vol: StagedVolume) -> bool:
        """Nothing of the volume is mounted any more: the kubelet (or a reboot) took the
        mounts away without telling us, and there is nothing to re-establish."""
        return not any(mounts.is_mountpoint(p) for p in (vol.staging_path, *vol.targets))

    def reconcile(self, only_broken: bool = False) -> int:
        """Restore every staged volume that needs it, clean up the ones the kubelet
        forgot; returns how many failed."""
        failed = 0
        for vol in self.store.all():
            if not self.locks.acquire(vol.volume_id, timeout=5):
                continue  # an RPC is working on it right now
            try:
                fresh = self.store.get(vol.key)
                if fresh is None:
                    continue
                if self._forgotten(fresh):
                    log.info("volume %s: nothing is mounted at %s or its targets any more; "
                             "forgetting it", fresh.volume_id, fresh.staging_path)
                    self._teardown(fresh)
                    continue
                if not only_broken and mounts.path_state(fresh.staging_path) \
                        is PathState.LIVE:
                    self._upgrade_server(fresh)
                if only_broken and not self._needs_restore(fresh):
                    continue
                self.restore(fresh)
                log.info("volume %s: mounts re-established", fresh.volume_id)
            except (CsiError, MountError, OSError) as e:
                failed += 1
                log.warning("volume %s: could not re-establish mounts: %s", vol.volume_id,
                            getattr(e, "message", None) or e)
            finally:
                self.locks.release(vol.volume_id)
        return failed

    def run_health_loop(self, interval_s: float, stop: threading.Event) -> None:
        """Every *interval_s*, repair volumes whose FUSE server died while we ran."""
        while not stop.wait(interval_s):
            self.reconcile(only_broken=True)

    # --------------------------------------------------------------------- RPCs

    def _holder(self, path: str, volume_id: str | None = None) -> str | None:
        """The id of another volume recorded as staged, inline-published or published at
        *path* (not *volume_id*), or None."""
        for v in self.store.all():
            if v.volume_id != volume_id and (v.staging_path == path or path in v.targets):
                return v.volume_id
        return None

    @log_rpc
    @require("volume_id", "staging_target_path", "volume_capability")
    @when_ready
    @serialized_by("volume_id")
    def NodeStageVolume(self, request, context) -> csi_pb2.NodeStageVolumeResponse:
        access.check_capability(request.volume_capability)
        source = volumes.VolumeSource.from_map(request.volume_context)
        staging = _path(request.staging_target_path, "staging_target_path")
        secrets = dict(request.secrets)
        mount_env(self.config.base_env, secrets)  # reject an unusable secret up front
        key = volumes.volume_key(request.volume_id)
        vol = self.store.get(key)
        is_new = vol is None
        other = self._holder(staging, request.volume_id)
        if other is not None:  # (a blind test of the plugin: OK, and the other's data shown)
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"staging_target_path {staging} holds volume {other}")
        if vol is None:
            vol = StagedVolume(volume_id=request.volume_id, key=key, staging_path=staging,
                               context=source.to_context())
        elif vol.staging_path != staging:
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                           f"volume {request.volume_id} is already staged at {vol.staging_path}")
        elif vol.context != source.to_context():
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                           f"volume {request.volume_id} is already staged with another "
                           "S3 location or options")
        self._record_and_mount(vol, secrets, is_new, "stage")
        return csi_pb2.NodeStageVolumeResponse()

    @log_rpc
    @require("volume_id", "staging_target_path")
    @when_ready
    @serialized_by("volume_id")
    def NodeUnstageVolume(self, request, context) -> csi_pb2.NodeUnstageVolumeResponse:
        staging = _path(request.staging_target_path, "staging_target_path")
        vol = self.store.get(volumes.volume_key(request.volume_id))
        if vol is None:
            if mounts.is_mountpoint(staging) and self._holder(staging) is None:
                mounts.unmount_all(staging)  # staged by a plugin that lost its state
            return csi_pb2.NodeUnstageVolumeResponse()
        if vol.staging_path != staging:
            # not staged there: nothing to do (the spec's OK; it was NOT_FOUND)
            log.warning("NodeUnstageVolume: volume %s is staged at %s, not at %s: left as "
                        "it is", request.volume_id, vol.staging_path, staging)
            return csi_pb2.NodeUnstageVolumeResponse()
        busy = [t for t in vol.targets if mounts.is_mountpoint(t)]
        if busy:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"volume {request.volume_id} is still published at "
                           f"{', '.join(busy)}")
        self._teardown(vol)
        return csi_pb2.NodeUnstageVolumeResponse()

    @log_rpc
    @require("volume_id", "target_path", "volume_capability")
    @when_ready
    @serialized_by("volume_id")
    def NodePublishVolume(self, request, context) -> csi_pb2.NodePublishVolumeResponse:
        access.check_capability(request.volume_capability)
        if request.volume_context.get(EPHEMERAL) == "true" and not request.staging_target_path:
            self._publish_inline(request)
            return csi_pb2.NodePublishVolumeResponse()
        if not request.staging_target_path:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           "staging_target_path is required (the plugin stages volumes)")
        vol = self.store.get(volumes.volume_key(request.volume_id))
        if vol is None:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"volume {request.volume_id} is not staged on this node")
        if _path(request.staging_target_path, "staging_target_path") != vol.staging_path:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"volume {request.volume_id} is staged at {vol.staging_path}")
        target = _path(request.target_path, "target_path")
        readonly = (request.readonly
                    or request.volume_capability.access_mode.mode in access.READER_ONLY_MODES)
        if target in vol.targets and vol.targets[target] != readonly:
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                           f"{target} is already published with readonly="
                           f"{vol.targets[target]}")
        state = mounts.path_state(target)
        if state is PathState.LIVE and not mounts.same_filesystem(target, vol.staging_path):
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                           f"{target} already has another file system mounted")
        self._ensure_fuse(vol, self.store.load_secrets(vol.key))
        self._ensure_bind(vol.staging_path, target, readonly)
        if vol.targets.get(target) != readonly or target in vol.remounted:
            vol.targets[target] = readonly
            vol.remounted.pop(target, None)  # (published anew: its pod's containers too)
            self.store.save(vol)
        return csi_pb2.NodePublishVolumeResponse()

    def _publish_inline(self, request) -> None:
        """An inline (ephemeral) volume of a pod (``volumes: - csi: {driver, volumeAttributes,
        nodePublishSecretRef}``): the kubelet stages nothing and publishes once, so the FUSE
        server is mounted at the target itself; the volume lives as long as the pod's
        target, and its record makes it survive as a staged one does (reconcile)."""
        source = volumes.VolumeSource.from_map(request.volume_context)
        target = _path(request.target_path, "target_path")
        secrets = dict(request.secrets)
        if not secrets:  # else any pod could read whatever the plugin's own identity may
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           "an inline fusecache volume needs nodePublishSecretRef (the S3 "
                           "credentials, a Secret in the pod's namespace)")
        mount_env(self.config.base_env, secrets)  # reject an unusable secret up front
        key = volumes.volume_key(request.volume_id)
        vol = self.store.get(key)
        if vol is not None and (vol.staging_path != target
                                or vol.context != source.to_context()):
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                           f"volume {request.volume_id} is already published at "
                           f"{vol.staging_path} or with another S3 location")
        is_new = vol is None
        if vol is None:
            vol = StagedVolume(volume_id=request.volume_id, key=key, staging_path=target,
                               context=source.to_context())
        self._record_and_mount(vol, secrets, is_new, "publish")

    @log_rpc
    @require("volume_id", "target_path")
    @when_ready
    @serialized_by("volume_id")
    def NodeUnpublishVolume(self, request, context) -> csi_pb2.NodeUnpublishVolumeResponse:
        target = _path(request.target_path, "target_path")
        vol = self.store.get(volumes.volume_key(request.volume_id))
        other = self._holder(target, request.volume_id)
        if other is not None:  # (a blind test of the plugin: another volume's pod lost it)
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id} is not published at {target} "
                           f"(volume {other} is)")
        inline = vol is not None and vol.staging_path == target
        if inline:  # an inline volume: all of it (unmounted, its relay stopped, forgotten)
            self._teardown(vol)
        try:
            if not inline:
                mounts.unmount_all(target)
            os.rmdir(target)
        except FileNotFoundError:
            pass
        except MountError as e:
            raise CsiError(grpc.StatusCode.INTERNAL, str(e)) from None
        except OSError as e:
            if e.errno != errno.ENOTEMPTY:
                raise CsiError(grpc.StatusCode.INTERNAL,
                               f"cannot remove {target}: {os.strerror(e.errno or 0)}") from None
            # files of someone else's under the unmounted target: theirs to keep, and the
            # volume is unpublished (a blind test of the plugin: every retry failed)
            log.warning("NodeUnpublishVolume: %s holds files of its own; left in place", target)
        if not inline and vol is not None and target in vol.targets:
            del vol.targets[target]
            vol.remounted.pop(target, None)
            self.store.save(vol)
        return csi_pb2.NodeUnpublishVolumeResponse()

    @log_rpc
    @require("volume_id", "volume_path")
    def NodeGetVolumeStats(self, request, context) -> csi_pb2.NodeGetVolumeStatsResponse:
        vol = self.store.get(volumes.volume_key(request.volume_id))
        if vol is None:
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id} is not staged on this node")
        path = mounts.normalize(request.volume_path)  # (csi-sanity: some/path is NOT_FOUND)
        if path not in {vol.staging_path, *vol.targets}:
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id} is not mounted at {path}")
        try:
            st = os.statvfs(path)
        except OSError as e:
            if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                return csi_pb2.NodeGetVolumeStatsResponse(
                    volume_condition=csi_pb2.VolumeCondition(
                        abnormal=True, message="the FUSE server is gone; the plugin "
                        "re-establishes the mount on its next health check"))
            if e.errno == errno.ENOENT:
                raise CsiError(grpc.StatusCode.NOT_FOUND, f"{path} does not exist") from None
            raise
        if path in vol.remounted:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(vol.remounted[path]))
            return csi_pb2.NodeGetVolumeStatsResponse(
                volume_condition=csi_pb2.VolumeCondition(
                    abnormal=True, message=f"the volume's FUSE connection was lost and made "
                    f"anew at {when}: a container that had it mounted reads 'Transport "
                    "endpoint is not connected' until its pod is restarted"))
        unit = csi_pb2.VolumeUsage
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        return csi_pb2.NodeGetVolumeStatsResponse(
            usage=[unit(unit=unit.BYTES, total=total, available=free,
                        used=max(0, total - st.f_bfree * st.f_frsize)),
                   unit(unit=unit.INODES, total=st.f_files, available=st.f_favail,
                        used=max(0, st.f_files - st.f_ffree))],
            volume_condition=csi_pb2.VolumeCondition(abnormal=False, message="ok"))

    @log_rpc
    def NodeGetCapabilities(self, request, context) -> csi_pb2.NodeGetCapabilitiesResponse:
        return csi_pb2.NodeGetCapabilitiesResponse(capabilities=[
            csi_pb2.NodeServiceCapability(rpc=NodeRPC(type=t))
            for t in (NodeRPC.STAGE_UNSTAGE_VOLUME, NodeRPC.GET_VOLUME_STATS,
                      NodeRPC.VOLUME_CONDITION)])

    @log_rpc
    def NodeGetInfo(self, request, context) -> csi_pb2.NodeGetInfoResponse:
        return csi_pb2.NodeGetInfoResponse(node_id=self.config.node_id)
