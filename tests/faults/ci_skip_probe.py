"""Not collected by the suite (no test_ prefix): run explicitly by test_ci_fuse_skips.py
to see what the suite's conftest makes of skipped tests."""

import pytest


@pytest.mark.fuse
def test_fuse_marked() -> None:
    pass


@pytest.mark.fuse
def test_fuse_marked_skips_itself() -> None:
    pytest.skip("probe: skipped at run time")


def test_plain_skip() -> None:
    pytest.skip("probe: a skip of a test that needs no FUSE")
