"""The S3 data plane (fusecache/s3data.py) through S3Store, against a real SeaweedFS.

The native GET must behave as the boto3 one did: exact bytes, the same domain errors
(ObjectChanged on a new ETag, ObjectNotFound, AccessDenied), StoreUnavailable and a
tripped circuit breaker when nothing answers, and boto3 for the keys obstore cannot
name as they are. HTTP faults (5xx, resets, short bodies, stalls) are covered end to end
by tests/faults/test_fault_matrix.py, which now goes through the same code.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from fusecache import errors, s3data
from fusecache.locals3 import LocalS3
from fusecache.s3store import S3Store

pytestmark = [pytest.mark.s3]


def _etag(local_s3: LocalS3, bucket: str, key: str) -> str:
    return local_s3.client().head_object(Bucket=bucket, Key=key)["ETag"].strip('"')


def _store(bucket: str, **kw) -> S3Store:
    st = S3Store(bucket, op_deadline=10.0, max_attempts=2, **kw)
    return st


def test_native_get_is_exact_and_zero_copy(local_s3: LocalS3, s3_env: dict,
                                           bucket: str) -> None:
    data = os.urandom(300_000)
    local_s3.client().put_object(Bucket=bucket, Key="d/x.bin", Body=data)
    st = _store(bucket)
    try:
        assert st._data is not None  # http endpoint, no switch: the native data plane
        got = st.get_range("d/x.bin", 1000, 250_000, _etag(local_s3, bucket, "d/x.bin"))
        assert isinstance(got, memoryview)
        assert bytes(got) == data[1000:250_000]
        assert bytes(st.get_range("d/x.bin", 0, len(data))) == data
    finally:
        st.close()


def test_native_get_streams_into_a_lent_buffer(local_s3: LocalS3, s3_env: dict,
                                               bucket: str) -> None:
    """A whole block the mount lends a buffer for arrives in that buffer (streamed, in
    chunks smaller than the block), byte for byte; a buffer of another size is not
    used; a changed object is still refused."""
    data = os.urandom(3 * s3data._STREAM_CHUNK + 12345)
    local_s3.client().put_object(Bucket=bucket, Key="d/lent.bin", Body=data)
    etag = _etag(local_s3, bucket, "d/lent.bin")
    st = _store(bucket)
    try:
        into = bytearray(len(data) - 7)
        got = st.get_range("d/lent.bin", 7, len(data), etag, into=into)
        assert got is into and into == data[7:]
        wrong = bytearray(10)
        got = st.get_range("d/lent.bin", 0, 100, etag, into=wrong)
        assert bytes(got) == data[:100] and wrong == bytearray(10)
        with pytest.raises(errors.ObjectChanged):
            st.get_range("d/lent.bin", 0, 100, "0" * 32, into=bytearray(100))
    finally:
        st.close()


def test_native_get_says_how_much_of_the_lent_buffer_has_come(
        local_s3: LocalS3, s3_env: dict, bucket: str) -> None:
    """*progress* is told, chunk by chunk, how many first bytes of the lent buffer are
    the body's: rising, each time those bytes already in place, ending at the whole."""
    data = os.urandom(5 * s3data._STREAM_CHUNK + 777)
    local_s3.client().put_object(Bucket=bucket, Key="d/progress.bin", Body=data)
    etag = _etag(local_s3, bucket, "d/progress.bin")
    st = _store(bucket)
    into = bytearray(len(data))
    seen: list[int] = []

    def progress(n: int) -> None:
        assert into[:n] == data[:n]  # in place when announced
        seen.append(n)
    try:
        assert st.get_range("d/progress.bin", 0, len(data), etag, into=into,
                            progress=progress) is into
    finally:
        st.close()
    assert seen == sorted(seen) and len(seen) >= 2 and seen[-1] == len(data)


def test_native_errors_are_the_domain_errors(local_s3: LocalS3, s3_env: dict,
                                             bucket: str) -> None:
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="k", Body=b"a" * 1000)
    old = _etag(local_s3, bucket, "k")
    c.put_object(Bucket=bucket, Key="k", Body=b"b" * 1000)
    st = _store(bucket)
    try:
        with pytest.raises(errors.ObjectChanged):
            st.get_range("k", 0, 100, old)
        with pytest.raises(errors.ObjectNotFound):
            st.get_range("missing", 0, 100)
        assert st.denied_at == 0
    finally:
        st.close()
    bad = _store(bucket, credentials={"aws_access_key_id": local_s3.access_key,
                                      "aws_secret_access_key": "not-the-secret"})
    try:
        with pytest.raises(errors.AccessDenied) as e:
            bad.get_range("k", 0, 100)
        assert "not-the-secret" not in str(e.value)
        assert bad.denied_at > 0
    finally:
        bad.close()
    nob = _store("no-such-bucket-" + bucket[-6:])
    try:
        with pytest.raises(errors.BucketNotFound):
            nob.get_range("k", 0, 100)
    finally:
        nob.close()


def test_a_refused_get_leaves_its_buffer_to_be_freed(local_s3: LocalS3, s3_env: dict,
                                                   bucket: str, no_cyclic_gc: None) -> None:
    """A GET S3 refuses (a changed object: 412; a missing key: 404) raises the domain
    error without a reference cycle through it: with the cyclic collector off, the
    buffer lent for the body is freed as soon as the caller lets go of the error (a cycle
    kept each failed GET's 8 MiB buffer until the collector ran)."""
    import weakref

    class Buf(bytearray):
        pass

    data = os.urandom(100_000)
    local_s3.client().put_object(Bucket=bucket, Key="d/refused.bin", Body=data)
    st = _store(bucket)
    try:
        for key, etag, error in (("d/refused.bin", "0" * 32, errors.ObjectChanged),
                                 ("d/absent.bin", None, errors.ObjectNotFound)):
            into = Buf(len(data))
            ref = weakref.ref(into)
            with pytest.raises(error):
                st.get_range(key, 0, len(data), etag, into=into)
            del into
            assert ref() is None, f"{error.__name__}: the lent buffer is still referred to"
    finally:
        st.close()


def test_native_head_is_boto3s_answer_and_errors(local_s3: LocalS3, s3_env: dict,
                                                bucket: str) -> None:
    """HEAD goes through obstore (boto3's head_object is made to fail here) with the same
    size, ETag and mtime boto3 reports, and the same domain errors."""
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key="dir/h.bin", Body=b"z" * 12345)
    boto3_says = c.head_object(Bucket=bucket, Key="dir/h.bin")
    st = _store(bucket)

    def no_boto3(**kw):
        raise AssertionError("HEAD went through boto3")
    st._client.head_object = no_boto3
    try:
        info = st.head("dir/h.bin")
        assert (info.key, info.size, info.etag) == ("dir/h.bin", 12345,
                                                   boto3_says["ETag"].strip('"'))
        assert abs(info.mtime - boto3_says["LastModified"].timestamp()) < 1
        with pytest.raises(errors.ObjectNotFound):
            st.head("dir/missing.bin")
    finally:
        st.close()
    def head_without_boto3(store: S3Store) -> None:
        store._client.head_object = no_boto3
        store.head("dir/h.bin")
    assert_denied_then_unreachable(local_s3, bucket, head_without_boto3)


def assert_denied_then_unreachable(local_s3: LocalS3, bucket: str,
                                   call: Callable[[S3Store], object]) -> None:
    """*call(store)* is AccessDenied (naming no secret) with a wrong secret, and
    StoreUnavailable, tripping the breaker, with nothing listening."""
    bad = _store(bucket, credentials={"aws_access_key_id": local_s3.access_key,
                                      "aws_secret_access_key": "not-the-secret"})
    try:
        with pytest.raises(errors.AccessDenied) as e:
            call(bad)
        assert "not-the-secret" not in str(e.value)
    finally:
        bad.close()
    gone = _store(bucket, endpoint_url="http://127.0.0.1:9")
    try:
        with pytest.raises(errors.StoreUnavailable):
            call(gone)
        assert gone.breaker.is_open
    finally:
        gone.close()


def test_folder_probe_is_native_and_matches_whole_segments(local_s3: LocalS3, s3_env: dict,
                                                           bucket: str) -> None:
    """has_under (a lookup's "is name/ a folder?") goes through obstore with boto3's
    list_objects_v2 made to fail, and answers as a LIST under 'name/' would: 'd' is a
    folder because of 'd/x', not because of 'dx'; a key obstore cannot name goes through
    boto3; bad credentials are AccessDenied, no listener StoreUnavailable."""
    c = local_s3.client()
    for key in ("d/x", "dx", "d", "e/f/g", "sp ace/x", "p%25/y", "u/\u00e9", "a//b/c"):
        c.put_object(Bucket=bucket, Key=key, Body=b"1")
    st = _store(bucket)
    real_list = st._client.list_objects_v2
    boto3_lists: list[str] = []

    def counting_list(**kw):
        boto3_lists.append(kw["Prefix"])
        return real_list(**kw)
    st._client.list_objects_v2 = counting_list
    try:
        answers = {p: st.has_under(p) for p in (
            "d/", "dx/", "e/", "e/f/", "sp ace/", "p%25/", "u/", "zz/", "d/x/", "e/f/g/")}
        assert answers == {"d/": True, "dx/": False, "e/": True, "e/f/": True,
                           "sp ace/": True, "p%25/": True, "u/": True, "zz/": False,
                           "d/x/": False, "e/f/g/": False}
        assert boto3_lists == []  # every one of them native
        assert st.has_under("a//") is True and boto3_lists == ["a//"]  # not nameable
        assert st.has_under("a//b/") is True and st.has_under("a//c/") is False
    finally:
        st.close()
    assert_denied_then_unreachable(local_s3, bucket, lambda store: store.has_under("d/"))


def test_nothing_listening_trips_the_breaker(s3_env: dict, bucket: str) -> None:
    st = _store(bucket, endpoint_url="http://127.0.0.1:9")
    try:
        assert st._data is not None
        with pytest.raises(errors.StoreUnavailable):
            st.get_range("k", 0, 100)
        assert st.breaker.is_open
        with pytest.raises(errors.StoreUnavailable, match="failing fast"):
            st.get_range("k", 0, 100)
    finally:
        st.close()


@pytest.mark.parametrize("key", ["a//b", "x\ty", "y\x7fz"])
def test_keys_obstore_cannot_name_go_through_boto3(local_s3: LocalS3, s3_env: dict,
                                                   bucket: str, key: str) -> None:
    assert not s3data.native_key(key)
    assert not s3data.native_key("dir/") and s3data.native_key("a b/%20/ü.jpg")
    data = os.urandom(5000)
    c = local_s3.client()
    c.put_object(Bucket=bucket, Key=key, Body=data)
    st = _store(bucket)
    try:
        assert bytes(st.get_range(key, 0, 5000, _etag(local_s3, bucket, key))) == data
        assert (st.head(key).size, st.head(key).etag) == (5000, _etag(local_s3, bucket, key))
    finally:
        st.close()


def test_switch_and_https_ca_bundle_fall_back_to_boto3(local_s3: LocalS3, s3_env: dict,
                                                       bucket: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(2000)
    local_s3.client().put_object(Bucket=bucket, Key="k", Body=data)
    monkeypatch.setenv(s3data.ENV_SWITCH, "boto3")
    st = _store(bucket)
    try:
        assert st._data is None
        got = st.get_range("k", 0, 2000)
        assert isinstance(got, bytes) and got == data
    finally:
        st.close()
    monkeypatch.delenv(s3data.ENV_SWITCH)
    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    assert s3data.usable("https://s3.example.com") is not None
    assert s3data.usable(local_s3.endpoint_url) is None


def _paged(st: S3Store, prefix: str) -> tuple[list[tuple[str, int, str]], list[str]]:
    """What boto3's delimiter listing says of *prefix*, over all its pages (but the
    folder's own marker, which a listing of the namespace skips)."""
    objects, prefixes, token = [], [], None
    while True:
        page = st.list_page(prefix, token, max_keys=7)
        objects += [(o.key, o.size, o.etag) for o in page.objects if o.key != prefix]
        prefixes += page.prefixes
        token = page.next_token
        if token is None:
            return sorted(objects), sorted(prefixes)


def test_folder_listing_is_native_and_says_what_boto3s_pages_say(
        local_s3: LocalS3, s3_env: dict, bucket: str) -> None:
    """list_dir (one native LIST for a folder) gives the objects and subfolders that
    boto3's paged delimiter listing gives, sizes, ETags and mtimes included, and steps
    aside (None: the caller pages through boto3) wherever the native names could mean
    something else: an empty object with nothing under it (empty file or folder marker
    'name/'), a key it cannot name, a wide tree whose first page is all subfolders."""
    c = local_s3.client()
    layout = {
        "flat/": [f"flat/f{i:04d}.jpg" for i in range(30)],
        # a marker of the folder itself, a marker of a subfolder with objects under it,
        # names S3 allows and a path type might mangle
        "mixed/": ["mixed/", "mixed/sub/", "mixed/sub/x", "mixed/sub/deeper/y", "mixed/a b",
                   "mixed/p%25", "mixed/\u00e9t\u00e9", "mixed/q?x", "mixed/h#x", "mixed/z",
                   "mixed/%2F", "mixed/a+b&c=d", "mixed/(x)[y]{z}~!*';:@$,", "mixed/\U0001F600"],
        "emptyfile/": ["emptyfile/a", "emptyfile/zero"],
        "marker/": ["marker/a", "marker/empty/"],
        "odd/": ["odd/a", "odd/t\tab"],
    }
    for keys in layout.values():
        for k in keys:
            body = b"" if k.endswith("/") or k.endswith("zero") else k.encode() * 3
            c.put_object(Bucket=bucket, Key=k, Body=body)
    for i in range(1001):  # a wide tree: the first native page is all subfolders
        c.put_object(Bucket=bucket, Key=f"wide/d{i:04d}/x", Body=b"1")
    st = _store(bucket)
    try:
        native = {}
        for prefix in ("flat/", "mixed/", "mixed/sub/", "nothing/", "emptyfile/", "marker/",
                       "odd/", "wide/"):
            native[prefix] = st.list_dir(prefix)
        for prefix in ("flat/", "mixed/", "mixed/sub/", "nothing/"):
            page = native[prefix]
            assert page is not None and page.next_token is None, prefix
            assert (sorted((o.key, o.size, o.etag) for o in page.objects),
                    sorted(page.prefixes)) == _paged(st, prefix), prefix
        assert [p for p in native["mixed/"].prefixes] == ["mixed/sub/"]
        listed = {o.key: o.mtime for o in native["flat/"].objects}
        boto3_says = c.list_objects_v2(Bucket=bucket, Prefix="flat/")["Contents"]
        assert all(abs(listed[o["Key"]] - o["LastModified"].timestamp()) < 1
                   for o in boto3_says)
        for prefix in ("emptyfile/", "marker/", "odd/", "wide/"):
            assert native[prefix] is None, prefix
        assert st.list_dir("") is None and st.list_dir("a//") is None
    finally:
        st.close()
    assert_denied_then_unreachable(local_s3, bucket, lambda store: store.list_dir("flat/"))


def test_a_mount_lists_folders_natively_and_pages_the_ambiguous_ones(
        local_s3: LocalS3, s3_env: dict, bucket: str, tmp_path) -> None:
    """Through a mount: a folder listed natively and one that needs boto3's pages (an
    empty folder marker beside files) both read back as S3 holds them."""
    from tests.mounting import mounted

    c = local_s3.client()
    for i in range(5):
        c.put_object(Bucket=bucket, Key=f"n/f{i}", Body=bytes([i]) * (i + 1))
    c.put_object(Bucket=bucket, Key="m/f", Body=b"data")
    c.put_object(Bucket=bucket, Key="m/emptydir/", Body=b"")
    c.put_object(Bucket=bucket, Key="m/empty", Body=b"")
    with mounted(f"s3://{bucket}", tmp_path / "m", s3_env,
                 "--cache-dir", str(tmp_path / "cache")) as mp:
        assert sorted(os.listdir(mp / "n")) == [f"f{i}" for i in range(5)]
        assert [(mp / "n" / f"f{i}").read_bytes() for i in range(5)] == \
            [bytes([i]) * (i + 1) for i in range(5)]
        assert sorted(os.listdir(mp / "m")) == ["empty", "emptydir", "f"]
        assert (mp / "m" / "emptydir").is_dir() and (mp / "m" / "empty").read_bytes() == b""


def test_warm_listing_is_native_until_a_name_it_cannot_give_then_boto3_after_it(
        local_s3: LocalS3, s3_env: dict, bucket: str) -> None:
    """list_all (prefetchd warm's recursive listing) gives exactly boto3's keys, sizes
    and ETags in S3's order: through native pages while they name every key as S3 does,
    then boto3 from after the last key given: at an empty object (a folder marker 'a/'
    is named 'a' there) and at a key the native client cannot name."""
    c = local_s3.client()
    keys = [f"big/f{i:05d}" for i in range(2500)]
    keys += [f"mark/a{i:04d}" for i in range(1200)] + ["mark/sub/", "mark/sub/x", "mark/z"]
    keys += [f"odd/a{i:04d}" for i in range(1100)] + ["odd/t\tab", "odd/zz"]

    def put(k: str) -> None:
        c.put_object(Bucket=bucket, Key=k, Body=b"" if k.endswith("/") else k.encode())
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(put, keys))
    st = _store(bucket)
    real_list = st._client.list_objects_v2
    boto3_calls: list[dict] = []

    def counting_list(**kw):
        boto3_calls.append(kw)
        return real_list(**kw)
    st._client.list_objects_v2 = counting_list
    try:
        for prefix, native_only in (("big/", True), ("mark/", False), ("odd/", False),
                                    ("none/", True), ("", False)):
            boto3_calls.clear()
            got = [(o.key, o.size, o.etag) for o in st.list_all(prefix)]
            native_pages = not boto3_calls
            st._client.list_objects_v2 = real_list
            want = []
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                    Prefix=prefix):
                want += [(o["Key"], o["Size"], o["ETag"].strip('"'))
                         for o in page.get("Contents", ())]
            st._client.list_objects_v2 = counting_list
            assert got == want, prefix
            assert native_pages == native_only, (prefix, boto3_calls)
            if not native_only:  # boto3 took over after the native pages' last key
                assert boto3_calls[0].get("StartAfter", "").startswith(prefix), boto3_calls
    finally:
        st.close()


def test_a_bucket_root_is_listed_natively(local_s3: LocalS3, s3_env: dict, bucket: str) -> None:
    """A mount of a whole bucket lists its tree from the root: through the native client
    too (botocore's pages cost ten times the CPU), with boto3's keys, sizes and ETags."""
    c = local_s3.client()
    keys = [f"{d}/c{i % 7}/f{i:04d}" for d in ("imagenet", "shards") for i in range(1100)]
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda k: c.put_object(Bucket=bucket, Key=k, Body=k.encode()), keys))
    st = _store(bucket)
    calls: list[dict] = []
    real_list = st._client.list_objects_v2
    st._client.list_objects_v2 = lambda **kw: calls.append(kw) or real_list(**kw)
    try:
        got = [(o.key, o.size, o.etag) for o in st.list_all("")]
    finally:
        st._client.list_objects_v2 = real_list
        st.close()
    want = [(o["Key"], o["Size"], o["ETag"].strip('"'))
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", ())]
    assert got == want and len(got) == len(keys)
    assert calls == []


class _Body:
    """What obstore.get returns, as far as _stream_into uses it: a body in chunks."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks
        self.asked: list[int] = []

    def stream(self, min_chunk_size: int):
        self.asked.append(min_chunk_size)
        return iter(self.chunks)


def test_a_streamed_body_fills_the_buffer_or_shows_its_true_length() -> None:
    """Exactly the range: the lent buffer itself. Shorter or longer: bytes of another
    length, which S3Store.get_range then refuses as a short or long body."""
    body = _Body(b"ab", b"cd", b"e")
    into = bytearray(5)
    assert s3data._stream_into(body, into) is into and into == b"abcde"
    assert body.asked == [s3data._STREAM_CHUNK]
    assert s3data._stream_into(_Body(b"ab"), bytearray(5)) == b"ab"
    longer = s3data._stream_into(_Body(b"abc", b"def"), bytearray(5))
    assert len(longer) > 5 and longer.startswith(b"abc")
