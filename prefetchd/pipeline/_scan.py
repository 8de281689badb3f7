"""Turn a step's command line, env and inputs into reads, writes and unknowns (all formats).

Called by the front ends (`_argo`, `_kfp2`) for each executable step, with a
resolver that turns placeholders into `Val`s. Direction, strongest evidence
first: a copy tool's operand order or a flag's name (`_uri.classify_tokens`),
a lightweight component's code (`_code`, mapped to its options or inputs),
then the name of the parameter that fills the slot, then the step's name
(`upload-*`, `publish-*`, ...), else read. A location the step both reads and
writes ends up `unknown` (`Step.settle`, called by the front ends).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from prefetchd.pipeline import _code, _pieces, _shell, _uri
from prefetchd.pipeline._model import Read, Step
from prefetchd.pipeline._resolve import Val, const, loop_group, loop_picks, runtime

Resolver = Callable[[str], "Val | None"]

_PH_RE = re.compile(r"\{\{.*?\}\}")
_URI_HINTS = ("uri", "url", "s3", "bucket", "prefix", "location")


def _protect(argv: list[str]) -> tuple[list[str], list[str]]:
    """Hide placeholders from shlex (their quotes would be eaten)."""
    saved: list[str] = []

    def sub(m: re.Match[str]) -> str:
        saved.append(m.group(0))
        return f"@@PH{len(saved) - 1}@@"

    return [_PH_RE.sub(sub, a) for a in argv], saved


_CASE_WORD = re.compile(r"(\bcase\s+[\"']?)(\{\{[^{}]+\}\})([\"']?\s+in\b)")


def _known_case_words(text: str, resolve: Resolver) -> str:
    """*text* with the word a shell ``case`` tests given its value when that is one plain
    word known before the run (``case "{{workflow.parameters.kit}}" in`` with kit=v5), so
    that only the branch it takes is read (blind round 36: every branch was)."""
    def one(m: re.Match[str]) -> str:
        v = resolve(m.group(2))
        word = v.single if v is not None and v.static else None
        if word is None or not re.fullmatch(r"[\w.\-/:+@=]+", word):
            return m.group(0)
        return m.group(1) + word + m.group(3)
    return _CASE_WORD.sub(one, text) if "case" in text else text


def _restore(tok: str, saved: list[str]) -> str:
    return re.sub(r"@@PH(\d+)@@", lambda m: saved[int(m.group(1))], tok)


def _hints_uri(token: str, v: Val) -> bool:
    s = (token + " " + str(v.get("parameter") or "") + " " + str(v.get("known") or "")).lower()
    return any(h in s for h in _URI_HINTS)


def read_from(val: Val, uri: str | None, **extra: str | None) -> Read:
    meta = dict(val.meta)
    meta.update({k: v for k, v in extra.items() if v is not None})
    keep = {
        k: meta.get(k)
        for k in (
            "pattern",
            "parameter",
            "env",
            "importer",
            "item_field",
            "producer",
            "artifact",
            "endpoint",
            "key",
            "value_from",
        )
    }
    return Read(uri=uri, static=uri is not None and val.static, origin=val.origin, **keep)


_is_code = _code.is_program
# an Argo/KFP placeholder in a program (its code is read once resolved, by scan_code), not a
# Python f-string's escaped brace ("{{000..031}}")
_RUNTIME = "s3://runtime-value/"  # stands in for a location only the run knows
_QUIET = "s3://runtime-quiet/"  # a run-time value whose name says nothing of a location
_RUNTIME_MARK = re.compile(r"__runtime(\d+)__")  # a script's run-time placeholder, by number
_MAX_PATHS = 256  # files under mounts one step's code builds (as _code bounds literal ones)
_TEMPLATED = re.compile(
    r"\{\{\s*(?:[$=]|inputs\.|outputs\.|workflow\.|tasks\.|steps\.|item\b|pod\.)")


def _flows(argv: list[str]) -> list[_code.Flow]:
    """The analyses of the Python programs among `argv` (whole program words, with no
    placeholder of the run left in them: those scan_code reads once resolved)."""
    return [flow for a in argv if isinstance(a, str) and _is_code(a)
            and not _TEMPLATED.search(a) and (flow := _code.analyze(a)) is not None]


def code_directions(argv: list[str]) -> dict[str, str]:
    """Direction of each function parameter in the Python programs among `argv`."""
    out: dict[str, str] = {}
    for flow in _flows(argv):
        for k, d in flow.params.items():
            out[k] = d if out.get(k, d) == d else "unknown"
    return out


# a location written out up to a folder before its first placeholder (s3://b/x/{{...}})
_DEEP_PLACEHOLDER = re.compile(r"(?:--?[\w.-]+=)?[a-z][a-z0-9+.-]*://[^{/\s]+/[^{\s]*\{\{")


def _fallback(step: Step, name: str | None, flag: str | None = None,
              verb: bool = True) -> str:
    """No evidence in the command line: the parameter's name, then a flag naming a model
    (`--models`: loaded more often than saved to, which `--output*` says), then the step's
    name, else read."""
    d = _uri.name_direction(name)
    if d is not None and d != "unknown":
        return d
    if flag and _uri.names_model(flag):
        return "read"  # --model {{item.ckpt}}: a checkpoint to load, whatever else "ckpt" is
    if d is not None:
        return d
    if verb and (_uri.step_says_write(step.id) or _uri.step_says_write(step.template)):
        return "write"
    return "read"


def scan_code(step: Step, code: str, resolve: Resolver | None = None,
              env: Iterable[str] = ()) -> bool:
    """Locations in embedded program text (lightweight components, scripts); False if not Python.

    Placeholders (`{{inputs.parameters.x}}`, as Hera's `@script` writes them) are
    replaced by their values first, one program per loop item. The code's own
    use decides (`_code`: open modes, boto3/fsspec calls, subprocess command
    lines); else a location assigned to an output artifact's `.uri` is a
    write; else the names it is assigned to or the input that supplied it
    (`_uri.name_direction`); else the step's name; else a read.
    """
    subs: dict[str, Val] = {}
    later: list[tuple[str, Val]] = []  # placeholders only the run fills (another step's output)
    for ph in dict.fromkeys(_PH_RE.findall(code)) if resolve is not None else ():
        v = resolve(ph)
        if v is None:
            continue
        if v.values is not None:
            subs[ph] = v
        elif _hints_uri(ph, v):
            step.add(_fallback(step, v.get("input")), read_from(v, None, pattern=ph))
        else:
            later.append((ph, v))
    picks = _combinations(subs)

    late = {ph: k for k, (ph, _) in enumerate(later)}

    def render(pick: dict[str, str]) -> str:
        def one(m: re.Match[str]) -> str:  # a run-time one: a marker naming which it is
            return pick.get(m.group(0), f"__runtime{late.get(m.group(0), 0)}__")

        return _PH_RE.sub(one, code) if subs or later else code

    first = render(picks[0])
    flow = _code.analyze(first)
    if flow is None:
        return False
    def locations(text: str, f: _code.Flow) -> list[str]:
        # those written out (not only as the start of one made at run time), and
        # s3://BUCKET/KEY built by boto3 calls from constants
        skip = _code.unused(f, env)  # an env var's default the step sets, a mere start
        found = [u for u in _uri.find_uris(text) if u not in skip]
        return found + [u for u in f.lits if u not in found and u not in skip]

    uris0 = locations(first, flow)
    dirs = [_code_direction(step, flow, u, first, subs, picks[0]) for u in uris0]
    written_out = set(_uri.find_uris(first))
    built = any(u not in written_out for u in flow.lits)  # made by the code, not in its text
    for k, pick in enumerate(picks):
        text = first if k == 0 else render(pick)
        uris = uris0 if k == 0 else _uri.find_uris(text)
        if k and (len(uris) != len(uris0) or flow.pairs or built):
            # an item changed the program's shape, or the code builds a location from it
            # (posixpath.join(root, ds, "x")) or boto3 keys: read it alone
            f = _code.analyze(text)
            if f is None:
                continue
            uris = locations(text, f)
            dk = [_code_direction(step, f, u, text, subs, pick) for u in uris]
        else:
            dk = dirs
        for u, d in zip(uris, dk, strict=True):
            marks = [int(k) for k in _RUNTIME_MARK.findall(u)]
            if marks:  # f"s3://b/raw/{cell}/x" with cell from another step
                if later:  # (a write too: shown, as a script's copy to such a place is)
                    v = later[min(marks[0], len(later) - 1)][1]
                    if v.origin == "workflow-runtime":
                        # the run's own name or time does not make it less a parameter's
                        # expression (as a template's text says: _resolve)
                        lead = _supplier(u, subs, pick)
                        v = lead if lead is not None and lead.origin != "constant" else v
                    pattern = _RUNTIME_MARK.sub(
                        lambda m: later[min(int(m.group(1)), len(later) - 1)][0], u)
                    step.add(d, read_from(v, None, pattern=pattern))
                continue
            src = _supplier(u, subs, pick)
            step.add(d, read_from(src, u) if src is not None else Read(u, True, "constant"))
    return True


def _combinations(subs: dict[str, Val]) -> list[dict[str, str]]:
    """The values a program's placeholders take together, one dict per run of it: those of
    one loop vary together, different loops independently (``_resolve.loop_picks``, as a
    template's text is combined); beyond MAX_LOOP_ITEMS runs, each one's first value."""
    group = {ph: loop_group(v) for ph, v in subs.items()}
    picks, _ = loop_picks((group[ph], len(v.values or ())) for ph, v in subs.items())
    out = []
    for at in picks or [{}]:
        made = {}
        for ph, v in subs.items():
            assert v.values is not None
            i = at.get(group[ph]) if group[ph] is not None else None
            made[ph] = v.values[i] if i is not None and i < len(v.values) else v.values[0]
        out.append(made)
    return out


def _supplier(u: str, subs: dict[str, Val], pick: dict[str, str]) -> Val | None:
    """The placeholder value a location in resolved code came from (its provenance): the
    one whose value holds it whole, else the first not constant of those whose values make
    it up (``f"{root}{taxon}/x.csv"``: a loop item's), as a template's text would say."""
    lead = None
    for ph, v in subs.items():
        val = pick.get(ph, "")
        if u in _uri.find_uris(val):
            return v
        if val and val in u and (lead is None or (
                lead.origin == "constant" and v.origin != "constant")):
            lead = v
    if lead is not None and lead.origin == "pipeline-parameter":
        return replace(lead, origin="parameter-expression")
    return lead


def _code_direction(step: Step, flow: _code.Flow, u: str, text: str, subs: dict[str, Val],
                    pick: dict[str, str]) -> str:
    d = flow.lits.get(u)
    if d is not None:
        return d
    names = flow.names.get(u, ())
    if any(x.endswith(".uri") for x in names):
        return "write"
    for x in names:
        d = _uri.name_direction(x.rsplit(".", 1)[-1])
        if d is not None:
            return d
    src = _supplier(u, subs, pick)
    return _fallback(step, src.get("input") if src is not None else None)


def scan_argv(
    step: Step,
    argv: list[str],
    resolve: Resolver,
    paths: list[tuple[str, str]],
    flag_dirs: dict[str, str] | None = None,
    env: Iterable[str] = (),
    env_values: dict[str, Val] | None = None,
    shell_env: dict[str, str] | None = None,
    pod_values: dict[str, Val] | None = None,
) -> set[str]:
    """Add reads/writes in argv to `step`; collect absolute paths (with direction) in `paths`.
    `env`: the names of the env vars the step's container sets; `shell_env`: those a script
    sees expanded (``${BREWERY}``); `pod_values`: those only its pod has values for
    (``pod_env``), whose locations (``--model $(MODEL_URI)``) are run-time reads.

    `flag_dirs`: directions of options known from a lightweight component's code;
    `env_values`: the env vars as inputs (`env_inputs`). Returns the options and env vars
    the code uses only to build locations (their own values are not read).
    """
    argv = [a for a in argv if isinstance(a, str)]
    given = {k[len(_code.ENV):]: v.values[0] for k, v in (env_values or {}).items()
             if v.values}
    # rclone copy hydro:bucket/x with RCLONE_CONFIG_HYDRO_TYPE=s3; mc cp lake/bkt/x with
    # MC_HOST_lake=... or `mc alias set lake ...`
    argv = _uri.with_s3_remotes(argv, _uri.rclone_s3_remotes(given))
    argv = _uri.with_mc_aliases(argv, _uri.mc_aliases(given, argv))
    # wget http://minio:9000/bkt/key, curl "$S3_ENDPOINT/bkt/key" with that endpoint set
    argv = _uri.with_s3_endpoints(argv, _uri.s3_endpoints(given))
    # a program read as code stays in place as a word, so `sh -c '... "$0" "$@"'` still
    # finds its positional args where they are
    shell = ["__code__" if _is_code(a) and scan_code(
                 step, _code.with_argv(a, argv[i + 1:]) if _code.is_python_c(argv, i) else a,
                 resolve, env) else a
             for i, a in enumerate(argv)]
    # the words a `python -c` program takes as sys.argv[N] are its own to use (a JSON dict
    # of locations it looks two of three up in): not read as words too (blind round 48)
    taken = {i + n for i, w in enumerate(shell) if w == "__code__" and _code.is_python_c(
        argv, i) for n in _code.argv_indices(argv[i])}
    shell = ["__taken__" if i in taken else w for i, w in enumerate(shell)]
    for a in argv:  # python - <<'PY' ... PY inside a script: the document is a program
        for program in _uri.python_heredocs(a):
            scan_code(step, program, resolve, env)
            paths += _program_paths(program, resolve)
    for a, w in zip(argv, shell, strict=True):
        paths += _program_paths(a, resolve) if w == "__code__" else []
        for u, d in _uri.sdk_objects(a) if w != "__code__" else []:
            # GetObjectCommand({Bucket, Key}) in JS, s3read_using(object=, bucket=) in R
            v = resolve(u) if "{{" in u else const(u)
            for value in (v.values or ()) if v is not None else ():
                for found in _uri.find_uris(value):
                    step.add(d, read_from(v, found))
    protected, saved = _protect([_known_case_words(a, resolve) for a in shell])
    toks = [_restore(t, saved) for t in _uri.tokenize(protected, shell_env)]
    vals: list[Val | None] = []
    reps: list[str] = []
    pod_at: dict[int, list[str]] = {}  # a location built on a pod-only var: its patterns
    for t in toks:
        v = resolve(t) if "{{" in t else None
        if v is not None and v.values is None and _PROSE.search(_ANY_PLACEHOLDER.sub("", t)) \
                and not _PLACEHOLDER_IN_URI.search(t):
            # a query or program holding a value only the run has (duckdb -c "... read_parquet
            # ('{{$.inputs.artifacts['labels'].path}}') ... read_csv_auto('s3://...')"): not
            # one location of its own; the locations written out in it are (blind round 70:
            # the whole query was one run-time read, its literal S3 CSV lost)
            rest = _ANY_PLACEHOLDER.sub(" ", t)
            v = const(rest) if _uri.find_uris(rest) else None
            t = rest if v is not None else t
        found = _pod_words(t, v, pod_values, toks[len(vals) - 1] if vals else None) \
            if pod_values and "$" in t else None
        if found is not None:  # (its flag kept: --data=$(X) says its way)
            pod_at[len(vals)] = found[1]
            vals.append(found[0])
            key = t.split("=", 1)[0] + "=" if "=" in t and (
                t.startswith("-") or _uri.override_key(t)) else ""
            reps.append(key + _RUNTIME)
            continue
        if v is not None and _shell.PENDING_MARK in t:  # "${1%/}/x": applied once resolved
            v = replace(v, values=tuple(_shell.strip_suffixes(x) for x in v.values)) \
                if v.values is not None else v.with_meta(
                    pattern=_shell.strip_suffixes(str(v.get("pattern") or t)))
        t = _shell.strip_suffixes(t) if _shell.PENDING_MARK in t else t
        if v is None:
            v = const(t) if (_uri.find_uris(t) or t.startswith("/")
                             or _uri.run_time_locations(t)) else None
        vals.append(v)
        if v is None:
            reps.append(t)
        elif v.values is not None:
            reps.append(v.values[0])
        elif _hints_uri(t, v):  # --flag={{...}} keeps its flag: it says the way
            reps.append((t.split("=", 1)[0] + "=" if t.startswith("-") and "=" in t else "")
                        + _RUNTIME)
        elif t.startswith("{{") and v.origin != "unresolved":
            reps.append(_QUIET)  # a value of the run named nothing: a location only where
            # the command line reads one (a copy's source), below
        else:
            reps.append(t)
    toks = [_shell.strip_suffixes(t) if _shell.PENDING_MARK in t else t for t in toks]
    # a lightweight component's options (KFP v1: --src-uri VALUE for parameter src_uri):
    # the locations its code builds from them, and the options used only for that
    # (a plain value too: a JSON list the code loops over)
    options = {toks[i][2:].replace("-", "_"): (i + 1, vals[i + 1] or const(toks[i + 1]))
               for i in range(len(toks) - 1)
               if toks[i].startswith("--") and "=" not in toks[i] and (
                   vals[i + 1] is not None or not toks[i + 1].startswith("-"))}
    built = code_built(argv) if options or env_values or pod_values else ([], set())
    # the pod-only vars as the code's inputs too (os.environ["MILLS_URI"] of a
    # configMapKeyRef): what it builds on one, or reads as it is, is a run-time read (blind
    # round 59: nothing was read, where the shell's "$MILLS_URI" was)
    # (as in the shell: never one whose name or key names a service, CMMS_URL; read as it is
    # only one whose name or key names a place, MILLS_URI)
    pod_inputs = {_code.ENV + n: v for n, v in (pod_values or {}).items()
                  if not _pod_words_of(v) & _SERVICE_WORDS}
    opt_inputs = {**pod_inputs, **(env_values or {}),
                  **{k: v for k, (_, v) in options.items() if v is not None}}
    in_built = _scan_built(step, opt_inputs, built, paths)
    for name in sorted(built[1] & pod_inputs.keys()):
        v = pod_inputs[name]
        if _pod_words_of(v) & _POD_PLACE_WORDS:
            step.add("read", read_from(v, None, pattern="${" + name[len(_code.ENV):] + "}"))
    if options or env_values:  # KFP v1: boto3 calls on the options' (and env vars') values
        _scan_pairs(step, opt_inputs, code_pairs(argv))
    only_built = {options[k][0] for k in in_built - set(flag_dirs or {}) if k in options}
    directions = _uri.classify_tokens(reps, flag_dirs, lists=True)
    # a command line that names its output (--out s3://...) leaves its other locations to
    # be inputs, whatever the step's verb (publish-block-model --blocks X --out Y reads X)
    verb = "write" not in directions.values()
    for i, d in directions.items():
        v = vals[i]
        listed = "unknown" if d == "list" else d  # (a path only listed: unknown)
        # the flag the location is the value of: --flag=VALUE, or --flag VALUE
        flag = toks[i].split("=", 1)[0] if toks[i].startswith("-") else \
            toks[i - 1] if i and toks[i - 1].startswith("-") else None
        if v is None and toks[i].startswith("-") and "=" in toks[i]:
            value = toks[i].split("=", 1)[1]  # --audio-root=/data/train_audio: a path too
            if value.startswith("/") and "{{" not in value:
                # (a step's verb is no evidence for a path under a read-only mount)
                paths.append((value, listed or _uri.name_direction(flag) or "read"))
        if v is None or i in only_built:
            continue
        if i in pod_at:
            d = d or _fallback(step, v.get("input"), flag, verb)
            for pattern in pod_at[i]:
                step.add(d, read_from(v, None, pattern=pattern))
            continue
        if reps[i] == _QUIET:
            if d == "read" and (flag is None or flag.lstrip("-").replace("-", "_") in {
                    k.replace("-", "_") for k in flag_dirs or {}} or _uri.names_place(flag)):
                # aws s3 sync {{...Output}} /x, a component's option its code reads, a flag
                # naming a place (--model_load_path): another step's output, read (a flag's
                # read word alone, --src-lang {{...}}, is no evidence here)
                step.add(d, read_from(v, None, pattern=v.get("pattern") or toks[i]))
            continue
        # a path under a read-only mount: the command line or a name decides, never the
        # step's verb (export-onnx --train /data/x reads /data/x)
        # (an input that fills a folder deep in a written-out location, ``s3://b/uploads/
        # {{inputs.parameters.upload_date}}/x``, names a part, not the location's way)
        named = v.get("input") if not _DEEP_PLACEHOLDER.match(toks[i]) else None
        path_d = listed or _uri.name_direction(named) or "read"
        if d is None:  # the command line says nothing: the input's name, then the step's
            d = _fallback(step, named, flag, verb)
        if v.values is None:
            if reps[i].endswith(_RUNTIME):
                pattern = v.get("pattern") or toks[i]
                if pattern.startswith("-") and "=" in pattern:
                    pattern = pattern.split("=", 1)[1]  # the value, not its flag
                step.add(d, read_from(v, None, pattern=pattern))
            continue
        for value in v.values:
            uris = _uri.find_uris(value)
            for u in uris:
                step.add(d, read_from(v, u))
            for pattern in [] if uris else _uri.run_time_locations(value):
                step.add(d, read_from(v, None, pattern=pattern))  # a shell variable's
            if not uris and value.startswith("/"):
                command = _command_word(toks, i)
                if command in _WRITES_PATH:  # rm -rf /data/tmp: written, not read
                    paths.append((value, "write"))
                elif command not in _NO_DATA:  # mkdir -p /data/raw: neither
                    paths.append((value, path_d))
    return {k for k in in_built - set(flag_dirs or {}) if k.startswith(_code.ENV)}


def _program_paths(code: str, resolve: Resolver) -> list[tuple[str, str]]:
    """The files a program uses under a mounted volume (``pd.read_parquet("/data/x")``,
    ``df.to_parquet("/data/out")``), with direction: they narrow the mount as the command
    line's paths do; an input's value in one (``f"/cache/{season}/x"``) as the run has it."""
    out = []
    for path, d in _code.program_paths(code):
        v = resolve(path) if "{{" in path else const(path)
        out += [(x, d) for x in (v.values if v is not None and v.values else ())
                if x.startswith("/") and "{{" not in x]
    return out


_PROSE = re.compile(r"\s\S+\s")  # words of a query or a program: more than a path
_ANY_PLACEHOLDER = re.compile(r"\{\{.*?\}\}")
_PLACEHOLDER_IN_URI = re.compile(r"://[^\s'\"(),;]*\{\{")  # s3://data/{{=x + 1}}/: one location


def _command_word(toks: list[str], i: int) -> str:
    """The program the command holding word *i* runs (past ``sh -c``, ``bash -lc``)."""
    k = _shell.command_start(toks, i)
    while k + 2 <= i and _shell.runs_script(toks, k):
        k += 2
    return toks[k].rsplit("/", 1)[-1]


# local commands whose path operands are no data they read (a folder made, listed, entered)
_NO_DATA = frozenset({"mkdir", "touch", "chmod", "chown", "ls", "cd", "du", "df", "test", "[",
                      "echo", "stat", "realpath", "dirname", "basename"})
_WRITES_PATH = frozenset({"rm", "rmdir"})


# where a container env var's value comes from when only the pod will have it: a ConfigMap
# (one not among the files, or without that key) or a Secret (whose data is never read)
_POD_SOURCES = (("configMapKeyRef", "configMapRef", "configmap"),
                ("secretKeyRef", "secretRef", "secret"))
# what a script reads from its env (``$X``, ``${X}``; what it sets itself: _uri.SHELL_SETS),
# and a Python program's ``os.environ["X"]`` / ``os.getenv("X")``
_SHELL_REF = re.compile(r"(?<!\$)\$(?:\{([A-Za-z_][A-Za-z0-9_]*)[}:%#/-]|([A-Za-z_][A-Za-z0-9_]*))")
_PY_ENV_REF = re.compile(r"os\.(?:environ\s*\[\s*|environ\.get\(\s*|getenv\(\s*)"
                         r"[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")
_STANDARD_ENV = frozenset({"HOME", "PATH", "PWD", "USER", "HOSTNAME", "SHELL", "TMPDIR", "LANG",
                           "IFS", "RANDOM", "SECONDS", "LINENO", "OLDPWD", "PPID", "UID"})
_POD_REF = re.compile(r"(?<!\$)\$(?:\(([A-Za-z_][A-Za-z0-9_]*)\)|\{([A-Za-z_][A-Za-z0-9_]*)\})")
# a var named for where data is (MODEL_URI, REF_ROOT, DATA_DIR), unless it names a service
# (MLFLOW_TRACKING_URI, S3_ENDPOINT, STATUS_HOOK_URL): a value given whole is a location
_POD_PLACE_WORDS = frozenset({"uri", "path", "dir", "root", "prefix", "location", "file",
                              "files", "bucket", "folder"})
_SERVICE_WORDS = frozenset({"endpoint", "host", "hostname", "tracking", "server", "hook",
                            "webhook", "api", "proxy", "url"})


def pod_env(container: dict[str, Any],
            given: Callable[[str], bool] = lambda _name: False) -> dict[str, Val]:
    """The env vars of a step's container that only its pod will have values for, by name:
    ``valueFrom.configMapKeyRef`` (the ConfigMap not among the files, or without that key:
    those given were made plain values before, ``_argo``), ``valueFrom.secretKeyRef`` (a
    Secret's data is never read: its name and key only), and a ``$(VAR)`` of the command
    line no env entry sets while the container takes ``envFrom`` a ConfigMap or Secret (whose
    ``prefix`` it starts with; not a ConfigMap *given* by name with the files, whose keys are
    all known: one it lacks is set by none). Each is a run-time `Val` (origin ``env``, as the
    truth schema names an env var's read; ``value_from`` ``configmap NAME/KEY`` or ``secret
    NAME/KEY``): a location built on one is a run-time read, never lost as one the kubelet left
    unexpanded would be."""
    out: dict[str, Val] = {}
    env = [e for e in container.get("env") or [] if isinstance(e, dict)]
    for e in env:
        vf, name = e.get("valueFrom"), e.get("name")
        if not isinstance(vf, dict) or not isinstance(name, str) or isinstance(
                e.get("value"), str):
            continue
        for ref_key, _from_key, origin in _POD_SOURCES:
            ref = vf.get(ref_key)
            if isinstance(ref, dict):
                out[name] = runtime("env", env=name, input=name,
                                    value_from=f"{origin} {ref.get('name')}/{ref.get('key')}")
    defined = {e.get("name") for e in env}
    raw = [a for a in [*(container.get("command") or []), *(container.get("args") or [])]
           if isinstance(a, str)]
    named = [n for a in raw for n in _uri.KUBE_REF.findall(a) if n not in defined and n not in out]
    if container.get("envFrom"):
        # and what its script or program reads from its env that nothing in it sets
        # (aws s3 cp "$QC_THRESHOLDS_URI" ..., os.environ["X"]: blind round 59)
        text = "\n".join([*raw, str(container.get("source") or "")])
        set_here = {n for found in _uri.SHELL_SETS.findall(text) for n in found if n}
        named += [n for n in dict.fromkeys(
            [*(a or b for a, b in _SHELL_REF.findall(text)), *_PY_ENV_REF.findall(text)])
            if n not in defined and n not in out and n not in set_here
            and n not in _STANDARD_ENV and n not in named]
    for src in container.get("envFrom") or []:
        if not isinstance(src, dict):
            continue
        prefix = str(src.get("prefix") or "")
        for _ref_key, from_key, origin in _POD_SOURCES:
            ref = src.get(from_key)
            if not isinstance(ref, dict) or origin == "configmap" and given(
                    str(ref.get("name"))):
                continue
            for n in named:
                if n.startswith(prefix) and n not in out:
                    out[n] = runtime("env", env=n, input=n,
                                     value_from=f"{origin} {ref.get('name')}/{n[len(prefix):]}")
    return out


def pod_location(word: str, pod: dict[str, Val], flag: str | None) -> Val | None:
    """The pod-only var (``pod_env``) *word* is a location built on, else None:
    ``s3://$(BUCKET)/x`` and ``$(REF_ROOT)/x.fasta`` by their shape; a var alone
    (``--model $(MODEL_URI)``) when its name, its key or the flag names a place. Never a var
    whose name or key names a service (``spark.hadoop.fs.s3a.endpoint=$(S3_ENDPOINT)``,
    ``curl -X POST "${SERVING_URL}/v1/reload"``): no data there."""
    m = next((x for x in _POD_REF.finditer(word) if (x.group(1) or x.group(2)) in pod), None)
    if m is None:
        return None
    v = pod[m.group(1) or m.group(2)]
    before, after = word[:m.start()], word[m.end():]
    own = _pod_words_of(v)
    if own & _SERVICE_WORDS:  # "${SERVING_URL}/v1/models/x:reload": an API, no data
        return None
    if before:
        return v if _SCHEME.match(before) else None
    if after.strip("/"):
        return v if after.startswith("/") else None
    return v if (own | _words(flag or "")) & _POD_PLACE_WORDS else None


_SCHEME = re.compile(r"(?:" + "|".join(_uri.SCHEMES) + r")://")


def _pod_words_of(v: Val) -> set[str]:
    """The words of a pod-only var's name and of its ConfigMap or Secret key."""
    return _words(str(v.get("env")), str(v.get("value_from")).rsplit("/", 1)[-1])


def _words(*names: str) -> set[str]:
    return set().union(*map(_uri.name_words, names))


def _pod_words(tok: str, v: Val | None, pod: dict[str, Val],
               prev: str | None) -> tuple[Val, list[str]] | None:
    """The pod-only var token *tok* (*v*: its value with the pipeline's placeholders filled
    in, per loop item) is a location built on, and the location's pattern for each value;
    None when it is no such location."""
    if v is not None and v.values is None:
        return None  # another step's output in it too: the resolver's run-time value
    flag = prev if prev is not None and prev.startswith("-") else None
    found: Val | None = None
    patterns: list[str] = []
    for value in v.values if v is not None and v.values else (tok,):
        word = value
        if value.startswith("-") and "=" in value:
            flag, word = value.split("=", 1)
        elif (key := _uri.override_key(value)) is not None:
            flag, word = key, value.split("=", 1)[1]
        pv = pod_location(word, pod, flag)
        if pv is None:
            return None
        found = found or pv
        patterns.append(word)
    return (found, list(dict.fromkeys(patterns))) if found is not None else None


def env_inputs(env: list[tuple[str, str]], resolve: Resolver) -> dict[str, Val]:
    """The step's env vars as inputs code may build locations from (``os.environ["X"] +
    "/vocab.json"``: `_code.ENV`), by the name ``env:X``."""
    out: dict[str, Val] = {}
    for name, raw in env:
        if isinstance(name, str) and isinstance(raw, str):
            out[_code.ENV + name] = (resolve(raw) if "{{" in raw else None) or const(raw)
    return out


def env_expansion(container: dict[str, Any], raw: list[str], env: list[tuple[str, str]],
                  envs: dict[str, Val], pod: Iterable[str] = (),
                  ) -> tuple[list[str], dict[str, str] | None, set[str]]:
    """A step container's command line with its env vars in place, as the pod runs it:
    (argv with the kubelet's ``$(NAME)`` expanded, the env its script sees for ``${NAME}``,
    the names of roots the command line spells out). *env*: its (name, raw value) pairs,
    *envs*: the same as inputs (``env_inputs``).

    Expanded: the values that are no locations (``BREWERY=north-yard``), per loop item too
    (``TABLE={{inputs.parameters.t}}``: its placeholder in place, resolved with the words
    it is in), and a root the command line spells out (``${DATA_ROOT}/x.csv``: read there
    only, not whole: the third part). A location given whole (``--data $(TRAIN_URI)``)
    stays the env var's read (origin ``env``); a var set from elsewhere (``valueFrom``)
    stays the pod's value (``_uri.shell_env``), and so do the vars of *pod* (``pod_env``):
    in a script their ``$(VAR)`` becomes ``${VAR}``, the pod's value as the shell reads it
    (the kubelet puts it there before the shell runs; a shell would take ``$(VAR)`` for a
    command)."""
    known = [{"name": k[len(_code.ENV):], "value": v.values[0]} for k, v in envs.items()
             if v.values is not None and len(v.values) == 1 and "{{" not in v.values[0]]
    spelled = _uri.spelled_out_env({"command": raw, "args": [container.get("source") or ""],
                                    "env": known}, built_on=True)
    shown = [e for e in known if e["name"] in spelled or not (
        _uri.find_uris(e["value"]) or e["value"].startswith("/"))]
    shown += [{"name": n, "value": text} for n, text in env
              if isinstance(text, str) and "{{" in text and isinstance(n, str)
              and (v := envs.get(_code.ENV + n)) is not None and v.values
              and len(v.values) > 1 and not any(
                  _uri.find_uris(x) or x.startswith("/") for x in v.values)]
    # every var the container sets is set for its script, a location given whole too (as
    # itself): ``${PRE:-s3://b/base-v3/}`` with PRE given is PRE, not the default (blind
    # round 42)
    given = {n: "${" + n + "}" for n, text in env if isinstance(n, str) and isinstance(text, str)}
    pod = set(pod)
    shell = _uri.shell_env(container.get("env"),
                           {**{n: "${" + n + "}" for n in pod}, **given,
                            **{e["name"]: e["value"] for e in shown}})
    argv = _uri.kube_expand(raw, shown)
    if pod:
        argv = [_uri.KUBE_REF.sub(lambda m: "${" + m.group(1) + "}" if m.group(1) in pod
                              else m.group(0), a) if any(c in a for c in " \n\t") else a
                for a in argv]
    return argv, shell or None, spelled


def scan_env(step: Step, env: list[tuple[str, str]], resolve: Resolver,
             only_built: Iterable[str] = ()) -> None:
    """The env vars' locations, by their names; *only_built*: names of those the code uses
    only to build other locations (``env:X``), whose own values are not read."""
    skip = {n[len(_code.ENV):] for n in only_built if n.startswith(_code.ENV)}
    for name, raw in env:
        if not isinstance(raw, str) or name in skip:
            continue
        v = resolve(raw) if "{{" in raw else None
        if v is None:
            v = const(raw)
        if v.values is None:
            continue
        for value in v.values:
            for u in _uri.find_uris(value):
                r = read_from(v, u, env=name)
                r.origin = "env"
                step.add(_fallback(step, name), r)


def code_pairs(argv: list[str]) -> list[tuple[tuple[str, str], tuple[str, str], str]]:
    """boto3 bucket/key pairs of the Python programs among `argv` (see `_code.Flow.pairs`)."""
    return [p for flow in _flows(argv) for p in flow.pairs
            if {"param", "pieces"} & {p[0][0], p[1][0]}]


Built = tuple[list[tuple[_code.Pieces, str]], set[str]]


def code_built(argv: list[str]) -> Built:
    """Locations the Python programs among `argv` build from their parameters, and the
    parameters they also hand to code not followed (see `_code.Flow.built`)."""
    out: list[tuple[_code.Pieces, str]] = []
    escaped: set[str] = set()
    for flow in _flows(argv):
        out += list(flow.built)
        escaped |= flow.escaped
        # an env var a command line it runs reads (subprocess.run(["aws", "s3", "sync",
        # os.environ["EVAL_SET_URI"], ...])): handed on as it is (blind round 70: a
        # ConfigMap's location given so was read nowhere)
        escaped |= {_code.ENV + n for n, d in flow.env_dirs if d == "read"}
    return out, escaped


def _scan_built(step: Step, inputs: dict[str, Val], built: Built,
                paths: list[tuple[str, str]] | None = None) -> set[str]:
    """Name each location the code builds (``f"s3://{bucket}/raw/{day}/x.csv"``) from the
    inputs' values, one per loop item; the inputs used only for that (not also handed to
    code we do not follow, where they may be read as they are). A file it builds under a
    mounted volume (``f"/ref/icd10/map_{version}.csv"``) goes to *paths*, with direction,
    to narrow the mount as a literal path does."""
    used: set[str] = set()
    for pieces, d in built[0]:
        used.update(_pieces.needs(pieces))
        if d == "check":
            continue  # only checked to exist (head_object): used, not read
        rendered = _rendered(pieces, inputs)
        if rendered is None:
            later = _run_time(pieces, inputs)
            if later is not None and d == "read":  # built from another step's output
                step.add(d, read_from(later[0], None, pattern=later[1]))
            continue
        lead, texts = rendered
        for text in texts:
            for u in _uri.find_uris(text):
                step.add(_code.sql_direction(text, u, d), read_from(lead, u))
            if paths is not None and text.startswith("/") and "{{" not in text and \
                    len(paths) < _MAX_PATHS:
                paths.append((text, d))
    return used - built[1]


def _run_time(pieces: _pieces.Pieces, inputs: dict[str, Val]) -> tuple[Val, str] | None:
    """A location built from an input only the run knows (another step's output) and no
    input we do not know at all: that input, and the location's pattern."""
    vals = [inputs.get(name) for name in _pieces.needs(pieces)]
    if not vals or any(v is None for v in vals):
        return None
    later = next((v for v in vals if v is not None and v.values is None), None)
    if later is None:
        return None
    known = {name: v.values[0] for name, v in inputs.items() if v.values}
    shown = "".join(known.get(p[1], _pattern_part(p)) if isinstance(p, tuple) and p[0] == "param"
                    else _pattern_part(p) for p in pieces)
    if shown.startswith("/") or all(isinstance(p, tuple) and p[0] == "fmt" or
                                    isinstance(p, str) and "/" not in p for p in pieces):
        # f"{scratch}/scenes/{scene}/*.tiff" with scratch="/scratch": a local path; f"{auc:.4f}"
        # (a number formatted): no location
        return None
    return later, "".join(_pattern_part(p) for p in pieces)


def _pattern_part(p: str | tuple[str, str]) -> str:
    """A piece as a run-time pattern shows it: its input as ``{{name}}``."""
    if isinstance(p, str):
        return p
    if p[0] == _pieces.ON_FS:
        return ""
    name = _pieces.needs((p,))
    return "{{" + name[0] + "}}" if name else "{}"


def _rendered(pieces: _pieces.Pieces, inputs: dict[str, Val]) -> tuple[Val, list[str]] | None:
    """The texts of *pieces* with the inputs' values, for every loop item (the pipeline's
    and the code's own), and the input that leads them (provenance); None when a value is
    only known at run time, the inputs are lists of different lengths (not a pairing we
    can tell), or the code's items cannot be told."""
    names = _pieces.needs(pieces)
    vals = [inputs.get(name) for name in names]
    if not names or any(v is None or v.values is None for v in vals):
        return None
    used = {name: v for name, v in zip(names, vals, strict=True) if v is not None}
    lengths: dict[str, set[int]] = {}
    for v in used.values():
        assert v.values is not None
        if len(v.values) > 1:
            lengths.setdefault(str(v.get("loop") or "?"), set()).add(len(v.values))
    if any(len(n) > 1 for n in lengths.values()):
        return None  # one loop's lists of different lengths: no pairing we can tell
    texts: list[str] = []
    for pick in _combinations(used):  # a loop nested in another: every pair of items
        made = _pieces.render_all(pieces, pick)
        if made is None:
            return None
        texts += made
    # (the first input that is no constant leads, as in a placeholder's expression: a
    # nested pipeline's default and a loop item passed in are the item's; blind round 72)
    lead = next((v for v in vals if v is not None and v.origin != "constant"), vals[0])
    assert lead is not None
    return lead, texts


def _scan_pairs(step: Step, inputs: dict[str, Val],
                pairs: list[tuple[tuple[str, Any], tuple[str, Any], str]]) -> set[str]:
    """A boto3 (or MinIO SDK) call whose bucket and key are inputs, constants or built from
    inputs names s3://BUCKET/KEY, one per loop item; one whose bucket or key only the run
    knows (a required parameter, another step's output, a Secret's env var) is a run-time
    location of that pattern (``s3://{{bucket}}/{{key}}``), led by the key's input. Returns
    the inputs such a pair names: no location of their own (the bucket alone is none)."""
    named: set[str] = set()
    for b, k, d in pairs:
        pieces = _code.pair_pieces(b, k)
        rendered = _rendered(pieces, inputs) if pieces is not None else None
        key_inputs = [k[1]] if k[0] == "param" else _pieces.needs(k[1]) if k[0] == "pieces" \
            else []
        if rendered is None and pieces is not None:
            later = _run_time(pieces, inputs)
            if later is not None:
                named.update(_pieces.needs(pieces))
                # (the key's input that only the run knows leads: another step's output
                # names the object, whatever the bucket's origin; blind round 73)
                lead = next((v for n in [*key_inputs, *_pieces.needs(pieces)]
                             if (v := inputs.get(n)) is not None and v.values is None),
                            later[0])
                env = next((n[len(_code.ENV):] for n in _pieces.needs(pieces)
                            if n.startswith(_code.ENV) and inputs[n] is lead), None)
                # (the parts known before the run written out: s3://{{env:BUCKET}}/models/x)
                known = {n: v.values[0] for n, v in inputs.items() if v.values and len(
                    v.values) == 1}
                pattern = "".join(known.get(p[1], _pattern_part(p)) if isinstance(p, tuple)
                                  and p[0] == "param" else _pattern_part(p) for p in pieces)
                step.add(d, read_from(lead, None, pattern=pattern, env=env))
            continue
        if b[0] != "const":  # a "bucket" with a "/" in it is no bucket
            bucket = _rendered(_code.pair_pieces(b, ("const", "")) or (), inputs)
            if bucket is None or any("/" in t[len("s3://"):].rstrip("/") and not t[
                    len("s3://"):].startswith("arn:") for t in bucket[1]):
                continue  # (an access point ARN is a bucket to boto3: blind round 71)
        if rendered is None:
            continue  # a value the run alone knows
        named.update(_pieces.needs(pieces or ()))
        # (the first input of the key that is no constant leads, as in _rendered)
        vals = [v for n in key_inputs if (v := inputs.get(n)) is not None]
        lead = next((v for v in vals if v.origin != "constant"), vals[0] if vals else None)
        for text in rendered[1]:
            for u in _uri.find_uris(text):
                step.add(d, read_from(lead or rendered[0], u))
    return named


def scan_named_inputs(
    step: Step,
    inputs: dict[str, Val],
    code_dirs: dict[str, str] | None = None,
    pairs: list[tuple[tuple[str, Any], tuple[str, Any], str]] | None = None,
    built: Built | None = None,
    paths: list[tuple[str, str]] | None = None,
) -> set[str]:
    """Inputs handed to code (KFP lightweight `{{$}}`): the code's use, else the name.
    Returns the env vars (``env:X`` inputs) the code uses only to build locations; the
    files it builds from them under a mounted volume go to *paths* (``_scan_built``).

    A boto3 call whose bucket and key are inputs (or constants) names s3://BUCKET/KEY; a
    location the code builds from inputs is named from their values, and an input used only
    to build locations is not a location of its own (its value may be a bucket, a date, or
    the parent of what is read).
    """
    in_built = _scan_built(step, inputs, built or ([], set()), paths)
    in_pairs = _scan_pairs(step, inputs, pairs or []) - (built or ([], set()))[1]
    for name, v in inputs.items():
        if name.startswith(_code.ENV):
            continue  # an env var: scan_env reads it by its name
        said = (code_dirs or {}).get(name)
        if v.values is None and name not in in_pairs and (
                said == "read" or said is None and _hints_uri(name, v)
                and _fallback(step, name) == "read"):
            # the code reads it as a location (aws s3 sync <it>), or its name says it is
            # one (partition_uri handed to `--wet` in a subprocess: blind round 37, as a
            # container component's argument is), whose value is another step's output: a
            # read only the run can name
            step.add("read", read_from(v, None, pattern="{{" + name + "}}"))
        if v.values is None or (name in in_built and name not in (code_dirs or {})):
            continue
        d = (code_dirs or {}).get(name) or _fallback(step, name)
        for value in v.values:
            for u in _uri.find_uris(value):
                if not _uri.is_uri(value):
                    continue
                step.add(d, read_from(v, u))
    return {k for k in in_built - set(code_dirs or {}) if k.startswith(_code.ENV)}
