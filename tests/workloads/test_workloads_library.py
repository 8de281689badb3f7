"""The lookup objects' library: what it fetches, when again, and what it keeps."""

from __future__ import annotations

from prefetchd.workloads import _library


def test_the_library_fetches_again_after_a_while_and_a_missing_object_not_at_once(
        monkeypatch) -> None:
    """A fetched ConfigMap is fetched again once REFETCH_S old (an edit is read); one the
    API does not have is not asked for again for MISSING_S (a job read on every watch event
    does not GET it each time); a fetch that fails keeps what was held."""
    now = [1000.0]
    monkeypatch.setattr(_library.time, "monotonic", lambda: now[0])
    store: dict[str, dict] = {"a": {"kind": "ConfigMap", "apiVersion": "v1",
                                    "metadata": {"name": "a", "namespace": "ml"},
                                    "data": {"k": "1"}}}
    calls: list[str] = []

    def fetch(kind: str, namespace: str | None, name: str) -> dict | None:
        calls.append(name)
        return store.get(name)

    lib = _library.Library(fetch=fetch)
    assert lib.get("ConfigMap", "ml", "a")["data"] == {"k": "1"}
    assert lib.get("ConfigMap", "ml", "a") and calls == ["a"]  # held: no second GET
    store["a"] = {**store["a"], "data": {"k": "2"}}
    now[0] += _library.REFETCH_S + 1
    assert lib.get("ConfigMap", "ml", "a")["data"] == {"k": "2"} and calls == ["a", "a"]
    del store["a"]
    now[0] += _library.REFETCH_S + 1
    assert lib.get("ConfigMap", "ml", "a")["data"] == {"k": "2"}  # kept what was held
    assert lib.get("ConfigMap", "ml", "gone") is None
    assert lib.get("ConfigMap", "ml", "gone") is None and calls.count("gone") == 1
    now[0] += _library.MISSING_S + 1
    assert lib.get("ConfigMap", "ml", "gone") is None and calls.count("gone") == 2
    assert _library.Library().get("ConfigMap", "ml", "a") is None  # no fetch: held only
