"""The stand-in for trio in pyfuse3's request loop (fusecache/fuseloop.py): a queued
request is taken without a scheduler pass, never more than _STREAK in a row, a free lock
is taken without one, and everything else is trio's."""

from __future__ import annotations

import os
import types

import pytest
import trio

from fusecache import fuseloop


class _Ran:
    """Set by a task started before the code under test: if it is still unset afterwards,
    that code did not yield to the scheduler."""

    def __init__(self) -> None:
        self.value = False

    async def mark(self) -> None:
        self.value = True


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_a_queued_request_is_waited_for_without_a_scheduler_pass(pipe, monkeypatch) -> None:
    r, w = pipe
    os.write(w, b"x")
    wait = fuseloop._ReadyWait()
    through_trio: list[int] = []
    real = trio.lowlevel.wait_readable

    async def counted(fd) -> None:
        through_trio.append(fd)
        await real(fd)
    monkeypatch.setattr(trio.lowlevel, "wait_readable", counted)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            ran = _Ran()
            nursery.start_soon(ran.mark)
            for _ in range(fuseloop._STREAK):
                await wait(r)
            assert not ran.value and not through_trio  # _STREAK waits, no yield
            await wait(r)  # the next one goes through trio (readable: returns soon)
            assert through_trio == [r]
            await wait(r)  # and the streak starts again
            assert through_trio == [r]
    trio.run(main)
    assert (wait.fast, wait.slow) == (fuseloop._STREAK + 1, 1)


def test_an_empty_queue_is_waited_for_through_trio(pipe) -> None:
    r, w = pipe
    wait = fuseloop._ReadyWait()

    async def main() -> None:
        async def request_later() -> None:
            await trio.sleep(0.05)
            os.write(w, b"x")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(request_later)
            with trio.fail_after(5):
                await wait(r)
    trio.run(main)
    assert (wait.fast, wait.slow) == (0, 1)


def test_a_free_lock_is_taken_at_once_and_a_held_one_waits() -> None:
    lock = fuseloop._FreeLock()
    order: list[str] = []

    async def holder(started: trio.Event) -> None:
        async with lock:
            order.append("holder in")
            started.set()
            await trio.sleep(0.05)
            order.append("holder out")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            ran = _Ran()
            nursery.start_soon(ran.mark)
            async with lock:
                assert not ran.value  # uncontended: no yield
            started = trio.Event()
            nursery.start_soon(holder, started)
            await started.wait()
            async with lock:
                order.append("waiter in")
    trio.run(main)
    assert order == ["holder in", "holder out", "waiter in"]


def test_a_cancelled_waiter_leaves_the_lock_usable() -> None:
    lock = fuseloop._FreeLock()

    async def main() -> None:
        async with lock:
            with trio.move_on_after(0.05) as scope:
                async with lock:
                    pytest.fail("took a held lock")
            assert scope.cancelled_caught
        with trio.fail_after(1):
            async with lock:
                pass
    trio.run(main)


def test_install_replaces_only_the_two_calls_and_uninstall_restores(monkeypatch) -> None:
    monkeypatch.delenv(fuseloop.ENV_SWITCH, raising=False)
    fake = types.ModuleType("fake_pyfuse3")
    fake.trio = trio  # type: ignore[attr-defined]
    wait = fuseloop.install(fake)
    assert wait is not None
    shim = fake.trio  # type: ignore[attr-defined]
    assert shim is not trio and shim.lowlevel.wait_readable is wait
    assert shim.Lock is fuseloop._FreeLock
    assert shim.open_nursery is trio.open_nursery
    assert shim.ClosedResourceError is trio.ClosedResourceError
    assert shim.lowlevel.current_task is trio.lowlevel.current_task
    assert fuseloop.install(fake) is None  # already replaced: left as it is
    fuseloop.uninstall(fake)
    assert fake.trio is trio  # type: ignore[attr-defined]


def test_the_switch_leaves_pyfuse3_alone(monkeypatch) -> None:
    fake = types.ModuleType("fake_pyfuse3")
    fake.trio = trio  # type: ignore[attr-defined]
    monkeypatch.setenv(fuseloop.ENV_SWITCH, "trio")
    assert fuseloop.install(fake) is None and fake.trio is trio  # type: ignore[attr-defined]


def test_the_installed_pyfuse3_has_the_global_it_replaces() -> None:
    """pyfuse3 looks trio up by its module global at every call (the hook pyfuse3.asyncio
    uses); a pyfuse3 without it would run its own loop, unnoticed but for this test."""
    import pyfuse3
    assert getattr(pyfuse3, "trio", None) is trio


def test_wait_counts_are_collected() -> None:
    wait = fuseloop._ReadyWait()
    wait.fast, wait.slow = 7, 3
    (family,) = fuseloop.WaitCounts(wait).collect()
    got = {s.labels["how"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert got == {"at_once": 7, "scheduled": 3}
