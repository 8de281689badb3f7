"""What a fusecache volume is: an S3 location plus mount options.

A volume is described by a flat string map, the same keys in three places:

* StorageClass ``parameters`` (dynamic provisioning; CreateVolume receives them),
* the ``volume_context`` that CreateVolume returns (Kubernetes stores it in the PV
  and hands it to NodeStageVolume / NodePublishVolume),
* a static PV's ``spec.csi.volumeAttributes`` (an existing dataset).

Keys (all values strings): ``bucket`` (required), ``prefix``, ``endpointUrl``,
``region``, ``metadataTtl`` (seconds or ``indefinite``), ``ramCacheSize``,
``blockSize``, ``maxConnections`` (GETs in flight for the mount, 1-512),
``folderReadahead`` (files fetched ahead per file opened, 0-256; 0
turns folder read-ahead off), ``openPrefill`` (a size: cached files up to it are handed
to the kernel's page cache as they are opened; 0 turns it off). Keys containing a
``/`` belong to Kubernetes (``csi.storage.k8s.io/...``,
``storage.kubernetes.io/csiProvisionerIdentity``) and are ignored; any other unknown
key is rejected so that a typo (``regoin``) fails loudly instead of being dropped.

How a dynamic PVC chooses its prefix (StorageClass parameter ``prefixPolicy``,
the StorageClass ``prefix`` is the base):

* ``pvcName`` (default): ``<prefix>/<pvc name>``: the claim's name names the dataset;
* ``namespacePvcName``: ``<prefix>/<pvc namespace>/<pvc name>``: per-namespace trees;
* ``fixed``: ``<prefix>``: every claim of the class sees one dataset;
* ``volumeName``: ``<prefix>/<CO volume name>`` (``pvc-<uid>``): a fresh, empty prefix.

The PVC's name and namespace come from the csi-provisioner's
``--extra-create-metadata`` (``csi.storage.k8s.io/pvc/name``, ``.../pvc/namespace``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from csi.rpc import CsiError
from fusecache.cliargs import check_endpoint_url
from fusecache.config import (
    BLOCK_SIZE_RANGE,
    FOLDER_READAHEAD_RANGE,
    ID_RANGE,
    MAX_CONNECTIONS_RANGE,
    parse_mode,
    parse_size,
)
from fusecache.errors import ConfigError

PVC_NAME_KEY = "csi.storage.k8s.io/pvc/name"
PVC_NAMESPACE_KEY = "csi.storage.k8s.io/pvc/namespace"

PREFIX_POLICIES = ("pvcName", "namespacePvcName", "fixed", "volumeName")
DEFAULT_PREFIX_POLICY = "pvcName"

# context key -> dataclass attribute
_KEYS = {
    "bucket": "bucket",
    "prefix": "prefix",
    "endpointUrl": "endpoint_url",
    "region": "region",
    "metadataTtl": "metadata_ttl",
    "ramCacheSize": "ram_cache_size",
    "blockSize": "block_size",
    "maxConnections": "max_connections",
    "folderReadahead": "folder_readahead",
    "openPrefill": "open_prefill",
    "uid": "uid",
    "gid": "gid",
    "fileMode": "file_mode",
    "dirMode": "dir_mode",
}
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]")
_SIZE_RE = re.compile(r"\s*[0-9]+(\.[0-9]+)?\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_SAFE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _bytes(text: str) -> int:
    """*text* as a size in bytes (``parse_size``); -1 when it is none."""
    try:
        return parse_size(text)
    except ConfigError:
        return -1


def _invalid(msg: str) -> CsiError:
    return CsiError(grpc.StatusCode.INVALID_ARGUMENT, msg)


def normalize_prefix(prefix: str) -> str:
    """'a//b/' -> 'a/b'; rejects '.', '..' and control characters (never valid keys)."""
    if _CONTROL_RE.search(prefix):
        raise _invalid("prefix contains control characters")
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise _invalid(f"prefix {prefix!r} contains '.' or '..' segments")
    return "/".join(parts)


@dataclass(frozen=True)
class VolumeSource:
    """An S3 location and the per-volume mount options of one fusecache volume."""

    bucket: str
    prefix: str = ""
    endpoint_url: str = ""
    region: str = ""
    metadata_ttl: str = ""
    ram_cache_size: str = ""
    block_size: str = ""
    max_connections: str = ""
    folder_readahead: str = ""
    open_prefill: str = ""
    uid: str = ""
    gid: str = ""
    file_mode: str = ""
    dir_mode: str = ""

    @classmethod
    def from_map(cls, values: Mapping[str, str], *, extra_keys: tuple[str, ...] = ()
                 ) -> VolumeSource:
        """Parse and validate a volume_context / volumeAttributes map."""
        unknown = sorted(k for k in values if "/" not in k and k not in _KEYS
                         and k not in extra_keys)
        if unknown:
            raise _invalid(f"unknown volume attribute(s) {', '.join(unknown)}; "
                           f"known: {', '.join([*_KEYS, *extra_keys])}")
        kw = {attr: str(values.get(key, "")).strip() for key, attr in _KEYS.items()}
        if not kw["bucket"]:
            raise _invalid("volume attribute 'bucket' is required (StorageClass parameter "
                           "or PV volumeAttributes)")
        if not _BUCKET_RE.fullmatch(kw["bucket"]):
            raise _invalid(f"invalid bucket name {kw['bucket']!r}")
        kw["prefix"] = normalize_prefix(kw["prefix"])
        if kw["endpoint_url"]:
            try:
                check_endpoint_url(kw["endpoint_url"], "endpointUrl")
            except ValueError as e:
                raise _invalid(str(e)) from None
        if kw["region"] and not re.fullmatch(r"[a-z0-9-]{1,40}", kw["region"]):
            raise _invalid(f"invalid region {kw['region']!r}")
        ttl = kw["metadata_ttl"]
        if ttl and ttl.lower() != "indefinite" and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", ttl):
            raise _invalid(f"metadataTtl {ttl!r} must be seconds or 'indefinite'")
        for attr, key in (("ram_cache_size", "ramCacheSize"), ("block_size", "blockSize"),
                          ("open_prefill", "openPrefill")):
            if kw[attr] and not _SIZE_RE.fullmatch(kw[attr]):
                raise _invalid(f"{key} {kw[attr]!r} must be a size such as 256MiB")
        if kw["block_size"] and not (BLOCK_SIZE_RANGE[0] <= _bytes(kw["block_size"])
                                     <= BLOCK_SIZE_RANGE[1]):
            # (blind CSI test: the mount refused it, and NodeStage said only that the FUSE
            # server exited before it was ready)
            raise _invalid(f"blockSize {kw['block_size']!r} must be between 64KiB and 256MiB")
        for attr, key, (lo, hi), unit in (
                ("max_connections", "maxConnections", MAX_CONNECTIONS_RANGE, "GETs"),
                ("folder_readahead", "folderReadahead", FOLDER_READAHEAD_RANGE, "files")):
            text = kw[attr]
            if text and not (text.isdigit() and lo <= int(text) <= hi):
                raise _invalid(f"{key} {text!r} must be a number of {unit}, {lo}-{hi}")
        for attr in ("uid", "gid"):
            if kw[attr] and not (kw[attr].isdigit() and ID_RANGE[0] <= int(kw[attr])
                                 <= ID_RANGE[1]):
                raise _invalid(f"{attr} {kw[attr]!r} must be a numeric id, "
                               f"{ID_RANGE[0]}-{ID_RANGE[1]}")
        for attr, key in (("file_mode", "fileMode"), ("dir_mode", "dirMode")):
            try:
                if kw[attr]:
                    parse_mode(kw[attr], key)
            except ConfigError as e:
                raise _invalid(str(e)) from None
        return cls(**kw)

    def to_context(self) -> dict[str, str]:
        """The volume_context map (only the keys that are set)."""
        return {key: getattr(self, attr) for key, attr in _KEYS.items() if getattr(self, attr)}

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def mount_options(self) -> list[str]:
        """Per-volume ``fusecache mount`` options (never credentials)."""
        args: list[str] = []
        for flag, value in (("--endpoint-url", self.endpoint_url), ("--region", self.region),
                            ("--metadata-ttl", self.metadata_ttl),
                            ("--ram-cache-size", self.ram_cache_size),
                            ("--block-size", self.block_size),
                            ("--max-connections", self.max_connections),
                            ("--folder-readahead", self.folder_readahead),
                            ("--open-prefill", self.open_prefill),
                            ("--uid", self.uid), ("--gid", self.gid),
                            ("--file-mode", self.file_mode), ("--dir-mode", self.dir_mode)):
            if value:
                args += [flag, value]
        return args


def source_for_new_volume(name: str, parameters: Mapping[str, str]) -> VolumeSource:
    """The S3 location of a dynamically provisioned volume (see module docstring)."""
    policy = parameters.get("prefixPolicy", "") or DEFAULT_PREFIX_POLICY
    if policy not in PREFIX_POLICIES:
        raise _invalid(f"prefixPolicy {policy!r} is not one of {', '.join(PREFIX_POLICIES)}")
    base = VolumeSource.from_map(parameters, extra_keys=("prefixPolicy",))
    pvc_name = parameters.get(PVC_NAME_KEY, "")
    pvc_ns = parameters.get(PVC_NAMESPACE_KEY, "")
    if policy in ("pvcName", "namespacePvcName") and not (pvc_name and pvc_ns):
        raise _invalid(f"prefixPolicy {policy} needs the PVC's name and namespace: run the "
                       "csi-provisioner with --extra-create-metadata (or use prefixPolicy "
                       "fixed or volumeName)")
    parts = {
        "pvcName": [base.prefix, pvc_name],
        "namespacePvcName": [base.prefix, pvc_ns, pvc_name],
        "fixed": [base.prefix],
        "volumeName": [base.prefix, name],
    }[policy]
    prefix = normalize_prefix("/".join(p for p in parts if p))
    return VolumeSource(**{**base.__dict__, "prefix": prefix})


def volume_id_for_name(name: str) -> str:
    """A deterministic volume id for a CO volume name (<= 128 bytes, path-safe).

    Deterministic so that a repeated CreateVolume returns the same id even after
    the controller lost its registry.
    """
    if _SAFE_ID_RE.fullmatch(name):
        return name
    return "fc-" + hashlib.sha256(name.encode()).hexdigest()[:40]


def volume_key(volume_id: str) -> str:
    """A short file-system-safe key for any volume id (state files, mountpoints)."""
    return hashlib.sha256(volume_id.encode()).hexdigest()[:32]
