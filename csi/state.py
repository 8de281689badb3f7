"""Persistent state: what this node has staged and published, and the controller's
registry of volumes it created. Plain JSON files, written atomically.

Why persist: Kubernetes does not repeat NodeStageVolume after a plugin restart,
so the plugin itself must remember every staged volume (its S3 location, its
staging path, its published target paths) to re-establish the mounts in place.

Secrets are needed for that too (the restarted plugin must remount with the
same credentials). They are kept apart from the state, in ``secrets_dir``
(mode 0700, files 0600, root only); the manifests put that directory on the
node's tmpfs (/run) so credentials never reach a disk and vanish at reboot,
when Kubernetes stages everything again anyway.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# logs of ended volumes kept on a node (NodeStore.prune_logs)
KEPT_LOGS = 32


def _write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    """Write-then-rename so a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


@dataclass
class StagedVolume:
    """A volume staged on this node: one fusecache mount plus bind mounts of it."""

    volume_id: str
    key: str
    staging_path: str   # the FUSE mount itself (the kubelet's device mount path)
    context: dict[str, str]
    targets: dict[str, bool] = field(default_factory=dict)  # target path -> read-only
    relay_pid: int = 0  # the process holding the FUSE connection (fusecache.relay)
    # target -> when the FUSE connection under it was lost and made anew (its relay died):
    # containers that had it mounted keep the dead one until their pod is published again
    remounted: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StagedVolume:
        """A record, ignoring fields this version does not know."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class NodeStateStore:
    """``<state_dir>/node/volumes/<key>.json`` and ``<secrets_dir>/<key>.json``."""

    def __init__(self, state_dir: Path, secrets_dir: Path) -> None:
        self.volumes_dir = state_dir / "node" / "volumes"
        self.logs_dir = state_dir / "node" / "logs"
        self.relays_dir = state_dir / "node" / "relays"
        self.secrets_dir = secrets_dir
        for d in (self.volumes_dir, self.logs_dir, self.relays_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.secrets_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.secrets_dir, 0o700)

    def log_file_for(self, key: str) -> Path:
        return self.logs_dir / f"{key}.log"

    def spec_file_for(self, key: str) -> Path:
        """The server command line the volume's relay runs (re-read on SIGHUP)."""
        return self.relays_dir / f"{key}.json"

    def get(self, key: str) -> StagedVolume | None:
        data = _read_json(self.volumes_dir / f"{key}.json")
        return StagedVolume.from_json(data) if data else None

    def save(self, vol: StagedVolume) -> None:
        _write_json(self.volumes_dir / f"{vol.key}.json", asdict(vol))

    def delete(self, key: str) -> None:
        for path in (self.volumes_dir / f"{key}.json", self.secrets_dir / f"{key}.json",
                     self.spec_file_for(key)):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.prune_logs()

    def prune_logs(self, keep: int = KEPT_LOGS) -> None:
        """Keep the logs of volumes no longer staged for the *keep* most recently ended
        (what went wrong in a pod just gone can still be read), and no more: every inline
        volume has a key of its own, so they grew without end (a blind test of the plugin:
        167 files with no volume staged)."""
        staged = {p.stem for p in self.volumes_dir.glob("*.json")}
        ended: dict[str, float] = {}
        for p in self.logs_dir.iterdir():
            key = p.name.split(".", 1)[0]
            if key not in staged:
                with contextlib.suppress(OSError):
                    ended[key] = max(ended.get(key, 0.0), p.stat().st_mtime)
        for key in sorted(ended, key=ended.__getitem__, reverse=True)[keep:]:
            for p in self.logs_dir.glob(f"{key}.*"):
                with contextlib.suppress(OSError):
                    p.unlink()
        # a relay's hand-over file outlives it only when the relay was killed while its
        # server started (an hour is far past any start)
        for p in self.relays_dir.glob("fusecache-restore-*.json"):
            with contextlib.suppress(OSError):
                if p.stat().st_mtime < time.time() - 3600:
                    p.unlink()

    def all(self) -> list[StagedVolume]:
        out = []
        for path in sorted(self.volumes_dir.glob("*.json")):
            data = _read_json(path)
            if data:
                out.append(StagedVolume.from_json(data))
        return out

    def save_secrets(self, key: str, secrets: dict[str, str]) -> None:
        if secrets:
            _write_json(self.secrets_dir / f"{key}.json", secrets, mode=0o600)
        else:
            try:
                (self.secrets_dir / f"{key}.json").unlink()
            except FileNotFoundError:
                pass

    def load_secrets(self, key: str) -> dict[str, str]:
        return _read_json(self.secrets_dir / f"{key}.json") or {}


@dataclass
class VolumeRecord:
    """A volume created by CreateVolume, kept for idempotency checks."""

    name: str
    volume_id: str
    capacity_bytes: int
    required_bytes: int
    limit_bytes: int
    context: dict[str, str]


class ControllerRegistry:
    """``<state_dir>/controller/volumes/<sha of volume id>.json``."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "controller" / "volumes"
        self.dir.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> VolumeRecord | None:
        data = _read_json(self.dir / f"{key}.json")
        return VolumeRecord(**data) if data else None

    def save(self, key: str, rec: VolumeRecord) -> None:
        _write_json(self.dir / f"{key}.json", asdict(rec))

    def delete(self, key: str) -> None:
        try:
            (self.dir / f"{key}.json").unlink()
        except FileNotFoundError:
            pass
