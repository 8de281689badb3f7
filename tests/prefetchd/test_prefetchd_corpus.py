"""Every corpus pipeline scored against its hand-written truth (../shared/corpus)."""

from __future__ import annotations

import json
import os

import pytest

from prefetchd.pipeline import score

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "..", "shared", "corpus")
CASES = score.cases(CORPUS)


def test_corpus_is_there() -> None:
    # the corpus has pipelines/, upstream/ and kfp2-argo/; losing it must not pass silently
    assert len(CASES) >= 31
    assert {os.path.basename(os.path.dirname(y)) for y, _ in CASES} >= {
        "pipelines",
        "upstream",
        "kfp2-argo",
    }


@pytest.mark.parametrize("yaml_path,truth_path", CASES, ids=[os.path.basename(y) for y, _ in CASES])
def test_case_matches_truth(yaml_path: str, truth_path: str) -> None:
    sc = score.score_case(yaml_path, truth_path)
    assert sc.checks > 5
    assert sc.ok, "\n".join(sc.failures)


def test_static_read_precision_recall_and_no_writes() -> None:
    tp = fp = fn = 0
    for y, t in CASES:
        sc = score.score_case(y, t)
        tp, fp, fn = tp + sc.static_tp, fp + sc.static_fp, fn + sc.static_fn
    assert tp >= 20 and fp == 0 and fn == 0


def test_scorer_detects_a_wrong_plan(tmp_path) -> None:
    """The scorer must fail a plan that differs from the truth."""
    y, t = next(c for c in CASES if c[0].endswith("argo_cron_steps_pvc.yaml"))
    with open(t) as f:
        truth = json.load(f)
    truth["steps"]["sync"]["reads"][0]["uri"] = "s3://elsewhere/"
    truth["steps"]["publish"]["depends_on"] = []
    bad = tmp_path / "bad.truth.json"
    bad.write_text(json.dumps(truth))
    sc = score.score_case(y, str(bad))
    assert not sc.ok
    assert any("static reads" in f for f in sc.failures)
    assert any("depends_on" in f for f in sc.failures)
