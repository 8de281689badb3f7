"""Reads through PVCs: a step's claim mounts become S3 reads once the claims are located.

Who calls this: :func:`prefetchd.pipeline._analyze_one` (``--pvc CLAIM=s3://...`` of ``plan``,
``warm --pipeline``, ``run --watch-dir``) and the Kubernetes agent (prefetchd/k8s/agent.py),
which locates claims on the cluster (PVC -> PV of the fusecache driver -> bucket/prefix).

Data flow: a front end (``_argo``, ``_kfp2``) leaves :class:`PvcMount` records on each step
(claim name when known before the run, else how it is made: a ``volumeClaimTemplates`` entry,
a claim created in the run, a required parameter) and the absolute paths the step names on
its command line (``Step.path_mentions``). :func:`claim_name` says which claim a mount will
use in a given run (for a template claim, Argo's ``<workflow>-<template>``); :func:`map_mounts`
asks a ``locate`` callback for the S3 prefix behind each mount and adds the reads: the whole
prefix (narrowed by ``subPath``), or only the sub-prefixes of the paths under the mount that
the step names and reads (:func:`narrow`). Paths are normalised first (trailing slashes,
``.``/``..``, a path equal to the mount point), so ``--data-dir /data/`` reads the mount itself.
A loop's mount is one :class:`PvcMount` per ``subPath`` its items give (``_argo``); a
``subPath`` only the run knows (still holding ``{{...}}``) gives a run-time read, never a
location to warm.
:func:`unresolved` lists the mounts left without a location, for ``plan``/``warm`` to name.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any

from prefetchd.pipeline._model import Plan, PvcMount, Read, Step
from prefetchd.pipeline._uri import location_under

_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")


def join(prefix: str, *parts: str) -> str:
    """``s3://b/p`` + ``a/b`` -> ``s3://b/p/a/b/`` (a prefix ends with one slash)."""
    out = prefix.rstrip("/")
    for p in parts:
        p = posixpath.normpath("/" + p).strip("/") if p else ""
        if p:
            out += "/" + p
    return out + "/"


def narrow(base: str, rel: str) -> str:
    """The dataset of a path ``rel`` under a mount of ``base``: the mount itself when empty.

    No trailing slash: the path may name a file (``labels.csv``) or a folder, and the warmer
    reads ``s3://b/p/train`` as the folder ``train/`` when no such object exists. The webhook
    and the agent's pod path (prefetchd/k8s/datasets.py) use this too, so a step's dataset has
    one name everywhere (placement hashes it).
    """
    rel = posixpath.normpath("/" + rel).strip("/") if rel else ""
    return base.rstrip("/") + "/" + rel if rel else base


def dataset_under(base: str, path: str) -> str:
    """The dataset of ``path`` under a volume of ``base`` (``s3://b/p/``): the volume itself
    when ``path`` is empty, a folder when it ends in ``/`` (a ``subPath``), else the named
    path as :func:`narrow` names it (maybe a file). The training-job adapters
    (prefetchd/workloads) hand paths over in this form, so they name a dataset as the pod
    path does."""
    if path.endswith("/"):
        return join(base, path)
    return narrow(join(base), path)


def relative_under(path: str, mount_path: str) -> str | None:
    """``path`` relative to ``mount_path`` after normalising both; None when not under it.

    ``/data/``, ``/data/.`` and ``/data`` are the mount itself (``""``); ``/data/a/../b`` is
    ``b``; ``/data/../etc`` is not under ``/data``.
    """
    if not path.startswith("/") or not mount_path.startswith("/"):
        return None
    mp = posixpath.normpath(mount_path)
    p = posixpath.normpath(path)
    if mp == "/":
        return p.lstrip("/")
    if p == mp:
        return ""
    if p.startswith(mp + "/"):
        return p[len(mp) + 1:]
    return None


def claim_name(m: PvcMount, workflow: Mapping[str, Any] | None = None) -> str | None:
    """The claim a mount uses in this run, or None when only the run will say.

    A literal (or parameter-resolved) claim as is. A ``volumeClaimTemplates`` claim: what the
    Workflow's ``status.persistentVolumeClaims`` records for it, else Argo's name for it,
    ``<workflow name>-<template name>``. A claim pattern (a resource template creating a PVC)
    whose only placeholders are ``workflow.name``/``workflow.namespace``/``workflow.uid``.
    """
    if m.claim:
        return m.claim
    meta = (workflow or {}).get("metadata") or {}
    if m.volume_claim_template:
        for vol in ((workflow or {}).get("status") or {}).get("persistentVolumeClaims") or []:
            if isinstance(vol, dict) and vol.get("name") == m.volume_claim_template:
                claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
                if claim:
                    return str(claim)
        if meta.get("name"):
            return f"{meta['name']}-{m.volume_claim_template}"
        return None
    if m.claim_pattern and meta.get("name"):
        known = {"workflow.name": meta.get("name"), "workflow.namespace": meta.get("namespace"),
                 "workflow.uid": meta.get("uid")}
        missing = False

        def sub(mt: re.Match[str]) -> str:
            nonlocal missing
            v = known.get(mt.group(1))
            if not v:
                missing = True
                return mt.group(0)
            return str(v)

        name = _PLACEHOLDER.sub(sub, m.claim_pattern)
        if not missing and "<" not in name and "{{" not in name:
            return name
    return None


def map_mounts(plan: Plan, locate: Callable[[Step, PvcMount], str | None]) -> None:
    """Reads through located mounts become reads of the S3 prefix behind the claim.

    Paths under the mount named in the command line narrow the read to that sub-prefix (a
    path the step writes is not a read); a mount no path names is read as a whole.
    """
    for s in plan.steps:
        for m in s.pvc_mounts:
            if m.s3_prefix:
                continue
            loc = locate(s, m)
            if not loc or not m.mount_path:
                continue
            base = join(loc, m.sub_path)
            m.s3_prefix = base
            via = claim_name(m) or m.volume_claim_template or m.claim_pattern
            named = [(rel, d) for p, d in s.path_mentions
                     if (rel := relative_under(p, m.mount_path)) is not None]
            if not named:
                s.add_read(_mount_read(base, via))
                continue
            # a file the step writes there first (aws s3 cp s3://x /work/a.gz; then reads
            # /work/a.gz) is its own, not the claim's data: no read
            made = [rel for rel, d in named if d == "write"]
            for rel, d in named:
                if d == "read" and not any(location_under(rel, w) for w in made):
                    s.add_read(_mount_read(narrow(base, rel), via))


def _mount_read(uri: str, via: str | None) -> Read:
    """A read through a claim's mount; one under a ``subPath`` only the run knows
    (``{{workflow.uid}}``, another step's output) is run-time: its place shown, nothing warmed
    there (blind job round 40 warmed ``.../clips/{{inputs.parameters.month}}/``)."""
    if "{{" in uri:
        return Read(None, False, "pvc", pattern=uri, via_pvc=via)
    return Read(uri, True, "pvc", via_pvc=via)


def map_from_flags(plan: Plan, pvc_map: Mapping[str, str]) -> None:
    """``--pvc NAME=s3://...``: NAME is the claim, or a ``volumeClaimTemplates`` name."""
    def locate(_s: Step, m: PvcMount) -> str | None:
        for key in (m.claim, m.volume_claim_template, m.claim_pattern):
            if key and key in pvc_map:
                return pvc_map[key]
        return None

    map_mounts(plan, locate)


def unresolved(plan: Plan) -> list[tuple[str, PvcMount, str]]:
    """(step id, mount, hint) for every mount no location was found for (data unknown).

    The hint is the flag that would resolve it, e.g. ``--pvc imagenet=s3://BUCKET/PREFIX``,
    or for a claim named by a required parameter ``--param P=CLAIM --pvc CLAIM=s3://...``.
    """
    out = []
    for s in plan.steps:
        for m in s.pvc_mounts:
            if m.s3_prefix:
                continue
            name = m.claim or m.volume_claim_template
            if m.volume_claim_template or m.created_by:
                # a volumeClaimTemplates / CreatePVC / VolumeOp volume: new, empty at the start
                hint = ("a volume the run creates, empty when it starts: nothing to warm"
                        + (f" (--pvc {name}=s3://BUCKET/PREFIX if it holds a dataset)"
                           if name else ""))
            elif name:
                hint = f"--pvc {name}=s3://BUCKET/PREFIX"
            elif m.parameter:
                hint = f"--param {m.parameter}=CLAIM --pvc CLAIM=s3://BUCKET/PREFIX"
            else:
                hint = ("claim made during the run"
                        + (f" ({m.claim_pattern})" if m.claim_pattern else "")
                        + ": known only on the cluster")
            out.append((s.id, m, hint))
    return out


def describe(m: PvcMount) -> str:
    """How ``plan`` names a mount's claim: the name, else ``<how it is made>``."""
    return m.claim or f"<{m.claim_pattern or m.volume_claim_template or m.claim_origin}>"
