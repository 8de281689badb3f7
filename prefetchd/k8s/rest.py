"""One raw-JSON request to the Kubernetes API over a configured ``ApiClient`` (agent, webhook).

Who calls this: every direct API call of prefetchd/k8s goes through :func:`request`:
:mod:`~prefetchd.k8s.watch` (paginated lists, and the watch streams), :mod:`~prefetchd.k8s.worker`
(its Node: GET and merge patch), :mod:`~prefetchd.k8s.datasets` (PVC, PV, Node reads; pod lists),
:mod:`~prefetchd.k8s.credentials` (PVs, StorageClasses, claims, Secrets) and
:mod:`~prefetchd.k8s.peer_tls` (the cert-manager Certificate and the peer Secret).

Why raw JSON and not the generated models: one code path for core and custom resources
(cert-manager, Argo and the training CRDs have no models in the client), objects stay the
dicts the API server sent (camelCase keys, as manifests and the analysis read them), and no
model objects are built for big workflows.

Data flow: ``request(api, method, path, query, body, content_type, timeout)`` ->
``ApiClient.param_serialize`` (the host, TLS and bearer token of the client's Configuration)
-> ``ApiClient.call_api`` with a (connect, read) timeout -> a :class:`Reply` holding the
status and the body (read in full, connection released). With ``stream=True`` a 2xx answer's
body is left unread: the caller reads ``Reply.response`` (the urllib3 response) and releases
it; an error answer's (small) body is still read. No HTTP status raises here: each caller
decides what a 404, 409, 410 or 403 means to it. A request that gets no HTTP answer, or whose
body breaks off (refused, timed out, reset, TLS failure), raises :class:`ApiUnreachable`,
naming the method, the path and the failure, never a header (the bearer token lives there).
Nothing here logs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import urllib3

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_TIMEOUT = (5.0, 15.0)  # (connect, read) seconds
_MESSAGE_BYTES = 200  # of a body that is no Status, in an error message


class ApiUnreachable(OSError):
    """No HTTP answer (or a broken-off body); ``reason`` is the failure's type name."""

    def __init__(self, method: str, path: str, cause: BaseException) -> None:
        self.reason = type(cause).__name__
        super().__init__(f"{method} {path}: {self.reason}: {cause}")


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: ``data`` is its body (empty while a 2xx ``response`` is streamed)."""

    status: int
    data: bytes = b""
    response: Any = None  # the urllib3 response, with stream=True

    @property
    def ok(self) -> bool:
        return 200 <= self.status <= 299

    def json(self) -> Any:
        """The body decoded (ValueError when it is no JSON)."""
        return json.loads(self.data)

    def json_or_none(self) -> Any:
        """The body decoded, None when it is empty or no JSON."""
        try:
            return json.loads(self.data) if self.data else None
        except ValueError:
            return None

    def message(self) -> str:
        """What an error answer says: a Status's ``message``, else the body's first bytes."""
        doc = self.json_or_none()
        if isinstance(doc, dict):
            return str(doc.get("message", ""))
        return "" if doc is not None else self.data[:_MESSAGE_BYTES].decode(errors="replace")


def request(api: Any, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
            body: Any = None, content_type: str = JSON,
            timeout: tuple[float, float] = DEFAULT_TIMEOUT, stream: bool = False) -> Reply:
    """Send one request through the ``kubernetes.client.ApiClient`` *api* (see the module doc).

    *body* (a JSON-serialisable value) is sent as *content_type* (e.g. :data:`MERGE_PATCH`).
    """
    from kubernetes.client.exceptions import ApiException  # the client is imported lazily

    headers = {"Accept": JSON}
    if body is not None:
        headers["Content-Type"] = content_type
    m, url, hdrs, b, post = api.param_serialize(
        method, path, query_params=query or [], header_params=headers, body=body,
        auth_settings=["BearerToken"])
    try:
        resp = api.call_api(m, url, hdrs, b, post, _request_timeout=timeout).response
        if stream and 200 <= resp.status <= 299:
            return Reply(resp.status, response=resp)
        data = resp.data
        resp.release_conn()
    except ApiException as e:
        if e.status:  # only with the client's own retries (client_go_retries), not set here
            raise
        raise ApiUnreachable(method, path, e) from e  # status 0: its wrapping of a TLS failure
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise ApiUnreachable(method, path, e) from e
    return Reply(resp.status, data or b"")
