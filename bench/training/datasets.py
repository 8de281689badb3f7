"""The two generated datasets: an ImageNet-like tree of small files and large shards.

Every sample starts with a 16-byte tag derived from its name, so a reader can check
cheaply (no checksum of the whole body) that it got the right sample, whole: the tag
and the length must match. Sizes are drawn from a log-normal around 110 KiB, the
average size of an ImageNet training JPEG.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

KiB = 1 << 10
MiB = 1 << 20
TAG_BYTES = 16
SAMPLE_MEDIAN = 100 * KiB  # log-normal median; with sigma 0.45 the mean is ~110 KiB
SAMPLE_SIGMA = 0.45
SAMPLE_MIN, SAMPLE_MAX = 4 * KiB, 1 * MiB


def tag(name: str) -> bytes:
    return hashlib.blake2b(name.encode(), digest_size=TAG_BYTES).digest()


def check_sample(name: str, data: bytes, size: int) -> None:
    """Raise ValueError unless *data* is the whole of sample *name*."""
    if len(data) != size:
        raise ValueError(f"{name}: got {len(data)} bytes, expected {size}")
    if data[:TAG_BYTES] != tag(name):
        raise ValueError(f"{name}: wrong bytes (tag mismatch)")


def _sample_size(rng: random.Random) -> int:
    s = int(rng.lognormvariate(math.log(SAMPLE_MEDIAN), SAMPLE_SIGMA))
    return max(SAMPLE_MIN, min(SAMPLE_MAX, s))


def _body(rng: random.Random, name: str, size: int) -> bytes:
    return tag(name) + rng.randbytes(size - TAG_BYTES)


@dataclass
class Record:
    """One sample inside a shard (like a member of a WebDataset tar)."""

    name: str
    offset: int
    size: int


@dataclass
class Shard:
    key: str  # relative path, also the S3 key under the dataset prefix
    size: int
    records: list[Record] = field(default_factory=list)


@dataclass
class FilesDataset:
    """Many small files, one sample each, in class folders (train/<class>/<file>)."""

    prefix: str
    files: list[tuple[str, int]]  # (relative path, size)

    @property
    def total_bytes(self) -> int:
        return sum(s for _, s in self.files)

    def describe(self) -> dict:
        sizes = [s for _, s in self.files]
        return {"kind": "files", "prefix": self.prefix, "samples": len(sizes),
                "bytes": sum(sizes), "mean_sample_kib": round(sum(sizes) / len(sizes) / KiB, 1)}


@dataclass
class ShardDataset:
    """A few large files, each a sequence of samples read front to back."""

    prefix: str
    shards: list[Shard]

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.shards)

    @property
    def samples(self) -> int:
        return sum(len(s.records) for s in self.shards)

    def describe(self) -> dict:
        return {"kind": "shards", "prefix": self.prefix, "shards": len(self.shards),
                "samples": self.samples, "bytes": self.total_bytes,
                "shard_mib": [round(s.size / MiB, 1) for s in self.shards]}


def make_files(root: Path, prefix: str, n_files: int, n_classes: int, seed: int) -> FilesDataset:
    """Write *n_files* samples into *n_classes* folders under root/prefix."""
    rng = random.Random(seed)
    n_classes = max(1, min(n_classes, n_files))
    classes = [f"n{rng.randrange(10**7, 10**8):08d}" for _ in range(n_classes)]
    files = []
    for i in range(n_files):
        cls = classes[i % n_classes]
        rel = f"train/{cls}/{cls}_{i:06d}.JPEG"
        size = _sample_size(rng)
        path = root / prefix / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_body(rng, rel, size))
        files.append((rel, size))
    return FilesDataset(prefix, files)


def make_shards(root: Path, prefix: str, n_shards: int, min_bytes: int, max_bytes: int,
                seed: int) -> ShardDataset:
    """Write *n_shards* shards of min..max bytes, each a run of ~110 KiB samples."""
    rng = random.Random(seed)
    shards = []
    for i in range(n_shards):
        key = f"shard-{i:05d}.tar"
        target = rng.randrange(min_bytes, max_bytes + 1)
        shard = Shard(key, 0)
        path = root / prefix / key
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            j = 0
            while shard.size < target:
                name = f"{key}/{j:06d}"
                size = min(_sample_size(rng), max(TAG_BYTES, target - shard.size))
                f.write(_body(rng, name, size))
                shard.records.append(Record(name, shard.size, size))
                shard.size += size
                j += 1
        shards.append(shard)
    return ShardDataset(prefix, shards)


def all_keys(ds: FilesDataset | ShardDataset) -> Iterator[str]:
    if isinstance(ds, FilesDataset):
        yield from (rel for rel, _ in ds.files)
    else:
        yield from (s.key for s in ds.shards)


def upload(client, bucket: str, root: Path, ds: FilesDataset | ShardDataset,
           threads: int = 16) -> None:
    """Put every file of *ds* under s3://bucket/prefix/ (straight to the server)."""
    def put(rel: str) -> None:
        client.upload_file(str(root / ds.prefix / rel), bucket, f"{ds.prefix}/{rel}")

    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(put, all_keys(ds)):
            pass
