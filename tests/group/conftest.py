import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


import pytest  # noqa: E402

from fusecache.locals3 import LocalS3  # noqa: E402


@pytest.fixture()
def private_s3(tmp_path: Path):
    """A SeaweedFS of this test's own, so the test may stop it."""
    s3 = LocalS3(data_dir=tmp_path / "s3")
    s3.start()
    try:
        yield s3
    finally:
        s3.cleanup()
