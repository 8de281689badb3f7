"""Pipeline analysis: which step reads which dataset, and in which order steps start.

Public API (stable; the Kubernetes watcher of issue 5 calls `analyze_documents`):

    analyze(paths, params={}, pvc_map={}) -> Plan
        Files (one or more YAML documents each) that hold exactly one runnable
        pipeline, plus any WorkflowTemplates it references (a templateRef to one in
        none of the files is a PipelineError) and what it is shipped with: PVCs and
        PVs (its claims' locations), ConfigMaps (the values of the env vars and Argo
        parameters its steps take from them), Secrets (taken, never read). Files of
        only those are a PipelineError: nothing to plan.
    analyze_all(paths, params={}, pvc_map={}) -> list[Plan]
        Same, one Plan per runnable pipeline found in the files.
    analyze_documents(docs, params={}, pvc_map={}, source="<api>") -> list[Plan]
        Already-parsed objects (dicts), e.g. Workflows fetched from the API server
        (a templateRef to a template not among them: a warning, its steps left out).
    Plan.to_json() / Plan.steps[i].{id, depends_on, stage, reads, pvc_mounts, loop,
        condition, exit_handler, waits_for, phase} / Plan.datasets()  (warmable s3:// URIs
        in plan order) / Plan.suspends (Argo suspend steps: no pod, but what follows waits)
    A Workflow object with a `status` (``kubectl get -o yaml`` mid-flight, or the API
    server's object in the agent) gives `Plan.phase` and each step's `phase` from
    `status.nodes` (`_status`): `datasets()` leaves out what started steps read, and
    is empty once the workflow has finished.
    PipelineError: bad input; str(e) is one line naming the file and the field.

`params` overrides pipeline parameters by name (values as strings, converted to
the declared KFP type); an unknown name is an error. `pvc_map` maps a claim name
(or a volumeClaimTemplates name) to the S3 prefix behind it (`s3://bucket/prefix`):
reads through that PVC (its mount, or paths under the mount named in args) then
become S3 reads (`_pvc`). `map_mounts(plan, locate)` does the same with a callback
(the Kubernetes agent locates claims on the cluster; `claim_name` says which claim a
mount uses in a given Workflow); `unresolved_mounts(plan)` lists the mounts left
without a location, with the flag that would resolve each.

Design. Loading (`_load`) is bounded and alias-safe and classifies each
document: KFP v2 IR (+ platform spec), KFP v2 compiled to Argo, KFP v1 Argo,
plain Argo. Runnable documents go to a front end (`_kfp2`, `_argo`) that walks
the pipeline as its engine would expand it, carrying every parameter as a `Val`
(candidate strings + provenance), so a location is known before the run
(`static`) or reported as runtime-only with its pattern, never guessed and never
dropped. Front ends emit `Step`s with their direct predecessors; control-flow
groups are not steps, and a dependency on a group is a dependency on every step
inside it. `_model.finish_plan` then computes the transitive closure, the
reduction (`depends_on`) and stages for every format alike. Read vs write is
decided in `_uri` from command-line conventions. Invariants: step ids are unique
within a plan; every id in `depends_on` is a step of the plan; `static` reads have
a `uri`. Everything here is pure and synchronous (no I/O beyond reading the
given files), so callers may run it in a worker thread.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from fusecache.config import S3Location
from fusecache.errors import ConfigError
from prefetchd.pipeline import _argo, _kfp2, _load, _pvc, _status
from prefetchd.pipeline._load import Document
from prefetchd.pipeline._model import (
    Loop,
    PipelineError,
    Plan,
    PvcMount,
    Read,
    Step,
    Suspend,
    finish_plan,
    name_shared_steps,
    not_warmable,
    settle_intermediates,
)

if TYPE_CHECKING:
    from prefetchd.workloads._library import Library

log = logging.getLogger(__name__)

__all__ = [
    "analyze",
    "analyze_all",
    "analyze_documents",
    "Plan",
    "Step",
    "Read",
    "PvcMount",
    "Loop",
    "Suspend",
    "PipelineError",
    "parse_pvc_map",
    "claim_name",
    "map_mounts",
    "unresolved_mounts",
    "describe_mount",
    "not_warmable",
]

claim_name = _pvc.claim_name
map_mounts = _pvc.map_mounts
unresolved_mounts = _pvc.unresolved
describe_mount = _pvc.describe

RUNNABLE_ARGO = ("Workflow", "CronWorkflow")


def analyze(
    paths: Iterable[str],
    params: Mapping[str, str] | None = None,
    pvc_map: Mapping[str, str] | None = None,
) -> Plan:
    """The one runnable pipeline held by `paths`; PipelineError if there are none or several."""
    plans = analyze_all(paths, params, pvc_map)
    if len(plans) != 1:
        raise PipelineError(f"{', '.join(paths)}: hold {len(plans)} pipelines; use analyze_all")
    return plans[0]


def analyze_all(
    paths: Iterable[str],
    params: Mapping[str, str] | None = None,
    pvc_map: Mapping[str, str] | None = None,
) -> list[Plan]:
    docs: list[Document] = []
    for p in paths:
        docs.extend(_load.load_file(p))
    return _analyze(docs, dict(params or {}), dict(pvc_map or {}), given_files=True)


def analyze_documents(
    docs: list[dict[str, Any]],
    params: Mapping[str, str] | None = None,
    pvc_map: Mapping[str, str] | None = None,
    source: str = "<api>",
) -> list[Plan]:
    """Analyse already-parsed objects (e.g. a Workflow from the API server, as a dict)."""
    return _analyze(
        _load.documents_from_dicts(docs, source), dict(params or {}), dict(pvc_map or {})
    )


# a claim's name: a DNS-1123 subdomain, as the API server checks it (no namespace in it)
_CLAIM_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")


def parse_pvc_map(pvc_map: Mapping[str, str]) -> dict[str, str]:
    """``--pvc CLAIM=s3://BUCKET/PREFIX`` pairs, checked: a claim's name as the API server
    takes it, a location a mount could take; PipelineError naming the bad one."""
    out = {}
    for claim, uri in pvc_map.items():
        if claim and (len(claim) > 253 or not _CLAIM_NAME.fullmatch(claim)):
            raise PipelineError(
                f"--pvc {claim}={uri}: {claim!r} is no claim name (lowercase letters, digits, "
                "'-' and '.'; the claim of the namespace the work runs in, with no namespace "
                "before it)")
        if (
            not claim
            or not uri.startswith(("s3://", "s3a://"))
            or len(uri.split("://", 1)[1].strip("/")) == 0
        ):
            raise PipelineError(f"--pvc {claim}={uri}: expected CLAIM=s3://BUCKET[/PREFIX]")
        try:  # the bucket and prefix a mount of it would take (the CSI driver's check)
            S3Location.parse("s3://" + uri.split("://", 1)[1])
        except ConfigError as e:
            raise PipelineError(f"--pvc {claim}={uri}: {e}") from None
        out[claim] = uri
    return out


def unused_claims(pvc_map: Mapping[str, str], claims: Iterable[str | None]) -> list[str]:
    """The claims ``--pvc`` maps that none of *claims* (those the files mount) is: a typo, or
    a claim of other work, named on stderr so a mapping that does nothing is not silent."""
    used = set(claims)
    return [c for c in pvc_map if c not in used]


def _analyze(docs: list[Document], params: dict[str, str], pvc_map: dict[str, str],
             given_files: bool = False) -> list[Plan]:
    """The plans of *docs*; *given_files*: they are all the user gave (a step's templateRef
    to a template in none of them is an error, not a warning)."""
    pvc_map = parse_pvc_map(pvc_map)
    volumes = [d.data for d in docs if d.kind == "volume"]
    if volumes:  # claims given with the pipeline, bound to fusecache PVs; --pvc wins
        from prefetchd.k8s import datasets as k8s_datasets  # (it imports this package)

        pvc_map = {**k8s_datasets.ObjectsView(volumes).claim_locations(), **pvc_map}
    configmaps = _configmaps(docs)
    library = _argo.library_of(docs)
    runnable: list[Document] = []
    platforms = [d for d in docs if d.kind == "kfp-v2-platform"]
    irs = [d for d in docs if d.kind == "kfp-v2-ir"]
    for d in docs:
        if d.kind in ("kfp-v2-ir", "kfp-v2-argo") or (
            d.kind in ("argo", "kfp-v1-argo") and d.data.get("kind") in RUNNABLE_ARGO
        ):
            runnable.append(d)
    if not runnable:
        runnable = [
            d
            for d in docs
            if d.kind in ("argo", "kfp-v1-argo") and (d.data.get("spec") or {}).get("entrypoint")
        ]
    if not runnable:
        src = ", ".join(sorted({d.source for d in docs})) or "<none>"
        if docs and all(d.kind in SIDE_KINDS for d in docs):
            raise PipelineError(_nothing_to_plan(docs))
        raise PipelineError(
            f"{src}: no runnable pipeline (a KFP PipelineSpec, or an Argo Workflow/CronWorkflow "
            "or WorkflowTemplate with an entrypoint)"
        )
    plans = []
    for d in runnable:
        try:
            d = _argo.resolve_template_ref(d, docs)
            plans.append(_analyze_one(d, library, platforms, irs, params, pvc_map,
                                      given_files, configmaps))
        except PipelineError:
            raise
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
            # A field of the wrong shape deep in a document: name the document
            # rather than crash (the front end's contract, fuzzed in the tests).
            raise PipelineError(
                f"{d.label}: malformed {d.kind} document ({type(e).__name__}: {e})"
            ) from None
    return plans


# documents a pipeline is given with, planned only with it: claims and PVs, ConfigMaps, Secrets
SIDE_KINDS = ("volume", "config")


def _nothing_to_plan(docs: list[Document]) -> str:
    """Why files holding only side documents (a ConfigMap, a PVC) are refused: no pipeline."""
    what = list(dict.fromkeys(f"{d.data.get('kind')!r} ({d.data.get('apiVersion')})"
                              for d in docs))
    why = ("nothing to plan (a ConfigMap, Secret, PVC or PV is read with the pipeline that "
           "uses it: give that too, in the same file or another)")
    if len(docs) == 1:
        return f"{docs[0].source}: file is a {what[0]}, not a pipeline: {why}"
    src = ", ".join(dict.fromkeys(d.source for d in docs))
    return f"{src}: only {', '.join(what)} documents, not a pipeline: {why}"


def _configmaps(docs: list[Document]) -> Library | None:
    """The ConfigMaps given with the pipelines, looked up as the training-job plan looks up
    its own (prefetchd.workloads._library); None when there are none. Secrets are left out:
    their data is never read."""
    objs = [d.data for d in docs if d.kind == "config" and d.data.get("kind") == "ConfigMap"]
    if not objs:
        return None
    from prefetchd.workloads._library import Library as _Library  # (it imports this package)

    return _Library(objs)


def _analyze_one(d: Document, library: Any, platforms: list[Document], irs: list[Document],
                 params: dict[str, str], pvc_map: dict[str, str],
                 given_files: bool = False, configmaps: Library | None = None) -> Plan:
    """The plan of one runnable document; *configmaps*: those given with it (Argo steps'
    env vars and parameters from them)."""
    if d.kind == "kfp-v2-ir":
        # the platform spec is the next document of the same file
        plat = next(
            (p for p in platforms if p.source == d.source and p.index == d.index + 1), None
        )
        if plat is None and len(irs) == 1 and len(platforms) == 1:
            plat = platforms[0]
        plan = _kfp2.Kfp2Analyzer(
            d.data, plat.data if plat else None, d.label, params
        ).analyze()
    elif d.kind == "kfp-v2-argo":
        ir, plat_d, run_values, ws, name = _kfp2.ir_from_argo(d)
        plan = _kfp2.Kfp2Analyzer(
            ir,
            plat_d,
            d.label,
            params,
            fmt="kfp-v2-argo",
            kind="Workflow",
            run_values=run_values,
            workspace=ws,
            name=name,
        ).analyze()
    else:
        plan = _argo.ArgoAnalyzer(d, library, params, given_files, configmaps).analyze()
    finish_plan(name_shared_steps(plan))
    _status.apply(plan, d.data)  # a live Workflow: what has started, whether it is done
    if pvc_map:
        _pvc.map_from_flags(plan, pvc_map)
    return settle_intermediates(plan)
