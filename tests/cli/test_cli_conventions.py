"""The same conventions in all three command lines: fusecache, prefetchd, fusecache-csi.

--version; every option has help text naming its default; --log-level before or after the
subcommand; bad values are one line, exit 2; and fusecache-csi checks its settings at start.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

CLIS = {"fusecache": "fusecache.cli", "prefetchd": "prefetchd.cli", "fusecache-csi": "csi.main"}


def run(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=120, env=full)


@pytest.mark.parametrize("prog", CLIS)
def test_version(prog: str) -> None:
    r = run(CLIS[prog], "--version")
    assert r.returncode == 0 and r.stdout.startswith(f"{prog} "), r.stdout + r.stderr


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    from csi import main as csi_main
    from fusecache import cli as fc
    from prefetchd import cli as pf

    out = []
    for name, p in (("fusecache", fc.build_parser()), ("prefetchd", pf.build_parser()),
                    ("fusecache-csi", csi_main._parser())):
        todo = [(name, p)]
        while todo:
            n, q = todo.pop()
            out.append((n, q))
            for a in q._actions:
                if isinstance(a, argparse._SubParsersAction):
                    todo += [(f"{n} {k}", v) for k, v in a.choices.items()]
    return out


def test_every_option_has_help_with_its_default() -> None:
    missing = []
    for name, p in _parsers():
        for a in p._actions:
            if not a.option_strings or a.help == argparse.SUPPRESS:
                continue
            if isinstance(a, argparse._HelpAction | argparse._VersionAction):
                continue
            flag = f"{name} {a.option_strings[0]}"
            if not a.help:
                missing.append(f"{flag}: no help")
            elif a.nargs != 0 and not a.required and "default" not in a.help:
                missing.append(f"{flag}: help does not say the default")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("args", [
    ["--log-level", "debug", "stats", "--cache-dir", "/nonexistent"],
    ["stats", "--log-level", "DEBUG", "--cache-dir", "/nonexistent"],
])
def test_fusecache_log_level_before_or_after(args: list[str]) -> None:
    r = run("fusecache.cli", *args)
    assert r.returncode == 2 and "no node cache" in r.stderr, r.stderr


@pytest.mark.parametrize("args", [
    ["--log-level", "debug", "status", "--cache-dir", "/nonexistent"],
    ["status", "--log-level", "DEBUG", "--cache-dir", "/nonexistent"],
])
def test_prefetchd_log_level_before_or_after(args: list[str]) -> None:
    r = run("prefetchd.cli", *args)
    assert r.returncode == 2 and "no node cache" in r.stderr, r.stderr


@pytest.mark.parametrize("args, env, names", [
    (["--disk-cache-size", "banana"], {}, "--disk-cache-size"),
    (["--disk-cache-size", "0"], {}, "--disk-cache-size"),
    ([], {"FUSECACHE_DISK_CACHE_SIZE": "banana"}, "FUSECACHE_DISK_CACHE_SIZE"),
    (["--mount-timeout", "-1"], {}, "--mount-timeout"),
    (["--log-level", "loud"], {}, "--log-level"),
])
def test_csi_refuses_bad_settings_at_start(tmp_path, args, env, names) -> None:
    r = run("csi.main", "--endpoint", f"unix://{tmp_path}/csi.sock", "--state-dir",
            str(tmp_path / "state"), "--cache-dir", str(tmp_path / "cache"), *args, env=env)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and names in err, err
    assert "Traceback" not in err and not (tmp_path / "csi.sock").exists()


def test_prefetchd_agent_metrics_port_out_of_range() -> None:
    r = run("prefetchd.cli", "run", "--kubernetes", "--metrics-port", "99999")
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "--metrics-port" in err, err
