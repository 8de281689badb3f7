"""prefetchd's command-line modules form no import circle: warm_cli stands on its own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at top level or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_warm_cli_does_not_import_cli() -> None:
    assert "prefetchd.cli" not in _imports(ROOT / "prefetchd" / "warm_cli.py")


def test_warm_cli_imports_alone() -> None:
    code = ("import sys, prefetchd.warm_cli as w; import argparse; "
            "p = argparse.ArgumentParser(); w.add_subcommands(p.add_subparsers()); "
            "sys.exit('prefetchd.cli' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
