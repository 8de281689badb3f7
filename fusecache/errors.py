"""Domain exceptions of the core. Only the FUSE adapter turns them into errnos."""

from __future__ import annotations


class FusecacheError(Exception):
    """Base of every error the core raises on purpose."""


class ConfigError(FusecacheError):
    """Bad user input (URI, size, option). The message names the bad thing."""


class StoreError(FusecacheError):
    """The object store failed in a way retries did not fix."""


class StoreUnavailable(StoreError):
    """The endpoint could not be reached (connection refused, DNS, timeout)."""


class AccessDenied(StoreError):
    """Credentials were refused or lack permission."""


class BucketNotFound(StoreError):
    """The bucket does not exist."""


class ObjectNotFound(StoreError):
    """The key does not exist (any more)."""


class ObjectChanged(StoreError):
    """The object's ETag differs from the one the inode was created with."""


class IntegrityError(FusecacheError):
    """A cached block failed its checksum or has the wrong length."""


class DeadlineExceeded(StoreError):
    """A read could not be served within its time budget."""
