"""Blind round 64 (how datasets are named across S3-compatible stores): an S3 key with a blank
was cut at the blank (one argv element, a parameter's value, a quoted shell word, a bucket and
key joined in Python); Hadoop's ``s3n://`` was an unsupported scheme where ``s3a://`` is the
same object; ``urljoin(base, key)`` of an S3 endpoint's address named nothing, and the
address of a bucket alone (``https://b.s3.us-east-1.amazonaws.com/``) was a read of the whole
bucket."""

from __future__ import annotations

import copy
from typing import Any

from prefetchd import pipeline

_ARGO = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
         "metadata": {"generateName": "r-", "namespace": "ml"}}
KEY = "s3://speech-data/enrollment/Plant A/roster.csv"


def _argo(*templates: dict[str, Any], params: list[dict[str, str]] | None = None
          ) -> pipeline.Plan:
    steps = {"name": "main", "steps": [[{"name": t["name"], "template": t["name"]}
                                        for t in templates]]}
    doc = {**_ARGO, "spec": {"entrypoint": "main", "templates": [steps, *templates],
                             "arguments": {"parameters": params or []}}}
    [plan] = pipeline.analyze_documents([copy.deepcopy(doc)], source="w.yaml")
    return plan


def _static(plan: pipeline.Plan) -> dict[str, list[str]]:
    return {s.id: [r.uri for r in s.reads if r.uri] for s in plan.steps if s.kind != "dag"}


def _cp(name: str, *args: str, command: tuple[str, ...] = ("aws", "s3", "cp")) -> dict[str, Any]:
    return {"name": name, "container": {"image": "amazon/aws-cli:2.15.30",
                                        "command": list(command), "args": list(args)}}


def test_a_key_with_a_blank_is_named_whole() -> None:
    plan = _argo(_cp("argv", KEY, "/tmp/r.csv"),
                 _cp("param", "{{workflow.parameters.uri}}", "/tmp/r.csv"),
                 _cp("quoted", f'aws s3 cp "{KEY}" /tmp/r.csv', command=("sh", "-c")),
                 params=[{"name": "uri", "value": KEY}])
    assert _static(plan) == {"argv": [KEY], "param": [KEY], "quoted": [KEY]}


def test_a_bucket_and_a_key_with_blanks_joined_in_python() -> None:
    source = ("import boto3\n"
              "bucket, key = '{{inputs.parameters.bucket}}', '{{inputs.parameters.key}}'\n"
              "boto3.client('s3').download_file(bucket, key, '/tmp/x')\n")
    plan = _argo({"name": "fetch", "inputs": {"parameters": [
        {"name": "bucket", "value": "eo-labels"},
        {"name": "key", "value": "classmaps/ESA WorldCover v200.json"}]},
        "script": {"image": "python:3.11", "command": ["python"], "source": source}})
    assert _static(plan) == {"fetch": ["s3://eo-labels/classmaps/ESA WorldCover v200.json"]}


def test_more_words_in_one_element_are_not_one_key() -> None:
    plan = _argo(_cp("two", "s3://b/x.csv s3://b/y.csv", command=("python", "cmp.py")),
                 _cp("flag", "s3://b/dir/ --recursive", command=("echo",)))
    reads = _static(plan)
    assert "s3://b/x.csv" in reads["two"] and not any(" " in u for u in reads["two"])
    assert reads["flag"] == ["s3://b/dir/"]


def test_s3n_is_the_same_object_as_s3a() -> None:
    spark = ("/opt/spark/bin/spark-submit",)
    plan = _argo(_cp("s3n", "local:///opt/jobs/c.py", "--catalog", "s3n://legacy/items/dt=1/",
                     command=spark),
                 _cp("s3a", "local:///opt/jobs/c.py", "--catalog", "s3a://legacy/items/dt=1/",
                     command=spark))
    assert _static(plan) == {"s3n": ["s3://legacy/items/dt=1/"], "s3a": ["s3://legacy/items/dt=1/"]}


def _urljoin(name: str, base: str) -> dict[str, Any]:
    source = ("from urllib.parse import urljoin\nimport requests\n"
              "base, key = '{{inputs.parameters.base}}', '{{inputs.parameters.key}}'\n"
              "requests.get(urljoin(base, key)).raise_for_status()\n")
    return {"name": name, "inputs": {"parameters": [
        {"name": "base", "value": base}, {"name": "key", "value": "item2vec/v5/emb.npy"}]},
        "script": {"image": "python:3.11", "command": ["python"], "source": source}}


def test_urljoin_of_an_s3_endpoint_and_a_key() -> None:
    plan = _argo(_urljoin("minio", "http://minio.minio.svc:9000/pretrained/"),
                 _urljoin("aws", "https://pretrained.s3.us-east-1.amazonaws.com/"),
                 # urljoin keeps the base up to its last "/": emb.npy replaces old.npy
                 {"name": "file", "script": {"image": "python:3.11", "command": ["python"],
                  "source": "from urllib.parse import urljoin\nimport requests\nrequests.get("
                            "urljoin('https://pretrained.s3.us-east-1.amazonaws.com/old.npy',"
                            " 'item2vec/v5/emb.npy'))\n"}})
    want = ["s3://pretrained/item2vec/v5/emb.npy"]
    assert _static(plan) == {"minio": want, "aws": want, "file": want}


def test_a_bucket_address_alone_is_no_read_of_the_bucket() -> None:
    plan = _argo(_cp("ep", "--endpoint", "https://pretrained.s3.us-east-1.amazonaws.com/",
                     "--model", "https://pretrained.s3.us-east-1.amazonaws.com/m/v1.pt",
                     command=("python", "serve.py")))
    assert _static(plan) == {"ep": ["s3://pretrained/m/v1.pt"]}


def test_a_message_after_a_location_is_no_part_of_its_key() -> None:
    from prefetchd.pipeline._uri import find_uris

    assert find_uris("s3://b/data loaded") == ["s3://b/data"]
    assert find_uris("s3://b/x done.") == ["s3://b/x"]
    assert find_uris("s3://b/Plant A/") == ["s3://b/Plant A/"]
