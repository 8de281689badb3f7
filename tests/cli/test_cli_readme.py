"""README.md speaks about the product (not how it was made) and documents the commands."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_no_words_about_how_the_project_was_made() -> None:
    for pattern in (r"\bissue \d+", r"session note", r"\bthe last session\b"):
        assert not re.search(pattern, README, re.IGNORECASE), pattern


def test_readme_documents_the_local_s3_and_the_conventions() -> None:
    for needle in ("fusecache s3", "export AWS_ENDPOINT_URL", "--nonempty", "--version",
                   "--pin-ttl", "--allow-empty", "exit code"):
        assert needle in README, needle
