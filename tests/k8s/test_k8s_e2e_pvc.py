"""The headline path end to end on the fake API server: workflow steps that mount a fusecache
PVC are warmed before their pod exists, land on the warmed node, and their pins follow the DAG.

The scenario (five workflows at once: Argo claim parameter, compiled KFP v2 ``mount_pvc``,
``volumeClaimTemplates`` claim bound while running) is tests/k8s/pvc_scenario.py; here the
fake API server stands for the control plane, so this module plays its parts too: it sends
every pod through ``prefetchd webhook`` (as the API server would), binds pods to the node the
webhook prefers (as the scheduler does: the weight-80 term dominates) and binds claims to PVs
(as the PV controller does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from argo_sim import FakeCluster, bind
from k8s_helpers import node
from pvc_scenario import preferred_hosts, run_scenario

pytestmark = [pytest.mark.k8s, pytest.mark.fuse, pytest.mark.s3]


class FakePlatform:
    namespace = "ml"
    nodes = ("n1", "n2", "n3")

    def __init__(self, fake: Any, tmp_path: Path) -> None:
        from test_k8s_e2e_agent import write_kubeconfig

        self.fake, self.cluster = fake, FakeCluster(fake)
        self.kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", fake.url))
        self.webhook: tuple[int, str] | None = None
        for n in self.nodes:
            fake.create(node(n, {"kubernetes.io/hostname": n, "kubernetes.io/os": "linux"},
                             status={"allocatable": {"cpu": "16", "memory": "64Gi",
                                                     "pods": "110"},
                                     "conditions": [{"type": "Ready", "status": "True"}]}))

    def agent_kubeconfig(self, node: str) -> str:
        return self.kubeconfig

    def webhook_kubeconfig(self) -> str:
        return self.kubeconfig

    def register_webhook(self, port: int, cafile: str) -> None:
        self.webhook = (port, cafile)

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        from test_k8s_webhook import mutate

        assert self.webhook is not None

        class Srv:  # what mutate() needs of a server
            port = self.webhook[0]

        return self.cluster.create(mutate(Srv(), self.webhook[1], pod)[1])  # type: ignore[arg-type]

    def schedule(self, pod: dict[str, Any]) -> str:
        # as the scheduler: a required node beats the webhook's preference
        required = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(
            "kubernetes.io/hostname")
        target = required or sorted(preferred_hosts(pod) or self.nodes)[0]
        self.cluster.patch("v1", "Pod", pod["metadata"]["name"], {"spec": {"nodeName": target}},
                           pod["metadata"]["namespace"])
        return target

    def bind(self, pv: dict[str, Any], namespace: str, claim_name: str) -> None:
        bind(self.cluster, pv, namespace, claim_name)


def test_five_workflows_mounting_fusecache_pvcs_are_warmed_before_their_pods(
        fake, private_s3, tmp_path):
    lead = run_scenario(FakePlatform(fake, tmp_path), private_s3, tmp_path)
    assert len(lead) == 5
