"""PVs, PVCs, StorageClasses and Secrets as a real cluster holds them (a plain helper module).

Static PVs are written by an admin; dynamic ones as the csi-provisioner makes them from a
StorageClass (``pv.kubernetes.io/provisioned-by``, the CreateVolume volume_context as
``volumeAttributes`` plus the provisioner identity, the resolved node-stage secret ref, a
``claimRef`` to the claim). Claims are Bound with ``volumeName`` set and the bind-completed
annotations the PV controller adds. Secrets carry base64 ``data`` (the API server turns
``stringData`` into ``data``).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

DRIVER = "csi.fusecache.io"


def secret(namespace: str, name: str, access_key: str, secret_key: str) -> dict[str, Any]:
    enc = {"accessKeyID": access_key, "secretAccessKey": secret_key}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in enc.items()}}


def storage_class(name: str, parameters: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "uid": str(uuid.uuid4())},
            "provisioner": DRIVER, "parameters": parameters, "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate", "allowVolumeExpansion": False}


def bound_pair(namespace: str, claim: str, pv_name: str, attributes: dict[str, str],
               secret_ref: dict[str, str] | None = None, storage_class_name: str = "",
               provisioned: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(PV, PVC) bound to each other."""
    pvc_uid = str(uuid.uuid4())
    csi: dict[str, Any] = {"driver": DRIVER, "volumeHandle": pv_name, "readOnly": True,
                           "volumeAttributes": dict(attributes)}
    annotations = {}
    if provisioned:
        csi["volumeAttributes"]["storage.kubernetes.io/csiProvisionerIdentity"] = \
            f"1764547200000-1234-{DRIVER}"
        annotations = {"pv.kubernetes.io/provisioned-by": DRIVER,
                       "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                       "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""}
    if secret_ref:
        csi["nodeStageSecretRef"] = dict(secret_ref)
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": pv_name, "uid": str(uuid.uuid4()), "annotations": annotations,
                       "finalizers": ["kubernetes.io/pv-protection"]},
          "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadOnlyMany"],
                   "persistentVolumeReclaimPolicy": "Delete" if provisioned else "Retain",
                   "storageClassName": storage_class_name, "volumeMode": "Filesystem",
                   "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                "namespace": namespace, "name": claim, "uid": pvc_uid},
                   "csi": csi},
          "status": {"phase": "Bound"}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": claim, "namespace": namespace, "uid": pvc_uid,
                        "finalizers": ["kubernetes.io/pvc-protection"],
                        "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                        **({"pv.kubernetes.io/bound-by-controller": "yes",
                                            "volume.kubernetes.io/storage-provisioner": DRIVER}
                                           if provisioned else {})}},
           "spec": {"accessModes": ["ReadOnlyMany"], "volumeName": pv_name,
                    "storageClassName": storage_class_name, "volumeMode": "Filesystem",
                    "resources": {"requests": {"storage": "1Gi"}}},
           "status": {"phase": "Bound", "accessModes": ["ReadOnlyMany"],
                      "capacity": {"storage": "100Gi"}}}
    return pv, pvc


def pending_pod(namespace: str, name: str, claim: str, mount_path: str = "/data",
                args: list[str] | None = None) -> dict[str, Any]:
    """A pod just created (not yet scheduled) that mounts ``claim`` read-only."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
            "spec": {"restartPolicy": "Never", "schedulerName": "default-scheduler",
                     "serviceAccountName": "default",
                     "containers": [{"name": "main", "image": "python:3.11-slim",
                                     "args": args or [],
                                     "volumeMounts": [{"name": "data", "mountPath": mount_path,
                                                       "readOnly": True}]}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {
                         "claimName": claim, "readOnly": True}}]},
            "status": {"phase": "Pending", "qosClass": "BestEffort"}}
