"""Finding object-store locations in command lines and deciding read, write or unknown.

Called by `_scan` (container args, env, embedded code) and `_code` (command
lines inside Python). A container's args say *where* data is, rarely *which
way* it flows; these are the conventions real pipelines follow (documented in
docs/prefetchd.md, "Reads, writes and unknown"):

- copy tools (`aws s3 cp|sync|mv`, `gsutil cp|rsync|mv`, `gcloud storage
  cp|rsync|mv`, `rclone copy|sync|move|copyto|moveto`, `mc cp|mirror|mv`,
  `s5cmd cp|sync|mv`, `azcopy copy|cp|sync`): with two or more operands the
  last is the destination (a write) and the others are sources (reads); with
  one operand it is a source; `rm`/`rb`/`mb`/`delete` write; `ls`/`du`/`stat`
  list and read no data (unknown);
- a flag names the direction of its value: `--to`, `--dst`, `--dest`,
  `--out*`, `--output*`, `--save*`, `--export*`, `--target`, `--upload*` are
  writes, and so are logs, reports, results, job dirs and registries
  (`--logdir`, `--report`, `--job-dir`, `--registry`); `--from`, `--src`, `--source`, `--in`,
  `--input*`, `--data*` are reads, and so is anything named to resume, load,
  init or restore; `--checkpoint*`, `--ckpt*` and `--model-dir` without one of
  those words could be either: unknown;
- a command with two or more bare URI operands (`convert.py s3://in s3://out`):
  the last may be its output, so it is unknown;
- anything else is left undecided here (None) for the caller, which looks at
  the parameter's name, then the step's name, and reads by default.

Locations are URIs of the schemes below, Azure Blob/Data Lake https URLs, and
rclone on-the-fly S3 remotes (`:s3:bucket/key`, `:s3,provider=AWS:bucket/key`,
reported as `s3://bucket/key`). A URI directly followed by `{` is a template
(`"s3://b/{split}/".format(...)`) and no location. Shard patterns (`{a,b}`,
`{000..999}`, `*`, `?`) are kept whole (see `_shard`).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable
from functools import partial
from typing import Any

import yaml

from prefetchd.pipeline._shard import BRACE_GROUP

# schemes we recognise as object-store locations (only s3/s3a are warmed)
SCHEMES = (
    "s3", "s3a", "s3n", "gs", "gcs", "oci", "az", "abfs", "abfss", "wasb", "wasbs", "hdfs", "hf",
    "minio",
)
_CH = r"[^\s'\"`,;()\[\]{}<>|]"
URI_RE = re.compile(r"\b(?:" + "|".join(SCHEMES) + r")://(?:" + _CH + "|" + BRACE_GROUP + ")+")
# a location that holds a shell variable, braced too (s3://b/dicom/${sid}/, s3://b/$DAY/x),
# or a Katib trial's ${trialParameters.x}
_RUN_TIME_URI_RE = re.compile(r"\b(?:" + "|".join(SCHEMES) + r")://(?:\$\{[A-Za-z_][\w.]*\}|"
                              + _CH + ")+")
AZURE_RE = re.compile(
    r"\bhttps://[a-z0-9-]+\.(?:blob|dfs)\.core\.windows\.net/[^\s'\"`,;()\[\]{}<>|?]*"
)
RCLONE_S3_RE = re.compile(  # :s3,provider=Minio,endpoint='http://minio:9000':bucket/key
    r"(?<![\w/.-]):s3(?:,[\w-]+(?:=(?:'[^']*'|\"[^\"]*\"|[^,:\s'\"`]*))?)*:"
    r"([a-z0-9][a-z0-9.-]{1,62}(?:/[^\s'\"`,;()\[\]{}<>|]*)?)"
)

WRITE_WORDS = frozenset(
    {
        "out", "output", "outputs", "outdir", "dest", "destination", "dst", "to", "target",
        "export", "upload", "save", "sink", "publish", "push", "write", "artifacts_out",
        "checkpoint_out", "logdir", "tensorboard", "results", "report", "reports",
        "job", "register", "registry", "predictions", "preds", "metrics",
    }
)
WRITE_PREFIXES = ("out", "dst", "dest", "save", "export", "upload")
READ_WORDS = frozenset(
    {"from", "src", "source", "sources", "in", "input", "inputs", "data", "dataset", "datasets"}
)
READ_PREFIXES = ("input", "data", "src", "source")
RESUME_WORDS = frozenset({"resume", "load", "init", "restore", "pretrained", "warmstart",
                          "weights"})
AMBIGUOUS_WORDS = frozenset({"checkpoint", "checkpoints", "ckpt", "ckpts", "modeldir",
                             "workdir"})
WRITE_STEP_VERBS = frozenset(
    {"upload", "publish", "export", "push", "save", "cleanup", "delete", "purge", "register"}
)
COPY_TOOLS: dict[tuple[str, ...], set[str]] = {
    ("aws", "s3"): {"cp", "sync", "mv"},
    ("gsutil",): {"cp", "rsync", "mv"},
    ("s5cmd",): {"cp", "sync", "mv"},
    ("rclone",): {"copy", "sync", "move", "copyto", "moveto"},
    ("mc",): {"cp", "mirror", "mv"},
    ("gcloud", "storage"): {"cp", "rsync", "mv"},
    ("azcopy",): {"copy", "cp", "sync"},
}
DELETE_VERBS = frozenset({"rm", "rb", "delete", "purge", "deletefile", "mb"})
# listing or sizing a location reads no data: shown (unknown), never warmed
LIST_VERBS = frozenset({"ls", "lsd", "lsf", "lsl", "du", "stat", "size"})
_SEPARATORS = ("&&", "||", ";", "|")


_SHELL_VAR = re.compile(r"\$[A-Za-z_{(0-9]")  # $DAY, ${DAY}, $(DAY), $0 inside a location
_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[-0-9.]*[sdif]")


def find_uris(text: str) -> list[str]:
    """Every location in `text`, in order (rclone `:s3:` remotes as s3:// URIs)."""
    if "://" not in text and ":s3" not in text:
        return []
    found: list[tuple[int, str]] = []
    for m in URI_RE.finditer(text):
        if text[m.end() : m.end() + 1] == "{":
            continue  # a format template, not a location
        if _SHELL_VAR.search(m.group(0)) or "$" in m.group(0).split("://", 1)[1].split(
                "/", 1)[0] or (m.group(0).endswith("$") and text[m.end():m.end() + 1] == "("):
            continue  # a shell or Kubernetes variable ($BUCKET, $DAY, $(DATA)): run time
        if _PERCENT_FIELD.search(m.group(0)):
            continue  # a %-format template ("s3://b/%s/x.parquet" % day)
        found.append((m.start(), m.group(0)))
    found += [(m.start(), m.group(0)) for m in AZURE_RE.finditer(text)]
    found += [(m.start(), "s3://" + m.group(1)) for m in RCLONE_S3_RE.finditer(text)]
    return [u for _, u in sorted(found)]


def run_time_locations(text: str) -> list[str]:
    """The locations in *text* that hold a shell variable (``s3://ct/dicom/${sid}/``, a
    ``while read`` loop's; ``s3://b/ckpt/$LATEST``), which ``find_uris`` leaves out: their
    place is known, the run fills in the rest."""
    if "://" not in text or "$" not in text:
        return []
    return [m.group(0) for m in _RUN_TIME_URI_RE.finditer(text)
            if _SHELL_VAR.search(m.group(0)) and text[m.end():m.end() + 1] not in ("{", "(")]


def is_uri(text: str) -> bool:
    t = text.strip()
    return len(find_uris(t)) == 1 and (URI_RE.fullmatch(t) is not None or
                                       AZURE_RE.fullmatch(t) is not None or
                                       RCLONE_S3_RE.fullmatch(t) is not None)


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def name_direction(name: str | None) -> str | None:
    """What a flag, parameter or env name says: 'write', 'read', 'unknown' or None."""
    if not name:
        return None
    n = name.lower().lstrip("-")
    w = _words(n)
    if "dst" in w and w - {"dst"} and not w & (_PLACE_WORDS | WRITE_WORDS - {"dst"}):
        w = w - {"dst"}  # --dst-calendar: daylight saving time, not a destination
        n = "-".join(sorted(w))
    if w & WRITE_WORDS or n.startswith(WRITE_PREFIXES) or {"log", "dir"} <= w or \
            {"logging", "dir"} <= w or {"default", "root"} <= w:
        # TensorBoard's (HF's --logging_dir); Lightning's default_root_dir (logs, checkpoints)
        return "write"
    if w & RESUME_WORDS or w & READ_WORDS or n.startswith(READ_PREFIXES) or \
            "name_or_path" in n.replace("-", "_"):  # Hugging Face's model to load
        return "read"
    if w & AMBIGUOUS_WORDS or n.startswith(("checkpoint", "ckpt")) or {"model", "dir"} <= w \
            or {"work", "dir"} <= w or {"storage", "path"} <= w:
        # (Ray Train's storage_path: where a run keeps its results and checkpoints)
        return "unknown"
    return None


_PLACE_WORDS = frozenset({"path", "dir", "uri", "url", "root", "prefix", "location", "file",
                          "files", "bucket", "folder"})


def names_place(flag: str) -> bool:
    """A flag naming where data is (`--model_load_path`, `--data-dir`), not what it is
    (`--src-lang`), or one to load from (`--resume`, `--init-from`)."""
    w = _words(flag.lower().lstrip("-"))
    return bool(w & _PLACE_WORDS or w & RESUME_WORDS)


def names_model(flag: str) -> bool:
    """`--model`, `--models`, `--model-path`: a flag naming a model and nothing else."""
    w = _words(flag.lower().lstrip("-"))
    return bool(w & {"model", "models"}) and w <= {"model", "models", "path", "uri", "file"}


def name_says_write(name: str | None) -> bool:
    """True when a flag, parameter or env name denotes an output location."""
    return name_direction(name) == "write"


def step_says_write(step_name: str | None) -> bool:
    if not step_name:
        return False
    first = re.split(r"[^a-z0-9]+", step_name.lower(), maxsplit=1)[0]
    return first in WRITE_STEP_VERBS


_RCLONE_TYPE = re.compile(r"RCLONE_CONFIG_([A-Z0-9_]+)_TYPE")


def rclone_s3_remotes(env: dict[str, str]) -> list[str]:
    """The rclone remotes the env configures as S3 (``RCLONE_CONFIG_HYDRO_TYPE=s3``: the
    remote ``hydro``), so ``hydro:bucket/key`` names ``s3://bucket/key``."""
    return [m.group(1).lower() for name, value in env.items()
            if (m := _RCLONE_TYPE.fullmatch(name)) and value.strip().lower() == "s3"]


def with_s3_remotes(argv: list[str], remotes: list[str]) -> list[str]:
    """*argv* with ``remote:bucket/key`` of those remotes written ``s3://bucket/key``."""
    if not remotes:
        return argv
    pat = re.compile(r"(?<![\w/.:-])(?:" + "|".join(map(re.escape, remotes)) +
                     r"):(?=[a-z0-9])", re.IGNORECASE)
    return [pat.sub("s3://", a) for a in argv]


_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})
# ${X%/}, ${X##*/}, ${X:-default}: an operator of parameter expansion and its word
_PARAM_OP = r"(%%|##|%|#|:-|-|:=|=)([^}]*)"
_POSITIONAL_RE = re.compile(r'"\$@"|"\$\*"|\$@|\$\*|"\$\{?(\d)\}?"|\$\{(\d)' + _PARAM_OP
                            + r'\}|\$\{?(\d)\}?')


# a suffix to strip (% or %%, the pattern in hex) from the value before it, once that is
# resolved: a word of shell-safe characters, so quoting leaves it as it is
_PENDING_OP = re.compile(r"@@SFX([12])x([0-9a-f]*)@@")


def strip_suffixes(text: str) -> str:
    """*text* with each pending ``${1%/}`` of a placeholder's value applied to what stands
    before it (the value, resolved now)."""
    while (m := _PENDING_OP.search(text)) is not None:
        head = param_expand(text[:m.start()], "%" * int(m.group(1)),
                            bytes.fromhex(m.group(2)).decode(errors="replace")) or ""
        text = head + text[m.end():]
    return text


def param_expand(value: str | None, op: str, word: str) -> str | None:
    """Bash's ``${X<op><word>}`` for a value *value* (None: unset): ``%``/``%%`` strip the
    shortest/longest matching suffix, ``#``/``##`` prefix (glob patterns), ``:-``/``-``/
    ``:=``/``=`` the default. None when the result is not known."""
    if op in (":-", ":=") and not value or op in ("-", "=") and value is None:
        return word
    if value is None:
        return None
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
    for i, a in enumerate(argv[:-3]):
        flag = argv[i + 1]
        if (
            a.rsplit("/", 1)[-1] in _SHELLS
            and flag.startswith("-")
            and "c" in flag[1:]
            and _POSITIONAL_RE.search(argv[i + 2])
        ):
            rest = argv[i + 3 :]

            def sub(m: re.Match[str], rest: list[str] = rest) -> str:
                if m.group(0).strip('"') in ("$@", "$*"):
                    return " ".join(shlex.quote(x) for x in rest[1:])
                if m.group(2) is not None:  # ${1%/}
                    n = int(m.group(2))
                    arg = rest[n] if n < len(rest) else None
                    if arg is not None and "@@PH" in arg and m.group(3) in ("%", "%%"):
                        # a placeholder (a pipeline's value, known later): the suffix is
                        # stripped once it is resolved (strip_suffixes)
                        return shlex.quote(f"{arg}@@SFX{len(m.group(3))}x"
                                           f"{m.group(4).encode().hex()}@@")
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


def _outside_functions(script: str, fn: Callable[[str], str]) -> str:
    """*script* with *fn* applied to its lines outside shell function bodies (in a body,
    ``$1`` is the function's own argument, not the script's) and outside single quotes
    (``xargs sh -c '... $0'``: the inner script's own)."""
    out: list[str] = []
    depth = 0
    for line in script.split("\n"):
        braces = re.sub(r"\$\{[^}]*\}", "", line)
        if depth == 0 and not _FUNCTION_START.match(line):
            out.append(_outside_single_quotes(line, fn))
            continue
        out.append(line)
        depth = max(0, depth + braces.count("{") - braces.count("}"))
    return "\n".join(out)


_KUBE_VAR = re.compile(r"\$(\$)?\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def kube_env(env: object) -> dict[str, str]:
    """A container's env vars given literally (``value``), each expanded as the kubelet
    does: ``$(NAME)`` of a var defined above it replaced (``TRAIN=s3://$(BUCKET)/train``)."""
    values: dict[str, str] = {}
    for e in env if isinstance(env, list) else []:
        if isinstance(e, dict) and isinstance(e.get("name"), str) \
                and isinstance(e.get("value"), str):
            values[e["name"]] = _expand(e["value"], values)
    return values


def _expand(text: str, values: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(0)[1:]
        return values.get(m.group(2), m.group(0))

    return _KUBE_VAR.sub(sub, text) if "$(" in text else text


def kube_expand(argv: list[str], env: object) -> list[str]:
    """A container's command/args as the kubelet runs them: ``$(NAME)`` replaced by the value
    of the container's env var NAME when it is given literally (``kube_env``), ``$$(NAME)``
    left as the text ``$(NAME)``, a reference to anything else left as written (Kubernetes'
    own rules). ``--data $(DATA_DIR)/val`` then names the location it reads."""
    values = kube_env(env)
    return [_expand(a, values) for a in argv] if values else argv


def tokenize(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """Flatten argv, splitting shell strings (`sh -c "..."`) into words; a line of a script
    ends its command as `;` does (`aws s3 cp A B` then `python train.py C` on the next line:
    C is no third operand of the copy)."""
    out: list[str] = []
    for a in shell_args(argv):
        if any(c in a for c in " \n\t") and len(a) < 20000:
            out.extend(_script_words(a, env))
        else:
            out.append(a)
    return _without_payloads(_s3api(out))


_S3API_COPIES = {"get-object": "get", "put-object": "put", "list-objects-v2": "ls",
                 "list-objects": "ls"}


def _s3api(words: list[str]) -> list[str]:
    """``aws s3api get-object --bucket B --key K OUT`` (``put-object ... --body F``,
    ``list-objects-v2 --prefix P``) in the words of ``aws s3 cp s3://B/K OUT`` (``cp F
    s3://B/K``, ``ls s3://B/P``), whose way the copy rules know."""
    if "s3api" not in words:
        return words
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] == "s3api" and i + 1 < len(words) and words[i + 1] in _S3API_COPIES:
            end = _command_end(words, i)
            args = words[i + 2:end]
            opts = {args[k]: args[k + 1] for k in range(len(args) - 1)
                    if args[k] in ("--bucket", "--key", "--prefix", "--body")}
            rest = [a for k, a in enumerate(args) if not a.startswith("-")
                    and (k == 0 or not args[k - 1].startswith("-"))]
            what = _S3API_COPIES[words[i + 1]]
            if "--bucket" in opts:
                uri = f"s3://{opts['--bucket']}/{opts.get('--key') or opts.get('--prefix', '')}"
                out += ["s3", *({"get": ["cp", uri, *rest[-1:]],
                                 "put": ["cp", opts.get("--body", "-"), uri],
                                 "ls": ["ls", uri]}[what])]
                i = end
                continue
        out.append(words[i])
        i += 1
    return out


# what an HTTP client sends (a chat message, a JSON body, a header): text, no location it uses
_HTTP_CLIENTS = frozenset({"curl", "wget", "http", "https", "xh"})
_PAYLOAD_FLAGS = frozenset({"-d", "--data", "--data-raw", "--data-binary", "--data-ascii",
                            "--data-urlencode", "--json", "-F", "--form", "--form-string",
                            "-H", "--header", "--post-data", "--body-data"})


def _without_payloads(tokens: list[str]) -> list[str]:
    """*tokens* with the payload an HTTP client posts blanked (``curl -d '{"text": "report
    at s3://b/x.json"}' $HOOK``): a link in a message is read by whoever gets it, if anyone."""
    out = list(tokens)
    client = False
    for i, t in enumerate(tokens):
        if t in _SEPARATORS:
            client = False
        elif t.rsplit("/", 1)[-1] in _HTTP_CLIENTS:  # curl ..., sh -c 'curl ...'
            client = True
        elif client and t.split("=", 1)[0] in _PAYLOAD_FLAGS:
            if "=" in t and t.startswith("--"):
                out[i] = t.split("=", 1)[0] + "="
            elif i + 1 < len(tokens):
                out[i + 1] = ""
    return out


_PY_HEREDOC = re.compile(
    r"\bpython[0-9.]*\s+(?:-\s+)?<<-?\s*['\"]?(\w+)['\"]?[^\n]*\n(.*?)\n\s*\1[ \t]*(?:\n|$)",
    re.DOTALL)


def python_heredocs(script: str) -> list[str]:
    """The Python programs a script feeds its interpreter as a heredoc (``python - <<'PY'``
    ... ``PY``); `_script_words` leaves their lines out, the callers read them as Python."""
    return [m.group(2) for m in _PY_HEREDOC.finditer(script)] if "<<" in script else []


_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*['\"]?([A-Za-z_]\w*)['\"]?")  # not <<< (a string)


_BRACED = re.compile(r"\$\{[^}\s]*\}")
_SHELL_REF = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)|\$\{([A-Za-z_]\w*)" + _PARAM_OP
                        + r"\}")
_ASSIGN = re.compile(r"([A-Za-z_]\w*)=(.*)", re.S)
_DECLARE = frozenset({"export", "readonly", "local", "declare", "typeset"})


def _expanded(word: str, known: dict[str, str]) -> str:
    """*word* with the script's known variables expanded (and nothing recorded)."""
    return _SHELL_REF.sub(partial(_known_value, known), word) if "$" in word else word


def _known_value(known: dict[str, str], m: re.Match[str]) -> str:
    if m.group(3) is not None:  # ${ROOT%/}, ${SPLIT:-test}
        made = param_expand(known.get(m.group(3)), m.group(4), m.group(5))
        return m.group(0) if made is None else made
    return known.get(m.group(1) or m.group(2), m.group(0))


def _shell_vars(words: list[str], known: dict[str, str]) -> list[str]:
    """*words* with the script's own variables expanded (``REL="{{...}}"`` on one line,
    ``s3://models/${REL}/`` on the next); a command of assignments only (``export`` too)
    records them in *known*, one whose value runs a command (``$(date)``) forgets it."""
    words = [_expanded(w, known) for w in words]
    body = words[1:] if words and words[0] in _DECLARE else words
    pairs = [_ASSIGN.fullmatch(w) for w in body if not w.startswith("-")]
    if body and all(pairs):
        for m in pairs:
            assert m is not None
            name, value = m.group(1), m.group(2)
            if "$" in value or "`" in value:
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
    pairs = [_ASSIGN.fullmatch(w) for w in words]
    if not words or words[0] in _DECLARE or not all(pairs):
        return False
    return all(re.search(r"\$\{?" + re.escape(m.group(1)) + r"\b", script)
               for m in pairs if m is not None)


def _substitutions(words: list[str]) -> list[str]:
    """A command substitution's command as words of their own: ``LATEST=$(aws s3 ls
    s3://b/ckpt/ | tail -1)`` gives ``LATEST=$(``, ``aws``, ... ``s3://b/ckpt/``, ``|``,
    ``tail``, ``-1``, ``)``, so ``aws s3 ls`` is seen as the command it is."""
    out: list[str] = []
    depth = 0
    for w in words:
        at = w.find("$(")
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
MAX_SHELL_LOOP_ITEMS = 32  # a `for` loop over more literal items stays run-time
_MAX_EXPANDED_WORDS = 20_000


def _loop_items(words: list[str]) -> list[str] | None:
    """The items of ``for NAME in ITEMS`` when each is a literal word or a numeric brace
    range (``{0..7}``); None when one is only known at run time (``$(cat f)``, a glob)."""
    items: list[str] = []
    for w in words:
        m = _LOOP_RANGE.fullmatch(w)
        if m is not None:
            a, b = int(m.group(1)), int(m.group(2))
            if abs(b - a) >= MAX_SHELL_LOOP_ITEMS:
                return None
            # bash pads every item to the widest bound when one is written with a leading
            # zero ({00..03}: 00 01 02 03)
            width = max(len(m.group(1)), len(m.group(2))) if any(
                g.lstrip("-").startswith("0") and len(g.lstrip("-")) > 1
                for g in m.groups()) else 0
            items += [f"{i:0{width}d}" for i in
                      (range(a, b + 1) if b >= a else range(a, b - 1, -1))]
        elif _LOOP_ITEM.fullmatch(w) and not any(c in w for c in "*?["):
            items.append(w)
        else:
            return None
    return items if 0 < len(items) <= MAX_SHELL_LOOP_ITEMS else None


def _for_loops(words: list[str]) -> list[str]:
    """A script's words with each ``for NAME in a b c; do BODY; done`` over literal items
    written out once per item (``s3://b/evals/${s}.jsonl`` for s in dev test: both files,
    known before the run), nested loops too; other loops are left as they are."""
    out: list[str] = []
    i = 0
    while i < len(words):
        start = i == 0 or words[i - 1] == ";"
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
        depth, m = 1, k + 1
        while m < len(words):
            if words[m - 1] == ";" and words[m] == "do":
                depth += 1
            elif words[m - 1] == ";" and words[m] == "done":
                depth -= 1
                if depth == 0:
                    break
            m += 1
        items = _loop_items(words[i + 3:j])
        if m >= len(words) or items is None:
            out.append(words[i])
            i += 1
            continue
        body = _for_loops(words[k + 1:m])
        name = re.escape(words[i + 1])
        ref = re.compile(r"\$\{" + name + r"\}|\$" + name + r"(?!\w)")
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


def _branch_assignments(words: list[str], branches: dict[str, list[str]]) -> None:
    """Record the literal ``NAME=VALUE`` words of one ``case`` branch in *branches*."""
    for w in words:
        m = _ASSIGN.fullmatch(w)
        if m is None or "$" in m.group(2) or "`" in m.group(2):
            continue
        values = branches.setdefault(m.group(1), [])
        if m.group(2) not in values and len(values) < MAX_ALTERNATIVES:
            values.append(m.group(2))


def _each_alternative(command: list[str], alternatives: dict[str, list[str]]) -> list[str]:
    """*command* (and a ``;``), once per value of a variable a ``case`` set in its branches
    (``s3://b/sub/${SUB}.parquet``: each branch's; every branch is warmed, as every branch
    of a condition is)."""
    for name, values in alternatives.items():
        ref = re.compile(r"\$\{" + re.escape(name) + r"\}|\$" + re.escape(name) + r"(?!\w)")
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
    try:
        doc = yaml.safe_load("\n".join(lines)) if sum(map(len, lines)) < 256 * 1024 else None
    except yaml.YAMLError:
        doc = None
    if not isinstance(doc, (dict, list)):
        return [x for line in lines for w in line.split() for x in (w, ";")]
    out: list[str] = []

    def walk(node: Any, key: str, depth: int = 0) -> None:
        if depth > 20 or len(out) > 8192:
            return
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k), depth + 1)
        elif isinstance(node, list):
            for v in node:
                walk(v, key, depth + 1)
        elif isinstance(node, str) and (find_uris(node) or run_time_locations(node)
                                        or node.startswith("/")):
            out.extend([f"--{key}={node}" if key else node, ";"])

    walk(doc, "")
    return out


def _script_words(script: str, env: dict[str, str] | None = None) -> list[str]:
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
    doc: list[str] = []  # the lines of the heredoc being read
    for line in script.split("\n"):
        if here is not None:
            if line.strip() == here:
                here = None
                if not python_doc and not _read_loop_over(out, doc):
                    out += _document_words(doc)  # a document, no command (a config)
                doc = []
            elif not python_doc:  # (<<EOF, unquoted: the shell expands its variables)
                doc.append(line if quoted_doc else " ".join(
                    _expanded(w, known) for w in line.split(" ")))
            continue
        m = _HEREDOC.search(line) if not buf else None
        if m is not None:
            here = m.group(1)
            quoted_doc = any(q in m.group(0) for q in "'\"")
            python_doc = re.search(r"\bpython[0-9.]*\b", line[: m.start()]) is not None
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
        for command in _commands(_substitutions(words)):  # a=1; b=2 on one line: two
            if _array_assignment(command, arrays):
                continue
            if command[0] == "case":
                branches = {}
            elif command[0] == "esac" and branches is not None:
                for name, values in branches.items():  # the name is one of these now
                    known.pop(name, None)
                    alternatives[name] = values
                branches = None
            elif branches is not None and command[0].endswith(")"):
                _branch_assignments(command[1:], branches)
            command = _shell_vars(_with_arrays(command, arrays), known)
            for name in [n for n in alternatives if n in known]:
                del alternatives[name]  # set again after the case
            if not _local_assignment(command, script):
                out += _each_alternative(command, alternatives)
        buf = ""
    if buf:  # a quote never closed
        out += buf.split()
    out = _fan_outs(_functions(_for_loops(out)))
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
            start = max((k + 1 for k in range(i - 1) if words[k] in (";", "|", "&&", "||")),
                        default=0)
            made = _xargs(words[start:i - 1], words[i + 1:_command_end(words, i)])
            if made is not None:
                if _produced(words[start:i - 1]) is not None:  # printf/echo: only items
                    del out[len(out) - (i - start):]
                out += made
                i = _command_end(words, i)
                continue
        if words[i] == "parallel" and (i == 0 or words[i - 1] in (";", "|", "&&", "||")):
            end = _command_end(words, i)
            made = _parallel(words[i + 1:end])
            if made is not None:
                out += made
                i = end
                continue
        out.append(words[i])
        i += 1
    return out if len(out) <= _MAX_EXPANDED_WORDS else words


def _command_end(words: list[str], i: int) -> int:
    while i < len(words) and words[i] not in (";", "|", "&&", "||"):
        i += 1
    return i


def _produced(producer: list[str]) -> list[str] | None:
    """The literal lines ``printf '%s\\n' a b c`` or ``echo a b c`` writes; None otherwise."""
    if producer[:1] == ["printf"] and len(producer) >= 3 and "%s" in producer[1]:
        return _loop_items(producer[2:])
    if producer[:1] == ["echo"]:
        return _loop_items([w for w in producer[1:] if w not in ("-n", "-e")])
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
        elif len(command) >= 3 and command[0].rsplit("/", 1)[-1] in _SHELLS and \
                command[1].startswith("-") and "c" in command[1]:
            # sh -c 'SCRIPT' with the item its $0: the script's own words
            one = _script_words(shell_args([*command, item])[2]) if items is not None \
                else _script_words(command[2].replace("$0", _ITEM))
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


def _is_location(t: str) -> bool:
    # a template too ("s3://b/${STAMP}/", "s3://b/{x}"): its place in the command says its way
    return bool(find_uris(t)) or t.startswith("/") or URI_RE.match(t) is not None


# copy-tool options that take no value (the word after one is an operand)
_SWITCHES = frozenset({
    "--recursive", "-r", "-R", "--quiet", "-q", "--no-progress", "--dryrun", "--dry-run",
    "--only-show-errors", "--follow-symlinks", "--no-follow-symlinks", "--delete", "-m", "-n",
    "--no-clobber", "--exact-timestamps", "--size-only", "--checksum", "-c", "--progress",
    "-P", "-v", "--verbose", "--overwrite"})


# copy-tool options that always take a value, however it looks (`--exclude '*/val/*'`)
_VALUED = frozenset({
    "--exclude", "--include", "--filter", "--exclude-from", "--include-from", "--filter-from",
    "--acl", "--storage-class", "--sse", "--sse-kms-key-id", "--region", "--profile",
    "--endpoint-url", "--content-type", "--cache-control", "--metadata", "--expected-size",
    "-x", "--transfers", "--checkers", "--concurrency", "--part-size", "--config"})


_REDIRECTIONS = frozenset({"<", "<<<", ">", ">>", "1>", "2>", "&>", "2>>"})


def _operand_like(t: str) -> bool:
    """A copy operand rather than an option's value: a location, a path, an alias/remote path."""
    return _is_location(t) or "/" in t or ":" in t or t in (".", "-")


def classify_tokens(
    tokens: list[str], flag_dirs: dict[str, str] | None = None
) -> dict[int, str | None]:
    """Direction of each token that holds a location or an absolute path.

    Index -> 'read' | 'write' | 'unknown' | None (nothing in the command line
    says; the caller decides). `flag_dirs` maps option names (`-`/`_` alike)
    to a direction known from elsewhere (a lightweight component's code).
    Paths are classified too, so PVC mount paths named in args can be told
    apart (`aws s3 sync s3://x /data` writes /data).
    """
    fd = {k.replace("-", "_"): v for k, v in (flag_dirs or {}).items()}
    out: dict[int, str | None] = {}
    i = 0
    n = len(tokens)
    while i < n:
        verb_at, verb = _copy_tool_at(tokens, i)
        if verb is not None:
            j = verb_at + 1
            operands: list[int] = []
            while j < n and tokens[j] not in _SEPARATORS:
                t = tokens[j]
                if t in _REDIRECTIONS or t.startswith(("<<<", "2>")):
                    # cp /dev/stdin s3://b/x <<< "text": a redirection, no operand
                    j += 2 if t in _REDIRECTIONS else 1
                    continue
                if t.startswith("-") and t != "-":
                    if "=" not in t and t not in _SWITCHES and j + 1 < n and \
                            not tokens[j + 1].startswith("-") and (
                            t in _VALUED or not _operand_like(tokens[j + 1])):
                        j += 1  # the option's value
                    j += 1
                    continue
                operands.append(j)
                j += 1
            locs = [k for k in operands if _is_location(tokens[k])]
            if verb in DELETE_VERBS:
                for k in locs:
                    out[k] = "write"
            elif verb in LIST_VERBS:
                for k in locs:
                    out[k] = "unknown"
            else:
                for k in locs:
                    out[k] = "write" if len(operands) > 1 and k == operands[-1] else "read"
            i = j
            continue
        t = tokens[i]
        flag, val = _flag_value(tokens, i)
        if val is not None and _is_location(val):
            d = fd.get(flag.replace("-", "_")) if flag else None
            out[i if "=" in t else i + 1] = d or name_direction(flag)
            i += 1 if "=" in t else 2
            continue
        if _is_location(t) and i not in out:
            out[i] = None
        i += 1
    _program_in_out(tokens, out)
    return out


def handed_on(tokens: list[str]) -> set[int]:
    """Indices of the words a command hands to other machines to run (``ray job submit
    [options] -- python train.py --data s3://...``: the Ray cluster runs it, so its reads
    are not this container's), up to the end of that command."""
    out: set[int] = set()
    for i in range(len(tokens) - 2):
        if tokens[i:i + 3] != ["ray", "job", "submit"]:
            continue
        j = i + 3
        while j < len(tokens) and tokens[j] not in _SEPARATORS and tokens[j] != "--":
            j += 1
        while j < len(tokens) and tokens[j] not in _SEPARATORS:
            out.add(j)
            j += 1
    return out


# a Hydra / OmegaConf override, key=value (+key=value appends, ++key=value forces)
_KEY_VALUE = re.compile(r"\+{0,2}([A-Za-z_][\w.\-]*)=")


def override_key(token: str) -> str | None:
    """The key of an override word (``+dataset.extra_path=s3://...``), else None."""
    m = _KEY_VALUE.match(token)
    return m.group(1) if m else None


def key_direction(key: str) -> str | None:
    """What an override's key says: its last part first (``checkpoint.save_dir``: write),
    else the whole (``checkpoint.dirpath``: unknown)."""
    return name_direction(key.rsplit(".", 1)[-1]) or name_direction(key)


def _program_in_out(tokens: list[str], out: dict[int, str | None]) -> None:
    """`prog SRC DST`: in a command with two or more bare URI operands, the last could be
    the output (`convert.py s3://in s3://out`): unknown rather than a guessed read."""
    seg: list[int] = []
    for i in [*range(len(tokens)), len(tokens)]:
        if i == len(tokens) or tokens[i] in _SEPARATORS:
            if len(seg) >= 2:
                out[seg[-1]] = "unknown"
            seg = []
        elif i in out and out[i] is None and URI_RE.search(tokens[i]) and \
                not tokens[i].startswith("-") and override_key(tokens[i]) is None and (
                    # --x=s3://...: a flag's value; an override (data.root=s3://...) goes
                    # by its key, whatever the key says
                i == 0 or not tokens[i - 1].startswith("-") or "=" in tokens[i - 1]):
            seg.append(i)


def _flag_value(tokens: list[str], i: int) -> tuple[str | None, str | None]:
    t = tokens[i]
    if not t.startswith("-") or t == "-" or t.startswith("---"):
        return None, None
    if "=" in t:
        flag, val = t.split("=", 1)
        return flag.lstrip("-"), val
    if i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
        return t.lstrip("-"), tokens[i + 1]
    return None, None


def _copy_tool_at(tokens: list[str], i: int) -> tuple[int, str | None]:
    """(index of the verb, verb) when tokens[i] starts a copy command, else (i, None).

    Global options between the tool, its sub-command and the verb are skipped
    (`aws --endpoint-url X s3 cp`, `s5cmd --numworkers 64 cp`, `gsutil -m cp`).
    """
    base = tokens[i].rsplit("/", 1)[-1]
    for prefix, verbs in COPY_TOOLS.items():
        if base != prefix[0]:
            continue
        k = i + 1
        want = [*prefix[1:], None]  # None: the verb
        ok = True
        for w in want:
            while k < len(tokens) and tokens[k].startswith("-"):
                has_value = (
                    "=" not in tokens[k]
                    and k + 1 < len(tokens)
                    and not tokens[k + 1].startswith("-")
                    and tokens[k + 1] not in verbs
                    and tokens[k + 1] not in DELETE_VERBS
                    and tokens[k + 1] not in LIST_VERBS
                    and tokens[k + 1] not in prefix
                )
                k += 2 if has_value else 1
            if k >= len(tokens):
                ok = False
                break
            if w is None:
                if tokens[k] in verbs or tokens[k] in DELETE_VERBS or tokens[k] in LIST_VERBS:
                    return k, tokens[k]
                ok = False
            elif tokens[k] != w:
                ok = False
            if not ok:
                break
            k += 1
    return i, None
