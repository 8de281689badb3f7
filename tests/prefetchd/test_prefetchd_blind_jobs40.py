"""Blind job round 40 (Argo Workflows as live objects, dumped with ``kubectl get -o yaml``):
what ``prefetchd plan`` got wrong about what a workflow is shipped with.

* D1: a file holding a ConfigMap and a Workflow (``kubectl get cm,workflowtemplate,workflow``)
  exited 2 with "file is a 'ConfigMap' (v1), not a pipeline", and so did the ConfigMap given
  as a FILE of its own: the whole plan was lost.
* D2: ``--model $(MODEL_URI)`` with MODEL_URI from ``valueFrom.configMapKeyRef`` was dropped
  without a word (no read, nothing run-time), while the same ``$(VAR)`` of a ``value:`` env
  var was read.
* D7: ``subPath: clips/{{inputs.parameters.month}}`` under ``withItems`` warmed the literal
  ``.../clips/{{inputs.parameters.month}}/`` and missed one folder per item.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from prefetchd import cli, pipeline

CONFIGMAP = textwrap.dedent("""\
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: claims-triage-config
      namespace: claims-ml
      uid: 7a1c0b7e-3f55-4c1e-9d1b-2b6f0c9e8a10
      resourceVersion: "88123410"
      creationTimestamp: "2026-09-14T08:12:44Z"
    data:
      model_uri: s3://acme-nlp-models/claims-triage/prod/v14/
      reference_root: s3://acme-genomics-reference
      vep_release: "110"
      s3_endpoint: https://s3.us-east-1.amazonaws.com
    """)

SECRET = textwrap.dedent("""\
    apiVersion: v1
    kind: Secret
    metadata:
      name: claims-aws
      namespace: claims-ml
    type: Opaque
    data:
      AWS_SECRET_ACCESS_KEY: c2VrcmV0LWtleS1kby1ub3QtcHJpbnQ=
    stringData:
      bucket: s3://never-printed-bucket
    """)


def _workflow(container: str, extra_templates: str = "", tasks: str = "") -> str:
    """A Workflow as ``kubectl get workflow -o yaml`` shows one: template ``classify`` runs
    *container* (YAML, indented for a template's ``container:``)."""
    body = textwrap.indent(textwrap.dedent(container), " " * 6)
    return textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata:
          name: claims-triage-eod-x7k2p
          generateName: claims-triage-eod-
          namespace: claims-ml
          uid: c3d9a4e1-2f6b-4b7a-8e0d-91a5f3b6c7d2
          resourceVersion: "90441872"
          labels:
            workflows.argoproj.io/creator: system-serviceaccount-claims-ci
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - name: classify
                template: classify
        """) + tasks + "  - name: classify\n    container:\n" + body + extra_templates


CLASSIFY = """\
image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/claims/triage:3.2.0
command: [python, -m, triage.classify]
args: [--model, $(MODEL_URI), --roster, s3://acme-claims-curated/adjuster-roster/current/roster.csv]
env:
- name: MODEL_URI
  valueFrom:
    configMapKeyRef: {name: claims-triage-config, key: model_uri}
"""


def _plan(capsys: pytest.CaptureFixture[str], *files: Path, json_out: bool = False,
          ) -> tuple[int, str, str]:
    rc = cli.main(["plan", *map(str, files), *(["--json"] if json_out else [])])
    out, err = capsys.readouterr()
    return rc, out, err


def test_jobs_40_a_configmap_with_a_workflow_is_what_its_steps_take(tmp_path, capsys) -> None:
    """D1: the ConfigMap in the Workflow's file, or in a file of its own, is read with it
    (MODEL_URI resolved, as a ``value:`` would be); a Secret beside them is taken and its data
    never shown; a file of only a ConfigMap is still refused (nothing to plan)."""
    both = tmp_path / "cm-and-workflow.yaml"
    both.write_text(CONFIGMAP + "---\n" + SECRET + "---\n" + _workflow(CLASSIFY))
    rc, out, err = _plan(capsys, both)
    assert rc == 0 and err == ""
    assert "reads  s3://acme-nlp-models/claims-triage/prod/v14/ (env)" in out
    assert "  s3://acme-nlp-models/claims-triage/prod/v14/  stage 0  read by classify" in out
    rc, js, _ = _plan(capsys, both, json_out=True)
    for text in (out, js):
        assert "c2VrcmV0" not in text and "never-printed" not in text  # a Secret's data
    assert rc == 0 and {d["uri"] for d in json.loads(js)["datasets"]} == {
        "s3://acme-nlp-models/claims-triage/prod/v14/",
        "s3://acme-claims-curated/adjuster-roster/current/roster.csv"}

    cm, wf = tmp_path / "cm.yaml", tmp_path / "wf.yaml"
    cm.write_text(CONFIGMAP)
    wf.write_text(_workflow(CLASSIFY))
    for files in ((cm, wf), (wf, cm)):
        rc, out2, _ = _plan(capsys, *files)
        assert rc == 0 and out2 == out

    rc, out, err = _plan(capsys, cm)  # nothing to plan: refused, as before, naming it
    assert rc == cli.EXIT_BAD_INPUT and out == "" and err.count("\n") == 1
    assert f"{cm}: file is a 'ConfigMap' (v1), not a pipeline: nothing to plan" in err
    secret = tmp_path / "secret.yaml"
    secret.write_text(SECRET)
    rc, out, err = _plan(capsys, cm, secret)
    assert rc == cli.EXIT_BAD_INPUT and "not a pipeline" in err and "c2VrcmV0" not in err

    # a ConfigMap the API server would refuse is refused as training-job files refuse it
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONFIGMAP.replace('vep_release: "110"', "vep_release: 110") + "---\n"
                   + _workflow(CLASSIFY))
    rc, _, err = _plan(capsys, bad)
    assert rc == cli.EXIT_BAD_INPUT
    assert "ConfigMap claims-triage-config: data[vep_release]: expected a string, got int" in err


def test_jobs_40_what_steps_take_from_a_given_configmap_is_known(tmp_path) -> None:
    """D1/D2 with the ConfigMap given: ``$(REF_ROOT)/...`` built on a configMapKeyRef var,
    ``envFrom`` with a ``prefix``, and an input parameter's own ``valueFrom.configMapKeyRef``
    (the VEP cache's key) resolve from its data, through the path a ``value:`` takes."""
    align = """\
        image: gatk:4.6.0.0
        command: [python3, /opt/pipeline/align.py]
        args:
        - --index-prefix
        - "$(REF_ROOT)/GRCh38/v2.1/bwa-mem2/"
        - --model
        - $(CFG_model_uri)
        - --output-bam
        - "$(REF_ROOT)/scratch/HG002.bam"
        env:
        - name: REF_ROOT
          valueFrom:
            configMapKeyRef:
              name: claims-triage-config
              key: reference_root
        envFrom:
        - prefix: CFG_
          configMapRef:
            name: claims-triage-config
        """
    vep = textwrap.indent(textwrap.dedent("""\
          - name: vep
            inputs:
              parameters:
              - name: vep-release
                valueFrom:
                  configMapKeyRef:
                    name: claims-triage-config
                    key: vep_release
              artifacts:
              - name: vep-cache
                path: /data/vep
                s3:
                  endpoint: s3.amazonaws.com
                  bucket: acme-genomics-reference
                  key: "vep-cache/{{inputs.parameters.vep-release}}/homo_sapiens_merged"
            container:
              image: ensemblorg/ensembl-vep:release_110.1
              command: [vep, --dir_cache, /data/vep]
        """), "  ")
    tasks = "      - name: vep\n        template: vep\n"
    f = tmp_path / "wf.yaml"
    f.write_text(CONFIGMAP + "---\n" + _workflow(align, vep, tasks))
    [plan] = pipeline.analyze_all([str(f)])
    step = plan.step("classify")
    # (the map's keys serve $(VAR): CFG_reference_root, named nowhere, is no read of its own)
    assert {r.uri for r in step.reads} == {"s3://acme-genomics-reference/GRCh38/v2.1/bwa-mem2/",
                                           "s3://acme-nlp-models/claims-triage/prod/v14/"}
    assert [w.uri for w in step.writes] == ["s3://acme-genomics-reference/scratch/HG002.bam"]
    assert [(r.uri, r.static) for r in plan.step("vep").reads] == [
        ("s3://acme-genomics-reference/vep-cache/110/homo_sapiens_merged", True)]


def test_jobs_40_a_value_only_the_pod_has_is_a_run_time_read(tmp_path) -> None:
    """D2 without the ConfigMap: the location built on it is a run-time read naming the
    ConfigMap and key (``uri: null``, its ``pattern``), never dropped: ``$(VAR)`` alone, under
    a path, in a script, from ``envFrom`` with a ``prefix``, from a Secret (its name and key
    only). A var that names a service or no place (``$(S3_ENDPOINT)``, ``$(EPOCHS)``) is no
    location, and one that is written (``--output $(OUT_URI)``) is no read."""
    container = """\
        image: triage:3.2.0
        command: [bash, -c]
        args:
        - |
          set -euo pipefail
          aws s3 cp "$(SCORES_URI)" /tmp/scores.parquet
          python -m triage.classify --model $(MODEL_URI) --calendar $(TRIAGE_ROOT)/calendar.csv \\
            --bucket-root s3://$(LAKE_BUCKET)/intake/ --epochs $(EPOCHS) \\
            --conf spark.hadoop.fs.s3a.endpoint=$(S3_ENDPOINT) --output $(OUT_URI)
          curl -fsS -X POST "$(SERVING_URL)/v1/models/triage:reload"
        env:
        - name: MODEL_URI
          valueFrom:
            configMapKeyRef: {name: claims-triage-config, key: model_uri}
        - name: SCORES_URI
          valueFrom:
            configMapKeyRef: {name: claims-triage-config, key: scores_uri}
        - name: LAKE_BUCKET
          valueFrom:
            secretKeyRef: {name: claims-aws, key: bucket}
        - {name: EPOCHS, valueFrom: {configMapKeyRef: {name: claims-triage-config, key: epochs}}}
        - {name: S3_ENDPOINT, valueFrom: {configMapKeyRef: {name: claims-triage-config, key: s3}}}
        - {name: SERVING_URL, valueFrom: {configMapKeyRef: {name: serving, key: url}}}
        - {name: OUT_URI, valueFrom: {configMapKeyRef: {name: claims-triage-config, key: out}}}
        envFrom:
        - prefix: TRIAGE_
          configMapRef: {name: triage-paths}
        """
    # the blind tester's repro, args given as the kubelet takes them: shown, not warmed
    f = tmp_path / "wf.yaml"
    f.write_text(_workflow(CLASSIFY))
    out = cli.render_plan(pipeline.analyze([str(f)]))
    assert "reads  (runtime: $(MODEL_URI); env configmap claims-triage-config/model_uri)" in out
    assert "datasets to warm (plan order):\n  s3://acme-claims-curated/adjuster-roster/" in out

    f.write_text(SECRET + "---\n" + _workflow(container))
    [plan] = pipeline.analyze_all([str(f)])
    step = plan.step("classify")
    got = sorted((r.pattern, r.origin, r.value_from, r.env) for r in step.reads)
    assert all(r.uri is None and not r.static for r in step.reads)
    assert got == [
        ("${MODEL_URI}", "env", "configmap claims-triage-config/model_uri", "MODEL_URI"),
        ("${SCORES_URI}", "env", "configmap claims-triage-config/scores_uri", "SCORES_URI"),
        ("${TRIAGE_ROOT}/calendar.csv", "env", "configmap triage-paths/ROOT", "TRIAGE_ROOT"),
        ("s3://${LAKE_BUCKET}/intake/", "env", "secret claims-aws/bucket", "LAKE_BUCKET")]
    assert [(w.pattern, w.origin) for w in step.writes] == [("${OUT_URI}", "env")]
    assert plan.datasets() == []
    assert "c2VrcmV0" not in json.dumps(plan.to_json()) + cli.render_plan(plan)


PV_AND_CLAIM = textwrap.dedent("""\
    apiVersion: v1
    kind: PersistentVolume
    metadata:
      name: video-lake-curated-v3
    spec:
      capacity: {storage: 40Ti}
      accessModes: [ReadOnlyMany]
      storageClassName: ""
      claimRef: {namespace: recsys, name: video-corpus}
      csi:
        driver: csi.fusecache.io
        volumeHandle: video-lake-curated-v3
        volumeAttributes: {bucket: acme-video-lake, prefix: curated/v3}
    ---
    apiVersion: v1
    kind: PersistentVolumeClaim
    metadata:
      name: video-corpus
      namespace: recsys
    spec:
      accessModes: [ReadOnlyMany]
      storageClassName: ""
      volumeName: video-lake-curated-v3
      resources: {requests: {storage: 40Ti}}
    """)


def _looped_mount(sub_path: str) -> str:
    return PV_AND_CLAIM + "---\n" + textwrap.dedent("""\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata:
          name: reco-candidate-gen-2n8vd
          namespace: recsys
        spec:
          entrypoint: main
          volumes:
          - name: corpus
            persistentVolumeClaim: {claimName: video-corpus, readOnly: true}
          templates:
          - name: main
            dag:
              tasks:
              - name: clip-embeddings
                template: clip-embed
                withItems: ["2026-11", "2026-12"]
                arguments:
                  parameters: [{name: month, value: "{{item}}"}]
          - name: clip-embed
            inputs:
              parameters: [{name: month}]
            container:
              image: ghcr.io/acme-reco/clip:2.1
              args: [--clips, /data/clips]
              volumeMounts:
              - {name: corpus, mountPath: /data/clips, subPath: "SUB", readOnly: true}
        """).replace("SUB", sub_path)


def test_jobs_40_a_loop_item_in_a_mounts_sub_path(tmp_path, capsys) -> None:
    """D7: one mount, and one read, per item's ``subPath``, as each pod mounts it; a
    ``subPath`` only the run knows is a run-time read, never a location to warm."""
    f = tmp_path / "wf.yaml"
    f.write_text(_looped_mount("clips/{{inputs.parameters.month}}"))
    rc, out, _ = _plan(capsys, f)
    assert rc == 0 and "{{" not in out
    [plan] = pipeline.analyze_all([str(f)])
    step = plan.step("clip-embeddings")
    assert [m.sub_path for m in step.pvc_mounts] == ["clips/2026-11", "clips/2026-12"]
    assert [u for u, _, _ in plan.datasets()] == [
        "s3://acme-video-lake/curated/v3/clips/2026-11/",
        "s3://acme-video-lake/curated/v3/clips/2026-12/"]

    f.write_text(_looped_mount("runs/{{workflow.uid}}"))
    [plan] = pipeline.analyze_all([str(f)])
    step = plan.step("clip-embeddings")
    assert plan.datasets() == [] and [m.sub_path for m in step.pvc_mounts] == [
        "runs/{{workflow.uid}}"]
    assert [(r.uri, r.pattern) for r in step.reads] == [
        (None, "s3://acme-video-lake/curated/v3/runs/{{workflow.uid}}/")]
