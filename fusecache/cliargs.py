"""Conventions shared by the three command lines: ``fusecache``, ``prefetchd``, ``fusecache-csi``.

Who calls it: fusecache/cli.py, prefetchd/cli.py and prefetchd/warm_cli.py, csi/main.py build
their argparse parsers with it. Data flow: argv -> :class:`Parser` and the converters below ->
validated values. A bad argument is an argparse error: one line naming it on stderr, exit 2,
before anything is mounted, fetched or written. Only the standard library is imported here,
so a parser is cheap to build.

The conventions: ``--version``; ``--log-level`` (any case) before or after the subcommand;
sizes as ``512MiB``; durations as ``90``, ``90s``, ``30m``, ``1h``, ``2d``; every option has
help text that names its default.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

EXIT_USAGE = 2
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the bad argument (no usage dump), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("fusecache")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def add_version(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                   help="print the version and exit")


def log_level(text: str) -> str:
    level = str(text).strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"invalid log level {text!r}: expected one of {', '.join(LOG_LEVELS).lower()}")
    return level


def add_log_level(main: argparse.ArgumentParser, subparsers: Sequence[argparse.ArgumentParser],
                  default: str) -> None:
    """``--log-level`` on the main parser and on every subcommand (either place works)."""
    main.add_argument("--log-level", type=log_level, default=log_level(default),
                      metavar="LEVEL",
                      help=f"debug, info, warning or error (default {default.lower()}); "
                           "also accepted after the subcommand")
    for sp in subparsers:
        sp.add_argument("--log-level", type=log_level, default=argparse.SUPPRESS,
                        metavar="LEVEL",
                        help=f"debug, info, warning or error (default {default.lower()})")


_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, what: str) -> float:
    """Seconds from '90', '90s', '30m', '1h', '2d' (> 0); ValueError names *what*."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _DURATION_UNITS:
        raise ValueError(f"invalid {what} {text!r}: expected a duration such as 90s, 30m, "
                         "1h, 2d")
    value = float(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]
    if not value > 0 or math.isinf(value):
        raise ValueError(f"invalid {what} {text!r}: must be > 0")
    return value


def duration(what: str, allow_never: bool = False) -> Any:
    """argparse type: a duration > 0 (or 'never' -> None when *allow_never*)."""
    def conv(text: str) -> float | None:
        if allow_never and str(text).strip().lower() in ("never", "none"):
            return None
        try:
            return parse_duration(text, what)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv


def int_range(what: str, lo: int, hi: int | None = None) -> Any:
    """argparse type: an integer in [lo, hi]."""
    def conv(text: str) -> int:
        try:
            n = int(str(text).strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: expected an "
                                             "integer") from None
        if n < lo or (hi is not None and n > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: must be {bound}")
        return n
    return conv


def port(what: str) -> Any:
    return int_range(what, 1, 65535)


def positive_float(what: str) -> Any:
    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: expected a "
                                             "number") from None
        if not v > 0 or math.isinf(v):
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: must be > 0")
        return v
    return conv


def check_endpoint_url(url: str, what: str = "--endpoint-url") -> str:
    """http(s)://HOST[:PORT][/]; ValueError naming *what* otherwise.

    Credentials in the URL (``http://key:secret@host``) are refused without echoing them:
    the URL is logged and shown in errors, so they would leak there (a blind test of the CSI
    plugin found the password in three logs). A path is refused too: the client addresses
    the bucket under the root, so ``http://host/s3`` failed later as a missing bucket."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError(f"invalid {what}: not a URL") from None
    if parts.username is not None or parts.password is not None:
        shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        raise ValueError(f"invalid {what} {shown!r} with credentials before the host "
                         "(USER:PASSWORD@): give them as AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY (or the volume's Secret), never in the URL")
    try:
        p = parts.port  # raises ValueError for a port that is not a number or out of range
    except ValueError:
        raise ValueError(f"invalid {what} {url!r}: bad port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"invalid {what} {url!r}: expected http://HOST[:PORT] or "
                         "https://HOST[:PORT]")
    if p == 0:
        raise ValueError(f"invalid {what} {url!r}: bad port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"invalid {what} {url!r}: an S3 endpoint is the service's root URL, "
                         f"http(s)://HOST[:PORT], with no path ({parts.path or '?'}): the "
                         "bucket goes in the s3:// location")
    return url


def endpoint_url(text: str) -> str:
    try:
        return check_endpoint_url(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why *path* cannot be used or made as a directory ("not a directory", or which folder
    above it is a file), or None: checked before anything is written, so a file given as a
    directory is bad input (exit 2), not a failure half way."""
    p = Path(path).absolute()
    for q in (p, *p.parents):
        if q.exists():
            if q.is_dir():
                return None
            return "not a directory" if q == p else f"{q} is not a directory"
    return None


def key_values(items: Sequence[str] | None, flag: str,
               error: type[Exception] = ValueError) -> dict[str, str]:
    """['A=1', 'B=2'] -> {'A': '1', 'B': '2'}; *error* naming *flag* otherwise."""
    out: dict[str, str] = {}
    for it in items or []:
        if "=" not in it or it.startswith("="):
            raise error(f"{flag} {it!r}: expected NAME=VALUE")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def quiet_broken_pipe() -> None:
    """After stdout's reader went away (``| head``): no traceback at exit.

    Point stdout at /dev/null so the interpreter's final flush does not raise again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


# SDK loggers that print request headers at DEBUG: a session token, an access key id and
# signatures (a blind test of the agent found them in its --log-level debug log)
SDK_LOGGERS = ("botocore", "boto3", "urllib3", "s3transfer", "awscrt", "kubernetes")


def quiet_sdk_loggers() -> None:
    """Keep the SDKs' loggers at INFO or above whatever the program's level: what they say
    at DEBUG holds credentials."""
    for name in SDK_LOGGERS:
        lg = logging.getLogger(name)
        lg.setLevel(max(logging.INFO, lg.getEffectiveLevel()))


def configure_logging(level: str | int, fmt: str, **kwargs: Any) -> None:
    """``logging.basicConfig`` for a command, the SDKs kept quiet (``quiet_sdk_loggers``)."""
    logging.basicConfig(level=level, format=fmt, **kwargs)
    quiet_sdk_loggers()
