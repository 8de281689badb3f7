"""Blind job round 57 (Katib Experiments where the data is part of the search): a categorical
parameter whose values are whole locations (``--train ${trialParameters.trainUri}`` over
``s3://...`` URIs, or paths under a mounted claim) was dropped without a word, or the whole
mount warmed; a 3 x 3 grid of two data parameters was left to run time (the limit of 8 held
for the combinations); an Experiment tuning its worker count (``replicas:
"${trialParameters.workers}"``) was refused."""

from __future__ import annotations

import copy
from typing import Any

from prefetchd import workloads
from prefetchd.workloads._library import Library


def experiment(params: dict[str, list[str]], container: dict[str, Any],
               worker_replicas: Any = 1, **pod: Any) -> dict[str, Any]:
    """An Experiment of PyTorchJob trials (2 at once), tuning *params* (categorical lists)."""
    def replica(n: Any) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": {
            **pod, "containers": [{"name": "pytorch", "image": "bert:2", **container}]}}}

    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
            "metadata": {"name": "search", "namespace": "nlp"},
            "spec": {"parallelTrialCount": 2, "maxTrialCount": 6,
                     "objective": {"type": "minimize", "objectiveMetricName": "loss"},
                     "algorithm": {"algorithmName": "grid"},
                     "parameters": [{"name": n, "parameterType": "categorical",
                                     "feasibleSpace": {"list": vs}} for n, vs in params.items()],
                     "trialTemplate": {
                         "primaryContainerName": "pytorch",
                         "trialParameters": [{"name": n, "reference": n} for n in params],
                         "trialSpec": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                       "spec": {"pytorchReplicaSpecs": {
                                           "Master": replica(1),
                                           "Worker": replica(worker_replicas)}}}}}}


def warmed(exp: dict[str, Any]) -> list[tuple[str, int]]:
    work = workloads.read(copy.deepcopy(exp), Library())
    return [(t.dataset, t.nodes) for t in work.targets()]


CORPORA = ["s3://corpora/wiki/2025-10/", "s3://corpora/c4/shards/", "s3://corpora/pile/v2/"]


def test_a_parameter_whose_values_are_locations_reads_each() -> None:
    for args in (["--train", "${trialParameters.trainUri}"],
                 ["--train=${trialParameters.trainUri}"]):
        exp = experiment({"trainUri": CORPORA}, {"args": args})
        assert warmed(exp) == [(u, 4) for u in CORPORA], args  # 2 trials x 2 pods
    env = experiment({"trainUri": CORPORA}, {
        "env": [{"name": "TRAIN_URI", "value": "${trialParameters.trainUri}"}],
        "args": ["--train", "$(TRAIN_URI)"]})
    assert sorted(warmed(env)) == sorted((u, 4) for u in CORPORA)


def test_paths_under_a_claim_narrow_the_mount() -> None:
    pod = {"volumes": [{"name": "corpus", "persistentVolumeClaim": {"claimName": "audio"}}]}
    exp = experiment({"clips": ["/corpus/fsd50k/clips", "/corpus/esc50/clips"]}, {
        "args": ["--clips", "${trialParameters.clips}"],
        "volumeMounts": [{"name": "corpus", "mountPath": "/corpus", "readOnly": True}]}, **pod)
    work = workloads.read(exp, Library())
    refs = {(r.claim, r.path) for g in work.groups for r in g.datasets}
    assert refs == {("audio", "fsd50k/clips"), ("audio", "esc50/clips")}  # not the whole claim


def test_a_grid_of_two_data_parameters_is_warmed_whole() -> None:
    exp = experiment({"source": ["inat21", "places365", "imagenet1k"],
                      "res": ["128px", "224px", "320px"]},
                     {"args": ["--data",
                               "s3://prep/${trialParameters.source}/${trialParameters.res}/"]})
    assert len(warmed(exp)) == 9


def test_a_tuned_worker_count_takes_its_largest_value() -> None:
    exp = experiment({"workers": ["1", "3"]}, {"args": ["--data", "s3://corpora/books/"]},
                     worker_replicas="${trialParameters.workers}")
    assert warmed(exp) == [("s3://corpora/books/", 8)]  # 2 trials x (1 master + 3 workers)
