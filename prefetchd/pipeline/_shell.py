"""A shell script's words as the shell would run them, for the copy rules of `_uri`.

Who calls it: `_uri.tokenize` (every container command line and script, pipeline steps and
training jobs alike). Data flow: `shell_args` puts `sh -c SCRIPT ARG0 ...`'s arguments in
place of `$0`, `$1` (not inside a function's body or single quotes); `script_words` splits
the script into words, `;` between commands, and does what bash would do before a command
runs: the script's own variables (and the container's env) expanded, parameter expansion
(`${1%/}`, `${X:-d}`, `${X/old/new}`), `$(dirname X)`/`$(basename X)`, `$(jq -r .a F)` of
a file the script wrote, arrays, `case` branches' values, unquoted heredocs, `for` loops
over literal items and `while read` over a literal heredoc written out per item, functions
in place of their calls (a variable set from a loop's item or a function's argument keeps
the reference, filled there), `xargs`/`parallel` fan-outs per item. What only the run
knows stays a variable in the word (`s3://b/dicom/${sid}/`: a run-time location, `_uri`).
Bounded: at most MAX_SHELL_LOOP_ITEMS items a loop, _MAX_EXPANDED_WORDS words, _MAX_CALLS
calls.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import shlex
from collections.abc import Callable
from functools import partial

from prefetchd.pipeline import _uri

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})


def runs_script(words: list[str], i: int) -> bool:
    """Whether ``words[i]`` is a shell given a script by the flag after it: ``sh -c``,
    ``bash -lc``, ``bash -euxc`` (short options holding ``c``; a long one is not)."""
    flag = words[i + 1] if i + 1 < len(words) else ""
    return words[i].rsplit("/", 1)[-1] in SHELLS and flag.startswith("-") and \
        not flag.startswith("--") and "c" in flag[1:]
# ${X%/}, ${X##*/}, ${X:-default}, ${X/old/new}: an operator of parameter expansion and
# its word
_PARAM_OP = r"(%%|##|%|#|:-|-|:=|=|//|/)([^}]*)"
_POSITIONAL_RE = re.compile(r'"\$@"|"\$\*"|\$@|\$\*|"\$\{?(\d)\}?"|\$\{(\d)' + _PARAM_OP
                            + r'\}|\$\{?(\d)\}?')


# an operator on a placeholder's value (a pipeline's, known later), applied once that is
# resolved (strip_suffixes): the value between the marks, the operator by its index in
# _PENDING_OPS and its word in hex; words of shell-safe characters, so quoting keeps them
_PENDING_OPS = ("%", "%%", "#", "##", "/", "//", "jq")
_PENDING_OP = re.compile(r"@@OPB@@((?:(?!@@OPB@@).)*?)@@OPE([0-6])x([0-9a-f]*)@@", re.S)
PENDING_MARK = "@@OP"


def pending(value: str, op: str, word: str) -> str:
    """*value* (holding a placeholder) with ``op``/``word`` to apply once it is resolved."""
    return f"@@OPB@@{value}@@OPE{_PENDING_OPS.index(op)}x{word.encode().hex()}@@"


def strip_suffixes(text: str) -> str:
    """*text* with each pending operator (``${1%/}``, ``${ROOT/a/b}`` of a placeholder's
    value) applied to its value, resolved now; innermost first."""
    while (m := _PENDING_OP.search(text)) is not None:
        made = param_expand(m.group(1), _PENDING_OPS[int(m.group(2))],
                            bytes.fromhex(m.group(3)).decode(errors="replace")) or ""
        text = text[:m.start()] + made + text[m.end():]
    return text


def _substitute(value: str, op: str, word: str) -> str:
    """Bash's ``${X/pattern/string}`` (``//``: every match; ``/#``, ``/%``: anchored at the
    start, the end), the pattern a glob matched longest first."""
    pattern, _, string = word.partition("/")
    anchor = ""
    if op == "/" and pattern[:1] in ("#", "%"):
        anchor, pattern = pattern[0], pattern[1:]
    if not pattern:
        return value
    out, i = "", 0
    while i <= len(value):
        ends = [len(value)] if anchor == "%" else range(len(value), i, -1)
        j = next((j for j in ends if fnmatch.fnmatchcase(value[i:j], pattern)), None)
        if j is not None and j > i:
            out += string
            if op == "/":
                return out + value[j:]
            i = j
            continue
        if anchor == "#" or i == len(value):
            return out + value[i:]
        out += value[i]
        i += 1
    return out


_JQ_STEP = re.compile(r'\.([A-Za-z_]\w*)|\.?\["([^"]*)"\]|\.?\[(\d+)\]')


def jq_path(text: str, path: str) -> str | None:
    """``jq -r PATH`` of the JSON *text* for a path of fields and indexes (``.a.b``,
    ``.["a-b"]``, ``.xs[0]``) that leads to a string or a number; None otherwise."""
    try:
        node: object = json.loads(text)
    except ValueError:
        return None
    at = 0
    while at < len(path):
        m = _JQ_STEP.match(path, at)
        if m is None:
            return None
        key = m.group(1) if m.group(1) is not None else m.group(2)
        if key is not None and isinstance(node, dict):
            node = node.get(key)
        elif m.group(3) is not None and isinstance(node, list) and int(m.group(3)) < len(node):
            node = node[int(m.group(3))]
        else:
            return None
        at = m.end()
    if isinstance(node, bool) or not isinstance(node, (str, int, float)):
        return None
    return str(node)


# $(jq -r '.a.b' FILE): a file the script wrote (its text known, or a pipeline's value)
_JQ_CALL = re.compile(r"\$\(\s*jq\s+(?:-r|--raw-output)\s+(['\"]?)(\.[^'\"\s()]*)\1\s+"
                      r"(['\"]?)([^'\"\s()]+)\3\s*\)")


def _jq_calls(line: str, files: dict[str, str]) -> str:
    """*line* with each ``$(jq -r PATH FILE)`` of a file the script wrote replaced by the
    value it prints (quoted), pending on a pipeline's value (applied once resolved)."""
    def one(m: re.Match[str]) -> str:
        text = files.get(m.group(4))
        if text is None:
            return m.group(0)
        value = pending(text, "jq", m.group(2)) if "@@PH" in text else jq_path(text, m.group(2))
        return m.group(0) if value is None else shlex.quote(value)
    return _JQ_CALL.sub(one, line) if "jq" in line and files else line


def _written_file(command: list[str], files: dict[str, str], script: str) -> bool:
    """Record the text ``printf '%s' VALUE > FILE`` or ``echo VALUE > FILE`` writes; True
    when the script reads that file only with jq (the value is data jq picks from, what it
    picks is read: the command itself names no location)."""
    if len(command) < 3 or command[0] not in ("printf", "echo"):
        return False
    words = [w for w in command[1:] if w not in ("-n", "-e")]
    if command[0] == "printf" and words[:1] in (["%s"], ["%s\\n"]):
        words = words[1:]
    if len(words) == 3 and words[1] == ">":
        path, value = words[2], words[0]
    elif len(words) == 2 and words[1].startswith(">") and len(words[1]) > 1:
        path, value = words[1][1:], words[0]
    else:
        return False
    files[path] = value
    uses = len(re.findall(re.escape(path) + r"(?![\w./-])", script))
    picks = len(re.findall(r"\bjq\b[^\n()|;]*?" + re.escape(path) + r"(?![\w./-])", script))
    return picks > 0 and uses == 1 + picks


_HEREDOC_TO = re.compile(r"\b(?:cat|tee)\b[^|;&]*?(?:>\s*|tee\s+)([\w./-]+)")


def param_expand(value: str | None, op: str, word: str) -> str | None:
    """Bash's ``${X<op><word>}`` for a value *value* (None: unset): ``%``/``%%`` strip the
    shortest/longest matching suffix, ``#``/``##`` prefix (glob patterns), ``/``/``//``
    replace the first/every match, ``:-``/``-``/``:=``/``=`` the default. None when the
    result is not known."""
    if op in (":-", ":=") and not value or op in ("-", "=") and value is None:
        return word
    if value is None:
        return None
    if op in ("/", "//"):
        return _substitute(value, op, word)
    if op == "jq":
        return jq_path(value, word)
    if op in ("%", "%%"):
        cuts = [i for i in range(len(value), -1, -1) if fnmatch.fnmatchcase(value[i:], word)]
        return value[:(cuts[0] if op == "%" else cuts[-1])] if cuts else value
    if op in ("#", "##"):
        cuts = [i for i in range(len(value) + 1) if fnmatch.fnmatchcase(value[:i], word)]
        return value[(cuts[0] if op == "#" else cuts[-1]):] if cuts else value
    return value


def shell_args(argv: list[str]) -> list[str]:
    """`sh -c SCRIPT ARG0 ARG1...`: the script with `$0`, `$1`, `"$@"` replaced by its args.

    KFP components often pass their inputs that way (`sh -c 'aws s3 cp "$0" /data' SRC`);
    without this the operands would be read out of order.
    """
    for i in range(len(argv) - 3):
        if runs_script(argv, i) and _POSITIONAL_RE.search(argv[i + 2]):
            rest = argv[i + 3 :]

            def sub(m: re.Match[str], rest: list[str] = rest) -> str:
                if m.group(0).strip('"') in ("$@", "$*"):
                    return " ".join(shlex.quote(x) for x in rest[1:])
                if m.group(2) is not None:  # ${1%/}
                    n = int(m.group(2))
                    arg = rest[n] if n < len(rest) else None
                    if arg is not None and "@@PH" in arg and m.group(3) in _PENDING_OPS:
                        # a placeholder (a pipeline's value, known later): the operator
                        # applies once it is resolved (strip_suffixes)
                        return shlex.quote(pending(arg, m.group(3), m.group(4)))
                    made = param_expand(arg, m.group(3), m.group(4))
                    return m.group(0) if made is None else shlex.quote(made)
                n = int(m.group(1) or m.group(5))
                return shlex.quote(rest[n]) if n < len(rest) else ""

            return [*argv[: i + 2], _outside_functions(
                argv[i + 2], lambda text, sub=sub: _POSITIONAL_RE.sub(sub, text))]
    return argv


def _outside_single_quotes(line: str, fn: Callable[[str], str]) -> str:
    """*line* with *fn* applied to its parts outside single quotes (a ``'`` inside double
    quotes or escaped is no quote)."""
    parts: list[str] = []
    start = i = 0
    dq = False
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            dq = not dq
        elif c == "'" and not dq:
            end = line.find("'", i + 1)
            if end < 0:
                break
            parts += [fn(line[start:i]), line[i:end + 1]]
            start = i = end + 1
            continue
        i += 1
    return "".join([*parts, fn(line[start:])])


_FUNCTION_START = re.compile(
    r"^\s*(?:function\s+[A-Za-z_][\w-]*\s*(?:\(\))?|[A-Za-z_][\w-]*\s*\(\))\s*\{")


def _braces(line: str) -> int:
    """How many more braces *line* opens than it closes (``${X}`` not counted)."""
    braces = re.sub(r"\$\{[^}]*\}", "", line)
    return braces.count("{") - braces.count("}")


def _set_names(command: list[str]) -> list[str]:
    """The names a command in a function's body sets for the body alone: its ``local``
    (``declare``) ones, and any whose value holds the function's arguments (``$1``)."""
    local = bool(command) and command[0] in ("local", "declare", "typeset")
    names = []
    for w in command[1:] if command and command[0] in _DECLARE else command:
        m = _ASSIGN.fullmatch(w)
        if m is None and local and _NAME.fullmatch(w):
            names.append(w)  # local src: set later in the body
        elif m is not None and (local or re.search(r"\$\{?\d", m.group(2))):
            names.append(m.group(1))
    if command[:2] == ["printf", "-v"] and len(command) > 2:
        names.append(command[2])
    return names


def _outside_functions(script: str, fn: Callable[[str], str]) -> str:
    """*script* with *fn* applied to its lines outside shell function bodies (in a body,
    ``$1`` is the function's own argument, not the script's) and outside single quotes
    (``xargs sh -c '... $0'``: the inner script's own)."""
    out: list[str] = []
    depth = 0
    for line in script.split("\n"):
        if depth == 0 and not _FUNCTION_START.match(line):
            out.append(_outside_single_quotes(line, fn))
            continue
        out.append(line)
        depth = max(0, depth + _braces(line))
    return "\n".join(out)



_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*['\"]?([A-Za-z_]\w*)['\"]?")  # not <<< (a string)


_BRACED = re.compile(r"\$\{[^}\s]*\}")
_SHELL_REF = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)|\$\{([A-Za-z_]\w*)" + _PARAM_OP
                        + r"\}")
_ASSIGN = re.compile(r"([A-Za-z_]\w*)=(.*)", re.S)
_NAME = re.compile(r"[A-Za-z_]\w*")
_DECLARE = frozenset({"export", "readonly", "local", "declare", "typeset"})


def _expanded(word: str, known: dict[str, str]) -> str:
    """*word* with the script's known variables expanded (and nothing recorded)."""
    return _SHELL_REF.sub(partial(_known_value, known), word) if "$" in word else word


def _known_value(known: dict[str, str], m: re.Match[str]) -> str:
    if m.group(3) is not None:  # ${ROOT%/}, ${SPLIT:-test}
        value = known.get(m.group(3))
        if value is not None and "@@PH" in value and m.group(4) in _PENDING_OPS:
            # ROOT="{{...}}": applied once the placeholder is resolved, as ${1%/} is
            return pending(value, m.group(4), m.group(5))
        made = param_expand(value, m.group(4), m.group(5))
        return m.group(0) if made is None else made
    return known.get(m.group(1) or m.group(2), m.group(0))


_PLAIN_REF = re.compile(r"\$(?:\{([A-Za-z_]\w*|\d)\}|([A-Za-z_]\w*|\d))")


def _deferred(name: str, value: str) -> bool:
    """Whether *value*, holding variables not known where it is set, can stand for *name*
    as it is: only plain references (``$h``, ``${1}``), none to *name* itself. A loop's item
    or a function's argument fills them where the script uses *name* (``SRC="$ROOT/$h/"``
    in ``for h in 00 01``: the loop, written out per item, reads both folders; blind round
    42); a command's output (``$(date)``) or an operator (``${X%/}``) is not kept."""
    if "`" in value or not _PLAIN_REF.search(value):
        return False
    rest = _PLAIN_REF.sub("", value)
    return "$" not in rest and all((m.group(1) or m.group(2)) != name
                                   for m in _PLAIN_REF.finditer(value))


# $(dirname X), $(basename X [SUFFIX]) of a word with no space: evaluated once X is known
_PATH_OP = re.compile(r"\$\((dirname|basename)\s+([^()\s]+)(?:\s+([^()\s]+))?\)")


def _path_op(m: re.Match[str]) -> str:
    arg = m.group(2)
    if "$" in arg or "`" in arg:
        return "${cmd}"  # a part of the word only the run makes
    if "@@PH" in arg:  # a pipeline's value, known later: as ${X%/*} and ${X##*/} do
        if m.group(1) == "dirname":
            return pending(arg, "%", "/*")
        base = pending(arg, "##", "*/")
        return pending(base, "%", m.group(3)) if m.group(3) else base
    if m.group(1) == "dirname":
        return posixpath.dirname(arg.rstrip("/")) or "."
    base = posixpath.basename(arg.rstrip("/"))
    suffix = m.group(3) or ""
    return base[:-len(suffix)] if suffix and base.endswith(suffix) and base != suffix else base


def _shell_vars(words: list[str], known: dict[str, str]) -> list[str]:
    """*words* with the script's own variables expanded (``REL="{{...}}"`` on one line,
    ``s3://models/${REL}/`` on the next); a command of assignments only (``export`` too)
    records them in *known*, one whose value runs a command (``$(date)``) forgets it, one
    holding plain references only the run fills keeps them (``_deferred``)."""
    words = [_PATH_OP.sub(_path_op, w) if "$(" in w else w
             for w in (_expanded(w, known) for w in words)]
    declare = bool(words) and words[0] in _DECLARE
    body = words[1:] if declare else words
    # (``local h="$1" src``: a name declared without a value is no command's word)
    pairs = [_ASSIGN.fullmatch(w) for w in body if not w.startswith("-")
             and not (declare and _NAME.fullmatch(w))]
    if body and all(pairs):
        for m in pairs:
            assert m is not None
            name, value = m.group(1), m.group(2)
            if ("$" in value or "`" in value) and not _deferred(name, value):
                known.pop(name, None)  # known at run time only
            else:
                known[name] = value
    return words


def _commands(words: list[str]) -> list[list[str]]:
    """A line's words split into its commands at `;` (shlex leaves it on the word before)."""
    out: list[list[str]] = [[]]
    for w in words:
        if w == ";":
            out.append([])
        elif w.endswith(";") and not w.endswith("\\;"):  # find -exec ... \; is no separator
            out[-1].append(w[:-1])
            out.append([])
        else:
            out[-1].append(w)
    return [c for c in out if c]


def _local_assignment(words: list[str], script: str) -> bool:
    """A command that only sets script variables (not exported) the script goes on to use:
    no reading of its own, its uses carry the value (`DATA=/data/x` then `--train "$DATA/t"`
    reads `/data/x/t`, not all of `/data/x`)."""
    if words and words[0] in _DECLARE and words[0] != "export":
        return False
    exported = bool(words) and words[0] == "export"
    pairs = [_ASSIGN.fullmatch(w) for w in (words[1:] if exported else words)]
    if not pairs or not all(pairs):
        return False
    # an exported one is the programs' too (DATA_DIR, read whole), unless it is named as a
    # root the script builds on (export POSITIONS_ROOT=s3://... then ${POSITIONS_ROOT}/x)
    return all(re.search(r"\$\{?" + re.escape(m.group(1)) + r"\b", script) and not (
        exported and not _uri.ROOT_WORDS & set(m.group(1).upper().split("_"))
        and ("://" in m.group(2) or m.group(2).startswith("/")))
               for m in pairs if m is not None)


def _read_assignment(command: list[str], known: dict[str, str],
                     arrays: dict[str, list[str]]) -> bool:
    """``read -r BUCKET PREFIX <<< "bkt data/v1"``, ``IFS=, read -ra ZONES <<< "A1,A2"``:
    the names (or the array) set from the here-string's words, when it is known (else
    forgotten)."""
    ifs = None
    if command and command[0].startswith("IFS="):
        ifs, command = command[0][4:], command[1:]
    if len(command) < 4 or command[0] != "read" or command[-2] != "<<<":
        return False
    text, names, array = command[-1], [], None
    words = command[1:-2]
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-"):
            if "a" in w[1:] and i + 1 < len(words):
                array = words[i + 1]
                i += 1
            elif w in ("-d", "-n", "-N", "-p", "-t", "-u") and i + 1 < len(words):
                i += 1
        elif _NAME.fullmatch(w):
            names.append(w)
        i += 1
    values = ([x for x in text.split(ifs)] if ifs else text.split()) if not (
        "$" in text or "@@PH" in text) else None  # (a pipeline's value: known later)
    if array is not None:
        if values is None:
            arrays.pop(array, None)
        else:
            arrays[array] = values[:MAX_SHELL_LOOP_ITEMS]
    for k, name in enumerate(names):
        if values is None or k >= len(values):
            known.pop(name, None)
        else:  # the last name takes the rest of the line
            known[name] = values[k] if k < len(names) - 1 else (ifs or " ").join(values[k:])
    return True


def _mapfile(out: list[str], lines: list[str], arrays: dict[str, list[str]]) -> bool:
    """``mapfile -t REFS <<'END'`` (``readarray``) then the heredoc's lines: the array set
    to them, the command gone from *out*."""
    end = len(out) - (1 if out[-1:] == [";"] else 0)
    start = command_start(out, end)
    command = out[start:end]
    if not command or command[0] not in ("mapfile", "readarray") or not command[-1].startswith(
            "<<"):
        return False
    names = [w for w in command[1:-1] if _NAME.fullmatch(w)]
    if len(names) != 1:
        return False
    arrays[names[0]] = [x.strip() for x in lines if x.strip()][:MAX_SHELL_LOOP_ITEMS]
    del out[start:]
    return True


def _printf_assignment(command: list[str], known: dict[str, str]) -> bool:
    """``printf -v ANN "s3://b/%s/x_%s.zip" "$CITY" "$REL"``: ANN set to the text, when the
    format has only ``%s`` fields and the values are known (else ANN is forgotten)."""
    if len(command) < 4 or command[:2] != ["printf", "-v"] or not _NAME.fullmatch(command[2]):
        return False
    fmt, args = command[3], command[4:]
    parts = fmt.replace("%%", "\x00").split("%s")
    if len(parts) == len(args) + 1 and "%" not in "".join(parts) and not any(
            "$" in a and not _deferred(command[2], a) for a in args):
        known[command[2]] = "".join(p + a for p, a in zip(parts, [*args, ""], strict=True)
                                    ).replace("\x00", "%")
    else:
        known.pop(command[2], None)
    return True


def _substitutions(words: list[str]) -> list[str]:
    """A command substitution's command as words of their own: ``LATEST=$(aws s3 ls
    s3://b/ckpt/ | tail -1)`` gives ``LATEST=$(``, ``aws``, ... ``s3://b/ckpt/``, ``|``,
    ``tail``, ``-1``, ``)``, so ``aws s3 ls`` is seen as the command it is."""
    out: list[str] = []
    depth = 0
    for w in words:
        at = w.find("$(")
        if at >= 0 and not depth and _PATH_OP.match(w, at):
            out.append(w)  # "$(dirname "$M")/calibration.json": known once M is
            continue
        if at > 0 and w[at - 1] != "=" and not depth and "://" not in w[:at]:
            # "/data/$(basename "$src")/": a part of one word the run makes, whose own words
            # (a location the basename is taken of) are no operands of the copy
            out.append(re.sub(r"\$\([^()]*\)", "${cmd}", w))
            continue
        if at >= 0 and len(w) > at + 2 and not w.startswith("'"):
            out.append(w[:at + 2])
            w = w[at + 2:]
            depth += 1
        if depth and w.endswith(")") and w.count("(") < w.count(")") and len(w) > 1:
            out += [w[:-1], ")"]
            depth -= 1
            continue
        out.append(w)
    return out


_LOOP_ITEM = re.compile(r"[\w.\-/:=@+,%]+")
_LOOP_RANGE = re.compile(r"\{(-?\d+)\.\.(-?\d+)\}")
_LOOP_LIST = re.compile(r"\{([^{}\s]*,[^{}\s]*)\}")  # {de,fr,sw}: bash's brace list
# $(seq 4 9), `seq -w 1 2 12`, $(seq -f "%03g" 1 8): the numbers seq prints
_SEQ = re.compile(r"(?:\$\(|`)\s*seq((?:\s+(?:-w|-f\s*\S+))*)\s+(-?\d+)(?:\s+(-?\d+))?"
                  r"(?:\s+(-?\d+))?\s*(?:\)|`)")
MAX_SHELL_LOOP_ITEMS = 32  # a `for` loop over more literal items stays run-time
_MAX_EXPANDED_WORDS = 20_000


def _var_ref(name: str) -> re.Pattern[str]:
    """A use of the shell variable *name*: ``${name}`` or ``$name``."""
    return re.compile(r"\$\{" + re.escape(name) + r"\}|\$" + re.escape(name) + r"(?!\w)")


def _loop_items(words: list[str]) -> list[str] | None:
    """The items of ``for NAME in ITEMS`` when each is a literal word or a numeric brace
    range (``{0..7}``, ``2024-{04..05}``); None when one is only known at run time
    (``$(cat f)``, a glob)."""
    items: list[str] = []
    if (seq := _SEQ.fullmatch(" ".join(words))) is not None:
        return _seq_items(seq)
    for w in words:
        if (lst := _LOOP_LIST.search(w)) is not None:  # {de,fr,sw}, g2p/{a,b}.tsv
            words_of = [w[:lst.start()] + x + w[lst.end():] for x in lst.group(1).split(",")]
            if not all(_LOOP_ITEM.fullmatch(x) for x in words_of):
                return None
            items += words_of
            continue
        m = _LOOP_RANGE.search(w)
        if m is not None:  # {0..7}, 2024-{04..05}, part-{00..03}.tar
            head, tail = w[:m.start()], w[m.end():]
            a, b = int(m.group(1)), int(m.group(2))
            if abs(b - a) >= MAX_SHELL_LOOP_ITEMS or not all(
                    _LOOP_ITEM.fullmatch(x) for x in (head, tail) if x):
                return None
            # bash pads every item to the widest bound when one is written with a leading
            # zero ({00..03}: 00 01 02 03)
            width = max(len(m.group(1)), len(m.group(2))) if any(
                g.lstrip("-").startswith("0") and len(g.lstrip("-")) > 1
                for g in m.groups()) else 0
            items += [f"{head}{i:0{width}d}{tail}" for i in
                      (range(a, b + 1) if b >= a else range(a, b - 1, -1))]
        elif _LOOP_ITEM.fullmatch(w) and not any(c in w for c in "*?["):
            items.append(w)
        else:
            return None
    return items if 0 < len(items) <= MAX_SHELL_LOOP_ITEMS else None


def _seq_items(m: re.Match[str]) -> list[str] | None:
    """What ``seq [-w] [-f FMT] [FIRST [STEP]] LAST`` prints (a _SEQ match), when it is a
    few whole numbers; None for a format other than a padded integer's (``%g``, ``%03g``,
    ``%02.0f`` are; seq -f takes no other conversion)."""
    nums = [int(g) for g in m.groups()[1:] if g is not None]
    first, step, last = (1, 1, nums[0]) if len(nums) == 1 else (
        nums[0], 1, nums[1]) if len(nums) == 2 else (nums[0], nums[1], nums[2])
    if step == 0 or not 0 <= (last - first) // step < MAX_SHELL_LOOP_ITEMS:
        return None
    values = list(range(first, last + (1 if step > 0 else -1), step))
    opts = m.group(1).split()
    fmt = "%d"
    if "-w" in opts:  # every number as wide as the widest
        fmt = f"%0{max(len(str(v)) for v in values)}d"
    for k, o in enumerate(opts):
        if o.startswith("-f"):
            f = (o[2:] or (opts[k + 1] if k + 1 < len(opts) else "")).strip("'\"")
            conv = re.fullmatch(r"(.*?)%(0?\d*)(?:\.0)?[gfd](.*)", f)
            if conv is None or "%" in conv.group(1) + conv.group(3):
                return None
            fmt = conv.group(1).replace("%%", "%") + f"%{conv.group(2)}d" + conv.group(3)
    items = [fmt % v for v in values]
    return items if all(_LOOP_ITEM.fullmatch(x) for x in items) else None


def _loop_end(words: list[str], do_at: int) -> int:
    """The index of the ``done`` that closes the loop whose ``do`` is at *do_at* (nested
    loops counted; each keyword starts a command), or ``len(words)`` when none does."""
    depth = 1
    for m in range(do_at + 1, len(words)):
        if words[m - 1] == ";" and words[m] == "do":
            depth += 1
        elif words[m - 1] == ";" and words[m] == "done":
            depth -= 1
            if depth == 0:
                return m
    return len(words)


def _for_loops(words: list[str]) -> list[str]:
    """A script's words with each ``for NAME in a b c; do BODY; done`` over literal items
    written out once per item (``s3://b/evals/${s}.jsonl`` for s in dev test: both files,
    known before the run), nested loops too; other loops are left as they are."""
    out: list[str] = []
    i = 0
    while i < len(words):
        # (a command starts after `;`, `&&`, `||` and a compound's keyword)
        start = i == 0 or words[i - 1] in (";", "&&", "||", "then", "else", "do")
        if not (start and words[i] == "for" and i + 2 < len(words)
                and re.fullmatch(r"[A-Za-z_]\w*", words[i + 1]) and words[i + 2] == "in"):
            out.append(words[i])
            i += 1
            continue
        j = i + 3
        while j < len(words) and words[j] != ";":
            j += 1
        k = j + 1  # `do`, at the start of the next command
        if k >= len(words) or words[k] != "do":
            out.append(words[i])
            i += 1
            continue
        m = _loop_end(words, k)
        items = _loop_items(words[i + 3:j])
        if m >= len(words) or items is None:
            out.append(words[i])
            i += 1
            continue
        body = _for_loops(words[k + 1:m])
        ref = _var_ref(words[i + 1])
        for item in items:
            out += [ref.sub(item, w) if "$" in w else w for w in body]
            if out and out[-1] != ";":
                out.append(";")
        if len(out) > _MAX_EXPANDED_WORDS:
            return words
        i = m + 1  # past `done` (a redirect after it stays with the words that follow)
    return out


_ARRAY_START = re.compile(r"([A-Za-z_]\w*)=\((.*)", re.S)
_ARRAY_REF = re.compile(r"\$\{([A-Za-z_]\w*)\[([@*]|\d+)\]\}")


def _array_assignment(command: list[str], arrays: dict[str, list[str]]) -> bool:
    """Record ``XS=(a b c)`` (``declare -a`` too) in *arrays*; True if *command* is one."""
    words = command
    if command and command[0] in _DECLARE:  # declare -a XS=(...)
        words = [w for w in command[1:] if not w.startswith("-")]
    m = _ARRAY_START.fullmatch(words[0]) if words else None
    if m is None or not words[-1].endswith(")"):
        return False
    items = [m.group(2), *words[1:]] if m.group(2) else words[1:]
    items[-1] = items[-1][:-1]
    arrays[m.group(1)] = [i for i in items if i]
    return True


def _open_array(command: list[str]) -> bool:
    """Whether *command* starts an array assignment whose ``)`` is on a later line."""
    words = command
    if command and command[0] in _DECLARE:
        words = [w for w in command[1:] if not w.startswith("-")]
    return bool(words) and _ARRAY_START.fullmatch(words[0]) is not None and \
        not any(w.endswith(")") for w in words)


# ${XS[$JOB_COMPLETION_INDEX]}, ${XS[$i]}, ${XS[i]}: an item the run picks
_ARRAY_PICK = re.compile(r"\$\{([A-Za-z_]\w*)\[([^\]@*]*[^\]@*\d][^\]@*]*)\]\}")


def _any_item(command: list[str], arrays: dict[str, list[str]],
              alternatives: dict[str, list[str]]) -> list[str]:
    """*command* with an item of a known array the run picks by a variable index (an
    Indexed Job's ``${SHARDS[$JOB_COMPLETION_INDEX]}``) as an alternative of each item:
    every item is read, as every branch of a ``case`` is (at most MAX_SHELL_LOOP_ITEMS)."""
    def pick(m: re.Match[str]) -> str:
        items = arrays.get(m.group(1))
        if not items or len(items) > MAX_SHELL_LOOP_ITEMS:
            return m.group(0)
        name = f"_item_of_{m.group(1)}"
        alternatives[name] = items
        return "${" + name + "}"
    return [_ARRAY_PICK.sub(pick, w) if "[" in w else w for w in command]


def _with_arrays(command: list[str], arrays: dict[str, list[str]]) -> list[str]:
    """*command* with ``"${XS[@]}"`` as the array's words and ``${XS[0]}`` as one of them."""
    if not arrays:
        return command
    out: list[str] = []
    for w in command:
        m = _ARRAY_REF.fullmatch(w)
        if m is not None and m.group(1) in arrays and m.group(2) in "@*":
            out += arrays[m.group(1)]
            continue
        out.append(_ARRAY_REF.sub(lambda m: _array_item(arrays, m), w) if "[" in w else w)
    return out


def _array_item(arrays: dict[str, list[str]], m: re.Match[str]) -> str:
    items = arrays.get(m.group(1))
    if items is None or not m.group(2).isdigit() or int(m.group(2)) >= len(items):
        return m.group(0)
    return items[int(m.group(2))]


MAX_ALTERNATIVES = 8  # values of one variable a `case` sets, all read


_RUN_TIME_VALUE = "\x00"  # a branch sets the name to what only the run knows


def _branch_assignments(words: list[str], branches: dict[str, list[str]]) -> None:
    """Record the literal ``NAME=VALUE`` words of one ``case`` branch in *branches*; a
    value only the run knows (``s) SEASON="$OPTARG"`` of a getopts loop) as
    ``_RUN_TIME_VALUE``: the name is unknown after the ``case`` (blind round 50: the value
    it had before, "", was taken)."""
    for w in words:
        m = _ASSIGN.fullmatch(w)
        if m is None:
            continue
        if "$" in m.group(2) or "`" in m.group(2):
            branches[m.group(1)] = [_RUN_TIME_VALUE]
            continue
        values = branches.setdefault(m.group(1), [])
        if _RUN_TIME_VALUE in values:
            continue
        if m.group(2) not in values and len(values) < MAX_ALTERNATIVES:
            values.append(m.group(2))


def _alternative_assignment(command: list[str], alternatives: dict[str, list[str]]) -> bool:
    """``SHARD="${SHARDS[$JOB_COMPLETION_INDEX]}"`` (a value built from a ``case``'s or an
    array's alternatives): the name is one of the values it may take, each used where the
    script uses it; True if *command* is such an assignment."""
    m = _ASSIGN.fullmatch(command[0]) if len(command) == 1 else None
    if m is None or not any(_var_ref(n).search(m.group(2)) for n in alternatives):
        return False
    values = [w for w in _each_alternative([m.group(2)], alternatives) if w != ";"]
    if "$" in "".join(values) or len(values) > MAX_SHELL_LOOP_ITEMS:
        return False
    alternatives[m.group(1)] = list(dict.fromkeys(values))
    return True


def _each_alternative(command: list[str], alternatives: dict[str, list[str]]) -> list[str]:
    """*command* (and a ``;``), once per value of a variable a ``case`` set in its branches
    (``s3://b/sub/${SUB}.parquet``: each branch's; every branch is warmed, as every branch
    of a condition is)."""
    for name, values in alternatives.items():
        ref = _var_ref(name)
        if any(ref.search(w) for w in command):
            rest = {k: vs for k, vs in alternatives.items() if k != name}
            return [x for v in values
                    for x in _each_alternative([ref.sub(v, w) for w in command], rest)]
    return [*command, ";"]


def _read_loop_over(out: list[str], lines: list[str]) -> bool:
    """When the heredoc *lines* feed the ``while read [-r] NAME ...; do ...; done`` that
    *out* ends with, make it ``for NAME in <each line's first word>``, which ``_for_loops``
    writes out per item (the other names stay run-time); True if so."""
    end = len(out) - (1 if out[-1:] == [";"] else 0)  # past `done <<EOF`
    if end < 2 or out[end - 2] != "done" or not out[end - 1].startswith("<<"):
        return False
    items = [line.split()[0] for line in lines if line.split()]
    depth, i = 0, end - 2
    while i > 0:  # back to the `while` whose `done` this is
        if out[i] == "done" and out[i - 1] == ";":
            depth += 1
        elif out[i] == "do" and out[i - 1] == ";":
            depth -= 1
            if depth == 0:
                break
        i -= 1
    j = i - 2  # `while read [-r] NAME... ;` before `; do`
    while j >= 0 and out[j] != "while":
        j -= 1
    head = out[j:i - 1] if j >= 0 else []
    names = [w for w in head[2:] if not w.startswith("-")]
    if head[:2] != ["while", "read"] or not names or _loop_items(items) is None:
        return False
    del out[end - 1]  # the heredoc operator: its lines are the loop's items now
    out[j:i - 1] = ["for", names[0], "in", *items]
    return True


def _document_words(lines: list[str]) -> list[str]:
    """A heredoc's words: a JSON or YAML mapping's locations each as ``--KEY=VALUE`` (so its
    key gives the way, as a flag's name does: ``report_uri`` is written), any other text's
    words each on its own."""
    pairs = _uri.document_strings("\n".join(lines))
    if pairs is None:
        return [x for line in lines for w in line.split() for x in (w, ";")]
    out: list[str] = []
    for key, value in pairs:
        if _uri.find_uris(value) or _uri.run_time_locations(value) or value.startswith("/") \
                or "://" in value and "{{" in value or "@@" in value:
            # (a pipeline's value in it, or a word the caller held aside: _scan._protect)
            # by its key as an override goes (output.model_uri: the leaf says nothing, the
            # whole says written)
            leaf = key.rsplit(".", 1)[-1]
            name = leaf if _uri.name_direction(leaf) or not key else key.replace(".", "_")
            out += [f"--{name}={value}" if name else value, ";"]
    return out


def script_words(script: str, env: dict[str, str] | None = None) -> list[str]:
    """A shell script's words, `;` between its commands: a line ends one unless it ends in
    `\\` or a quote opened on it is still open (a multi-line string, as python -c has);
    the script's own variables expanded (`_shell_vars`), and *env*'s (the container's env,
    which the script sees: `aws s3 cp "${INIT_CKPT}" /w`)."""
    out: list[str] = []
    known: dict[str, str] = dict(env or {})
    buf = ""
    here = None  # the delimiter of the heredoc being read
    python_doc = False  # the heredoc is a Python program (read as Python by the caller)
    quoted_doc = False  # its delimiter is quoted (<<'EOF'): the shell expands nothing in it
    arrays: dict[str, list[str]] = {}  # XS=(a b c)
    branches: dict[str, list[str]] | None = None  # inside `case`: name -> values set
    alternatives: dict[str, list[str]] = {}  # after it: a name set in its branches
    chosen: str | None = None  # the word a `case` tests, when known
    taken, running = False, True  # a branch of it was taken; the current one runs
    doc: list[str] = []  # the lines of the heredoc being read
    # a template in a quoted heredoc that envsubst fills from the environment
    # (cat > t <<'EOF' ... EOF; envsubst < t > spec.json): its ${NAME} are expanded too
    fills = re.search(r"\benvsubst\b", script) is not None
    depth = 0  # inside a function's body: the braces open
    scoped: dict[str, str | None] = {}  # its local variables: their values before it
    files: dict[str, str] = {}  # path -> the text the script wrote there (for jq)
    doc_file: str | None = None  # where the heredoc being read goes (cat > F <<EOF)
    for line in script.split("\n"):
        if scoped and not depth:  # a function's body ended: what it set for itself is gone
            for name, before in scoped.items():
                if before is None:
                    known.pop(name, None)
                else:
                    known[name] = before
            scoped = {}
        inside = depth > 0 or here is None and not buf and _FUNCTION_START.match(line)
        if inside and here is None and not buf:
            depth = max(0, depth + _braces(line))
        if here is not None:
            if line.strip() == here:
                here = None
                if doc_file is not None:
                    files[doc_file] = "\n".join(doc)
                if not python_doc and not _mapfile(out, doc, arrays) and \
                        not _read_loop_over(out, doc):
                    out += _document_words(doc)  # a document, no command (a config)
                doc = []
            elif not python_doc:  # (<<EOF, unquoted: the shell expands its variables)
                doc.append(line if quoted_doc and not fills else " ".join(
                    _expanded(w, known) for w in line.split(" ")))
            continue
        m = _HEREDOC.search(line) if not buf else None
        if m is not None:
            here = m.group(1)
            quoted_doc = any(q in m.group(0) for q in "'\"")
            python_doc = re.search(r"\bpython[0-9.]*\b", line[: m.start()]) is not None
            to = _HEREDOC_TO.search(_HEREDOC.sub(" ", line))
            doc_file = to.group(1) if to is not None else None
        line = _jq_calls(line, files)
        buf = f"{buf}\n{line}" if buf else line
        if buf.endswith("\\"):
            buf = buf[:-1]
            continue
        try:
            # a `#` inside ${X##*/} is no comment (shlex would end the line there)
            words = [w.replace("\x01", "#") for w in shlex.split(
                _BRACED.sub(lambda m: m.group(0).replace("#", "\x01"), buf), comments=True)]
        except ValueError:
            continue  # an open quote: the command goes on
        commands = _commands(_substitutions(words))  # a=1; b=2 on one line: two
        if commands and _open_array(commands[-1]):
            continue  # XS=( on a line, its items on the next ones, up to the `)`
        for command in commands:
            if _array_assignment(command, arrays):
                continue
            command = _any_item(command, arrays, alternatives)
            # (`do case "$opt" in s) X=...;; esac; done` on one line: the case after `do`)
            opened = command[1:] if command[0] in ("do", "then", "else") and len(
                command) > 1 and command[1] == "case" else command
            if opened[0] == "case":
                branches = {}
                # the word a `case` tests, when it is known before the run ("v5": a
                # parameter's value): only the first branch it matches runs
                word = _expanded(opened[1], known) if len(opened) > 1 else "$"
                chosen = None if any(c in word for c in ("$", "{{", "`", "@@PH")) else word
                if chosen is None and len(opened) > 4 and opened[3].endswith(")"):
                    _branch_assignments(opened[4:], branches)  # its first branch, here
                taken, running = False, True
            elif command[0] == "esac" and branches is not None:
                for name, values in branches.items():  # the name is one of these now
                    known.pop(name, None)
                    if _RUN_TIME_VALUE in values:  # or what only the run knows
                        alternatives.pop(name, None)
                    else:
                        alternatives[name] = values
                branches = None
            elif branches is not None:  # sft) M=s3://a;; or sft) on a line of its own,
                # then M=s3://a on the next: each branch's values, whichever runs
                if command[0].endswith(")") and chosen is not None:
                    running = not taken and any(fnmatch.fnmatchcase(chosen, pat) for pat in
                                                command[0][:-1].lstrip("(").split("|"))
                    taken = taken or running
                if not running:
                    continue  # a branch the known word does not take
                _branch_assignments(command[1:] if command[0].endswith(")") else command,
                                    branches)
            if inside:  # a function's own variables, and those its arguments fill
                for name in _set_names(command):
                    scoped.setdefault(name, known.get(name))
            if len(command) > 2 and command[0] == "for" and command[2] == "in":
                known.pop(command[1], None)  # the loop sets it, item by item
            if command[0] == "envsubst":  # envsubst '${SRC}': the names it fills, no values
                command = [w for w in command if "$" not in w]
            command = _shell_vars(_with_arrays(command, arrays), known)
            if _written_file(command, files, script) or _printf_assignment(command, known) \
                    or _read_assignment(command, known, arrays) \
                    or _alternative_assignment(command, alternatives):
                continue
            for name in [n for n in alternatives if n in known]:
                del alternatives[name]  # set again after the case
            if not _local_assignment(command, script):
                out += _each_alternative(command, alternatives)
        buf = ""
    if buf:  # a quote never closed
        out += buf.split()
    out = _fan_outs(_functions(_for_loops(_piped_reads(_listed_reads(out)))))
    if out and out[-1] == ";":
        out.pop()
    return out


_XARGS_VALUED = frozenset({"-P", "-n", "-L", "-d", "-s", "-a", "-E", "--max-procs",
                           "--max-args", "--max-lines", "--delimiter", "--arg-file"})
_ITEM = "${item}"  # an item of a fan-out whose items only the run knows


def _fan_outs(words: list[str]) -> list[str]:
    """A script's words with each fan-out over literal items written out per item:
    ``printf '%s\\n' a b | xargs -P 3 -I{} aws s3 cp "s3://b/{}.tif" ...`` (``echo a b |
    xargs -n1 CMD``: the item appended; ``xargs sh -c '... $0'``: the item the script's
    ``$0``) and GNU ``parallel CMD {} ::: a b``. Items only the run knows (``cat list |
    xargs``) leave the command's locations holding ``${item}``: known at run time."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] == "xargs" and i >= 2 and words[i - 1] == "|":
            start = command_start(words, i - 1)
            made = _xargs(words[start:i - 1], words[i + 1:command_end(words, i)])
            if made is not None:
                if _produced(words[start:i - 1]) is not None:  # printf/echo: only items
                    del out[len(out) - (i - start):]
                out += made
                i = command_end(words, i)
                continue
        if words[i] == "parallel" and (i == 0 or words[i - 1] in _uri._SEPARATORS):
            end = command_end(words, i)
            made = _parallel(words[i + 1:end])
            if made is not None:
                out += made
                i = end
                continue
        out.append(words[i])
        i += 1
    return out if len(out) <= _MAX_EXPANDED_WORDS else words


def command_end(words: list[str], i: int) -> int:
    """Where the command holding word *i* ends: its separator's index (or the end)."""
    while i < len(words) and words[i] not in _uri._SEPARATORS:
        i += 1
    return i


def command_start(words: list[str], end: int) -> int:
    """Where the command ending before index *end* (a ``|``, say) starts."""
    return max((k + 1 for k in range(end) if words[k] in _uri._SEPARATORS), default=0)


# a listing of a prefix, one object a line (`aws s3 ls s3://b/p/`, `s5cmd ls`, `rclone lsf`)
_LISTERS = (("aws", "s3", "ls"), ("s5cmd", "ls"), ("gsutil", "ls"), ("gcloud", "storage", "ls"),
            ("rclone", "lsf"), ("rclone", "ls"), ("mc", "ls"))


def _listed_reads(words: list[str]) -> list[str]:
    """``aws s3 ls "$P" | awk '{print $4}' | while read -r f; do aws s3 cp "$P$f" ...``:
    each object the listing names is read, so the loop body's ``$P$f`` is the folder *P*
    itself, and the listing (with its filters) is left out: it only named the folder the
    loop reads (blind round 36: a run-time read beside an unknown folder). Only a body word
    that is the listed folder followed by the name ``read`` set (``$f``, ``${f}``)."""
    if "while" not in words or "ls" not in words and "lsf" not in words:
        return words
    out = list(words)
    dropped: list[tuple[int, int]] = []  # the listings whose loops say what is read
    for i, w in enumerate(words):
        if w != "while" or words[i + 1:i + 2] != ["read"] or i < 2 or words[i - 1] != "|":
            continue
        start = i - 1
        while start > 0:  # back through the filters (awk, grep, sed ...) to the listing
            start = command_start(words, start)
            if start > 0 and words[start - 1] == "|":
                start -= 1
                continue
            break
        lister = words[start:command_end(words, start)]
        tool = next((t for t in _LISTERS if tuple(lister[:len(t)]) == t), None)
        folders = [x for x in lister[len(tool):] if _uri.is_uri(x)] if tool else []
        names = [x for x in words[i + 2:command_end(words, i)] if not x.startswith("-")]
        if len(folders) != 1 or not names:
            continue
        folder = folders[0] if folders[0].endswith("/") else folders[0] + "/"
        uses = {folder + "$" + names[0], folder + "${" + names[0] + "}",
                folder + "/$" + names[0], folder + "/${" + names[0] + "}"}
        do_at = command_end(words, i) + 1  # `while read -r f ;` then `do`
        if words[do_at:do_at + 1] != ["do"]:
            continue
        for k in range(do_at + 1, _loop_end(words, do_at)):  # the loop's body
            if words[k] in uses:
                out[k] = folder
                if not dropped or dropped[-1] != (start, i):
                    dropped.append((start, i))
    for a, b in reversed(dropped):  # (the listing only named the folder the loop reads)
        del out[a:b]
    return out


def _piped_reads(words: list[str]) -> list[str]:
    """``printf '%s\\n' vnir swir | while read -r b; do ...`` as ``for b in vnir swir; do
    ...`` (which ``_for_loops`` writes out per item): the loop's items are the producer's
    literal lines (the other names ``read`` sets stay run-time)."""
    if "while" not in words:
        return words
    out: list[str] = []
    for i, w in enumerate(words):
        if w == "while" and out[-1:] == ["|"] and words[i + 1:i + 2] == ["read"]:
            start = command_start(out, len(out) - 1)
            items = _produced(out[start:-1])
            names = [x for x in words[i + 2:command_end(words, i)] if not x.startswith("-")]
            if items is not None and names:
                del out[start:]
                out += ["for", names[0], "in", *items, "@@read@@"]
                continue
        out.append(w)
    # drop what stood for `read [-r] NAME...` up to its `;`
    cleaned: list[str] = []
    skip = False
    for w in out:
        if w == "@@read@@":
            skip = True
            continue
        if skip and w != ";":
            continue
        skip = False
        cleaned.append(w)
    return cleaned


def _produced(producer: list[str]) -> list[str] | None:
    """The literal lines ``printf '%s\\n' a b c``, ``echo a b c`` or ``tr ' ' '\\n' <<< "a b c"``
    writes; None otherwise."""
    if producer[:1] == ["printf"] and len(producer) >= 3 and "%s" in producer[1]:
        return _loop_items(producer[2:])
    if producer[:1] == ["echo"]:
        return _loop_items([w for w in producer[1:] if w not in ("-n", "-e")])
    here = " ".join(producer[3:])  # tr ' ' '\n' <<< "$DATES" (<<<"$DATES": one word)
    if producer[:1] == ["tr"] and len(producer) in (4, 5) and here.startswith("<<<") and \
            producer[2] in ("\\n", "\n") and producer[1] in (" ", ",", ";", ":"):
        return _loop_items([w for w in here[3:].strip().split(producer[1]) if w])
    return None


def _xargs(producer: list[str], rest: list[str]) -> list[str] | None:
    """The commands ``PRODUCER | xargs REST`` runs, one per item (see _fan_outs)."""
    repl, j = None, 0
    while j < len(rest) and rest[j].startswith("-"):
        w = rest[j]
        if w in ("-I", "-i") and j + 1 < len(rest):
            repl, j = rest[j + 1], j + 2
            continue
        if w.startswith(("-I", "-i")) and len(w) > 2:
            repl = w[2:]
        elif w.startswith("--replace"):
            repl = w.split("=", 1)[1] if "=" in w else "{}"
        elif w in _XARGS_VALUED:
            j += 1
        j += 1
    command = rest[j:]
    if not command:
        return None
    items = _produced(producer)
    return _per_item(command, items, repl)


def _parallel(rest: list[str]) -> list[str] | None:
    """The commands ``parallel [options] CMD ::: ITEMS`` runs (see _fan_outs)."""
    if ":::" not in rest:
        return None
    at = rest.index(":::")
    j = 0
    while j < at and rest[j].startswith("-"):
        j += 2 if rest[j] in ("-j", "-P", "--jobs") else 1
    command, items = rest[j:at], _loop_items(rest[at + 1:])
    if not command:
        return None
    return _per_item(command, items, "{}" if any("{}" in w for w in command) else None)


def _per_item(command: list[str], items: list[str] | None, repl: str | None) -> list[str]:
    out: list[str] = []
    for item in items if items is not None else [_ITEM]:
        if repl:
            one = [w.replace(repl, item) for w in command]
        elif len(command) >= 3 and runs_script(command, 0):
            # sh -c 'SCRIPT' with the item its $0: the script's own words
            one = script_words(shell_args([*command, item])[2]) if items is not None \
                else script_words(command[2].replace("$0", _ITEM))
        else:
            one = [*command, item]
        out += [*one, ";"]
    return out


_MAX_CALLS = 64  # function calls written out per script


def _functions(words: list[str]) -> list[str]:
    """A script's words with its shell functions' bodies in place of their calls
    (``fetch() { aws s3 sync "${ROOT}/$1/" ...; }`` then ``fetch rgb``: the sync of
    ``rgb``), ``$1``... and ``"$@"`` the call's words, the body's own ``local`` variables
    expanded; the definitions themselves are no commands."""
    commands: list[list[str]] = [[]]
    for w in words:
        if w == ";":
            commands.append([])
        else:
            commands[-1].append(w)
    bodies: dict[str, list[list[str]]] = {}
    out: list[str] = []
    calls = 0
    i = 0
    while i < len(commands):
        c = commands[i]
        name = None
        if len(c) >= 2 and c[0].endswith("()") and c[1] == "{":
            name, first = c[0][:-2], c[2:]
        elif len(c) >= 3 and c[0] == "function" and "{" in c[1:3]:
            at = c.index("{")
            name, first = c[1].removesuffix("()"), c[at + 1:]
        if name:
            body, j = ([first] if first else []), i + 1
            while j < len(commands) and commands[j] != ["}"]:
                body.append(commands[j])
                j += 1
            if j < len(commands) and re.fullmatch(r"[A-Za-z_][\w-]*", name):
                bodies[name] = body
                i = j + 1
                continue
        if c and c[0] in bodies and calls < _MAX_CALLS:
            calls += 1
            args = c[1:]
            local: dict[str, str] = {}
            for b in bodies[c[0]]:
                b = [x for w in b for x in (args if w in ("$@", "$*") else [
                    _FUNCTION_ARG.sub(partial(_call_arg, args), w)])]
                out += [*_shell_vars(b, local), ";"]
            i += 1
            continue
        out += [*c, ";"]
        i += 1
    return out


_FUNCTION_ARG = re.compile(r"\$\{?(\d)\}?")


def _call_arg(args: list[str], m: re.Match[str]) -> str:
    """A function body's ``$N``: the call's Nth word (as it is when the call has none)."""
    n = int(m.group(1))
    return args[n - 1] if 0 < n <= len(args) else m.group(0)


