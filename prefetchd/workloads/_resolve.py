"""Turning a :class:`~prefetchd.workloads._model.DatasetRef` into the S3 location to warm.

Who calls this: ``prefetchd plan`` (``resolver_from_map``, from ``--pvc CLAIM=s3://...``) and,
to be wired, the node agent and the webhook (``resolver_from_view``, over the same
:class:`prefetchd.k8s.datasets.ClusterView` they use for pods: PVC -> bound PV -> the
fusecache CSI driver's ``bucket``/``prefix`` volume attributes). A PVC that is not bound, or
not backed by fusecache, resolves to None (nothing to warm). S3 URIs pass through (s3a:// as
s3://); other schemes and runtime-only refs resolve to None.
"""

from __future__ import annotations

from collections.abc import Mapping

from prefetchd.k8s import datasets as k8s_datasets
from prefetchd.pipeline._pvc import dataset_under
from prefetchd.workloads._model import DatasetRef, Pins, Resolver, s3_only


def resolver_from_map(pvc_map: Mapping[str, str]) -> Resolver:
    """Claims resolved through a name -> ``s3://bucket/prefix`` map (``plan --pvc``)."""

    def resolve(ref: DatasetRef) -> str | None:
        if ref.claim is not None:
            if ref.direction != "read":  # (a writable claim the user maps: maybe written)
                return None
            base = pvc_map.get(ref.claim)
            return dataset_under(base.replace("s3a://", "s3://", 1), ref.path) if base else None
        return s3_only(ref)

    return resolve


def resolver_from_view(view: k8s_datasets.ClusterView, namespace: str,
                       driver: str = k8s_datasets.DRIVER_NAME) -> Resolver:
    """Claims in ``namespace`` resolved through the API: PVC -> PV -> fusecache CSI attributes.
    A path the pod may read or write (``direction`` unknown) resolves too: on a fusecache
    volume, which is read-only, it can only be read; on any other it resolves to None."""

    def resolve(ref: DatasetRef) -> str | None:
        if ref.claim is None:
            return s3_only(ref)
        if ref.ephemeral_class is not None:  # a pod's own claim: its name is the pod's;
            # or one the work makes (a JobSet's): bound once made, else as its class makes it
            volume = ref.claim.removeprefix(k8s_datasets.POD_CLAIM)
            found = None if ref.claim.startswith(k8s_datasets.POD_CLAIM) else \
                k8s_datasets.claim_dataset(view, namespace, ref.claim, driver)
            found = found or k8s_datasets.ephemeral_dataset(view, namespace, "", volume,
                                                            ref.ephemeral_class, driver)
            return dataset_under(found.location, ref.path) if found else None
        # (a PV whose claimRef names another claim is that claim's, not this one's)
        found = k8s_datasets.claim_dataset(view, namespace, ref.claim, driver)
        return dataset_under(found.location, ref.path) if found else None

    return resolve


def pins_from_view(view: k8s_datasets.ClusterView, namespace: str) -> Pins:
    """A PodSpec's bound claims in ``namespace`` -> their PVs' node affinity, through the
    same view claims resolve through (``k8s_datasets.volume_pins``)."""
    return lambda spec: k8s_datasets.spec_pins(view, namespace, spec)
