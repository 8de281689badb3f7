"""KFP v2: the IR (PipelineSpec) with its kubernetes platform spec, and its Argo-compiled form.

The IR nests DAGs: `root.dag.tasks` and the `dag.tasks` of group components
(condition, loop, exit handler, nested pipeline). We walk them recursively,
carrying each DAG's input parameters as `Val`s (pipeline parameters at the
root, `pipelinechannel--*` inside groups) and input artifacts as their source
(an importer step, or an intermediate). A container task's reads come from its
args (`{{$.inputs.parameters['x']}}` placeholders), from its inputs when the
code is a lightweight component (`{{$}}`: the code sees every input), from its
env, and from artifacts produced by importers. PVC mounts come from the
platform spec's `pvcMount`, whose claim is resolved in the *enclosing* DAG.

The Argo form the KFP backend submits (`kfp-v2-argo`) carries the same JSON in
workflow parameters; `ir_from_argo` rebuilds a PipelineSpec from it so one walker
serves both.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from typing import Any

from prefetchd.pipeline import _code, _scan, _uri
from prefetchd.pipeline._load import Document
from prefetchd.pipeline._model import Loop, PipelineError, Plan, PvcMount, Read, Step
from prefetchd.pipeline._resolve import Val, const, items_val, runtime, substitute

log = logging.getLogger(__name__)

KFP_PH_RE = re.compile(r"\{\{(\$[^{}]*)\}\}")
_INPUT_PARAM_RE = re.compile(r"^\$\.inputs\.parameters\[['\"]([^'\"]+)['\"]\]$")
# the groups the KFP compiler makes for dsl.ExitHandler, ParallelFor, If/Elif/Else (tasks of
# components of these names), as opposed to a pipeline used as a component
_CONTROL_GROUP = re.compile(r"(?:exit-handler|for-loop|condition|condition-branches)-\d+")
_INPUT_ART_RE = re.compile(r"^\$\.inputs\.artifacts\[['\"]([^'\"]+)['\"]\]\.(uri|path)$")
_SELECTOR_RE = re.compile(r"""parseJson\(string_value\)\[["']([^"']+)["']\]""")
_COND_RE = re.compile(r"inputs\.parameter_values\[['\"]([^'\"]+)['\"]\]")
WORKSPACE_PATH = "/kfp-workspace"


# KFP parameter types whose values are no text, so never a location
_NOT_TEXT = frozenset({"NUMBER_INTEGER", "NUMBER_DOUBLE", "BOOLEAN"})


@dataclass
class ArtSrc:
    """Where an input artifact comes from: an importer (a dataset read) or this run."""

    importer: str | None
    uri: Val | None
    workspace: bool = False


@dataclass
class Node:
    key: str
    leaves: list[str]
    step: Step | None = None
    comp: dict[str, Any] | None = None
    children: dict[str, Node] = field(default_factory=dict)
    art: ArtSrc | None = None  # importer output
    claim_pattern: str | None = None  # CreatePVC output


@dataclass
class Ctx:
    deps: frozenset[str] = frozenset()
    loop: Loop | None = None
    condition: str | None = None
    path: tuple[str, ...] = ()


def _coerce(name: str, raw: str, ptype: str | None, src: str) -> Any:
    try:
        if ptype in ("LIST", "STRUCT"):
            return json.loads(raw)
        if ptype == "NUMBER_INTEGER":
            return int(raw)
        if ptype == "NUMBER_DOUBLE":
            return float(raw)
        if ptype == "BOOLEAN":
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
    except ValueError:
        raise PipelineError(f"{src}: parameter {name!r}: {raw!r} is not a valid {ptype}") from None
    return raw


class Kfp2Analyzer:
    def __init__(
        self,
        spec: dict[str, Any],
        platform: dict[str, Any] | None,
        src: str,
        params: dict[str, str],
        fmt: str = "kfp-v2-ir",
        kind: str = "PipelineSpec",
        run_values: dict[str, Any] | None = None,
        workspace: bool = False,
        name: str | None = None,
    ):
        self.src = src
        self.fmt = fmt
        self.kind = kind
        if not isinstance(spec.get("root"), dict):
            raise PipelineError(f"{src}: field root: missing or not a mapping")
        self.root = spec["root"]
        self.components = spec.get("components") or {}
        self.executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
        k8s = ((platform or {}).get("platforms") or {}).get("kubernetes") or {}
        self.k8s = (k8s.get("deploymentSpec") or {}).get("executors") or {}
        self.workspace = workspace or bool((k8s.get("pipelineConfig") or {}).get("workspace"))
        self.name = name or (spec.get("pipelineInfo") or {}).get("name")
        decl = ((self.root.get("inputDefinitions") or {}).get("parameters")) or {}
        for k in params:
            if k not in decl:
                known = ", ".join(sorted(decl)) or "none"
                raise PipelineError(f"{src}: unknown parameter {k!r} (known: {known})")
        self.param_values: dict[str, Any] = {}
        self.root_scope: dict[str, Val] = {}
        for n, d in decl.items():
            d = d or {}
            if n in params:
                v: Any = _coerce(n, params[n], d.get("parameterType"), src)
            elif run_values is not None and n in run_values:
                v = run_values[n]
            elif "defaultValue" in d:
                v = d["defaultValue"]
                if d.get("parameterType") == "NUMBER_INTEGER" and isinstance(v, float) and \
                        v.is_integer():
                    v = int(v)  # the compiler writes an int's default as 2025.0
            else:
                self.param_values[n] = None
                self.root_scope[n] = runtime("required-parameter", parameter=n)
                continue
            self.param_values[n] = v
            self.root_scope[n] = const(v, "pipeline-parameter", parameter=n)
        self.steps: list[Step] = []
        self.ids: set[str] = set()

    def analyze(self) -> Plan:
        dag = self.root.get("dag")
        if not isinstance(dag, dict):
            raise PipelineError(f"{self.src}: field root.dag: missing")
        self.walk(dag, "root", self.root_scope, {}, Ctx())
        return Plan(
            name=self.name,
            format=self.fmt,
            kind=self.kind,
            sources=[self.src],
            parameters=self.param_values,
            steps=self.steps,
        )

    # ---- values -------------------------------------------------------------------------
    def task_param(
        self,
        spec: Any,
        scope: dict[str, Val],
        siblings: dict[str, Node],
        others: dict[str, Any],
        where: str,
        lenient: bool = False,
    ) -> Val:
        if not isinstance(spec, dict):
            raise PipelineError(f"{self.src}: field {where}: not a mapping")
        if "runtimeValue" in spec:
            rv = spec["runtimeValue"] or {}
            if "constant" in rv:
                c = rv["constant"]
            else:  # older IR: constantValue.{stringValue,intValue,doubleValue}
                cv = rv.get("constantValue") or {}
                c = next(iter(cv.values()), None)
            if isinstance(c, str) and "{{$" in c:

                def look(expr: str) -> Val | None:
                    m = _INPUT_PARAM_RE.match(expr)
                    if m and m.group(1) in others and m.group(1) != where:
                        return self.task_param(others[m.group(1)], scope, siblings, {},
                                               where + "/" + m.group(1), lenient)
                    return _run_value(expr)

                v = substitute(c, look, KFP_PH_RE)
                if v is not None:
                    return v
            return const(c)
        if "componentInputParameter" in spec:
            name = spec["componentInputParameter"]
            v = scope.get(name)
            if v is None and lenient:
                # (the compiler binds a control-flow group's channels of an inner loop's
                # item to the enclosing DAG, where there is none: unused, kfp_nested_loops)
                v = runtime("unresolved", parameter=name)
            elif v is None:
                # no input of the enclosing pipeline of that name: the KFP backend fails the
                # task (blind round 72: a nested pipeline's binding to a missing root input)
                known = ", ".join(sorted(k for k in scope if isinstance(k, str))) or "none"
                raise PipelineError(
                    f"{self.src}: field {where}.componentInputParameter: {name!r} is no input "
                    f"of the enclosing pipeline (known: {known})")
            sel = spec.get("parameterExpressionSelector")
            if sel:
                m = _SELECTOR_RE.search(sel)
                if m:
                    return self._field(v, m.group(1))
            return v
        if "taskOutputParameter" in spec:
            t = spec["taskOutputParameter"] or {}
            prod = t.get("producerTask")
            pid = self._output_producer(siblings.get(prod), t.get("outputParameterKey")) or prod
            return runtime(
                "task-output", producer=pid, expression=f"{prod}.{t.get('outputParameterKey')}"
            )
        return runtime("task-output")

    @staticmethod
    def _field(v: Val, fld: str) -> Val:
        if v.values is None:
            return runtime(v.origin, item_field=fld, producer=v.get("producer"))
        out = []
        for s in v.values:
            try:
                d = json.loads(s)
            except ValueError:
                return runtime("loop-item", item_field=fld)
            x = d.get(fld) if isinstance(d, dict) else None
            out.append(json.dumps(x) if isinstance(x, (dict, list)) else str(x))
        return Val(tuple(out), v.origin, tuple(sorted({**dict(v.meta), "item_field": fld}.items())))

    def task_art(
        self, spec: Any, arts: dict[str, ArtSrc], siblings: dict[str, Node]
    ) -> ArtSrc | None:
        if not isinstance(spec, dict):
            return None
        if "componentInputArtifact" in spec:
            return arts.get(spec["componentInputArtifact"])
        t = spec.get("taskOutputArtifact")
        if isinstance(t, dict):
            return self._output_art(siblings.get(t.get("producerTask")), t.get("outputArtifactKey"))
        return None

    @staticmethod
    def _output_producer(node: Node | None, key: str | None) -> str | None:
        """The step that makes output parameter *key* of task *node*: the task's own, or for
        a nested pipeline (or a loop's collected output) the task its DAG's output names
        (``valueFromParameter.producerSubtask``, the first of a ``dsl.OneOf``'s), followed
        down; its first step when the IR does not say (blind round 72: the nested
        pipeline's first task, where the IR named the second)."""
        first = node.leaves[0] if node is not None and node.leaves else None
        for _ in range(50):
            if node is None:
                return first
            if node.step is not None:
                return node.step.id
            if node.comp is None or not isinstance(node.comp.get("dag"), dict):
                return node.leaves[0] if node.leaves else first
            out = ((node.comp["dag"].get("outputs") or {}).get("parameters") or {}).get(key)
            sel = out.get("valueFromParameter") if isinstance(out, dict) else None
            if not isinstance(sel, dict) and isinstance(out, dict):
                sels = (out.get("valueFromOneof") or {}).get("parameterSelectors") or []
                sel = sels[0] if sels and isinstance(sels[0], dict) else None
            if not isinstance(sel, dict):
                return first
            node, key = node.children.get(sel.get("producerSubtask")), sel.get(
                "outputParameterKey")
        return first

    def _output_art(self, node: Node | None, key: str | None) -> ArtSrc | None:
        for _ in range(50):
            if node is None:
                return None
            if node.art is not None:
                return node.art
            if node.comp is None or "dag" not in node.comp:
                return None
            sel = ((node.comp["dag"].get("outputs") or {}).get("artifacts") or {}).get(key) or {}
            sels = sel.get("artifactSelectors") or []
            if not sels:
                return None
            node, key = (
                node.children.get(sels[0].get("producerSubtask")),
                sels[0].get("outputArtifactKey"),
            )
        return None

    # ---- walk ---------------------------------------------------------------------------
    def walk(
        self,
        dag: dict[str, Any],
        where: str,
        scope: dict[str, Val],
        arts: dict[str, ArtSrc],
        ctx: Ctx,
    ) -> dict[str, Node]:
        tasks = dag.get("tasks") or {}
        if not isinstance(tasks, dict):
            raise PipelineError(f"{self.src}: field {where}.dag.tasks: not a mapping")
        nodes: dict[str, Node] = {}
        visiting: set[str] = set()

        def visit(key: str) -> Node:
            if key in nodes:
                return nodes[key]
            if key in visiting:
                raise PipelineError(
                    f"{self.src}: field {where}.dag.tasks: dependency cycle through {key!r}"
                )
            visiting.add(key)
            t = tasks[key]
            tw = f"{where}.dag.tasks.{key}"
            if not isinstance(t, dict):
                raise PipelineError(f"{self.src}: field {tw}: not a mapping")
            deps = set(ctx.deps)
            for d, named_in in self._task_deps(t):
                if d not in tasks:
                    raise PipelineError(f"{self.src}: field {tw}.{named_in}: unknown task {d!r}")
                deps |= set(visit(d).leaves)
            node = self.task(key, t, tw, scope, arts, nodes, replace(ctx, deps=frozenset(deps)))
            nodes[key] = node
            visiting.discard(key)
            return node

        for k in tasks:
            visit(k)
        return nodes

    @staticmethod
    def _task_deps(t: dict[str, Any]) -> list[tuple[str, str]]:
        """(task, the field naming it) of every task *t* waits for: its dependentTasks and
        the producers of its inputs (``inputs.parameters.X.taskOutputParameter...``)."""
        deps = {d: "dependentTasks" for d in t.get("dependentTasks") or []
                if isinstance(d, str)}
        inputs = t.get("inputs") or {}
        for group in ("parameters", "artifacts"):
            for name, s in (inputs.get(group) or {}).items():
                if isinstance(s, dict):
                    for k in ("taskOutputParameter", "taskOutputArtifact"):
                        p = (s.get(k) or {}).get("producerTask")
                        if p:
                            deps.setdefault(p, f"inputs.{group}.{name}.{k}.producerTask")
        return list(deps.items())

    def task(
        self,
        key: str,
        t: dict[str, Any],
        tw: str,
        scope: dict[str, Val],
        arts: dict[str, ArtSrc],
        siblings: dict[str, Node],
        ctx: Ctx,
    ) -> Node:
        cref = (t.get("componentRef") or {}).get("name")
        comp = self.components.get(cref)
        if comp is None:
            raise PipelineError(f"{self.src}: field {tw}.componentRef: no component named {cref!r}")
        inputs = t.get("inputs") or {}
        pspecs = inputs.get("parameters") or {}
        group = "dag" in comp and bool(_CONTROL_GROUP.fullmatch(key))
        params = {
            n: self.task_param(s, scope, siblings, pspecs, f"{tw}.inputs.parameters.{n}",
                               lenient=group)
            for n, s in pspecs.items()
        }
        for n, d in (((comp.get("inputDefinitions") or {}).get("parameters")) or {}).items():
            if n not in params and isinstance(d, dict) and "defaultValue" in d:
                params[n] = const(d["defaultValue"])
        tarts = {
            n: a
            for n, s in (inputs.get("artifacts") or {}).items()
            if (a := self.task_art(s, arts, siblings)) is not None
        }
        cond = ctx.condition
        tp = t.get("triggerPolicy") or {}
        if tp.get("condition"):
            c = self._humanize(tp["condition"], pspecs)
            cond = f"{cond} && {c}" if cond else c
        # an ExitHandler's exit task runs after its group whatever happened; a task with
        # ignore_upstream_failure() has the same trigger but follows ordinary tasks
        exit_task = tp.get("strategy") == "ALL_UPSTREAM_TASKS_COMPLETED" and any(
            str(d).startswith("exit-handler-") for d in t.get("dependentTasks") or [])
        if "dag" in comp:
            loop, item_name, item_val = self._loop(t, params, tw)
            if group:
                # a group sees its own inputs and, as the KFP backend resolves them, the
                # enclosing DAG's (an inner ParallelFor's tasks read the outer loop's item
                # without it being passed to the inner group)
                child_scope = dict(scope)
                for k, v in params.items():
                    if not (v.origin == "unresolved" and k in scope):
                        child_scope[k] = v
            else:
                # a pipeline used as a component sees its own inputs only, as its task binds
                # them: never the caller's parameter of the same name (blind round 72); one
                # nobody binds, with no default, only the run knows
                decl = ((comp.get("inputDefinitions") or {}).get("parameters")) or {}
                child_scope = {k: params.get(k) or runtime("unresolved", input=k)
                               for k in decl}
                child_scope.update(params)
            child_ctx = Ctx(
                deps=ctx.deps, loop=loop or ctx.loop, condition=cond, path=ctx.path + (key,)
            )
            if item_name is not None and item_val is not None:
                child_scope[item_name] = item_val
            children = self.walk(comp["dag"], f"components.{cref}", child_scope, tarts, child_ctx)
            leaves = [s for n in children.values() for s in n.leaves]
            return Node(key, leaves, comp=comp, children=children)
        return self.leaf(
            key,
            t,
            tw,
            comp,
            params,
            tarts,
            scope,
            siblings,
            replace(ctx, condition=cond),
            exit_task,
        )

    def _humanize(self, cond: str, pspecs: dict[str, Any]) -> str:
        def sub(m: re.Match[str]) -> str:
            s = pspecs.get(m.group(1)) or {}
            if "taskOutputParameter" in s:
                t = s["taskOutputParameter"]
                return f"{t.get('producerTask')}.{t.get('outputParameterKey')}"
            if "componentInputParameter" in s:
                return str(s["componentInputParameter"]).replace("pipelinechannel--", "")
            return m.group(1).replace("pipelinechannel--", "")

        return _COND_RE.sub(sub, cond)

    def _loop(
        self, t: dict[str, Any], params: dict[str, Val], tw: str
    ) -> tuple[Loop | None, str | None, Val | None]:
        it = t.get("parameterIterator")
        par = (t.get("iteratorPolicy") or {}).get("parallelismLimit")
        if isinstance(it, dict):
            items_spec = it.get("items") or {}
            name = it.get("itemInput")
            if "raw" in items_spec:
                try:
                    items = json.loads(items_spec["raw"])
                except (ValueError, TypeError):
                    raise PipelineError(
                        f"{self.src}: field {tw}.parameterIterator.items.raw: not JSON"
                    ) from None
                return Loop("static", items=items, parallelism=par), name, self._items_val(items)
            v = params.get(items_spec.get("inputParameter"))
            if v is not None and v.values is not None:
                items = v.raw if isinstance(v.raw, list) else None
                if items is None and v.single is not None:
                    try:
                        items = json.loads(v.single)
                    except ValueError:
                        items = None
                if isinstance(items, list):
                    src = "parameter" if v.origin == "pipeline-parameter" else "static"
                    return (
                        Loop(src, items=items, parameter=v.get("parameter"), parallelism=par),
                        name,
                        self._items_val(items),
                    )
            prod = v.get("producer") if v is not None else None
            return (
                Loop(
                    "task-output",
                    producer=prod,
                    expression=v.get("expression") if v else None,
                    parallelism=par,
                ),
                name,
                runtime("task-output", producer=prod),  # an item of its output
            )
        if isinstance(t.get("artifactIterator"), dict):
            return Loop("task-output", parallelism=par), None, None
        return None, None, None

    @staticmethod
    def _items_val(items: list[Any]) -> Val:
        return items_val(items)

    def _new_id(self, key: str, ctx: Ctx) -> str:
        sid = key if key not in self.ids else "/".join(ctx.path + (key,))
        while sid in self.ids:
            sid += "'"
        self.ids.add(sid)
        return sid

    def leaf(
        self,
        key: str,
        t: dict[str, Any],
        tw: str,
        comp: dict[str, Any],
        params: dict[str, Val],
        tarts: dict[str, ArtSrc],
        scope: dict[str, Val],
        siblings: dict[str, Node],
        ctx: Ctx,
        exit_task: bool,
    ) -> Node:
        label = comp.get("executorLabel")
        ex = self.executors.get(label)
        if not isinstance(ex, dict):
            raise PipelineError(
                f"{self.src}: field deploymentSpec.executors: no executor {label!r} (task {key})"
            )
        sid = self._new_id(key, ctx)
        disp = (t.get("taskInfo") or {}).get("name")
        step = Step(
            id=sid,
            kind="container",
            template=label,
            display_name=disp if disp != key else None,
            after=set(ctx.deps),
            loop=ctx.loop,
            condition=ctx.condition,
            exit_handler=exit_task,
            # (the tasks of the pipelines it is inside: not the compiler's control-flow groups)
            call_path=(*(k for k in ctx.path if not _CONTROL_GROUP.fullmatch(k)), key),
        )
        self.steps.append(step)
        node = Node(key, [sid], step=step, comp=comp)
        if "importer" in ex:
            imp = ex["importer"] or {}
            step.kind = "importer"
            au = imp.get("artifactUri") or {}
            if "constant" in au:
                v = const(au["constant"])
            else:
                v = params.get(au.get("runtimeParameter")) or runtime("task-output")
            r = _scan.read_from(v, v.single if v.values is not None else None)
            step.imports.append(r)
            ws = bool(imp.get("downloadToWorkspace"))
            node.art = ArtSrc(sid, v, ws)
            if ws:
                step.pvc_mounts.append(self._workspace_mount())
            return node
        c = ex.get("container") or {}
        step.image = c.get("image")
        img = str(step.image or "")
        if img.startswith("argostub/createpvc"):
            step.kind = "create-pvc"
            suffix = params.get("pvc_name_suffix")
            name = params.get("pvc_name")
            pattern = (
                ("<uuid>" + suffix.single)
                if suffix is not None and suffix.single
                else (name.single if name is not None else None)
            )
            step.creates_pvc = {"claim_pattern": pattern}
            for k, f in (
                ("size", "size"),
                ("storage_class_name", "storage_class"),
                ("access_modes", "access_modes"),
                ("data_source", "data_source"),
            ):
                if k in params and params[k].values is not None:
                    step.creates_pvc[f] = (
                        params[k].raw if params[k].raw is not None else params[k].single
                    )
            node.claim_pattern = pattern
            return node
        if img.startswith("argostub/deletepvc"):
            step.kind = "delete-pvc"
            v = params.get("pvc_name")
            step.deletes_pvc = {"created_by": v.get("producer") if v is not None else None}
            return node
        # reads through importer artifacts
        for a in tarts.values():
            if a.workspace:
                if not any(m.mount_path == WORKSPACE_PATH for m in step.pvc_mounts):
                    step.pvc_mounts.append(self._workspace_mount())
            elif a.importer is not None and a.uri is not None:
                r = _scan.read_from(
                    a.uri, a.uri.single if a.uri.values is not None else None, importer=a.importer
                )
                r.origin = "importer"
                step.add_read(r)

        def look(expr: str) -> Val | None:
            m = _INPUT_PARAM_RE.match(expr)
            if m:
                v = params.get(m.group(1))
                return v.with_meta(input=m.group(1)) if v is not None else None
            m = _INPUT_ART_RE.match(expr)
            if m and m.group(2) == "uri":
                a = tarts.get(m.group(1))
                if a is not None and a.importer is not None and a.uri is not None:
                    return replace(a.uri, origin="importer").with_meta(importer=a.importer)
                return runtime("task-output")
            return _run_value(expr)

        def res(text: str) -> Val | None:
            return substitute(text, look, KFP_PH_RE)

        argv = [
            x
            for a in [*(c.get("command") or []), *(c.get("args") or [])]
            if isinstance(a, str)
            for x in _placeholder_args(a, params)
        ]
        paths: list[tuple[str, str]] = []
        code_dirs = _scan.code_directions(argv)
        env = [(e.get("name"), e.get("value")) for e in c.get("env") or [] if isinstance(e, dict)]
        envs = _scan.env_inputs(env, res)
        # the env the task sets (set_env_variable) is its script's, as for an Argo step:
        # ${SPEND_URI:-s3://...} with SPEND_URI set is SPEND_URI (blind round 48)
        pod = _scan.pod_env(_with_platform_env(c, self.k8s.get(label) or {}))
        argv, shell_env, spelled = _scan.env_expansion(c, argv, env, envs, pod)
        only_built = _scan.scan_argv(step, argv, res, paths, code_dirs, [str(n) for n, _ in env],
                                     envs, shell_env, pod)
        only_built |= {_code.ENV + n for n in spelled}
        step.path_mentions = paths
        if any(a.strip() == "{{$}}" for a in argv):
            # (pipelinechannel--X inputs only feed a task input's template, as in
            # f"{scans_root}/{quarter}/{lang}/": not handed to the code)
            # (an input typed a number or a bool that only the run knows, another task's
            # float, is no location, whatever flag carries it: blind round 51)
            types = {n: (d or {}).get("parameterType") for n, d in ((
                comp.get("inputDefinitions") or {}).get("parameters") or {}).items()
                if isinstance(d, dict)}
            # (nor is a local path with a part only the run knows, f"/scratch/orders/{region}"
            # of a loop item: a file of a volume, no object-store location; blind round 53)
            handed = {k: v for k, v in params.items() if not k.startswith("pipelinechannel--")
                      and not (v.values is None and types.get(k) in _NOT_TEXT)
                      and not (v.values is None and str(v.get("pattern") or "").startswith("/"))}
            only_built |= _scan.scan_named_inputs(step, {**envs, **handed}, code_dirs,
                                                  _scan.code_pairs(argv), _scan.code_built(argv),
                                                  paths)
            # paths handed to the component as inputs (e.g. root="/data/train"): they narrow
            # reads through a PVC mounted there (see _pvc.map_mounts)
            for pname, pv in params.items():
                for value in pv.values or ():
                    if value.startswith("/") and "\n" not in value:
                        paths.append((value, "write" if _uri.name_says_write(pname) else "read"))
        _scan.scan_env(step, env, res, only_built)
        step.settle()
        step.scheduling = _kfp_scheduling(c, self.k8s.get(label) or {})
        for i, m in enumerate(((self.k8s.get(label) or {}).get("pvcMount")) or []):
            if isinstance(m, dict):
                step.pvc_mounts.append(
                    self._pvc(m, scope, siblings, f"executors.{label}.pvcMount[{i}]")
                )
        return node

    def _workspace_mount(self) -> PvcMount:
        return PvcMount(
            None,
            False,
            "volume-claim-template",
            WORKSPACE_PATH,
            "",
            False,
            volume_claim_template="kfp-workspace",
            claim_pattern="{{workflow.name}}-kfp-workspace",
        )

    def _pvc(
        self, m: dict[str, Any], scope: dict[str, Val], siblings: dict[str, Node], where: str
    ) -> PvcMount:
        mp = str(m.get("mountPath") or "")
        sub = str(m.get("subPath") or "")
        ro = bool(m.get("readOnly", False))
        spec = m.get("pvcNameParameter") or m
        if isinstance(spec.get("runtimeValue"), dict) and "constant" in spec["runtimeValue"]:
            return PvcMount(str(spec["runtimeValue"]["constant"]), True, "constant", mp, sub, ro)
        if "constant" in spec and not isinstance(spec["constant"], dict):
            return PvcMount(str(spec["constant"]), True, "constant", mp, sub, ro)
        prod = None
        if "componentInputParameter" in spec:
            v = scope.get(spec["componentInputParameter"]) or runtime("unresolved")
            if v.values is not None and v.single is not None:
                origin = "pipeline-parameter" if v.origin == "pipeline-parameter" else "constant"
                return PvcMount(v.single, True, origin, mp, sub, ro, parameter=v.get("parameter"))
            if v.origin == "required-parameter":
                return PvcMount(
                    None, False, "required-parameter", mp, sub, ro, parameter=v.get("parameter")
                )
            prod = v.get("producer")
        elif "taskOutputParameter" in spec:
            top = spec["taskOutputParameter"] or {}
            pt = top.get("producerTask")
            prod = self._output_producer(siblings.get(pt), top.get("outputParameterKey")) or pt
        pattern = None
        for s in self.steps:
            if s.id == prod and s.creates_pvc:
                pattern = s.creates_pvc.get("claim_pattern")
                return PvcMount(
                    None,
                    False,
                    "created-in-run",
                    mp,
                    sub,
                    ro,
                    created_by=prod,
                    claim_pattern=pattern,
                )
        return PvcMount(None, False, "task-output", mp, sub, ro, created_by=prod)


# what the run alone knows (dsl.PIPELINE_JOB_NAME_PLACEHOLDER and its kin), as Argo's
# {{workflow.name}}: a location holding one is the run's, read or written as it runs
_RUN_VARIABLES = frozenset({
    "$.pipeline_job_name", "$.pipeline_job_resource_name", "$.pipeline_job_uuid",
    "$.pipeline_task_name", "$.pipeline_task_uuid", "$.pipeline_job_create_time_utc",
    "$.pipeline_job_schedule_time_utc"})


def _run_value(expr: str) -> Val | None:
    return runtime("workflow-runtime", variable=expr) if expr.strip() in _RUN_VARIABLES \
        else None


def _with_platform_env(container: dict[str, Any], platform: dict[str, Any]) -> dict[str, Any]:
    """*container* with the env vars kfp-kubernetes sets from ConfigMaps and Secrets
    (``use_config_map_as_env``, ``use_secret_as_env``: the executor's ``configMapAsEnv`` /
    ``secretAsEnv``) as the ``valueFrom`` entries the pod gets: only the pod knows their
    values (blind round 59: ``aws s3 sync "$SRC_URI"`` of one read nothing)."""
    env = list(container.get("env") or [])
    for key, name_key, ref_key, item_key in (
            ("configMapAsEnv", "configMapName", "configMapKeyRef", "configMapKey"),
            ("secretAsEnv", "secretName", "secretKeyRef", "secretKey")):
        for src in platform.get(key) or []:
            if not isinstance(src, dict):
                continue
            for k in src.get("keyToEnv") or []:
                if isinstance(k, dict) and isinstance(k.get("envVar"), str):
                    env.append({"name": k["envVar"], "valueFrom": {ref_key: {
                        "name": src.get(name_key), "key": k.get(item_key)}}})
    return {**container, "env": env} if len(env) > len(container.get("env") or []) \
        else container


def _placeholder_args(arg: str, params: dict[str, Val]) -> list[str]:
    """The args one IR arg stands for: `dsl.ConcatPlaceholder` / `dsl.IfPresentPlaceholder`.

    The IR carries them as JSON (`{"Concat": [...]}`, `{"IfPresent": {"InputName": n,
    "Then": [...], "Else": [...]}}`): Concat joins its parts into one arg, IfPresent
    stands for its Then args when the task passes input n, else its Else args.
    """
    if not arg.startswith(('{"Concat"', '{"IfPresent"')):
        return [arg]
    try:
        node = json.loads(arg)
    except ValueError:
        return [arg]

    def expand(x: Any, depth: int = 0) -> list[str]:
        if depth > 20:
            return []
        if isinstance(x, str):
            return [x]
        if isinstance(x, list):
            return [a for y in x for a in expand(y, depth + 1)]
        if isinstance(x, dict) and "Concat" in x:
            return ["".join(expand(x["Concat"], depth + 1))]
        if isinstance(x, dict) and isinstance(x.get("IfPresent"), dict):
            ip = x["IfPresent"]
            return expand(ip.get("Then") if ip.get("InputName") in params else ip.get("Else"),
                          depth + 1)
        return []

    return expand(node)


def _wf_param_ref(v: Any) -> str | None:
    m = (
        re.fullmatch(r"\s*\{\{\s*workflow\.parameters\.([^}\s]+)\s*\}\}\s*", v)
        if isinstance(v, str)
        else None
    )
    return m.group(1) if m else None


def ir_from_argo(
    doc: Document,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None, bool, str | None]:
    """Rebuild (IR, platform spec, run values, workspace?, name) from a KFP v2 Workflow."""
    src = doc.label
    spec = doc.data.get("spec") or {}
    params: dict[str, Any] = {}
    for p in (spec.get("arguments") or {}).get("parameters") or []:
        if isinstance(p, dict) and "name" in p:
            params[p["name"]] = p.get("value")

    def blob(name: str, where: str) -> dict[str, Any]:
        if name not in params:
            raise PipelineError(
                f"{src}: field spec.arguments.parameters: no {name!r} (referenced by {where})"
            )
        try:
            v = json.loads(params[name])
        except (TypeError, ValueError):
            raise PipelineError(
                f"{src}: field spec.arguments.parameters[{name}]: not JSON"
            ) from None
        if not isinstance(v, dict):
            raise PipelineError(
                f"{src}: field spec.arguments.parameters[{name}]: not a JSON object"
            )
        return v

    root = blob("components-root", "the KFP v2 root DAG")
    components: dict[str, Any] = {}
    for n in params:
        if n.startswith("components-comp-"):
            c = blob(n, n)
            if "dag" in c:
                components[n[len("components-") :]] = c
    executors: dict[str, Any] = {}
    k8s: dict[str, Any] = {}
    run_values: dict[str, Any] | None = None
    for t in spec.get("templates") or []:
        if not isinstance(t, dict):
            continue
        for task in (t.get("dag") or {}).get("tasks") or []:
            if not isinstance(task, dict):
                continue
            args = {
                a.get("name"): a.get("value")
                for a in ((task.get("arguments") or {}).get("parameters") or [])
                if isinstance(a, dict)
            }
            if "runtime-config" in args and task.get("name") == "root-driver":
                try:
                    run_values = (json.loads(args["runtime-config"] or "{}") or {}).get(
                        "parameterValues"
                    ) or {}
                except ValueError:
                    raise PipelineError(
                        f"{src}: field root-driver runtime-config: not JSON"
                    ) from None
            if "task" not in args:
                continue
            try:
                tj = json.loads(args["task"])
            except (TypeError, ValueError):
                raise PipelineError(
                    f"{src}: template {t.get('name')} task {task.get('name')}: "
                    "argument 'task' is not JSON"
                ) from None
            cname = (tj.get("componentRef") or {}).get("name")
            cref = _wf_param_ref(args.get("component"))
            if not cname or not cref:
                continue
            comp = dict(blob(cref, f"task {task.get('name')}"))
            if "dag" in comp:
                components.setdefault(cname, comp)
                continue
            label = "exec-" + cname[5:] if cname.startswith("comp-") else "exec-" + cname
            comp["executorLabel"] = label
            components[cname] = comp
            impl = _wf_param_ref(args.get("container"))
            imp = _wf_param_ref(args.get("importer"))
            if imp:
                executors[label] = {"importer": blob(imp, f"task {task.get('name')}")}
            elif impl:
                executors[label] = {"container": blob(impl, f"task {task.get('name')}")}
            kc = _wf_param_ref(args.get("kubernetes-config"))
            if kc:
                k8s[label] = blob(kc, f"task {task.get('name')}")
    ws = any(
        isinstance(v, dict) and (v.get("metadata") or {}).get("name") == "kfp-workspace"
        for v in spec.get("volumeClaimTemplates") or []
    )
    gen = (doc.data.get("metadata") or {}).get("generateName") or (
        doc.data.get("metadata") or {}
    ).get("name")
    name = gen[:-1] if isinstance(gen, str) and gen.endswith("-") else gen
    ir = {
        "pipelineInfo": {"name": name},
        "root": root,
        "components": components,
        "deploymentSpec": {"executors": executors},
    }
    platform = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": k8s}}}}
    return ir, platform, run_values, ws, name


__all__ = ["Kfp2Analyzer", "ir_from_argo", "Read"]


def _kfp_scheduling(container: dict[str, Any], k8s: dict[str, Any]) -> dict[str, Any] | None:
    """A KFP v2 task's scheduling constraints in PodSpec shape (see ``Step.scheduling``).

    From the kubernetes platform spec: ``nodeSelector.labels`` and ``tolerations``; from the
    executor container: ``resources.accelerator`` (type and count) as a limit.
    """
    out: dict[str, Any] = {}
    labels = (k8s.get("nodeSelector") or {}).get("labels") if isinstance(
        k8s.get("nodeSelector"), dict) else None
    if isinstance(labels, dict) and labels:
        out["nodeSelector"] = {str(k): str(v) for k, v in labels.items()}
    tols = [t for t in k8s.get("tolerations") or [] if isinstance(t, dict)]
    if tols:
        out["tolerations"] = tols
    acc = (container.get("resources") or {}).get("accelerator") if isinstance(
        container.get("resources"), dict) else None
    if isinstance(acc, dict):
        kind = acc.get("resourceType") or acc.get("type")
        count = acc.get("resourceCount") or acc.get("count")
        if isinstance(kind, str) and kind and count not in (None, ""):
            out["containers"] = [{"resources": {"limits": {kind: str(count)}}}]
    return out or None
