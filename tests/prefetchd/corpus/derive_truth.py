"""Complete the hand-written truth files of this corpus (run after editing one).

    python tests/prefetchd/corpus/derive_truth.py

Only derives what follows from the hand-written fields, as ../shared/corpus
did: `upstream` (closure of the hand-written `depends_on`), `stage`, the
top-level `stages`, file names, and the default value of every per-step field
a file leaves out (`kind` container, no loop/condition, no reads/writes/mounts).
It never runs the analysis. Idempotent: rewrites each file in place.
"""

from __future__ import annotations

import glob
import json
import os

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = {
    "kind": "container", "loop": None, "condition": None, "exit_handler": False,
    "reads": [], "pvc_mounts": [], "writes": [],
}


def complete(path: str) -> None:
    with open(path) as f:
        t = json.load(f)
    name = os.path.basename(path)[: -len(".truth.json")]
    folder = os.path.dirname(path)
    out = {"schema": "pipeline-truth/1", "name": name, "yaml": name + ".yaml"}
    out["source"] = name + ".py" if os.path.exists(os.path.join(folder, name + ".py")) else None
    with open(os.path.join(folder, name + ".yaml")) as f:
        ndocs = sum(1 for d in yaml.safe_load_all(f) if d)
    out.update({k: v for k, v in t.items() if k not in out and k not in ("steps", "stages")})
    out["yaml_documents"] = ndocs
    steps = t["steps"]
    for s in steps.values():
        for k, v in DEFAULTS.items():
            s.setdefault(k, v)
    up: dict[str, list[str]] = {}

    def closure(sid: str) -> list[str]:
        if sid not in up:
            acc: list[str] = []
            for d in steps[sid]["depends_on"]:
                for x in [*closure(d), d]:
                    if x not in acc:
                        acc.append(x)
            up[sid] = acc
        return up[sid]

    stage: dict[str, int] = {}

    def stage_of(sid: str) -> int:
        if sid not in stage:
            stage[sid] = 1 + max((stage_of(d) for d in steps[sid]["depends_on"]), default=-1)
        return stage[sid]

    for sid, s in steps.items():
        s["upstream"] = closure(sid)
        s["stage"] = stage_of(sid)
    out["steps"] = steps
    stages: list[list[str]] = []
    for sid in steps:
        while len(stages) <= stage[sid]:
            stages.append([])
        stages[stage[sid]].append(sid)
    out["stages"] = stages
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    for p in sorted(glob.glob(os.path.join(HERE, "*", "*.truth.json"))):
        complete(p)
        print("completed", os.path.relpath(p, HERE))
