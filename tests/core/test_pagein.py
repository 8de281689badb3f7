"""PageInBudget: bytes asked into the page cache ahead of opens stay under its bound, and
opens, age and the entry bound all give room back."""

from __future__ import annotations

import pytest

from fusecache import pagein
from fusecache.pagein import PageInBudget


def test_room_shrinks_with_what_is_asked_and_grows_with_what_is_opened() -> None:
    b = PageInBudget(1000)
    assert b.room() == 1000
    b.add(b"a", 400)
    b.add(b"b", 400)
    b.add(b"a", 400)  # asked twice: counted once
    assert b.room() == 200 and b"a" in b
    b.add(b"c", 300)  # the caller checked room() before; an overshoot is still counted
    assert b.room() == 0
    b.opened(b"b")
    b.opened(b"b")  # a second open of it gives nothing back twice
    b.opened(b"never asked")
    assert b.room() == 300 and b"b" not in b


def test_old_entries_and_entries_past_the_count_bound_are_forgotten(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(pagein.time, "monotonic", lambda: now[0])
    b = PageInBudget(1000, max_age=30.0, max_entries=3)
    b.add(b"old", 500)
    now[0] += 20
    b.add(b"new", 400)
    assert b.room() == 100
    now[0] += 11  # "old" is 31 s old, "new" 11 s
    assert b.room() == 600 and b"old" not in b and b"new" in b
    for k in (b"x", b"y", b"z"):  # a fourth entry pushes out the oldest ("new")
        b.add(k, 1)
    assert b"new" not in b and b.pending_bytes == 3
