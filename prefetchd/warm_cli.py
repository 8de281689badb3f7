"""Subcommands that touch the node cache: warm, status, unpin, run --watch-dir.

Who calls it: prefetchd/cli.py adds these subcommands to its parser and dispatches to the
``cmd_*`` functions here. This module does not import prefetchd/cli.py: the conventions both
share (argument types, NAME=VALUE lists) come from fusecache/cliargs.py, the error type from
prefetchd/_errors.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fusecache import cliargs
from prefetchd import pipeline
from prefetchd._errors import UsageError

if TYPE_CHECKING:
    from prefetchd import warm

# `warm` (fusecache, boto3: about 0.2 s of imports) is imported where it is used, so
# `prefetchd plan`, which builds this parser too, does not pay for it.

log = logging.getLogger(__name__)

# bounded: a CI that drops thousands of files must not grow our memory
WATCH_QUEUE_SIZE = 64
WATCH_POLL_SECONDS = 1.0


DEFAULT_PIN_TTL = 24 * 3600.0  # pins of `warm` and `run --watch-dir` expire a day later


def _rate(s: str) -> float:
    from fusecache.config import parse_size

    try:
        v = float(parse_size(s, "--bandwidth-limit"))
    except Exception:  # noqa: BLE001 - parse_size raises ConfigError/ValueError
        raise argparse.ArgumentTypeError(
            f"invalid --bandwidth-limit {s!r}: expected bytes/s such as 100MiB") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"invalid --bandwidth-limit {s!r}: must be > 0")
    return v


def _default_cache_dir() -> str:
    from fusecache.config import default_cache_dir

    return str(default_cache_dir())


def add_subcommands(sub: Any) -> list[argparse.ArgumentParser]:
    """Add warm, status, unpin, run; returns their parsers (for shared options)."""
    w = sub.add_parser("warm", help="fetch datasets into the node cache and pin them")
    w.add_argument("uris", nargs="*", metavar="URI",
                   help="s3://BUCKET/PREFIX/ (a folder) or s3://BUCKET/KEY (one object)")
    w.add_argument(
        "--pipeline", action="append", metavar="FILE",
        help="warm what this pipeline (or training job: PyTorchJob, TrainJob, JobSet, Job, "
             "Katib Experiment, ...) reads; repeatable (default: only the URIs given)"
    )
    w.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="override a pipeline parameter; repeatable (default: the pipeline's "
                        "own values)")
    w.add_argument("--pvc", action="append", metavar="CLAIM=s3://BUCKET/PREFIX",
                   help="the S3 prefix behind a PVC the pipeline mounts; repeatable "
                        "(default: none)")
    _common(w)
    _endpoint(w)
    _warm_options(w)
    w.add_argument("--allow-empty", action="store_true",
                   help="a URI with no objects under it is not an error (default: exit 1)")
    w.add_argument("--dry-run", action="store_true",
                   help="list and report, fetch nothing (default off)")
    w.add_argument("--json", action="store_true", help="machine-readable report (default off)")
    _group_options(w)
    w.set_defaults(func=cmd_warm)

    s = sub.add_parser("status", help="what prefetchd warmed and how much of it is cached")
    _common(s)
    s.add_argument("--json", action="store_true", help="machine-readable output (default off)")
    s.set_defaults(func=cmd_status)

    u = sub.add_parser("unpin", help="drop prefetchd's pins on datasets")
    u.add_argument("uris", nargs="+", metavar="URI",
                   help="a dataset as warmed (s3://BUCKET/PREFIX, with or without the slash)")
    _common(u)
    u.set_defaults(func=cmd_unpin)

    r = sub.add_parser("run", help="daemon: warm pipelines dropped into a folder, in arrival order")
    r.add_argument("--watch-dir", required=True, metavar="DIR",
                   help="warm pipeline files dropped here")
    _common(r)
    _endpoint(r)
    _warm_options(r)
    r.add_argument("--once", action="store_true",
                   help="process what is there, then exit (default: run until SIGTERM)")
    r.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="override a parameter of every pipeline (repeatable; default: none)")
    r.add_argument("--pvc", action="append", metavar="CLAIM=s3://BUCKET/PREFIX",
                   help="the S3 prefix behind a PVC the pipelines mount "
                        "(repeatable; default: none)")
    r.set_defaults(func=cmd_run)
    return [w, s, u, r]


def _warm_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--concurrency", type=cliargs.int_range("--concurrency", 1, 1024),
                   default=16, metavar="N", help="parallel GETs (default 16)")
    p.add_argument("--bandwidth-limit", type=_rate, default=None, metavar="RATE",
                   help="bytes/s, e.g. 200MiB (default: unlimited)")
    p.add_argument("--pin-ttl", type=cliargs.duration("--pin-ttl", allow_never=True),
                   default=DEFAULT_PIN_TTL, metavar="DURATION",
                   help="pins expire after this: 90s, 30m, 1h, 2d, or 'never' (kept until "
                        "`prefetchd unpin`) (default 24h)")


def _group_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group-striping", action="store_true",
                   help="fetch and pin only the blocks this node owns in the cache group "
                        "(the group file's members, weighted rendezvous per block) "
                        "(default off: every block)")
    p.add_argument("--group", default=None, metavar="FILE",
                   help="the cache group file (default: CACHE_DIR/group.json, which the "
                        "Kubernetes agent writes)")
    p.add_argument("--replicas", type=cliargs.int_range("--replicas", 1, 64), default=None,
                   metavar="N", help="with --group-striping: members that hold each block "
                                     "(default: the group file's)")


def load_striping_group(args: argparse.Namespace, cache_dir: str) -> Any:
    """The Group ``--group-striping`` warms this node's share of, or None without it."""
    if not getattr(args, "group_striping", False):
        if getattr(args, "group", None) or getattr(args, "replicas", None):
            raise UsageError("--group/--replicas need --group-striping")
        return None
    import dataclasses

    from fusecache.group import GROUP_FILE, GroupFileError, load_group

    path = args.group or os.path.join(cache_dir, GROUP_FILE)
    try:
        group = load_group(path)
    except FileNotFoundError:
        raise UsageError(f"--group-striping: no group file {path} (give --group FILE, or run "
                         "the Kubernetes agent with --peer-listen)") from None
    except (OSError, GroupFileError) as e:
        raise UsageError(f"--group-striping: {e}") from None
    if group.member(group.self_name) is None:
        raise UsageError(f"--group-striping: {path}: this node ({group.self_name}) is not "
                         "among its members")
    if args.replicas is not None:
        group = dataclasses.replace(group, replicas=args.replicas)
    return group


def _check_cache_dir(cache_dir: str) -> None:
    """A --cache-dir that is a file (or under one) is bad input, named before S3 is asked."""
    problem = cliargs.dir_problem(cache_dir)
    if problem:
        raise UsageError(f"--cache-dir {cache_dir}: {problem}")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache-dir", default=None, metavar="DIR",
        help="node cache dir (default: fusecache's, /var/lib/fusecache for root)"
    )


def _endpoint(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint-url", type=cliargs.endpoint_url, default=None, metavar="URL",
                   help="S3 endpoint, http(s)://HOST[:PORT] (default: boto3's chain, "
                        "including AWS_ENDPOINT_URL)")


class NothingToWarm(UsageError):
    """Files that hold nothing to warm now (work held or done, claims no --pvc resolves):
    bad input for ``warm --pipeline`` (exit 2), a file handled for ``run --watch-dir``."""


def _targets(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(s3 URIs to warm in plan order, locations we cannot warm)."""
    uris = list(args.uris or [])
    skipped: list[str] = []
    if args.pipeline and _job_files(args.pipeline):
        uris += _job_targets(args, skipped)
    elif args.pipeline:
        plans = pipeline.analyze_all(
            args.pipeline,
            cliargs.key_values(args.param, "--param", UsageError),
            cliargs.key_values(args.pvc, "--pvc", UsageError),
        )
        claims = []
        for p in plans:
            uris += [u for u, _, _ in p.datasets()]
            if p.finished or p.held:  # as plan says, and the agent does
                skipped.append(f"{p.name}: " + (p.held or f"{str(p.phase).lower()}, the "
                                                "workflow has finished"))
            for s in p.steps:
                for r in s.reads:
                    if not (r.supported and r.static):
                        skipped.append(f"{s.id}: {r.uri or r.pattern or r.key or r.origin}")
                    elif r.written_by:
                        skipped.append(f"{s.id}: {r.uri} (written by {r.written_by} earlier "
                                       "in the run)")
            for sid, m, hint in pipeline.unresolved_mounts(p):
                claims.append(f"{sid}: pvc {pipeline.describe_mount(m)} at {m.mount_path}; {hint}")
        skipped += claims
        if not uris and claims:
            raise NothingToWarm(f"warm: nothing to warm; {claims[0]}"
                                + (f" (and {len(claims) - 1} more)" if len(claims) > 1 else ""))
    elif args.param or args.pvc:
        raise UsageError("--param/--pvc need --pipeline")
    if not uris and not args.pipeline:
        raise UsageError("warm: give URIs or --pipeline FILE")
    from prefetchd import warm

    for u in uris:
        warm.parse_s3_uri(u)
    if args.endpoint_url is None and os.environ.get("AWS_ENDPOINT_URL"):
        try:
            cliargs.check_endpoint_url(os.environ["AWS_ENDPOINT_URL"], "AWS_ENDPOINT_URL")
        except ValueError as e:
            raise UsageError(str(e)) from None
    return uris, skipped


def _job_files(files: list[str]) -> bool:
    from prefetchd.workloads import plan_cli

    return plan_cli.claims(files)


def _job_targets(args: argparse.Namespace, skipped: list[str]) -> list[str]:
    """What the training jobs in ``--pipeline`` files read, in the order the agent warms them
    (``prefetchd plan`` shows the same); claims resolved by ``--pvc`` or by the PVCs/PVs in
    the files. What cannot be warmed ahead goes to *skipped*."""
    from prefetchd.workloads import WorkloadError, plan_cli

    if args.param:
        raise UsageError("--param is for pipelines; a training job's values are its own")
    try:
        works, _ignored, view = plan_cli.load(args.pipeline)
    except WorkloadError as e:
        raise UsageError(str(e)) from None
    pvc_map = dict(cliargs.key_values(args.pvc, "--pvc", UsageError))
    out: list[str] = []
    for w in works:
        if w.state.done:  # as the agent does: nothing of it will run again
            skipped.append(f"{w.key}: {w.state.value}, {w.state.why_nothing}")
            continue
        resolve = plan_cli.resolver(w, pvc_map, view)
        out += [t.dataset for t in w.targets(resolve) if t.dataset not in out]
        for g in w.groups:
            for ref in g.datasets:
                uri = resolve(ref)
                maker = w.made_by_another(g.name, ref, uri)
                if maker:  # (once, by its location or, unresolved, by how it is written)
                    skipped.append(f"{w.key} {g.name}: {uri or ref.describe()} (written by "
                                   f"{maker} as the job runs)")
                    continue
                if uri is not None:
                    continue
                if ref.direction != "read":
                    why = "read or written"
                elif ref.claim:
                    why = plan_cli.unresolved_claim(ref, w.namespace, view)
                else:
                    why = "known at run time" if ref.pattern else \
                        pipeline.not_warmable(ref.describe()).strip(" []")
                skipped.append(f"{w.key} {g.name}: {ref.describe()} ({why})")
    if not out:
        raise NothingToWarm(f"warm: nothing to warm in {', '.join(args.pipeline)}"
                            + (f"; {skipped[0]}" if skipped else ""))
    return out


def cmd_warm(args: argparse.Namespace) -> int:
    from fusecache.blockmem import reuse_block_buffers
    from prefetchd import warm

    _quick_gil_handoff()
    reuse_block_buffers()
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:
        # an endpoint that cannot be reached is warm's own one line (exit 2): not also the
        # circuit breaker's warning before it (a new user's walkthrough, 2026-12-07)
        logging.getLogger("fusecache.circuit").setLevel(logging.ERROR)
    uris, unsupported = _targets(args)
    cache_dir = args.cache_dir or _default_cache_dir()
    _check_cache_dir(cache_dir)
    group = load_striping_group(args, cache_dir)
    w = warm.Warmer(
        cache_dir,
        args.endpoint_url,
        args.concurrency,
        args.bandwidth_limit,
        args.pin_ttl,
        args.dry_run,
        progress=None if args.json else warm.tty_progress(),
        group=group,
    )
    with _stop_on_signals(w.stop):
        try:
            results = w.warm(uris)
        except warm.WarmError as e:
            raise UsageError(str(e)) from None
    if sys.stderr.isatty() and not args.json:
        sys.stderr.write("\n")
    rc = _report(
        results,
        unpinned=unsupported,
        as_json=args.json,
        dry_run=args.dry_run,
        timings=w.timings,
    )
    if w.stop.is_set():
        print("prefetchd: interrupted: the warm is recorded as partial with its pins "
              "(see prefetchd status); run it again to finish", file=sys.stderr)
        if w.left_behind:  # GETs S3 leaves hanging: their threads are not waited for
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        return 130
    empty = [r.uri for r in results if r.objects == 0]
    for u in empty:
        print(f"prefetchd: warning: no objects under {u} (a misspelled prefix?)",
              file=sys.stderr)
    if empty and not args.allow_empty:
        return max(rc, 1)
    return rc


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set *stop* (the warm ends within a second and records what it did)
    instead of raising KeyboardInterrupt at a random place; a second Ctrl-C is the usual
    KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _quick_gil_handoff() -> None:
    """Let a thread that finished a GIL-free call (an LMDB commit, a socket read) run again
    within 1 ms instead of Python's default 5 ms.

    A large object's blocks are stored by one thread while up to --concurrency threads
    parse HTTP responses; with the default interval that storing thread waits for the GIL
    after every C call and becomes the bottleneck (measured on 2 cores, 512 MiB object:
    fetch 1.05-1.52 s with the default, 0.89-0.93 s with 1 ms; 600 x 110 KiB unchanged).
    Only for the warm/run processes themselves, not for library users of Warmer.
    """
    if sys.getswitchinterval() > 0.001:
        sys.setswitchinterval(0.001)


def _report(
    results: list[warm.DatasetResult],
    unpinned: list[str],
    as_json: bool,
    dry_run: bool,
    timings: dict[str, float] | None = None,
) -> int:
    failed = sum(len(r.failed) for r in results)
    if as_json:
        json.dump(
            {
                "datasets": [r.__dict__ for r in results],
                "not_warmable": unpinned,
                "failed_objects": failed,
                "dry_run": dry_run,
                "seconds": {k: round(v, 4) for k, v in (timings or {}).items()},
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
    elif dry_run:  # (listed, not fetched: it must not read like a warm of a cached dataset)
        for r in results:
            print(f"{r.uri}: {r.objects} objects, {r.bytes} bytes (dry run: listed only, "
                  "nothing fetched or pinned)")
    else:
        for r in results:
            why = "interrupted" if r.interrupted else "cache full of pinned data"
            print(
                f"{r.uri}: {r.objects} objects, {r.bytes} bytes; transferred {r.transferred} bytes "
                f"({r.fetched_objects} objects)"
                + (
                    f"; SKIPPED {r.skipped} objects ({r.skipped_bytes} bytes): {why}"
                    if r.skipped
                    else ""
                )
                + (f"; FAILED {len(r.failed)} objects" if r.failed else "")
                + (f"; {r.others_bytes} bytes are other group members' share"
                   if r.others_bytes else "")
            )
    if not as_json:
        for u in unpinned:
            print(f"not warmed: {u}")
    full = [r for r in results if r.skipped and not r.interrupted]
    if full:  # (an interrupt is reported, exit 130, by the caller)
        print(f"prefetchd: {sum(r.skipped for r in full)} objects "
              f"({sum(r.skipped_bytes for r in full)} bytes) not warmed: the node cache is full "
              "of pinned data (it fills to its size less 2 blocks); the warm is recorded as "
              "partial: unpin what is done (prefetchd status, unpin) or give the cache more "
              "room (--disk-cache-size)", file=sys.stderr)
    if failed:
        print(f"prefetchd: {failed} objects failed", file=sys.stderr)
    return 1 if failed or full else 0


def cmd_status(args: argparse.Namespace) -> int:
    from prefetchd import warm

    try:
        rows = warm.status(args.cache_dir or _default_cache_dir())
    except warm.WarmError as e:
        raise UsageError(str(e)) from None
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not rows:
        print("nothing warmed")
    for r in rows:
        when = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["warmed_at"]))
            if r["warmed_at"]
            else "?"
        )
        exp = r["pin_expires_at"]
        if not r["pinned"]:
            pins = "not pinned"
        elif exp is None:
            pins = "pinned (no expiry)"
        else:
            pins = "pinned until " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(exp))
        print(
            f"{r['uri']}: {r['cached_objects']}/{r['objects']} objects, "
            f"{r['cached_bytes']}/{r['bytes']} bytes cached; {pins}"
            + (f" by {', '.join(r['pinned_by'])}" if r.get("pinned_by") else "")
            + "; " + ("PARTIAL warm (interrupted, or objects skipped or failed) "
                      if r["partial"] else "warmed ")
            + when
        )
    return 0


def cmd_unpin(args: argparse.Namespace) -> int:
    from prefetchd import warm

    try:
        n, unknown = warm.unpin(args.cache_dir or _default_cache_dir(), args.uris)
    except warm.WarmError as e:
        raise UsageError(str(e)) from None
    print(f"unpinned {n} objects")
    for u in unknown:
        print(f"prefetchd: warning: {u}: not warmed by prefetchd, nothing unpinned "
              "(see prefetchd status)", file=sys.stderr)
    return 1 if unknown else 0


def cmd_run(args: argparse.Namespace) -> int:
    """Watch a folder; warm each new pipeline file in arrival (mtime) order until SIGTERM."""
    from fusecache.blockmem import reuse_block_buffers
    from prefetchd import warm

    _quick_gil_handoff()
    reuse_block_buffers()
    wd = args.watch_dir
    if not os.path.isdir(wd):
        raise UsageError(f"--watch-dir {wd}: not a directory")
    cache_dir = args.cache_dir or _default_cache_dir()
    _check_cache_dir(cache_dir)
    # bad --param/--pvc values are refused now, not once per file
    cliargs.key_values(args.param, "--param", UsageError)
    pipeline.parse_pvc_map(cliargs.key_values(args.pvc, "--pvc", UsageError))
    stop = threading.Event()
    q: queue.Queue[str] = queue.Queue(maxsize=WATCH_QUEUE_SIZE)
    queued: set[str] = set()
    done_dir = os.path.join(wd, ".done")
    failed_dir = os.path.join(wd, ".failed")
    os.makedirs(done_dir, exist_ok=True)
    os.makedirs(failed_dir, exist_ok=True)

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping; the file being warmed stays in the folder (its warm "
                 "is recorded as partial), to be warmed again", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def worker() -> None:
        # (after a stop, files picked up but not started stay in the folder, untouched)
        while not stop.is_set():
            try:
                path = q.get(timeout=0.2)
            except queue.Empty:
                if args.once and scanned.is_set():
                    return
                continue
            dest: str | None = done_dir
            try:
                log.info("warming %s", path)
                # what warm --pipeline warms of the file: a pipeline's or a training job's
                uris, skipped = _targets(argparse.Namespace(
                    uris=[], pipeline=[path], param=args.param, pvc=args.pvc,
                    endpoint_url=args.endpoint_url))
                for what in skipped:
                    log.warning("%s: not warmed: %s", path, what)
                w = warm.Warmer(
                    cache_dir,
                    args.endpoint_url,
                    args.concurrency,
                    args.bandwidth_limit,
                    args.pin_ttl,
                    stop=stop,
                )
                res = w.warm(uris)
                if stop.is_set():  # interrupted: not done; warmed again on the next run
                    dest = None
                log.info(
                    "%s: %d datasets, %d bytes transferred, %d objects failed",
                    path,
                    len(res),
                    sum(r.transferred for r in res),
                    sum(len(r.failed) for r in res),
                )
            except NothingToWarm as e:  # (a held Job, say: handled, to be dropped again)
                log.warning("%s", e if path in str(e) else f"{path}: {e}")
            except (pipeline.PipelineError, warm.WarmError, UsageError) as e:
                log.error("%s", e if path in str(e) else f"{path}: {e}")
                dest = failed_dir
            except Exception:  # noqa: BLE001 - the daemon survives one bad pipeline
                log.exception("%s: unexpected error", path)
                dest = failed_dir
            finally:
                if dest == failed_dir and args.once:
                    failures.append(path)
                try:
                    if dest is not None:
                        os.replace(path, os.path.join(dest, os.path.basename(path)))
                except OSError as e:
                    log.warning("cannot move %s: %s", path, e)
                queued.discard(path)

    scanned = threading.Event()
    failures: list[str] = []  # --once only: bounded by the files of its one pass
    t = threading.Thread(target=worker, name="prefetchd-watch-worker", daemon=True)
    t.start()
    log.info("watching %s for pipeline files", wd)
    while not stop.is_set():
        try:
            names = [
                os.path.join(wd, n)
                for n in os.listdir(wd)
                if n.endswith((".yaml", ".yml", ".json"))
            ]
        except OSError as e:
            log.error("cannot list %s: %s", wd, e)
            names = []
        for p in sorted(
            names, key=lambda p: (os.stat(p).st_mtime_ns if os.path.exists(p) else 0, p)
        ):
            if p in queued:
                continue
            try:
                q.put(p, timeout=0.5)
                queued.add(p)
            except queue.Full:
                break  # picked up on a later scan
        scanned.set()
        if args.once:
            break
        stop.wait(WATCH_POLL_SECONDS)
    t.join()
    if args.once and failures:  # a script must see that a file was not warmed
        print(f"prefetchd: {len(failures)} of the files failed (moved to {failed_dir}): "
              f"{', '.join(os.path.basename(f) for f in failures[:5])}", file=sys.stderr)
        return 1
    return 0
