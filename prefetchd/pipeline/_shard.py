"""Shard patterns: a location that names a set of objects (`train-{000000..001023}.tar`).

Called by `_uri` (to keep a pattern whole when it finds locations in text), by
the model (`Read.prefix`) and by `prefetchd.warm` (to list the prefix and keep
the keys that match). A pattern is never expanded: it is compiled into one
regular expression plus a numeric bound per range, so `{0..99999999}` costs
the same as `{0..9}` and a key is tested in time linear in its length.

Syntax (WebDataset/braceexpand and shell globs):
- `{LO..HI}`: a numeric range (inclusive); zero-padded to the endpoints' width
  when either endpoint has a leading zero (`{000..123}` matches `007`), else
  written without leading zeros. `{a..e}`: a range of single letters.
- `{x,y,z}`: one of the comma-separated alternatives (taken literally).
- `*`: any run of characters within one path segment (not `/`); `**`: any run
  of characters, `/` included; `?`: one character other than `/`.
- `[0-3]`, `[abc]`, `[!x]`: one character of the set (or, with `!`/`^`, not of it and not
  `/`), as a shell glob, fsspec and DuckDB read it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# a brace group that makes a shard pattern: a range or a comma list (not `{name}`)
BRACE_GROUP = r"\{(?:[A-Za-z0-9_-]*,[^\s{}'\"`]*|-?\d+\.\.-?\d+|[A-Za-z]\.\.[A-Za-z])\}"
# a glob's bracket expression: one character of a set (dt=2024-06-0[1-3])
BRACKET_GROUP = r"\[[!^]?[\w.=-]+\]"
_TOKEN_RE = re.compile(BRACE_GROUP + "|" + BRACKET_GROUP + r"|\*\*|\*|\?")
_RANGE_RE = re.compile(r"^\{(-?\d+)\.\.(-?\d+)\}$")
_ALPHA_RE = re.compile(r"^\{([A-Za-z])\.\.([A-Za-z])\}$")
MAX_PATTERN_CHARS = 4096


def is_pattern(text: str) -> bool:
    """True when `text` holds a brace range/list or a glob wildcard."""
    return bool(_TOKEN_RE.search(text))


def prefix(text: str) -> str:
    """The literal part before the first wildcard or brace group."""
    m = _TOKEN_RE.search(text)
    return text if m is None else text[: m.start()]


@dataclass(frozen=True)
class Matcher:
    regex: re.Pattern[str]
    ranges: tuple[tuple[int, int, int], ...]  # (low, high, width; 0 = no padding) per group

    def __call__(self, key: str) -> bool:
        m = self.regex.fullmatch(key)
        if m is None:
            return False
        for (lo, hi, width), g in zip(self.ranges, m.groups(), strict=True):
            if width and len(g) != width:
                return False
            if not width and len(g.lstrip("-")) > 1 and g.lstrip("-").startswith("0"):
                return False
            if not lo <= int(g) <= hi:
                return False
        return True


def compile_pattern(text: str) -> Callable[[str], bool]:
    """A predicate that says whether a key (or URI) is one of the pattern's members."""
    if len(text) > MAX_PATTERN_CHARS:
        raise ValueError(f"pattern longer than {MAX_PATTERN_CHARS} characters")
    out: list[str] = []
    ranges: list[tuple[int, int, int]] = []
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        out.append(re.escape(text[pos : m.start()]))
        tok = m.group(0)
        if tok == "**":
            out.append(".*")
        elif tok == "*":
            out.append("[^/]*")
        elif tok == "?":
            out.append("[^/]")
        elif r := _RANGE_RE.match(tok):
            a, b = r.group(1), r.group(2)
            lo, hi = sorted((int(a), int(b)))
            padded = any(len(x.lstrip("-")) > 1 and x.lstrip("-").startswith("0") for x in (a, b))
            width = max(len(a), len(b)) if padded else 0
            out.append("(-?[0-9]+)")
            ranges.append((lo, hi, width))
        elif tok.startswith("["):
            body = tok[1:-1]
            negated = body[0] in "!^"
            chars = "".join(c if c == "-" else re.escape(c) for c in body[negated:])
            out.append(f"[^/{chars}]" if negated else f"[{chars}]")
        elif r := _ALPHA_RE.match(tok):
            lo_c, hi_c = sorted((r.group(1), r.group(2)))
            out.append("[" + re.escape(lo_c) + "-" + re.escape(hi_c) + "]")
        else:
            alts = tok[1:-1].split(",")
            out.append("(?:" + "|".join(re.escape(a) for a in alts) + ")")
        pos = m.end()
    out.append(re.escape(text[pos:]))
    if text.endswith("/"):
        out.append(".*")  # dt=2025-06-*/: every key under the folders it matches
    return Matcher(re.compile("".join(out), re.DOTALL), tuple(ranges))
