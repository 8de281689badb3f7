"""Score plans against the corpus truth files (`pipeline-truth/1`, see ../shared/corpus/README.md).

    python -m prefetchd.pipeline.score [CORPUS_DIR ...]
        # default: tests/prefetchd/corpus, plus ../shared/corpus when it exists

Called by people and by tests/prefetchd/test_prefetchd_corpus.py. For each
corpus folder (`<corpus>/*/<name>.truth.json` beside `<name>.yaml`) it runs
`pipeline.analyze` on the YAML (plus the truth's `with_files`, e.g. the
WorkflowTemplate a Workflow references) and compares the plan with the truth.

Checks per case: step ids, depends_on and stage exact; static reads (step, uri)
precision and recall; no truth write (nor truth `unknown` location) reported as
a read; runtime-only reads reported as runtime-only (step, origin); PVC mounts
(claim, mount_path, sub_path, read_only) exact; loop (items_from, items),
condition presence and exit_handler exact; importer URIs exact. Prints one line
per case and one summary per corpus (precision, recall, writes reported as
reads); exits 1 when a case fails or a corpus folder holds no cases.
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
    writes_as_reads: int = 0

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
    extra = [os.path.join(os.path.dirname(yaml_path), f) for f in truth.get("with_files") or []]
    try:
        plan = pipeline.analyze([yaml_path, *extra])
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
        sc.writes_as_reads += len(bad)
        sc.check(not bad, f"{sid}: writes reported as reads: {sorted(bad)}")
        unknown = {x["uri"] for x in w.get("unknown", []) if x.get("uri")}
        bad_u = unknown & {r.uri for r in s.reads}
        sc.check(not bad_u, f"{sid}: mixed-evidence locations reported as reads: {sorted(bad_u)}")
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
            # one entry (the README's form) or a list of them
            wis = w["imports"] if isinstance(w["imports"], list) else [w["imports"]]
            want_i = sorted((str(x.get("uri")), bool(x.get("static"))) for x in wis
                            if isinstance(x, dict))
            got_i = sorted((str(g.uri), bool(g.static)) for g in s.imports)
            sc.check(got_i == want_i, f"{sid}: imports {got_i} != {want_i}")
    return sc


@dataclass
class CorpusScore:
    corpus: str
    cases: list[CaseScore] = field(default_factory=list)

    def total(self, attr: str) -> int:
        return sum(getattr(c, attr) for c in self.cases)

    @property
    def precision(self) -> float:
        tp, fp = self.total("static_tp"), self.total("static_fp")
        return tp / (tp + fp) if tp + fp else 1.0

    @property
    def recall(self) -> float:
        tp, fn = self.total("static_tp"), self.total("static_fn")
        return tp / (tp + fn) if tp + fn else 1.0

    def summary(self) -> str:
        passed = sum(c.ok for c in self.cases)
        checks = self.total("checks")
        fails = sum(len(c.failures) for c in self.cases)
        return (
            f"{self.corpus}: cases {passed}/{len(self.cases)} exact; checks {checks - fails}/"
            f"{checks}; static reads precision {self.precision:.3f} recall {self.recall:.3f} "
            f"({self.total('static_tp')} found, {self.total('static_fp')} extra, "
            f"{self.total('static_fn')} missed); writes reported as reads "
            f"{self.total('writes_as_reads')}"
        )


def score_corpus(corpus: str) -> CorpusScore:
    """Score every case of one corpus folder; CorpusScore.cases is empty when it has none."""
    out = CorpusScore(corpus)
    for y, t in cases(corpus):
        out.cases.append(score_case(y, t))
    return out


def default_corpora() -> list[str]:
    """The project's own corpus, and ../shared/corpus when it is there (run from the root)."""
    own = os.path.join("tests", "prefetchd", "corpus")
    shared = os.path.join("..", "shared", "corpus")
    return [own] + ([shared] if os.path.isdir(shared) else [])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a.startswith("-") for a in args):
        print("usage: python -m prefetchd.pipeline.score [CORPUS_DIR ...]", file=sys.stderr)
        return 2
    corpora = args or default_corpora()
    results = []
    for corpus in corpora:
        r = score_corpus(corpus)
        if not r.cases:
            print(f"score: {corpus}: no cases (no */NAME.truth.json beside NAME.yaml)",
                  file=sys.stderr)
            return 1
        for sc in r.cases:
            print(f"{'PASS' if sc.ok else 'FAIL'} {sc.name} "
                  f"({sc.checks - len(sc.failures)}/{sc.checks} checks)")
            for f in sc.failures:
                print(f"     {f}")
        results.append(r)
    for r in results:
        print(r.summary())
    return 0 if all(c.ok for r in results for c in r.cases) else 1


if __name__ == "__main__":
    sys.exit(main())
