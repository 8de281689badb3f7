"""Blind round 59 (the Kubernetes features of steps: kfp-kubernetes' platform spec, Argo's env
``valueFrom`` and ``podSpecPatch``), each idiom as the SDKs compile it and the controllers run
it: a KFP v2 task's env from ``use_config_map_as_env`` / ``use_secret_as_env`` was not the
pod's (``aws s3 sync "$SRC_URI"`` read nothing); Python reading such a var
(``os.environ["MILLS_URI"]``) read nothing where the shell's ``"$MILLS_URI"`` was a run-time
read; a var read as it is and also built on (``+ ".tbi"``) lost the first read; a claim
mounted only through ``podSpecPatch`` was not listed; a script's ``"$X"`` from ``envFrom`` of a
ConfigMap not given read nothing. The run-time reads of such vars are labelled ``env`` (the
truth schema's origin for an env var), the ConfigMap or Secret in ``value_from``."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from prefetchd import pipeline

_ARGO = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
         "metadata": {"generateName": "r-", "namespace": "ml"}}


def _argo(template: dict[str, Any]) -> pipeline.Plan:
    doc = {**_ARGO, "spec": {"entrypoint": template["name"], "templates": [template]}}
    [plan] = pipeline.analyze_documents([copy.deepcopy(doc)], source="w.yaml")
    return plan


def _reads(plan: pipeline.Plan) -> list[tuple[str | None, str | None, str, str | None]]:
    return [(r.uri, r.pattern, r.origin, r.value_from) for s in plan.steps for r in s.reads]


def _script(source: str, env: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"name": "main", "script": {"image": "python:3.11", "command": ["python"],
                                       "env": env, "source": source, **more}}


CM_ENV = [{"name": "MILLS_URI", "valueFrom": {"configMapKeyRef": {
    "name": "genomics-known-sites", "key": "mills_indels_uri"}}},
          {"name": "CMMS_URL", "valueFrom": {"secretKeyRef": {"name": "cmms-api", "key": "url"}}}]


def test_python_reading_a_var_only_the_pod_has_is_a_run_time_read() -> None:
    plan = _argo(_script(
        "import os, requests, s3fs\n"
        "s3fs.S3FileSystem().get(os.environ['MILLS_URI'], '/tmp/mills.vcf.gz')\n"
        "requests.post(f\"{os.environ['CMMS_URL']}/api/v2/workorders\", json={})\n", CM_ENV))
    # (a var named for a service, CMMS_URL, names no data: as in the shell)
    assert _reads(plan) == [(None, "${MILLS_URI}", "env",
                             "configmap genomics-known-sites/mills_indels_uri")]


def test_a_var_read_as_it_is_and_built_on_is_read_both_ways() -> None:
    plan = _argo(_script(
        "import os, s3fs\nfs = s3fs.S3FileSystem()\n"
        "fs.get(os.environ['DBSNP_URI'], '/tmp/dbsnp.vcf.gz')\n"
        "fs.get(os.environ['DBSNP_URI'] + '.tbi', '/tmp/dbsnp.vcf.gz.tbi')\n",
        [{"name": "DBSNP_URI", "value": "s3://ref/dbsnp/b156/GRCh38.vcf.gz"}]))
    assert sorted(r[0] for r in _reads(plan)) == ["s3://ref/dbsnp/b156/GRCh38.vcf.gz",
                                                  "s3://ref/dbsnp/b156/GRCh38.vcf.gz.tbi"]


def test_a_scripts_var_from_env_from_a_configmap_not_given_is_a_run_time_read() -> None:
    step = {"name": "main", "container": {
        "image": "amazon/aws-cli:2.15.30", "command": ["sh", "-c"],
        "args": ['for f in a b; do echo "$f"; done; OUT=/tmp/q; '
                 'aws s3 cp "$QC_THRESHOLDS_URI" "$OUT/thresholds.yaml"'],
        "envFrom": [{"configMapRef": {"name": "onco500-qc-config"}}]}}
    assert _reads(_argo(step)) == [(None, "${QC_THRESHOLDS_URI}", "env",
                                    "configmap onco500-qc-config/QC_THRESHOLDS_URI")]
    del step["container"]["envFrom"]  # (no envFrom: nothing can set it)
    assert _reads(_argo(step)) == []


def test_a_claim_mounted_through_pod_spec_patch_is_listed() -> None:
    step = {"name": "main", "podSpecPatch": yaml.safe_dump({
        "volumes": [{"name": "scratch", "persistentVolumeClaim": {
            "claimName": "fraud-replay-scratch"}}],
        "containers": [{"name": "main", "volumeMounts": [
            {"name": "scratch", "mountPath": "/replay", "readOnly": True}]}]}),
        "container": {"image": "busybox:1.36", "command": ["sh", "-c"],
                      "args": ["md5sum /replay/day=2024-06-01/part-0.parquet"]}}
    [mount] = _argo(step).steps[0].pvc_mounts
    assert (mount.claim, mount.mount_path, mount.read_only) == ("fraud-replay-scratch",
                                                                "/replay", True)


def test_a_pod_spec_patch_with_a_tag_only_the_run_fills_still_adds_its_claim() -> None:
    """The workflow's uid in the patch's env is the run's; the claim beside it, a parameter
    with a default, is known now (the whole patch was skipped)."""
    step = {"name": "main", "inputs": {"parameters": [{"name": "claim", "value": "ref-data"}]},
            "podSpecPatch": (
                "containers:\n- name: main\n  env:\n  - {name: RUN, value: '{{workflow.uid}}'}\n"
                "  volumeMounts:\n  - {name: ref, mountPath: /ref, readOnly: true}\n"
                "volumes:\n- name: ref\n  persistentVolumeClaim:\n"
                "    claimName: '{{inputs.parameters.claim}}'\n"),
            "container": {"image": "busybox:1.36", "command": ["sh", "-c"],
                          "args": ["md5sum /ref/genome/hg38.fa"]}}
    [mount] = _argo(step).steps[0].pvc_mounts
    assert (mount.claim, mount.mount_path, mount.read_only) == ("ref-data", "/ref", True)


KFP_CM_ENV = """\
components:
  comp-sync-env:
    executorLabel: exec-sync-env
    inputDefinitions:
      parameters:
        dest: {parameterType: STRING}
deploymentSpec:
  executors:
    exec-sync-env:
      container:
        args: ['aws s3 sync "$SRC_URI" "$0"', "{{$.inputs.parameters['dest']}}"]
        command: [sh, -c]
        image: amazon/aws-cli:2.15.30
pipelineInfo: {name: repro-cm-env-sh}
root:
  dag:
    tasks:
      sync-env:
        cachingOptions: {enableCache: true}
        componentRef: {name: comp-sync-env}
        inputs:
          parameters:
            dest: {runtimeValue: {constant: /data}}
        taskInfo: {name: sync-env}
schemaVersion: 2.1.0
sdkVersion: kfp-2.17.3
---
platforms:
  kubernetes:
    deploymentSpec:
      executors:
        exec-sync-env:
          KIND:
          - NAME_KEY: locs
            keyToEnv:
            - {ITEM_KEY: src, envVar: SRC_URI}
            optional: false
"""


def test_a_kfp_tasks_env_from_a_configmap_or_secret_is_the_pods() -> None:
    for kind, name_key, item_key, source in (
            ("configMapAsEnv", "configMapName", "configMapKey", "configmap"),
            ("secretAsEnv", "secretName", "secretKey", "secret")):
        text = KFP_CM_ENV.replace("KIND", kind).replace("NAME_KEY", name_key).replace(
            "ITEM_KEY", item_key)
        [plan] = pipeline.analyze_documents(list(yaml.safe_load_all(text)), source="p.yaml")
        assert _reads(plan) == [(None, "${SRC_URI}", "env", f"{source} locs/src")], kind
