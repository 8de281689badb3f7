"""Blind round 73 (real pipelines: MinIO-backed Kubeflow, OpenShift AI, Seldon batch, Argo
data templates): the MinIO Python SDK (``Minio(...).fget_object(bucket, key, file)``) was not
followed, so its bucket was read whole, even in a step that only uploads; credentials, a
region and a bucket a Secret puts in env vars, passed to ``boto3.session.Session(...)``, were
run-time reads, and the upload to that bucket no write; a listing (``aws s3 ls``, a ``data``
template's source) was labelled mixed evidence."""

from __future__ import annotations

import copy
from typing import Any

from prefetchd import cli, pipeline

_STR = {"parameterType": "STRING"}


def _lightweight(fn: str, source: str) -> dict[str, Any]:
    return {"container": {"image": "python:3.11", "command": ["python3", "-c", source],
                          "args": ["--executor_input", "{{$}}", "--function_to_execute", fn]}}


def _kfp(tasks: dict[str, Any], components: dict[str, Any], executors: dict[str, Any],
         root_inputs: dict[str, Any], platform: dict[str, Any] | None = None,
         params: dict[str, str] | None = None) -> pipeline.Plan:
    doc = {"pipelineInfo": {"name": "p"}, "schemaVersion": "2.1.0", "sdkVersion": "kfp-2.17.3",
           "components": components, "deploymentSpec": {"executors": executors},
           "root": {"dag": {"tasks": tasks}, "inputDefinitions": {"parameters": root_inputs}}}
    docs: list[dict[str, Any]] = [doc]
    if platform is not None:
        docs.append({"platforms": {"kubernetes": {"deploymentSpec": {"executors": platform}}}})
    [plan] = pipeline.analyze_documents(copy.deepcopy(docs), params=params or {},
                                        source="p.yaml")
    return plan


def _task(comp: str, params: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    return {"componentRef": {"name": comp}, "taskInfo": {"name": comp[5:]},
            "inputs": {"parameters": params or {}}, **more}


def _bound(*names: str) -> dict[str, Any]:
    return {n: {"componentInputParameter": n} for n in names}


def _comp(name: str, *inputs: str, outputs: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"executorLabel": "exec-" + name,
                           "inputDefinitions": {"parameters": {n: _STR for n in inputs}}}
    if outputs:
        out["outputDefinitions"] = {"parameters": {n: _STR for n in outputs}}
    return out


_DOWNLOAD = """\
def dataloader(minio_endpoint: str, bucket_name: str, object_name: str, out: str):
    from minio import Minio
    client = Minio(minio_endpoint, access_key="a", secret_key="b", secure=False)
    client.fget_object(bucket_name, object_name, out)
"""
_UPLOAD = """\
def publish(minio_endpoint: str, bucket_name: str, dest_object: str, version: str):
    from minio import Minio
    client = Minio(minio_endpoint, access_key="a", secret_key="b", secure=False)
    client.fput_object(bucket_name, dest_object.replace(".csv", "_v1.csv"), "/tmp/x")
    return dest_object
"""
_READ_BACK = """\
def reload(minio_endpoint: str, bucket_name: str, object_name: str):
    from minio import Minio
    client = Minio(minio_endpoint, access_key="a", secret_key="b", secure=False)
    resp = client.get_object(bucket_name, object_name)
    resp.read()
"""


def _minio(defaults: bool, params: dict[str, str] | None = None) -> pipeline.Plan:
    """dataloader fget_object(bucket, key); publish fput_object(bucket, key'); reload
    get_object(bucket, publish's returned key)."""
    values = {"minio_endpoint": "minio.minio.svc.cluster.local:9000", "bucket_name": "raw",
              "object_name": "home-credit/application_train.csv",
              "dest_object": "processed/train.csv", "version": "v1"}
    root = {n: {**_STR, "defaultValue": v} if defaults or n == "version" else _STR
            for n, v in values.items()}
    tasks = {
        "dataloader": _task("comp-dataloader", _bound("minio_endpoint", "bucket_name",
                                                      "object_name")),
        "publish": _task("comp-publish", _bound("minio_endpoint", "bucket_name", "dest_object",
                                                "version"),
                         dependentTasks=["dataloader"]),
        "reload": _task("comp-reload", {
            **_bound("minio_endpoint", "bucket_name"),
            "object_name": {"taskOutputParameter": {"producerTask": "publish",
                                                    "outputParameterKey": "Output"}}},
            dependentTasks=["publish"]),
    }
    comps = {"comp-dataloader": _comp("dataloader", "minio_endpoint", "bucket_name",
                                      "object_name"),
             "comp-publish": _comp("publish", "minio_endpoint", "bucket_name", "dest_object",
                                   "version", outputs=("Output",)),
             "comp-reload": _comp("reload", "minio_endpoint", "bucket_name", "object_name")}
    execs = {"exec-dataloader": _lightweight("dataloader", _DOWNLOAD),
             "exec-publish": _lightweight("publish", _UPLOAD),
             "exec-reload": _lightweight("reload", _READ_BACK)}
    return _kfp(tasks, comps, execs, root, params=params)


def _rw(plan: pipeline.Plan) -> dict[str, tuple[list[Any], list[Any]]]:
    return {s.id: ([(r.uri, r.origin, r.pattern) for r in s.reads],
                   [(w.uri, w.origin, w.pattern) for w in s.writes]) for s in plan.steps}


def test_minio_sdk_fget_and_fput_with_defaults() -> None:
    """D1: Minio.fget_object(bucket, key, file) reads s3://bucket/key; fput_object writes it."""
    got = _rw(_minio(defaults=True))
    assert got["dataloader"] == (
        [("s3://raw/home-credit/application_train.csv", "pipeline-parameter", None)], [])
    assert got["publish"] == ([], [("s3://raw/processed/train_v1.csv", "pipeline-parameter",
                                    None)])
    # (another step's output names the object: the bucket known before the run written out)
    assert got["reload"][0] == [(None, "task-output", "s3://raw/{{object_name}}")]
    assert [d[0] for d in _minio(defaults=True).datasets()] == [
        "s3://raw/home-credit/application_train.csv"]


def test_minio_sdk_with_required_parameters_is_one_run_time_read_of_the_object() -> None:
    """D1: with the bucket and key required parameters, one run-time read of the object (not
    of the bucket alone), none in the step that only uploads, and the read of a key another
    step returns is that step's (task-output)."""
    got = _rw(_minio(defaults=False))
    assert got["dataloader"] == (
        [(None, "required-parameter", "s3://{{bucket_name}}/{{object_name}}")], [])
    assert got["publish"][0] == []
    assert got["reload"][0] == [(None, "task-output", "s3://{{bucket_name}}/{{object_name}}")]


def test_minio_sdk_with_required_parameters_given() -> None:
    """D1: --param bucket_name=... --param object_name=... names the object to warm."""
    plan = _minio(defaults=False, params={
        "minio_endpoint": "minio:9000", "bucket_name": "raw",
        "object_name": "home-credit/application_test.csv", "dest_object": "processed/t.csv"})
    assert [d[0] for d in plan.datasets()] == ["s3://raw/home-credit/application_test.csv"]
    got = _rw(plan)
    assert got["publish"] == ([], [("s3://raw/processed/t_v1.csv", "pipeline-parameter", None)])


def _one_step(source: str, fn: str, inputs: dict[str, str]) -> pipeline.Plan:
    root = {n: {**_STR, "defaultValue": v} for n, v in inputs.items()}
    return _kfp({fn: _task("comp-" + fn, _bound(*inputs))}, {"comp-" + fn: _comp(fn, *inputs)},
                {"exec-" + fn: _lightweight(fn, source)}, root)


def test_minio_sdk_list_and_copy() -> None:
    """D1: list_objects(bucket, prefix=...) is a listing (no read); copy_object(dst_bucket,
    dst_key, CopySource(src_bucket, src_key)) reads the source and writes the destination."""
    source = """\
def promote(bucket: str, prefix: str, src_key: str, dst_key: str):
    from minio import Minio
    from minio.commonconfig import CopySource
    client = Minio("minio:9000", access_key="a", secret_key="b")
    for o in client.list_objects(bucket, prefix=prefix, recursive=True):
        print(o.object_name)
    client.copy_object("archive", dst_key, CopySource(bucket, src_key))
"""
    plan = _one_step(source, "promote", {"bucket": "raw", "prefix": "daily/",
                                         "src_key": "daily/x.csv", "dst_key": "kept/x.csv"})
    assert _rw(plan)["promote"] == ([("s3://raw/daily/x.csv", "pipeline-parameter", None)],
                                    [("s3://archive/kept/x.csv", "pipeline-parameter", None)])


_SECRET_UPLOAD = """\
def upload_model(input_model_path: str):
    import os
    import boto3
    import botocore

    aws_access_key_id = os.environ.get('AWS_ACCESS_KEY_ID')
    aws_secret_access_key = os.environ.get('AWS_SECRET_ACCESS_KEY')
    endpoint_url = os.environ.get('AWS_S3_ENDPOINT')
    region_name = os.environ.get('AWS_DEFAULT_REGION')
    bucket_name = os.environ.get('AWS_S3_BUCKET')
    session = boto3.session.Session(aws_access_key_id=aws_access_key_id,
                                    aws_secret_access_key=aws_secret_access_key)
    s3_resource = session.resource('s3', config=botocore.client.Config(signature_version='s3v4'),
                                   endpoint_url=endpoint_url, region_name=region_name)
    bucket = s3_resource.Bucket(bucket_name)
    bucket.upload_file(input_model_path, "models/fraud/1/model.onnx")
"""


def test_secret_credentials_are_no_reads_and_the_upload_is_a_run_time_write() -> None:
    """D2: AWS_* env vars from a Secret passed to boto3's Session/resource are credentials,
    a region, an endpoint: no read; the bucket is written (upload_file), at run time."""
    keys = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT",
            "AWS_DEFAULT_REGION", "AWS_S3_BUCKET"]
    platform = {"exec-upload-model": {"secretAsEnv": [{
        "secretName": "my-storage", "keyToEnv": [{"envVar": k, "secretKey": k} for k in keys]}]}}
    plan = _kfp({"upload-model": _task("comp-upload-model", {
        "input_model_path": {"runtimeValue": {"constant": "/tmp/model.onnx"}}})},
        {"comp-upload-model": _comp("upload-model", "input_model_path")},
        {"exec-upload-model": _lightweight("upload_model", _SECRET_UPLOAD)}, {}, platform)
    [step] = plan.steps
    assert step.reads == [] and step.unknown == []
    assert [(w.uri, w.origin, w.pattern, w.env) for w in step.writes] == [
        (None, "env", "s3://{{env:AWS_S3_BUCKET}}/models/fraud/1/model.onnx", "AWS_S3_BUCKET")]


def _argo(template: dict[str, Any]) -> pipeline.Plan:
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
           "metadata": {"generateName": "ls-"},
           "spec": {"entrypoint": template["name"], "templates": [template]}}
    [plan] = pipeline.analyze_documents([doc], source="w.yaml")
    return plan


def test_a_listing_is_shown_as_a_listing() -> None:
    """D4: ``aws s3 ls`` and a data template's source list a location (unknown, not warmed),
    shown as listed, not as mixed evidence; a location read and written stays mixed."""
    ls = _argo({"name": "ls", "container": {"image": "amazon/aws-cli", "command": [
        "aws", "s3", "ls", "s3://my-bucket/logs/"]}})
    data = _argo({"name": "list", "data": {
        "source": {"artifactPaths": {"name": "b", "s3": {"bucket": "my-bucket"}}},
        "transformation": [{"expression": 'filter(data, {# endsWith "main.log"})'}]}})
    both = _argo({"name": "both", "container": {"image": "x", "command": [
        "sh", "-c", "aws s3 cp s3://b/m.json /tmp/m && aws s3 cp /tmp/m s3://b/m.json"]}})
    for plan, uri in ((ls, "s3://my-bucket/logs/"), (data, "s3://my-bucket/")):
        [step] = plan.steps
        assert [(u.uri, u.listed) for u in step.unknown] == [(uri, True)]
        text = cli.render_plan(plan)
        assert f"{uri} " in text and "(listed only: not warmed)" in text
        assert "mixed evidence" not in text and plan.datasets() == []
        assert step.to_json()["unknown"][0]["listed"] is True
    [step] = both.steps
    assert [(u.uri, u.listed) for u in step.unknown] == [("s3://b/m.json", None)]
    assert "(mixed evidence: not warmed)" in cli.render_plan(both)
