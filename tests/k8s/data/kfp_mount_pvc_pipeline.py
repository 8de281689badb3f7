"""A KFP v2 pipeline: prepare, then train reading a dataset PVC mounted with kfp-kubernetes.

The claim is a pipeline parameter (``dataset_claim``), so the compiled IR names it through
``pipelinechannel--dataset_claim``: the run's parameter value says which claim (and so which
dataset) the train step reads. tests/k8s/test_k8s_e2e_pvc.py turns the compiled IR into the
Argo Workflow the KFP backend submits for a run (tests/k8s/argo_sim.py) and checks that the
agent warms the dataset behind that claim before the train pod exists.

Compile (kfp and kfp-kubernetes pin protobuf<7: use a virtualenv of their own):

    python3 -m venv /tmp/kfp-pvc && /tmp/kfp-pvc/bin/pip install kfp kfp-kubernetes
    /tmp/kfp-pvc/bin/python tests/k8s/data/kfp_mount_pvc_pipeline.py

which writes kfp_mount_pvc_pipeline.yaml and kfp_mount_pvc_in_condition.yaml next to this file
(checked in; kfp 2.17.3 and kfp-kubernetes 2.17.3).
No ``from __future__ import annotations``: kfp reads the real annotation types.
"""

from pathlib import Path

from kfp import compiler, dsl, kubernetes


@dsl.component(base_image="python:3.11-slim")
def prepare(run_id: str) -> str:
    """Stand-in for a preparation step (no dataset read)."""
    return run_id


@dsl.component(base_image="python:3.11-slim")
def train(data_dir: str, tag: str) -> int:
    """Read every file under data_dir once."""
    import os

    total = 0
    for d, _subdirs, files in os.walk(data_dir):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                total += len(fh.read())
    return total


@dsl.pipeline(name="pvc-train", description="prepare, then train from a fusecache PVC")
def pvc_train(dataset_claim: str, run_id: str = "r1") -> None:
    prep = prepare(run_id=run_id)
    fit = train(data_dir="/data/train", tag=prep.output)
    kubernetes.mount_pvc(fit, pvc_name=dataset_claim, mount_path="/data")


@dsl.pipeline(name="pvc-train-if", description="the same, train inside a condition")
def pvc_train_in_condition(dataset_claim: str, run_id: str = "r1") -> None:
    """Inside a dsl.If the claim reaches train as ``pipelinechannel--dataset_claim``."""
    prep = prepare(run_id=run_id)
    with dsl.If(prep.output != "skip"):
        fit = train(data_dir="/data/train", tag=prep.output)
        kubernetes.mount_pvc(fit, pvc_name=dataset_claim, mount_path="/data")


if __name__ == "__main__":
    here = Path(__file__)
    compiler.Compiler().compile(pvc_train, str(here.with_suffix(".yaml")))
    compiler.Compiler().compile(pvc_train_in_condition,
                                str(here.with_name("kfp_mount_pvc_in_condition.yaml")))
