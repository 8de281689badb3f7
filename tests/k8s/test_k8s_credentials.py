"""prefetchd.k8s.credentials against the fake API server with the real kubernetes client.

Which volume a dataset comes from, and its endpoint, region and node-stage Secret: from the PV,
else its StorageClass, else the agent's own; what a missing or unreadable Secret does.
"""

from __future__ import annotations

import pytest
from k8s_helpers import api_at_closed_port
from volume_objects import bound_pair, secret, storage_class

from prefetchd.k8s import credentials as cr
from prefetchd.k8s.agent import WarmRequest
from prefetchd.k8s.datasets import VolumeDataset

pytestmark = pytest.mark.k8s

ENDPOINT = "http://s3.tenant-a.example:9000"


def req(dataset: str, source: str = "pod ml/train", volume: str | None = None) -> WarmRequest:
    vol = VolumeDataset(location=dataset, pv=volume) if volume else None
    return WarmRequest(dataset, source, "train", 0, vol)


@pytest.fixture()
def cluster(fake):
    fake.create(secret("fusecache", "fusecache-s3", "AKIA-STATIC", "static-secret-value"))
    fake.create(secret("ml", "ml-s3", "AKIA-CLASS", "class-secret-value"))
    fake.create(storage_class("fusecache-ml", {
        "bucket": "datasets", "prefix": "shared", "endpointUrl": ENDPOINT,
        "region": "eu-west-1", "prefixPolicy": "pvcName",
        cr.SC_SECRET_NAME: "${pvc.namespace}-s3", cr.SC_SECRET_NAMESPACE: "${pvc.namespace}"}))
    for obj in bound_pair("ml", "imagenet", "imagenet-train",
                          {"bucket": "datasets", "prefix": "imagenet/train",
                           "endpointUrl": "http://minio.fusecache:9000", "region": "us-east-1"},
                          {"name": "fusecache-s3", "namespace": "fusecache"}):
        fake.create(obj)
    # made by an admin naming the class, without endpoint or secret ref of its own
    for obj in bound_pair("ml", "coco", "coco", {"bucket": "datasets", "prefix": "shared/coco"},
                          storage_class_name="fusecache-ml"):
        fake.create(obj)
    # a broader volume of the same bucket: the more specific one above must win
    for obj in bound_pair("ml", "everything", "datasets-all", {"bucket": "datasets"}):
        fake.create(obj)
    return fake


def test_the_pv_s_endpoint_region_and_secret(cluster, api):
    vc = cr.VolumeCredentials(api, endpoint_url="http://agent-default:9000")
    cfg = vc.store_config(req("s3://datasets/imagenet/train/"))
    assert cfg.endpoint_url == "http://minio.fusecache:9000" and cfg.region == "us-east-1"
    assert cfg.credentials == {"aws_access_key_id": "AKIA-STATIC",
                               "aws_secret_access_key": "static-secret-value"}
    assert cfg.origin == "pv imagenet-train, secret fusecache/fusecache-s3"
    # narrowed paths under the volume come from it too; the secret value is never shown
    sub = vc.store_config(req("s3://datasets/imagenet/train/n01440764/"))
    assert sub.origin == cfg.origin
    assert "static-secret-value" not in repr(cfg) + str(cfg)


def test_the_storage_class_fills_in_what_the_pv_lacks(cluster, api):
    cfg = cr.VolumeCredentials(api).store_config(req("s3://datasets/shared/coco/val/"))
    assert (cfg.endpoint_url, cfg.region) == (ENDPOINT, "eu-west-1")
    assert cfg.origin == "pv coco, secret ml/ml-s3"  # ${pvc.namespace} expanded from claimRef
    assert cfg.credentials["aws_access_key_id"] == "AKIA-CLASS"


def test_a_volume_without_secret_and_no_volume_use_the_agent_s_own(cluster, api):
    vc = cr.VolumeCredentials(api, endpoint_url="http://agent-default:9000")
    cfg = vc.store_config(req("s3://datasets/other/"))  # only the bucket-wide volume covers it
    assert cfg.origin == "pv datasets-all, agent identity" and cfg.credentials is None
    assert cfg.endpoint_url == "http://agent-default:9000"
    cfg = vc.store_config(req("s3://elsewhere/x/"))
    assert cfg == cr.StoreConfig("http://agent-default:9000", None, "agent identity")


def test_a_workflow_s_dataset_under_a_claim_of_its_namespace_uses_that_volume(cluster, api):
    """A workflow names s3:// URIs, not volumes: a claim of its namespace covering one counts."""
    cfg = cr.VolumeCredentials(api).store_config(
        req("s3://datasets/imagenet/train/shard-0007.tar", source="workflow ml/train-resnet"))
    assert cfg.origin == "pv imagenet-train, secret fusecache/fusecache-s3"


def test_api_errors_are_retried_then_one_line(cluster, api):
    fake = cluster
    fake.fail_next(count=2, code=503, path_contains="/persistentvolumeclaims")
    cfg = cr.VolumeCredentials(api).store_config(req("s3://datasets/imagenet/train/"))
    assert cfg.origin == "pv imagenet-train, secret fusecache/fusecache-s3"
    fake.fail_next(count=cr.API_ATTEMPTS, code=500, path_contains="/persistentvolumeclaims")
    with pytest.raises(cr.CredentialError, match="persistentvolumeclaims: HTTP 500$"):
        cr.VolumeCredentials(api).store_config(req("s3://datasets/imagenet/train/"))
    with pytest.raises(cr.CredentialError, match="GET /api/v1/persistentvolumes/x: "):
        cr.VolumeCredentials(api_at_closed_port()).store_config(
            req("s3://datasets/a/", volume="x"))


def test_only_the_requesting_namespace_s_claims_count(cluster, api):
    cfg = cr.VolumeCredentials(api).store_config(
        req("s3://datasets/imagenet/train/", source="workflow other/wf"))
    assert cfg.origin == "agent identity" and cfg.credentials is None


def test_a_pv_named_by_the_request_wins(cluster, api):
    cfg = cr.VolumeCredentials(api).store_config(
        req("s3://datasets/imagenet/train/", source="workflow other/wf", volume="coco"))
    assert cfg.origin == "pv coco, secret ml/ml-s3"
    with pytest.raises(cr.CredentialError, match="PV gone of s3://datasets/x/ does not exist"):
        cr.VolumeCredentials(api).store_config(req("s3://datasets/x/", volume="gone"))


def test_unreadable_missing_or_incomplete_secrets_are_one_line_errors(cluster, api):
    fake = cluster
    fake.fail_next(code=403, path_contains="/secrets/fusecache-s3")
    with pytest.raises(cr.CredentialError) as e:
        cr.VolumeCredentials(api).store_config(req("s3://datasets/imagenet/train/"))
    assert str(e.value).startswith("cannot read node-stage Secret fusecache/fusecache-s3 "
                                   "(HTTP 403; the agent needs get on it")
    fake.delete("v1", "Secret", "ml-s3", namespace="ml")
    with pytest.raises(cr.CredentialError, match="Secret ml/ml-s3 does not exist"):
        cr.VolumeCredentials(api).store_config(req("s3://datasets/shared/coco/"))
    bad = secret("ml", "ml-s3", "AKIA-CLASS", "x")
    del bad["data"]["secretAccessKey"]
    fake.create(bad)
    with pytest.raises(cr.CredentialError) as e:
        cr.VolumeCredentials(api).store_config(req("s3://datasets/shared/coco/"))
    assert "must hold accessKeyID and secretAccessKey (it has keys: accessKeyID)" in str(e.value)
    assert "AKIA" not in str(e.value)


def test_secrets_are_cached_for_a_minute_and_then_reread(cluster, api):
    now = [0.0]
    vc = cr.VolumeCredentials(api, clock=lambda: now[0])
    first = vc.store_config(req("s3://datasets/imagenet/train/"))
    cluster.replace(secret("fusecache", "fusecache-s3", "AKIA-ROTATED", "rotated"))
    assert vc.store_config(req("s3://datasets/imagenet/train/")).credentials == \
        first.credentials
    now[0] = cr.SECRET_TTL + 1
    rotated = vc.store_config(req("s3://datasets/imagenet/train/"))
    assert rotated.credentials["aws_access_key_id"] == "AKIA-ROTATED"


def test_the_secret_keys_are_those_the_csi_node_accepts():
    from csi import node

    assert set(cr.SECRET_KEYS) == set(node._SECRET_ENV)  # noqa: SLF001
    for key, arg in cr.SECRET_KEYS.items():
        assert arg == node._SECRET_ENV[key].lower()  # noqa: SLF001


def test_storage_class_templates_expand_or_fail():
    pv, _ = bound_pair("ml", "c", "pv-1", {"bucket": "b"})
    assert cr._expand("${pvc.namespace}-${pvc.name}-${pv.name}", pv, "x") == "ml-c-pv-1"  # noqa: SLF001
    with pytest.raises(cr.CredentialError, match=r"cannot expand \$\{pvc.annotations"):
        cr._expand("${pvc.annotations['k']}", pv, "secret name")  # noqa: SLF001
