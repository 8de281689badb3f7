"""Blind job round 44 (data staged by init containers and sidecars, values from the downward
API): what the training-job adapters got wrong.

* D1: ``$(VAR)`` of an env var the downward API fills from the pod template's own label or
  annotation, or from the namespace, was never expanded: the read was dropped without a word.
  A ``$(VAR)`` only the pod knows (its name) was dropped too, where it should be shown as a
  run-time read.
* D2: a JobSet pod's Job index (``jobset.sigs.k8s.io/job-index``) was not expanded per
  replica, as an Indexed Job's completion index is.
* D3: an env var holding the root of locations built per index was warmed whole beside them.
* D4: rclone's ``:s3:bucket/x/$(LOCALE)/clips`` was cut at the ``$`` and ``s3://bucket/x/$``
  warmed.

The objects are as a user writes them and the controllers take them (batch/v1 Job, JobSet
v1alpha2, a Kubeflow PyTorchJob).
"""

from __future__ import annotations

from typing import Any

from prefetchd import workloads


def _container(args: list[str], env: list[dict[str, Any]], image: str = "amazon/aws-cli"
               ) -> dict[str, Any]:
    return {"name": "c", "image": image, "args": args, "env": env}


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _job(containers: list[dict[str, Any]], meta: dict[str, Any] | None = None,
         **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "stage", "namespace": "speech"},
            "spec": {**spec, "template": {"metadata": meta or {}, "spec": {
                "restartPolicy": "Never", "containers": containers}}}}


def _reads(obj: dict[str, Any]) -> list[tuple[str | None, str | None]]:
    """(uri, pattern) of every dataset of every group: a pattern is a run-time read."""
    work = workloads.read(obj)
    return [(r.uri, r.pattern) for g in work.groups for r in g.datasets]


def test_labels_annotations_and_namespace_from_the_downward_api_expand() -> None:
    job = _job([
        _container(["s3", "cp", "s3://speech-corpora/cv/$(LOCALE)/train.tsv", "/d/x"],
                   [_field("LOCALE", "metadata.annotations['locale']")]),
        {**_container(["s3", "sync", "s3://feature-store/$(NS)/date=$(DATE)/", "/d/"],
                      [_field("DATE", "metadata.labels['train-date']"),
                       _field("NS", "metadata.namespace")]), "name": "c2"}],
        meta={"labels": {"train-date": "2026-11-29"}, "annotations": {"locale": "de-DE"}})
    assert _reads(job) == [("s3://speech-corpora/cv/de-DE/train.tsv", None),
                           ("s3://feature-store/speech/date=2026-11-29/", None)]


def test_a_value_only_the_pod_has_is_a_run_time_read() -> None:
    """The pod's name, a label the template does not set, a label a controller sets (its
    value is the controller's, whatever the template says): shown, never warmed."""
    for env in (_field("V", "metadata.name"), _field("V", "metadata.labels['team']"),
                _field("V", "metadata.labels['batch.kubernetes.io/job-name']")):
        job = _job([_container(["s3", "sync", "s3://feature-store/$(V)/x/", "/d/"], [env])],
                   meta={"labels": {"batch.kubernetes.io/job-name": "guess"}})
        assert _reads(job) == [(None, "s3://feature-store/$(V)/x/")], env


def test_the_namespace_is_expanded_only_where_the_object_states_it() -> None:
    job = _job([_container(["s3", "sync", "s3://fs/$(NS)/x/", "/d/"],
                           [_field("NS", "metadata.namespace")])])
    del job["metadata"]["namespace"]  # (kubectl apply -n decides it)
    assert _reads(job) == [(None, "s3://fs/$(NS)/x/")]


def test_a_jobset_pods_job_index_is_read_at_each_replica() -> None:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "recsys", "namespace": "recsys"},
              "spec": {"replicatedJobs": [{"name": "w", "replicas": 3, "template": {
                  "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                      _container(["s3", "sync", "s3://recsys/train/part-$(IDX)/", "/d/"],
                                 [_field("IDX", "metadata.annotations"
                                                "['jobset.sigs.k8s.io/job-index']")])]}}}}}]}}
    assert _reads(jobset) == [(f"s3://recsys/train/part-{i}/", None) for i in range(3)]


def test_a_training_jobs_replica_index_is_read_at_each_replica() -> None:
    worker = {"replicas": 2, "template": {"spec": {"containers": [_container(
        ["python", "train.py", "--shard", "s3://asr/shards/w$(RANK_INDEX)/"],
        [_field("RANK_INDEX", "metadata.labels['training.kubeflow.org/replica-index']")],
        image="pytorch/pytorch")]}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "asr", "namespace": "speech"},
           "spec": {"pytorchReplicaSpecs": {"Worker": worker}}}
    assert _reads(job) == [("s3://asr/shards/w0/", None), ("s3://asr/shards/w1/", None)]


def test_an_env_root_the_indexed_locations_are_built_on_is_no_read_of_its_own() -> None:
    job = _job([_container(["s3", "sync", "$(ROOT)/shard-$(JOB_COMPLETION_INDEX)/", "/d/"],
                           [{"name": "ROOT", "value": "s3://rad/lidc/v3"}])],
               completionMode="Indexed", completions=2, parallelism=2)
    assert _reads(job) == [("s3://rad/lidc/v3/shard-0/", None),
                           ("s3://rad/lidc/v3/shard-1/", None)]


def test_an_rclone_remote_holding_a_variable_is_not_cut_at_the_dollar() -> None:
    secret = {"name": "LOCALE", "valueFrom": {"secretKeyRef": {"name": "p", "key": "locale"}}}
    job = _job([_container(["copy", ":s3:speech-corpora/cv/$(LOCALE)/clips", "/d/clips"],
                           [secret], image="rclone/rclone:1.68.2")])
    assert all(uri is None for uri, _ in _reads(job))
