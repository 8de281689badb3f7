"""`prefetchd plan` end to end through main(): JSON shape, table, --param, --pvc."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from prefetchd import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
P = os.path.join(ROOT, "tests", "prefetchd", "corpus", "pipelines")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_json_fields(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "plan", os.path.join(P, "argo_withitems_langs.yaml"), "--json")
    assert rc == 0
    doc = json.loads(out)
    steps = {s["id"]: s for s in doc["steps"]}
    assert set(steps) == {"tokenize", "vocab", "merge"}
    assert steps["merge"]["depends_on"] == ["tokenize", "vocab"]
    assert steps["merge"]["stage"] == 1
    for s in doc["steps"]:
        for k in (
            "id",
            "depends_on",
            "stage",
            "reads",
            "writes",
            "unknown",
            "pvc_mounts",
            "loop",
            "condition",
            "exit_handler",
        ):
            assert k in s
    uris = sorted(r["uri"] for r in steps["vocab"]["reads"])
    assert uris == ["s3://example-text/wiki/de/", "s3://example-text/wiki/en/"]
    assert all(r["static"] and r["origin"] == "loop-item" for r in steps["vocab"]["reads"])
    # withItems over literal strings feeding a template input: one read per item
    assert [r["uri"] for r in steps["tokenize"]["reads"]] == [
        f"s3://example-text/cc100/part-{lang}.parquet" for lang in ("en", "de", "fr")
    ]
    assert [d["uri"] for d in doc["datasets"]][0].startswith("s3://example-text/")
    # merge uploads (aws s3 cp local -> S3): a write, never a dataset
    assert steps["merge"]["reads"] == []
    assert [w["uri"] for w in steps["merge"]["writes"]] == ["s3://example-text/merged/"]


def test_plan_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "plan", os.path.join(P, "kfp2_copy_pvc.yaml"))
    assert rc == 0
    assert "stage 0" in out and "importer" in out
    assert "s3://example-audio/commonvoice/en/v16/" in out
    rc, out, _ = run(capsys, "plan", os.path.join(P, "kfp2_parallelfor_dicts.yaml"))
    assert rc == 0 and "loop x2" in out


def test_plan_shows_unknown_and_does_not_warm_it(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "plan", os.path.join(P, "argo_mixed_evidence.yaml"))
    assert rc == 0
    assert "unknown s3://example-fs/features/v2/" in out
    warm = out.split("datasets to warm")[1]
    assert "features/v2/" not in warm and "manifest.json" not in warm


def test_plan_shard_patterns(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "plan", os.path.join(P, "argo_wds_shards.yaml"), "--json")
    assert rc == 0
    doc = json.loads(out)
    reads = {r["uri"]: r for s in doc["steps"] for r in s["reads"]}
    r = reads["s3://example-wds/laion-a/train-{000000..001023}.tar"]
    assert r["pattern_kind"] == "shard" and r["prefix"] == "s3://example-wds/laion-a/train-"
    huge = reads["s3://example-wds/raw/{0..99999999}.jpg"]
    assert huge["prefix"] == "s3://example-wds/raw/"
    assert "s3://example-wds/raw/{0..99999999}.jpg" in [d["uri"] for d in doc["datasets"]]


def test_param_override_changes_reads(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "plan",
        os.path.join(P, "kfp2_parallelfor_dicts.yaml"),
        "--json",
        "--param",
        'splits=["s3://other/a/", "s3://other/b/", "s3://other/c/"]',
    )
    assert rc == 0
    doc = json.loads(out)
    steps = {s["id"]: s for s in doc["steps"]}
    assert [r["uri"] for r in steps["evaluate"]["reads"]] == [
        "s3://other/a/", "s3://other/b/", "s3://other/c/"
    ]
    assert steps["evaluate"]["loop"]["items"] == ["s3://other/a/", "s3://other/b/", "s3://other/c/"]
    rc, out, _ = run(capsys, "plan", os.path.join(P, "kfp2_nested_conditions.yaml"), "--json",
                     "--param", "table=s3://other/events/")
    assert rc == 0
    steps = {s["id"]: s for s in json.loads(out)["steps"]}
    assert [r["uri"] for r in steps["check"]["reads"]] == ["s3://other/events/"]
    assert [r["uri"] for r in steps["train"]["reads"]][0] == "s3://other/events/mon/"


def test_argo_param_override(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "plan",
        os.path.join(P, "argo_pvc_prepare.yaml"),
        "--json",
        "--param",
        "src=s3://mine/coco/",
    )
    assert rc == 0
    steps = {s["id"]: s for s in json.loads(out)["steps"]}
    assert [r["uri"] for r in steps["stage"]["reads"]] == ["s3://mine/coco/"]
    # collect uploads its results: never a read
    assert steps["collect"]["reads"] == []


def test_workflow_template_ref_with_its_template(capsys: pytest.CaptureFixture[str]) -> None:
    lib = os.path.join(P, "argo_wftmplref_lib.yaml")
    for f, snap in (("argo_wftmplref_run.yaml", "2024-07-01"),
                    ("argo_cron_wftmplref.yaml", "2024-06-01")):
        rc, out, err = run(capsys, "plan", os.path.join(P, f), lib, "--json")
        assert rc == 0, err
        steps = {s["id"]: s for s in json.loads(out)["steps"]}
        assert [r["uri"] for r in steps["pull"]["reads"]] == [
            f"gs://example-warehouse/churn/{snap}/"
        ]
    # without the template: one line naming the reference, exit 2
    rc, out, err = run(capsys, "plan", os.path.join(P, "argo_wftmplref_run.yaml"))
    assert rc == 2 and out == ""
    assert "workflowTemplateRef" in err and "'churn-train'" in err and len(err.splitlines()) == 1


def test_pvc_map_turns_mount_reads_into_s3(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "plan",
        os.path.join(P, "argo_pvc_prepare.yaml"),
        "--json",
        "--pvc",
        "vision-datasets=s3://corpus-bucket/pvcs/vision",
    )
    assert rc == 0
    steps = {s["id"]: s for s in json.loads(out)["steps"]}
    # train-* read /data/train2017 (args --images): the claim's prefix, the subPath, the path
    for sid in ("train-mask", "train-detr"):
        pvc_reads = [r for r in steps[sid]["reads"] if r["origin"] == "pvc"]
        assert [r["uri"] for r in pvc_reads] == [
            "s3://corpus-bucket/pvcs/vision/coco2017/train2017"
        ]
        assert steps[sid]["pvc_mounts"][0]["s3_prefix"] == "s3://corpus-bucket/pvcs/vision/coco2017/"
    # stage writes into /data (aws s3 sync SRC /data): not a read of the PVC
    assert [r["origin"] for r in steps["stage"]["reads"]] == ["pipeline-parameter"]


def test_pvc_map_path_under_mount(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        capsys,
        "plan",
        os.path.join(P, "kfp2_copy_pvc.yaml"),
        "--json",
        "--pvc",
        "asr-data=s3://ref/asr",
    )
    assert rc == 0
    steps = {s["id"]: s for s in json.loads(out)["steps"]}
    pvc_reads = [r["uri"] for r in steps["train"]["reads"] if r["origin"] == "pvc"]
    # --data /mnt/data/commonvoice is read; --ckpt /mnt/data/ckpt (a checkpoint) is not
    assert pvc_reads == ["s3://ref/asr/commonvoice"]  # a path under the mount: file or folder


def test_console_script_runs() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefetchd.cli",
            "plan",
            os.path.join(P, "argo_withitems_langs.yaml"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"] == "tokenize-langs-"


def test_analyze_documents_from_dicts() -> None:
    import yaml

    from prefetchd import pipeline

    with open(os.path.join(P, "argo_withitems_langs.yaml")) as f:
        obj = yaml.safe_load(f)
    plans = pipeline.analyze_documents([obj], source="default/tokenize-langs-abc")
    assert len(plans) == 1
    assert [s.id for s in plans[0].steps] == ["tokenize", "vocab", "merge"]
