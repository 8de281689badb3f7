"""`prefetchd plan` end to end through main(): JSON shape, table, --param, --pvc."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from prefetchd import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
P = os.path.join(ROOT, "..", "shared", "corpus", "pipelines")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_json_fields(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "plan", os.path.join(P, "argo_dag_s3_artifacts.yaml"), "--json")
    assert rc == 0
    doc = json.loads(out)
    steps = {s["id"]: s for s in doc["steps"]}
    assert set(steps) == {"fetch-labels", "fetch-splits", "train"}
    assert steps["train"]["depends_on"] == ["fetch-labels", "fetch-splits"]
    assert steps["train"]["stage"] == 1
    for s in doc["steps"]:
        for k in (
            "id",
            "depends_on",
            "stage",
            "reads",
            "pvc_mounts",
            "loop",
            "condition",
            "exit_handler",
        ):
            assert k in s
    uris = sorted(r["uri"] for r in steps["fetch-splits"]["reads"])
    assert uris == ["s3://example-vision/flowers102/train/", "s3://example-vision/flowers102/val/"]
    assert all(r["static"] and r["origin"] == "loop-item" for r in steps["fetch-splits"]["reads"])
    assert [d["uri"] for d in doc["datasets"]][0].startswith("s3://example-vision/")


def test_plan_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "plan", os.path.join(P, "kfp2_sentiment_lr_sweep.yaml"))
    assert rc == 0
    assert "stage 0" in out and "importer" in out
    assert "s3://example-nlp/imdb/test.parquet" in out
    assert "loop x2" in out


def test_param_override_changes_reads(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "plan",
        os.path.join(P, "kfp2_sentiment_lr_sweep.yaml"),
        "--json",
        "--param",
        "imdb_root=s3://other/imdb",
        "--param",
        "lrs=[0.1, 0.2, 0.3]",
    )
    assert rc == 0
    doc = json.loads(out)
    steps = {s["id"]: s for s in doc["steps"]}
    assert [r["uri"] for r in steps["test-model"]["reads"]] == ["s3://other/imdb/test.parquet"]
    assert steps["finetune"]["loop"]["items"] == [0.1, 0.2, 0.3]


def test_argo_param_override(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "plan",
        os.path.join(P, "argo_cron_steps_pvc.yaml"),
        "--json",
        "--param",
        "corpus_uri=s3://mine/wiki/",
    )
    assert rc == 0
    steps = {s["id"]: s for s in json.loads(out)["steps"]}
    assert [r["uri"] for r in steps["sync"]["reads"]] == ["s3://mine/wiki/"]
    # publish writes its index: never a read
    assert steps["publish"]["reads"] == []


def test_pvc_map_turns_mount_reads_into_s3(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "plan",
        os.path.join(P, "argo_cron_steps_pvc.yaml"),
        "--json",
        "--pvc",
        "doc-corpus=s3://corpus-bucket/pvcs/doc-corpus",
    )
    assert rc == 0
    steps = {s["id"]: s for s in json.loads(out)["steps"]}
    # embed-* read /corpus (args --in /corpus): the claim's prefix plus the subPath
    for sid in ("embed-small", "embed-large"):
        pvc_reads = [r for r in steps[sid]["reads"] if r["origin"] == "pvc"]
        assert [r["uri"] for r in pvc_reads] == ["s3://corpus-bucket/pvcs/doc-corpus/wiki/"]
        assert (
            steps[sid]["pvc_mounts"][0]["s3_prefix"] == "s3://corpus-bucket/pvcs/doc-corpus/wiki/"
        )
    # sync writes into /corpus (aws s3 sync SRC /corpus): not a read of the PVC
    assert [r["origin"] for r in steps["sync"]["reads"]] == ["pipeline-parameter"]


def test_pvc_map_path_under_mount(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "plan",
        os.path.join(P, "kfp1_mnist_volumeop.yaml"),
        "--json",
        "--pvc",
        "reference-testsets=s3://ref/sets",
    )
    assert rc == 0
    steps = {s["id"]: s for s in json.loads(out)["steps"]}
    pvc_reads = [r["uri"] for r in steps["evaluate"]["reads"] if r["origin"] == "pvc"]
    assert pvc_reads == ["s3://ref/sets/mnist-test"]  # a path under the mount: file or folder


def test_console_script_runs() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefetchd.cli",
            "plan",
            os.path.join(P, "argo_dag_s3_artifacts.yaml"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"] == "flowers-train-"


def test_analyze_documents_from_dicts() -> None:
    import yaml

    from prefetchd import pipeline

    with open(os.path.join(P, "argo_dag_s3_artifacts.yaml")) as f:
        obj = yaml.safe_load(f)
    plans = pipeline.analyze_documents([obj], source="default/flowers-train-abc")
    assert len(plans) == 1
    assert [s.id for s in plans[0].steps][:2] == ["fetch-labels", "fetch-splits"]
