"""The real csi-sanity (kubernetes-csi/csi-test, pkg/sanity) against the plugin.

Who runs it: pytest, only when ``FUSECACHE_K8S_ASSETS`` names a folder holding a
``csi-sanity`` binary built from csi-test (../shared/k8s/harness/README.md says how to build
the binaries; nothing built is committed); otherwise it skips with the reason. CI has no
such binary: tests/csi/test_csi_sanity.py re-states the same specs in Python there.

Data flow: the ``plugin`` fixture starts ``fusecache-csi --mode all`` on a socket; the
session's SeaweedFS holds the bucket. csi-sanity gets the StorageClass parameters of that
bucket with ``prefixPolicy: volumeName`` (it sends no PVC metadata) as its test volume
parameters, the S3 keys as ``NodeStageVolumeSecret``, and runs every spec; its JUnit report
says which ran. The driver advertises CONTROLLER_SERVICE, CREATE_DELETE_VOLUME,
STAGE_UNSTAGE_VOLUME, GET_VOLUME_STATS and VOLUME_CONDITION, so csi-sanity skips the
specs of the rest (snapshots, expansion, ListVolumes, ...); those that run must all pass,
the node lifecycle ones (real stage and publish: FUSE mounts) among them.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from csi_helpers import PluginProc, S3Volume

pytestmark = [pytest.mark.fuse, pytest.mark.s3, pytest.mark.real_cluster]

# specs that must be among those run and passed: the node lifecycle with real mounts
MUST_PASS = ("Node Service should work", "Node Service should be idempotent",
             "Node Service NodeUnpublishVolume should remove target path",
             "Controller Service [Controller Server] CreateVolume should return appropriate "
             "values SingleNodeWriter NoCapacity")


def _binary() -> Path | str:
    """The csi-sanity binary, or why the test skips."""
    assets = os.environ.get("FUSECACHE_K8S_ASSETS", "")
    if not assets:
        return "FUSECACHE_K8S_ASSETS is not set: it names a folder holding csi-sanity"
    path = Path(assets) / "csi-sanity"
    if not os.access(path, os.X_OK):
        return f"FUSECACHE_K8S_ASSETS={assets} lacks csi-sanity"
    return path


BINARY = _binary()
if isinstance(BINARY, str):
    pytestmark.append(pytest.mark.skip(reason=BINARY))


def test_csi_sanity_passes_every_spec_it_runs(plugin: PluginProc, dataset: S3Volume,
                                              tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**dataset.parameters, "prefixPolicy": "volumeName"}))
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(yaml.safe_dump({"NodeStageVolumeSecret": dataset.secrets}))
    report = tmp_path / "junit.xml"
    r = subprocess.run(
        [str(BINARY), "--csi.endpoint", str(plugin.socket),
         "--csi.testvolumeparameters", str(params), "--csi.secrets", str(secrets),
         "--csi.mountdir", str(tmp_path / "target"),
         "--csi.stagingdir", str(tmp_path / "staging"),
         "--ginkgo.no-color", "--ginkgo.junit-report", str(report)],
        capture_output=True, text=True, timeout=600)
    print(r.stdout[-3000:])
    assert r.returncode == 0, (r.stdout[-4000:], r.stderr[-2000:])
    cases = {tc.attrib["name"].removeprefix("[It] "): tc.attrib.get("status")
             for tc in ET.parse(report).getroot().iter("testcase")}
    failed = [n for n, st in cases.items() if st not in ("passed", "skipped", "pending")]
    assert not failed, failed
    missing = [n for n in MUST_PASS if cases.get(n) != "passed"]
    assert not missing, missing
    print(f"csi-sanity: {sum(st == 'passed' for st in cases.values())} passed, "
          f"{sum(st != 'passed' for st in cases.values())} skipped or pending, 0 failed")
