"""What the kubelet checks before it unstages, and cleanup when it forgot a volume.

The kubelet's UnmountDevice refuses to unstage a volume while its file system is
mounted anywhere other than the staging path, the publish targets and its plugins
folder (``kubelet_blocking_refs``). Paths here are laid out as the kubelet lays them
out (``KubeletLayout``); the plugin's state dir is outside that tree, as on a node.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from csi_helpers import (
    KubeletLayout,
    PluginProc,
    S3Volume,
    kubelet_blocking_refs,
    leftovers,
)
from test_csi_e2e import assert_serves, create, publish, stage, unpublish, unstage

from csi import mounts

pytestmark = [pytest.mark.fuse, pytest.mark.s3, pytest.mark.slow]

NOTHING = {"mounts": [], "processes": [], "records": []}


def wait_for(what: str, cond, timeout: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_kubelet_can_unstage_after_the_last_unpublish(plugin: PluginProc, dataset: S3Volume,
                                                      csi_root: Path) -> None:
    k = KubeletLayout(csi_root / "kubelet")
    vol = create(plugin, dataset, name="pvc-refs")
    staging = k.make(k.staging("pvc-refs"))
    t1, t2 = k.make(k.target("pod-1", "pvc-refs")), k.make(k.target("pod-2", "pvc-refs"))
    stage(plugin, vol, staging, dataset.secrets)
    assert kubelet_blocking_refs(staging, [], k.plugins_dir) == []
    publish(plugin, vol, staging, t1)
    publish(plugin, vol, staging, t2)
    assert_serves(t1, dataset.files)
    assert kubelet_blocking_refs(staging, [t1, t2], k.plugins_dir) == []
    unpublish(plugin, vol, t1)
    unpublish(plugin, vol, t2)
    # what the kubelet checks before UnmountDevice: no other reference anywhere
    assert kubelet_blocking_refs(staging, [], k.plugins_dir) == []
    assert mounts.is_mountpoint(str(staging))
    unstage(plugin, vol, staging)
    wait_for("nothing left", lambda: leftovers(csi_root, plugin) == NOTHING)


def test_the_check_catches_a_reference_outside_the_plugins_folder(
        plugin: PluginProc, dataset: S3Volume, csi_root: Path) -> None:
    """The emulated check is not vacuous: a bind elsewhere (what the plugin used to
    keep under its state dir) is reported."""
    k = KubeletLayout(csi_root / "kubelet")
    vol = create(plugin, dataset, name="pvc-check")
    staging = k.make(k.staging("pvc-check"))
    stage(plugin, vol, staging, dataset.secrets)
    elsewhere = csi_root / "elsewhere"
    elsewhere.mkdir()
    mounts.bind_mount(str(staging), str(elsewhere), readonly=True)
    try:
        assert kubelet_blocking_refs(staging, [], k.plugins_dir) == [str(elsewhere)]
    finally:
        mounts.unmount(str(elsewhere))
    unstage(plugin, vol, staging)
    wait_for("nothing left", lambda: leftovers(csi_root, plugin) == NOTHING)


def test_pod_deleted_while_the_plugin_was_down(plugin: PluginProc, dataset: S3Volume,
                                               csi_root: Path) -> None:
    """The kubelet retries unpublish and unstage until the plugin is back."""
    k = KubeletLayout(csi_root / "kubelet")
    vol = create(plugin, dataset, name="pvc-down")
    staging = k.make(k.staging("pvc-down"))
    target = k.make(k.target("pod-1", "pvc-down"))
    stage(plugin, vol, staging, dataset.secrets)
    publish(plugin, vol, staging, target)
    assert_serves(target, dataset.files)
    plugin.kill(signal.SIGKILL)
    plugin.start()
    unpublish(plugin, vol, target)
    assert kubelet_blocking_refs(staging, [], k.plugins_dir) == []
    unstage(plugin, vol, staging)
    wait_for("nothing left", lambda: leftovers(csi_root, plugin) == NOTHING)


def test_a_volume_the_kubelet_forgot_is_cleaned_up_by_reconcile(
        csi_root: Path, dataset: S3Volume) -> None:
    """Plugin down; the pod's mounts are taken away without NodeUnpublish/Unstage
    (a kubelet that lost its state, a node cleaned by hand): the plugin's own
    reconcile stops the FUSE server and forgets the volume."""
    k = KubeletLayout(csi_root / "kubelet")
    p = PluginProc(csi_root, extra_args=["--health-interval", "0.5"]).start()
    try:
        vol = create(p, dataset, name="pvc-forgot")
        staging = k.make(k.staging("pvc-forgot"))
        target = k.make(k.target("pod-1", "pvc-forgot"))
        stage(p, vol, staging, dataset.secrets)
        publish(p, vol, staging, target)
        assert (target / "a.txt").read_bytes() == dataset.files["a.txt"]
        p.kill(signal.SIGKILL)
        for path in (target, staging):
            mounts.unmount(str(path), lazy=True)
        os.rmdir(target)
        p.start()
        wait_for("the forgotten volume is cleaned up",
                 lambda: leftovers(csi_root, p) == NOTHING)
    finally:
        p.kill()
