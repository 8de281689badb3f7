"""``prefetchd plan`` over training-job files, end to end as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml
from workload_helpers import doc, path

from prefetchd.k8s import datasets as k8s_datasets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plan(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "prefetchd.cli", "plan", *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def write(tmp_path, name: str, *objs: dict) -> str:
    f = tmp_path / name
    f.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    return str(f)


def test_trainjob_with_runtime_pytorchjob_and_experiment(tmp_path) -> None:
    """The three the issue names, from files: a queued TrainJob + its runtime file, a
    4-worker PyTorchJob, a Katib Experiment."""
    trainjob = doc("kubeflow-trainer/trainjob-03-kueue-integration.yaml")
    trainjob["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "sample-priority"
    trainjob["spec"]["trainer"]["args"] = ["--data=s3://datasets/alpaca/"]
    pytorchjob = doc("kubeflow-trainer/pytorchjob-simple.yaml")
    pytorchjob["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    for r in pytorchjob["spec"]["pytorchReplicaSpecs"].values():
        r["template"]["spec"]["containers"][0]["command"].append(
            "--data=s3://datasets/mnist/")
    files = [write(tmp_path, "trainjob.yaml", trainjob),
             path("kubeflow-trainer/torch_distributed.yaml"),
             write(tmp_path, "pytorchjob.yaml", pytorchjob),
             path("katib/experiment-pytorchjob-mnist.yaml"),
             path("kueue/workloadpriorityclass-sample-priority.yaml")]
    r = plan(*files)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    out = r.stdout
    # warm order: admitted work first (the experiment, the PyTorchJob), then the queued TrainJob
    assert out.index("Experiment kubeflow/pytorchjob-mnist") < out.index(
        "PyTorchJob kubeflow/pytorch-simple") < out.index("TrainJob default/kueue-example")
    assert "queued in queue training-queue, priority sample-priority=10000" in out
    assert "s3://datasets/alpaca/  on 3 nodes  for node  (stage 0)" in out
    assert "s3://datasets/mnist/  on 4 nodes  for Master, Worker  (stage 0)" in out
    assert "6 nodes (3 trials at once); pins released with experiment " \
           "kubeflow/pytorchjob-mnist" in out
    assert "per-trial values: learningRate, momentum" in out

    r = plan(*files, "--json")
    assert r.returncode == 0, r.stderr
    doc_ = json.loads(r.stdout)
    by_kind = {w["kind"]: w for w in doc_["work"]}
    assert [w["warm_order"] for w in doc_["work"]] == [1, 2, 3]
    tj = by_kind["TrainJob"]
    assert (tj["state"], tj["queue"], tj["priority"], tj["nodes"]) == (
        "queued", "training-queue", 10000, 3)
    assert tj["warm"] == [{"dataset": "s3://datasets/alpaca/", "nodes": 3, "groups": ["node"],
                           "stage": 0}]
    assert tj["groups"][0]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert by_kind["PyTorchJob"]["warm"][0]["nodes"] == 4
    assert by_kind["Experiment"]["copies"] == 3


def test_pvc_resolved_from_files_or_flag(tmp_path) -> None:
    tfjob = path("kubeflow-trainer/tfjob-multi-worker-pvc.yaml")
    r = plan(tfjob)
    assert r.returncode == 0, r.stderr
    assert "(claim default/strategy-volume not in the files: --pvc strategy-volume=s3://BUCKET/" \
        "PREFIX, or give it and its PV)" in r.stdout
    r = plan(tfjob, "--pvc", "strategy-volume=s3://bucket/tf/")
    assert "s3://bucket/tf/  on 2 nodes  for Worker" in r.stdout
    job = doc("kubeflow-trainer/tfjob-multi-worker-pvc.yaml")
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0][
        "persistentVolumeClaim"]["claimName"] = "imagenet-train"
    r = plan(write(tmp_path, "tf.yaml", job),
             os.path.join(ROOT, "manifests", "examples", "static-pv-pvc.yaml"))
    assert r.returncode == 0, r.stderr
    assert "s3://my-training-data/imagenet/train/  on 2 nodes  for Worker" in r.stdout


def _one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("prefetchd: error: ")
    return lines[0]


def test_bad_input_is_one_line_exit_2(tmp_path) -> None:
    trainjob = path("kubeflow-trainer/trainjob-01-multi-node.yaml")
    line = _one_line_error(plan(trainjob))
    assert line == (f"prefetchd: error: {trainjob}: TrainJob multi-node-example: "
                    "spec.runtimeRef: unknown runtime ClusterTrainingRuntime torch-distributed "
                    "(not installed, or give its file too)")
    exp = path("katib/experiment-trial-configmap-source.yaml")
    assert "unknown ConfigMap kubeflow/trial-templates" in _one_line_error(plan(exp))
    assert "--param sets pipeline parameters" in _one_line_error(
        plan(exp, "--param", "a=b"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: batch/v1\nkind: Job\nspec: [\n")
    assert f"{bad}: line" in _one_line_error(plan(str(bad)))
    mixed = write(tmp_path, "mixed.yaml", doc("kueue/sample-job.yaml"),
                  {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                   "metadata": {"name": "wf"}, "spec": {"entrypoint": "main"}})
    assert "plan pipelines and training jobs in separate calls" in _one_line_error(plan(mixed))
    only_queues = path("kueue/single-clusterqueue-setup.yaml")
    r = plan(only_queues)  # kueue.x-k8s.io objects, but nothing that runs
    err = _one_line_error(r)
    assert "no training job, JobSet, Job, Katib Experiment/Trial or Kueue Workload" in err
    # what the files held, and every kind that is read (blind job round 35)
    assert "(only ResourceFlavor default-flavor, ClusterQueue cluster-queue" in err
    assert "read are Job, CronJob, JobSet, TrainJob" in err
    assert "RayJob, and Argo and KFP pipelines in a call of their own" in err


def test_a_kind_read_under_an_apiversion_not_read_is_refused_beside_good_work(tmp_path) -> None:
    """Blind job round 36: a TrainJob in kubeflow.org/v1 (the old operator's group), a
    PyTorchJob in trainer.kubeflow.org, a Job in apps/v1, beside a good Job, were listed as
    ignored (exit 0) and their data never warmed; alone, the refusal did not name the
    apiVersion. A kind no one reads (a Deployment) is still only ignored."""
    good = doc("kueue/sample-job.yaml")
    meta = {"name": "typo", "namespace": "ml"}
    for api, kind, read_as in (
            ("kubeflow.org/v1", "TrainJob", "trainer.kubeflow.org/v1alpha1"),
            ("trainer.kubeflow.org/v1alpha1", "PyTorchJob", "kubeflow.org/v1"),
            ("apps/v1", "Job", "batch/v1")):
        bad = {"apiVersion": api, "kind": kind, "metadata": meta, "spec": {}}
        want = (f"{kind} ml/typo: apiVersion {api} is not read for {kind} (only {read_as})")
        for f in (write(tmp_path, "mixed.yaml", good, bad), write(tmp_path, "alone.yaml", bad)):
            assert _one_line_error(plan(f)) == f"prefetchd: error: {f}: {want}"
        r = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm", "--pipeline",
                            write(tmp_path, "mixed.yaml", good, bad), "--cache-dir",
                            str(tmp_path / "c")], capture_output=True, text=True, cwd=ROOT,
                           timeout=120)
        assert r.returncode == 2 and want in r.stderr, r.stderr
        assert not (tmp_path / "c").exists()
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta}
    r = plan(write(tmp_path, "deploy.yaml", good, deployment))
    assert r.returncode == 0, r.stderr
    assert "ignored: Deployment ml/typo" in r.stdout
    # another project's kind of the same name (Volcano's Job) is its own, ignored too
    volcano = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta}
    r = plan(write(tmp_path, "volcano.yaml", good, volcano))
    assert r.returncode == 0 and "ignored: Job ml/typo" in r.stdout, r.stderr


def test_pipeline_files_still_go_to_the_pipeline_analysis(tmp_path) -> None:
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
          "metadata": {"name": "wf"},
          "spec": {"entrypoint": "main", "templates": [{
              "name": "main", "container": {"image": "x", "args": ["s3://datasets/a/"]}}]}}
    r = plan(write(tmp_path, "wf.yaml", wf), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == "prefetchd-plan/1"


def test_a_json_manifest_is_read_as_its_yaml_would_be(tmp_path) -> None:
    """``kubectl get pytorchjob x -o json > job.json``: the same plan as the YAML file."""
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "mnist", "namespace": "ml"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
               "containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.4.0",
                               "args": ["--data", "s3://datasets/mnist/"]}]}}}}}}
    as_json = tmp_path / "job.json"
    as_json.write_text(json.dumps(job, indent=2))
    as_yaml = write(tmp_path, "job.yaml", job)
    r_json, r_yaml = plan(str(as_json), "--json"), plan(as_yaml, "--json")
    assert r_json.returncode == 0 and r_yaml.returncode == 0, r_json.stderr
    assert json.loads(r_json.stdout) == json.loads(r_yaml.stdout)
    assert "s3://datasets/mnist/" in r_json.stdout


def test_a_claim_of_another_driver_and_a_mount_of_no_volume_are_said_so(tmp_path) -> None:
    """A PVC bound (in the files) to an NFS PV is no dataset: plan says so rather than asking
    for --pvc; a volumeMount naming no volume of the pod is refused (the API server refuses
    the Job), the mount named, exit 2."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "args": ["--labels", "/labels/v1",
                                                    "--audio", "/audio/train"],
               "volumeMounts": [{"name": "labels", "mountPath": "/labels"},
                                {"name": "audio", "mountPath": "/audio"}]}],
               "volumes": [{"name": "labels",
                            "persistentVolumeClaim": {"claimName": "geo-labels"}}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "geo-labels", "namespace": "ml"},
           "spec": {"volumeName": "nfs-labels", "accessModes": ["ReadWriteMany"]}}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "nfs-labels"},
          "spec": {"csi": {"driver": "nfs.csi.k8s.io", "volumeHandle": "x"},
                   "claimRef": {"namespace": "ml", "name": "geo-labels"}}}
    r = plan(write(tmp_path, "bad.yaml", job, pvc, pv))
    assert r.returncode == 2 and not r.stdout, r.stdout
    assert ("Job ml/j: spec.template.spec: container main: volumeMount 'audio' names no "
            "volume of the pod") in r.stderr
    spec = job["spec"]["template"]["spec"]
    spec["volumes"].append({"name": "audio", "emptyDir": {}})
    r = plan(write(tmp_path, "job.yaml", job, pvc, pv))
    assert r.returncode == 0, r.stderr
    assert "bound to PV nfs-labels (nfs.csi.k8s.io), not a fusecache volume" in r.stdout
    assert "--pvc geo-labels" not in r.stdout


def test_a_pending_claim_whose_pv_is_bound_to_another_is_not_resolved(tmp_path) -> None:
    """A PVC naming a PV (``volumeName``) whose ``claimRef`` is a claim of another namespace
    is Pending, not bound: its location is not that PV's (warming it would fetch another
    team's data); plan asks for ``--pvc`` instead."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "args": ["--names", "/tax/v12/names.tsv"],
               "volumeMounts": [{"name": "tax", "mountPath": "/tax"}]}],
               "volumes": [{"name": "tax",
                            "persistentVolumeClaim": {"claimName": "taxonomy"}}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "taxonomy", "namespace": "ml"},
           "spec": {"volumeName": "tax-pv", "accessModes": ["ReadOnlyMany"]},
           "status": {"phase": "Pending"}}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "tax-pv"},
          "spec": {"csi": {"driver": "csi.fusecache.io", "volumeHandle": "tax",
                           "volumeAttributes": {"bucket": "catalog", "prefix": "taxonomy"}},
                   "claimRef": {"namespace": "shared", "name": "taxonomy"}}}
    r = plan(write(tmp_path, "job.yaml", job, pvc, pv))
    assert r.returncode == 0, r.stderr
    assert "s3://catalog" not in r.stdout
    assert "PV tax-pv is bound to claim shared/taxonomy, not this one" in r.stdout
    assert "no pod using it starts, nothing to warm" in r.stdout


def test_what_a_job_writes_as_it_runs_is_not_warmed_for_a_group_beside_it(tmp_path) -> None:
    """A JobSet whose eval watcher (started when train is Ready: beside it) follows the
    checkpoints train writes under its ``--output_dir``: not warmed, said so; a
    ``--logging_dir`` is written, not read."""
    def rjob(name: str, args: list[str], depends: list[dict] | None = None) -> dict:
        out = {"name": name, "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": name, "image": "x", "args": args}]}}}}}
        if depends:
            out["dependsOn"] = depends
        return out
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "ft", "namespace": "ml"},
          "spec": {"replicatedJobs": [
              rjob("train", ["--model", "s3://m/base.pt", "--output_dir", "s3://runs/ft/",
                             "--logging_dir", "s3://runs/tb/"]),
              rjob("watch", ["aws", "s3", "sync", "s3://runs/ft/checkpoints/", "/ck"],
                   [{"name": "train", "status": "Ready"}])]}}
    r = plan(write(tmp_path, "js.yaml", js))
    assert r.returncode == 0, r.stderr
    assert "s3://runs/ft/checkpoints/  (arg) [written by train as the job runs: not warmed]" \
        in r.stdout
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://m/base.pt" in warm and "s3://runs" not in warm
    r = plan(write(tmp_path, "js.yaml", js), "--json")  # resolved null: not warmed, there too
    [watched] = [d for w in json.loads(r.stdout)["work"] for g in w["groups"]
                 for d in g["datasets"] if g["name"] == "watch"]
    assert watched["resolved"] is None and watched["warmable"] is False


def test_the_files_a_python_c_program_reads_narrow_its_volume(tmp_path) -> None:
    """``python -c`` reading ``/ref/calendar.csv`` and ``/ref/prices.parquet`` of a fusecache
    claim mounted at /ref: those two files are warmed, not the whole volume."""
    program = ("import pandas as pd\n"
               "cal = pd.read_csv('/ref/calendar.csv')\n"
               "prices = pd.read_parquet('/ref/prices.parquet')\n"
               "cal.to_parquet('/work/out.parquet')\n")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "command": ["python", "-c", program],
               "volumeMounts": [{"name": "ref", "mountPath": "/ref", "readOnly": True}]}],
               "volumes": [{"name": "ref", "persistentVolumeClaim": {"claimName": "ref"}}]}}}}
    r = plan(write(tmp_path, "job.yaml", job), "--pvc", "ref=s3://lake/m5/reference/")
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://lake/m5/reference/calendar.csv" in warm
    assert "s3://lake/m5/reference/prices.parquet" in warm
    assert "s3://lake/m5/reference/ " not in warm


def test_env_from_a_configmap_in_the_files_is_expanded(tmp_path) -> None:
    """``valueFrom.configMapKeyRef`` and ``envFrom.configMapRef`` (with its prefix) of a
    ConfigMap given in the files: the values are known, so ``$(VAR)`` in args names the
    location; one from a ConfigMap not given stays run-time only."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x",
               "args": ["--eval", "s3://$(EVAL_BUCKET)/sabdab/holdout.fasta",
                        "--train", "$(P_TRAIN_URI)", "--extra", "s3://$(OTHER)/x/"],
               "envFrom": [{"prefix": "P_", "configMapRef": {"name": "paths"}}],
               "env": [{"name": "EVAL_BUCKET", "valueFrom": {"configMapKeyRef": {
                            "name": "paths", "key": "eval_bucket"}}},
                       {"name": "OTHER", "valueFrom": {"configMapKeyRef": {
                            "name": "absent", "key": "b"}}}]}]}}}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "paths", "namespace": "ml"},
          "data": {"eval_bucket": "bench", "TRAIN_URI": "s3://data/oas/train/"}}
    r = plan(write(tmp_path, "job.yaml", job, cm))
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://bench/sabdab/holdout.fasta" in warm and "s3://data/oas/train/" in warm
    assert "$(OTHER)" not in warm


def test_a_claim_the_job_makes_from_a_template_asks_for_nothing(tmp_path) -> None:
    """A JobSet's ``volumeClaimPolicies`` scratch claim (made by the job, empty when it
    starts) is nothing to warm, said so, rather than an unresolved claim asking for --pvc."""
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "pre", "namespace": "ml"},
          "spec": {"volumeClaimPolicies": [{"templates": [{
              "metadata": {"name": "scratch"},
              "spec": {"storageClassName": "gp3", "accessModes": ["ReadWriteOnce"],
                       "resources": {"requests": {"storage": "100Gi"}}}}]}],
              "replicatedJobs": [{"name": "build", "replicas": 1, "template": {"spec": {
                  "template": {"spec": {"restartPolicy": "Never", "containers": [{
                      "name": "b", "image": "x",
                      "args": ["--in", "s3://raw/x/", "--cache", "/scratch/cache"],
                      "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}]}}}}}]}}
    r = plan(write(tmp_path, "js.yaml", js))
    assert r.returncode == 0, r.stderr
    assert "claim scratch-pre, made by the job from its template, of StorageClass gp3, not in " \
        "the files: nothing to warm unless that class is fusecache's" in r.stdout, r.stdout
    assert "unresolved" not in r.stdout


def test_a_configmaps_keys_from_envfrom_serve_expansion_not_reads(tmp_path) -> None:
    """``envFrom`` brings every key of a ConfigMap: one the container uses (``$(EVAL)``, or
    ``"${INIT}"`` in its script) names what it reads; the others (``TRAIN_FILES``, used by
    the trainer, not this evaluator) are no dataset of this container."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ev", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "command": ["bash", "-c"],
               "args": ['aws s3 cp "${INIT}" /w/init.pt && python eval.py --eval $(EVAL)'],
               "envFrom": [{"configMapRef": {"name": "paths"}}]}]}}}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "paths", "namespace": "ml"},
          "data": {"EVAL": "s3://d/eval/", "INIT": "s3://m/init.pt", "TRAIN_FILES": "s3://d/train/"}}
    r = plan(write(tmp_path, "job.yaml", job, cm))
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://d/eval/" in warm and "s3://m/init.pt" in warm and "s3://d/train/" not in warm


def test_a_python_program_reads_the_env_vars_it_uses_envfrom_too(tmp_path) -> None:
    """Blind job round 17: ``pd.read_csv(os.environ["HOLIDAY_CALENDAR"])`` with the var from
    ``envFrom`` read nothing (a ConfigMap's keys only served $(VAR)). A program's use of a
    var as it is makes its value a read (or a write, by its name); a var it only builds
    locations from (``f"{root}/tx/2025-06.parquet"``) names those, not its whole value;
    keys it never names stay no dataset."""
    code = ("import os\nimport pandas as pd\nroot = os.environ['DATA_ROOT']\n"
            "tx = pd.read_parquet(f'{root}/tx/2025-06.parquet')\n"
            "hol = pd.read_csv(os.environ['HOLIDAY_CALENDAR'])\n"
            "w = pd.read_pickle(os.environ['MODEL_DIR'] + '/weights.pkl')\n"
            "tx.to_parquet(os.environ['OUT_URI'])\n")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "command": ["bash", "-c"],
               "args": [f"set -e\npython - <<'PY'\n{code}PY\n"],
               "env": [{"name": "MODEL_DIR", "value": "s3://models/v3"}],
               "envFrom": [{"configMapRef": {"name": "paths"}}]}]}}}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "paths", "namespace": "ml"},
          "data": {"DATA_ROOT": "s3://bank/ds", "OUT_URI": "s3://out/preds.parquet",
                   "HOLIDAY_CALENDAR": "s3://ref/holidays.csv", "TRAIN_FILES": "s3://d/train/"}}
    expected = ["s3://bank/ds/tx/2025-06.parquet", "s3://models/v3/weights.pkl",
                "s3://ref/holidays.csv"]
    r = plan(write(tmp_path, "job.yaml", job, cm))
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1].split()
    assert sorted(w for w in warm if w.startswith("s3://")) == expected
    assert "unknown" not in r.stdout
    # python -c, the same program
    job["spec"]["template"]["spec"]["containers"][0].update(command=["python", "-c"],
                                                            args=[code])
    r = plan(write(tmp_path, "job2.yaml", job, cm))
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1].split()
    assert sorted(w for w in warm if w.startswith("s3://")) == expected


def test_a_jobs_shell_loop_over_literal_items_warms_each_file(tmp_path) -> None:
    """An MPIJob launcher's ``for f in model.pt normalizer_stats.pt; do aws s3 cp
    "s3://.../${f}" ...`` (blind job round 16: a run-time read, its writer's ideal the two
    files): both files are warmed."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "command": ["bash", "-c"],
               "args": ['for f in model.pt normalizer_stats.pt; do\n'
                        '  aws s3 cp "s3://m/h64/${f}" /w/\ndone\npython run.py']}]}}}}
    r = plan(write(tmp_path, "job.yaml", job))
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://m/h64/model.pt" in warm and "s3://m/h64/normalizer_stats.pt" in warm
    assert "runtime" not in r.stdout


_TRAIN_CFG = """\
data:
  root: s3://lake/imagenet
  train_dir: ${data.root}/train
  val_files: [s3://lake/imagenet/val/part-0.tar, s3://lake/imagenet/val/part-1.tar]
  labels: /data/labels/classes.json
model:
  pretrained: s3://models/vit-b16/model.safetensors
trainer:
  default_root_dir: s3://runs/vit-b16/
  output_dir: s3://runs/vit-b16/out/
"""


def test_a_config_file_from_a_configmap_volume_names_what_the_job_reads(tmp_path) -> None:
    """Rounds 15 and 18's writers wanted a mounted ConfigMap's config read: a container
    naming a file of a ConfigMap volume (``bash /etc/train/run.sh``, which runs
    ``--config /etc/train/config.yaml``; Hydra's ``--config-path``/``--config-name``; a
    ``subPath`` mount) reads what the file names, each location directed by its key
    (``trainer.output_dir``: written, not warmed), a root others are built from
    (``${data.root}/train``) only where it is built on, and a path under a claim narrows it;
    a file nobody names is not read."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "train-cfg", "namespace": "ml"},
          "data": {"config.yaml": _TRAIN_CFG,
                   "run.sh": "#!/bin/bash\nset -e\naws s3 cp s3://lake/labels/map.json /w/\n"
                             "python train.py --config /etc/train/config.yaml\n",
                   "unused.yaml": "data: s3://lake/other/\n",
                   "shards.txt": "s3://lake/shards/a.tar\ns3://lake/shards/b.tar\n"}}

    def role(n: int, container: dict, volume: dict) -> dict:
        return {"replicas": n, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "x", **container}],
            "volumes": [{"name": "cfg", "configMap": volume},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "lake"}}]}}}

    mounts = [{"name": "data", "mountPath": "/data"}]
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "vit", "namespace": "ml"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": role(1, {"command": ["bash", "/etc/train/run.sh"], "volumeMounts": [
                   {"name": "cfg", "mountPath": "/etc/train"}, *mounts]},
                   {"name": "train-cfg"}),
               "Worker": role(2, {"command": ["python", "train.py", "--config-path", "/etc/cfg",
                                              "--config-name", "config",
                                              "--shards", "/etc/shards.txt"],
                                  "volumeMounts": [
                                      {"name": "cfg", "mountPath": "/etc/cfg"},
                                      {"name": "cfg", "mountPath": "/etc/shards.txt",
                                       "subPath": "shards.txt"}, *mounts]},
                              {"name": "train-cfg"})}}}
    r = plan(write(tmp_path, "job.yaml", job, cm), "--pvc", "lake=s3://lake")
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    lines = {ln.split()[0]: ln for ln in warm.splitlines() if ln.strip().startswith("s3://")}
    both = ["s3://lake/imagenet/train", "s3://lake/imagenet/val/part-0.tar",
            "s3://lake/imagenet/val/part-1.tar", "s3://models/vit-b16/model.safetensors",
            "s3://lake/labels/classes.json"]
    assert sorted(lines) == sorted([*both, "s3://lake/labels/map.json",
                                    "s3://lake/shards/a.tar", "s3://lake/shards/b.tar"])
    assert all("on 3 nodes" in lines[u] for u in both)
    assert "for Master " in lines["s3://lake/labels/map.json"] + " "
    assert "(config /etc/train/config.yaml)" in r.stdout
    for absent in ("s3://lake/imagenet ", "s3://runs/", "s3://lake/other/"):
        assert absent not in warm + " ", absent
    # without the ConfigMap in the files (the agent holds none): nothing from it, no error
    r = plan(write(tmp_path, "job2.yaml", job), "--pvc", "lake=s3://lake")
    assert r.returncode == 0, r.stderr
    assert "config /etc" not in r.stdout


def _experiment(name: str, param: str, values: list[str], trial_name: str,
                container: dict, volumes: list | None = None) -> dict:
    """A Katib Experiment of 2 trials at once over one discrete parameter *param*, given to
    the trial as ``${trialParameters.<trial_name>}``; its trials are Jobs of *container*."""
    pod = {"restartPolicy": "Never", "containers": [{"image": "x", **container}],
           **({"volumes": volumes} if volumes else {})}
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"parallelTrialCount": 2, "maxTrialCount": 6,
                     "objective": {"type": "maximize", "objectiveMetricName": "auc"},
                     "algorithm": {"algorithmName": "random"},
                     "parameters": [{"name": param, "parameterType": "discrete",
                                     "feasibleSpace": {"list": values}}],
                     "trialTemplate": {
                         "primaryContainerName": container["name"],
                         "trialParameters": [{"name": trial_name, "reference": param}],
                         "trialSpec": {"apiVersion": "batch/v1", "kind": "Job",
                                       "spec": {"template": {"spec": pod}}}}}}


def test_a_config_in_a_projected_volume_is_read_and_a_trial_value_listed_once(
        tmp_path) -> None:
    """Job rounds 19 and 20: a Hydra config in a projected volume (a ConfigMap beside
    downward-API items) was not read, as one in a plain ConfigMap volume is; a Katib trial's
    ``data.train=s3://.../seq${trialParameters.seqLen}/`` was listed twice per value."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "base", "namespace": "ml"},
          "data": {"base.yaml": "paths:\n  lake: s3://lake\ndata:\n"
                                "  labels: ${paths.lake}/labels/v2.tsv\n"}}
    exp = _experiment("hpo", "seq_len", ["512", "1024"], "seqLen", {
        "name": "trainer",
        "command": ["python", "-m", "train", "--config-path=/etc/cfg", "--config-name=base",
                    "data.train=s3://lake/tok/seq${trialParameters.seqLen}/train/"],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]},
        [{"name": "cfg", "projected": {"sources": [
            {"configMap": {"name": "base"}},
            {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {
                "fieldPath": "metadata.labels"}}]}}]}}])
    r = plan(write(tmp_path, "exp.yaml", exp, cm))
    assert r.returncode == 0, r.stderr
    reads = [ln.split()[1] for ln in r.stdout.split("warm:", 1)[0].splitlines()
             if ln.strip().startswith("reads ")]
    assert reads == ["s3://lake/tok/seq512/train/", "s3://lake/tok/seq1024/train/",
                     "s3://lake/labels/v2.tsv"], r.stdout
    assert "(config /etc/cfg/base.yaml)" in r.stdout


def test_a_trial_value_given_to_a_program_through_env_is_read_at_each_value(tmp_path) -> None:
    """Job round 21: ``FOLD=${trialParameters.fold}`` in a trial's env, and a ``python -c``
    program reading ``os.environ['FOLD']`` into its location, named nothing; as a value in
    args does, it is read at each of the parameter's values."""
    exp = _experiment("cv", "fold", ["0", "1"], "fold", {
        "name": "main", "env": [{"name": "FOLD", "value": "${trialParameters.fold}"}],
        "command": ["python", "-c", "import os, pandas as pd\npd.read_parquet("
                    "f\"s3://cv/fold={os.environ['FOLD']}/t.parquet\")\n"]})
    r = plan(write(tmp_path, "exp.yaml", exp))
    assert r.returncode == 0, r.stderr
    assert "s3://cv/fold=0/t.parquet  on 2 nodes" in r.stdout, r.stdout
    assert "s3://cv/fold=1/t.parquet  on 2 nodes" in r.stdout, r.stdout


def test_finished_or_inactive_work_is_planned_for_nothing(tmp_path) -> None:
    """Blind job round 18: a Job with ``Complete=True`` was shown succeeded and still listed
    under ``warm:`` (and ``warm --pipeline`` fetched it), a suspended CronJob too. As the
    agent does, such work warms nothing, and the plan says why; its reads are still shown."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ev", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "args": ["--data", "s3://d/eval/"]}]}}},
           "status": {"succeeded": 1, "conditions": [
               {"type": "SuccessCriteriaMet", "status": "True"},
               {"type": "Complete", "status": "True"}]}}
    f = write(tmp_path, "job.yaml", job)
    r = plan(f)
    assert r.returncode == 0, r.stderr
    assert "succeeded" in r.stdout and "reads s3://d/eval/" in r.stdout
    assert "warm: nothing (succeeded: nothing of it will run again)" in r.stdout
    # (blind job round 57: its headline still counted '1 node' for it)
    assert "   no pods to come; pins released with job ml/ev" in r.stdout, r.stdout
    j = plan(f, "--json")  # (blind job round 58: the JSON still counted its width)
    assert json.loads(j.stdout)["work"][0]["nodes"] == 0
    w = subprocess.run([sys.executable, "-m", "prefetchd.cli", "warm", "--pipeline", f,
                        "--dry-run"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert w.returncode == 2 and "succeeded, nothing of it will run again" in w.stderr
    cron = {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "bf", "namespace": "ml"},
            "spec": {"schedule": "0 5 * * 0", "suspend": True, "jobTemplate": {"spec": {
                "template": job["spec"]["template"]}}}}
    r = plan(write(tmp_path, "cron.yaml", cron))
    assert r.returncode == 0, r.stderr
    assert "warm: nothing (inactive: nothing of it runs while it stays inactive)" in r.stdout
    del job["status"]  # the same Job, not run yet: warmed
    r = plan(write(tmp_path, "job2.yaml", job))
    assert "s3://d/eval/  on 1 node" in r.stdout


def test_a_runtimes_or_a_ray_clusters_configmap_config_is_read(tmp_path) -> None:
    """Blind job round 19: a TrainJob whose runtime's node pod mounts a ConfigMap, with the
    job's ``--config /etc/whisper/ft.yaml``, and a RayJob whose entrypoint names
    ``/home/ray/cfg/data.json`` mounted on its head and workers, warmed nothing: the config is
    read once the runtime's pods have the job's command, and with the entrypoint."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ft", "namespace": "ml"},
          "data": {"ft.yaml": "data:\n  eval_manifest: s3://lake/eval/hard.jsonl\n"
                              "output_dir: s3://runs/ft/\n",
                   "data.json": '{"eval": {"holdout": "s3://lake/holdout/"}, '
                                '"train_glob": "s3://lake/imp/part-*.parquet"}'}}
    mount = {"volumeMounts": [{"name": "cfg", "mountPath": "/etc/whisper"}]}
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
               "metadata": {"name": "rt", "namespace": "ml"},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
                   "replicatedJobs": [{"name": "node", "template": {"metadata": {"labels": {
                       "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                       "spec": {"template": {
                       "spec": {"containers": [{"name": "node", "image": "x", **mount}],
                                "volumes": [{"name": "cfg", "configMap": {"name": "ft"}}]}}}}}]}}}}
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
          "metadata": {"name": "tj", "namespace": "ml"},
          "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                  "name": "rt"},
                   "trainer": {"numNodes": 2, "command": ["python", "-m", "ft.train",
                                                          "--config", "/etc/whisper/ft.yaml"]}}}
    r = plan(write(tmp_path, "tj.yaml", cm, runtime, tj))
    assert r.returncode == 0, r.stderr
    assert "s3://lake/eval/hard.jsonl  on 2 nodes  for node" in r.stdout
    assert "s3://runs/" not in r.stdout.split("warm:", 1)[1]

    def pod(name: str) -> dict:
        return {"spec": {"containers": [{"name": name, "image": "x", "volumeMounts": [
            {"name": "cfg", "mountPath": "/home/ray/cfg"}]}],
            "volumes": [{"name": "cfg", "configMap": {"name": "ft"}}]}}

    ray = {"apiVersion": "ray.io/v1", "kind": "RayJob",
           "metadata": {"name": "r", "namespace": "ml"},
           "spec": {"entrypoint": "python -m ctr.train --data-config /home/ray/cfg/data.json",
                    "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {},
                                                         "template": pod("ray-head")},
                                       "workerGroupSpecs": [{"groupName": "w", "replicas": 2,
                                                             "template": pod("ray-worker")}]}}}
    r = plan(write(tmp_path, "ray.yaml", cm, ray))
    assert r.returncode == 0, r.stderr
    assert "s3://lake/holdout/  on 3 nodes  for head, w" in r.stdout
    assert "s3://lake/imp/part-*.parquet  on 3 nodes" in r.stdout
    # the same ConfigMap as a projected volume's source, as a job's pods read it
    for spec in (ray["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"],
                 ray["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]):
        spec["volumes"] = [{"name": "cfg", "projected": {"sources": [
            {"configMap": {"name": "ft"}}]}}]
    r = plan(write(tmp_path, "ray2.yaml", cm, ray))
    assert r.returncode == 0, r.stderr
    assert "s3://lake/holdout/  on 3 nodes  for head, w" in r.stdout


def test_a_python_launchers_command_line_gives_env_vars_and_paths_their_way(tmp_path) -> None:
    """Blind job round 20: ``subprocess.run([..., "--output-dir", os.environ["RUN_URI"]])``
    read and warmed the run's output folder, and a path under a claim in such a command line
    (``--feature-root /slides/features/uni-v1/brca``) did not narrow the claim."""
    code = ("import os, subprocess; subprocess.run(['torchrun', '-m', 't', '--feature-root', "
            "'/slides/features/uni-v1/brca', '--output-dir', os.environ['RUN_URI']], check=True)")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "command": ["python", "-c", code],
               "env": [{"name": "RUN_URI", "value": "s3://runs/r7/"}],
               "volumeMounts": [{"name": "s", "mountPath": "/slides"}]}],
               "volumes": [{"name": "s", "persistentVolumeClaim": {"claimName": "slides"}}]}}}}
    r = plan(write(tmp_path, "job.yaml", job), "--pvc", "slides=s3://lake/wsi")
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://lake/wsi/features/uni-v1/brca  on 1 node" in warm
    assert "s3://runs/" not in warm and "s3://lake/wsi  " not in warm
    # the same program as a launcher the container runs from a ConfigMap
    c = job["spec"]["template"]["spec"]["containers"][0]
    c["command"] = ["python", "/etc/mil/launch.py"]
    c["volumeMounts"].append({"name": "cfg", "mountPath": "/etc/mil"})
    job["spec"]["template"]["spec"]["volumes"].append(
        {"name": "cfg", "configMap": {"name": "mil"}})
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mil", "namespace": "ml"},
          "data": {"launch.py": code.replace("; ", "\n")}}
    r = plan(write(tmp_path, "job2.yaml", job, cm), "--pvc", "slides=s3://lake/wsi")
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://lake/wsi/features/uni-v1/brca  on 1 node" in warm and "s3://runs/" not in warm


def test_a_root_before_a_trial_value_is_not_read_whole(tmp_path) -> None:
    """Job round 25: ``--features=$(FEATURE_ROOT)/${trialParameters.frontend}/`` with the
    value drawn from a short list read each folder and the whole root too."""
    exp = _experiment("ser", "frontend", ["a", "b"], "frontend", {
        "name": "main", "env": [{"name": "FEATURE_ROOT", "value": "s3://lake/feat/v2"}],
        "command": ["python", "train.py",
                    "--features=$(FEATURE_ROOT)/${trialParameters.frontend}/"]})
    r = plan(write(tmp_path, "exp.yaml", exp))
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    assert [ln.split()[0] for ln in warm.splitlines() if "s3://" in ln] == [
        "s3://lake/feat/v2/a/", "s3://lake/feat/v2/b/"], r.stdout


def _fusecache_claim(ns: str, name: str, bucket: str, prefix: str) -> tuple[dict, dict]:
    """A PV of the fusecache driver bound to claim *name*, as a pre-bound pair is written."""
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-{name}"},
          "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadOnlyMany"],
                   "claimRef": {"namespace": ns, "name": name},
                   "csi": {"driver": "csi.fusecache.io", "volumeHandle": name,
                           "volumeAttributes": {"bucket": bucket, "prefix": prefix}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "",
                    "volumeName": f"pv-{name}", "resources": {"requests": {"storage": "1Ti"}}}}
    return pv, pvc


def test_a_folder_named_with_and_without_its_slash_is_one_dataset(tmp_path) -> None:
    """A master names ``/ms/obs`` on a claim's mount, the workers mount ``subPath: obs``
    of the same claim (blind job round 22): one folder, warmed once on all three nodes,
    not two targets ``.../obs`` on 1 and ``.../obs/`` on 2."""
    pv, pvc = _fusecache_claim("ml", "ms", "lake", "ms/2025b")

    def replica(n: int, mount: dict) -> dict:
        return {"replicas": n, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "x",
                            "command": ["python", "-m", "t", "--ms-root=/ms/obs"],
                            "volumeMounts": [{"name": "ms", **mount}]}],
            "volumes": [{"name": "ms", "persistentVolumeClaim": {"claimName": "ms"}}]}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "obs", "namespace": "ml"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": replica(1, {"mountPath": "/ms"}),
               "Worker": replica(2, {"mountPath": "/ms/obs", "subPath": "obs"})}}}
    r = plan(write(tmp_path, "job.yaml", pv, pvc, job))
    assert r.returncode == 0, r.stderr
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://lake/ms/2025b/obs/  on 3 nodes  for Master, Worker  (stage 0)" in warm
    assert warm.count("s3://") == 1
    # a file beside a folder of another name is left as it is
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "command"][-1] = "--ms-root=/ms/obs.json"
    r = plan(write(tmp_path, "job2.yaml", pv, pvc, job))
    warm = r.stdout.split("warm:", 1)[1]
    assert "s3://lake/ms/2025b/obs.json  on 1 node  for Master" in warm
    assert "s3://lake/ms/2025b/obs/  on 2 nodes  for Worker" in warm


def test_a_message_a_script_echoes_is_no_run_time_read(tmp_path) -> None:
    """``echo "refit ${RUN_DATE}: features ${FEATURES_URI}"`` (blind job round 27): the
    message was listed as a run-time read of itself; the features are read once, by the
    program, and a location holding a run-time value is still one."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "command": ["bash", "-c"],
               "env": [{"name": "FEATURES_URI", "value": "s3://lake/features/v7/"}],
               "args": ['RUN_DATE="$(date -u +%F)"\n'
                        'echo "refit ${RUN_DATE}: features ${FEATURES_URI}"\n'
                        'python -m refit --features "${FEATURES_URI}" --day "${RUN_DATE}"\n'
                        'python -m score --data "s3://lake/daily/${RUN_DATE}/"']}]}}}}
    r = plan(write(tmp_path, "job.yaml", job))
    assert r.returncode == 0, r.stderr
    assert "refit" not in r.stdout.split("reads", 1)[1], r.stdout
    assert "reads s3://lake/features/v7/" in r.stdout
    assert "s3://lake/daily/${RUN_DATE}/" in r.stdout  # a run-time read, shown


def test_a_configmap_scripts_use_of_the_env_is_the_containers(tmp_path) -> None:
    """``bash /opt/crash/train.sh`` from a ConfigMap (blind job round 28): a root the script
    spells out (``"${DATA_ROOT}/fnol/w47.parquet"``) was also warmed whole, and an env var
    it syncs to (``aws s3 sync /tmp/o/ "${RUN_URI}"``) was unknown, where the same script
    inline in ``bash -c`` gave one file read and one write."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scripts",
                                                                "namespace": "p"},
          "data": {"train.sh": '#!/usr/bin/env bash\nset -euo pipefail\n'
                               'python /app/train.py --labels "${DATA_ROOT}/fnol/w47.parquet"'
                               ' --out /tmp/o\naws s3 sync /tmp/o/ "${RUN_URI}"\n'}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "p"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "x", "command": ["bash", "/opt/crash/train.sh"],
               "env": [{"name": "DATA_ROOT", "value": "s3://claims/labels"},
                       {"name": "RUN_URI", "value": "s3://runs/crash/w47/"}],
               "volumeMounts": [{"name": "scripts", "mountPath": "/opt/crash"}]}],
               "volumes": [{"name": "scripts", "configMap": {"name": "scripts"}}]}}}}
    r = plan(write(tmp_path, "job.yaml", cm, job), "--json")
    assert r.returncode == 0, r.stderr
    [work] = json.loads(r.stdout)["work"]
    assert [t["dataset"] for t in work["warm"]] == ["s3://claims/labels/fnol/w47.parquet"]
    [group] = work["groups"]
    assert group["writes"] == ["s3://runs/crash/w47/"] and not group.get("unknown")


def test_job_round_29_case_branches_launchers_and_configmap_data(tmp_path) -> None:
    """Job round 29: a ``case`` whose branches span lines kept only the last branch's
    value; an env var a launcher reads into a variable or an argparse default and hands to
    ``--output-dir`` was read (warmed); an argparse default under a mount handed to a
    subprocess was lost, and one the command line overrides must not be read; a ConfigMap
    whose data value is a mapping was taken for the config (exit 0)."""
    def job(container: dict, *more: dict) -> list[dict]:
        return [*more, {"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": "j", "namespace": "p"},
                        "spec": {"template": {"spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "x", **container}],
                            "volumes": [{"name": "s", "configMap": {"name": "launcher"}}]}}}}]

    def planned(*objs: dict) -> dict:
        r = plan(write(tmp_path, "job.yaml", *objs), "--json")
        assert r.returncode == 0, r.stderr
        [work] = json.loads(r.stdout)["work"]
        return work

    case = ('case "${STAGE}" in\n  sft)\n    BASE=s3://m/base/\n    ;;\n  dpo)\n'
            '    BASE=s3://m/sft-r2/\n    ;;\nesac\npython /opt/t.py --model "${BASE}"\n')
    work = planned(*job({"command": ["bash", "-c", case],
                         "env": [{"name": "STAGE", "value": "sft"}]}))
    # STAGE given in the env picks its branch (round 36); one only the run knows, each
    assert sorted(t["dataset"] for t in work["warm"]) == ["s3://m/base/"]
    work = planned(*job({"command": ["bash", "-c", case]}))
    assert sorted(t["dataset"] for t in work["warm"]) == ["s3://m/base/", "s3://m/sft-r2/"]

    launcher = ('import argparse, os, subprocess\np = argparse.ArgumentParser()\n'
                'p.add_argument("--output-dir", default=os.environ.get("RUN_URI", "/x"))\n'
                'p.add_argument("--clean", default="/data/clean/read_speech")\n'
                'p.add_argument("--noise", default="/data/noise/dns4")\n'
                'args = p.parse_args()\nlog = os.environ.get("LOG_URI", "/tmp/log")\n'
                'subprocess.run(["torchrun", "/opt/train.py", "--output-dir", args.output_dir,'
                ' "--log-dir", log, "--clean-dir", args.clean, "--noise-dir", args.noise])\n')
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "launcher",
                                                                "namespace": "p"},
          "data": {"run.py": launcher}}
    pv, pvc = _fusecache_claim("p", "d", "lake", "data")
    [*cfg, j] = job({"command": ["python3", "/opt/s/run.py", "--noise", "/data/noise/full"],
                     "env": [{"name": "RUN_URI", "value": "s3://runs/r4/"},
                             {"name": "LOG_URI", "value": "s3://runs/r4/logs/"}],
                     "volumeMounts": [{"name": "s", "mountPath": "/opt/s"},
                                      {"name": "d", "mountPath": "/data"}]}, cm, pv, pvc)
    j["spec"]["template"]["spec"]["volumes"].append(
        {"name": "d", "persistentVolumeClaim": {"claimName": "d"}})
    work = planned(*cfg, j)
    assert sorted(t["dataset"] for t in work["warm"]) == [
        "s3://lake/data/clean/read_speech", "s3://lake/data/noise/full"]
    assert sorted(work["groups"][0]["writes"]) == ["s3://runs/r4/", "s3://runs/r4/logs/"]

    cm["data"] = {"train.yaml": {"data": "s3://lake/x/"}}
    r = plan(write(tmp_path, "bad.yaml", *job({"command": ["python", "t.py"]}, cm)))
    assert r.returncode == 2
    assert "ConfigMap launcher: data[train.yaml]: expected a string, got dict" in r.stderr


def _indexed_job(name: str, script: str, completions: int, mode: str = "Indexed") -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "recsys"},
            "spec": {"completionMode": mode, "completions": completions, "parallelism": 2,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [{
                         "name": "trainer", "image": "python:3.12",
                         "command": ["/bin/bash", "-c"], "args": [script]}]}}}}


def test_an_indexed_jobs_per_index_location_is_read_at_each_index(tmp_path) -> None:
    """Blind job round 31: ``part-${JOB_COMPLETION_INDEX}`` in an Indexed Job of 3
    completions is read at 0, 1 and 2 (the Job controller sets the var in each pod), as
    is ``$(JOB_COMPLETION_INDEX)`` in args; past MAX_INDEXES completions, or in a Job
    that is not Indexed, it stays a run-time location and nothing is warmed."""
    direct = 'python train.py --train-file "s3://bkt/clicks/part-${JOB_COMPLETION_INDEX}.parquet"'
    r = plan(write(tmp_path, "a.yaml", _indexed_job("idx", direct, 3)), "--json")
    assert r.returncode == 0, r.stderr
    warmed = sorted(w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"])
    assert warmed == [f"s3://bkt/clicks/part-{i}.parquet" for i in range(3)]
    k8s_style = _indexed_job("idx2", "", 2)
    k8s_style["spec"]["template"]["spec"]["containers"][0].update(
        command=["python", "infer.py"],
        args=["--shard", "s3://bkt/scores/in/shard-$(JOB_COMPLETION_INDEX)/"])
    r = plan(write(tmp_path, "b.yaml", k8s_style), "--json")
    assert sorted(w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"]) == [
        "s3://bkt/scores/in/shard-0/", "s3://bkt/scores/in/shard-1/"]
    for job in (_indexed_job("many", direct, 33), _indexed_job("nonidx", direct, 3, "NonIndexed")):
        r = plan(write(tmp_path, "c.yaml", job), "--json")
        assert r.returncode == 0, r.stderr
        work = json.loads(r.stdout)["work"][0]
        assert work["warm"] == []
        assert [d["pattern"] for d in work["groups"][0]["datasets"]] == [
            "s3://bkt/clicks/part-${JOB_COMPLETION_INDEX}.parquet"]


def test_a_bash_array_item_picked_by_the_index_reads_every_item_on_one_line_or_many(
        tmp_path) -> None:
    """Blind job round 31: ``"${SHARDS[$JOB_COMPLETION_INDEX]}"`` of an array written on one
    line read nothing, written over several lines each item was a bare word; both now read
    each item (the pods running at once read different ones), and nothing else; so does
    ``SHARD="${SHARDS[$JOB_COMPLETION_INDEX]}"`` then ``"$SHARD"``."""
    use = 'python train.py --train-file "${SHARDS[$JOB_COMPLETION_INDEX]}" --out s3://bkt/out/'
    one_line = "SHARDS=(s3://bkt/clicks/part-0.parquet s3://bkt/clicks/part-1.parquet)\n" + use
    lines = ("SHARDS=(\n  s3://bkt/clicks/part-0.parquet\n  s3://bkt/clicks/part-1.parquet\n)\n"
             + use)
    via_var = (one_line.split("\n")[0] + '\nSHARD="${SHARDS[$JOB_COMPLETION_INDEX]}"\n'
               'echo "index $JOB_COMPLETION_INDEX: $SHARD"\n'
               'python train.py --train-file "$SHARD" --out s3://bkt/out/')
    for name, script in (("one", one_line), ("lines", lines), ("var", via_var)):
        r = plan(write(tmp_path, f"{name}.yaml", _indexed_job(name, script, 2)), "--json")
        assert r.returncode == 0, r.stderr
        warm = sorted(w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"])
        assert warm == ["s3://bkt/clicks/part-0.parquet", "s3://bkt/clicks/part-1.parquet"], name


def test_a_kueue_pod_groups_workload_is_read_and_its_pods_are_not_a_kind(tmp_path) -> None:
    """Blind job round 31: a Kueue pod group is plain Pods (``pod-group-name``), which plan
    refuses naming the kind; Kueue's Workload for the group (owned by the Pods, not by a
    controller) holds their template and is read, queued, as the agent reads it."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "align-en", "namespace": "speech", "labels": {
               "kueue.x-k8s.io/queue-name": "speech-cpu",
               "kueue.x-k8s.io/pod-group-name": "cv17-align"}},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "mfa", "image": "mfa:3", "args": [
                   "mfa", "align", "s3://speech/cv17/en/clips/", "english_mfa", "/tmp/out"]}]}}
    r = plan(write(tmp_path, "pod.yaml", pod))
    assert r.returncode == 2 and "not a pipeline nor a kind of work" in r.stderr, r.stderr
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                "metadata": {"name": "cv17-align", "namespace": "speech", "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": n, "uid": f"u-{n}"}
                    for n in ("align-en", "align-de")]},
                "spec": {"queueName": "speech-cpu", "podSets": [
                    {"name": "3a1b2c", "count": 2, "template": {"spec": pod["spec"]}}]}}
    r = plan(write(tmp_path, "wl.yaml", workload), "--json")
    assert r.returncode == 0, r.stderr
    work = json.loads(r.stdout)["work"][0]
    assert (work["state"], work["queue"], work["nodes"]) == ("queued", "speech-cpu", 2)
    assert [w["dataset"] for w in work["warm"]] == ["s3://speech/cv17/en/clips/"]


def test_round_32_partition_paths_checkpoints_on_writable_claims_and_undeclared_trial_values(
        tmp_path) -> None:
    """Blind job round 32: a path under a mount holding ``=`` (a Hive partition) was cut at
    the ``=`` (every partition warmed); ``--ckpt-dir`` under a writable claim mapped with
    --pvc was warmed (read or written, as on s3://: not warmed; under a read-only mount it
    can only be read); a Katib trial template using a trialParameter it does not declare
    was planned with exit 0 (Katib refuses it: exit 2, naming it)."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "c", "image": "img",
               "args": ["--eval-path=/mnt/clicks/dt=2026-12-01/", "--ckpt-dir=/work/run1",
                        "--resume-from=/data/ckpt/last"],
               "volumeMounts": [{"name": "clicks", "mountPath": "/mnt/clicks"},
                                {"name": "work", "mountPath": "/work"},
                                {"name": "ds", "mountPath": "/data", "readOnly": True}]}],
               "volumes": [
                   {"name": "clicks", "csi": {"driver": "csi.fusecache.io", "volumeAttributes": {
                       "bucket": "reco", "prefix": "events/parquet"}}},
                   {"name": "work", "persistentVolumeClaim": {"claimName": "work"}},
                   {"name": "ds", "persistentVolumeClaim": {"claimName": "ds"}}]}}}}
    r = plan(write(tmp_path, "j.yaml", job), "--pvc", "work=s3://scratch/work",
             "--pvc", "ds=s3://team/ds", "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"]) == [
        "s3://reco/events/parquet/dt=2026-12-01", "s3://team/ds/ckpt/last"]
    exp = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
           "metadata": {"name": "e", "namespace": "ns"},
           "spec": {"objective": {"type": "minimize", "objectiveMetricName": "loss"},
                    "algorithm": {"algorithmName": "random"},
                    "parameters": [{"name": "src", "parameterType": "categorical",
                                    "feasibleSpace": {"list": ["a", "b"]}}],
                    "trialTemplate": {"primaryContainerName": "main", "trialParameters": [
                        {"name": "source", "reference": "src"}], "trialSpec": {
                        "apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
                            "restartPolicy": "Never", "containers": [{
                                "name": "main", "image": "img", "args": [
                                    "--radar=s3://wx/${trialParameters.product}/"]}]}}}}}}}
    r = plan(write(tmp_path, "e.yaml", exp))
    assert r.returncode == 2 and not r.stdout
    assert "${trialParameters.product} is not among its trialParameters (source" in r.stderr
    exp["spec"]["trialTemplate"]["trialParameters"].append({"name": "product",
                                                            "reference": "prod"})
    r = plan(write(tmp_path, "e.yaml", exp))
    assert r.returncode == 2
    assert "trialParameters[product]: reference 'prod' is not in spec.parameters" in r.stderr


def test_round_33_a_claim_of_a_fusecache_storageclass_and_a_dir_inside_the_output(
        tmp_path) -> None:
    """Blind job round 33: a PVC of the ``fusecache`` StorageClass not bound yet (dynamic
    provisioning) was unresolved; given the class in the files it resolves to the location
    the CSI controller will give it (``prefixPolicy`` pvcName, namespacePvcName, fixed; a
    volumeName policy is a fresh empty prefix: nothing). An env var naming a folder inside
    the container's own ``--output_dir`` on a writable claim was warmed."""
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
          "metadata": {"name": "fusecache"}, "provisioner": "csi.fusecache.io",
          "parameters": {"bucket": "train-data", "prefix": "datasets"}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "imagenet", "namespace": "ml"},
           "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "fusecache",
                    "resources": {"requests": {"storage": "1Gi"}}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "c", "image": "img",
               "args": ["--data=/data/train", "--output_dir=/ckpt/run1"],
               "env": [{"name": "WANDB_DIR", "value": "/ckpt/run1/wandb"}],
               "volumeMounts": [{"name": "ds", "mountPath": "/data", "readOnly": True},
                                {"name": "ckpt", "mountPath": "/ckpt"}]}],
               "volumes": [{"name": "ds", "persistentVolumeClaim": {"claimName": "imagenet"}},
                           {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]}}}}

    def warmed(*objs: dict) -> list[str]:
        r = plan(write(tmp_path, "f.yaml", *objs), "--pvc", "ckpt=s3://ml-ckpt/runs", "--json")
        assert r.returncode == 0, r.stderr
        return sorted(w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"])

    assert warmed(sc, pvc, job) == ["s3://train-data/datasets/imagenet/train"]
    for policy, want in (("namespacePvcName", ["s3://train-data/datasets/ml/imagenet/train"]),
                         ("fixed", ["s3://train-data/datasets/train"]), ("volumeName", [])):
        sc["parameters"]["prefixPolicy"] = policy
        assert warmed(sc, pvc, job) == want, policy
    other = {**sc, "metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com"}
    assert warmed(other, {**pvc, "spec": {**pvc["spec"], "storageClassName": "gp3"}}, job) == []
    # a class CreateVolume refuses (a typo): named, exit 2, as its claims would stay Pending
    bad = {**sc, "parameters": {"bucket": "train-data", "regoin": "us-east-1"}}
    r = plan(write(tmp_path, "bad.yaml", bad, pvc, job))
    assert r.returncode == 2 and not r.stdout
    assert "StorageClass fusecache of claim ml/imagenet: unknown volume attribute(s) regoin" \
        in r.stderr


def test_round_34_a_finished_replicated_job_and_a_per_pod_checkpoint_folder(tmp_path) -> None:
    """Blind job round 34: a JobSet's replicated job whose Jobs all succeeded
    (``status.replicatedJobsStatus``) still had its input warmed; a writable mount with
    ``subPathExpr: $(POD_NAME)`` named only by ``--checkpoint-dir`` was read whole once its
    claim was mapped (with a fixed subPath it was a write already)."""
    def job(name: str, args: list[str]) -> dict:
        pod = {"restartPolicy": "Never",
               "containers": [{"name": name, "image": "i", "args": args}]}
        return {"name": name, "replicas": 1,
                "template": {"spec": {"template": {"spec": pod}}}}
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "prep-then-train", "namespace": "ml"},
          "spec": {"replicatedJobs": [
              job("prep", ["--in=s3://raw/videos/", "--out=s3://curated/frames/"]),
              {**job("train", ["--data=s3://curated/frames/train/"]),
               "dependsOn": [{"name": "prep", "status": "Complete"}]}]},
          "status": {"replicatedJobsStatus": [
              {"name": "prep", "replicas": 1, "ready": 0, "active": 0, "succeeded": 1},
              {"name": "train", "replicas": 1, "ready": 1, "active": 1, "succeeded": 0}]}}
    r = plan(write(tmp_path, "js.yaml", js), "--json")
    assert r.returncode == 0, r.stderr
    assert [w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"]] == [
        "s3://curated/frames/train/"]
    js["status"]["replicatedJobsStatus"][0]["succeeded"] = 0
    r = plan(write(tmp_path, "js.yaml", js), "--json")
    assert "s3://raw/videos/" in [w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"]]
    ckpt = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ckpt-writer", "namespace": "ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "train", "image": "train:1",
                "args": ["--data=s3://corpus/train/", "--checkpoint-dir=/ckpt"],
                "env": [{"name": "POD_NAME",
                         "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt",
                                  "subPathExpr": "$(POD_NAME)"}]}],
                "volumes": [{"name": "ckpt",
                             "persistentVolumeClaim": {"claimName": "run-ckpt"}}]}}}}
    r = plan(write(tmp_path, "ckpt.yaml", ckpt), "--pvc", "run-ckpt=s3://ckpt-bucket/runs",
             "--json")
    assert [w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"]] == [
        "s3://corpus/train/"]


def test_a_generic_ephemeral_volume_of_a_fusecache_class_is_its_dataset(tmp_path) -> None:
    """A Job's pods may each get their own claim from an ``ephemeral.volumeClaimTemplate``
    (named ``<pod>-<volume>`` by the ephemeral-volume controller). Of a fusecache class whose
    prefix does not hold the claim's name (prefixPolicy fixed) it is known before the pods
    exist and warmed; one whose prefix does (pvcName) is said to wait for the pod's name;
    another provisioner's is an empty claim; a class CreateVolume refuses is exit 2."""
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
          "metadata": {"name": "imagenet"}, "provisioner": "csi.fusecache.io",
          "parameters": {"bucket": "datasets", "prefix": "imagenet", "prefixPolicy": "fixed"}}

    def ephemeral(cls: str, mode: str) -> dict:
        return {"volumeClaimTemplate": {"spec": {
            "accessModes": [mode], "storageClassName": cls,
            "resources": {"requests": {"storage": "1Gi"}}}}}

    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "resnet", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "train", "image": "img", "args": ["--data", "/data/train"],
               "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True},
                                {"name": "scratch", "mountPath": "/scratch"}]}],
               "volumes": [{"name": "data", "ephemeral": ephemeral("imagenet", "ReadOnlyMany")},
                           {"name": "scratch",
                            "ephemeral": ephemeral("standard", "ReadWriteOnce")}]}}}}
    r = plan(write(tmp_path, "j.yaml", sc, job), "--json")
    assert r.returncode == 0, r.stderr
    (work,) = json.loads(r.stdout)["work"]
    assert [w["dataset"] for w in work["warm"]] == ["s3://datasets/imagenet/train"]
    refs = {d["claim"]: d for d in work["groups"][0]["datasets"]}
    assert refs["<pod>-data"]["ephemeralStorageClass"] == "imagenet"
    assert refs["<pod>-scratch"]["resolved"] is None
    r = plan(write(tmp_path, "j.yaml", sc, job))
    assert "of StorageClass standard, not in the files" in r.stdout
    sc["parameters"]["prefixPolicy"] = "pvcName"
    r = plan(write(tmp_path, "j.yaml", sc, job))
    assert r.returncode == 0 and "warm: nothing" in r.stdout
    assert "whose prefix holds the pod's name (prefixPolicy pvcName)" in r.stdout
    sc["parameters"]["prefixPolicy"] = "fixd"
    r = plan(write(tmp_path, "j.yaml", sc, job))
    assert r.returncode == 2 and not r.stdout
    assert "StorageClass imagenet of claim ml/<pod>-data: prefixPolicy 'fixd'" in r.stderr
    job["spec"]["template"]["spec"]["volumes"][0]["ephemeral"] = ["not", "a", "mapping"]
    r = plan(write(tmp_path, "j.yaml", job))
    assert r.returncode == 2 and "volumes[data].ephemeral" in r.stderr


def test_round_37_an_index_from_the_downward_api_and_a_file_only_the_run_names(
        tmp_path) -> None:
    """Blind job round 37: an Indexed Job's env var from the completion index annotation or
    label (``fieldRef``) in a ``subPathExpr`` warmed the whole volume, and in an argument
    read nothing; a file a ``while read`` loop names (``/fastq/run/$r1``, unbraced) was
    warmed as a key named ``$r1``, also by the agent's reading of the bound pod."""
    csi = {"driver": "csi.fusecache.io", "readOnly": True,
           "volumeAttributes": {"bucket": "speech", "prefix": "flac"}}
    for kind in ("annotations", "labels"):
        field = f"metadata.{kind}['batch.kubernetes.io/job-completion-index']"
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "shards", "namespace": "ml"},
               "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                        "template": {"spec": {"restartPolicy": "Never", "containers": [{
                            "name": "c", "image": "i",
                            "env": [{"name": "SHARD",
                                     "valueFrom": {"fieldRef": {"fieldPath": field}}}],
                            "command": ["sh", "-c", "cat /audio/*"],
                            "args": ["--extra=s3://speech/extra/part-$(SHARD).tar"],
                            "volumeMounts": [{"name": "audio", "mountPath": "/audio",
                                              "subPathExpr": "shard-$(SHARD)"}]}],
                            "volumes": [{"name": "audio", "csi": csi}]}}}}
        r = plan(write(tmp_path, "j.yaml", job), "--json")
        assert r.returncode == 0, r.stderr
        assert sorted(w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"]) == [
            "s3://speech/extra/part-0.tar", "s3://speech/extra/part-1.tar",
            "s3://speech/flac/shard-0/*", "s3://speech/flac/shard-1/*"], kind
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "runs"},
          "spec": {"accessModes": ["ReadOnlyMany"], "csi": {
              "driver": "csi.fusecache.io", "volumeHandle": "runs",
              "volumeAttributes": {"bucket": "genomics", "prefix": "fastq"}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "fastq", "namespace": "ml"},
           "spec": {"accessModes": ["ReadOnlyMany"], "volumeName": "runs"}}
    spec = {"restartPolicy": "Never", "containers": [{
        "name": "bwa", "image": "i", "command": ["/bin/bash", "-c"],
        "args": ['while read sample r1 r2; do\n  bwa mem /idx "/fastq/A/$r1" "/fastq/A/${r2}"'
                 ' > "/tmp/$sample.sam"\ndone < /fastq/A/samples.tsv\n'],
        "volumeMounts": [{"name": "fastq", "mountPath": "/fastq", "readOnly": True}]}],
        "volumes": [{"name": "fastq", "persistentVolumeClaim": {"claimName": "fastq"}}]}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "align", "namespace": "ml"}, "spec": {"template": {"spec": spec}}}
    r = plan(write(tmp_path, "a.yaml", pv, pvc, job), "--json")
    assert r.returncode == 0, r.stderr
    assert [w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"]] == [
        "s3://genomics/fastq/A/samples.tsv"]
    pod = {"metadata": {"name": "align-x", "namespace": "ml"}, "spec": spec}
    assert k8s_datasets.pod_datasets(pod, k8s_datasets.ObjectsView([pv, pvc])) == [
        "s3://genomics/fastq/A/samples.tsv"]


def test_round_38_what_an_earlier_replicated_job_writes_is_not_warmed_ahead(tmp_path) -> None:
    """Blind job round 38: a JobSet's trainer reading what its data-prep (``dependsOn``)
    writes had that location warmed when the JobSet was submitted, before data-prep wrote
    it (a stale copy or nothing, and the folder listed as it was then), on S3 and on a
    claim's path (where data-prep's write was not even recorded). Once data-prep has
    succeeded, its output is there and is warmed. A finished Job's ``--json`` listed a warm
    the text plan denied; ``s3://b/daily/`date +%F`/`` warmed the whole parent folder."""
    def js(out: str, read: str, volumes: list | None = None, mounts: list | None = None,
           done: bool = False) -> dict:
        def rj(name: str, args: list[str], **extra: object) -> dict:
            pod = {"restartPolicy": "Never", "volumes": volumes or [],
                   "containers": [{"name": name, "image": "i", "args": args,
                                   "volumeMounts": mounts or []}]}
            return {"name": name, "replicas": 1,
                    "template": {"spec": {"template": {"spec": pod}}}, **extra}
        obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
               "metadata": {"name": "ctr", "namespace": "ads"},
               "spec": {"replicatedJobs": [
                   rj("data-prep", ["--in=s3://raw/clicks/", f"--out-dir={out}"]),
                   rj("trainer", [f"--train-dir={read}"],
                      dependsOn=[{"name": "data-prep", "status": "Complete"}])]}}
        if done:
            obj["status"] = {"replicatedJobsStatus": [
                {"name": "data-prep", "replicas": 1, "ready": 0, "active": 0, "succeeded": 1},
                {"name": "trainer", "replicas": 1, "ready": 1, "active": 1, "succeeded": 0}]}
        return obj

    def warmed(obj: dict, *flags: str) -> list[str]:
        r = plan(write(tmp_path, "j.yaml", obj), "--json", *flags)
        assert r.returncode == 0, r.stderr
        return sorted(w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"])

    day = "s3://feat/ctr/dt=2026-11-30/"
    assert warmed(js(day, day)) == ["s3://raw/clicks/"]
    assert warmed(js(day, day + "part-0.parquet")) == ["s3://raw/clicks/"]
    assert warmed(js(day, day, done=True)) == [day]
    r = plan(write(tmp_path, "j.yaml", js(day, day)))
    assert f"reads {day}  (arg) [written by data-prep as the job runs: not warmed]" in r.stdout
    claim = ([{"name": "f", "persistentVolumeClaim": {"claimName": "features"}}],
             [{"name": "f", "mountPath": "/features"}])
    assert warmed(js("/features/dt=2026-11-30/", "/features/dt=2026-11-30", *claim),
                  "--pvc", "features=s3://feat/ctr") == ["s3://raw/clicks/"]
    assert warmed(js("/features/dt=2026-11-30/", "/features/dt=2026-11-30", *claim, done=True),
                  "--pvc", "features=s3://feat/ctr") == ["s3://feat/ctr/dt=2026-11-30"]

    def job(args: list[str], **status: object) -> dict:
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "eval", "namespace": "speech"},
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "c", "image": "i", "command": ["/bin/bash", "-c"],
                     "args": args}]}}}, **({"status": status} if status else {})}
    finished = job(["aws s3 sync s3://speech/clips/ /data/"], succeeded=1, conditions=[
        {"type": "Complete", "status": "True"}])
    assert warmed(finished) == []
    assert warmed(job(['aws s3 sync "s3://speech/eval/daily/`date -u +%F`/" /eval/'])) == []
    # a location inside backticks that close after it is still one
    assert warmed(job(['X=`aws s3 cp s3://speech/eval/index.json -`; echo "$X"'])) == [
        "s3://speech/eval/index.json"]


def test_round_39_an_initializers_claim_and_pods_kept_on_one_host(tmp_path) -> None:
    """Blind job round 39: a TrainJob's dataset initializer, which downloads into the
    workspace claim it mounts, had that claim warmed as a read once it was mapped; eight
    pods a required pod affinity keeps on one host were planned on eight nodes."""
    rt = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
          "metadata": {"name": "rt", "namespace": "llm"},
          "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
              "replicatedJobs": [
                  {"name": "dataset-initializer", "template": {
                      "metadata": {"labels": {
                          "trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
                      "spec": {"template": {"spec": {
                          "containers": [{"name": "dataset-initializer", "image": "i",
                                          "volumeMounts": [{"name": "workspace",
                                                            "mountPath": "/workspace"}]}],
                          "volumes": [{"name": "workspace",
                                       "persistentVolumeClaim": {"claimName": "ws"}}]}}}}},
                  {"name": "node", "dependsOn": [{"name": "dataset-initializer",
                                                  "status": "Complete"}],
                   "template": {
                      "metadata": {"labels": {
                          "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                      "spec": {"template": {"spec": {
                          "containers": [{"name": "node", "image": "i", "args": [
                              "--data=/workspace/dataset/train", "--vocab=/workspace/vocab.txt"],
                              "volumeMounts": [{"name": "workspace",
                                                "mountPath": "/workspace"}]}],
                          "volumes": [{"name": "workspace",
                                       "persistentVolumeClaim": {"claimName": "ws"}}]}}}}}]}}}}
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
          "metadata": {"name": "tj", "namespace": "llm"},
          "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                  "name": "rt"},
                   "initializer": {"dataset": {"storageUri": "s3://corpus/sft/v4/"}},
                   "trainer": {"numNodes": 1}}}
    r = plan(write(tmp_path, "tj.yaml", rt, tj), "--json", "--pvc", "ws=s3://scratch/ws")
    assert r.returncode == 0, r.stderr
    # the initializer's download is warmed, the claim it fills is not; the trainer's file
    # beside the initializer's folder is
    assert sorted(w["dataset"] for w in json.loads(r.stdout)["work"][0]["warm"]) == [
        "s3://corpus/sft/v4/", "s3://scratch/ws/vocab.txt"]
    r = plan(write(tmp_path, "tj.yaml", rt, tj), "--pvc", "ws=s3://scratch/ws")
    assert "[written by dataset-initializer as the job runs: not warmed]" in r.stdout
    # without --pvc, the JSON says why as the text does (blind job round 58: another reason)
    r = plan(write(tmp_path, "tj.yaml", rt, tj), "--json")
    why = {d.get("path"): d.get("unresolved") for g in json.loads(r.stdout)["work"][0]["groups"]
           for d in g["datasets"] if g["name"] == "node"}
    assert why["dataset/train"] == "written by dataset-initializer as the job runs: not warmed", why

    def job(affinity: dict) -> dict:
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "shards", "namespace": "wx"},
                "spec": {"parallelism": 8, "completions": 8, "template": {
                    "metadata": {"labels": {"app": "shards"}},
                    "spec": {"restartPolicy": "Never", "affinity": affinity, "containers": [
                        {"name": "c", "image": "i", "args": ["--in=s3://era5/2021.zarr"]}]}}}}
    together = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname",
         "labelSelector": {"matchLabels": {"app": "shards"}}}]}}
    apart = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname",
         "labelSelector": {"matchLabels": {"app": "other"}}}]}}
    for aff, nodes in ((together, 1), (apart, 8), ({}, 8)):
        r = plan(write(tmp_path, "j.yaml", job(aff)), "--json")
        assert r.returncode == 0, r.stderr
        assert [w["nodes"] for w in json.loads(r.stdout)["work"][0]["warm"]] == [nodes], aff


def test_a_claim_bound_to_a_local_pv_pins_the_group_to_its_host(tmp_path) -> None:
    """Blind job round 41: a Job whose claim is bound to a local PV (node affinity on
    ``kubernetes.io/hostname``) showed "no constraints", and its S3 data was placed on any
    node. The plan names the pin, and the warm target's requirements carry it, so placement
    keeps to that host (the scheduler's VolumeBinding)."""
    from prefetchd import workloads as wl
    from prefetchd.k8s import placement
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "gpu07-nvme"},
          "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"],
                   "storageClassName": "local-nvme",
                   "claimRef": {"namespace": "pathology", "name": "heldout"},
                   "local": {"path": "/mnt/nvme0/heldout"},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In",
                        "values": ["gpu-a100-07"]}]}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "heldout", "namespace": "pathology"},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-nvme",
                    "volumeName": "gpu07-nvme", "resources": {"requests": {"storage": "100Gi"}}}}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "eval-heldout", "namespace": "pathology"},
           "spec": {"template": {"spec": {
               "restartPolicy": "Never",
               "containers": [{"name": "eval", "image": "mil:2",
                               "args": ["--labels=s3://histo/clinical/labels.csv",
                                        "--heldout=/heldout"],
                               "volumeMounts": [{"name": "h", "mountPath": "/heldout"}]}],
               "volumes": [{"name": "h", "persistentVolumeClaim": {"claimName": "heldout"}}]}}}}
    r = plan(write(tmp_path, "j.yaml", pv, pvc, job))
    assert r.returncode == 0, r.stderr
    assert ("PV gpu07-nvme of claim heldout only on kubernetes.io/hostname In gpu-a100-07"
            in r.stdout)
    view = k8s_datasets.ObjectsView([pv, pvc])
    [work] = [wl.read(job)]
    [target] = work.targets(wl.resolver_from_view(view, "pathology"),
                            wl.pins_from_view(view, "pathology"))
    nodes = [placement.NodeInfo(f"gpu-a100-0{i}", {"kubernetes.io/hostname": f"gpu-a100-0{i}"},
                                cache_free_bytes=2**40) for i in range(1, 9)]
    assert placement.choose(target.dataset, nodes, target.requirements, 1) == ["gpu-a100-07"]
    assert placement.ineligibility_reason(target.requirements, nodes[0]) == \
        "volume node affinity"


def test_a_location_with_one_slash_and_a_long_value_list_are_said(tmp_path) -> None:
    """Blind job round 57: ``s3:/lake/x`` (what os.path.join or pathlib make of s3://) was
    passed over without a word, and a per-trial location over 10 values said only that it
    is known at run time, not that more than 8 values are not warmed ahead."""
    exp = _experiment("cv", "shard", [str(i) for i in range(10)], "shard", {
        "name": "main", "args": ["--data", "s3://cv/shard-${trialParameters.shard}/",
                                 "--labels", "s3:/lake/labels.tsv"]})
    r = plan(write(tmp_path, "exp.yaml", exp))
    assert r.returncode == 0, r.stderr
    assert "note: container main: s3:/lake/labels.tsv has one slash after s3:" in r.stdout, \
        r.stdout
    assert "shard (one of 0, 1, 2, 3, ...: 10 values, more than the 8 warmed ahead)" \
        in r.stdout, r.stdout
