"""Finding object-store locations in command lines and deciding read vs write.

A container's args say *where* data is, rarely *which way* it flows. We use the
conventions that real pipelines follow and that the corpus exercises:

- copy tools (`aws s3 cp|sync|mv`, `gsutil cp|rsync`, `s5cmd`, `rclone`, `mc`):
  the last location is the destination (a write), earlier ones are sources;
  `rm`/`rb` delete (a write).
- a location that follows a flag, or a parameter whose name, says output
  (`--out`, `--to`, `--dest`, `output_uri`, `export_dir`, ...) is a write.
- a step whose name starts with an output verb (`upload-`, `publish-`, `export-`,
  `push-`) writes every location it names.
Everything else is a read: prefetching a location that turns out to be written
costs a listing; missing a read costs a cold epoch.
"""

from __future__ import annotations

import re
import shlex

# schemes we recognise as object-store locations (only s3/s3a are warmed)
SCHEMES = (
    "s3",
    "s3a",
    "s3n",
    "gs",
    "gcs",
    "oci",
    "az",
    "abfs",
    "abfss",
    "wasb",
    "wasbs",
    "hdfs",
    "hf",
    "minio",
)
URI_RE = re.compile(r"\b(?:" + "|".join(SCHEMES) + r")://[^\s'\"`,;)\]}]+")

WRITE_WORDS = frozenset(
    {
        "out",
        "output",
        "outputs",
        "outdir",
        "dest",
        "destination",
        "dst",
        "to",
        "target",
        "export",
        "upload",
        "save",
        "sink",
        "publish",
        "push",
        "write",
        "artifacts_out",
        "checkpoint_out",
    }
)
WRITE_STEP_VERBS = frozenset(
    {"upload", "publish", "export", "push", "save", "cleanup", "delete", "purge"}
)
COPY_TOOLS = {
    ("aws", "s3"): {"cp", "sync", "mv"},
    ("gsutil",): {"cp", "rsync", "mv"},
    ("s5cmd",): {"cp", "sync", "mv"},
    ("rclone",): {"copy", "sync", "move", "copyto", "moveto"},
    ("mc",): {"cp", "mirror", "mv"},
    ("gcloud", "storage"): {"cp", "rsync", "mv"},
}
DELETE_VERBS = frozenset({"rm", "rb", "delete", "purge", "deletefile"})


def find_uris(text: str) -> list[str]:
    return URI_RE.findall(text)


def is_uri(text: str) -> bool:
    m = URI_RE.match(text.strip())
    return bool(m) and m.end() == len(text.strip())


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def name_says_write(name: str | None) -> bool:
    """True when a flag, parameter or env name denotes an output location."""
    if not name:
        return False
    w = _words(name)
    return bool(w & WRITE_WORDS) or name.lower().startswith(("out", "dst", "dest"))


def step_says_write(step_name: str | None) -> bool:
    if not step_name:
        return False
    first = re.split(r"[^a-z0-9]+", step_name.lower(), maxsplit=1)[0]
    return first in WRITE_STEP_VERBS


def tokenize(argv: list[str]) -> list[str]:
    """Flatten argv, splitting shell strings (`sh -c "..."`) into words."""
    out: list[str] = []
    for a in argv:
        if any(c in a for c in " \n\t") and len(a) < 20000:
            try:
                out.extend(shlex.split(a, comments=True))
            except ValueError:
                out.extend(a.split())
        else:
            out.append(a)
    return out


def classify_tokens(tokens: list[str]) -> dict[int, str]:
    """Direction of each token that holds a location or path: index -> 'read' | 'write'.

    Paths (starting with '/') are classified too, so PVC mount paths named in
    args can be told apart (`aws s3 sync s3://x /data` writes /data).
    """
    out: dict[int, str] = {}
    i = 0
    n = len(tokens)
    while i < n:
        tool_end, verb = _copy_tool_at(tokens, i)
        if verb is not None:
            j = tool_end + 1
            positional: list[int] = []
            while j < n and tokens[j] not in ("&&", "||", ";", "|"):
                t = tokens[j]
                if t.startswith("-"):
                    j += 1
                    continue
                positional.append(j)
                j += 1
            locs = [k for k in positional if _is_location(tokens[k])]
            if verb in DELETE_VERBS:
                for k in locs:
                    out[k] = "write"
            elif locs:
                for k in locs[:-1]:
                    out[k] = "read"
                out[locs[-1]] = "write" if len(locs) > 1 else "read"
            i = j
            continue
        t = tokens[i]
        flag, val = _flag_value(tokens, i)
        if val is not None and _is_location(val):
            out[i if "=" in t else i + 1] = "write" if name_says_write(flag) else "read"
            i += 1 if "=" in t else 2
            continue
        if _is_location(t) and i not in out:
            out[i] = "read"
        i += 1
    return out


def _is_location(t: str) -> bool:
    return bool(URI_RE.search(t)) or t.startswith("/")


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
    base = tokens[i].rsplit("/", 1)[-1]
    for prefix, verbs in COPY_TOOLS.items():
        if base != prefix[0]:
            continue
        k = i + 1
        ok = True
        for p in prefix[1:]:
            if k < len(tokens) and tokens[k] == p:
                k += 1
            else:
                ok = False
                break
        if not ok or k >= len(tokens):
            continue
        # skip global options between tool and verb (e.g. aws --endpoint-url X s3 ...)
        verb = tokens[k]
        if verb in verbs or verb in DELETE_VERBS:
            return k, verb
    return i, None
