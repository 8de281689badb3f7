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

from prefetchd import _errors, pipeline

log = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2


UsageError = _errors.UsageError


def _kv(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for it in items or []:
        if "=" not in it or it.startswith("="):
            raise UsageError(f"{flag} {it!r}: expected NAME=VALUE")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="prefetchd", description="Pipeline-aware prefetch into the fusecache node cache."
    )
    p.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = p.add_subparsers(dest="command", required=True)

    pl = sub.add_parser("plan", help="show which step reads which dataset, in start order")
    pl.add_argument("files", nargs="+", metavar="FILE")
    pl.add_argument(
        "--param", action="append", metavar="NAME=VALUE", help="override a pipeline parameter"
    )
    pl.add_argument(
        "--pvc",
        action="append",
        metavar="CLAIM=s3://BUCKET/PREFIX",
        help="the S3 prefix behind a PVC, so reads through it become S3 reads",
    )
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.set_defaults(func=cmd_plan)

    try:
        from prefetchd import warm_cli
    except ImportError:  # pragma: no cover - warm needs the fusecache core
        warm_cli = None
    if warm_cli is not None:
        warm_cli.add_subcommands(sub)
        _add_kubernetes(sub)
    return p


def _add_kubernetes(sub: Any) -> None:
    """``run --kubernetes`` (node agent) and ``webhook``, when the kubernetes client is there.

    ``run`` is defined by warm_cli (``--watch-dir``); here it gains ``--kubernetes`` and the
    agent's options, and exactly one of the two modes must be chosen.
    """
    try:
        from prefetchd.k8s import agent
    except ImportError:  # pragma: no cover - the kubernetes client is not installed
        return
    run = sub.choices["run"]
    for action in run._actions:  # warm_cli makes --watch-dir required; now it is one mode
        if action.dest == "watch_dir":
            action.required = False
            action.help = "folder mode: warm pipeline files dropped here"
    run.add_argument("--kubernetes", action="store_true",
                     help="node agent: watch workflows and pending pods on the cluster")
    agent.add_arguments(run)
    run.set_defaults(func=cmd_run)

    wh = sub.add_parser("webhook", help="mutating admission webhook steering pods to their data")
    agent.add_webhook_arguments(wh)
    wh.set_defaults(func=cmd_webhook)


def cmd_run(args: argparse.Namespace) -> int:
    from prefetchd import warm_cli
    from prefetchd.k8s import agent

    if args.kubernetes:
        if args.watch_dir:
            raise UsageError("run: --kubernetes and --watch-dir are two modes; give one")
        if args.once:
            raise UsageError("run: --once is for --watch-dir, not --kubernetes")
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
        raise UsageError(f"run: {', '.join(given)} only apply with --kubernetes")
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
    plans = plans_from_args(args.files, args.param, args.pvc)
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
        return f"(runtime: {what}; {r.origin})"
    flag = "" if r.supported else " [unsupported scheme]"
    return f"{r.uri} ({r.origin}){flag}"


def render_plan(plan: pipeline.Plan) -> str:
    """A readable table: one block per stage, one line per step, reads and mounts under it."""
    lines = [
        f"{plan.name or '?'}  [{plan.format}, {plan.kind}]  {len(plan.steps)} steps, "
        f"{len(plan.stages)} stages"
    ]
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
            dep = f" after {', '.join(s.depends_on)}" if s.depends_on else ""
            mk = f"  [{'; '.join(marks)}]" if marks else ""
            lines.append(f"  {s.id} ({s.kind}){dep}{mk}")
            for r in s.reads:
                lines.append(f"      reads  {_read_str(r)}")
            for r in s.unknown:
                lines.append(f"      unknown {_read_str(r)}  (mixed evidence: not warmed)")
            for r in s.imports:
                lines.append(f"      imports {_read_str(r)}")
            for m in s.pvc_mounts:
                claim = m.claim or f"<{m.claim_pattern or m.claim_origin}>"
                sp = f" subPath={m.sub_path}" if m.sub_path else ""
                ro = " ro" if m.read_only else ""
                s3 = f" -> {m.s3_prefix}" if m.s3_prefix else ""
                lines.append(f"      mounts pvc {claim} at {m.mount_path}{sp}{ro}{s3}")
    ds = plan.datasets()
    if ds:
        lines.append("datasets to warm (plan order):")
        for uri, st, ids in ds:
            lines.append(f"  {uri}  stage {st}  read by {', '.join(ids)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except (pipeline.PipelineError, UsageError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"prefetchd: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("prefetchd: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
