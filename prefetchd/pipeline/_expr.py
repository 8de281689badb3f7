"""Argo's expression tags (``{{=EXPR}}``), evaluated before the run where their inputs are.

Who calls it: ``_argo.ArgoAnalyzer.lookup`` for a tag that is more than a variable's name
(``{{=sprig.trimSuffix('/', workflow.parameters.bucket) + '/corpus/'}}``, a ``withParam`` of
``{{=toJson(jsonpath(workflow.parameters.aoi, '$.tiles'))}}``). Data flow: the tag's text ->
``parse`` (a subset of expr-lang, the language the Argo controller evaluates tags with:
literals, variables, ``.``/``[]`` access, calls, ``+ - * / %``, comparisons, ``&& || !``,
``?:``) -> the variables it names, each looked up by the caller (a parameter's default, an
input, a loop item) -> ``evaluate`` once per loop item -> the tag's text as the controller
would render it. A variable only the run knows, a function or construct outside the subset
(closures such as ``filter``), or an error (``asInt('x')``) leaves the tag run-time only, as
before: nothing here guesses.

The functions are those Argo puts in scope (``sprig.*``, ``jsonpath``, ``toJson``, ``asInt``,
``asFloat``, ``string``) and expr-lang's string built-ins; each is a few lines of Python with
the argument order of its origin (sprig's ``trimSuffix(suffix, s)``, expr's
``trimSuffix(s, suffix)``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os.path
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefetchd.pipeline._resolve import Val, loop_group, loop_picks, runtime

MAX_EXPRESSION = 2000  # characters: a longer tag stays run-time only
MAX_RUNS = 1000  # loop items a tag is evaluated for: more stay run-time only (bounded time)
_MAX_DEPTH = 64


class ExprUnknown(Exception):
    """The tag cannot be evaluated before the run (outside the subset, or an error)."""


# ---------------------------------------------------------------- parsing

_TOKEN = re.compile(r"""\s*(?:
    (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<name>[A-Za-z_$][\w$]*)
  | (?P<op>\?\?|&&|\|\||==|!=|<=|>=|[-+*/%<>!?:.,()\[\]])
)""", re.X | re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "/": "/"}


@dataclass(frozen=True)
class _Var:
    path: tuple[str, ...]  # workflow.parameters.x -> ("workflow", "parameters", "x")


@dataclass(frozen=True)
class _Call:
    func: tuple[str, ...]
    args: tuple[Any, ...]


@dataclass(frozen=True)
class _Op:
    op: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class _Lit:
    value: Any


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExprUnknown(f"cannot read {text[pos:pos + 12]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i] if self.i < len(self.toks) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok[0] == "end" or (value is not None and tok[1] != value):
            raise ExprUnknown(f"expected {value or 'more'}, found {tok[1]!r}")
        self.i += 1
        return tok

    def is_op(self, *values: str) -> bool:
        kind, v = self.peek()
        return kind in ("op", "name") and v in values

    def parse(self) -> Any:
        node = self.ternary()
        if self.peek()[0] != "end":
            raise ExprUnknown(f"unexpected {self.peek()[1]!r}")
        return node

    def ternary(self) -> Any:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise ExprUnknown("nested too deep")
        cond = self.binary(0)
        if self.is_op("?"):
            self.take()
            yes = self.ternary()
            self.take(":")
            no = self.ternary()
            cond = _Op("?:", (cond, yes, no))
        self.depth -= 1
        return cond

    _LEVELS: tuple[tuple[str, ...], ...] = (
        ("??",), ("||", "or"), ("&&", "and"), ("==", "!=", "<", ">", "<=", ">=", "in",
                                               "contains", "startsWith", "endsWith"),
        ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> Any:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.is_op(*self._LEVELS[level]):
            op = self.take()[1]
            left = _Op({"or": "||", "and": "&&"}.get(op, op), (left, self.binary(level + 1)))
        return left

    def unary(self) -> Any:
        if self.is_op("!", "not", "-"):
            op = self.take()[1]
            return _Op("neg" if op == "-" else "!", (self.unary(),))
        return self.postfix(self.primary())

    def primary(self) -> Any:
        kind, v = self.take()
        if kind == "num":
            return _Lit(float(v) if any(c in v for c in ".eE") else int(v))
        if kind == "str":
            return _Lit(re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), v[1:-1]))
        if kind == "name":
            if v in ("true", "false"):
                return _Lit(v == "true")
            if v == "nil":
                return _Lit(None)
            return _Var((v,))
        if v == "(":
            node = self.ternary()
            self.take(")")
            return node
        if v == "[":
            return _Op("list", self.items("]"))
        raise ExprUnknown(f"unexpected {v!r}")

    def items(self, end: str) -> tuple[Any, ...]:
        """Comma-separated expressions up to *end* (a list's ``]``, a call's ``)``)."""
        out = []
        while not self.is_op(end):
            out.append(self.ternary())
            if not self.is_op(end):
                self.take(",")
        self.take(end)
        return tuple(out)

    def postfix(self, node: Any) -> Any:
        while True:
            if self.is_op("."):
                self.take()
                name = self.take()[1]
                node = _Var((*node.path, name)) if isinstance(node, _Var) else \
                    _Op("get", (node, _Lit(name)))
            elif self.is_op("["):
                self.take()
                key = self.ternary()
                self.take("]")
                if isinstance(node, _Var) and isinstance(key, _Lit) and isinstance(key.value, str):
                    node = _Var((*node.path, key.value))
                else:
                    node = _Op("get", (node, key))
            elif self.is_op("("):
                self.take()
                if not isinstance(node, _Var):
                    raise ExprUnknown("a call of a value")
                node = _Call(node.path, self.items(")"))
            else:
                return node


def parse(text: str) -> Any:
    """The tag's expression as a tree; ExprUnknown outside the subset."""
    if len(text) > MAX_EXPRESSION:
        raise ExprUnknown("too long")
    return _Parser(text).parse()


def variables(node: Any) -> list[str]:
    """The dotted names of the variables *node* reads, in order, once each."""
    out: list[str] = []

    def walk(n: Any) -> None:
        if isinstance(n, _Var):
            name = ".".join(n.path)
            if name not in out:
                out.append(name)
        elif isinstance(n, (_Call, _Op)):
            for a in n.args:
                walk(a)
    walk(node)
    return out


# ---------------------------------------------------------------- evaluation

def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ExprUnknown(f"{v!r} is not a string")
    return v


def _num(v: Any) -> int | float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ExprUnknown(f"{v!r} is not a number")
    return v


def _as_int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ExprUnknown(f"asInt({v!r})") from None


def _as_float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ExprUnknown(f"asFloat({v!r})") from None


def _go_json(v: Any) -> str:
    """Go's json.Marshal of *v*: compact, map keys sorted, 1.0 as 1."""
    def norm(x: Any) -> Any:
        if isinstance(x, float) and x.is_integer():
            return int(x)
        if isinstance(x, dict):
            return {k: norm(y) for k, y in x.items()}
        if isinstance(x, list):
            return [norm(y) for y in x]
        return x
    return json.dumps(norm(v), separators=(",", ":"), sort_keys=True)


_JSONPATH_STEP = re.compile(
    r"\.([A-Za-z_][\w-]*)|\[\s*(['\"])(.*?)\2\s*\]|\[\s*(-?\d+)\s*\]|\[\*\]|\.\*")


def _jsonpath(doc: Any, path: Any) -> Any:
    """The value at a simple JSONPath (``$.a.b``, ``$['a'][0]``, ``$.a[*]``) of a JSON text."""
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError:
            raise ExprUnknown("jsonpath of a text that is no JSON") from None
    path = _str(path).strip()
    if not path.startswith("$"):
        raise ExprUnknown(f"jsonpath {path!r}")
    cur: list[Any] = [doc]
    pos, many = 1, False
    while pos < len(path):
        m = _JSONPATH_STEP.match(path, pos)
        if m is None:
            raise ExprUnknown(f"jsonpath {path!r}")
        nxt: list[Any] = []
        for c in cur:
            if m.group(1) is not None or m.group(3) is not None:
                key = m.group(1) if m.group(1) is not None else m.group(3)
                if not isinstance(c, dict) or key not in c:
                    raise ExprUnknown(f"jsonpath {path!r}: no {key!r}")
                nxt.append(c[key])
            elif m.group(4) is not None:
                if not isinstance(c, list) or not -len(c) <= int(m.group(4)) < len(c):
                    raise ExprUnknown(f"jsonpath {path!r}: no item {m.group(4)}")
                nxt.append(c[int(m.group(4))])
            else:  # [*] / .*
                many = True
                nxt += list(c.values()) if isinstance(c, dict) else list(c) \
                    if isinstance(c, list) else []
        cur, pos = nxt, m.end()
    return cur if many else cur[0]


def _sprig_regex(pattern: Any) -> re.Pattern[str]:
    try:
        return re.compile(_str(pattern))
    except re.error:
        raise ExprUnknown(f"regex {pattern!r}") from None


def _lower(s: Any) -> str:
    return _str(s).lower()


def _upper(s: Any) -> str:
    return _str(s).upper()


def _trunc(n: Any, s: Any) -> str:
    n, s = _as_int(n), _str(s)
    return s[:n] if n >= 0 else s[n:]


def _b64decode(s: Any) -> str:
    try:
        return base64.b64decode(_str(s), validate=True).decode("utf-8", "replace")
    except (ValueError, TypeError):
        raise ExprUnknown(f"not base64: {s!r}") from None


_FUNCS: dict[tuple[str, ...], Callable[..., Any]] = {
    # Argo's own
    ("jsonpath",): _jsonpath,
    ("toJson",): _go_json,
    ("asInt",): _as_int,
    ("asFloat",): _as_float,
    ("string",): lambda v: v if isinstance(v, str) else _render(v),
    # expr-lang's built-ins (string first)
    ("lower",): _lower,
    ("upper",): _upper,
    ("trim",): lambda s, cut=None: _str(s).strip(cut),
    ("trimPrefix",): lambda s, p: _str(s).removeprefix(_str(p)),
    ("trimSuffix",): lambda s, p: _str(s).removesuffix(_str(p)),
    ("replace",): lambda s, old, new: _str(s).replace(_str(old), _str(new)),
    ("split",): lambda s, sep: _str(s).split(_str(sep)),
    ("join",): lambda xs, sep="": _str(sep).join(_str(x) for x in xs),
    ("len",): lambda x: len(x) if isinstance(x, (str, list, dict)) else _num(None),
    ("int",): _as_int,
    ("float",): _as_float,
    # (Metaflow hands its parameters as NAME,f,{{=toBase64(...)}}: encoded, no location;
    # blind round 70 read the expression as one)
    ("toBase64",): lambda s: base64.b64encode(_str(s).encode()).decode(),
    ("fromBase64",): lambda s: _b64decode(s),
    ("first",): lambda xs: xs[0] if isinstance(xs, list) and xs else None,
    ("last",): lambda xs: xs[-1] if isinstance(xs, list) and xs else None,
    # sprig (the string last, as in a pipeline)
    ("sprig", "lower"): _lower,
    ("sprig", "upper"): _upper,
    ("sprig", "trim"): lambda s: _str(s).strip(),
    ("sprig", "trimAll"): lambda cut, s: _str(s).strip(_str(cut)),
    ("sprig", "trimPrefix"): lambda p, s: _str(s).removeprefix(_str(p)),
    ("sprig", "trimSuffix"): lambda p, s: _str(s).removesuffix(_str(p)),
    ("sprig", "replace"): lambda old, new, s: _str(s).replace(_str(old), _str(new)),
    ("sprig", "nospace"): lambda s: re.sub(r"\s", "", _str(s)),
    ("sprig", "trunc"): _trunc,
    ("sprig", "substr"): lambda a, b, s: _str(s)[_as_int(a):_as_int(b)],
    ("sprig", "cat"): lambda *xs: " ".join(_render(x) for x in xs if x is not None),
    ("sprig", "join"): lambda sep, xs: _str(sep).join(_render(x) for x in xs),
    ("sprig", "splitList"): lambda sep, s: _str(s).split(_str(sep)),
    ("sprig", "default"): lambda d, v=None: v if v not in (None, "", 0, False, [], {}) else d,
    ("sprig", "toString"): lambda v: _render(v),
    ("sprig", "toJson"): _go_json,
    ("sprig", "atoi"): _as_int,
    ("sprig", "int"): _as_int,
    ("sprig", "float64"): _as_float,
    ("sprig", "add"): lambda *xs: sum(_as_int(x) for x in xs),
    ("sprig", "sub"): lambda a, b: _as_int(a) - _as_int(b),
    ("sprig", "mul"): lambda a, b: _as_int(a) * _as_int(b),
    ("sprig", "base"): lambda s: os.path.basename(_str(s).rstrip("/")) or "/",
    ("sprig", "dir"): lambda s: os.path.dirname(_str(s)) or ".",
    ("sprig", "ext"): lambda s: os.path.splitext(_str(s))[1],
    ("sprig", "contains"): lambda sub, s: _str(sub) in _str(s),
    ("sprig", "hasPrefix"): lambda p, s: _str(s).startswith(_str(p)),
    ("sprig", "hasSuffix"): lambda p, s: _str(s).endswith(_str(p)),
    ("sprig", "regexReplaceAll"): lambda r, s, repl: _sprig_regex(r).sub(
        re.sub(r"\$\{?(\d+)\}?", r"\\\1", _str(repl)), _str(s)),
    ("sprig", "regexFind"): lambda r, s: (m.group(0) if (m := _sprig_regex(r).search(_str(s)))
                                          else ""),
    ("sprig", "b64enc"): lambda s: base64.b64encode(_str(s).encode()).decode(),
    ("sprig", "b64dec"): lambda s: _b64decode(s),
    ("sprig", "sha256sum"): lambda s: hashlib.sha256(_str(s).encode()).hexdigest(),
    ("sprig", "quote"): lambda *xs: " ".join(json.dumps(_render(x)) for x in xs),
    ("sprig", "squote"): lambda *xs: " ".join(f"'{_render(x)}'" for x in xs),
}


def _binary(op: str, a: Any, b: Any) -> Any:
    if op == "+":
        if isinstance(a, str) and isinstance(b, str):
            return a + b
        return _num(a) + _num(b)
    if op in ("-", "*", "/", "%"):
        a, b = _num(a), _num(b)
        if op in ("/", "%") and b == 0:
            raise ExprUnknown("division by zero")
        return a - b if op == "-" else a * b if op == "*" else a / b if op == "/" else a % b
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op in ("<", ">", "<=", ">="):
        if isinstance(a, str) != isinstance(b, str):
            raise ExprUnknown(f"{a!r} {op} {b!r}")
        return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
    if op == "in":
        return a in b if isinstance(b, (list, dict, str)) else _num(None)
    if op == "contains":
        return _str(b) in _str(a)
    if op == "startsWith":
        return _str(a).startswith(_str(b))
    if op == "endsWith":
        return _str(a).endswith(_str(b))
    raise ExprUnknown(op)


def evaluate(node: Any, env: dict[str, Any]) -> Any:
    """*node*'s value with the variables of *env* (dotted name -> value)."""
    if isinstance(node, _Lit):
        return node.value
    if isinstance(node, _Var):
        name = ".".join(node.path)
        if name not in env:
            raise ExprUnknown(f"unknown variable {name}")
        return env[name]
    if isinstance(node, _Call):
        fn = _FUNCS.get(node.func)
        if fn is None:
            raise ExprUnknown(f"function {'.'.join(node.func)}")
        try:
            return fn(*(evaluate(a, env) for a in node.args))
        except (TypeError, ValueError, IndexError, KeyError, AttributeError):
            raise ExprUnknown(f"{'.'.join(node.func)}: bad arguments") from None
    assert isinstance(node, _Op)
    op, args = node.op, node.args
    if op == "?:":
        return evaluate(args[1] if evaluate(args[0], env) is True else args[2], env)
    if op == "&&":
        return evaluate(args[0], env) is True and evaluate(args[1], env) is True
    if op == "||":
        return evaluate(args[0], env) is True or evaluate(args[1], env) is True
    if op == "??":
        first = evaluate(args[0], env)
        return first if first is not None else evaluate(args[1], env)
    if op == "!":
        return evaluate(args[0], env) is not True
    if op == "neg":
        return -_num(evaluate(args[0], env))
    if op == "list":
        return [evaluate(a, env) for a in args]
    if op == "get":
        base, key = evaluate(args[0], env), evaluate(args[1], env)
        try:
            return base[key]
        except (TypeError, KeyError, IndexError):
            raise ExprUnknown(f"no {key!r}") from None
    return _binary(op, evaluate(args[0], env), evaluate(args[1], env))


def _render(v: Any) -> str:
    """A tag's value as the controller writes it into the text."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (int, float)):
        return repr(v)
    if v is None:
        raise ExprUnknown("nil")
    return _go_json(v)


def evaluate_tag(text: str, lookup: Callable[[str], Val | None]) -> Val:
    """The Val of the expression tag ``{{=text}}``: its rendered value for each run of the
    loops its variables vary with, from *lookup*'s values; run-time (``parameter-expression``
    or the origin of what only the run knows) when it cannot be evaluated."""
    tag = "{{=" + text + "}}"
    try:
        node = parse(text)
    except (ExprUnknown, RecursionError):  # (RecursionError: `!!!!...` 2,000 deep)
        return runtime("parameter-expression", expression=tag)
    vals: dict[str, Val] = {}
    for name in variables(node):
        v = lookup(name)
        if v is None or v.values is None:
            return v.with_meta(expression=tag) if v is not None else \
                runtime("parameter-expression", expression=tag)
        vals[name] = v
    picks, _ = loop_picks((loop_group(v), len(v.values or ())) for v in vals.values())
    if not picks or len(picks) > MAX_RUNS:
        return runtime("parameter-expression", expression=tag)
    out: list[str] = []
    for pick in picks:
        env = {}
        for name, v in vals.items():
            g = loop_group(v)
            env[name] = (v.values or ())[pick[g] if g is not None else 0]
        try:
            out.append(_render(evaluate(node, env)))
        except (ExprUnknown, RecursionError):
            return runtime("parameter-expression", expression=tag)
    lead = next((v for v in vals.values() if v.origin != "constant"), None)
    origin = lead.origin if lead is not None else "constant"
    if origin == "pipeline-parameter":
        origin = "parameter-expression"
    # what it is built from (the parameter's name, a loop item's field), as substitute keeps
    meta: dict[str, Any] = {**dict(lead.meta if lead is not None else ()), "expression": tag}
    meta.pop("loop", None)
    loops = [loop_group(v) for v in vals.values() if loop_group(v) is not None]
    if loops:
        meta["loop"] = "*".join(dict.fromkeys(str(g) for g in loops))
    return Val(tuple(out), origin, tuple(sorted(meta.items())))
