"""A location built in code, as its pieces, and the texts it takes once inputs are known.

Made by `_code` (the visitor reads `f"s3://{bucket}/raw/{day}/x.csv"` as
``("s3://", ("param", "bucket"), "/raw/", ("param", "day"), "/x.csv")``) and
rendered by `_scan`, which knows the inputs' values, and by `_code.analyze`
for pieces that need none. A piece is literal text or a tuple:

- ``("param", NAME)``: the input's value;
- ``("bucket", NAME)`` / ``("key", NAME)``: the bucket or the key of the input's
  ``s3://BUCKET/KEY`` (``bucket, key = uri[5:].split("/", 1)``, ``urlparse``);
- ``("each", PAYLOAD)``: one item of a loop (``for split in ["train", "val"]``,
  ``for fam in json.loads(families)``, ``range(n)``, a comprehension), PAYLOAD
  being JSON: the loop's id, its literal items or the input that lists them,
  the path into an item (``item["uri"]``, tuple unpacking) and a format spec
  (``f"{i:05d}"``). Pieces of one loop take the same item; pieces of two
  loops take every pair;
- ``("fmt", JSON)``: an input's value formatted with a spec (``f"{month:02d}"``), sliced
  (spec ``[0:7]``: ``as_of[:7]``), or the entry it names in a literal dict (spec
  ``{"pick": {KEY: TEXT}}``: ``SOURCES[kind]``);
- ``("fs", SCHEME)``: a location without a scheme is on that store (s3fs).

Bounded: a location that would take more than MAX_TEXTS texts renders as
unknown (None), as does an item we cannot format.
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
from typing import Any

# literal text and (kind, value) parts of a location built in code
Pieces = tuple["str | tuple[str, str]", ...]

MAX_TEXTS = 256  # texts one location may take (loops multiply)
ON_FS = "fs"
BUCKET_PATH = re.compile(r"[a-z0-9][a-z0-9._-]{2,62}/")  # "bucket/key", as s3fs takes it
_FROM_INPUT = ("param", "bucket", "key")


def literal(pieces: Pieces | None) -> str | None:
    """The text of *pieces* made of literal text only (constants joined); else None."""
    if pieces is None or not all(isinstance(p, str) for p in pieces):
        return None
    return "".join(pieces)  # type: ignore[arg-type]


def is_built(pieces: Pieces) -> bool:
    """A location made in the code, not an input passed as it is: inputs and some literal
    text, a part of an input's location, or a loop's item."""
    kinds = {p[0] for p in pieces if isinstance(p, tuple)}
    return bool(kinds & {"bucket", "key", "each", "fmt"}) or ("param" in kinds and any(
        isinstance(p, str) and p for p in pieces))


def each(loop: str, *, items: list[Any] | None = None, param: str | None = None,
         how: str = "json", enum: bool = False) -> tuple[str, str]:
    """The piece for one item of a loop: literal *items*, or those the input *param* lists
    (`how`: ``json`` its JSON list, ``split:SEP`` its text split, ``range`` range(int),
    ``items``/``keys`` its JSON dict's)."""
    return ("each", json.dumps({"loop": loop, "items": items, "param": param, "how": how,
                                "enum": enum, "path": [], "spec": None}))


def each_part(piece: tuple[str, str], key: str | int | None = None,
              spec: str | None = None) -> tuple[str, str] | None:
    """*piece* narrowed to ``item[key]`` or formatted with *spec* (None: not a loop item)."""
    if piece[0] != "each":
        return None
    d = json.loads(piece[1])
    if spec is not None:
        if d["spec"] is not None:
            return None
        d["spec"] = spec
    if key is not None:
        if d["spec"] is not None:
            return None
        d["path"].append(key)
    return ("each", json.dumps(d))


def formatted(param: str, spec: str | dict[str, Any]) -> tuple[str, str]:
    """The piece for an input formatted with *spec* (``f"{month:02d}"``)."""
    return ("fmt", json.dumps([param, spec]))


def needs(pieces: Pieces) -> list[str]:
    """The inputs whose values *pieces* need, in order."""
    out = []
    for p in pieces:
        if isinstance(p, tuple) and p[0] in _FROM_INPUT:
            out.append(p[1])
        elif isinstance(p, tuple) and p[0] == "fmt":
            out.append(json.loads(p[1])[0])
        elif isinstance(p, tuple) and p[0] == "each":
            d = json.loads(p[1])
            if d["param"]:
                out.append(d["param"])
            if (d.get("date") or {}).get("base", [""])[0] == "param":
                out.append(d["date"]["base"][1])
    return list(dict.fromkeys(out))


def date_text(spec: dict[str, Any], values: dict[str, str], item: Any = 0) -> str | None:
    """A date computed in code (``_code``: ``end - timedelta(days=i)``) written with its
    format: its base (a literal ISO date, or an input parsed with a format) plus its seconds
    and *item* times its seconds per item; None when the input is not known or not a date."""
    base = spec["base"]
    try:
        if base[0] == "iso":
            day = datetime.datetime.fromisoformat(base[1])
        else:
            raw = values.get(base[1])
            if raw is None:
                return None
            day = datetime.datetime.fromisoformat(raw) if base[2] == "iso" else \
                datetime.datetime.strptime(raw, base[2])
        shift = spec["seconds"] + spec["scale"] * int(item)
        return (day + datetime.timedelta(seconds=shift)).strftime(spec["out"])
    except (ValueError, TypeError, OverflowError):
        return None


def render_all(pieces: Pieces, values: dict[str, str]) -> list[str] | None:
    """Every text *pieces* takes with these input values (one per combination of loop
    items); None when a value is not known, an item cannot be formatted, or too many."""
    loops: dict[str, list[Any]] = {}
    for p in pieces:
        if isinstance(p, tuple) and p[0] == "each":
            d = json.loads(p[1])
            items = _items(d, values)
            if items is None or loops.setdefault(d["loop"], items) != items:
                return None
    total = 1
    for items in loops.values():
        total *= len(items)
    if total > MAX_TEXTS:
        return None
    out = []
    for combo in itertools.product(*loops.values()):
        chosen = dict(zip(loops, combo, strict=True))
        text = _render(pieces, values, chosen)
        if text is None:
            return None
        out.append(text)
    return list(dict.fromkeys(out))


def render(pieces: Pieces, values: dict[str, str]) -> str | None:
    """The one text of *pieces* (None: a value is not known, or it takes several)."""
    texts = render_all(pieces, values)
    return texts[0] if texts is not None and len(texts) == 1 else None


def _items(d: dict[str, Any], values: dict[str, str]) -> list[Any] | None:
    items = d["items"]
    if items is None:
        value = values.get(d["param"])
        if value is None:
            return None
        how = d["how"]
        try:
            if how == "json":
                items = json.loads(value)
            elif how == "one":  # a dict (or list) input taken as it is: one item
                items = [json.loads(value)]
            elif how == "range":
                # (a KFP v2 integer input's constant is written 2.0 in the IR: blind round 71)
                n = float(value)
                if not n.is_integer():
                    return None
                items = list(range(min(int(n), MAX_TEXTS + 1)))
            elif how in ("items", "keys"):  # a dict input's .items() / .keys()
                d_in = json.loads(value)
                if not isinstance(d_in, dict):
                    return None
                items = [[k, v] for k, v in d_in.items()] if how == "items" else list(d_in)
            else:
                items = value.split(how.partition(":")[2])
        except (ValueError, TypeError):
            return None
        if not isinstance(items, list):
            return None
    items = items[: MAX_TEXTS + 1]
    return [[i, x] for i, x in enumerate(items)] if d["enum"] else items


def _item_text(d: dict[str, Any], item: Any) -> str | None:
    x = item
    for k in d["path"]:
        try:
            x = x[k]
        except (KeyError, IndexError, TypeError):
            return None
    try:
        if d["spec"] is not None:
            return format(x, d["spec"])
    except (ValueError, TypeError):
        return None
    if isinstance(x, (dict, list)):
        return None
    return str(x)


def url_base(url: str) -> str | None:
    """What ``urljoin(url, "x")`` keeps of *url*: up to its last ``/`` (the whole of
    ``http://minio:9000/models/``; ``s3://b/v5/`` of ``s3://b/v5/old.npy``), a ``/`` added to
    a bare host; None for no URL."""
    if "://" not in url:
        return None
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{rest.rsplit('/', 1)[0]}/" if "/" in rest else f"{url}/"


def _part(p: tuple[str, str], values: dict[str, str]) -> str | None:
    """The text of an input's piece: its value (formatted, for a "fmt" piece), or the bucket
    or key of its location."""
    if p[0] == "fmt":
        name, spec = json.loads(p[1])
        raw = values.get(name)
        if raw is None:
            return None
        if isinstance(spec, dict) and "dirname" in spec:  # os.path.dirname(holdout_uri)
            return raw.rsplit("/", 1)[0] if "/" in raw else None
        if isinstance(spec, dict) and "urlbase" in spec:
            return url_base(raw)
        if isinstance(spec, dict) and "date" in spec:  # a date parsed from the input
            return date_text(spec["date"], values)
        if isinstance(spec, dict) and "method" in spec:  # season.lower() of an input
            try:
                made = getattr(raw, spec["method"])(*spec["args"])
            except (AttributeError, TypeError, ValueError):
                return None
            return made if isinstance(made, str) else None
        if isinstance(spec, dict):  # SOURCES[kind] of a literal dict: the entry it names
            picked = spec["pick"].get(raw)
            return picked if isinstance(picked, str) else None
        if spec.startswith("["):  # as_of[:7]: a slice of the text
            lo, hi = (int(x) if x else None for x in spec[1:-1].split(":"))
            return raw[lo:hi]
        # (a KFP v2 int input's default is written 4.0 in the IR)
        for conv in (int, lambda x: int(float(x)) if float(x).is_integer() else float(x),
                     float, str):
            try:
                return format(conv(raw), spec)
            except (ValueError, TypeError):
                continue
        return None
    value = values.get(p[1])
    if value is None or p[0] == "param":
        return value
    scheme, sep, rest = value.partition("://")
    if scheme not in ("s3", "s3a") or not rest:
        return None  # (a bucket and key for boto3: an S3 location's)
    bucket, _, key = rest.partition("/")
    return bucket if p[0] == "bucket" else key


def _render(pieces: Pieces, values: dict[str, str], chosen: dict[str, Any]) -> str | None:
    out = []
    scheme = ""
    for p in pieces:
        if isinstance(p, str):
            out.append(p)
        elif p[0] == ON_FS:
            scheme = p[1]
        elif p[0] == "each":
            d = json.loads(p[1])
            text = date_text(d["date"], values, chosen[d["loop"]]) if d.get("date") else \
                _item_text(d, chosen[d["loop"]])
            if text is None:
                return None
            out.append(text)
        else:
            text = _part(p, values)
            if text is None:
                return None
            out.append(text)
    # ("s3://" + uri.replace("s3://", "", 1): the scheme put back on a location whose
    # pieces kept it, _code)
    text = re.sub(r"^([a-z0-9]+://)\1+", r"\1", "".join(out))
    if scheme and "://" not in text and BUCKET_PATH.match(text):
        text = f"{scheme}://{text}"  # s3fs's, gcsfs's "bucket/key"
    scheme, sep, rest = text.partition("://")  # os.path.join("s3://b/x/", "y"): one slash
    # (not the "//" of another location in the same text: SQL naming two)
    return scheme + sep + re.sub(r"(?<!:)//+", "/", rest) if sep else text
