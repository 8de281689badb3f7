"""Argo's ``when``: whether a step runs, where its values are known before the run.

Who calls it: ``_argo.ArgoAnalyzer.call`` with a task's or step's ``when`` once its tags are
filled (``{{workflow.parameters.run-qc}} == true`` -> ``false == true``). Data flow: the text
-> tokens -> a value by the rules the controller evaluates it with (govaluate, whose bare
words it turns into strings: ``mode == train`` compares two strings; numbers compare as
numbers, ``true``/``false`` are booleans; ``== != < <= > >= && || !`` and parentheses) ->
True, False, or None when the text is outside that subset, so nothing here guesses. A step
whose ``when`` is False does not run: nothing it reads is warmed (``Step.never``).
"""

from __future__ import annotations

import re
from typing import Any

MAX_WHEN = 500  # characters: a longer condition is not evaluated

_TOKEN = re.compile(r"""\s*(?:(?P<str>'[^']*'|"[^"]*")|(?P<num>-?\d+(?:\.\d+)?)(?![\w.])"""
                    r"""|(?P<op>==|!=|<=|>=|&&|\|\||[<>!()])|(?P<word>[A-Za-z_][\w.]*))""")


class _Unknown(Exception):
    """Outside the subset: the condition is left to the run."""


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise _Unknown(text[pos:])
        pos = m.end()
        if m.group("str") is not None:
            out.append(("val", m.group("str")[1:-1]))
        elif m.group("num") is not None:
            out.append(("val", float(m.group("num"))))
        elif m.group("op") is not None:
            out.append(("op", m.group("op")))
        else:
            word = m.group("word")
            out.append(("val", {"true": True, "false": False}.get(word, word)))
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.t = tokens
        self.i = 0

    def peek(self) -> Any:
        return self.t[self.i][1] if self.i < len(self.t) and self.t[self.i][0] == "op" \
            else None

    def take(self) -> tuple[str, Any]:
        if self.i >= len(self.t):
            raise _Unknown("end")
        self.i += 1
        return self.t[self.i - 1]

    def either(self) -> Any:
        v = self.both()
        while self.peek() == "||":
            self.take()
            w = self.both()
            v = _truth(v) or _truth(w)
        return v

    def both(self) -> Any:
        v = self.compare()
        while self.peek() == "&&":
            self.take()
            w = self.compare()
            v = _truth(v) and _truth(w)
        return v

    def compare(self) -> Any:
        v = self.unary()
        op = self.peek()
        if op in ("==", "!=", "<", "<=", ">", ">="):
            self.take()
            w = self.unary()
            if op in ("==", "!="):
                return (type(v) is type(w) and v == w) == (op == "==")
            if not (isinstance(v, float) and isinstance(w, float)):
                raise _Unknown(op)  # (govaluate orders numbers only)
            return {"<": v < w, "<=": v <= w, ">": v > w, ">=": v >= w}[op]
        return v

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not _truth(self.unary())
        if self.peek() == "(":
            self.take()
            v = self.either()
            if self.take() != ("op", ")"):
                raise _Unknown("(")
            return v
        kind, v = self.take()
        if kind != "val":
            raise _Unknown(str(v))
        return v


def _truth(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Unknown(repr(v))  # (govaluate's && and || take booleans only)
    return v


def evaluate(text: str) -> bool | None:
    """The value of a filled-in ``when``: True or False, or None when it is outside the
    subset (a value the run fills in, a function, a regex match)."""
    if len(text) > MAX_WHEN or "{{" in text:
        return None
    try:
        p = _Parser(_tokens(text))
        v = p.either()
        if p.i != len(p.t) or not isinstance(v, bool):
            return None
        return v
    except _Unknown:
        return None
