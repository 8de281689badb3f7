"""A training job's datasets, as its plan names them and as the agent names its pods.

The job path (prefetchd/workloads: placement before the pods exist) and the pod path
(prefetchd/k8s/datasets.py: a pod bound to a node, the webhook) read the same containers;
they must agree on what is read and on its name, since placement hashes the name and a
bound pod's urgent warm must find what the plan warmed. The PyTorchJob and its PVC/PV are
shaped as the training operator and the CSI provisioner leave them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from volume_objects import bound_pair

from prefetchd import workloads
from prefetchd.k8s import datasets as ds_mod
from prefetchd.workloads.plan_cli import FileClusterView

NS = "vision"
CONTAINER: dict[str, Any] = {
    "name": "pytorch", "image": "registry.example.com/vision/maskrcnn:2.4",
    "command": ["torchrun", "--nproc_per_node=8", "train.py"],
    "args": [
        "--train-root", "/data/coco/train2017",
        "--val-root=/data/coco/val2017",  # a flag's value under the mount
        "--ann=/data/coco/annotations/instances_train2017.json",  # a file, not a folder
        "--extra", "$(EXTRA_ROOT)/lvis",  # expanded by the kubelet from the env below
        "--note", "$$(EXTRA_ROOT)",  # escaped: the text itself
        "--train_files=s3://tfr/coco/train-*.tfrecord", "--eval_files=s3://tfr/coco/val-*.tfrecord",
        "--model_dir=s3://ckpt/maskrcnn/",  # read or written: shown, not warmed
        "--output-dir", "/data/coco/out",  # written (and fails: the volume is read-only)
    ],
    "env": [{"name": "EXTRA_ROOT", "value": "s3://vision-extra/coco"},
            {"name": "CHECKPOINT_URI", "value": "s3://ckpt/run7/"}],
    "resources": {"limits": {"nvidia.com/gpu": "8"}},
    "volumeMounts": [{"name": "coco", "mountPath": "/data/coco", "readOnly": True}],
}
TEMPLATE = {"spec": {"containers": [CONTAINER], "volumes": [
    {"name": "coco", "persistentVolumeClaim": {"claimName": "coco-2017", "readOnly": True}}]}}
READ = {
    "s3://vision-datasets/coco/2017/train2017",
    "s3://vision-datasets/coco/2017/val2017",
    "s3://vision-datasets/coco/2017/annotations/instances_train2017.json",
    "s3://vision-extra/coco/lvis",
    # (not the env value s3://vision-extra/coco itself: a root the args spell out, read
    # where they do; a var named for what it holds is read whole, see below)
    "s3://tfr/coco/train-*.tfrecord",
    "s3://tfr/coco/val-*.tfrecord",
}


def pytorchjob() -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "maskrcnn", "namespace": NS, "uid": "5d2e"},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                           "template": copy.deepcopy(TEMPLATE)},
                "Worker": {"replicas": 3, "restartPolicy": "OnFailure",
                           "template": copy.deepcopy(TEMPLATE)}}},
            "status": {"conditions": [{"type": "Created", "status": "True",
                                       "reason": "PyTorchJobCreated"}]}}


def worker_pod(index: int) -> dict[str, Any]:
    """The pod the training operator makes: the template plus its labels and env."""
    spec = copy.deepcopy(TEMPLATE["spec"])
    spec["containers"][0]["env"] += [
        {"name": "MASTER_PORT", "value": "23456"}, {"name": "MASTER_ADDR",
                                                     "value": "maskrcnn-master-0"},
        {"name": "WORLD_SIZE", "value": "4"}, {"name": "RANK", "value": str(index + 1)},
        {"name": "PYTHONUNBUFFERED", "value": "1"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"maskrcnn-worker-{index}", "namespace": NS,
                         "labels": {"training.kubeflow.org/job-name": "maskrcnn",
                                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                                    "training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": str(index)},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1",
                                              "kind": "PyTorchJob", "name": "maskrcnn",
                                              "uid": "5d2e", "controller": True}]},
            "spec": spec, "status": {"phase": "Pending"}}


def view() -> FileClusterView:
    pv, pvc = bound_pair(NS, "coco-2017", "pv-coco", {"bucket": "vision-datasets",
                                                      "prefix": "coco/2017"})
    return FileClusterView([pv, pvc])


def test_the_plan_warms_what_the_job_reads_and_names_it_as_the_pod_path_does() -> None:
    work = workloads.read(pytorchjob())
    resolve = workloads.resolver_from_view(view(), NS)
    targets = {t.dataset: t.nodes for t in work.targets(resolve)}
    assert targets == dict.fromkeys(READ, 4)
    assert set(ds_mod.pod_datasets(worker_pod(0), view())) == READ


def test_what_may_be_written_is_shown_but_not_warmed() -> None:
    work = workloads.read(pytorchjob())
    doc = work.to_json(workloads.resolver_from_view(view(), NS))
    shown = {(d.get("uri") or f"pvc {d.get('claim')} {d.get('path')}", d["direction"],
              d["resolved"], d["warmable"]) for d in doc["groups"][0]["datasets"]}
    assert ("s3://ckpt/maskrcnn/", "unknown", None, False) in shown
    assert ("s3://ckpt/run7/", "unknown", None, False) in shown
    # a claim's dataset carries the location it resolves to, and is warmable
    assert ("pvc coco-2017 annotations/instances_train2017.json", "read",
            "s3://vision-datasets/coco/2017/annotations/instances_train2017.json", True) in shown
    # the output path under the mount is no read, and the mount is not read whole
    assert not any("out" in s[0].split("/") or s[2] == "s3://vision-datasets/coco/2017/"
                   for s in shown)


def test_a_mount_named_only_as_output_is_not_read_and_a_subpath_is_a_folder() -> None:
    pod = worker_pod(1)
    c = pod["spec"]["containers"][0]
    c["args"] = ["--output-dir", "/data/coco/out"]
    c["env"] = []
    assert ds_mod.pod_datasets(pod, view()) == []
    c["args"] = []
    c["volumeMounts"][0]["subPath"] = "val2017"
    assert ds_mod.pod_datasets(pod, view()) == ["s3://vision-datasets/coco/2017/val2017/"]
    job = pytorchjob()
    for r in job["spec"]["pytorchReplicaSpecs"].values():
        r["template"]["spec"] = copy.deepcopy(pod["spec"])
    [target] = workloads.read(job).targets(workloads.resolver_from_view(view(), NS))
    assert target.dataset == "s3://vision-datasets/coco/2017/val2017/"


def test_env_built_from_env_and_paths_in_a_list_value() -> None:
    """``TRAIN=s3://$(BUCKET)/...`` (an env var from one defined above it, as the kubelet
    expands it), a reference to nothing known (never the location ``s3://$``), a Paddle-style
    ``-o Train.label_file_list=[/data/a.txt,/data/b.txt]``, and ``--workdir`` (JAX/CLU
    write their checkpoints there: read or written)."""
    pod = worker_pod(0)
    c = pod["spec"]["containers"][0]
    c["env"] = [{"name": "BUCKET", "value": "speech"},
                {"name": "TRAIN", "value": "s3://$(BUCKET)/cv17/de/train/"},
                {"name": "LATER", "value": "s3://$(UNDEFINED)/x/"}]
    c["args"] = ["-o", "Train.label_file_list=[/data/coco/a.txt,/data/coco/b.txt]",
                 "--workdir", "s3://ckpt/jax/run1/", "--eval", "$(TRAIN)eval.tsv"]
    want = {"s3://speech/cv17/de/train/", "s3://speech/cv17/de/train/eval.tsv",
            "s3://vision-datasets/coco/2017/a.txt", "s3://vision-datasets/coco/2017/b.txt"}
    assert set(ds_mod.pod_datasets(pod, view())) == want
    job = pytorchjob()
    for r in job["spec"]["pytorchReplicaSpecs"].values():
        r["template"]["spec"] = copy.deepcopy(pod["spec"])
    r["replicas"] = 3.0  # the API server takes a whole float as the integer
    targets = workloads.read(job).targets(workloads.resolver_from_view(view(), NS))
    assert {t.dataset for t in targets} == want and {t.nodes for t in targets} == {4}


def test_plan_shows_a_queued_job_once_with_its_workloads_queue_state(tmp_path) -> None:
    """``kubectl get job,workload -o yaml`` as given to ``prefetchd plan``: the Workload
    Kueue made for the Job is the Job's queue record (as the agent reads it), not a second
    job reading the same datasets."""
    import subprocess
    import sys

    import yaml
    from training_objects import admitted, batch_job, workload_for

    job = batch_job("seg", NS, "s3://geo/tiles/", "gpu", "prod", parallelism=4)
    job["metadata"]["uid"] = "b2f1c0de"
    wl = workload_for(job, [("main", 4, job["spec"]["template"])], "gpu", ("prod", 1000))
    wl["status"] = admitted(wl)
    path = tmp_path / "queued.yaml"
    path.write_text(yaml.safe_dump_all([job, wl]))
    r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", "--json", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    [work] = doc["work"]
    assert (work["kind"], work["state"], work["priority"]) == ("Job", "admitted", 1000)
    assert [t["dataset"] for t in work["warm"]] == ["s3://geo/tiles/"]
    assert doc["ignored"] == [f"Workload {NS}/{wl['metadata']['name']} (its owner's: job {NS}/seg)"]


def test_a_script_is_read_command_by_command_and_python_c_as_python() -> None:
    """A ``bash -c`` script: each line a command (an upload on one line does not make the next
    line's training data its destination), a heredoc a document naming inputs, a location both
    read and listed (``aws s3 ls``) settled as unknown; ``python -c`` read as Python (boto3 by
    bucket and key, pandas read then write)."""
    script = "\n".join([
        "set -euo pipefail",
        "aws s3 cp /tmp/started.json s3://run-status/job7/started.json",
        "python train.py s3://train-data/imagenet/train/ \\",
        "    --epochs 90",
        "cat > /tmp/cfg.json <<EOF",
        '{"inputs": "s3://train-data/imagenet/val/", "labels": "s3://train-data/labels/"}',
        "EOF",
        "aws s3 ls s3://train-data/extra/",
        "python eval.py --data s3://train-data/extra/",
    ])
    code = ("import boto3, pandas as pd; "
            "boto3.client('s3').download_file('ctr', 'v12/vocab.json', '/tmp/v.json'); "
            "pd.read_parquet('s3://ctr/in.parquet').to_parquet('s3://ctr/out.parquet')")
    pod = worker_pod(0)
    pod["spec"]["containers"] = [
        {"name": "train", "image": "x", "command": ["bash", "-c", script]},
        {"name": "prep", "image": "python:3.11", "command": ["python", "-c", code]}]
    want = {"s3://train-data/imagenet/train/", "s3://train-data/imagenet/val/",
            "s3://train-data/labels/", "s3://ctr/v12/vocab.json", "s3://ctr/in.parquet"}
    assert set(ds_mod.pod_datasets(pod, view())) == want
    job = pytorchjob()
    for r in job["spec"]["pytorchReplicaSpecs"].values():
        r["template"]["spec"] = copy.deepcopy(pod["spec"])
    work = workloads.read(job)
    assert {t.dataset for t in work.targets()} == want
    unknown = {d.uri for g in work.groups for d in g.datasets if d.direction == "unknown"}
    assert unknown == {"s3://train-data/extra/"}


def test_a_katib_trials_python_c_is_read_with_its_placeholders_in_it() -> None:
    """``python -c "...lr=${trialParameters.lr}..."`` in a trial template: the placeholders
    are values, so the program still parses and its reads are found."""
    code = ("import boto3, pandas as pd; "
            "boto3.client('s3').download_file('tab', 'churn/train.parquet', '/tmp/t.parquet'); "
            "v = pd.read_parquet('s3://tab/churn/valid.parquet'); "
            "fit(lr=${trialParameters.lr}, leaves=${trialParameters.leaves})")
    container = {"name": "trial", "image": "x", "command": ["python", "-c", code]}
    found = {w[0] for w in ds_mod.container_words(container) if w[1] == "code"}
    assert found == {"s3://tab/churn/train.parquet", "s3://tab/churn/valid.parquet"}


def test_a_folder_named_by_the_downward_api_is_each_pods_own() -> None:
    """An Indexed Job's ``subPathExpr: folds/fold=$(FOLD)`` with FOLD from the pod's
    completion-index annotation is the index, as ``$(JOB_COMPLETION_INDEX)`` is: each
    index's file is warmed (blind job round 37; before, the folder holding them all, never
    the bogus ``fold=/train.parquet``); a pod of index 3 reads ``fold=3``."""
    pod = worker_pod(0)
    c = pod["spec"]["containers"][0]
    c["args"] = ["--train", "/data/coco/train.parquet"]
    c["env"] = [{"name": "FOLD", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]
    c["volumeMounts"][0]["subPathExpr"] = "folds/fold=$(FOLD)"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "cv", "namespace": NS},
           "spec": {"completions": 5, "parallelism": 5, "completionMode": "Indexed",
                    "template": {"spec": copy.deepcopy(pod["spec"])}}}
    work = workloads.read(job)
    assert [t.dataset for t in work.targets(workloads.resolver_from_view(view(), NS))] == [
        f"s3://vision-datasets/coco/2017/folds/fold={i}/train.parquet" for i in range(5)]
    # a pod without the annotation: its folder is not known, the one holding them all is
    assert ds_mod.pod_datasets(pod, view()) == ["s3://vision-datasets/coco/2017/folds/"]
    pod["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": "3"}
    assert ds_mod.pod_datasets(pod, view()) == [
        "s3://vision-datasets/coco/2017/folds/fold=3/train.parquet"]


def test_a_python_heredoc_in_a_containers_script_is_read_as_python() -> None:
    """``python - <<'PY' ... PY``: the program's reads (boto3 keys per fold) are the
    container's; a location it writes into a file is not; the document is no shell words."""
    c = {"name": "agg", "image": "x", "command": ["sh", "-c"], "args": [
        "python - <<'PY'\n"
        "import boto3\n"
        "s3 = boto3.client('s3')\n"
        "for f in range(2):\n"
        "    s3.get_object(Bucket='models', Key=f'cv/fold-{f}/metrics.json')\n"
        "open('/tmp/out', 'w').write('s3://models/cv/best/')\n"
        "PY"]}
    words = ds_mod.container_words(c)
    assert sorted(u for u, _o, d in ds_mod.settled_locations(words) if d == "read") == [
        "s3://models/cv/fold-0/metrics.json", "s3://models/cv/fold-1/metrics.json"]


def test_a_root_the_command_line_spells_out_is_read_where_it_is_spelled_out() -> None:
    """``DATA_ROOT=/data/coco`` used only as ``$(DATA_ROOT)/...`` in the args and ``${..}`` in
    a script names the files under it, not the whole mount; a var named for what it holds
    (``TRAIN``) may be read whole by the program; a root whose words end in a value only
    the pod knows (``part-${IDX}.tar``) is what can be warmed: the folder holding them all."""
    pod = worker_pod(0)
    c = pod["spec"]["containers"][0]
    c["env"] = [{"name": "DATA_ROOT", "value": "/data/coco"},
                {"name": "TRAIN", "value": "s3://speech/cv17/de/train/"},
                {"name": "SHARD_PREFIX", "value": "s3://shards/cc12m/"}]
    c["command"] = ["bash", "-c", "python train.py --ann ${DATA_ROOT}/annotations/a.json "
                    "--shards $(SHARD_PREFIX)part-${JOB_COMPLETION_INDEX}.tar"]
    c["args"] = ["--images", "$(DATA_ROOT)/train2017", "--eval", "$(TRAIN)eval.tsv"]
    want = {"s3://vision-datasets/coco/2017/train2017",
            "s3://vision-datasets/coco/2017/annotations/a.json",
            "s3://speech/cv17/de/train/", "s3://speech/cv17/de/train/eval.tsv",
            "s3://shards/cc12m/"}
    assert set(ds_mod.pod_datasets(pod, view())) == want
    job = pytorchjob()
    for r in job["spec"]["pytorchReplicaSpecs"].values():
        r["template"]["spec"] = copy.deepcopy(pod["spec"])
    targets = workloads.read(job).targets(workloads.resolver_from_view(view(), NS))
    assert {t.dataset for t in targets} == want


def test_a_bucket_the_command_line_spells_out_is_no_read_of_its_own() -> None:
    """Blind job round 18: ``MODEL_BUCKET=s3://telco-models`` spelled out as
    ``${MODEL_BUCKET}/churn-lgbm/v14/model.txt`` warmed the whole bucket beside the file; a
    var named for a bucket, or holding a bare one under any name, is a root like DATA_ROOT."""
    c = {"name": "c", "image": "x",
         "env": [{"name": "MODEL_BUCKET", "value": "s3://telco-models"},
                 {"name": "STORE", "value": "s3://feature-store/"}],
         "command": ["bash", "-c", 'python score.py --model "${MODEL_BUCKET}/lgbm/v14/m.txt"'
                     ' --features "${STORE}churn/2025-11.parquet"']}
    assert sorted(u for u, _o, d in ds_mod.settled_locations(ds_mod.container_words(c))
                  if d == "read") == ["s3://feature-store/churn/2025-11.parquet",
                                      "s3://telco-models/lgbm/v14/m.txt"]


def test_a_scripts_own_python_and_command_substitutions_are_read_as_such() -> None:
    """A ``bash -c`` script is a shell script even with ``import`` and ``--cohort-def`` in it;
    the ``python -c`` programs among its lines (multi-line or one line) are read as Python
    (what they write is no read); ``LATEST=$(aws s3 ls s3://.../ckpt/ ...)`` lists the folder,
    and a path literal handed to code not followed (``LLM(model="/models/llama")``) names
    the part of a mount it reads."""
    script = "\n".join([
        "set -euo pipefail",
        "LATEST=$(aws s3 ls s3://runs/r7/ckpt/ | sort | tail -n1 | awk '{print $2}')",
        'python -c "import polars as pl; pl.read_parquet(\'s3://lake/a.parquet\')'
        '.write_parquet(\'s3://lake/out/a.parquet\')"',
        'python -c "',
        "import pandas as pd",
        "from vllm import LLM",
        "llm = LLM(model='/data/coco/weights/llama-8b')",
        "pd.read_csv('s3://lake/prompts.csv')",
        '"',
        "python build.py --cohort-def /data/coco/cohorts/v3.csv --resume s3://runs/r7/ckpt/",
    ])
    pod = worker_pod(0)
    pod["spec"]["containers"][0].update(command=["/bin/bash", "-lc", "--"], args=[script],
                                        env=[])
    got = set(ds_mod.pod_datasets(pod, view()))
    assert got == {"s3://lake/a.parquet", "s3://lake/prompts.csv",
                   "s3://vision-datasets/coco/2017/weights/llama-8b",
                   "s3://vision-datasets/coco/2017/cohorts/v3.csv"}  # not the whole mount
    words = ds_mod.container_words(pod["spec"]["containers"][0])
    assert ("s3://lake/out/a.parquet", "code", "write") in words
    assert {d for u, _, d in words if u == "s3://runs/r7/ckpt/"} == {"read", "unknown"}


def test_a_katib_placeholder_in_a_programs_location_is_filled_per_trial() -> None:
    """``f".../features/${trialParameters.featureSet}/x.parquet"`` in a trial's ``python -c``
    keeps its placeholder (it used to become ``features/0/``), for the trial's values."""
    code = ("import pandas as pd; "
            "pd.read_parquet('s3://lake/features/${trialParameters.featureSet}/x.parquet'); "
            "fit(lr=${trialParameters.lr})")
    container = {"name": "trial", "image": "x", "command": ["python", "-c", code]}
    found = {w[0] for w in ds_mod.container_words(container) if w[1] == "code"}
    assert found == {"s3://lake/features/${trialParameters.featureSet}/x.parquet"}


def test_hydra_overrides_are_named_by_their_keys_not_by_their_order() -> None:
    """Overrides (``key=value``, ``+key=value``) are no bare operands whose last may be the
    output: each goes by its key (``data.mels_root`` and ``model.pretrained`` both read, as
    the command's last two URIs; ``trainer.default_root_dir``, Lightning's logs and
    checkpoints, written; Ray's ``storage_path`` and a ``checkpoint.dirpath`` unknown)."""
    c = {"name": "t", "image": "x", "command": ["python", "-m", "birds.train"], "args": [
        "+dataset.extra_path=s3://f/extra/", "trainer.default_root_dir=s3://runs/r5/",
        "trainer.storage_path=s3://runs/ray/", "checkpoint.dirpath=s3://runs/ckpt/",
        "data.mels_root=s3://f/mels/", "model.pretrained=s3://m/effv2s.bin"]}
    got = {u: d for u, _o, d in ds_mod.settled_locations(ds_mod.container_words(c))}
    assert got == {"s3://f/extra/": "read", "s3://runs/r5/": "write",
                   "s3://runs/ray/": "unknown", "s3://runs/ckpt/": "unknown",
                   "s3://f/mels/": "read", "s3://m/effv2s.bin": "read"}


def _words(container: dict[str, Any]) -> dict[str, str]:
    """location -> direction of a container's words that hold an S3 location (a flag's
    value, ``--key=VALUE``, by its value)."""
    return {w.split("=", 1)[1] if w.startswith("--") else w: d
            for w, _, d in ds_mod.container_words(container) if "s3://" in w}


def test_job_round_22_script_idioms() -> None:
    """Job round 22: a root env var beside another known var (``${DATA_ROOT}/f/${CITY}/x``)
    was read whole too; a heredoc config's ``output: {model_uri: ...}`` was read (a key by
    its whole, as a ConfigMap's); ``${JOB_NAME:-manual}`` took the default though the pod
    sets JOB_NAME (downward API); a ``bash -c '...'`` inside a script was one word (its
    ``--output`` read)."""
    env = [{"name": "CITY", "value": "berlin"}, {"name": "DATA_ROOT", "value": "s3://ext/dwd"},
           {"name": "JOB_NAME", "valueFrom": {"fieldRef": {
               "fieldPath": "metadata.labels['job-name']"}}}]
    script = ('aws s3 cp "${DATA_ROOT}/forecast/${CITY}/latest.parquet" /w/\n'
              "cat > /tmp/c.yaml <<EOF\nmodel:\n  init_from: s3://m/base/model.lgb\n"
              "output:\n  model_uri: s3://m/run7/model.lgb\nEOF\n"
              "python -m t.train --config /tmp/c.yaml --model s3://m/${JOB_NAME:-manual}/m.lgb\n"
              "bash -c 'set -e; python -m g.train --data s3://lake/in/ --output s3://m/out/'\n")
    words = _words({"name": "main", "image": "x", "command": ["/bin/sh", "-c"],
                    "args": [script], "env": env})
    reads = sorted(w for w, d in words.items() if d == "read")
    assert reads == ["s3://ext/dwd/forecast/berlin/latest.parquet", "s3://lake/in/",
                     "s3://m/${JOB_NAME}/m.lgb", "s3://m/base/model.lgb"], words
    assert words["s3://m/out/"] == "write"


def test_job_round_23_a_boto3_key_built_from_the_pods_env() -> None:
    """Job round 23: a boto3 download whose key (or bucket) a program builds from an env
    var the container sets named nothing."""
    code = ('import os, boto3\nregion = os.environ["REGION"]\n'
            'boto3.client("s3").download_file(os.environ["BUCKET"], '
            'f"meta/w/{region}-v3.npy", "/scratch/w.npy")\n')
    words = _words({"name": "fetch", "image": "x", "command": ["python", "-c", code],
                    "env": [{"name": "REGION", "value": "eu"},
                            {"name": "BUCKET", "value": "probe-lake"}]})
    assert words == {"s3://probe-lake/meta/w/eu-v3.npy": "read"}


def test_job_round_24_an_envfrom_root_named_with_a_pod_value() -> None:
    """Job round 24: a root from an envFrom ConfigMap in ``$(SHARD_PREFIX)part-$(IDX).tar``
    named nothing (the same var under ``env:`` reads the folder holding every pod's); a key
    the command line does not name still reads nothing."""
    env = [{"name": "SHARD_PREFIX", "value": "s3://lake/wds/train-", ds_mod.EXPAND_ONLY: True},
           {"name": "OTHER_ROOT", "value": "s3://lake/other/", ds_mod.EXPAND_ONLY: True}]
    words = _words({"name": "main", "image": "x", "command": ["python", "train.py"],
                    "args": ["--shards", "$(SHARD_PREFIX)part-$(JOB_COMPLETION_INDEX).tar"],
                    "env": env})
    assert words == {"s3://lake/wds/train-": "read",
                     "s3://lake/wds/train-part-$(JOB_COMPLETION_INDEX).tar": "read"}, words


def test_job_round_25_a_root_only_written_under_is_no_read() -> None:
    """Job round 25: ``aws s3 cp /work/m/ "${MODEL_BUCKET}/fc/nightly/${D}/"`` (D known at
    run time) warmed the whole bucket as the env var's read; the root is only written under."""
    script = 'D=$(date +%F)\naws s3 cp /work/m/ "${MODEL_BUCKET}/fc/nightly/${D}/" --recursive\n'
    words = _words({"name": "main", "image": "x", "command": ["sh", "-c", script],
                    "env": [{"name": "MODEL_BUCKET", "value": "s3://probe-models"}]})
    assert set(words.values()) == {"write"}, words
