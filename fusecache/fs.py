"""The pyfuse3 adapter: unpack the request, call the core, build the reply.

All errno translation happens in ``_errno`` (one table). pyfuse3 lets any
exception other than FUSEError escape its main loop and end the mount, so every
handler funnels through ``_guard``, which turns unexpected errors into EIO after
logging them once.
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import pyfuse3
import trio

from fusecache import errors
from fusecache.dirahead import FolderReadAhead
from fusecache.listings import DirRecord
from fusecache.namespace import Namespace, Node
from fusecache.nodecache import ObjectId, block_key
from fusecache.pagein import PageInBudget
from fusecache.reader import BlockReader, ReadState

log = logging.getLogger(__name__)
T = TypeVar("T")

_ERRNO: list[tuple[type[BaseException], int]] = [
    (errors.ObjectNotFound, errno.ENOENT),
    (errors.BucketNotFound, errno.ENOENT),
    (errors.ObjectChanged, errno.ESTALE),
    (errors.AccessDenied, errno.EACCES),
    (errors.DeadlineExceeded, errno.EIO),
    (errors.IntegrityError, errno.EIO),
    (errors.StoreError, errno.EIO),
]
# The kernel caches entries and attributes this long at most, even with an
# indefinite TTL, so that a forgotten inode cannot pin stale metadata forever.
_MAX_KERNEL_TTL = 24 * 3600.0
# What statfs says the mount holds (a bucket's size is unknown): 1 PiB, 2^32 files.
_STATFS_BYTES = 1 << 50
_STATFS_FILES = 1 << 32
# Bytes asked into the page cache at LOOKUP and not opened yet, at most (pagein.py).
_LOOKUP_PAGE_IN_BYTES = 64 * 1024 * 1024


def _errno(e: BaseException) -> int:
    for cls, code in _ERRNO:
        if isinstance(e, cls):
            return code
    return errno.EIO


class _FailureLog:
    """Warnings of failed operations, at most ``most`` per ``window`` seconds for the errors
    of an outage (S3 unreachable, no answer in time): busy readers of a down S3 failed
    hundreds of reads a second, and one warning each rotated the outage's first messages
    out of the log within a minute (blind FUSE round 3). Past that, one line a window says
    how many were not logged. Others (access denied, a changed object) always log."""

    def __init__(self, most: int = 20, window: float = 60.0) -> None:
        self.most, self.window = most, window
        self._start = -math.inf
        self._logged = self._dropped = 0

    def warning(self, what: str, e: BaseException) -> None:
        if not isinstance(e, (errors.StoreUnavailable, errors.DeadlineExceeded)):
            log.warning("%s: %s", what, e)
            return
        now = trio.current_time()  # (handlers run on the mount's trio loop)
        if now - self._start >= self.window:
            if self._dropped:
                log.warning("%d more failed operations not logged in the last %gs (%s)",
                            self._dropped, self.window, type(e).__name__)
            self._start, self._logged, self._dropped = now, 0, 0
        if self._logged < self.most:
            self._logged += 1
            log.warning("%s: %s", what, e)
        else:
            self._dropped += 1


_FAILURES = _FailureLog()


async def _guard(what: str, fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return await fn()
    except pyfuse3.FUSEError:
        raise
    except errors.ObjectNotFound:
        raise pyfuse3.FUSEError(errno.ENOENT) from None
    except errors.FusecacheError as e:
        _FAILURES.warning(what, e)
        raise pyfuse3.FUSEError(_errno(e)) from None
    except Exception:
        log.exception("%s: unexpected error (returning EIO)", what)
        raise pyfuse3.FUSEError(errno.EIO) from None


@dataclass
class _FileHandle:
    node: Node
    oid: object | None  # None: opened by a previous server, resolved on first read
    state: ReadState


@dataclass
class _DirHandle:
    node: Node
    rec: DirRecord | None = None
    position: int = 0           # entries already returned
    after: str | None = None    # name of the last one returned


class FuseOperations(pyfuse3.Operations):
    """Read-only operations over a Namespace and a BlockReader."""

    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, namespace: Namespace, reader: BlockReader, *, uid: int | None = None,
                 gid: int | None = None, file_mode: int = 0o444, dir_mode: int = 0o555,
                 folder_readahead: FolderReadAhead | None = None,
                 open_prefill: int = 0, on_prefill: Callable[[], None] | None = None
                 ) -> None:
        super().__init__()
        self.ns = namespace
        self.reader = reader
        self.folder_readahead = folder_readahead
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.file_mode, self.dir_mode = file_mode, dir_mode
        self.kernel_ttl = min(namespace.ttl, _MAX_KERNEL_TTL)
        self.open_prefill = open_prefill
        self._on_prefill = on_prefill
        self.init_done = trio.Event()
        self._fh = itertools.count(1)
        self._files: dict[int, _FileHandle] = {}
        self._dirs: dict[int, _DirHandle] = {}
        # Small files' bytes asked in at LOOKUP and not opened yet: a stat of a whole
        # prefetched tree must not read the tree from disk.
        self._page_ins = PageInBudget(_LOOKUP_PAGE_IN_BYTES)

    def init(self) -> None:
        """FUSE INIT arrived; the reply follows right after this returns."""
        self.init_done.set()

    def restore(self, state: dict) -> None:
        """Take over from a previous server of the same connection (fusecache.relay):
        the node ids the kernel holds and its open file and directory handles."""
        self.ns.restore([tuple(n) for n in state.get("nodes", [])])
        for fh, ino in state.get("files", []):
            node = self.ns.find(ino)
            if node is not None:
                self._files[fh] = _FileHandle(node, None, ReadState())
        for fh, ino in state.get("dirs", []):
            node = self.ns.find(ino)
            if node is not None:
                self._dirs[fh] = _DirHandle(node)
        self._fh = itertools.count(max([0, *self._files, *self._dirs]) + 1)
        log.info("took over %d inode(s), %d open file(s), %d open dir(s)",
                 len(self.ns) - 1, len(self._files), len(self._dirs))

    # -- attributes ---------------------------------------------------------------

    def _attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = 0
        # what is left of the node's TTL, not a whole one from now: an entry served late
        # from a listing must not outlive the listing's TTL in the kernel (a folder's
        # attributes never change, so its own stay cached)
        left = min(self.kernel_ttl, self.ns.valid_for(node))
        a.entry_timeout = left
        a.attr_timeout = self.kernel_ttl if node.is_dir else left
        if node.is_dir:
            a.st_mode = stat.S_IFDIR | self.dir_mode
            a.st_nlink = 2
            a.st_size = 0
        else:
            a.st_mode = stat.S_IFREG | self.file_mode
            a.st_nlink = 1
            a.st_size = node.size
        a.st_uid = self.uid
        a.st_gid = self.gid
        a.st_blksize = 1 << 20
        a.st_blocks = (a.st_size + 511) // 512
        ns = int((node.mtime if math.isfinite(node.mtime) else 0) * 1e9)
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = ns
        return a

    async def lookup(self, parent_inode, name, ctx=None):
        async def go():
            node = await self.ns.lookup(parent_inode, os.fsdecode(name))
            if (self.open_prefill > 0 and not node.is_dir and node.opened_etag is None
                    and node.etag and not node.restored):
                # Its OPEN comes next and will want the bytes the prefill hands over.
                oid = self.ns.object_id(node)
                key = self.reader.advise_small_object(oid, self.open_prefill,
                                                      self._page_ins.room())
                if key is not None:
                    self._page_ins.add(key, oid.size)
            return self._attrs(node)
        return await _guard(f"lookup {name!r}", go)

    async def forget(self, inode_list):
        for ino, n in inode_list:
            self.ns.forget(ino, n)

    async def getattr(self, inode, ctx=None):
        async def go():
            node = self.ns.get(inode)
            if not node.is_dir:
                node = await self.ns.rehydrate(node)
                try:
                    node = await self.ns.revalidate(node)
                except errors.ObjectNotFound:
                    if any(h.node is node for h in self._files.values()):
                        # a file open here whose object is gone: the kernel asks before it
                        # reads (its attributes expired), and read(2) would get ENOENT;
                        # ESTALE, as a read through it says (blind FUSE round 3)
                        raise pyfuse3.FUSEError(errno.ESTALE) from None
                    raise
            return self._attrs(node)
        return await _guard(f"getattr {inode}", go)

    async def statfs(self, ctx):
        """A bucket has no size to tell: a large one, as Mountpoint and s3fs say, so that
        ``df`` lists the mount (it hides file systems of 0 blocks) and tools that check for
        a real file system accept it; all of it free, as theirs, so that no disk-full alert
        (node-exporter's) fires on a read-only mount (``ro`` says it takes no writes)."""
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 1 << 20
        s.f_blocks = s.f_bfree = s.f_bavail = _STATFS_BYTES // s.f_frsize
        s.f_files = s.f_ffree = s.f_favail = _STATFS_FILES
        s.f_namemax = 255
        return s

    # -- files --------------------------------------------------------------------------

    async def open(self, inode, flags, ctx):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise pyfuse3.FUSEError(errno.EROFS)

        async def go():
            node = self.ns.get(inode)
            if node.is_dir:
                raise pyfuse3.FUSEError(errno.EISDIR)
            node = await self.ns.rehydrate(node)
            node = await self.ns.revalidate(node)
            await self.ns.authorize_read(node)
            # The kernel may keep its page cache only while the bytes are the same.
            keep = node.opened_etag == node.etag
            oid = self.ns.object_id(node)
            if self._page_ins.pending_bytes:
                self._page_ins.opened(block_key(oid, 0, self.reader.block_size))
            if node.opened_etag is None and self.open_prefill > 0:
                # Its first open since the kernel took the inode: no page of it is cached
                # yet, so pages handed over now may be kept.
                keep = await self._prefill(inode, oid)
            node.opened_etag = node.etag
            fh = next(self._fh)
            self._files[fh] = _FileHandle(node, oid, ReadState())
            if self.folder_readahead is not None:
                self.folder_readahead.opened(node)
            return pyfuse3.FileInfo(fh=fh, keep_cache=keep)
        return await _guard(f"open {inode}", go)

    async def _prefill(self, inode: int, oid: ObjectId) -> bool:
        """Hand a small cached file to the kernel's page cache before its OPEN is answered
        (FUSE notify store), so that its reads cost no READ request; True if handed.

        A loader reading a prefetched folder pays four requests per file (LOOKUP, OPEN,
        READ, RELEASE), each a trip through the loop; the READ is the one whose bytes can
        travel with the OPEN. The OPEN's reply then keeps the pages (keep_cache)."""
        try:
            data = await self.reader.cached_small_object(oid, self.open_prefill)
        except errors.FusecacheError:
            return False
        if data is None or len(data) != oid.size:
            return False
        try:
            pyfuse3.notify_store(inode, 0, data)
        except OSError as e:
            if e.errno == errno.ENOSYS:  # a kernel without it: stop asking
                self.open_prefill = 0
            log.debug("open prefill of %s: %s", oid.key, e)
            return False
        if self._on_prefill is not None:
            self._on_prefill()
        return True

    async def read(self, fh, off, size):
        handle = self._files.get(fh)
        if handle is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        try:  # inlined _guard: this is the hottest handler
            if handle.oid is None:  # a handle opened by a previous server
                handle.oid = self.ns.object_id(await self.ns.rehydrate(handle.node))
            elif handle.node.etag != handle.oid.etag and not handle.node.restored:
                # The kernel now has the new version's size, this handle the old one's
                # bytes: ESTALE, never the old bytes cut (or run short) at the new size
                # (blind FUSE test: an overwritten object read short with no error).
                raise errors.ObjectChanged(f"s3://{handle.oid.bucket}/{handle.oid.key} "
                                           "changed on the server since it was opened")
            return await self.reader.read(handle.oid, off, size, handle.state)
        except pyfuse3.FUSEError:
            raise
        except errors.FusecacheError as e:
            _FAILURES.warning(f"read {handle.node.key}@{off}", e)
            if isinstance(e, (errors.ObjectChanged, errors.ObjectNotFound)) \
                    and handle.oid is not None:
                await self._seen_changed(handle)
                # the object this file was opened on is gone (deleted): ESTALE as for a
                # new version, not read(2)'s unheard-of ENOENT
                raise pyfuse3.FUSEError(errno.ESTALE) from None
            raise pyfuse3.FUSEError(_errno(e)) from None
        except Exception:
            log.exception("read %s@%d: unexpected error (returning EIO)", handle.node.key, off)
            raise pyfuse3.FUSEError(errno.EIO) from None

    async def _seen_changed(self, handle: _FileHandle) -> None:
        """The object of *handle* changed on the server: the namespace forgets what it knew
        (``Namespace.seen_changed``) and the kernel its attributes, so the next open reads
        the new version with its new size (the kernel kept the old size for its attribute
        timeout and cut the new bytes there). Attributes only, from a worker thread: that
        waits on no page this read holds."""
        assert handle.oid is not None
        if handle.node.etag != handle.oid.etag:
            return
        await self.ns.seen_changed(handle.node, handle.oid)
        try:
            await trio.to_thread.run_sync(pyfuse3.invalidate_inode, handle.node.ino, True)
        except OSError as e:  # (ENOENT: the kernel holds it no more; ENOSYS: too old)
            log.debug("invalidating the attributes of %s: %s", handle.node.key, e)

    async def release(self, fh):
        self._files.pop(fh, None)

    # -- directories ---------------------------------------------------------------------

    async def opendir(self, inode, ctx):
        try:
            node = self.ns.get(inode)
        except errors.ObjectNotFound:
            raise pyfuse3.FUSEError(errno.ENOENT) from None
        if not node.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        fh = next(self._fh)
        self._dirs[fh] = _DirHandle(node)
        return fh

    async def readdir(self, fh, start_id, token):
        handle = self._dirs.get(fh)
        if handle is None:
            raise pyfuse3.FUSEError(errno.EBADF)

        async def go():
            if start_id == 0 or handle.rec is None:
                handle.rec = await self.ns.ensure_listing(handle.node)
                handle.position, handle.after = 0, None
            if start_id != handle.position:  # a seek: walk from the start
                handle.position, handle.after = 0, None
                while handle.position < start_id:
                    batch = await self.ns.dir_entries(handle.node, handle.rec, handle.after,
                                                      min(1024, start_id - handle.position))
                    if not batch:
                        return
                    handle.position += len(batch)
                    handle.after = batch[-1].name
            while True:
                batch = await self.ns.dir_entries(handle.node, handle.rec, handle.after)
                if not batch:
                    return
                for entry in batch:
                    node = self.ns.node_for_entry(handle.node, entry, handle.rec.listed_at)
                    if not pyfuse3.readdir_reply(token, os.fsencode(entry.name),
                                                 self._attrs(node), handle.position + 1):
                        return
                    node.lookups += 1  # readdirplus: the kernel now holds a reference
                    handle.position += 1
                    handle.after = entry.name
        await _guard(f"readdir {handle.node.key}", go)

    async def releasedir(self, fh):
        self._dirs.pop(fh, None)

    # -- everything that would write ---------------------------------------------------------

    async def _erofs(self, *args, **kwargs):
        raise pyfuse3.FUSEError(errno.EROFS)

    setattr = mknod = mkdir = unlink = rmdir = symlink = rename = link = _erofs
    write = create = setxattr = removexattr = _erofs

    async def access(self, inode, mode, ctx):
        if mode & os.W_OK:
            raise pyfuse3.FUSEError(errno.EROFS)
        return True

    # No flush handler: pyfuse3 answers ENOSYS once and the kernel then stops
    # sending FLUSH on every close (one request less per small file).
