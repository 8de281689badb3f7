"""Every corpus pipeline scored against its hand-written truth.

The project's own corpus (tests/prefetchd/corpus, 25 pipelines written and
compiled for it) always runs; ../shared/corpus runs as an extra suite when it
sits beside the checkout and is skipped, saying so, when it does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from prefetchd.pipeline import score

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWN = os.path.join(ROOT, "tests", "prefetchd", "corpus")
SHARED = os.path.join(ROOT, "..", "shared", "corpus")
OWN_CASES = score.cases(OWN)
SHARED_CASES = score.cases(SHARED)
NO_SHARED = "../shared/corpus is not beside this checkout (an extra suite; the project's own runs)"


def _ids(cases: list[tuple[str, str]]) -> list[str]:
    return [os.path.basename(y) for y, _ in cases]


def test_own_corpus_is_there() -> None:
    # losing the corpus (or a generator's share of it) must not pass silently
    assert len(OWN_CASES) >= 21
    names = [os.path.basename(y) for y, _ in OWN_CASES]
    for prefix in ("kfp2_", "kfp1_", "argo_"):
        assert sum(n.startswith(prefix) for n in names) >= 5, prefix


@pytest.mark.parametrize("yaml_path,truth_path", OWN_CASES, ids=_ids(OWN_CASES))
def test_own_case_matches_truth(yaml_path: str, truth_path: str) -> None:
    sc = score.score_case(yaml_path, truth_path)
    assert sc.checks > 5
    assert sc.ok, "\n".join(sc.failures)


@pytest.mark.skipif(not SHARED_CASES, reason=NO_SHARED)
@pytest.mark.parametrize("yaml_path,truth_path", SHARED_CASES, ids=_ids(SHARED_CASES))
def test_shared_case_matches_truth(yaml_path: str, truth_path: str) -> None:
    sc = score.score_case(yaml_path, truth_path)
    assert sc.checks > 5
    assert sc.ok, "\n".join(sc.failures)


@pytest.mark.parametrize("corpus", [OWN, SHARED], ids=["own", "shared"])
def test_static_read_precision_recall_and_no_writes(corpus: str) -> None:
    if corpus == SHARED and not SHARED_CASES:
        pytest.skip(NO_SHARED)
    r = score.score_corpus(corpus)
    assert r.total("static_tp") >= 20
    assert r.precision >= 0.95 and r.recall >= 0.95, r.summary()
    assert r.total("writes_as_reads") == 0, r.summary()


def test_scorer_detects_a_wrong_plan(tmp_path) -> None:
    """The scorer must fail a plan that differs from the truth."""
    y, t = next(c for c in OWN_CASES if c[0].endswith("argo_pvc_prepare.yaml"))
    with open(t) as f:
        truth = json.load(f)
    truth["steps"]["stage"]["reads"][0]["uri"] = "s3://elsewhere/"
    truth["steps"]["collect"]["depends_on"] = []
    truth["steps"]["collect"]["writes"] = []
    truth["steps"]["collect"]["reads"] = [
        {"uri": "s3://example-vision-results/coco-seg/", "static": True, "origin": "constant"}
    ]
    bad = tmp_path / "pipelines"
    bad.mkdir()
    (bad / "x.truth.json").write_text(json.dumps(truth))
    (bad / "x.yaml").write_text(open(y).read())
    sc = score.score_case(str(bad / "x.yaml"), str(bad / "x.truth.json"))
    assert not sc.ok
    assert any("static reads" in f for f in sc.failures)
    assert any("depends_on" in f for f in sc.failures)
    assert sc.static_fn == 2 and sc.static_fp == 1


def test_scorer_counts_a_write_reported_as_a_read(tmp_path) -> None:
    y, t = next(c for c in OWN_CASES if c[0].endswith("kfp1_named_args.yaml"))
    with open(t) as f:
        truth = json.load(f)
    # pretend the truth says publish writes what it reads: the plan's read is now a write
    truth["steps"]["publish"]["writes"].append({"uri": "s3://example-models/adult/"})
    p = tmp_path / "bad.truth.json"
    p.write_text(json.dumps(truth))
    sc = score.score_case(y, str(p))
    assert sc.writes_as_reads == 1 and not sc.ok


def _score_cli(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "prefetchd.pipeline.score", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def test_score_cli_reports_each_corpus() -> None:
    r = _score_cli(OWN)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = r.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"{OWN}: cases {len(OWN_CASES)}/{len(OWN_CASES)} exact")
    assert "precision 1.000 recall 1.000" in summary and "writes reported as reads 0" in summary


def test_score_cli_without_cases_fails(tmp_path) -> None:
    r = _score_cli(str(tmp_path / "missing"))
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"score: {tmp_path / 'missing'}: no cases (no */NAME.truth.json beside NAME.yaml)"
    ]
    # the default from a folder with no corpus in it fails the same way
    r = _score_cli(cwd=str(tmp_path))
    assert r.returncode == 1 and "no cases" in r.stderr and "Traceback" not in r.stderr
