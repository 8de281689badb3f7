"""Score plans against the corpus truth files (`pipeline-truth/1`, see ../shared/corpus/README.md).

    python -m prefetchd.pipeline.score [CORPUS_DIR]     # default ../shared/corpus

Checks per case: step ids, depends_on and stage exact; static reads (step, uri)
precision and recall; no truth write reported as a read; runtime-only reads
reported as runtime-only (step, origin); PVC mounts (claim, mount_path,
sub_path, read_only) exact; loop (items_from, items), condition presence and
exit_handler exact; importer URIs exact.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from prefetchd import pipeline


@dataclass
class CaseScore:
    name: str
    checks: int = 0
    failures: list[str] = field(default_factory=list)
    static_tp: int = 0
    static_fp: int = 0
    static_fn: int = 0

    def check(self, ok: bool, msg: str) -> None:
        self.checks += 1
        if not ok:
            self.failures.append(msg)

    @property
    def ok(self) -> bool:
        return not self.failures


def cases(corpus: str) -> list[tuple[str, str]]:
    out = []
    for t in sorted(glob.glob(os.path.join(corpus, "*", "*.truth.json"))):
        y = t[: -len(".truth.json")] + ".yaml"
        if os.path.exists(y):
            out.append((y, t))
    return out


def score_case(yaml_path: str, truth_path: str) -> CaseScore:
    with open(truth_path) as f:
        truth = json.load(f)
    sc = CaseScore(os.path.relpath(yaml_path, os.path.dirname(os.path.dirname(yaml_path))))
    try:
        plan = pipeline.analyze([yaml_path])
    except pipeline.PipelineError as e:
        sc.check(False, f"analysis failed: {e}")
        return sc
    got = {s.id: s for s in plan.steps}
    want: dict[str, Any] = truth["steps"]
    sc.check(
        set(got) == set(want),
        f"step ids: extra {sorted(set(got) - set(want))}, missing {sorted(set(want) - set(got))}",
    )
    for sid, w in want.items():
        s = got.get(sid)
        if s is None:
            continue
        sc.check(
            sorted(s.depends_on) == sorted(w["depends_on"]),
            f"{sid}: depends_on {sorted(s.depends_on)} != {sorted(w['depends_on'])}",
        )
        sc.check(s.stage == w["stage"], f"{sid}: stage {s.stage} != {w['stage']}")
        sc.check(s.exit_handler == w["exit_handler"], f"{sid}: exit_handler {s.exit_handler}")
        sc.check(
            (s.condition is None) == (w["condition"] is None),
            f"{sid}: condition {s.condition!r} vs {w['condition']!r}",
        )
        wl, gl = w["loop"], s.loop
        sc.check((wl is None) == (gl is None), f"{sid}: loop {gl} vs {wl}")
        if wl and gl:
            sc.check(
                gl.items_from == wl["items_from"],
                f"{sid}: loop items_from {gl.items_from} != {wl['items_from']}",
            )
            if wl["items_from"] != "task-output":
                sc.check(gl.items == wl["items"], f"{sid}: loop items {gl.items} != {wl['items']}")
        # static reads
        w_static = {r["uri"] for r in w["reads"] if r["static"]}
        g_static = {r.uri for r in s.reads if r.static}
        tp = len(w_static & g_static)
        sc.static_tp += tp
        sc.static_fp += len(g_static - w_static)
        sc.static_fn += len(w_static - g_static)
        sc.check(
            w_static == g_static, f"{sid}: static reads {sorted(g_static)} != {sorted(w_static)}"
        )
        w_rt = {r["origin"] for r in w["reads"] if not r["static"]}
        g_rt = {r.origin for r in s.reads if not r.static}
        sc.check(w_rt == g_rt, f"{sid}: runtime-only read origins {sorted(g_rt)} != {sorted(w_rt)}")
        writes = {x["uri"] for x in w.get("writes", []) if x.get("uri")}
        bad = writes & {r.uri for r in s.reads}
        sc.check(not bad, f"{sid}: writes reported as reads: {sorted(bad)}")
        wp = sorted(
            ((p["claim"], p["mount_path"], p["sub_path"], p["read_only"]) for p in w["pvc_mounts"]),
            key=str,
        )
        gp = sorted(
            ((p.claim, p.mount_path, p.sub_path, p.read_only) for p in s.pvc_mounts), key=str
        )
        sc.check(wp == gp, f"{sid}: pvc mounts {gp} != {wp}")
        wpo = sorted(p["claim_origin"] for p in w["pvc_mounts"])
        gpo = sorted(p.claim_origin for p in s.pvc_mounts)
        sc.check(wpo == gpo, f"{sid}: pvc claim origins {gpo} != {wpo}")
        if w.get("imports"):
            wi = w["imports"]
            gi = s.imports[0] if s.imports else None
            sc.check(
                gi is not None and gi.uri == wi["uri"] and gi.static == wi["static"],
                f"{sid}: imports {gi} != {wi['uri']}",
            )
    return sc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    corpus = args[0] if args else os.path.join("..", "shared", "corpus")
    total = passed = checks = fails = tp = fp = fn = 0
    for y, t in cases(corpus):
        sc = score_case(y, t)
        total += 1
        passed += sc.ok
        checks += sc.checks
        fails += len(sc.failures)
        tp, fp, fn = tp + sc.static_tp, fp + sc.static_fp, fn + sc.static_fn
        print(
            f"{'PASS' if sc.ok else 'FAIL'} {sc.name} "
            f"({sc.checks - len(sc.failures)}/{sc.checks} checks)"
        )
        for f in sc.failures:
            print(f"     {f}")
    prec = tp / (tp + fp) if tp + fp else 1.0
    rec = tp / (tp + fn) if tp + fn else 1.0
    print(
        f"cases {passed}/{total} exact; checks {checks - fails}/{checks}; "
        f"static reads precision {prec:.3f} recall {rec:.3f} ({tp} found, {fp} extra, {fn} missed)"
    )
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
