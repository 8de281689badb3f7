"""The CSI node path under a real kubelet: a running pod keeps its data through faults,
and a deleted pod's volume is unstaged.

Who runs it: pytest, only when ``FUSECACHE_K8S_ASSETS`` names a folder holding the
prebuilt Kubernetes binaries (kube-apiserver, kube-scheduler, kube-controller-manager,
kubelet, csi-node-driver-registrar, pause; see ../shared/k8s/harness/README.md, which
says how to build them; nothing built is committed) and ../shared/k8s/harness exists.
Otherwise every test skips with the reason.

Data flow: the harness (``kubelet_harness.sh``, driven through bash) starts a control
plane, containerd, runc and a kubelet on this machine. ``fusecache-csi`` runs as a host
process on the socket the kubelet expects and is registered by csi-node-driver-registrar;
its volumes come from the session's SeaweedFS (``local_s3``). A static PV/PVC names a
prefix of a bucket; a busybox pod (default mount propagation) reads every file with
O_DIRECT in a loop and prints each sha256. The test kills or replaces the plugin and the
volume's FUSE server while the pod reads, then reads the pod's log (``kubectl logs
--timestamps``): every sha256 must match, no read may fail, the pod must not restart.
After the pod is deleted, no fusecache mount, relay, FUSE server or volume record may be
left within 60 s, and the kubelet must not have logged "still mounted by other
references". Timings (to Running, kill to first good read, delete to clean) are printed
(run with ``-s`` to see them).

Tests 5 and 6 add the real csi-provisioner sidecar (when FUSECACHE_K8S_ASSETS has it) for
the StorageClass path: a PVC of a fusecache class, and a pod's generic ephemeral volume.
Test 7 adds ``prefetchd run --kubernetes`` for this node: it warms an Argo Workflow step's
claim into the plugin's node cache, S3 is stopped, and the step's pod reads every byte.

Only one kubelet can run on a machine: the module waits (up to 10 minutes) until no
other kubelet or containerd runs. Teardown order, as the harness asks: pods, plugin,
``kubelet_down``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from csi_helpers import REPO, VENV_BIN, pids_mentioning

from csi import mounts

pytestmark = [pytest.mark.fuse, pytest.mark.s3, pytest.mark.slow, pytest.mark.real_cluster]

DRIVER = "csi.fusecache.io"
HARNESS_DIR = REPO.parent / "shared" / "k8s" / "harness"
HARNESS = HARNESS_DIR / "kubelet_harness.sh"
NEEDED = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet",
          "csi-node-driver-registrar", "pause")
FILES = {"a.bin": os.urandom(8 << 20), "dir/b.txt": b"hello kubelet\n" * 1000,
         "dir/sub/c.bin": os.urandom(3 << 20) + b"tail"}
SHAS = {name: hashlib.sha256(data).hexdigest() for name, data in FILES.items()}
STILL_MOUNTED = "still mounted by other references"


def _skip_reason() -> str | None:
    assets = os.environ.get("FUSECACHE_K8S_ASSETS", "")
    if not assets:
        return ("FUSECACHE_K8S_ASSETS is not set: it names a folder with the prebuilt "
                "kube-apiserver, kubelet, csi-node-driver-registrar, pause, ... "
                "(../shared/k8s/harness/README.md)")
    if not HARNESS.is_file():
        return f"the kubelet harness is absent: {HARNESS}"
    missing = [b for b in NEEDED if not os.access(Path(assets) / b, os.X_OK)]
    if missing:
        return f"FUSECACHE_K8S_ASSETS={assets} lacks {', '.join(missing)}"
    if os.geteuid() != 0:
        return "needs root (kubelet, containerd, FUSE mounts)"
    return None


_reason = _skip_reason()
if _reason is not None:
    pytestmark.append(pytest.mark.skip(reason=_reason))


def wait_for(what: str, cond: Callable[[], object], timeout: float) -> float:
    """Poll *cond* until true; return the seconds it took; fail after *timeout*."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, f"{what} (after {timeout:g} s)"
        time.sleep(0.2)
    return time.monotonic() - t0


def _running(name: str) -> bool:
    return subprocess.run(["pgrep", "-x", name], capture_output=True, check=False).returncode == 0


@dataclass
class Node:
    """A started kubelet harness: the environment its functions exported, and its folder."""

    base: Path  # everything of this module's run: kl_dir, the plugins' roots
    kl_dir: Path
    env: dict[str, str]

    def bash(self, script: str, timeout: float = 300, check: bool = True) -> str:
        """Run *script* in bash with the harness sourced and the node's environment."""
        full = f"set -uo pipefail; source {HARNESS}; {script}"
        r = subprocess.run(["bash", "-c", full], env=self.env, capture_output=True, text=True,
                           timeout=timeout, check=False)
        if check:
            assert r.returncode == 0, f"harness: {script}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        r = subprocess.run([self.env["K8S_KUBECTL"], *args], env=self.env, input=stdin,
                           capture_output=True, text=True, timeout=120, check=False)
        if check:
            assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stderr[-2000:]}"
        return r.stdout

    @property
    def root_dir(self) -> Path:
        return Path(self.env["KL_ROOT_DIR"])

    @property
    def kubelet_log(self) -> Path:
        return self.kl_dir / "logs" / "kubelet.log"


@pytest.fixture(scope="module")
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    # only one kubelet per machine: wait for another session's harness to go
    deadline = time.monotonic() + 600
    while _running("kubelet") or _running("containerd"):
        if time.monotonic() > deadline:
            pytest.skip("another kubelet or containerd kept running for 10 minutes")
        time.sleep(5)
    assets = Path(os.environ["FUSECACHE_K8S_ASSETS"]).resolve()
    # not under pytest's basetemp: other pytest runs on the machine prune old basetemps,
    # and the node's containerd root and logs must last the whole module
    base = Path(tempfile.mkdtemp(prefix="fusecache-real-kubelet-"))
    kl_dir = base / "kl"
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "LANG": "C.UTF-8", "TOOLS": str(assets.parent), "KL_DIR": str(kl_dir)}
    t0 = time.monotonic()
    # no pipefail here: kubelet_up checks its images with `ctr images ls -q | grep -qx`,
    # and grep -q leaving at the first match can end ctr with SIGPIPE, which pipefail
    # turns into "image ... missing after import"
    up = f"set -u; source {HARNESS}; kubelet_up >&2 && env -0"
    r = subprocess.run(["bash", "-c", up], env=env, capture_output=True, timeout=600, check=False)
    started = Node(base, kl_dir, env)
    if r.returncode != 0:
        started.bash("kubelet_down", check=False)
        pytest.fail(f"kubelet_up failed:\n{r.stderr.decode(errors='replace')[-3000:]}")
    for item in r.stdout.split(b"\0"):
        k, _, v = item.decode(errors="replace").partition("=")
        if k:
            started.env[k] = v
    print(f"\n[real-kubelet] kubelet_up: {time.monotonic() - t0:.1f} s")
    try:
        yield started
    finally:
        # pods first (tests delete theirs; this is for a failed one), plugins are
        # stopped by their fixture before this, then the node
        started.bash("kl_delete_all_pods 60 || true; kubelet_down", timeout=300, check=False)
        if request.session.testsfailed:
            print(f"[real-kubelet] logs kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


@dataclass
class Plugin:
    """fusecache-csi as a host process on the kubelet's socket, optionally with a holder."""

    node: Node
    root: Path
    holder: bool = False
    procs: list[subprocess.Popen] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    holder_proc: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.node.root_dir / "plugins" / DRIVER / "csi.sock"

    @property
    def log_path(self) -> Path:
        return self.root / "plugin.log"

    def _env(self) -> dict[str, str]:
        return {"PATH": f"{VENV_BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.root),
                "LANG": "C.UTF-8", "PYTHONPATH": str(REPO)}

    def start_holder(self) -> None:
        sock = self.root / "holder.sock"
        logf = open(self.root / "holder.log", "ab")
        self.holder_proc = subprocess.Popen(
            [str(VENV_BIN / "python"), "-m", "fusecache.holder", "--socket", str(sock),
             "--log-file", str(self.root / "holder.log")],
            env=self._env(), stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        logf.close()
        wait_for("the relay holder's socket", sock.exists, 30)

    def start(self, fusecache_bin: Path | None = None) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        argv = [str(VENV_BIN / "fusecache-csi"), "--endpoint", f"unix://{self.socket}",
                "--node-id", self.node.env["KL_NODE"], "--mode", "all",
                "--cache-dir", str(self.root / "cache"), "--state-dir", str(self.root / "state"),
                "--fusecache-bin", str(fusecache_bin or VENV_BIN / "fusecache"),
                "--log-level", "DEBUG", "--health-interval", "5"]
        if self.holder:
            argv += ["--relay-holder", str(self.root / "holder.sock")]
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(argv, env=self._env(), stdout=logf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.procs.append(self.proc)
        wait_for(f"the plugin's socket {self.socket}", self.socket.exists, 60)

    def stop(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=60)

    def own_pids(self) -> set[int]:
        pids = {p.pid for p in self.procs if p.poll() is None}
        if self.holder_proc is not None and self.holder_proc.poll() is None:
            pids.add(self.holder_proc.pid)
        return pids

    def fuse_servers(self) -> list[int]:
        found = []
        for pid in pids_mentioning(str(self.root / "cache")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b" mount " in cmd and b"fusecache.relay" not in cmd:
                found.append(pid)
        return found

    def leftovers(self) -> dict[str, list[str]]:
        records = self.root / "state" / "node" / "volumes"
        return {
            "mounts": [f"{e.mountpoint} ({e.fstype})" for e in mounts.mount_table()
                       if e.mountpoint.startswith(f"{self.node.root_dir}/")
                       and ("fusecache" in e.fstype or "fusecache" in e.source)],
            "processes": [str(p) for p in pids_mentioning(str(self.root))
                          if p not in self.own_pids()],
            "records": sorted(p.name for p in records.glob("*.json")) if records.is_dir() else [],
        }

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def shutdown(self) -> None:
        for p in [*self.procs, *([self.holder_proc] if self.holder_proc else [])]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        for pid in pids_mentioning(str(self.root)):  # relays / servers of a failed test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def volume(node: Node, local_s3) -> str:  # noqa: ANN001
    """Registers the driver and makes a static PV/PVC ``kl-ds`` over FILES; returns the claim."""
    client = local_s3.client()
    client.create_bucket(Bucket="klds")
    for name, data in FILES.items():
        client.put_object(Bucket="klds", Key=f"ds/{name}", Body=data)
    node.kubectl("apply", "-f", str(REPO / "manifests" / "csidriver.yaml"))
    node.kubectl("create", "namespace", "fusecache")
    node.kubectl("-n", "fusecache", "create", "secret", "generic", "fusecache-s3",
                 f"--from-literal=accessKeyID={local_s3.access_key}",
                 f"--from-literal=secretAccessKey={local_s3.secret_key}")
    pv = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "kl-ds"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "csi": {"driver": DRIVER, "volumeHandle": "kl-ds", "readOnly": True,
                         "volumeAttributes": {"bucket": "klds", "prefix": "ds",
                                              "endpointUrl": local_s3.endpoint_url,
                                              "region": "us-east-1"},
                         "nodeStageSecretRef": {"name": "fusecache-s3", "namespace": "fusecache"}}}}
    pvc = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "kl-ds", "namespace": "default"},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": "kl-ds",
                 "resources": {"requests": {"storage": "1Gi"}}}}
    node.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": [pv, pvc]}))
    wait_for("PVC kl-ds Bound", lambda: node.kubectl(
        "get", "pvc", "kl-ds", "-o", "jsonpath={.status.phase}", check=False) == "Bound", 60)
    return "kl-ds"


_registered: set[str] = set()


@pytest.fixture()
def plugin(node: Node, volume: str,
           request: pytest.FixtureRequest) -> Iterator[Callable[..., Plugin]]:
    made: list[Plugin] = []

    def make(holder: bool = False) -> Plugin:
        p = Plugin(node, node.base / f"plugin-{request.node.name}", holder=holder)
        p.root.mkdir()
        if holder:
            p.start_holder()
        p.start()
        if DRIVER not in _registered:
            node.bash(f"kl_registrar_start {DRIVER}")
            _registered.add(DRIVER)
        made.append(p)
        return p

    try:
        yield make
    finally:
        # the harness's order: pods, then the plugin (then kubelet_down, in `node`)
        node.bash("kl_delete_all_pods 60", check=False)
        for p in made:
            rep = getattr(request.node, "rep_call", None)
            if rep is not None and rep.failed:
                print(f"---- plugin log ----\n{p.log()[-8000:]}")
            p.shutdown()


READER = r"""
set -o pipefail
i=0
while true; do
  i=$((i+1))
  for f in FILES; do
    if s=$(dd if=/data/$f iflag=direct bs=1M 2>/dev/null | sha256sum); then
      echo "R $i $f ${s%% *}"
    else
      echo "R $i $f FAIL"
    fi
  done
  ls -R /data >/dev/null 2>&1 || echo "R $i ls FAIL"
  sleep 0.2
done
""".replace("FILES", " ".join(FILES))


def start_pod(node: Node, name: str, claim: str, inline: dict | None = None,
              source: dict | None = None) -> float:
    """A reader pod of the claim, of an *inline* CSI volume source (``csi: {...}``), or of
    any other volume *source* (``{"ephemeral": {...}}``)."""
    source = source or ({"csi": inline} if inline else {
        "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "r", "image": node.env["KL_BUSYBOX_IMAGE"],
                                 "imagePullPolicy": "Never", "command": ["sh", "-c", READER],
                                 "volumeMounts": [{"name": "d", "mountPath": "/data",
                                                   "readOnly": True}]}],
                 "volumes": [{"name": "d", **source}]}}
    node.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    return float(node.bash(f"kl_wait_pod_phase default {name} Running 120").strip())


@dataclass
class Read:
    at: float  # epoch seconds (the container runtime's log timestamp)
    round: int
    file: str
    result: str


def reads(node: Node, pod: str) -> list[Read]:
    out = []
    for line in node.kubectl("logs", "--timestamps", pod).splitlines():
        ts, _, rest = line.partition(" ")
        parts = rest.split()
        if len(parts) != 4 or parts[0] != "R":
            continue
        # RFC 3339 with nanoseconds: keep microseconds for fromisoformat
        stamp = ts.replace("Z", "+00:00")
        if "." in stamp:
            head, frac_tz = stamp.split(".", 1)
            frac, tz = frac_tz[:frac_tz.index("+")], frac_tz[frac_tz.index("+"):]
            stamp = f"{head}.{frac[:6].ljust(6, '0')}{tz}"
        at = datetime.fromisoformat(stamp).timestamp()
        out.append(Read(at, int(parts[1]), parts[2], parts[3]))
    return out


def assert_all_good(rs: list[Read]) -> None:
    bad = [r for r in rs if r.file not in SHAS or r.result != SHAS[r.file]]
    assert not bad, f"{len(bad)} bad reads, first: {bad[:5]}"


def good_rounds_after(rs: list[Read], t: float) -> int:
    """Complete rounds, every file good, whose reads all came after *t*."""
    by_round: dict[int, list[Read]] = {}
    for r in rs:
        by_round.setdefault(r.round, []).append(r)
    return sum(1 for group in by_round.values()
               if {g.file for g in group} == set(SHAS)
               and all(g.at > t and g.result == SHAS[g.file] for g in group))


def container_id(node: Node, pod: str) -> str:
    return node.kubectl("get", "pod", pod, "-o",
                        "jsonpath={.status.containerStatuses[0].containerID}"
                        " {.status.containerStatuses[0].restartCount}")


def fault_and_check(node: Node, pod: str, fault: Callable[[], None], label: str) -> None:
    """Apply *fault* while *pod* reads; the pod (same container) must read every byte again."""
    before = container_id(node, pod)
    wait_for(f"{pod}: 2 good rounds before the fault",
             lambda: good_rounds_after(reads(node, pod), 0) >= 2, 60)
    t_fault = time.time()
    fault()
    try:
        wait_for(f"{pod}: 5 good rounds after {label}",
                 lambda: good_rounds_after(reads(node, pod), t_fault) >= 5, 120)
    except AssertionError as e:
        after = [r for r in reads(node, pod) if r.at > t_fault]
        failed = sum(r.result == "FAIL" for r in after)
        raise AssertionError(f"{e}; {len(after)} reads since the fault, {failed} failed, "
                             f"last: {after[-3:]}") from None
    rs = reads(node, pod)
    assert_all_good(rs)  # no wrong sha and no failed read, before, during or after
    # the first good read of a.bin that began after the fault: the line before it (the
    # reader's previous read; the next dd starts only after it) is logged after the fault
    # too. A read that had its bytes before the fault may be logged just after it.
    first_good = min(r.at for prev, r in zip(rs, rs[1:], strict=False)
                     if prev.at > t_fault and r.file == "a.bin" and r.result == SHAS["a.bin"])
    assert container_id(node, pod) == before, "the pod's container restarted"
    print(f"[real-kubelet] {pod}: {label}: fault to first good read {first_good - t_fault:.2f} s; "
          f"{len(rs)} reads, none bad")


def delete_and_check_clean(node: Node, plugin: Plugin, pod: str,
                           last_rpc: str = "NodeUnstageVolume") -> None:
    """Delete *pod*: the kubelet's *last_rpc* for its volume returns and nothing is left."""
    log_from = node.kubelet_log.stat().st_size
    unstaged_before = plugin.log().count(f"{last_rpc} ok")
    t0 = time.monotonic()
    node.kubectl("delete", "pod", pod, "--wait=false")
    empty: dict[str, object] = {"mounts": [], "processes": [], "records": []}
    last: dict[str, object] = {}

    def clean() -> bool:  # the kubelet's NodeUnstageVolume returned, and nothing is left
        last.update(plugin.leftovers())
        last["unstaged"] = plugin.log().count(f"{last_rpc} ok") > unstaged_before
        return last == {**empty, "unstaged": True}
    try:
        took = wait_for("nothing left after the pod was deleted", clean, 60)
    except AssertionError:
        raise AssertionError(f"left after 60 s: {last}") from None
    with open(node.kubelet_log, "rb") as f:
        f.seek(log_from)
        new = f.read().decode(errors="replace")
    assert STILL_MOUNTED not in new, [ln for ln in new.splitlines() if STILL_MOUNTED in ln][:2]
    print(f"[real-kubelet] {pod}: delete to clean {took:.2f} s (in {time.monotonic() - t0:.2f} s "
          "with the last poll)")


def kill_plugin_and_server(p: Plugin) -> Callable[[], None]:
    def fault() -> None:
        servers = p.fuse_servers()
        assert servers, "no FUSE server to kill"
        p.stop(signal.SIGKILL)
        for pid in servers:
            os.kill(pid, signal.SIGKILL)
        p.start()
    return fault


def rolling_restart(p: Plugin) -> Callable[[], None]:
    """SIGTERM (what the kubelet sends when a DaemonSet rolls), then a new version starts."""
    def fault() -> None:
        p.stop(signal.SIGTERM)
        v2 = p.root / "fusecache-v2"
        v2.write_text(f"#!/bin/sh\nexec {VENV_BIN / 'fusecache'} \"$@\"\n")
        v2.chmod(0o755)
        p.start(fusecache_bin=v2)
    return fault


@pytest.mark.timeout(900)
def test_pod_reads_through_plugin_and_fuse_server_sigkill(node: Node, volume: str, plugin) -> None:  # noqa: ANN001
    """(1) default propagation, no holder: plugin SIGKILL + FUSE server SIGKILL + restart."""
    p = plugin()
    print(f"\n[real-kubelet] p1: Running in {start_pod(node, 'p1', volume):.2f} s")
    fault_and_check(node, "p1", kill_plugin_and_server(p), "plugin+server SIGKILL, plugin restart")
    delete_and_check_clean(node, p, "p1")


@pytest.mark.timeout(900)
def test_pod_reads_through_faults_with_relay_holder(node: Node, volume: str, plugin) -> None:  # noqa: ANN001
    """(2) --relay-holder (the holder a separate host process): SIGKILLs, then a rolling restart."""
    p = plugin(holder=True)
    print(f"\n[real-kubelet] p2: Running in {start_pod(node, 'p2', volume):.2f} s")
    assert p.holder_proc is not None
    relays = [pid for pid in map(int, p.leftovers()["processes"])
              if b"fusecache.relay" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    parents = {int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
               for pid in relays}
    assert relays and parents == {p.holder_proc.pid}, \
        f"the volume's relay is not the holder's child: relays {relays}, parents {parents}"
    fault_and_check(node, "p2", kill_plugin_and_server(p), "plugin+server SIGKILL, plugin restart")
    fault_and_check(node, "p2", rolling_restart(p), "rolling restart (SIGTERM, new version)")
    delete_and_check_clean(node, p, "p2")


@pytest.mark.timeout(600)
def test_deleted_pod_leaves_nothing(node: Node, volume: str, plugin) -> None:  # noqa: ANN001
    """(3) no fault: the kubelet unstages; nothing of the volume is left within 60 s."""
    p = plugin()
    print(f"\n[real-kubelet] p3: Running in {start_pod(node, 'p3', volume):.2f} s")
    wait_for("p3: a good round", lambda: good_rounds_after(reads(node, "p3"), 0) >= 1, 60)
    assert p.leftovers()["mounts"], "the volume is not mounted while the pod runs"
    delete_and_check_clean(node, p, "p3")



def test_a_pods_inline_volume_reads_and_leaves_nothing(node: Node, volume: str, local_s3,
                                                      plugin) -> None:  # noqa: ANN001
    """(4) A pod naming the S3 location in its own volumes (a CSI ephemeral inline volume,
    with a nodePublishSecretRef in its namespace): the kubelet publishes it without staging,
    the pod reads every byte, and deleting the pod leaves nothing of the volume."""
    p = plugin()
    node.kubectl("-n", "default", "create", "secret", "generic", "fusecache-s3-inline",
                 f"--from-literal=accessKeyID={local_s3.access_key}",
                 f"--from-literal=secretAccessKey={local_s3.secret_key}", check=False)
    inline = {"driver": DRIVER, "readOnly": True,
              "volumeAttributes": {"bucket": "klds", "prefix": "ds",
                                   "endpointUrl": local_s3.endpoint_url, "region": "us-east-1"},
              "nodePublishSecretRef": {"name": "fusecache-s3-inline"}}
    print(f"\n[real-kubelet] p4: Running in {start_pod(node, 'p4', '', inline):.2f} s")
    wait_for("p4: 2 good rounds", lambda: good_rounds_after(reads(node, "p4"), 0) >= 2, 60)
    assert_all_good(reads(node, "p4"))
    assert p.leftovers()["mounts"], "the inline volume is not mounted while the pod runs"
    assert "NodeStageVolume" not in p.log()
    delete_and_check_clean(node, p, "p4", last_rpc="NodeUnpublishVolume")


def _terminate(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM *proc*, SIGKILL it after *timeout* seconds."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _provisioner_bin() -> Path:
    return Path(os.environ.get("FUSECACHE_K8S_ASSETS", "")) / "csi-provisioner"


def _manifest_provisioner_args() -> list[str]:
    """The csi-provisioner's args as manifests/controller.yaml gives them."""
    doc = yaml.safe_load((REPO / "manifests" / "controller.yaml").read_text())
    containers = doc["spec"]["template"]["spec"]["containers"]
    return next(c["args"] for c in containers if c["name"] == "csi-provisioner")


@pytest.fixture()
def provisioned(node: Node, plugin) -> Iterator[Plugin]:  # noqa: ANN001
    """The plugin, and the real csi-provisioner sidecar on its socket with the manifest's
    args (the socket and a kubeconfig swapped in): CreateVolume and DeleteVolume are
    called by the sidecar as in a cluster, from PVCs the API server holds."""
    if not os.access(_provisioner_bin(), os.X_OK):
        pytest.skip(f"no csi-provisioner in FUSECACHE_K8S_ASSETS ({_provisioner_bin()}): "
                    "build kubernetes-csi/external-provisioner's cmd/csi-provisioner there")
    p = plugin()
    args = [a for a in _manifest_provisioner_args() if not a.startswith("--csi-address")]
    assert "--extra-create-metadata" in args
    argv = [str(_provisioner_bin()), f"--csi-address={p.socket}",
            f"--kubeconfig={node.env['KUBECONFIG']}", "-v=4", *args]
    log_path = p.root / "provisioner.log"
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield p
    finally:
        _terminate(proc, 20)
        if proc.returncode not in (0, -signal.SIGTERM):
            print(f"---- csi-provisioner log ----\n{log_path.read_text(errors='replace')[-6000:]}")


def _storage_class(node: Node, local_s3, name: str, **params: str) -> None:  # noqa: ANN001
    """manifests/examples/storageclass.yaml under *name*, pointed at the session's S3."""
    sc = yaml.safe_load((REPO / "manifests" / "examples" / "storageclass.yaml").read_text())
    sc["metadata"]["name"] = name
    sc["parameters"].update({"bucket": "klds", "endpointUrl": local_s3.endpoint_url, **params})
    sc["parameters"] = {k: v for k, v in sc["parameters"].items() if v != ""}
    node.kubectl("apply", "-f", "-", stdin=json.dumps(sc))


def _claim_phase(node: Node, ns: str, name: str) -> str:
    return node.kubectl("-n", ns, "get", "pvc", name, "-o", "jsonpath={.status.phase}",
                        check=False)


def _pv_gone(node: Node, pv: str) -> bool:
    return not node.kubectl("get", "pv", "--ignore-not-found", "-o", "name", pv).strip()


@pytest.mark.timeout(600)
def test_a_pvc_of_the_storage_class_is_provisioned_mounted_and_deleted(
        node: Node, local_s3, provisioned: Plugin) -> None:  # noqa: ANN001
    """(5) The user's path of the README: a PVC of a fusecache StorageClass (the example
    class, prefixPolicy pvcName) is provisioned by the real csi-provisioner, bound,
    staged and published by the kubelet, and the pod reads every byte of s3://klds/ds;
    deleting the pod unstages it, deleting the claim deletes its PV."""
    p = provisioned
    _storage_class(node, local_s3, "fusecache-kl", prefix="")
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "ds", "namespace": "default"},
             "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "fusecache-kl",
                      "resources": {"requests": {"storage": "1Gi"}}}}
    node.kubectl("apply", "-f", "-", stdin=json.dumps(claim))
    took = wait_for("PVC ds Bound by the csi-provisioner",
                    lambda: _claim_phase(node, "default", "ds") == "Bound", 90)
    pv_name = node.kubectl("get", "pvc", "ds", "-o", "jsonpath={.spec.volumeName}")
    pv = json.loads(node.kubectl("get", "pv", pv_name, "-o", "json"))
    attrs = pv["spec"]["csi"]["volumeAttributes"]
    assert (attrs["bucket"], attrs["prefix"]) == ("klds", "ds"), attrs
    assert pv["spec"]["csi"]["nodeStageSecretRef"] == {"name": "fusecache-s3",
                                                       "namespace": "fusecache"}
    assert "CreateVolume ok" in p.log()
    print(f"\n[real-kubelet] PVC ds bound in {took:.2f} s to {pv_name}")
    print(f"[real-kubelet] p5: Running in {start_pod(node, 'p5', 'ds'):.2f} s")
    wait_for("p5: 2 good rounds", lambda: good_rounds_after(reads(node, "p5"), 0) >= 2, 60)
    assert_all_good(reads(node, "p5"))
    delete_and_check_clean(node, p, "p5")
    node.kubectl("delete", "pvc", "ds", "--wait=false")
    wait_for(f"PV {pv_name} deleted (reclaimPolicy Delete)", lambda: _pv_gone(node, pv_name), 90)
    assert "DeleteVolume ok" in p.log()


@pytest.mark.timeout(600)
def test_a_pods_generic_ephemeral_volume_of_the_class_reads_and_goes_with_the_pod(
        node: Node, local_s3, provisioned: Plugin) -> None:  # noqa: ANN001
    """(6) A pod's own claim from ``ephemeral.volumeClaimTemplate`` of a fusecache class
    (prefixPolicy fixed: the class names the dataset): kube-controller-manager makes the
    claim ``<pod>-<volume>``, the csi-provisioner provisions it, the pod reads every byte;
    deleting the pod unstages the volume and the garbage collector takes the claim and
    its PV."""
    p = provisioned
    _storage_class(node, local_s3, "fusecache-kl-fixed", prefix="ds", prefixPolicy="fixed")
    ephemeral = {"ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadOnlyMany"], "storageClassName": "fusecache-kl-fixed",
        "resources": {"requests": {"storage": "1Gi"}}}}}}
    print(f"\n[real-kubelet] p6: Running in {start_pod(node, 'p6', '', source=ephemeral):.2f} s")
    claim = json.loads(node.kubectl("get", "pvc", "p6-d", "-o", "json"))
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner.get("controller")) == ("Pod", "p6", True)
    pv_name = claim["spec"]["volumeName"]
    attrs = json.loads(node.kubectl("get", "pv", pv_name, "-o", "json"))["spec"]["csi"][
        "volumeAttributes"]
    assert (attrs["bucket"], attrs["prefix"]) == ("klds", "ds"), attrs
    wait_for("p6: 2 good rounds", lambda: good_rounds_after(reads(node, "p6"), 0) >= 2, 60)
    assert_all_good(reads(node, "p6"))
    delete_and_check_clean(node, p, "p6")
    wait_for("the pod's claim p6-d garbage-collected",
             lambda: not node.kubectl("get", "pvc", "--ignore-not-found", "-o", "name",
                                      "p6-d").strip(), 90)
    wait_for(f"PV {pv_name} deleted", lambda: _pv_gone(node, pv_name), 90)


class _KubectlCluster:
    """argo_sim's Cluster through the node's kubectl (admin): what Argo's controller writes."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def create(self, obj: dict) -> dict:
        body = {k: v for k, v in obj.items() if k != "status"}
        return json.loads(self.node.kubectl("create", "-o", "json", "-f", "-",
                                            stdin=json.dumps(body)))

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        res = f"{kind.lower()}s.{api_version.split('/')[0]}" if "/" in api_version else kind
        return json.loads(self.node.kubectl("-n", namespace or "default", "get", res, name,
                                            "-o", "json"))

    def patch(self, api_version: str, kind: str, name: str, body: dict,
              namespace: str | None = None, status: bool = False) -> dict:
        res = f"{kind.lower()}s.{api_version.split('/')[0]}" if "/" in api_version else kind
        sub = ["--subresource=status"] if status and kind in ("Pod",) else []
        return json.loads(self.node.kubectl("-n", namespace or "default", "patch", res, name,
                                            "--type=merge", "-p", json.dumps(body), *sub,
                                            "-o", "json"))


def _runnable(pod: dict, image: str, reader: str) -> dict:
    """Argo's step pod with what this node can run in place of argoexec (no registry here):
    busybox for its init and wait containers, the reader as its main; labels, annotations,
    owner, volumes and mounts stay as Argo's controller makes them. A grace period of 2 s (a
    shell as PID 1 ignores SIGTERM, and the default 30 s would only slow the test)."""
    spec = pod["spec"]
    spec["terminationGracePeriodSeconds"] = 2
    for c in [*spec["initContainers"], *spec["containers"]]:
        c["image"], c["imagePullPolicy"] = image, "Never"
        c["command"] = ["sh", "-c", reader if c["name"] == "main" else "true"]
        c.pop("args", None)
    return pod


@pytest.mark.timeout(600)
def test_a_workflow_step_reads_what_the_agent_warmed_with_s3_stopped(
        node: Node, private_s3, plugin, tmp_path: Path) -> None:  # noqa: ANN001
    """(7) The product's promise on a real kubelet: an Argo Workflow whose train step mounts a
    claim of the driver is created; ``prefetchd run --kubernetes`` for this node plans it and
    warms the claim's dataset into the node cache the plugin's mounts use; S3 is stopped;
    then the step's pod, as Argo's controller makes it (labels, annotations, owner, the
    claim's volume; busybox in place of argoexec), runs under the kubelet and reads every
    byte from the node cache: no read fails, every sha256 is right."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "k8s"))
    import argo_sim

    client = private_s3.client()
    client.create_bucket(Bucket="wfds")
    for name, data in FILES.items():
        client.put_object(Bucket="wfds", Key=f"train/{name}", Body=data)
    node.bash(f"K8S_ARGO_CRDS={REPO.parent / 'shared' / 'k8s' / 'crds' / 'argo'} "
              "k8s_apply_argo_crds >&2")
    node.kubectl("create", "namespace", "fusecache", check=False)
    node.kubectl("-n", "fusecache", "create", "secret", "generic", "fusecache-s3-wf",
                 f"--from-literal=accessKeyID={private_s3.access_key}",
                 f"--from-literal=secretAccessKey={private_s3.secret_key}")
    pv = argo_sim.static_pv("wf-ds", "wfds", "train", private_s3.endpoint_url)
    pv["spec"]["csi"]["nodeStageSecretRef"] = {"name": "fusecache-s3-wf",
                                               "namespace": "fusecache"}
    pv["spec"]["claimRef"] = {"namespace": "default", "name": "wf-ds"}
    pvc = argo_sim.claim("wf-ds", "default", volume="wf-ds")
    node.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": [pv, pvc]}))
    wait_for("PVC wf-ds Bound", lambda: _claim_phase(node, "default", "wf-ds") == "Bound", 60)
    p = plugin()
    agent_log = tmp_path / "agent.log"
    env = {**p._env(), "HOME": str(tmp_path)}
    with open(agent_log, "ab") as logf:
        agent = subprocess.Popen(
            [str(VENV_BIN / "prefetchd"), "--log-level", "INFO", "run", "--kubernetes",
             "--kubeconfig", node.env["KUBECONFIG"], "--node-name", node.env["KL_NODE"],
             "--cache-dir", str(p.root / "cache"), "--publish-interval", "1"],
            env=env, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    p.procs.append(agent)  # the plugin's own: not a leftover of the volume
    try:
        cluster = _KubectlCluster(node)
        wf = cluster.create(argo_sim.argo_workflow("wf1", "default", "wf-ds", data_arg="/data/"))
        run = argo_sim.ArgoRun(cluster, wf)
        run.start()
        t0 = time.monotonic()
        wait_for("the agent warming the claim's dataset for the workflow", lambda: any(
            "warmed s3://wfds/train" in ln and "for workflow default/wf1" in ln
            for ln in agent_log.read_text(errors="replace").splitlines()), 120)
        print(f"\n[real-kubelet] wf1: warmed {time.monotonic() - t0:.2f} s after creation")
        private_s3.stop()
        run.argo_step("prepare", "Succeeded")
        pod = run.argo_step("train", "Pending", create_pod=True)
        assert pod is not None
        cluster.create(_runnable(pod, node.env["KL_BUSYBOX_IMAGE"], READER))
        name = pod["metadata"]["name"]
        took = float(node.bash(f"kl_wait_pod_phase default {name} Running 120").strip())
        print(f"[real-kubelet] {name}: Running in {took:.2f} s, S3 stopped")
        wait_for(f"{name}: 2 good rounds from the node cache",
                 lambda: good_rounds_after(reads(node, name), 0) >= 2, 60)
        assert_all_good(reads(node, name))
        delete_and_check_clean(node, p, name)
    except BaseException:
        print(f"---- agent log ----\n{agent_log.read_text(errors='replace')[-6000:]}")
        raise
    finally:
        _terminate(agent, 30)
    assert private_s3.secret_key not in agent_log.read_text(errors="replace")
