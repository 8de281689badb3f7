"""``prefetchd plan FILE...`` for training-job kinds: what would be warmed, on how many nodes.

Who calls this: :func:`prefetchd.cli.cmd_plan`, when :func:`claims` says the files hold a kind
of :data:`prefetchd.workloads.KINDS` (a cheap look at the top-level ``apiVersion`` lines, so
pipeline files are not parsed twice).

Data flow: each file is read with the same bounds as pipeline files (size, document count,
alias bombs; :mod:`prefetchd.pipeline._load`), every document is sorted into work (a kind
prefetchd reads), library (runtimes, trial-template ConfigMaps, priority classes, resource
flavors), PVC/PV (to resolve claims as the agent does, through a file-backed ClusterView) or
ignored (queues and the like, listed; but a kind we read under an apiVersion we do not read,
``apps/v1`` Job, is bad input, not ignored). Each work object is read with
:func:`prefetchd.workloads.read` and shown in warm order (:func:`prefetchd.workloads.order_key`):
state, queue and priority, pod groups with their constraints and datasets, and the datasets to
warm with their node counts. ``--pvc CLAIM=s3://...`` resolves a claim directly.

Bad input (a file that cannot be read, an object that cannot be read, a pipeline mixed in)
prints one line naming the file and object and returns 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from prefetchd import pipeline
from prefetchd.k8s import datasets as k8s_datasets
from prefetchd.k8s import placement
from prefetchd.pipeline import _load
from prefetchd.workloads import _queue_flavors, _registry, _resolve
from prefetchd.workloads._library import Library, is_library_object
from prefetchd.workloads._model import (
    DatasetRef,
    PodGroup,
    Resolver,
    UpcomingWork,
    WorkloadError,
    order_key,
    record_of,
    with_queue_record,
)

EXIT_BAD_INPUT = 2
_GROUPS = sorted(_registry.GROUPS, key=len, reverse=True)
_LIST_LINE = re.compile(r"^kind:\s*[\"']?List[\"']?\s*$", re.M)
_API_LINE = re.compile(
    r"^apiVersion:\s*[\"']?(" + "|".join(re.escape(g) for g in _GROUPS) + r")/", re.M)
# a kind we read under an apiVersion we do not (``apps/v1`` Job): ours to refuse, naming it
_KIND_LINE = re.compile(
    r"^kind:\s*[\"']?(" + "|".join(sorted({k.kind for k in _registry.KINDS})) + r")[\"']?\s*$",
    re.M)
RESOLVING_KINDS = ("PersistentVolumeClaim", "PersistentVolume")


def claims(files: list[str]) -> bool:
    """True when any file has a top-level ``apiVersion`` of a group whose kinds we read, or
    a top-level ``kind`` we read (under any apiVersion)."""
    for path in files:
        try:
            with open(path, "rb") as f:
                head = f.read(_load.MAX_FILE_BYTES + 1)
        except OSError:
            continue  # the pipeline loader reports it
        text = head.decode("utf-8", "replace")
        if _API_LINE.search(text) or _KIND_LINE.search(text):
            return True
        if text.lstrip().startswith("{") or _LIST_LINE.search(text):
            # a JSON manifest, or a List (kubectl get -o json / -o yaml): its items
            try:
                objs = [d for d in yaml.load_all(text, Loader=_load._Loader)
                        if isinstance(d, dict)]
            except yaml.YAMLError:
                continue
            for o in _unlisted(objs):
                if str(o.get("apiVersion") or "").split("/")[0] in _GROUPS or \
                        _registry.misfiled(o):
                    return True
    return False


def _unlisted(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents with each ``kind: List`` replaced by its items (as kubectl prints a
    multi-object get)."""
    out: list[dict[str, Any]] = []
    for d in docs:
        if d.get("kind") == "List" and isinstance(d.get("items"), list):
            out += [i for i in d["items"] if isinstance(i, dict)]
        else:
            out.append(d)
    return out


def _documents(path: str) -> list[dict[str, Any]]:
    try:
        size = os.stat(path).st_size
        if size > _load.MAX_FILE_BYTES:
            raise WorkloadError(f"{path}: file is {size} bytes, larger than the "
                                f"{_load.MAX_FILE_BYTES} byte limit")
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        raise WorkloadError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {e.start})") from None
    docs: list[dict[str, Any]] = []
    try:
        for i, d in enumerate(yaml.load_all(text, Loader=_load._Loader)):
            if d is None:
                continue
            if len(docs) >= _load.MAX_DOCUMENTS:
                raise WorkloadError(f"{path}: more than {_load.MAX_DOCUMENTS} YAML documents")
            where = path if i == 0 else f"{path} (document {i + 1})"
            _load._check_expanded_size(d, where)
            if not isinstance(d, dict):
                raise WorkloadError(f"{where}: a {type(d).__name__}, not a Kubernetes object")
            docs.append(d)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise WorkloadError(f"{path}:{line} malformed YAML: {problem}") from None
    except RecursionError:
        raise WorkloadError(f"{path}: YAML nested too deeply") from None
    except pipeline.PipelineError as e:
        raise WorkloadError(str(e)) from None
    return _unlisted(docs)


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


FileClusterView = k8s_datasets.ObjectsView  # PVCs and PVs given in the files


def load(files: list[str]) -> tuple[list[UpcomingWork], list[str], FileClusterView]:
    """The work in ``files`` (warm order), what was ignored, and the PVCs/PVs they hold."""
    library = Library()
    todo: list[tuple[str, dict[str, Any]]] = []
    ignored: list[str] = []
    volumes: list[Mapping[str, Any]] = []
    held: list[str] = []  # every object that is no work, for a refusal naming them
    for path in files:
        for d in _documents(path):
            if _registry.lookup(d) is None:
                held.append(_registry.describe(d))
            api = str(d.get("apiVersion") or "")
            if api.startswith("argoproj.io/") or "pipelineInfo" in d:
                raise WorkloadError(f"{path}: {_registry.describe(d)} is a pipeline; plan "
                                    "pipelines and training jobs in separate calls")
            if is_library_object(d):
                _check_configmap(d, path)
                if why := _queue_flavors.problem(d):  # (jobs round 55: read as if fine)
                    raise WorkloadError(f"{path}: {_registry.describe(d)}: {why}")
                library.add(d)
            elif _registry.lookup(d) is not None:
                todo.append((path, d))
            elif d.get("kind") in RESOLVING_KINDS and api == "v1" or (
                    d.get("kind"), api) == ("StorageClass", "storage.k8s.io/v1"):
                volumes.append(d)  # (a claim of a fusecache class: the PV it will get)
            elif why := _registry.misfiled(d):  # (blind job round 36: was ignored, unwarmed)
                raise WorkloadError(f"{path}: {_registry.describe(d)}: {why}")
            elif d.get("kind") == "Pod":  # (blind job round 46: listed without a word why)
                group = ((d.get("metadata") or {}).get("labels") or {}).get(
                    "kueue.x-k8s.io/pod-group-name")
                owner = f"pod group {group}'s Kueue Workload" if group else \
                    "Job or other owner"
                ignored.append(f"{_registry.describe(d)} (a pod: its {owner} is planned, "
                               "not it)")
            else:
                ignored.append(_registry.describe(d))
    if not todo:
        # (blind job round 35: name what the files held and every kind that is read)
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise WorkloadError(
            f"{', '.join(files)}: no training job, JobSet, Job, Katib Experiment/Trial or "
            f"Kueue Workload ({'only ' + shown if shown else 'nothing'}); read are "
            f"{', '.join(dict.fromkeys(k.kind for k in _registry.KINDS))}, and Argo and "
            "KFP pipelines in a call of their own")
    works = []
    for path, d in todo:
        try:
            works.append(_registry.read(d, library))
        except WorkloadError as e:
            raise WorkloadError(f"{path}: {e}") from None
    try:
        view = FileClusterView(volumes)
        for w in works:  # (the pods' own claims too: ephemeral volumes of such a class)
            resolve = _resolve.resolver_from_view(view, w.namespace)
            for g in w.groups:
                for ref in g.datasets:
                    if ref.claim:
                        resolve(ref)
    except ValueError as e:  # a fusecache StorageClass whose claims would never be made, a
        # PV whose attributes the node plugin refuses
        raise WorkloadError(f"{', '.join(files)}: {e}") from None
    return sorted(_as_the_agent_sees(works, ignored), key=order_key), ignored, view


def _check_configmap(d: Mapping[str, Any], path: str) -> None:
    """A ConfigMap whose ``data`` is not text by key: refused as pipeline files refuse it
    (:func:`prefetchd.pipeline._load.check_configmap`)."""
    if d.get("kind") != "ConfigMap":
        return
    try:
        _load.check_configmap(dict(d), path)
    except pipeline.PipelineError as e:
        raise WorkloadError(str(e)) from None


def _as_the_agent_sees(works: list[UpcomingWork], ignored: list[str]) -> list[UpcomingWork]:
    """Work whose owner is listed too is the owner's (prefetchd/k8s/workload_watch.py): a
    Kueue Workload lends its owner its queue state and priority, anything else (a Trial's
    run object, a CronJob's Job) is described by it; both go to *ignored*."""
    keys = {w.key: w for w in works}
    out = []
    left: set[str] = set()  # leftovers of an earlier owner of that name: nothing runs them
    for w in works:
        if w.owner and w.owner in keys:
            if not record_of(w, keys[w.owner]):
                left.add(w.key)
                ignored.append(f"{w.kind} {w.namespace}/{w.name} (left from an earlier "
                               f"{w.owner}: its owner reference names uid {w.owner_uid}, the "
                               f"one in the files is {keys[w.owner].uid})")
                continue
            if w.queue_record:
                keys[w.owner] = with_queue_record(keys[w.owner], w)
            ignored.append(f"{w.kind} {w.namespace}/{w.name} (its owner's: {w.owner})")
    for w in works:
        if not (w.owner and w.owner in keys) and w.key not in left:
            out.append(keys[w.key])
    return out


def unresolved_claim(ref: DatasetRef, namespace: str, view: FileClusterView) -> str:
    """Why a claim gives no dataset: made by the work from a template (new, empty; a pod's
    ephemeral one of a StorageClass that is not fusecache's, or whose prefix is the pod's
    name), or bound (in the files) to a volume that is not fusecache's, so nothing to warm;
    else where its location could come from."""
    claim, made = str(ref.claim), ref.made
    if ref.ephemeral_class is not None:
        cls = view.storage_class(ref.ephemeral_class) if ref.ephemeral_class else None
        what = ("a claim made for each pod from its ephemeral volume's template"
                if claim.startswith(k8s_datasets.POD_CLAIM) else
                f"claim {claim}, made by the job from its template") + \
            f", of StorageClass {ref.ephemeral_class or '(the default)'}"
        if cls is None:
            return (f"{what}, not in the files: nothing to warm unless that class is "
                    "fusecache's (give it with the job)")
        if cls.get("provisioner") != k8s_datasets.DRIVER_NAME:
            return f"{what} ({cls.get('provisioner')}), empty when it starts: nothing to warm"
        policy = (cls.get("parameters") or {}).get("prefixPolicy") or "pvcName"
        if policy == "volumeName":
            return f"{what}, a fresh empty prefix each (prefixPolicy volumeName): nothing to warm"
        if not claim.startswith(k8s_datasets.POD_CLAIM):
            return (f"{what}, whose prefix is named after the claim (prefixPolicy {policy}): "
                    f"new, empty unless an earlier run left data there: nothing to warm "
                    f"(--pvc {claim}=s3://BUCKET/PREFIX if it holds a dataset)")
        return (f"{what}, whose prefix holds the pod's name (prefixPolicy {policy}): known "
                "once the pod exists, when the node agent warms it")
    if made:
        return (f"a claim the job makes from its template, empty when it starts: nothing to "
                f"warm (--pvc {claim}=s3://BUCKET/PREFIX if it holds a dataset)")
    pvc = view.pvc(namespace, claim)
    pv_name = ((pvc or {}).get("spec") or {}).get("volumeName")
    pv = view.pv(pv_name) if pv_name else None
    if (problem := k8s_datasets.binding_problem(pvc, pv, namespace)) is not None:
        return (f"names PV {pv_name} but does not bind to it: {problem}; no pod using it "
                "starts, nothing to warm")
    if pv is not None:
        spec = pv.get("spec") or {}
        kind = (spec.get("csi") or {}).get("driver") or next(
            (k for k in spec if k not in ("accessModes", "capacity", "claimRef", "storageClassName",
                                          "persistentVolumeReclaimPolicy", "volumeMode",
                                          "mountOptions", "nodeAffinity")), "another volume")
        return f"bound to PV {pv_name} ({kind}), not a fusecache volume: nothing to warm"
    # (blind job round 56: every other case was "unresolved", without why)
    if pvc is None:
        elsewhere = [ns for ns in view.claims_named(claim) if ns != namespace]
        return (f"claim {namespace}/{claim} not in the files" + (
            f" (one of that name is in namespace {', '.join(elsewhere)}: a pod uses its own "
            "namespace's)" if elsewhere else "") +
            f": --pvc {claim}=s3://BUCKET/PREFIX, or give it and its PV")
    cls_name = str((pvc.get("spec") or {}).get("storageClassName") or "")
    cls = view.storage_class(cls_name) if cls_name else None
    if pv_name:
        return f"bound to PV {pv_name}, not in the files: --pvc {claim}=s3://BUCKET/PREFIX"
    if cls is not None and cls.get("provisioner") == k8s_datasets.DRIVER_NAME and \
            (cls.get("parameters") or {}).get("prefixPolicy") == "volumeName":
        return (f"not bound yet; StorageClass {cls_name} gives it a fresh empty prefix "
                "(prefixPolicy volumeName): nothing to warm")
    if cls is not None:
        return (f"not bound yet; StorageClass {cls_name} ({cls.get('provisioner')}) is not "
                "fusecache's: nothing to warm")
    reserved = view.reserved_for_others(namespace, claim)
    if reserved:  # (blind job round 59: "give its PV", though its PV was given)
        pv_other, other = reserved[0]
        return (f"not bound: PV {pv_other} in the files is reserved by its claimRef for "
                f"{other}, not {namespace}/{claim} (a claim binds only in its own namespace)")
    return ("not bound yet" + (f", of StorageClass {cls_name}, not in the files"
                                if cls_name else "") +
            f": --pvc {claim}=s3://BUCKET/PREFIX, or give its PV or StorageClass")


def resolver(work: UpcomingWork, pvc_map: Mapping[str, str], view: FileClusterView) -> Resolver:
    by_map = _resolve.resolver_from_map(pvc_map)
    by_view = _resolve.resolver_from_view(view, work.namespace)
    return lambda ref: by_map(ref) or by_view(ref)


def _constraints(g: PodGroup, view: FileClusterView, namespace: str) -> str:
    spec = g.spec
    parts = []
    for claim in k8s_datasets.spec_claims(spec):  # a bound PV's own (a local PV's host)
        for terms in k8s_datasets.volume_pins(view, namespace, [claim]):
            pv = ((view.pvc(namespace, claim) or {}).get("spec") or {}).get("volumeName")
            parts.append(f"PV {pv} of claim {claim} only on " + " or ".join(
                ",".join(f"{r.key} {r.operator} {'|'.join(r.values)}".rstrip()
                         for r in (*t.expressions, *t.fields)) for t in terms))
    parts += placement.describe(spec)
    return "; ".join(parts) or "no constraints"


def render(works: list[UpcomingWork], ignored: list[str], pvc_map: Mapping[str, str],
           view: FileClusterView) -> str:
    lines: list[str] = []
    for n, w in enumerate(works, 1):
        resolve = resolver(w, pvc_map, view)
        state = w.state.value
        if w.queue:
            state += f" in queue {w.queue}"
        if w.priority_class:
            state += f", priority {w.priority_class}" + \
                (f"={w.priority}" if w.priority is not None else " (value unknown)")
        elif w.priority is not None:
            state += f", priority {w.priority}"
        lines.append(f"{n}. {w.kind} {w.namespace}/{w.name}  [{w.api_version}]  {state}")
        copies = f" ({w.copies} trials at once)" if w.copies > 1 else ""
        pods = w.copies * sum(g.pods for g in w.groups)
        if pods != w.nodes:  # stages one after another: the widest at once, not the sum
            copies += (", " if copies else " at once, ") + f"{pods} pods in all"
        lines.append(f"   {'no pods to come' if w.state.done else _nodes(w.nodes) + copies}"
                     f"; pins released with {w.release_key}")
        stages = w.stages
        for g in w.groups:
            after = f" after {', '.join(g.after)}" if g.after else ""
            lines.append(f"   {g.name} x{g.pods}  stage {stages[g.name]}{after}: "
                         f"{_constraints(g, view, w.namespace)}")
            for ref in g.datasets:
                uri = resolve(ref)
                where = f" -> {uri}" if uri and uri != ref.uri else ""
                if ref.direction != "read" and not (ref.claim and uri):
                    lines.append(f"      unknown {ref.describe()}  ({ref.origin}) "
                                 "[read or written: not warmed]")
                    continue
                if ref.direction != "read":  # (a fusecache claim: read-only, so read)
                    where += " [a fusecache volume is read-only: read]"
                maker = w.made_by_another(g.name, ref, uri)
                if maker:
                    lines.append(f"      reads {ref.describe()}  ({ref.origin}){where} "
                                 f"[written by {maker} as the job runs: not warmed]")
                    continue
                if ref.claim and not uri:
                    where = f" ({unresolved_claim(ref, w.namespace, view)})"
                elif ref.uri and not ref.warmable:
                    where = pipeline.not_warmable(ref.uri)
                lines.append(f"      reads {ref.describe()}  ({ref.origin}){where}")
            for note in g.notes:
                lines.append(f"      note: {note}")
        targets = [] if w.state.done else w.targets(
            resolve, _resolve.pins_from_view(view, w.namespace))
        if w.state.done:  # as the agent does: its pins go, nothing is warmed for it
            lines.append(f"   warm: nothing ({w.state.value}: {w.state.why_nothing})")
        elif targets:
            lines.append("   warm:")
            for t in targets:
                lines.append(f"      {t.dataset}  on {_nodes(t.nodes)}  for {', '.join(t.groups)}"
                             f"  (stage {t.stage})")
        elif w.groups and not any(g.pods for g in w.groups):
            lines.append("   warm: nothing (no pod of it is to come; see its notes)")
        else:
            lines.append("   warm: nothing (no S3 dataset known before the run)")
        for note in w.notes:
            lines.append(f"   note: {note}")
    if ignored:
        lines.append(f"ignored: {', '.join(ignored)}")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    """``prefetchd plan`` over training-job files; 2 with one line on stderr for bad input."""
    if args.param:
        print("prefetchd: error: --param sets pipeline parameters; these files hold training "
              "jobs", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        pvc_map = pipeline.parse_pvc_map(dict(
            (p.split("=", 1) if "=" in p else (p, "")) for p in args.pvc or []))
        works, ignored, view = load(args.files)
        for claim in pipeline.unused_claims(pvc_map, (
                ref.claim for w in works for g in w.groups for ref in g.datasets)):
            print(f"prefetchd: warning: --pvc {claim}: no pod of these files reads from a "
                  "claim of that name; not used", file=sys.stderr)
        if args.json:
            out = []
            for n, w in enumerate(works, 1):
                resolve = resolver(w, pvc_map, view)
                doc = w.to_json(resolve, _resolve.pins_from_view(view, w.namespace))
                doc["warm_order"] = n
                for g, gdoc in zip(w.groups, doc["groups"], strict=True):
                    for ref, rdoc in zip(g.datasets, gdoc["datasets"], strict=True):
                        if ref.claim and rdoc.get("resolved") is None:
                            # (blind job round 56: the text said why, the JSON did not;
                            # round 58: the same why as the text's)
                            maker = w.made_by_another(g.name, ref, resolve(ref))
                            rdoc["unresolved"] = (
                                f"written by {maker} as the job runs: not warmed" if maker
                                else unresolved_claim(ref, w.namespace, view))
                out.append(doc)
            sys.stdout.write(json.dumps({"schema": "prefetchd-work-plan/1", "work": out,
                                         "ignored": ignored}, indent=2) + "\n")
        else:
            print(render(works, ignored, pvc_map, view))
    except (WorkloadError, pipeline.PipelineError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"prefetchd: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
