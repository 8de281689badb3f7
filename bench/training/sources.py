"""Where a data-loader worker reads samples from: a directory, or S3 through boto3.

A directory covers local disk and every FUSE mount (s3fs, rclone, fusecache): the
training code just opens files. ``Boto3Source`` is what users write without a
filesystem: a GET per sample inside the dataset class, or one streaming GET per shard.
Both are created in the parent and used in forked workers, so the boto3 client is
made lazily, once per worker process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .datasets import Shard


class Source(Protocol):
    label: str

    def read_file(self, rel: str) -> bytes: ...

    def read_shard(self, shard: Shard) -> Iterator[bytes]:
        """The shard's records in order, one bytes object per record."""
        ...


@dataclass
class DirSource:
    root: Path
    label: str = "dir"

    def read_file(self, rel: str) -> bytes:
        with open(self.root / rel, "rb") as f:
            return f.read()

    def read_shard(self, shard: Shard) -> Iterator[bytes]:
        with open(self.root / shard.key, "rb") as f:
            for rec in shard.records:
                yield f.read(rec.size)


@dataclass
class Boto3Source:
    endpoint_url: str
    bucket: str
    prefix: str
    access_key: str
    secret_key: str = field(repr=False)
    label: str = "boto3"
    _client: object = field(default=None, repr=False)
    _pid: int = field(default=0, repr=False)

    def _s3(self):
        if self._client is None or self._pid != os.getpid():
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
                aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                config=Config(retries={"max_attempts": 5, "mode": "standard"}))
            self._pid = os.getpid()
        return self._client

    def read_file(self, rel: str) -> bytes:
        resp = self._s3().get_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}")
        return resp["Body"].read()

    def read_shard(self, shard: Shard) -> Iterator[bytes]:
        resp = self._s3().get_object(Bucket=self.bucket, Key=f"{self.prefix}/{shard.key}")
        body = resp["Body"]
        try:
            for rec in shard.records:
                yield body.read(rec.size)
        finally:
            body.close()
