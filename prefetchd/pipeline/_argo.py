"""Argo Workflow / WorkflowTemplate / ClusterWorkflowTemplate / CronWorkflow (and KFP v1 output).

Walks the template tree from the entrypoint the way the Argo controller expands
it: DAG tasks (`dependencies` and `depends` expressions), steps (sequential
groups of parallel lists), `withItems` / `withParam` / `withSequence`, `when`,
`onExit`, the workflow's and tasks' exit hooks, `templateRef` into WorkflowTemplates of the same
set of files. Executable templates (container, script, resource, containerSet)
become steps named by the DAG task / step that runs them. Parameters flow as
`Val`s so reads keep their provenance; a dependency on a DAG/steps template is a
dependency on every step inside it. A suspend template runs no pod: it is walked
as a node of the graph (under an internal id) and then taken out, what follows it
waiting for what it waited for and naming it in `waits_for` (`Plan.suspends`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import yaml

from prefetchd.pipeline import _code, _scan, _status, _uri, _when
from prefetchd.pipeline._expr import evaluate_tag
from prefetchd.pipeline._load import Document
from prefetchd.pipeline._model import Loop, PipelineError, Plan, PvcMount, Read, Step, Suspend
from prefetchd.pipeline._resolve import (
    ARGO_RE,
    MAX_LOOP_ITEMS,
    Val,
    const,
    items_val,
    runtime,
    substitute,
)

if TYPE_CHECKING:
    from prefetchd.workloads._library import Library

log = logging.getLogger(__name__)

MAX_DEPTH = 50
RUNTIME_WORKFLOW_VARS = (
    "workflow.name",
    "workflow.uid",
    "workflow.namespace",
    "workflow.creationTimestamp",
    "workflow.status",
    "workflow.duration",
    "workflow.serviceAccountName",
)


@dataclass
class Scope:
    inputs: dict[str, Val] = field(default_factory=dict)
    artifacts: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # artifact args passed by the caller
    item: Val | None = None
    siblings: dict[str, list[str]] = field(default_factory=dict)
    deps: frozenset[str] = frozenset()
    loop: Loop | None = None
    condition: str | None = None
    exit_handler: bool = False
    path: tuple[str, ...] = ()
    entry: bool = False
    # the name the controller gives this call's node in status.nodes, after the workflow's
    # name (".prep", ".prep[0].fetch", ".onExit"); and, inside a loop, the outermost loop's
    # group node (a DAG task's TaskGroup, a steps loop's StepGroup), whose items' names only
    # the run knows: how a live Workflow's status finds the step (`_status.apply`)
    node: str = ""
    loop_group: str | None = None
    # a `when` on the way here is false with the values known before the run: no pod
    never: bool = False
    # the templates a plain `template:` name refers to (a WorkflowTemplate's, when reached
    # through templateRef); None: the workflow's own
    templates: dict[str, dict[str, Any]] | None = None


_TASK_REF = re.compile(r"\{\{\s*tasks\.([\w-]+)\.")  # a task an expression names
_INPUT_ARTIFACT = re.compile(r"\{\{\s*inputs\.artifacts\.([\w-]+)\s*\}\}")
_EXPRESSION_TAG = re.compile(r"\{\{=(.*?)\}\}", re.S)
_PLAIN_REFERENCE = re.compile(r"[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*|\[\s*(['\"])[^'\"]+\1\s*\])*")


def _parameter_values(params: Any, where: str) -> dict[str, Any]:
    """``{name: value}`` of an ``arguments.parameters`` list (a task's, an exit hook's)."""
    return {p.get("name"): p.get("value") for p in _as_list(params, where) if isinstance(p, dict)}


def _with_sub_path(mount: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """*mount* with its ``subPathExpr`` as the ``subPath`` the kubelet makes of it with the
    container's env (``$(SITE)``: blind job round 45 read the volume's root); as it is when
    the expression holds a value only the pod knows."""
    expr = mount.get("subPathExpr")
    if mount.get("subPath") or not isinstance(expr, str):
        return mount
    sub = _uri.kube_expand([expr], container.get("env"))[0]
    return mount if "$(" in sub else {**mount, "subPath": sub}


def _status_node(scope: Scope) -> tuple[str, bool]:
    """Where a live Workflow's status tells how a step of *scope* stands: its own node, or in
    a loop the loop's group node (True), which is done once every item is."""
    if scope.loop_group is not None:
        return scope.loop_group, True
    return scope.node, False


def _expression_tags(text: str) -> str:
    """Argo's expression tags (``{{=EXPR}}``, evaluated by the controller with expr-lang):
    one that only names a variable (``{{=inputs.parameters['data-path']}}``) becomes the
    plain tag ``{{inputs.parameters.data-path}}``; any other stays an expression, with the
    braces inside it (expr's closures) taken out so that the tag reads as one placeholder.
    A tag ends at the first ``}}``, as in the controller's template engine."""

    def one(m: re.Match[str]) -> str:
        expr = m.group(1).strip()
        if _PLAIN_REFERENCE.fullmatch(expr):
            name = re.sub(r"\[\s*(['\"])([^'\"]+)\1\s*\]", r".\2", expr)
            return "{{" + name + "}}"
        return "{{=" + expr.replace("{", "(").replace("}", ")") + "}}"

    return _EXPRESSION_TAG.sub(one, text)


# a plain tag naming a workflow parameter (not an expression tag, ``{{= ...}}``)
_WF_PARAMETER_TAG = re.compile(r"\{\{\s*workflow\.parameters\.([^{}\s]+)\s*\}\}")


def _strings(x: Any, path: str, depth: int = 0) -> list[tuple[str, str]]:
    """(field path, text) of every string in *x* (bounded depth)."""
    if isinstance(x, str):
        return [(path, x)]
    if depth > 30:
        return []
    if isinstance(x, dict):
        return [s for k, v in x.items() for s in _strings(v, f"{path}.{k}" if path else str(k),
                                                             depth + 1)]
    if isinstance(x, list):
        return [s for i, v in enumerate(x) for s in _strings(v, f"{path}[{i}]", depth + 1)]
    return []


def _as_list(x: Any, where: str) -> list[Any]:
    if x is None:
        return []
    if not isinstance(x, list):
        raise PipelineError(f"{where}: expected a list")
    return x


class ArgoAnalyzer:
    """One Argo-shaped document; `library` holds WorkflowTemplates for templateRef
    (`library_of`)."""

    def __init__(self, doc: Document, library: dict[str, dict[str, Any]], params: dict[str, str],
                 given_files: bool = False, configmaps: Library | None = None):
        self.doc = doc
        # ConfigMaps given with the workflow (``kubectl get cm,workflow``): what its steps'
        # env vars and parameters take from them, looked up where its pods run
        self.configmaps = configmaps
        self.namespace = str(((doc.data.get("metadata") or {}).get("namespace")) or "default")
        # Files the user gave (plan, warm --pipeline): a templateRef to a template in none of
        # them is bad input; the agent's API objects: a template not watched yet is a warning.
        self.given_files = given_files
        self.src = doc.label
        d = doc.data
        self.kind = d.get("kind", "Workflow")
        spec = d.get("spec") or {}
        self.field_prefix = "spec"
        if self.kind == "CronWorkflow":
            spec = spec.get("workflowSpec") or {}
            self.field_prefix = "spec.workflowSpec"
        self.spec = spec
        self.library = library
        self.templates = self._index_templates(spec, self.field_prefix)
        meta = d.get("metadata") or {}
        self.name = meta.get("name") or meta.get("generateName")
        args = spec.get("arguments") or {}
        self.param_decl: dict[str, Any] = {}
        self.param_sources: dict[str, str] = {}  # parameter -> the ConfigMap it is from
        for i, p in enumerate(
            _as_list(
                args.get("parameters"),
                f"{self.src}: field {self.field_prefix}.arguments.parameters",
            )
        ):
            if not isinstance(p, dict) or "name" not in p:
                raise PipelineError(
                    f"{self.src}: field {self.field_prefix}.arguments.parameters[{i}]: no name"
                )
            self.param_decl[p["name"]] = p.get("value", p.get("default",
                                                             self.configmap_value(p)))
            ref = (p.get("valueFrom") or {}).get("configMapKeyRef") if isinstance(
                p.get("valueFrom"), dict) else None
            if isinstance(ref, dict) and ref.get("name"):
                # (a run-time read of it names that ConfigMap, as an env var's does)
                self.param_sources[p["name"]] = f"configmap {ref['name']}/{ref.get('key')}"
        for k in params:
            if k not in self.param_decl:
                known = ", ".join(sorted(self.param_decl)) or "none"
                raise PipelineError(f"{self.src}: unknown parameter {k!r} (known: {known})")
        self.param_values = {**self.param_decl, **params}
        self.wf_artifacts = {
            a.get("name"): a
            for a in _as_list(args.get("artifacts"), self.src)
            if isinstance(a, dict)
        }
        self.volumes = {
            v.get("name"): v for v in _as_list(spec.get("volumes"), self.src) if isinstance(v, dict)
        }
        self.vcts = {}
        for v in _as_list(spec.get("volumeClaimTemplates"), self.src):
            if isinstance(v, dict):
                self.vcts[(v.get("metadata") or {}).get("name")] = v
        self.steps: dict[str, Step] = {}
        self.order: list[str] = []
        self.creates: dict[str, str] = {}  # step id -> claim pattern it creates
        # suspend steps by the internal id that stands for them among step ids in the walk
        self.suspends: dict[str, Suspend] = {}
        self._expanding: list[int] = []  # the dag/steps templates being walked (ids)
        self._recursion_noted: set[str] = set()
        # a live Workflow's nodes by name (status.nodes): a finished step's outputs are known
        self.status_nodes = {n.get("name"): n for n in _status.nodes(self.doc.data).values()
                             } if self.doc.data.get("kind") == "Workflow" else {}

    def _output_of(self, producer: str, expr: str) -> Val | None:
        """The value of ``tasks.X.outputs.result`` / ``.outputs.parameters.P`` (or
        ``steps.X...``) that a live Workflow's status holds for a step that has succeeded
        (blind job round 45: a ``withParam`` over a finished listing stayed run-time, so its
        items' data was not warmed before they ran); None before that, or in a loop."""
        step = self.steps.get(producer)
        if step is None or step.status_node is None or step.status_node[1]:
            return None
        node = self.status_nodes.get(str(self.name or "") + step.status_node[0])
        if not isinstance(node, dict) or node.get("phase") != "Succeeded":
            return None
        outputs = node.get("outputs") if isinstance(node.get("outputs"), dict) else {}
        rest = expr.split(".", 2)[2] if expr.count(".") >= 2 else ""
        if rest == "outputs.result":
            value = outputs.get("result")
        elif rest.startswith("outputs.parameters."):
            want = rest[len("outputs.parameters."):]
            value = next((p.get("value") for p in outputs.get("parameters") or []
                          if isinstance(p, dict) and p.get("name") == want), None)
        else:
            return None
        return const(str(value), "task-output", producer=producer) \
            if isinstance(value, str | int | float) else None

    def _global_producer(self, name: str) -> str:
        """The step whose template publishes an output as *name* (``globalName``), else
        that template's name, else *name*."""
        for tname, t in self.templates.items():
            outs = (t.get("outputs") or {}) if isinstance(t, dict) else {}
            for o in [*(outs.get("parameters") or []), *(outs.get("artifacts") or [])]:
                if isinstance(o, dict) and o.get("globalName") == name:
                    return next((sid for sid in self.order
                                 if self.steps[sid].template == tname), tname)
        return name

    def _index_templates(self, spec: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
        out = {}
        for i, t in enumerate(
            _as_list(spec.get("templates"), f"{self.src}: field {where}.templates")
        ):
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                raise PipelineError(
                    f"{self.src}: field {where}.templates[{i}]: not a template with a name"
                )
            out[t["name"]] = t
        return out

    # ---- values -------------------------------------------------------------------------
    def configmap_value(self, param: dict[str, Any]) -> str | None:
        """A parameter's ``valueFrom.configMapKeyRef`` value from a ConfigMap given with the
        workflow (its ``valueFrom.default`` when the ConfigMap lacks the key, as the
        controller takes it); None when that ConfigMap is not given (the run's, as before)."""
        vf = param.get("valueFrom")
        ref = vf.get("configMapKeyRef") if isinstance(vf, dict) else None
        if self.configmaps is None or not isinstance(ref, dict) or not ref.get("name"):
            return None
        cm = self.configmaps.held("ConfigMap", self.namespace, str(ref["name"]))
        if cm is None:
            return None
        data = cm.get("data") or {}
        found = data.get(ref.get("key")) if isinstance(data, dict) else None
        default = vf.get("default") if isinstance(vf, dict) else None
        return found if isinstance(found, str) else None if default is None else str(default)

    def artifact_repository(self) -> dict[str, Any] | None:
        """The S3 artifact repository key-only artifacts (``s3: {key: ...}``) resolve
        against, from a ConfigMap given with the workflow, as the controller finds it:
        ``spec.artifactRepositoryRef`` (``configMap``, default ``artifact-repositories``;
        ``key``, default the ConfigMap's ``workflows.argoproj.io/default-artifact-repository``
        annotation), else that annotated ``artifact-repositories`` ConfigMap of its namespace;
        its entry's ``s3`` (bucket, endpoint). None when not given (blind round 49: such
        reads were run-time though the repository was in the file). A live Workflow's
        ``status.artifactRepositoryRef.artifactRepository`` is the one the controller
        resolved for it: that first (blind job round 45)."""
        status = self.doc.data.get("status")
        used = (status.get("artifactRepositoryRef") or {}) if isinstance(status, dict) else {}
        s3 = (used.get("artifactRepository") or {}).get("s3") if isinstance(used, dict) and \
            isinstance(used.get("artifactRepository"), dict) else None
        if isinstance(s3, dict) and isinstance(s3.get("bucket"), str):
            return s3
        if self.configmaps is None:
            return None
        ref = self.spec.get("artifactRepositoryRef")
        ref = ref if isinstance(ref, dict) else {}
        cm = self.configmaps.held("ConfigMap", self.namespace,
                                  str(ref.get("configMap") or "artifact-repositories"))
        if cm is None:
            return None
        note = ((cm.get("metadata") or {}).get("annotations") or {}).get(
            "workflows.argoproj.io/default-artifact-repository")
        text = (cm.get("data") or {}).get(ref.get("key") or note)
        try:
            repo = yaml.safe_load(text) if isinstance(text, str) else None
        except yaml.YAMLError:
            return None
        s3 = repo.get("s3") if isinstance(repo, dict) else None
        return s3 if isinstance(s3, dict) and isinstance(s3.get("bucket"), str) else None

    def configmap_given(self, name: str) -> bool:
        """Whether the ConfigMap *name* of the workflow's namespace is among the files."""
        return self.configmaps is not None and self.configmaps.held(
            "ConfigMap", self.namespace, name) is not None

    def with_configmaps(self, container: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
        """The container with the env vars it takes from ConfigMaps given with the workflow
        as plain values (``valueFrom.configMapKeyRef``; ``envFrom`` with its ``prefix``), as
        a training job's are (``prefetchd.workloads._podspec.with_configmaps``), so ``$(VAR)``
        expands through the path a ``value:`` takes; and the names that came with
        ``envFrom`` (a map's every key: values for ``$(VAR)``, no reads by themselves)."""
        if self.configmaps is None:
            return container, set()
        from prefetchd.k8s import datasets as k8s_datasets  # (they import this package)
        from prefetchd.workloads import _podspec

        made = _podspec.with_configmaps(container, self.configmaps, self.namespace)
        bulk = {str(e.get("name")) for e in made.get("env") or []
                if isinstance(e, dict) and e.get(k8s_datasets.EXPAND_ONLY)}
        return dict(made), bulk

    def check_wf_parameters(self, obj: Any, where: str) -> None:
        """Refuse a ``{{workflow.parameters.X}}`` naming no parameter the workflow declares
        in *obj* (a pod template but its inputs, a step's or task's arguments), as Argo does
        when it validates a Workflow or CronWorkflow ("failed to resolve
        {{workflow.parameters.X}}"): blind round 72, a typo was a run-time read. Not in a
        WorkflowTemplate planned alone (its parameters may come from the Workflow that uses
        it), nor in an expression tag (Argo does not check those), nor in ``when`` (not
        looked at here), nor in API objects (the agent's: Argo took them)."""
        if not self.given_files or self.kind not in ("Workflow", "CronWorkflow"):
            return
        for path, text in _strings(obj, ""):
            for m in _WF_PARAMETER_TAG.finditer(text) if "workflow.parameters." in text else ():
                name = m.group(1)
                if name not in self.param_decl and name != "json":
                    known = ", ".join(sorted(self.param_decl)) or "none"
                    raise PipelineError(
                        f"{self.src}: {where}.{path}: {{{{workflow.parameters.{name}}}}} names "
                        f"no parameter of the workflow (known: {known}); Argo refuses it "
                        "(failed to resolve)")

    def wf_param(self, name: str) -> Val | None:
        if name not in self.param_values:
            return None
        v = self.param_values[name]
        if v is None:
            return runtime("required-parameter", parameter=name,
                           value_from=self.param_sources.get(name))
        val = const(v, "pipeline-parameter", parameter=name)
        # a parameter value may itself hold placeholders (e.g. {{workflow.name}})
        s = substitute(val.values[0], lambda e: self.lookup(e, Scope())) if "{{" in str(v) else None
        return s.with_meta(parameter=name) if s is not None else val

    def lookup(self, expr: str, scope: Scope) -> Val | None:
        expr = expr.strip()
        if expr.startswith("="):  # an expression tag: evaluated where its inputs are known
            return evaluate_tag(expr[1:].strip(), lambda name: self.lookup(name, scope))
        if expr.startswith("workflow.parameters."):
            return self.wf_param(expr[len("workflow.parameters.") :])
        if expr.startswith("inputs.parameters."):
            name = expr[len("inputs.parameters.") :]
            v = scope.inputs.get(name)
            return v.with_meta(input=name) if v is not None else None
        if expr == "item" and scope.item is not None:
            return scope.item
        if expr.startswith("item.") and scope.item is not None:
            return self._item_field(scope.item, expr[5:])
        if expr.startswith(("tasks.", "steps.")):
            name = expr.split(".")[1]
            prod = scope.siblings.get(name)
            producer = prod[0] if prod else name
            if producer in self.suspends:  # values given when it is resumed
                producer = self.suspends[producer].id
            elif (done := self._output_of(producer, expr)) is not None:
                return done
            return runtime(
                "task-output", producer=producer, expression="{{" + expr + "}}"
            )
        if expr.startswith(("workflow.outputs.parameters.", "workflow.outputs.artifacts.")):
            # a step's output published under its globalName: another step's output
            name = expr.split(".", 3)[3]
            return runtime("task-output", producer=self._global_producer(name),
                           expression="{{" + expr + "}}")
        if expr == "workflow.namespace" and (self.doc.data.get("metadata") or {}).get(
                "namespace"):
            # the namespace the Workflow names is the one it runs in (blind job round 54:
            # s3://speech-eval/{{workflow.namespace}}/set1/ was only known at run time)
            return const(self.namespace, variable=expr)
        if expr in RUNTIME_WORKFLOW_VARS or expr.startswith(("workflow.", "pod.", "node.")):
            return runtime("workflow-runtime", variable=expr)
        return None

    def _item_field(self, item: Val, fld: str) -> Val:
        if item.values is None or not isinstance(item.raw, list):
            return runtime(item.origin, item_field=fld, producer=item.get("producer"))
        vals = []
        for it in item.raw:
            cur: Any = it
            for part in fld.split("."):
                cur = cur.get(part) if isinstance(cur, dict) else None
            vals.append(cur)
        if any(v is None for v in vals):
            return runtime("loop-item", item_field=fld)
        return Val(
            tuple(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in vals),
            "loop-item",
            tuple(sorted({"item_field": fld, "loop": item.get("loop")}.items())),
            vals,
        )

    def resolve(self, text: Any, scope: Scope) -> Val | None:
        if not isinstance(text, str):
            return const(text) if text is not None else None
        if "{{=" in text:
            text = _expression_tags(text)
        return substitute(text, lambda e: self.lookup(e, scope), ARGO_RE)

    def value(self, text: Any, scope: Scope) -> Val:
        v = self.resolve(text, scope)
        return v if v is not None else const(text)

    # ---- templates ----------------------------------------------------------------------
    def get_template(self, task: dict[str, Any], where: str, scope: Scope
                     ) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]] | None]:
        """The template a task runs (None: in a file not given), and the templates a plain
        ``template:`` name in it refers to: a plain name is looked up where the calling
        template lives (inside a WorkflowTemplate reached by ``templateRef``, among that
        one's templates, as the controller does)."""
        if "template" in task:
            own = scope.templates if scope.templates is not None else self.templates
            t = own.get(task["template"])
            if t is None:
                raise PipelineError(
                    f"{self.src}: field {where}.template: no template named {task['template']!r}"
                )
            return t, scope.templates
        ref = task.get("templateRef")
        if isinstance(ref, dict):
            # (clusterScope: true names a ClusterWorkflowTemplate, else a WorkflowTemplate of
            # the workflow's namespace: the controller looks for that kind only, blind round
            # 72: a namespaced one of the same name was taken)
            want = "ClusterWorkflowTemplate" if ref.get("clusterScope") else "WorkflowTemplate"
            other = "WorkflowTemplate" if ref.get("clusterScope") else "ClusterWorkflowTemplate"
            lib = self.library.get(f"{want}/{ref.get('name')}")
            if lib is None and self.given_files:
                if f"{other}/{ref.get('name')}" in self.library:
                    scoped = "without clusterScope" if ref.get("clusterScope") \
                        else "with clusterScope: true"
                    raise PipelineError(
                        f"{self.src}: {where}.templateRef: {want} {ref.get('name')!r} is not "
                        f"among the given files (they hold a {other} of that name, which a "
                        f"templateRef {scoped} names)")
                raise PipelineError(
                    f"{self.src}: {where}.templateRef: {want} {ref.get('name')!r} is not "
                    "among the given files (pass its YAML as another file)"
                )
            if lib is None:
                log.warning(
                    "%s: %s.templateRef: %s %r not among the given files; "
                    "its steps are "
                    "not in the plan",
                    self.src,
                    where,
                    want,
                    ref.get("name"),
                )
                return None, None
            t = lib.get(ref.get("template"))
            if t is None:
                raise PipelineError(
                    f"{self.src}: field {where}.templateRef: template {ref.get('template')!r} "
                    f"not in {want} {ref.get('name')!r}"
                )
            return t, lib
        if "inline" in task and isinstance(task["inline"], dict):
            return task["inline"], scope.templates
        raise PipelineError(f"{self.src}: field {where}: no template, templateRef or inline")

    def analyze(self) -> Plan:
        entry = self.spec.get("entrypoint")
        if not entry:
            raise PipelineError(f"{self.src}: field {self.field_prefix}.entrypoint: missing")
        if entry not in self.templates:
            raise PipelineError(
                f"{self.src}: field {self.field_prefix}.entrypoint: no template named {entry!r}"
            )
        tmpl = self.templates[entry]
        scope = Scope(entry=True)
        scope.inputs = self.bind_inputs(
            tmpl, {}, scope, {p: self.wf_param(p) for p in self.param_values}
        )
        leaves = self.run(tmpl, scope, entry, 0)
        on_exit, field = self.spec.get("onExit"), "onExit"
        hooks = self.spec.get("hooks")
        for name, hook, found in self._expression_hooks(hooks, self.field_prefix, Scope()):
            # a workflow's hook run when its expression holds (``running``): a step of its
            # own, beside the rest (blind round 68: its template's reads were not planned)
            t_hook, t_context, t_name, t_args = found
            hs = Scope(entry=True, node=f".hooks.{name}", templates=t_context,
                       condition=str(hook.get("expression") or "") or None)
            hs.inputs = self.bind_inputs(t_hook, t_args, hs,
                                         {p: self.wf_param(p) for p in self.param_values})
            self.run(t_hook, hs, str(t_name), 0)
        t: dict[str, Any] | None = None
        context, hook_args = None, {}
        if on_exit:
            t = self.templates.get(on_exit)
            if t is None:
                raise PipelineError(
                    f"{self.src}: field {self.field_prefix}.{field}: no template named "
                    f"{on_exit!r}"
                )
        elif isinstance(hooks, dict) and (found := self._exit_hook(
                hooks.get("exit"), f"{self.field_prefix}.hooks.exit", Scope())) is not None:
            # the workflow's exit hook: Argo runs it as it runs onExit
            t, context, on_exit, hook_args = found
        if t is not None:
            ex = Scope(deps=frozenset(self._all_ids()), exit_handler=True, entry=True,
                       node=".onExit", templates=context)
            # the controller hands the workflow's arguments to the exit handler too
            ex.inputs = self.bind_inputs(t, hook_args, ex,
                                         {p: self.wf_param(p) for p in self.param_values})
            self.run(t, ex, str(on_exit), 0)
        del leaves
        self._take_out_suspends()
        params = {k: (v if v is None else str(v)) for k, v in self.param_values.items()}
        fmt = self.doc.kind
        return Plan(
            name=self.name,
            format=fmt,
            kind=self.kind,
            sources=[self.doc.source],
            parameters=params,
            steps=[self.steps[i] for i in self.order],
            suspends=list(self.suspends.values()),
        )

    def _suspend(self, tmpl: dict[str, Any], scope: Scope, call_name: str) -> str:
        """A suspend step: recorded, and its internal id returned to stand for it among the
        step ids of the walk (so what follows it, in any template, waits for it)."""
        key = f"\0suspend-{len(self.suspends)}"
        taken = {g.id for g in self.suspends.values()}
        gid = call_name
        if gid in taken:
            gid = "/".join(scope.path) or f"{call_name}-{len(self.suspends)}"
            while gid in taken:
                gid += "'"
        raw = (tmpl.get("suspend") or {}).get("duration") \
            if isinstance(tmpl.get("suspend"), dict) else None
        duration = None
        if raw not in (None, ""):
            v = self.resolve(str(raw), scope)
            duration = v.single if v is not None and v.single is not None else str(raw)
        self.suspends[key] = Suspend(gid, tmpl.get("name"), duration, after=set(scope.deps),
                                     status_node=_status_node(scope))
        return key

    def _take_out_suspends(self) -> None:
        """Replace each suspend step among the steps' (and suspend steps') predecessors by
        its own predecessors, and note it in the waiting step's `waits_for`."""
        def through(after: set[str]) -> tuple[set[str], list[str]]:
            steps: set[str] = set()
            waits: set[str] = set()
            todo, seen = list(after), set()
            while todo:
                a = todo.pop()
                if a in seen:
                    continue
                seen.add(a)
                g = self.suspends.get(a)
                if g is None:
                    steps.add(a)
                else:
                    waits.add(a)
                    todo.extend(g.after)
            return steps, [self.suspends[k].id for k in self.suspends if k in waits]

        if not self.suspends:
            return
        for sid in self.order:
            step = self.steps[sid]
            step.after, step.waits_for = through(step.after)
        resolved = {k: through(g.after)[0] for k, g in self.suspends.items()}
        for k, g in self.suspends.items():
            g.after = resolved[k]

    def _all_ids(self) -> list[str]:
        return list(self.order)

    def bind_inputs(
        self,
        tmpl: dict[str, Any],
        args: dict[str, Any],
        caller: Scope,
        given: dict[str, Val | None] | None = None,
    ) -> dict[str, Val]:
        out: dict[str, Val] = {}
        inputs = tmpl.get("inputs") or {}
        for p in _as_list(
            inputs.get("parameters"), f"{self.src}: template {tmpl.get('name')} inputs.parameters"
        ):
            if not isinstance(p, dict):
                continue
            n = p.get("name")
            if n in args:
                out[n] = self.value(args[n], caller)
            elif given is not None and given.get(n) is not None:
                out[n] = given[n]  # type: ignore[assignment]
            elif "value" in p or "default" in p:
                out[n] = self.value(p.get("value", p.get("default")), Scope())
            elif (cm := self.configmap_value(p)) is not None:
                out[n] = const(cm, "configmap", parameter=n)
            else:
                out[n] = runtime("required-parameter", parameter=n)
        return out

    def run(self, tmpl: dict[str, Any], scope: Scope, call_name: str, depth: int) -> list[str]:
        if depth > MAX_DEPTH:
            raise PipelineError(
                f"{self.src}: templates nested deeper than {MAX_DEPTH} (recursive template "
                f"{tmpl.get('name')!r}?)"
            )
        if "dag" in tmpl or "steps" in tmpl:
            self._expanding.append(id(tmpl))
            try:
                if "dag" in tmpl:
                    return self.run_dag(tmpl, scope, depth)
                return self.run_steps(tmpl, scope, depth)
            finally:
                self._expanding.pop()
        if any(k in tmpl for k in ("container", "script", "resource", "containerSet", "data")):
            return [self.make_step(tmpl, scope, call_name)]
        if "suspend" in tmpl:  # no pod, but what follows waits for it
            return [self._suspend(tmpl, scope, call_name)]
        return []  # http, plugin: no pod of the workflow's

    def call(self, task: dict[str, Any], scope: Scope, where: str, depth: int,
             node: str, group: str) -> list[str]:
        """Run one DAG task / step: loop, condition, arguments, then the template. *node*:
        its node's name in status.nodes (after the workflow's); *group*: the node its items
        hang under when it loops."""
        tmpl, context = self.get_template(task, where, scope)  # context: where its calls look
        if tmpl is None:
            return []
        if id(tmpl) in self._expanding:
            self._note_recursion(tmpl, where)
            return []
        name = task.get("name")
        child = replace(scope, siblings=scope.siblings)
        when = task.get("when")
        depends = task.get("depends")
        if not when and isinstance(depends, str) and not _runs_when_all_succeed(depends):
            when = depends  # runs on another task's failure or skip: as conditional as `when`
        if when:
            child.condition = f"{scope.condition} && {when}" if scope.condition else str(when)
        if task.get("when") and self._never_runs(str(task["when"]), scope):
            child.never = True
        loop, item = self.loop_of(task, scope, where)
        if loop is not None and loop.parallelism is None and tmpl.get("parallelism"):
            # the looped template's own bound (KFP v1 puts ParallelFor's parallelism there)
            loop = replace(loop, parallelism=tmpl["parallelism"])
        if loop is not None:
            child.loop = loop
            child.item = item
        args = task.get("arguments") or {}
        self.check_wf_parameters(args, f"{where}.arguments")
        pargs = _parameter_values(args.get("parameters"), where)
        arts = {
            a.get("name"): a for a in _as_list(args.get("artifacts"), where) if isinstance(a, dict)
        }
        callee = Scope(
            inputs=self.bind_inputs(tmpl, pargs, child),
            artifacts=self._bind_artifacts(arts, child),
            item=None,
            siblings={},
            deps=child.deps,
            loop=child.loop,
            condition=child.condition,
            exit_handler=child.exit_handler,
            path=scope.path + (name,),
            templates=context,
            node=node,
            loop_group=scope.loop_group if scope.loop_group is not None or loop is None
            else group,
            never=child.never,
        )
        ids = self.run(tmpl, callee, name, depth + 1)
        hooks = task.get("hooks") or {}
        exit_t: str | None = task.get("onExit")
        ext: dict[str, Any] | None = self.templates.get(exit_t) if exit_t else None
        ext_context, hook_args = None, {}
        if not exit_t and isinstance(hooks, dict) and (found := self._exit_hook(
                hooks.get("exit"), f"{where}.hooks.exit", scope)) is not None:
            ext, ext_context, exit_t, hook_args = found
        if ext is not None:
            ex = Scope(
                deps=frozenset(ids) | scope.deps,
                # (inside a template a loop runs, once per item: blind round 37)
                loop=scope.loop,
                exit_handler=True,
                path=callee.path,
                condition=scope.condition,
                node=f"{node}.onExit",  # (the controller's name for a task's exit handler)
                loop_group=callee.loop_group,
                templates=ext_context,
            )
            # (its hook's arguments valued where the task is)
            ex.inputs = self.bind_inputs(ext, hook_args, child)
            ids = ids + self.run(ext, ex, str(exit_t), depth + 1)
        for hname, hook, found in self._expression_hooks(hooks, where, scope):
            # a task's hook run when its expression holds (``running``): beside the task,
            # after what the task waits for; the task's dependents do not wait for it
            t_hook, t_context, t_name, t_args = found
            expression = str(hook.get("expression") or "")
            hs = Scope(deps=scope.deps, loop=scope.loop, path=callee.path,
                       condition=" && ".join(c for c in (scope.condition, expression) if c)
                       or None, node=f"{node}.hooks.{hname}", loop_group=callee.loop_group,
                       templates=t_context)
            hs.inputs = self.bind_inputs(t_hook, t_args, child)
            self.run(t_hook, hs, str(t_name), depth + 1)
        return ids

    def _expression_hooks(self, hooks: Any, where: str, scope: Scope) -> list[tuple[
            str, dict[str, Any], tuple[Any, Any, Any, dict[str, Any]]]]:
        """(name, hook, what ``_exit_hook`` finds) of the lifecycle hooks other than ``exit``
        (those Argo runs when their ``expression`` holds) that name a template."""
        if not isinstance(hooks, dict):
            return []
        out = []
        for name, hook in hooks.items():
            if name == "exit" or not isinstance(hook, dict):
                continue
            found = self._exit_hook(hook, f"{where}.hooks.{name}", scope)
            if found is not None and found[0] is not None:
                out.append((str(name), hook, found))
        return out

    def _exit_hook(self, hook: Any, where: str, scope: Scope) -> tuple[
            dict[str, Any] | None, dict[str, dict[str, Any]] | None, Any, dict[str, Any]] | None:
        """An exit hook (``hooks.exit`` of the workflow or of a task): its template (a plain
        name where the caller's template lives, or a ``templateRef`` into a library: blind round
        55), the templates its own calls look in, its name, and its ``arguments``' parameters
        (its inputs: blind job round 45, what the handler built from them vanished); None
        when it names no template."""
        if not isinstance(hook, dict) or ("template" not in hook and "templateRef" not in hook):
            return None
        t, context = self.get_template(hook, where, scope)
        name = hook.get("template") or (hook.get("templateRef") or {}).get("template")
        args = hook.get("arguments") or {}
        return t, context, name, _parameter_values(args.get("parameters"), where)

    def _never_runs(self, when: str, scope: Scope) -> bool:
        """Whether a task's ``when``, its tags filled with values known before the run (the
        workflow's parameters, the caller's inputs), is false (blind job round 45:
        ``{{workflow.parameters.run-qc}} == true`` with ``run-qc: false`` was warmed). A loop
        item or another step's output in it: the run decides."""
        v = self.resolve(when, scope) if "{{" in when else const(when)
        return v is not None and v.single is not None and _when.evaluate(v.single) is False

    def _note_recursion(self, tmpl: dict[str, Any], where: str) -> None:
        """A template that calls itself (coin-flip retries, recursive loops) repeats at run
        time as often as its condition holds: its steps are planned once, from its first
        call, which already reads what any repetition would (same template, same reads)."""
        name = str(tmpl.get("name"))
        if name not in self._recursion_noted:
            self._recursion_noted.add(name)
            log.warning("%s: %s calls template %r from inside itself (recursion): its steps "
                        "are planned once, not per repetition", self.src, where, name)

    def _bind_artifacts(
        self, arts: dict[str, dict[str, Any]], scope: Scope
    ) -> dict[str, dict[str, Any]]:
        out = {}
        for n, a in arts.items():
            ref = _INPUT_ARTIFACT.fullmatch(str(a.get("from") or "").strip())
            if ref is not None:
                # passed on from the caller's own inputs: what the caller was given (a
                # workflow argument when the caller is the entrypoint), not an intermediate
                passed = scope.artifacts.get(ref.group(1))
                if passed is not None:
                    out[n] = passed
                    continue
                if scope.entry and ref.group(1) in self.wf_artifacts:
                    out[n] = {**self.wf_artifacts[ref.group(1)], "_scope": Scope()}
                    continue
            a = dict(a)
            a["_scope"] = scope
            out[n] = a
        return out

    def loop_of(
        self, task: dict[str, Any], scope: Scope, where: str
    ) -> tuple[Loop | None, Val | None]:
        par = task.get("parallelism")
        if "withItems" in task:
            items = _as_list(task["withItems"], f"{self.src}: field {where}.withItems")
            return Loop("static", items=items, parallelism=par), items_val(items)
        if "withParam" in task:
            expr = task["withParam"]
            v = self.resolve(expr, scope) or const(expr)
            if v.values is not None and v.single is not None:
                try:
                    items = json.loads(v.single)
                except ValueError:
                    raise PipelineError(
                        f"{self.src}: field {where}.withParam: not a JSON list: {v.single!r}"
                    ) from None
                if not isinstance(items, list):
                    raise PipelineError(f"{self.src}: field {where}.withParam: not a JSON list")
                # (also an expression tag over one: toJson(jsonpath(workflow.parameters.x, ..)))
                src = "parameter" if v.origin in ("pipeline-parameter", "parameter-expression") \
                    else "static"
                return (
                    Loop(
                        src,
                        items=items,
                        parameter=v.get("parameter"),
                        expression=str(expr),
                        parallelism=par,
                    ),
                    items_val(items),
                )
            return (
                Loop(
                    "task-output",
                    items=None,
                    producer=v.get("producer"),
                    expression=str(expr),
                    parallelism=par,
                ),
                runtime("task-output", producer=v.get("producer")),  # an item of its output
            )
        if "withSequence" in task:
            # Argo's items are the numbers as strings (format "%d" unless given)
            seq = task["withSequence"] or {}
            rng: range | None = None
            try:
                start = int(self.value(seq.get("start", 0), scope).single or 0)
                if "count" in seq:
                    c = self.value(seq["count"], scope).single
                    rng = range(start, start + int(c)) if c is not None else None
                else:
                    e = self.value(seq.get("end"), scope).single
                    if e is not None:
                        end = int(e)
                        rng = range(start, end + 1) if end >= start else range(start, end - 1, -1)
            except (TypeError, ValueError):
                rng = None
            if rng is None:
                return Loop("task-output", expression=json.dumps(seq), parallelism=par), runtime(
                    "loop-item"
                )
            if len(rng) > MAX_LOOP_ITEMS:
                return Loop("static", items=None, expression=json.dumps(seq), parallelism=par), \
                    runtime("loop-item", items=len(rng))
            fmt = self.value(seq["format"], scope).single if seq.get("format") else None
            try:  # Argo formats each number with the printf format given ("%03d")
                items = [fmt % i if fmt else str(i) for i in rng]
            except (TypeError, ValueError):
                return Loop("task-output", expression=json.dumps(seq), parallelism=par), \
                    runtime("loop-item")
            # bounds a workflow parameter gives: the items follow that parameter
            bounds = [self.value(seq[k], scope) for k in ("start", "end", "count") if k in seq]
            src = "parameter" if any(b.origin == "pipeline-parameter" for b in bounds) \
                else "static"
            return Loop(src, items=items, parallelism=par), items_val(items)
        return None, None

    def run_dag(self, tmpl: dict[str, Any], scope: Scope, depth: int) -> list[str]:
        where = f"template {tmpl['name']!r} dag.tasks"
        tasks: dict[str, dict[str, Any]] = {}
        for i, t in enumerate(_as_list((tmpl["dag"] or {}).get("tasks"), f"{self.src}: {where}")):
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                raise PipelineError(f"{self.src}: {where}[{i}]: not a task with a name")
            tasks[t["name"]] = t
        siblings: dict[str, list[str]] = {}
        visiting: set[str] = set()
        out: list[str] = []

        def visit(name: str) -> list[str]:
            if name in siblings:
                return siblings[name]
            if name in visiting:
                raise PipelineError(f"{self.src}: {where}: dependency cycle through task {name!r}")
            visiting.add(name)
            t = tasks[name]
            deps = set(scope.deps)
            for d in self.task_deps(t, f"{where}[{name}]"):
                if d not in tasks:
                    raise PipelineError(
                        f"{self.src}: {where}[{name}]: depends on unknown task {d!r}"
                    )
                deps |= set(visit(d))
            for d in _TASK_REF.findall(str(t.get("withParam") or "")):
                if d not in tasks:  # withParam: "{{tasks.list-partz.outputs.result}}"
                    raise PipelineError(
                        f"{self.src}: {where}[{name}].withParam: unknown task {d!r}")
            child = replace(scope, deps=frozenset(deps), siblings=siblings)
            node = f"{scope.node}.{name}"  # (a loop's TaskGroup has the task's name)
            ids = self.call(t, child, f"{where}[{name}]", depth, node, node)
            # a task that runs no pod (a suspend gate): what follows it waits for what it
            # waited for
            siblings[name] = ids or sorted(deps)
            visiting.discard(name)
            out.extend(ids)
            return ids

        for n in tasks:
            visit(n)
        return out

    @staticmethod
    def task_deps(t: dict[str, Any], where: str) -> list[str]:
        deps = [d for d in (t.get("dependencies") or []) if isinstance(d, str)]
        expr = t.get("depends")
        if isinstance(expr, str):
            for tok in expr.replace("(", " ").replace(")", " ").replace("!", " ").split():
                if tok in ("&&", "||"):
                    continue
                for part in tok.split("&&"):
                    for p in part.split("||"):
                        p = p.strip()
                        if not p:
                            continue
                        name, _, status = p.rpartition(".")
                        if not name or status not in (
                            "Succeeded",
                            "Failed",
                            "Errored",
                            "Skipped",
                            "Omitted",
                            "Daemoned",
                            "AnySucceeded",
                            "AllFailed",
                        ):
                            name = p
                        deps.append(name)
        return list(dict.fromkeys(deps))

    def run_steps(self, tmpl: dict[str, Any], scope: Scope, depth: int) -> list[str]:
        where = f"template {tmpl['name']!r} steps"
        siblings: dict[str, list[str]] = {}
        prev: frozenset[str] = scope.deps
        out: list[str] = []
        for gi, group in enumerate(_as_list(tmpl["steps"], f"{self.src}: {where}")):
            if isinstance(group, dict):
                # Argo's CRD and controller refuse it: `steps` is a list of parallel groups
                raise PipelineError(
                    f"{self.src}: {where}[{gi}]: a step ({group.get('name')!r}) where a list "
                    "of parallel steps is expected (steps is a list of lists: '- - name: ...')")
            group_ids: list[str] = []
            for si, st in enumerate(_as_list(group, f"{self.src}: {where}[{gi}]")):
                if not isinstance(st, dict) or not isinstance(st.get("name"), str):
                    raise PipelineError(f"{self.src}: {where}[{gi}][{si}]: not a step with a name")
                child = replace(scope, deps=prev, siblings=siblings)
                group = f"{scope.node}[{gi}]"  # a step's StepGroup: its loop items' parent
                ids = self.call(st, child, f"{where}[{gi}][{st['name']}]", depth,
                                f"{group}.{st['name']}", group)
                siblings[st["name"]] = ids
                group_ids.extend(ids)
            if group_ids:
                prev = frozenset(group_ids)
            out.extend(group_ids)
        return out

    # ---- executable steps ---------------------------------------------------------------
    def make_step(self, tmpl: dict[str, Any], scope: Scope, call_name: str) -> str:
        sid = call_name
        if sid in self.steps:
            sid = "/".join(scope.path) or f"{call_name}-{len(self.steps)}"
            while sid in self.steps:
                sid += "'"
        kind = (
            "script" if "script" in tmpl else "k8s-resource" if "resource" in tmpl
            else "data" if "data" in tmpl else "container"
        )
        # (not its inputs: Argo validates a template with its inputs replaced by the
        # caller's arguments, or stand-ins for them, so a default there is never checked)
        self.check_wf_parameters({k: v for k, v in tmpl.items() if k != "inputs"},
                                 f"template {tmpl.get('name')!r}")
        body = tmpl.get("container") or tmpl.get("script") or {}
        if "containerSet" in tmpl:
            # (a containerSet's image is its `main` container's, whose outputs are the
            # step's, else its last one's: blind round 72, it was none)
            cs = [c for c in _as_list((tmpl.get("containerSet") or {}).get("containers"),
                                      self.src) if isinstance(c, dict)]
            body = next((c for c in cs if c.get("name") == "main"), cs[-1] if cs else {})
        step = Step(
            id=sid,
            kind=kind,
            template=tmpl.get("name"),
            image=body.get("image"),
            after=set(scope.deps),
            loop=scope.loop,
            condition=scope.condition,
            exit_handler=scope.exit_handler,
            status_node=_status_node(scope),
            never=scope.never,
            # (an exit handler's scope has its task's path: the handler's own name ends it)
            call_path=scope.path if scope.path[-1:] == (call_name,)
            else (*scope.path, call_name),
        )
        self.steps[sid] = step
        self.order.append(sid)
        sched = {k: tmpl[k] for k in ("nodeSelector", "tolerations", "affinity") if tmpl.get(k)}

        def res(text: str) -> Val | None:
            return self.resolve(text, scope)

        if kind == "k8s-resource":
            self._resource(step, tmpl, scope)
            return sid
        if kind == "data":
            # a pod of argoexec's that lists the keys under an artifact's location (and
            # transforms the list): it reads no object, so the location is shown, not warmed
            src = ((tmpl["data"] or {}).get("source") or {}).get("artifactPaths")
            r = self._artifact_read(src, scope, "argo-input-artifact",
                                    str(src.get("name"))) if isinstance(src, dict) else None
            if r is not None:
                step.add("list", r)
            return sid
        paths: list[tuple[str, str]] = []
        containers = [body] if body else []
        cs = tmpl.get("containerSet")
        if isinstance(cs, dict):
            containers += [c for c in cs.get("containers") or [] if isinstance(c, dict)]
        sidecars = [c for c in tmpl.get("sidecars") or [] if isinstance(c, dict)]
        res_of = [{"resources": c["resources"]} for c in [*containers, *sidecars]
                  if isinstance(c.get("resources"), dict) and c["resources"]]
        # the step's pod runs its init containers first and its sidecars beside it, on the
        # same node: what they read (a model staged into an emptyDir) is the step's read
        containers += [c for c in tmpl.get("initContainers") or [] if isinstance(c, dict)]
        containers += sidecars
        if res_of:
            sched["containers"] = res_of
        step.scheduling = sched or None
        for c in containers:
            c, bulk = self.with_configmaps(c)
            env = [
                (e.get("name"), e.get("value")) for e in c.get("env") or [] if isinstance(e, dict)
            ]
            names = [str(n) for n, _ in env]
            envs = _scan.env_inputs(env, res)
            raw = [a for a in [*(c.get("command") or []), *(c.get("args") or [])]
                   if isinstance(a, str)]
            pod = _scan.pod_env(c, self.configmap_given)  # (a ConfigMap not given, a Secret)
            argv, shell_env, spelled = _scan.env_expansion(c, raw, env, envs, pod)
            only_built = _scan.scan_argv(step, argv, res, paths, _scan.code_directions(argv),
                                         names, envs, shell_env, pod)
            if isinstance(c.get("source"), str):
                # a script's args are its program's command line: an option they pass
                # replaces its argparse default (blind round 50)
                source = _code.with_options(c["source"], [
                    a for a in c.get("args") or [] if isinstance(a, str)]) if c.get("args") \
                    else c["source"]
                only_built |= _scan.scan_argv(step, [source], res, paths, env=names,
                                              env_values=envs, shell_env=shell_env,
                                              pod_values=pod)
            text = " ".join([*raw, str(c.get("source") or "")])
            bulk = {n for n in bulk if not re.search(rf"\b{re.escape(n)}\b", text)}
            _scan.scan_env(step, env, res, only_built | {_code.ENV + n for n in spelled | bulk})
        self._artifacts(step, tmpl, scope)
        self._raw_artifacts(step, tmpl, containers, res)
        # (a containerSet's own volumeMounts are every one of its containers': round 40)
        set_mounts = cs.get("volumeMounts") if isinstance(cs, dict) else None
        mounts = list({(m.get("name"), m.get("mountPath"), m.get("subPath")): m
                       for c in [*containers, {"volumeMounts": set_mounts}]
                       for m in (_with_sub_path(m, c) for m in c.get("volumeMounts") or []
                                 if isinstance(m, dict))}.values())
        tvols = {v.get("name"): v for v in tmpl.get("volumes") or [] if isinstance(v, dict)}
        patched_mounts, patched_vols = self._pod_spec_patch(tmpl, scope)
        mounts += [m for m in patched_mounts if (m.get("name"), m.get("mountPath")) not in {
            (x.get("name"), x.get("mountPath")) for x in mounts}]
        tvols.update(patched_vols)
        for m in mounts:
            pm = self._pvc_mount(m, tvols, scope)
            if pm is not None:
                step.pvc_mounts += self._per_sub_path(pm, m, scope)
        step.path_mentions = paths
        step.settle()
        return sid

    def _pod_spec_patch(self, tmpl: dict[str, Any], scope: Scope
                        ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The volume mounts (of every container) and volumes a ``podSpecPatch`` adds, the
        workflow's and then the template's, as the controller merges them into the pod (blind
        round 59: a claim mounted only through one was not listed). Tags known before the run
        are filled in and the others kept as written (a ``{{workflow.uid}}`` in an env value
        does not hide the claim beside it); a patch that is no YAML map adds nothing."""
        mounts: list[dict[str, Any]] = []
        vols: dict[str, Any] = {}
        for raw in (self.spec.get("podSpecPatch"), tmpl.get("podSpecPatch")):
            if not isinstance(raw, str) or not raw.strip():
                continue
            if "{{" in raw:
                raw = self._known_parts(raw, scope)
            try:
                patch = yaml.safe_load(raw)
            except yaml.YAMLError:
                continue
            if not isinstance(patch, dict):
                continue
            for c in patch.get("containers") or []:
                if isinstance(c, dict):
                    mounts += [m for m in c.get("volumeMounts") or [] if isinstance(m, dict)]
            vols.update({v.get("name"): v for v in patch.get("volumes") or []
                         if isinstance(v, dict)})
        return mounts, vols

    def _resource(self, step: Step, tmpl: dict[str, Any], scope: Scope) -> None:
        r = tmpl["resource"] or {}
        man = r.get("manifest")
        if not isinstance(man, str):
            return
        action = r.get("action")
        try:
            obj = yaml.safe_load(man)
        except yaml.YAMLError:
            obj = None
        if not isinstance(obj, dict):  # ({{...}} in a flow list: parsed once filled in)
            if action in ("create", "apply"):
                self._created_work(step, man, None, scope)
            return
        if obj.get("kind") == "PersistentVolumeClaim" and action in ("create", "apply"):
            md = obj.get("metadata") or {}
            spec = obj.get("spec") or {}
            name = md.get("name") or (md.get("generateName") and md["generateName"] + "<random>")
            step.creates_pvc = {
                "claim_pattern": name,
                "size": ((spec.get("resources") or {}).get("requests") or {}).get("storage"),
                "access_modes": spec.get("accessModes"),
            }
            if spec.get("storageClassName"):
                step.creates_pvc["storage_class"] = spec["storageClassName"]
            if spec.get("dataSource"):
                step.creates_pvc["data_source"] = spec["dataSource"]
            self.creates[step.id] = name
        elif obj.get("kind") == "PersistentVolumeClaim" and action == "delete":
            step.deletes_pvc = {"claim": (obj.get("metadata") or {}).get("name")}
        elif action in ("create", "apply"):
            self._created_work(step, man, obj, scope)

    def _created_work(self, step: Step, manifest: str, obj: dict[str, Any] | None,
                      scope: Scope) -> None:
        """A resource step that creates a Job, a PyTorchJob, a JobSet (any kind the training
        job adapters read): what that work's pods read and write is the step's, its tags
        filled where known (blind round 55: a Job made by a resource step read nothing).
        Its claims are not followed (a claim the step's pods mount is not the step's)."""
        from prefetchd import workloads  # (it imports this package)

        if "{{" in manifest:  # (the controller fills the manifest's tags, then reads it)
            v = self.resolve(manifest, scope)
            # (a tag only the run fills, a name's -{{workflow.uid}}, stays as written: blind
            # round 63 lost every read)
            text = v.single if v is not None and v.single else self._known_parts(manifest, scope)
            try:
                filled = yaml.safe_load(text)
            except yaml.YAMLError:
                filled = None
            obj = filled if isinstance(filled, dict) else obj
        if obj is None or workloads.lookup(obj) is None:
            return
        try:
            work = workloads.read(obj)
        except workloads.WorkloadError as exc:
            log.info("%s: step %s creates work that cannot be read: %s", self.src, step.id, exc)
            return
        for g in work.groups:
            for ref in g.datasets:
                if ref.uri and "{{" not in ref.uri and ref.direction == "read":
                    step.add_read(Read(ref.uri, True, "constant"))
            for w in g.writes:
                # (one under this run's name is a write the run knows: what a later step
                # reads there is its intermediate; blind round 68)
                step.add_write(Read(w, True, "constant") if "{{" not in w
                               else Read(None, False, "constant", pattern=w))

    def _raw_artifacts(self, step: Step, tmpl: dict[str, Any], containers: list[dict[str, Any]],
                       res: Any) -> None:
        """An input artifact given as ``raw.data`` (KFP v1's ``{inputPath}`` of a constant, a
        config written into the template) is a file the step reads where its command line
        names its path: a config's locations, directed by their keys, and a script's, as its
        command line would be (``k8s_datasets.config_file_words``). Blind round 54: the
        ``train_sample: s3://...`` of an index config was no read."""
        from prefetchd.k8s import datasets as k8s_datasets  # (it imports this package)

        named = " ".join(str(a) for c in containers for a in [
            *(c.get("command") or []), *(c.get("args") or []), c.get("source") or ""])
        for a in (tmpl.get("inputs") or {}).get("artifacts") or []:
            raw = a.get("raw") if isinstance(a, dict) else None
            data, path = (raw or {}).get("data") if isinstance(raw, dict) else None, a.get("path")
            if not isinstance(data, str) or not isinstance(path, str) or not path or \
                    not containers or (path not in named and path.rpartition("/")[0] not in
                                       named.split()):
                continue
            if "{{" in data:  # (the controller fills the template's tags in it too)
                v = res(data)
                if v is None or v.single is None:
                    continue
                data = v.single
            for value, _origin, d in k8s_datasets.config_file_words(path, data, containers[0]):
                for u in _uri.find_uris(value):
                    r = Read(u, True, "constant", artifact=a.get("name"))
                    (step.add_read if d == "read" else step.add_write if d == "write"
                     else step.add_unknown)(r)

    def _artifacts(self, step: Step, tmpl: dict[str, Any], scope: Scope) -> None:
        inputs = tmpl.get("inputs") or {}
        for a in inputs.get("artifacts") or []:
            if not isinstance(a, dict):
                continue
            name = a.get("name")
            given = scope.artifacts.get(name)
            origin = "argo-input-artifact"
            src: dict[str, Any] = a
            src_scope = scope
            if given is not None:
                if "from" in given or "fromExpression" in given:
                    continue  # produced earlier in this run: intermediate
                if any(
                    k in given for k in ("s3", "gcs", "http", "artifactory", "hdfs", "oss", "azure")
                ):
                    src, origin, src_scope = (
                        given,
                        "argo-argument-artifact",
                        given.get("_scope", scope),
                    )
            elif (
                scope.entry and name in self.wf_artifacts and not any(k in a for k in ("s3", "gcs"))
            ):
                src, origin, src_scope = self.wf_artifacts[name], "argo-argument-artifact", Scope()
            r = self._artifact_read(src, src_scope, origin, name)
            if r is not None and r.static and r.uri is not None:
                # a key built from a loop item: one read per item
                v = self.resolve(r.uri, src_scope) if "{{" in r.uri else None
                for u in (v.values if v is not None and v.values else (r.uri,)):
                    step.add_read(replace(r, uri=u))
            elif r is not None:
                step.add_read(r)
        for a in (tmpl.get("outputs") or {}).get("artifacts") or []:
            # an output artifact the template names its own S3 place for (``s3: {bucket,
            # key}``, ``archive: none``): written there (a state file read and written back
            # at one key is then unknown, not warmed)
            s3 = a.get("s3") if isinstance(a, dict) else None
            repo = self.artifact_repository() if isinstance(s3, dict) and s3.get("key") \
                and not s3.get("bucket") else None
            bucket = s3.get("bucket") if isinstance(s3, dict) else None
            bucket = bucket or (repo or {}).get("bucket")  # (a key-only one: the repository's)
            if not isinstance(s3, dict) or not bucket or not s3.get("key"):
                continue
            uri = f"s3://{bucket}/{str(s3['key']).lstrip('/')}"
            v = self.resolve(uri, scope)  # None: no placeholder in it
            for u in (uri,) if v is None else v.values or ():
                step.add_write(Read(u, True, "argo-output-artifact", artifact=a.get("name")))
            if v is not None and v.values is None:  # a key only the run knows: its pattern
                # (the folder before it is written into: a later step's read of it waits)
                step.add_write(Read(None, False, "argo-output-artifact", artifact=a.get("name"),
                                    pattern=uri))

    def _artifact_read(
        self, a: dict[str, Any], scope: Scope, origin: str, name: str
    ) -> Read | None:
        if "s3" in a and isinstance(a["s3"], dict):
            s3 = a["s3"]
            key = str(s3.get("key") or "")
            if "{{workflow.name}}" in key.replace(" ", "") or "{{workflow.uid}}" in key.replace(
                " ", ""
            ):
                return None  # a key under this run's name: written earlier in the same run
            endpoint = s3.get("endpoint")
            repo = self.artifact_repository() if not s3.get("bucket") else None
            if repo is not None and key:  # a key-only artifact of the repository given
                s3 = {**s3, "bucket": repo["bucket"]}
                endpoint = endpoint or repo.get("endpoint")
                origin = "default-artifact-repository"
            if not s3.get("bucket"):
                v = self.value(key, scope) if key else const("")
                return Read(
                    None,
                    False,
                    "default-artifact-repository",
                    artifact=name,
                    key=v.single if v.static else key,
                    endpoint=endpoint,
                )
            tmpl_uri = f"s3://{s3['bucket']}/{key.lstrip('/')}"
            v = self.resolve(tmpl_uri, scope)
            if v is None:
                return Read(tmpl_uri, True, origin, artifact=name, endpoint=endpoint)
            if v.values is not None and v.single is not None:
                return Read(v.single, True, origin, artifact=name, endpoint=endpoint)
            if v.values is not None:  # several items: the caller expands the template
                return Read(tmpl_uri, True, origin, artifact=name, endpoint=endpoint)
            return Read(
                None,
                False,
                origin,
                artifact=name,
                endpoint=endpoint,
                pattern=tmpl_uri,
                producer=v.get("producer"),
            )
        if "gcs" in a and isinstance(a["gcs"], dict):
            g = a["gcs"]
            if g.get("bucket"):
                u = f"gs://{g['bucket']}/{str(g.get('key') or '').lstrip('/')}"
                v = self.resolve(u, scope)
                if v is None or v.single is not None:
                    return Read(v.single if v else u, True, origin, artifact=name)
                return Read(None, False, origin, artifact=name, pattern=u)
        if "azure" in a and isinstance(a["azure"], dict):  # Blob: endpoint/container/blob
            az = a["azure"]
            if az.get("endpoint") and az.get("container"):
                u = (f"{str(az['endpoint']).rstrip('/')}/{az['container']}/"
                     f"{str(az.get('blob') or '').lstrip('/')}")
                v = self.resolve(u, scope)
                if v is None or v.single is not None:
                    return Read(v.single if v else u, True, origin, artifact=name)
                return Read(None, False, origin, artifact=name, pattern=u)
        if "http" in a and isinstance(a["http"], dict) and isinstance(a["http"].get("url"), str):
            # an S3 object by its HTTPS address (https://s3.REGION.amazonaws.com/b/k): that
            # object; any other URL is no dataset of ours (blind round 46)
            v = self.resolve(a["http"]["url"], scope)
            url = v.single if v is not None and v.single is not None else a["http"]["url"]
            found = [u for u in _uri.find_uris(url) if u.startswith("s3://")]
            if "{{" not in url and len(found) == 1:
                return Read(found[0], True, origin, artifact=name)
        return None

    def _per_sub_path(self, pm: PvcMount, m: dict[str, Any], scope: Scope) -> list[PvcMount]:
        """*pm* once per ``subPath`` its loop gives it (``clips/{{inputs.parameters.month}}``
        over ``withItems``: one mount of each item's folder, as each pod mounts it; blind job
        round 40 warmed the placeholder's folder); *pm* itself for one value, or one only
        the run knows (left as written: ``_pvc.map_mounts`` reads nothing ahead there)."""
        sub = m.get("subPath")
        v = self.resolve(sub, scope) if isinstance(sub, str) and "{{" in sub else None
        if v is None or v.values is None or len(v.values) < 2:
            return [pm]
        return [replace(pm, sub_path=x) for x in dict.fromkeys(v.values)]

    def _known_parts(self, text: str, scope: Scope) -> str:
        """*text* with each tag whose one value is known before the run filled in and the
        others as written (``train-{{workflow.uid}}``): what the parts known now name is known
        all the same."""
        def known(tag: re.Match[str]) -> str:
            v = self.resolve(tag.group(0), scope)
            return v.single if v is not None and v.single is not None else tag.group(0)

        return ARGO_RE.sub(known, text)

    def _pvc_mount(self, m: dict[str, Any], tvols: dict[str, Any], scope: Scope) -> PvcMount | None:
        vname = m.get("name")
        mount_path = str(m.get("mountPath") or "")
        sub = m.get("subPath") or ""
        sub_v = self.resolve(sub, scope) if isinstance(sub, str) else None
        sub_path = (
            (sub_v.single if sub_v is not None and sub_v.single is not None else sub) if sub else ""
        )
        if sub_v is not None and sub_v.values is None and isinstance(sub, str):
            # a part only the run knows (another step's list item): the parts known now
            # in place, so the folder before it is named (blind round 51)
            sub_path = self._known_parts(sub, scope)
        ro = bool(m.get("readOnly", False))
        vol = tvols.get(vname) or self.volumes.get(vname)
        if vol is not None:
            pvc = vol.get("persistentVolumeClaim")
            if not isinstance(pvc, dict):
                return None  # emptyDir, secret, configMap, ephemeral: not a dataset
            claim_raw = pvc.get("claimName")
            v = self.value(claim_raw, scope)
            ro = ro or bool(pvc.get("readOnly", False))
            if v.values is not None and v.single is not None:
                origin = (
                    "pipeline-parameter"
                    if v.origin in ("pipeline-parameter", "parameter-expression")
                    else "constant"
                )
                return PvcMount(
                    v.single, True, origin, mount_path, sub_path, ro, parameter=v.get("parameter")
                )
            producer = v.get("producer")
            if v.origin == "task-output" and producer in self.creates:
                return PvcMount(
                    None,
                    False,
                    "created-in-run",
                    mount_path,
                    sub_path,
                    ro,
                    created_by=producer,
                    claim_pattern=self.creates[producer],
                )
            if v.origin == "required-parameter":
                return PvcMount(
                    None,
                    False,
                    "required-parameter",
                    mount_path,
                    sub_path,
                    ro,
                    parameter=v.get("parameter"),
                )
            return PvcMount(
                None,
                False,
                v.origin,
                mount_path,
                sub_path,
                ro,
                claim_pattern=str(claim_raw),
                created_by=producer,
            )
        if vname in self.vcts:
            return PvcMount(
                None,
                False,
                "volume-claim-template",
                mount_path,
                sub_path,
                ro,
                volume_claim_template=vname,
                claim_pattern="{{workflow.name}}-" + vname,
            )
        return None


def resolve_template_ref(doc: Document, docs: list[Document]) -> Document:
    """A Workflow/CronWorkflow with `workflowTemplateRef`, merged with the template it names.

    As the controller does: the WorkflowTemplate's (or ClusterWorkflowTemplate's,
    with `clusterScope: true`) spec is the base, the referring spec's own fields
    override it, and arguments are merged by name (the referring workflow's
    values win). The template must be among the given documents, unless the Workflow is a
    live one whose ``status.storedWorkflowTemplateSpec`` holds the spec the controller
    stored when it started it: that spec is what runs, even if the template changed since
    (blind job round 45: ``kubectl get workflow -o yaml`` of a run was refused).
    """
    d = doc.data
    cron = d.get("kind") == "CronWorkflow"
    spec = d.get("spec") or {}
    wspec = spec.get("workflowSpec") if cron else spec
    if not isinstance(wspec, dict) or not isinstance(wspec.get("workflowTemplateRef"), dict):
        return doc
    ref = wspec["workflowTemplateRef"]
    where = "spec.workflowSpec" if cron else "spec"
    want = "ClusterWorkflowTemplate" if ref.get("clusterScope") else "WorkflowTemplate"
    name = ref.get("name")
    stored = (d.get("status") or {}).get("storedWorkflowTemplateSpec") \
        if d.get("kind") == "Workflow" and isinstance(d.get("status"), dict) else None
    tmpl = next(
        (
            x
            for x in docs
            if x.data.get("kind") == want and (x.data.get("metadata") or {}).get("name") == name
        ),
        None,
    )
    if isinstance(stored, dict) and isinstance(stored.get("templates"), list):
        tspec = stored
    elif tmpl is None:
        raise PipelineError(
            f"{doc.label}: field {where}.workflowTemplateRef: {want} {name!r} is not among the "
            "given files (pass its YAML as another file)"
        )
    else:
        tspec = tmpl.data.get("spec") or {}
    merged = {**tspec, **{k: v for k, v in wspec.items() if k != "workflowTemplateRef"}}
    args: dict[str, Any] = {}
    for part in ("parameters", "artifacts"):
        by_name: dict[Any, Any] = {}
        for src in (tspec.get("arguments") or {}, wspec.get("arguments") or {}):
            for a in (src.get(part) if isinstance(src, dict) else None) or []:
                if isinstance(a, dict):
                    by_name[a.get("name")] = {**by_name.get(a.get("name"), {}), **a}
        if by_name:
            args[part] = list(by_name.values())
    merged["arguments"] = args
    data = dict(d)
    data["spec"] = {**spec, "workflowSpec": merged} if cron else merged
    return Document(doc.source, doc.index, data, doc.kind)


def library_of(docs: list[Document]) -> dict[str, dict[str, dict[str, Any]]]:
    """WorkflowTemplates / ClusterWorkflowTemplates by kind and name (``KIND/NAME``, as a
    ``templateRef`` names one: ``clusterScope`` says the kind) -> their templates by name."""
    lib: dict[str, dict[str, dict[str, Any]]] = {}
    for d in docs:
        if d.kind in ("argo", "kfp-v1-argo") and d.data.get("kind") in (
            "WorkflowTemplate",
            "ClusterWorkflowTemplate",
        ):
            name = (d.data.get("metadata") or {}).get("name")
            spec = d.data.get("spec") or {}
            lib[f"{d.data['kind']}/{name}"] = {
                t["name"]: t
                for t in spec.get("templates") or []
                if isinstance(t, dict) and "name" in t
            }
    return lib


_DEP_TERM = re.compile(r"[A-Za-z0-9_-]+(?:\.([A-Za-z]+))?")
_SUCCESS = frozenset({"Succeeded", "Completed", "Daemoned", "AnySucceeded", "AllSucceeded"})


def _runs_when_all_succeed(expr: str) -> bool:
    """Whether a `depends` expression holds when every task it names succeeds (``A &&
    (B.Succeeded || B.Failed)``); one that does not (``train.Failed || eval.Failed``) makes
    its task conditional. An expression we cannot read counts as holding."""
    text = _DEP_TERM.sub(lambda m: " True " if (m.group(1) or "Succeeded") in _SUCCESS
                         else " False ", expr)
    text = text.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
    if not re.fullmatch(r"(?:\s|True|False|and|or|not|\(|\))*", text):
        return True
    try:
        return bool(eval(text, {"__builtins__": {}}, {}))  # noqa: S307 (True/False/and/or)
    except SyntaxError:
        return True
