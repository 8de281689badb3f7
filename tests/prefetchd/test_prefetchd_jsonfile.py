"""prefetchd's JSON records are written whole, also by two threads of one process at once
(the agent's warm lanes): a name per write, never one renamed away by the other."""

from __future__ import annotations

import json
import threading

from prefetchd import _jsonfile


def test_threads_writing_one_record_at_once_all_succeed(tmp_path) -> None:
    path = str(tmp_path / "prefetchd" / "warmed.json")
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(n: int) -> None:
        start.wait()
        try:
            for i in range(50):
                _jsonfile.save_dict(path, {"writer": n, "i": i})
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(open(path).read())["i"] == 49  # whole, from one writer's last write
    assert sorted(p.name for p in (tmp_path / "prefetchd").iterdir()) == ["warmed.json"]
    assert (tmp_path / "prefetchd" / "warmed.json").stat().st_mode & 0o777 == 0o644
