"""prefetchd command line: plan, warm, status, unpin, run (--watch-dir or --kubernetes), webhook.

Errors in the input (bad YAML, not a pipeline, unknown --param, unreachable
endpoint, missing bucket) print one line naming the file/field/endpoint to
stderr and exit 2, with no traceback and nothing in the cache touched.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from fusecache import cliargs
from prefetchd import _errors, pipeline
from prefetchd.k8s import placement

log = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2


UsageError = _errors.UsageError


def _kv(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    return cliargs.key_values(items, flag, UsageError)


def build_parser() -> argparse.ArgumentParser:
    p = cliargs.Parser(
        prog="prefetchd", description="Pipeline-aware prefetch into the fusecache node cache."
    )
    cliargs.add_version(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    pl = sub.add_parser("plan", help="show which step reads which dataset, in start order")
    pl.add_argument("files", nargs="+", metavar="FILE", help="pipeline definitions")
    pl.add_argument(
        "--param", action="append", metavar="NAME=VALUE",
        help="override a pipeline parameter; repeatable (default: the pipeline's own values)"
    )
    pl.add_argument(
        "--pvc",
        action="append",
        metavar="CLAIM=s3://BUCKET/PREFIX",
        help="the S3 prefix behind a PVC, so reads through it become S3 reads; repeatable "
             "(default: none)",
    )
    pl.add_argument("--json", action="store_true", help="machine-readable output (default off)")
    pl.set_defaults(func=cmd_plan)
    subs = [pl]

    try:
        from prefetchd import warm_cli
    except ImportError:  # pragma: no cover - warm needs the fusecache core
        warm_cli = None
    if warm_cli is not None:
        subs += warm_cli.add_subcommands(sub)
        subs += _add_kubernetes(sub)
    cliargs.add_log_level(p, subs, "warning")
    return p


def _add_kubernetes(sub: Any) -> list[argparse.ArgumentParser]:
    """``run --kubernetes`` (node agent) and ``webhook``, when the kubernetes client is there.

    ``run`` is defined by warm_cli (``--watch-dir``); here it gains ``--kubernetes`` and the
    agent's options, and exactly one of the two modes must be chosen.
    """
    try:
        from prefetchd.k8s import agent
    except ImportError:  # pragma: no cover - the kubernetes client is not installed
        return []
    run = sub.choices["run"]
    for action in run._actions:  # warm_cli makes --watch-dir required; now it is one mode
        if action.dest == "watch_dir":
            action.required = False
            action.help = ("folder mode: warm pipeline files dropped here (default: none; "
                           "give it or --kubernetes)")
    run.add_argument("--kubernetes", action="store_true",
                     help="node agent: watch workflows and pending pods on the cluster")
    agent.add_arguments(run)
    run.set_defaults(func=cmd_run)

    wh = sub.add_parser("webhook", help="mutating admission webhook steering pods to their data")
    agent.add_webhook_arguments(wh)
    wh.set_defaults(func=cmd_webhook)
    return [wh]


def cmd_run(args: argparse.Namespace) -> int:
    from prefetchd import warm_cli
    from prefetchd.k8s import agent

    if args.kubernetes:
        if args.watch_dir:
            raise UsageError("run: --kubernetes and --watch-dir are two modes; give one")
        if args.once or args.pvc or args.param:
            flag = "--once" if args.once else "--pvc" if args.pvc else "--param"
            raise UsageError(f"run: {flag} is for --watch-dir, not --kubernetes")
        problem = agent.check_arguments(args)
        if problem:
            raise UsageError(f"run --kubernetes: {problem}")
        args.cache_dir = args.cache_dir or warm_cli._default_cache_dir()
        try:
            return agent.run(args)
        except ValueError as e:
            raise UsageError(f"run --kubernetes: {e}") from None
    if not args.watch_dir:
        raise UsageError("run: give --watch-dir DIR or --kubernetes")
    given = [f"--{k.replace('_', '-')}" for k in agent.KUBERNETES_ONLY if getattr(args, k)]
    if given:
        raise UsageError(f"run: {', '.join(given)} "
                         f"{'applies' if len(given) == 1 else 'apply'} only with --kubernetes")
    return warm_cli.cmd_run(args)


def cmd_webhook(args: argparse.Namespace) -> int:
    from prefetchd.k8s import agent

    problem = agent.check_webhook_arguments(args)
    if problem:
        raise UsageError(f"webhook: {problem}")
    try:
        return agent.run_webhook(args)
    except ValueError as e:
        raise UsageError(f"webhook: {e}") from None


def plans_from_args(
    files: list[str], params: list[str] | None, pvcs: list[str] | None
) -> list[pipeline.Plan]:
    return pipeline.analyze_all(files, _kv(params, "--param"), _kv(pvcs, "--pvc"))


def cmd_plan(args: argparse.Namespace) -> int:
    from prefetchd.workloads import plan_cli as work_plan  # training jobs, Katib, Kueue

    if work_plan.claims(args.files):
        return work_plan.cmd_plan(args)
    plans = plans_from_args(args.files, args.param, args.pvc)
    for claim in pipeline.unused_claims(_kv(args.pvc, "--pvc"), (
            m.claim for p in plans for s in p.steps for m in s.pvc_mounts)):
        print(f"prefetchd: warning: --pvc {claim}: no step of these files mounts a claim of "
              "that name; not used", file=sys.stderr)
    if args.json:
        out = [p.to_json() for p in plans]
        # One write: json.dump to a stream issues a write per token (815k for
        # 2,000 steps, most of plan's time).
        sys.stdout.write(json.dumps(out[0] if len(out) == 1 else out, indent=2, default=str))
        sys.stdout.write("\n")
        return 0
    for p in plans:
        print(render_plan(p))
    return 0


def _read_str(r: pipeline.Read) -> str:
    if r.uri is None:
        what = r.pattern or r.key or r.artifact or "?"
        source = f" {r.value_from}" if r.value_from else ""  # (a Secret's name, never data)
        return f"(runtime: {what}; {r.origin}{source})"
    flag = "" if r.supported else pipeline.not_warmable(r.uri)
    return f"{r.uri} ({r.origin}){flag}"


def _suspend_str(g: pipeline.Suspend) -> str:
    """What a suspend step waits for: a person's ``argo resume``, or its duration."""
    if g.duration is not None:
        return f"waits {g.duration} (or argo resume)"
    return "waits for argo resume"


def render_plan(plan: pipeline.Plan) -> str:
    """A readable table: one block per stage, one line per step, reads and mounts under it.

    A live Workflow (one with ``status``) adds its phase to the title and each step's to its
    line; a started step's reads are not warmed, and a finished workflow warms nothing.
    Suspend steps are listed after the stages, and the steps after one say they wait for it.
    """
    status = f"  (status: {plan.phase or '?'})" if plan.observed else ""
    gates = f", {len(plan.suspends)} suspend steps" if plan.suspends else ""
    lines = [
        f"{plan.name or '?'}  [{plan.format}, {plan.kind}]  {len(plan.steps)} steps, "
        f"{len(plan.stages)} stages{gates}{status}"
    ]
    suspends = {g.id: g for g in plan.suspends}
    for st, ids in enumerate(plan.stages):
        lines.append(f"stage {st}")
        for sid in ids:
            s = plan.step(sid)
            marks = []
            if s.loop:
                n = len(s.loop.items) if s.loop.items is not None else "?"
                marks.append(f"loop x{n}")
            if s.condition:
                marks.append(f"if {s.condition}")
            if s.exit_handler:
                marks.append("exit handler")
            for gid in s.waits_for:
                marks.append(f"after suspend {gid}: {_suspend_str(suspends[gid])}")
            if s.never:
                marks.append("when false: does not run, not warmed")
            if s.started:
                marks.append(f"{s.phase}: not warmed")
            elif s.phase:
                marks.append(str(s.phase))
            dep = f" after {', '.join(s.depends_on)}" if s.depends_on else ""
            mk = f"  [{'; '.join(marks)}]" if marks else ""
            lines.append(f"  {s.id} ({s.kind}){dep}{mk}")
            if s.scheduling and (where := placement.describe(s.scheduling)):
                # its pod's own node constraints: where its data is warmed
                lines.append("      runs on: " + "; ".join(where))
            for r in s.reads:
                # (once its writer has succeeded, a live run's read is there to warm)
                made = "" if not r.written_by else (
                    f"  [written by {r.written_by} earlier in this run: there now]"
                    if plan.there_yet(r) else
                    f"  [written by {r.written_by} earlier in this run: not warmed ahead]")
                lines.append(f"      reads  {_read_str(r)}{made}")
            for r in s.unknown:
                why = "listed only" if r.listed else "mixed evidence"
                lines.append(f"      unknown {_read_str(r)}  ({why}: not warmed)")
            for r in s.imports:
                lines.append(f"      imports {_read_str(r)}")
            for r in s.intermediate:
                lines.append(f"      takes  {_read_str(r)}  [artifact {r.written_by} writes "
                             "earlier in this run: no dataset]")
            for m in s.pvc_mounts:
                claim = m.claim or f"<{m.claim_pattern or m.claim_origin}>"
                sp = f" subPath={m.sub_path}" if m.sub_path else ""
                ro = " ro" if m.read_only else ""
                s3 = f" -> {m.s3_prefix}" if m.s3_prefix else ""
                lines.append(f"      mounts pvc {claim} at {m.mount_path}{sp}{ro}{s3}")
    if plan.suspends:
        lines.append("suspend steps (no pod; the steps after one start when it is resumed):")
        for g in plan.suspends:
            dep = f" after {', '.join(g.depends_on)}" if g.depends_on else ""
            waiting = plan.waiting_for(g.id)
            before = f", before {', '.join(waiting)}" if waiting else ""
            ph = f"{g.phase}: " if g.phase else ""
            lines.append(f"  {g.id} (suspend){dep}{before}  [{ph}{_suspend_str(g)}]")
    for sid, m, hint in pipeline.unresolved_mounts(plan):
        lines.append(f"unresolved pvc {pipeline.describe_mount(m)} of {sid}: {hint}")
    ds = plan.datasets()
    if ds:
        lines.append("datasets to warm (plan order" + (f"; {plan.held}" if plan.held else "")
                     + "):")
        for uri, st, ids in ds:
            lines.append(f"  {uri}  stage {st}  read by {', '.join(ids)}")
    elif plan.finished:
        lines.append(f"datasets to warm: nothing ({str(plan.phase).lower()}: the workflow has "
                     "finished; nothing of it will run again)")
    elif plan.held:
        lines.append(f"datasets to warm: nothing ({plan.held})")
    elif plan.observed and any(r.supported and r.static for s in plan.steps if s.started
                               for r in s.reads):
        lines.append("datasets to warm: nothing (the steps that read them have started)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cliargs.configure_logging(args.log_level, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return rc
    except (pipeline.PipelineError, UsageError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"prefetchd: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("prefetchd: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        cliargs.quiet_broken_pipe()
        return 0
    except Exception as e:  # noqa: BLE001 - one line on the terminal, never a traceback
        log.debug("unexpected error", exc_info=True)
        print(f"prefetchd: error: {type(e).__name__}: {' '.join(str(e).split())}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
