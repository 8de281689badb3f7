"""Values with provenance, and placeholder substitution for Argo and KFP v2 strings.

A pipeline value is known before the run (a constant, a parameter default or
override, a static loop item) or only at run time (a task output, a required
parameter nobody set). `Val` carries the candidate strings together with where
they came from, so a read found in a container's args can say `origin:
loop-item, item_field: uri` rather than just a string. A loop variable is one
`Val` with several candidates (one per item): it expands into one read per item.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Val:
    """A value and its provenance; `values` is None when only the run knows it."""

    values: tuple[str, ...] | None
    origin: (
        str  # constant | pipeline-parameter | parameter-expression | loop-item | task-output | ...
    )
    meta: tuple[tuple[str, Any], ...] = field(default=())
    raw: Any = None  # the typed value (list, dict, number) when there is exactly one

    @property
    def static(self) -> bool:
        return self.values is not None

    def get(self, key: str) -> Any:
        return dict(self.meta).get(key)

    def with_meta(self, **kw: Any) -> Val:
        m = dict(self.meta)
        m.update({k: v for k, v in kw.items() if v is not None})
        return replace(self, meta=tuple(sorted(m.items())))

    @property
    def single(self) -> str | None:
        return self.values[0] if self.values and len(self.values) == 1 else None


def const(v: Any, origin: str = "constant", **meta: Any) -> Val:
    return Val(
        (to_str(v),), origin, tuple(sorted((k, x) for k, x in meta.items() if x is not None)), v
    )


def runtime(origin: str, **meta: Any) -> Val:
    return Val(None, origin, tuple(sorted((k, x) for k, x in meta.items() if x is not None)))


def to_str(v: Any) -> str:
    """Render a typed value the way the engine puts it into a string field."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


# Loops expand into one read per item: a loop over more static items than this is
# reported with its items but its reads become runtime-only (bounded time and memory
# whatever a file or a withSequence count says).
MAX_LOOP_ITEMS = 10_000


def items_val(items: list[Any]) -> Val:
    """The loop variable of a static loop: one candidate per item (runtime if too many)."""
    if len(items) > MAX_LOOP_ITEMS:
        return runtime("loop-item", items=len(items))
    vals = tuple(json.dumps(i) if isinstance(i, (dict, list)) else to_str(i) for i in items)
    return Val(vals, "loop-item", (("loop", f"L{next(_LOOP_IDS)}"),), items)


# Each static loop's variable carries its own id ("loop" in Val.meta): the fields of one
# loop's items vary together (zip), the variables of nested loops independently (product).
_LOOP_IDS = itertools.count(1)


ARGO_RE = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
KFP_PARAM_RE = re.compile(r"\{\{\$\.inputs\.parameters\[['\"]([^'\"]+)['\"]\]\}\}")


def _interleave(matches: list[re.Match[str]]) -> list[str]:
    """The placeholder text beside each part of ``substitute``'s split (literal parts have
    a value of their own, so theirs is never used)."""
    out: list[str] = []
    for m in matches:
        out += ["", m.group(0)]
    return [*out, ""]


def substitute(
    text: str,
    lookup: Callable[[str], Val | None],
    pattern: re.Pattern[str] = ARGO_RE,
    expression_origin: str = "parameter-expression",
) -> Val | None:
    """Replace placeholders in `text` using `lookup(expr)`; None when there are none.

    A string that is exactly one placeholder takes the looked-up value's
    provenance unchanged. Text around placeholders makes it an expression: the
    provenance of the first non-constant part is kept, with the template as
    `pattern` (pipeline parameters become `parameter-expression`). Placeholders
    the lookup does not know are left as written and make the result runtime-only.
    """
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    if len(matches) == 1 and matches[0].span() == (0, len(text)):
        v = lookup(matches[0].group(1))
        if v is None:
            return runtime("unresolved", pattern=text)
        return v
    parts: list[tuple[str, ...] | None] = []
    groups: list[str | None] = []  # the loop each part varies with (None: a single value)
    lead: Val | None = None
    later: Val | None = None  # the first part only the run knows: what makes it run-time
    pos = 0
    static = True
    for m in matches:
        lit = text[pos : m.start()]
        parts.append((lit,))
        groups.append(None)
        v = lookup(m.group(1))
        if v is None or v.values is None:
            static = False
            if later is None:
                later = v if v is not None else runtime("unresolved")
            parts.append(None)
            groups.append(None)
        else:
            if lead is None or (lead.origin == "constant" and v.origin != "constant"):
                lead = v
            parts.append(v.values)
            groups.append(loop_group(v))
        pos = m.end()
    parts.append((text[pos:],))
    groups.append(None)
    if later is not None and (lead is None or lead.origin == "constant"
                              or later.origin != "workflow-runtime"):
        # another step's output makes it run-time; the run's own name or time does not
        # make it less a parameter's expression
        lead = later
    assert lead is not None
    origin = lead.origin
    if origin == "pipeline-parameter":
        origin = expression_origin
    meta = dict(lead.meta)
    meta["pattern"] = text
    if not static:
        # what is known of it ("s3://ckpt/{{workflow.name}}/last.pt"): says it is a location
        meta["known"] = "".join(
            p[0] if p is not None and len(p) == 1 else m
            for p, m in zip(parts, _interleave(matches), strict=True))
        return Val(None, origin, tuple(sorted(meta.items())))
    # combine: the parts of one loop vary together (zip), different loops independently
    # (the product, as nested loops run), bounded by MAX_LOOP_ITEMS
    picks, total = loop_picks((g, len(p)) for p, g in zip(parts, groups, strict=True)
                              if p is not None)
    if not picks:
        return Val(None, origin, tuple(sorted({**meta, "items": total}.items())))
    out = ["".join(p[pick[g]] if g is not None and pick[g] < len(p) else p[0]
                   for p, g in zip(parts, groups, strict=True) if p is not None)
           for pick in picks]
    if picks[0]:
        meta["loop"] = "*".join(picks[0])
    return Val(tuple(out), origin, tuple(sorted(meta.items())))


def loop_group(v: Val) -> str | None:
    """The loop a value of several items varies with (its ``loop`` meta); None for one."""
    return str(v.get("loop") or "?") if v.values is not None and len(v.values) > 1 else None


def loop_picks(sized: Iterable[tuple[str | None, int]]) -> tuple[list[dict[str, int]], int]:
    """Each run of values of these (loop, item count) pairs, as loop -> item index: values
    of one loop vary together (zip), different loops independently (the product, as nested
    loops run); and how many runs. None of them (``[]``) beyond MAX_LOOP_ITEMS runs."""
    sizes: dict[str, int] = {}
    for g, n in sized:
        if g is not None:
            sizes[g] = max(sizes.get(g, 0), n)
    total = 1
    for n in sizes.values():
        total *= n
    if total > MAX_LOOP_ITEMS:
        return [], total
    return [dict(zip(sizes, combo, strict=True))
            for combo in itertools.product(*(range(n) for n in sizes.values()))], total
