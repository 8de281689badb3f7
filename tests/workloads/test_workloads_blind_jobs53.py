"""Blind job round 53 (dataset locations assembled across objects, as platform teams template
training work): a ``$(VAR)`` the pod takes from a Secret (or a ConfigMap not given) was dropped
without a word; a root env var built on with a value the script picks at run time
(``DS=$(date +%F)``, ``--export "${MODEL_ROOT}/daily/${DS}/"``) was warmed whole, the folder
the job writes with it; a ``configMapKeyRef`` to a key its ConfigMap lacks (the container never
starts) and an env value using a var set only below it (left unexpanded) were not said."""

from __future__ import annotations

import copy
from typing import Any

from prefetchd import workloads
from prefetchd.workloads._library import Library


def _job(container: dict[str, Any]) -> dict[str, Any]:
    c = {"name": "c", "image": "ghcr.io/acme/train:1.0", **container}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [c]}}}}


def _read(job: dict[str, Any], *objects: dict[str, Any]) -> workloads.UpcomingWork:
    return workloads.read(copy.deepcopy(job), Library(list(objects)))


def _refs(work: workloads.UpcomingWork) -> list[tuple[str | None, str | None, str]]:
    return [(r.uri, r.pattern, r.origin) for g in work.groups for r in g.datasets]


def _notes(work: workloads.UpcomingWork) -> list[str]:
    return [n for g in work.groups for n in g.notes]


SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "run", "namespace": "ns"},
          "stringData": {"BASE_MODEL_URI": "s3://models/base/llama/"}}


def test_a_var_from_a_secret_is_a_run_time_read() -> None:
    job = _job({"envFrom": [{"secretRef": {"name": "run"}}],
                "args": ["--model=$(BASE_MODEL_URI)", "--train=s3://corpora/train/"]})
    assert _refs(_read(job, SECRET)) == [
        (None, "--model=$(BASE_MODEL_URI)", "env BASE_MODEL_URI (secret run/BASE_MODEL_URI)"),
        ("s3://corpora/train/", None, "arg")]
    job = _job({"env": [{"name": "BASE_MODEL_URI", "valueFrom": {"secretKeyRef": {
        "name": "run", "key": "base"}}}], "args": ["--model", "$(BASE_MODEL_URI)"]})
    assert _refs(_read(job)) == [
        (None, "$(BASE_MODEL_URI)", "env BASE_MODEL_URI (secret run/base)")]


def test_a_var_of_a_configmap_given_is_its_value_and_one_not_given_the_pods() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "paths", "namespace": "ns"},
          "data": {"BASE_MODEL_URI": "s3://models/base/llama/"}}
    job = _job({"envFrom": [{"configMapRef": {"name": "paths"}}],
                "args": ["--model=$(BASE_MODEL_URI)", "--vocab=$(VOCAB_URI)"]})
    assert _refs(_read(job, cm)) == [("s3://models/base/llama/", None, "arg")]
    assert _refs(_read(job)) == [
        (None, "--model=$(BASE_MODEL_URI)", "env BASE_MODEL_URI (configmap paths/BASE_MODEL_URI)"),
        (None, "--vocab=$(VOCAB_URI)", "env VOCAB_URI (configmap paths/VOCAB_URI)")]


def test_a_root_built_on_with_a_value_the_script_picks_is_no_read_of_its_own() -> None:
    job = _job({"env": [{"name": "MODEL_ROOT", "value": "s3://ctr-models/deepfm"}],
                "command": ["/bin/sh", "-c"],
                "args": ['DS=$(date -u +%F)\npython -m ctr.train'
                         ' --warm-start "${MODEL_ROOT}/latest/"'
                         ' --export "${MODEL_ROOT}/daily/${DS}/"\n']})
    assert _refs(_read(job)) == [("s3://ctr-models/deepfm/latest/", None, "arg")]
    # a loop's variable takes every value in turn: the root holds them all
    job = _job({"env": [{"name": "SHARD_PREFIX", "value": "s3://shards/cc12m/"}],
                "command": ["/bin/sh", "-c"],
                "args": ['for i in 0 1 2 3; do aws s3 cp "${SHARD_PREFIX}part-${i}.tar" /data/;'
                         ' done\n']})
    assert ("s3://shards/cc12m/", None, "env SHARD_PREFIX") in _refs(_read(job))


def test_a_key_its_configmap_lacks_and_a_var_set_below_are_said() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "paths", "namespace": "ns"},
          "data": {"TRAIN_URI": "s3://b/train/"}}
    ref = {"configMapKeyRef": {"name": "paths", "key": "TRAIN_DATA_URI"}}
    job = _job({"env": [{"name": "TRAIN_DATA_URI", "valueFrom": ref}],
                "args": ["--train=$(TRAIN_DATA_URI)"]})
    assert _notes(_read(job, cm)) == [
        "container c: env TRAIN_DATA_URI: ConfigMap paths has no key TRAIN_DATA_URI: the "
        "kubelet does not start the container (CreateContainerConfigError) until it has"]
    ref["configMapKeyRef"]["optional"] = True  # (then it starts, without the var)
    assert _notes(_read(job, cm)) == []
    job = _job({"env": [{"name": "EVAL_SET_URI", "value": "$(EVAL_BUCKET)/mmlu-pro/v1.1/"},
                        {"name": "EVAL_BUCKET", "value": "s3://evals"}],
                "args": ["--data=$(EVAL_SET_URI)"]})
    work = _read(job)
    assert _refs(work) == []
    assert _notes(work) == [
        "container c: env EVAL_SET_URI: $(EVAL_BUCKET) is set only below it: the kubelet "
        "leaves it as written (an env value sees only the vars above it)"]
    job["spec"]["template"]["spec"]["containers"][0]["env"].reverse()  # as meant: read
    assert _refs(_read(job)) == [("s3://evals/mmlu-pro/v1.1/", None, "arg")]
    assert _notes(_read(job)) == []
