"""YAML front door: bounded, alias-safe multi-document loading and format detection.

Everything a user (or the CI that drops files into a watch folder) hands us passes
through here first, so this is where hostile input is stopped: files over
`MAX_FILE_BYTES`, alias "billion laughs" bombs (the expanded size is measured
without expanding), recursive aliases, and documents that are not pipelines nor what a
pipeline is given with (its claims and their PVs: ``volume``; the ConfigMaps and Secrets its
steps take env vars and parameters from: ``config``, a ConfigMap's data checked as the API
server checks it, a Secret's never read).
Every error is a `PipelineError` whose message names the file and, where there is
one, the line or the field.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import yaml

from prefetchd.pipeline._model import PipelineError

log = logging.getLogger(__name__)

# Compiled pipelines with embedded component code are a few hundred KiB; a
# generated 2,000-step workflow is about 1 MiB. 32 MiB leaves room and still
# bounds what one bad file can make us hold in memory.
MAX_FILE_BYTES = 32 * 1024 * 1024
# Upper bound on the number of nodes a file expands to once aliases are followed.
# A 2,000-step workflow is ~100k nodes; an alias bomb is billions.
MAX_EXPANDED_NODES = 5_000_000
MAX_DOCUMENTS = 64

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """The safe loader (libyaml's when present), refusing a key a mapping holds twice: the
    API server's decoder (and kubectl) refuse it too, and taking the last one silently
    loses what the first said (blind job round 42: a container's second ``env:`` dropped
    the variable its ``--data=$(DATA)`` named). Keys merged in by ``<<:`` may be
    overridden, as YAML means them to be."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"mapping key {key.value!r} given twice", key.start_mark)
                seen.add(key.value)
        return super().construct_mapping(node, deep=deep)

ARGO_KINDS = ("Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow")


@dataclass
class Document:
    """One YAML document with where it came from and what it is."""

    source: str  # file path or a caller-given label
    index: int  # position in its file (0-based)
    data: dict[str, Any]
    # kfp-v2-ir | kfp-v2-platform | kfp-v2-argo | kfp-v1-argo | argo | volume | config
    kind: str

    @property
    def label(self) -> str:
        return self.source if self.index == 0 else f"{self.source} (document {self.index + 1})"


def load_file(path: str) -> list[Document]:
    """Read a file and classify each document; raise PipelineError naming the file."""
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise PipelineError(f"{path}: cannot read: {e.strerror or e}") from None
    if size > MAX_FILE_BYTES:
        raise PipelineError(
            f"{path}: file is {size} bytes, larger than the {MAX_FILE_BYTES} byte limit"
        )
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise PipelineError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PipelineError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return load_text(text, path)


def load_text(text: str, source: str) -> list[Document]:
    """Parse YAML text (possibly several documents) into classified documents."""
    docs: list[Any] = []
    try:
        for d in yaml.load_all(text, Loader=_Loader):
            if d is None:
                continue
            docs.append(d)
            if len(docs) > MAX_DOCUMENTS:
                raise PipelineError(f"{source}: more than {MAX_DOCUMENTS} YAML documents")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise PipelineError(f"{source}:{where} malformed YAML: {problem}") from None
    except RecursionError:
        raise PipelineError(f"{source}: YAML nested too deeply") from None
    if not docs:
        raise PipelineError(f"{source}: empty file, not a pipeline")
    out = []
    for i, d in enumerate(docs):
        _check_expanded_size(d, f"{source}" if i == 0 else f"{source} (document {i + 1})")
        if not isinstance(d, dict):
            raise PipelineError(
                f"{source}: document {i + 1} is a {type(d).__name__}, not a pipeline"
            )
        out.append(Document(source, i, d, classify(d, source, i)))
    return out


def documents_from_dicts(objs: list[dict[str, Any]], source: str = "<api>") -> list[Document]:
    """Classify already-parsed objects (e.g. Workflows fetched from the API server)."""
    out = []
    for i, d in enumerate(objs):
        if not isinstance(d, dict):
            raise PipelineError(f"{source}: object {i + 1} is a {type(d).__name__}, not a pipeline")
        _check_expanded_size(d, source)
        out.append(Document(source, i, d, classify(d, source, i)))
    return out


VOLUME_KINDS = ("PersistentVolumeClaim", "PersistentVolume")
# given beside a pipeline (``kubectl get cm,workflow -o yaml``): a ConfigMap's data fills
# in the env vars and parameters its steps take from it; a Secret's data is never read
CONFIG_KINDS = ("ConfigMap", "Secret")


def classify(d: dict[str, Any], source: str, index: int) -> str:
    """Tell the pipeline format of one document, or refuse it."""
    if "pipelineInfo" in d and ("root" in d or "components" in d or "deploymentSpec" in d):
        return "kfp-v2-ir"
    if "platforms" in d and isinstance(d["platforms"], dict):
        return "kfp-v2-platform"
    api = d.get("apiVersion")
    kind = d.get("kind")
    if isinstance(api, str) and api.startswith("argoproj.io/"):
        if kind not in ARGO_KINDS:
            raise PipelineError(
                f"{source}: kind {kind!r} is not a Workflow, WorkflowTemplate, "
                "ClusterWorkflowTemplate or CronWorkflow"
            )
        spec = d.get("spec")
        if not isinstance(spec, dict):
            raise PipelineError(f"{source}: field spec: missing or not a mapping")
        if kind == "CronWorkflow":
            spec = spec.get("workflowSpec")
            if not isinstance(spec, dict):
                raise PipelineError(f"{source}: field spec.workflowSpec: missing or not a mapping")
        args = spec.get("arguments") or {}
        params = args.get("parameters") if isinstance(args, dict) else None
        if isinstance(params, list) and any(
            isinstance(p, dict) and p.get("name") == "components-root" for p in params
        ):
            return "kfp-v2-argo"
        meta = d.get("metadata") or {}
        if not isinstance(meta, dict):
            raise PipelineError(f"{source}: field metadata: not a mapping")
        marks = [k for f in ("annotations", "labels") if isinstance(meta.get(f), dict)
                 for k in meta[f]]
        if any(isinstance(k, str) and k.startswith("pipelines.kubeflow.org/") for k in marks):
            return "kfp-v1-argo"
        return "argo"
    if api == "v1" and kind in VOLUME_KINDS:
        return "volume"  # a claim (and its PV) the pipeline mounts: resolves --pvc for it
    if api == "v1" and kind in CONFIG_KINDS:
        if kind == "ConfigMap":
            check_configmap(d, source)
        return "config"  # what its steps' env and parameters come from
    where = f"document {index + 1}" if index else "file"
    if kind == "Pod":  # a Kueue pod group's pods, a pod written by hand
        raise PipelineError(f"{source}: {where} is a 'Pod' ({api}), not a pipeline nor a kind "
                            "of work prefetchd reads (plan its Job, or a pod group's Kueue "
                            "Workload)")
    if kind:
        raise PipelineError(f"{source}: {where} is a {kind!r} ({api}), not a pipeline")
    raise PipelineError(
        f"{source}: {where} is not a pipeline (no KFP pipelineInfo/root, no Argo apiVersion/kind)"
    )


CONFIGMAP_MAX_BYTES = 1 << 20  # the API server's bound on a ConfigMap's data


def check_configmap(d: dict[str, Any], source: str) -> None:
    """A ConfigMap whose ``data`` is not text by key (``train.yaml:`` given a mapping, not a
    string): the API server refuses it, and a value read from it would be a guess. Pipeline
    files and training-job files (prefetchd/workloads/plan_cli.py) alike."""
    data = d.get("data")
    where = f"{source}: ConfigMap {(d.get('metadata') or {}).get('name')}: data"
    if data is not None and not isinstance(data, dict):
        raise PipelineError(f"{where}: expected a mapping of strings, got "
                            f"{type(data).__name__}")
    size = 0
    for key, value in (data or {}).items():
        if not isinstance(value, str):
            raise PipelineError(f"{where}[{key}]: expected a string, got "
                                f"{type(value).__name__} (quote it, or use a block scalar)")
        size += len(str(key).encode()) + len(value.encode())
    binary = d.get("binaryData")
    for key, value in (binary.items() if isinstance(binary, dict) else ()):
        size += len(str(key).encode()) + len(str(value)) * 3 // 4  # (base64: 3 bytes in 4)
    if size > CONFIGMAP_MAX_BYTES:  # (blind job round 50: 1.07 MiB was planned)
        raise PipelineError(f"{where}: {size} bytes, more than the {CONFIGMAP_MAX_BYTES} "
                            "(1 MiB) the API server takes in a ConfigMap")


def _check_expanded_size(doc: Any, source: str) -> None:
    """Refuse alias bombs and recursive aliases without expanding them.

    Shared (aliased) subtrees are sized once and multiplied, so the check costs
    the size of the file, not of its expansion.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()
    # iterative post-order walk
    stack: list[tuple[Any, bool]] = [(doc, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        nid = id(node)
        if done:
            children = node.values() if isinstance(node, dict) else node
            total = 1
            for c in children:
                if isinstance(c, (dict, list)):
                    total += sizes[id(c)]
                else:
                    total += 1
            if isinstance(node, dict):
                total += len(node)
            sizes[nid] = total
            active.discard(nid)
            if total > MAX_EXPANDED_NODES:
                raise PipelineError(
                    f"{source}: YAML expands to more than {MAX_EXPANDED_NODES} nodes (alias bomb?)"
                )
            continue
        if nid in sizes:
            continue
        if nid in active:
            raise PipelineError(f"{source}: recursive YAML alias")
        active.add(nid)
        stack.append((node, True))
        children = node.values() if isinstance(node, dict) else node
        for c in children:
            if isinstance(c, (dict, list)):
                if id(c) in active:
                    raise PipelineError(f"{source}: recursive YAML alias")
                if id(c) not in sizes:
                    stack.append((c, False))
