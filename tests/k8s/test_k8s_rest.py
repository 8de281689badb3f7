"""prefetchd.k8s.rest.request over real HTTP: the fake API server and the real kubernetes client.

What its callers rely on: a JSON body goes out and comes back as sent, a merge patch is sent
as one, error statuses come back as statuses (404, 409, 403, 410) with the Status's message, a
watch can be streamed, and no answer at all (refused, read timeout) is ApiUnreachable, whose
message names the request but never the bearer token.
"""

from __future__ import annotations

import json

import pytest
from k8s_helpers import api_at_closed_port

from prefetchd.k8s import rest

CM_PATH = "/api/v1/namespaces/ml/configmaps"
TOKEN = "s3cr3t-bearer-token"


def config_map(name: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ml"}, "data": data}


def test_json_body_round_trip_and_merge_patch(fake, api):
    data = {"split": "train", "note": "ünïcödé \"quoted\"\nline", "empty": ""}
    created = rest.request(api, "POST", CM_PATH, body=config_map("shards", data))
    assert created.status == 201 and created.ok
    assert created.json()["data"] == data
    assert fake.get("v1", "ConfigMap", "shards", namespace="ml")["data"] == data

    got = rest.request(api, "GET", f"{CM_PATH}/shards")
    assert got.status == 200 and got.json()["data"] == data

    # merge patch semantics: null removes a key, others are set (a JSON patch would be a list)
    patched = rest.request(api, "PATCH", f"{CM_PATH}/shards", content_type=rest.MERGE_PATCH,
                           body={"data": {"empty": None, "split": "val"}})
    assert patched.status == 200, patched.message()
    assert patched.json()["data"] == {"split": "val", "note": data["note"]}

    listed = rest.request(api, "GET", CM_PATH, query=[("limit", "10")])
    assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["shards"]


def test_error_statuses_come_back_with_their_message(fake, api):
    missing = rest.request(api, "GET", f"{CM_PATH}/nothing")
    assert missing.status == 404 and not missing.ok
    assert missing.json()["reason"] == "NotFound"
    assert "nothing" in missing.message()

    assert rest.request(api, "POST", CM_PATH, body=config_map("once", {})).status == 201
    again = rest.request(api, "POST", CM_PATH, body=config_map("once", {"a": "b"}))
    assert again.status == 409
    assert "already exists" in again.message()
    assert fake.get("v1", "ConfigMap", "once", namespace="ml")["data"] == {}

    for code in (403, 410):
        fake.fail_next(code=code, path_contains="/configmaps")
        reply = rest.request(api, "GET", f"{CM_PATH}/once")
        assert (reply.status, reply.message()) == (code, f"injected fault {code}")


def test_a_body_that_is_no_json(fake, api):
    reply = rest.request(api, "GET", "/healthz")
    assert reply.status == 200 and reply.data == b"ok"
    assert reply.json_or_none() is None
    assert reply.message() == "ok"
    with pytest.raises(ValueError):
        reply.json()


def test_a_watch_streams(fake, api):
    query = [("watch", "true"), ("resourceVersion", fake.resource_version),
             ("timeoutSeconds", "30")]
    reply = rest.request(api, "GET", CM_PATH, query=query, stream=True, timeout=(5.0, 30.0))
    assert reply.status == 200 and reply.data == b""
    try:
        fake.wait_for_watchers(1)
        fake.create(config_map("streamed", {"k": "v"}))
        buf = b""
        for chunk in reply.response.stream(amt=None, decode_content=True):
            buf += chunk
            if b"\n" in buf:
                break
        event = json.loads(buf.split(b"\n", 1)[0])
        assert event["type"] == "ADDED"
        assert event["object"]["metadata"]["name"] == "streamed"
    finally:
        reply.response.release_conn()


def test_an_error_answer_to_a_stream_is_read(fake, api):
    fake.fail_next(code=410, path_contains="/configmaps")
    reply = rest.request(api, "GET", CM_PATH, query=[("watch", "true")], stream=True)
    assert reply.status == 410 and reply.response is None
    assert reply.message() == "injected fault 410"


def test_no_answer_is_api_unreachable_without_the_token(fake, api):
    closed = api_at_closed_port()
    closed.configuration.api_key = {"BearerToken": TOKEN}
    closed.configuration.api_key_prefix = {"BearerToken": "Bearer"}
    with closed, pytest.raises(rest.ApiUnreachable) as refused:
        rest.request(closed, "GET", "/api/v1/nodes/x", timeout=(2.0, 2.0))
    assert isinstance(refused.value, OSError)
    assert refused.value.reason == "MaxRetryError"
    assert str(refused.value).startswith("GET /api/v1/nodes/x: MaxRetryError")
    assert TOKEN not in str(refused.value)

    # the server answers the headers of a watch, then nothing within the read timeout
    api.configuration.api_key = {"BearerToken": TOKEN}
    api.configuration.api_key_prefix = {"BearerToken": "Bearer"}
    query = [("watch", "true"), ("timeoutSeconds", "30")]
    with pytest.raises(rest.ApiUnreachable) as timed_out:
        rest.request(api, "GET", CM_PATH, query=query, timeout=(5.0, 0.5))
    assert "ReadTimeout" in timed_out.value.reason
    assert TOKEN not in str(timed_out.value)
