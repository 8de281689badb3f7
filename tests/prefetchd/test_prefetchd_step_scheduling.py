"""Step.scheduling: each step's own pod scheduling constraints, as the Kubernetes agent needs."""

from __future__ import annotations

from pathlib import Path

import yaml

from prefetchd import pipeline

CORPUS = Path(__file__).resolve().parent / "corpus"


def test_argo_template_constraints_are_carried_per_step():
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
          "metadata": {"name": "w"},
          "spec": {"entrypoint": "main", "nodeSelector": {"pool": "cpu"}, "templates": [
              {"name": "main", "steps": [[{"name": "a", "template": "gpu"}],
                                         [{"name": "b", "template": "plain"}]]},
              {"name": "gpu", "nodeSelector": {"pool": "gpu"},
               "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
               "container": {"image": "x", "args": ["s3://b/d/"],
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}},
              {"name": "plain", "container": {"image": "x", "args": ["s3://b/e/"]}}]}}
    [plan] = pipeline.analyze_documents([wf], source="t")
    a, b = plan.step("a"), plan.step("b")
    assert a.scheduling == {
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    assert b.scheduling is None
    assert "scheduling" not in a.to_json()  # `prefetchd plan --json` is unchanged


def test_kfp2_accelerator_becomes_a_gpu_limit():
    docs = [d for d in yaml.safe_load_all(
        (CORPUS / "pipelines/kfp2_copy_pvc.yaml").read_text()) if d]
    [plan] = pipeline.analyze_documents(docs, source="t")
    gpu = [s for s in plan.steps if s.scheduling]
    assert gpu and all(s.scheduling == {"containers": [
        {"resources": {"limits": {"nvidia.com/gpu": "1"}}}]} for s in gpu)
    assert any(s.scheduling is None for s in plan.steps)


def test_kfp2_platform_node_selector_and_tolerations():
    from prefetchd.pipeline import _kfp2

    got = _kfp2._kfp_scheduling(
        {"image": "x"}, {"nodeSelector": {"labels": {"pool": "gpu"}},
                         "tolerations": [{"key": "k", "operator": "Exists"}]})
    assert got == {"nodeSelector": {"pool": "gpu"},
                   "tolerations": [{"key": "k", "operator": "Exists"}]}
    assert _kfp2._kfp_scheduling({"image": "x"}, {}) is None
