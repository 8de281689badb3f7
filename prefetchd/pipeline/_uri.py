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
  writes (not `--outliers`, `--uploads`: see ``_write_prefixed``), and so are
  logs, reports, results, job dirs and registries (`--logdir`, `--report`,
  `--job-dir`, `--registry`); `--from`, `--src`, `--source`, `--in`,
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

import configparser
import re
import tomllib
import urllib.parse
from collections.abc import Mapping
from typing import Any

import yaml

from prefetchd.pipeline import _shell
from prefetchd.pipeline._shard import BRACE_GROUP, BRACKET_GROUP

# schemes we recognise as object-store locations (only s3/s3a are warmed)
SCHEMES = (
    "s3", "s3a", "s3n", "gs", "gcs", "oci", "az", "abfs", "abfss", "wasb", "wasbs", "hdfs", "hf",
    "minio", "lakefs",
)
# (a location ends at an escaped newline or tab of the text it is in: a YAML string written
# into code as '\nkey: s3://b/x\nnext: 1\n')
_CH = r"(?:(?!\\[ntr])[^\s'\"`,;()\[\]{}<>|])"
URI_RE = re.compile(r"\b(?:" + "|".join(SCHEMES) + r")://(?:" + _CH + "|" + BRACE_GROUP + "|"
                    + BRACKET_GROUP + ")+")
# a location that holds a shell variable, braced too (s3://b/dicom/${sid}/, s3://b/$DAY/x),
# or a Katib trial's ${trialParameters.x}
_RUN_TIME_URI_RE = re.compile(r"\b(?:" + "|".join(SCHEMES) + r")://(?:\$\{[A-Za-z_][\w.]*\}|"
                              + _CH + ")+")
AZURE_RE = re.compile(
    r"\bhttps://[a-z0-9-]+\.(?:blob|dfs)\.core\.windows\.net/[^\s'\"`,;()\[\]{}<>|?]*"
)
# an object of AWS S3 by its HTTPS address: virtual-hosted (https://BUCKET.s3.REGION.
# amazonaws.com/KEY, also s3-REGION and dualstack) or path-style (https://s3.REGION.amazonaws.
# com/BUCKET/KEY); named as s3://BUCKET/KEY with its key URL-decoded, a query (a presigned
# URL's signature) left out: the object a cache holds (blind round 39: such reads were lost)
_S3_HOST = r"s3(?:[.-]dualstack)?(?:[.-][a-z0-9-]+)?\.amazonaws\.com(?:\.cn)?"
_S3_KEY = r"[^\s'\"`,;()\[\]{}<>|?#]*"
S3_HTTPS_RE = re.compile(
    r"\bhttps?://(?:([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])\." + _S3_HOST + r"/(" + _S3_KEY + r")"
    r"|" + _S3_HOST + r"/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(" + _S3_KEY + r"))?)")
# a path-style URL of an in-cluster S3 service named for what it is (MinIO, Ceph's RADOS
# gateway, SeaweedFS; `http://minio.mlops.svc:9000/BUCKET/KEY`, `http://rook-ceph-rgw-store:
# 80/BUCKET/KEY`, `https://s3.lab.internal/BUCKET/KEY`) when the step names no endpoint
# (blind round 46); MinIO's own paths (/minio/health/live) are no bucket
S3_SERVICE_RE = re.compile(
    r"\bhttps?://(?![^/\s]*\.amazonaws\.com)"  # (AWS's own: S3_HTTPS_RE)
    r"(?:[a-z0-9-]+-)?(?:minio|rgw|radosgw|seaweedfs|s3)(?:-[a-z0-9-]+)?"
    r"(?:\.[a-z0-9-]+)*(?::\d+)?/(?!minio/)([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(" + _S3_KEY
    + r")")
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
        "eventlog",  # Spark's spark.eventLog.dir: where the application writes its log
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
# listing or sizing a location reads no data, nor does signing a URL to it (`aws s3
# presign`: blind round 50): shown (unknown), never warmed
LIST_VERBS = frozenset({"ls", "lsd", "lsf", "lsl", "du", "stat", "size", "presign"})
_SEPARATORS = ("&&", "||", ";", "|")


_NEMO_BRACES = re.compile(r"_OP_(-?\d+\.\.-?\d+|[\w.-]+(?:,[\w.-]+)+)_CL_")
_SHELL_VAR = re.compile(r"\$[A-Za-z_{(0-9]")  # $DAY, ${DAY}, $(DAY), $0 inside a location
_QUERY = re.compile(r"\?[A-Za-z_][\w.-]*=.*\Z", re.DOTALL)
_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[-0-9.]*[sdif]")


# one word that is all a location whose key has blanks ("s3://speech/enrollment/Plant A/x.csv"
# as one argv element, a quoted shell word, a parameter's value): the whole word (blind round
# 64 cut such keys at the blank)
_BLANK_KEY_URI = re.compile(r"(?:s3|s3a|s3n)://[a-z0-9][a-z0-9.\-]*/(?:" + _CH + r")+"
                            r"(?: (?:" + _CH + r")+)+")


def blank_key_uri(word: str) -> bool:
    """Whether *word* is one location whose key holds single blanks (``_BLANK_KEY_URI``),
    not two locations or a location and more words (``s3://b/x --recursive``, a message's
    ``s3://b/data loaded``): what follows its last blank goes on as a key does, into a
    folder or to a file's suffix (``A/roster.csv``, ``v200.json``)."""
    return bool(_BLANK_KEY_URI.fullmatch(word)) and word.count("://") == 1 \
        and " -" not in word and "$" not in word \
        and bool(re.search(r"/|\.[A-Za-z0-9]{1,8}$", word.rsplit(" ", 1)[1]))


_GDAL_S3 = re.compile(r"(?<![\w/])/vsis3(?:_streaming)?/([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
                      r"(?:/[^\s'\"(),;|&<>]*)?)")


def find_uris(text: str) -> list[str]:
    """Every location in `text`, in order (rclone `:s3:` remotes as s3:// URIs)."""
    if "://" not in text and ":s3" not in text and "/vsis3" not in text:
        return []
    if blank_key_uri(text):
        return [text.replace("s3n://", "s3://", 1)]
    found: list[tuple[int, str]] = []
    for m in URI_RE.finditer(text):
        if text[m.end() : m.end() + 1] == "{":
            continue  # a format template, not a location
        if text[m.end() : m.end() + 1] == "`" and text.count("`", 0, m.start()) % 2 == 0:
            continue  # s3://b/daily/`date +%F`/: a command's output, a part the run makes
        if _holds_variable(text, m, m.group(0).split("://", 1)[1]):
            continue  # a shell or Kubernetes variable ($BUCKET, $DAY, $(DATA)): run time
        if _PERCENT_FIELD.search(m.group(0)):
            continue  # a %-format template ("s3://b/%s/x.parquet" % day)
        # s3://b/x.parquet?endpoint_override=minio:9000&scheme=http (arrow, fsspec): the
        # options name no part of the object; NeMo writes a brace range _OP_0..511_CL_
        # (Hydra takes braces for its own): the shards it names
        uri = _NEMO_BRACES.sub(r"{\1}", _QUERY.sub("", m.group(0)))
        # (s3n://: Hadoop's older S3 connector's spelling of the same object; blind round 64)
        found.append((m.start(), "s3://" + uri[6:] if uri.startswith("s3n://") else uri))
    found += [(m.start(), m.group(0)) for m in AZURE_RE.finditer(text)]
    # GDAL's virtual file system: /vsis3/BUCKET/KEY is that S3 object (gdal_translate,
    # rasterio.open, ogr2ogr take it; blind round 70 read nothing)
    found += [(m.start(), "s3://" + m.group(1)) for m in _GDAL_S3.finditer(text)]
    # (a bucket's address alone is an endpoint a program joins keys to, as S3_SERVICE_RE's:
    # urljoin("https://b.s3.us-east-1.amazonaws.com/", key) warmed the bucket, blind round 64)
    found += [(m.start(), u) for m in S3_HTTPS_RE.finditer(text)
              if "s3-website" not in m.group(0) and not _cut_at_bracket(text, m)
              and (u := s3_https(m)) is not None and u.split("/", 3)[3]]
    found += [(m.start(), u) for m in S3_SERVICE_RE.finditer(text)
              if m.group(2) and not _cut_at_bracket(text, m)
              and (u := s3_https(m, 1)) is not None]
    found += [(m.start(), "s3://" + m.group(1)) for m in RCLONE_S3_RE.finditer(text)
              if not _holds_variable(text, m, m.group(1))]  # (blind job round 44)
    return [u for _, u in sorted(found)]


def _holds_variable(text: str, m: re.Match[str], path: str) -> bool:
    """Whether location match *m* (*path*: its bucket and key) holds a shell or Kubernetes
    variable, so only the run knows it: ``$DAY``, ``${DAY}`` or ``$(DAY)`` in it, a ``$`` in
    its bucket, or a match cut at a ``$(`` or ``${``."""
    return bool(_SHELL_VAR.search(m.group(0))) or "$" in path.split("/", 1)[0] or (
        m.group(0).endswith("$") and text[m.end():m.end() + 1] in ("(", "{"))


def _cut_at_bracket(text: str, m: re.Match[str]) -> bool:
    """Whether a URL match stops at a bracket (``val%20subset%20(5k)/x.tar``): its key goes
    on past it, so what was matched is no location of its own."""
    return text[m.end():m.end() + 1] in ("(", "[", "<")


def location_under(uri: str, folder: str) -> bool:
    """*uri* is *folder* or lies in it (``s3://b/run/`` holds ``s3://b/run/ckpt/``)."""
    a, b = uri.replace("s3a://", "s3://", 1), folder.replace("s3a://", "s3://", 1)
    return a.rstrip("/") == b.rstrip("/") or a.startswith(b.rstrip("/") + "/")


def s3_https(m: re.Match[str], bucket_group: int = 0) -> str | None:
    """``s3://BUCKET/KEY`` of an S3_HTTPS_RE match (or another's whose bucket and key are
    groups *bucket_group* and the next; the key URL-decoded, a blank in it kept: the URL
    is one word, so the object is named whole, blind round 46); None for a key that
    decodes to control characters."""
    if bucket_group:
        bucket, key = m.group(bucket_group), m.group(bucket_group + 1)
    else:
        bucket, key = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4) or "")
    key = urllib.parse.unquote(key)
    return None if re.search(r"[\x00-\x1f]", key) else f"s3://{bucket}/{key}"


def run_time_locations(text: str) -> list[str]:
    """The locations in *text* that hold a shell variable (``s3://ct/dicom/${sid}/``, a
    ``while read`` loop's; ``s3://b/ckpt/$LATEST``), which ``find_uris`` leaves out: their
    place is known, the run fills in the rest."""
    if "://" not in text or "$" not in text:
        return []
    return [m.group(0) for m in _RUN_TIME_URI_RE.finditer(text)
            if _SHELL_VAR.search(m.group(0)) and text[m.end():m.end() + 1] not in ("{", "(")]


MAX_DOCUMENT_CHARS = 256 * 1024  # a config or heredoc read for its keys; larger: not read
MAX_DOCUMENT_STRINGS = 4096


_INI_SECTION = re.compile(r"^\s*\[[^\]\n]+\]\s*$", re.MULTILINE)


def _toml_or_ini(text: str) -> dict[str, Any] | None:
    """*text* as a TOML document, else as an INI file (``[section]`` then ``key = value``),
    when it is one: their keys direct their locations as a YAML config's do (blind job round
    59: a TOML or INI config was read as plain text, its output_dir warmed). None for
    anything else (YAML, JSON, a list of files)."""
    if "=" not in text:
        return None
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError):
        doc = None
    if doc:
        return doc
    if not _INI_SECTION.search(text):
        return None
    ini = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        ini.read_string(text)
    except configparser.Error:
        return None
    return {name: {k: v.strip().strip("\"'") for k, v in ini[name].items()}
            for name in ini.sections()} or None


def document_strings(text: str) -> list[tuple[str, str]] | None:
    """(dotted key, value) of each string in *text* read as a YAML or JSON document (a
    list's items under its key; a top-level list's under ""), at most MAX_DOCUMENT_STRINGS,
    20 levels deep; None when *text* is no mapping or list, or too long. A mounted config
    (k8s.datasets) and a heredoc a script writes (`_shell`) are read through this."""
    if len(text) > MAX_DOCUMENT_CHARS:
        return None
    # a pipeline's placeholder as a plain value (`max_epochs: {{workflow.parameters.n}}`)
    # is YAML's flow mapping, and a word the caller holds aside (`@@...@@`) starts with a
    # reserved indicator: read each as a word of its own, and put it back after
    held: list[str] = []

    def hold(m: re.Match[str]) -> str:
        held.append(m.group(0))
        return f"fcheld{len(held) - 1}x"

    doc = _toml_or_ini(text)
    if doc is None:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            try:
                doc = yaml.safe_load(_PLACEHOLDER.sub(hold, text)) if (
                    "{{" in text or "@@" in text) else None
            except yaml.YAMLError:
                return None
    if not isinstance(doc, (dict, list)):
        return None
    pairs: list[tuple[str, str]] = []

    def walk(node: Any, key: str, depth: int = 0) -> None:
        if depth > 20 or len(pairs) >= MAX_DOCUMENT_STRINGS:
            return
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k), depth + 1)
        elif isinstance(node, list):
            for v in node:
                walk(v, key, depth + 1)
        elif isinstance(node, str):
            pairs.append((key, _HELD.sub(lambda m: held[int(m.group(1))], node)
                          if held else node))

    walk(doc, "")
    return pairs


_PLACEHOLDER = re.compile(r"\{\{[^{}]*\}\}|@@[^@\s]*@@")
_HELD = re.compile(r"fcheld(\d+)x")


def is_uri(text: str) -> bool:
    t = text.strip()
    return len(find_uris(t)) == 1 and (URI_RE.fullmatch(t) is not None or
                                       AZURE_RE.fullmatch(t) is not None or
                                       S3_HTTPS_RE.fullmatch(t.split("?", 1)[0]) is not None or
                                       S3_SERVICE_RE.fullmatch(t.split("?", 1)[0]) is not None or
                                       RCLONE_S3_RE.fullmatch(t) is not None)


def name_words(name: str) -> set[str]:
    """The lower-case words of a name (``MODEL_URI``, ``--out-dir``, ``sft.train_path``)."""
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def name_direction(name: str | None) -> str | None:
    """What a flag, parameter or env name says: 'write', 'read', 'unknown' or None."""
    if not name:
        return None
    if name.lstrip("-") in ("o", "O"):  # -o/-O: the output of GATK, samtools, curl, wget, sort
        return "write"
    n = name.lower().lstrip("-")
    w = name_words(n)
    if "dst" in w and w - {"dst"} and not w & (_PLACE_WORDS | WRITE_WORDS - {"dst"}):
        w = w - {"dst"}  # --dst-calendar: daylight saving time, not a destination
        n = "-".join(sorted(w))
    if "registry" in w and w - _REGISTRY_WORDS - _PLACE_WORDS and not w & (WRITE_WORDS
                                                                          - {"registry"}):
        # a registry of something else is a table it looks things up in: vendor_registry_uri
        # (blind round 65), not the model registry a step registers to
        w = w - {"registry"}
        n = "-".join(sorted(w))
    if w & _OWN_STORE_WORDS:
        # a framework's own store (Metaflow's --datastore-root, METAFLOW_DATASTORE_SYSROOT_S3,
        # METAFLOW_CODE_URL): its runs read and write their artifacts and code there, as a
        # pipeline root; never a dataset to warm whole (blind round 70: the whole Metaflow
        # datastore was warmed for every step)
        return "unknown"
    if w & WRITE_WORDS or _write_prefixed(n) or {"log", "dir"} <= w or \
            {"logging", "dir"} <= w or {"default", "root"} <= w:
        # TensorBoard's (HF's --logging_dir); Lightning's default_root_dir (logs, checkpoints)
        return "write"
    if _number_weights(w):
        return None  # --class-weights 0.4,1.0: numbers, no location (blind round 61)
    if w & RESUME_WORDS or w & READ_WORDS or n.startswith(READ_PREFIXES) or \
            "name_or_path" in n.replace("-", "_") or n.replace("-", "_") == "ckpt_path":
        # Hugging Face's model to load; Lightning's ckpt_path (fit/test resume from it)
        return "read"
    if w & AMBIGUOUS_WORDS or n.startswith(("checkpoint", "ckpt")) or {"model", "dir"} <= w \
            or {"work", "dir"} <= w or {"storage", "path"} <= w:
        # (Ray Train's storage_path: where a run keeps its results and checkpoints)
        return "unknown"
    return None


_OWN_STORE_WORDS = frozenset({"datastore", "sysroot", "s3root", "metaflow"})
_PLACE_WORDS = frozenset({"path", "dir", "uri", "url", "root", "prefix", "location", "file",
                          "files", "bucket", "folder"})
_REGISTRY_WORDS = frozenset({"registry", "model", "models", "mlflow", "artifact", "artifacts"})


def _write_prefixed(name: str) -> bool:
    """A name starting with a verb of rule 2 (``--outdir``, ``--upload-to``, ``--save_path``),
    but not a noun that only begins like one: ``--uploads`` / ``--uploaded`` (what was
    uploaded: an input), ``--saved-model`` (a SavedModel: blind round 63), ``--outliers``,
    ``--outcomes`` (``out`` counts alone, as ``output...`` or before a place: ``outdir``,
    ``outpath``)."""
    if not name.startswith(WRITE_PREFIXES):
        return False
    first = re.split(r"[^a-z0-9]+", name, maxsplit=1)[0]
    if first.startswith("upload"):
        return first[len("upload"):] not in ("s", "ed")
    if first == "saved":  # --saved-model: a SavedModel, as often read (tf2onnx) as written
        return False
    if first.startswith("out"):
        rest = first[3:]
        return not rest or rest.startswith("put") or rest in _PLACE_WORDS
    return True


# weights that are numbers, not a model's (`--class-weights 0.4,1.0,2.3`: blind round 61)
_NUMBER_WEIGHTS = frozenset({"class", "classes", "sample", "samples", "loss", "label", "labels",
                             "pos", "instance", "task", "tasks"})


def names_place(flag: str) -> bool:
    """A flag naming where data is (`--model_load_path`, `--data-dir`), not what it is
    (`--src-lang`), or one to load from (`--resume`, `--init-from`)."""
    w = name_words(flag.lower().lstrip("-"))
    if _number_weights(w):
        return False
    return bool(w & _PLACE_WORDS or w & RESUME_WORDS)


def _number_weights(words: set[str]) -> bool:
    """A name of weights that are numbers (``class_weights``, ``--sample-weights``), not a
    model's, and no place (``--class-weights-path`` is one)."""
    return "weights" in words and bool(words & _NUMBER_WEIGHTS) and not words & _PLACE_WORDS


def names_model(flag: str) -> bool:
    """`--model`, `--models`, `--model-path`: a flag naming a model and nothing else."""
    w = name_words(flag.lower().lstrip("-"))
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
    return _as_s3(argv, remotes, r"(?<![\w/.:-])", ":", re.IGNORECASE)


def _as_s3(argv: list[str], heads: list[str], guard: str, sep: str,
           flags: int = 0) -> list[str]:
    """*argv* with each of the texts *heads* (not after what *guard* rules out), then
    *sep*, then a bucket's first letter, written ``s3://``: the way a remote, an alias or an
    endpoint names ``bucket/key``."""
    if not heads:
        return argv
    pat = re.compile(guard + "(?:" + "|".join(map(re.escape, heads)) + ")" + re.escape(sep)
                     + r"(?=[a-z0-9]|\{\{|\$)", flags)
    return [pat.sub("s3://", a) for a in argv]


# MinIO client aliases: MC_HOST_<alias>=https://key:secret@host in the env, or set by the
# script itself (`mc alias set lake URL ...`, the older `mc config host add lake URL ...`)
_MC_HOST = re.compile(r"MC_HOST_([A-Za-z0-9_-]+)")
_MC_ALIAS_SET = re.compile(r"\bmc\s+(?:--?[\w-]+\s+)*(?:alias\s+set|config\s+host\s+add)"
                           r"\s+([A-Za-z0-9_-]+)\s+(\S*)")
_SHELL_VAR_ALONE = re.compile(r"""["']?\$\{?([A-Za-z_]\w*)\}?["']?""")
_MC_COMMAND = re.compile(r"(?:^|[\s;&|(/])mc\s+(?:--?[\w-]+(?:=\S+)?\s+)*"
                         r"(?:cp|mirror|mv|cat|head|ls|find|du|stat|sql|diff)\b")


def mc_aliases(env: dict[str, str], argv: list[str]) -> list[str]:
    """The MinIO client aliases a step defines (env or script), when it runs ``mc``
    (``mc cp lake/bkt/x /tmp`` names ``s3://bkt/x``; MinIO and Ceph serve S3)."""
    text = "\n".join(argv)
    if not (argv and argv[0].rsplit("/", 1)[-1] == "mc") and not _MC_COMMAND.search(text):
        return []
    found = [m.group(1) for name in env if (m := _MC_HOST.fullmatch(name))]
    for alias, url in _MC_ALIAS_SET.findall(text):
        var = _SHELL_VAR_ALONE.fullmatch(url)
        if var and var.group(1) not in env and not re.search(
                r"(?<![\w$])" + var.group(1) + "=", text):
            # a host the step has no value for (a Secret's, blind round 69): another
            # object store, whose bucket names say nothing of S3's
            continue
        found.append(alias)
    return list(dict.fromkeys(found))


def with_mc_aliases(argv: list[str], aliases: list[str]) -> list[str]:
    """*argv* with ``alias/bucket/key`` of those aliases written ``s3://bucket/key``."""
    return _as_s3(argv, aliases, r"(?<![\w/.:$@-])", "/")


# the env vars that name a step's S3 endpoint (MinIO, Ceph RGW): a path-style URL under it,
# or under the variable itself (`curl "$S3_ENDPOINT/bkt/key"`), names s3://bkt/key
S3_ENDPOINT_VARS = frozenset({"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_S3_ENDPOINT",
                              "S3_ENDPOINT", "S3_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL",
                              "MINIO_ENDPOINT", "MINIO_URL"})
_ENDPOINT = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d+)?/?")


def s3_endpoints(env: dict[str, str]) -> list[tuple[str, str]]:
    """(env var, endpoint URL without its slash) of the S3 endpoints *env* sets."""
    return [(name, value.rstrip("/")) for name, value in env.items()
            if name in S3_ENDPOINT_VARS and isinstance(value, str)
            and _ENDPOINT.fullmatch(value.strip())]


def with_s3_endpoints(argv: list[str], endpoints: list[tuple[str, str]]) -> list[str]:
    """*argv* with ``http://minio:9000/bucket/key`` (and ``$S3_ENDPOINT/bucket/key``) of
    those endpoints written ``s3://bucket/key``, as a path-style S3 request names it."""
    heads = [url for _, url in endpoints]
    for name, _ in endpoints:
        heads += [f"${name}", f"${{{name}}}", f"$({name})"]
    return _as_s3(argv, heads, "", "/")


_KUBE_VAR = re.compile(r"\$(\$)?\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
# a container's $(VAR) reference, not the escaped $$(VAR): the name (the pipeline's pod-only
# vars, _scan; a training job's vars no env entry sets, workloads/_podspec)
KUBE_REF = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


_REFERENCE = re.compile(r"\$[({]?([A-Za-z_][A-Za-z0-9_]*)")
ROOT_WORDS = {"ROOT", "BASE", "PREFIX", "BUCKET"}
_BARE_BUCKET = re.compile(r"s3a?://[a-z0-9][a-z0-9.\-]*/?")


# a Katib trial's value (its candidates are warmed each, _katib.with_candidates): no value
# only the pod knows
_TRIAL_VALUE = re.compile(r"\$\{trialParameters\.[\w.]+\}")


# a shell variable a script sets itself (``X=``, ``export X=``, ``for X in``, ``read X``): the
# groups (assigned, looped over, read in)
SHELL_SETS = re.compile(r"(?:^|[\s;&|(])(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)*)?"
                        r"([A-Za-z_][A-Za-z0-9_]*)=|\bfor\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b"
                        r"|\bread\s+(?:-\w+\s+)*([A-Za-z_][A-Za-z0-9_]*)")


def env_references(texts: list[str]) -> set[str]:
    """The env var names *texts* build on together with another value
    (``$(SHARD_PREFIX)part-$(JOB_COMPLETION_INDEX).tar``: SHARD_PREFIX and the index), a
    word at a time; a name used alone (``"${OUT_URI}"``) is not one."""
    out: set[str] = set()
    for word in (w for t in texts for w in re.split(r"[\s\"'=]+", t.replace("$$", ""))):
        refs = _REFERENCE.findall(word)
        if len(refs) > 1:
            out.update(refs)
    return out


# a program that may read its env vars itself (os.environ["TRAIN"]), not a tool given words
_PROGRAM = re.compile(r"\b(?:python[\d.]*|torchrun|accelerate|deepspeed|java|Rscript|node|"
                      r"spark-submit|julia|ruby|perl|\./[\w.-]+|bash\s+[\w./-]+\.sh|"
                      r"sh\s+[\w./-]+\.sh)\b|import\s+os|environ|getenv")


def spelled_out_env(container: Mapping[str, Any], built_on: bool = False) -> set[str]:
    """The env vars named as a root (``DATA_ROOT``, ``S3_BASE``, ``OUT_PREFIX``,
    ``MODEL_BUCKET``), or holding a bare bucket, that the command line or another var
    spells out in full words (``$(DATA_ROOT)/sft/train.jsonl``,
    ``${DATA_ROOT}/x`` in a script): such a value is read where it is spelled out, as far as
    the words there say (a file under it, not the whole folder), so it is no read of its
    own. A var whose words also hold a value only the pod knows
    (``$(SHARD_PREFIX)part-${IDX}.tar``) stays one: its value is what can be warmed; so does
    one named for what it holds (``TRAIN``, ``DATA_DIR``), which the program may read whole.
    A value the script sets itself (``DS=$(date +%F)`` then ``${LOGS}/dt=${DS}/``) is one
    the run picks, not every pod's in turn: the word is a run-time read and the root no
    read of its own (blind job round 53 warmed, through ``--export
    "${MODEL_ROOT}/daily/${DS}/"``, the folder the job writes).
    Pod containers (``k8s.datasets``) and pipeline steps (``_scan.env_expansion``) alike;
    with *built_on*, only where more is built on it (``"$BASE_MODEL"`` alone is the
    var's own read, by its origin, as a pipeline's truth names it)."""
    env = container.get("env") or []
    texts = [str(a) for a in [*(container.get("command") or []),
                              *(container.get("args") or [])]]
    # a root by its name, or by its value: a bare bucket (MODEL_STORE=s3://telco-models);
    # any location when the container runs no program that could read its env itself,
    # only tools (`aws s3 cp "${FLEET_REF}/meta/x.parquet"`: that file, blind round 48)
    tools_only = not _PROGRAM.search("\n".join(texts))
    names = {str(e.get("name")) for e in env if isinstance(e, Mapping)
             if ROOT_WORDS & set(str(e.get("name")).upper().split("_"))
             or _BARE_BUCKET.fullmatch(str(e.get("value") or ""))
             or tools_only and find_uris(str(e.get("value") or ""))}
    texts += [str(e.get("value") or "") for e in env if isinstance(e, Mapping)]
    # vars given literally are known too: ${DATA_ROOT}/forecast/${CITY}/x with CITY=berlin
    literal = {str(e.get("name")) for e in env if isinstance(e, Mapping)
               and isinstance(e.get("value"), str) and "$" not in e["value"]}
    # (one value each, not a loop's: ``for i in 0 1 2`` over part-${i}.tar reads them all)
    picked = {a or r for t in texts for a, _loop, r in SHELL_SETS.findall(t)} - names - {""}
    out: set[str] = set()
    kept: set[str] = set()
    for word in (w for t in texts for w in re.split(r"[\s\"'=]+", t.replace("$$", ""))):
        named = {n for n in _REFERENCE.findall(word) if n in names}
        if named:
            rest = _REFERENCE.sub(lambda m: "" if m.group(1) in names | literal | picked
                                  else m.group(0), _TRIAL_VALUE.sub("", word))
            if built_on and not rest.strip("{}()"):
                continue
            (kept if "$" in rest else out).update(named)
    return out - kept


def kube_env(env: object) -> dict[str, str]:
    """A container's env vars given literally (``value``), each expanded as the kubelet
    does: ``$(NAME)`` of a var defined above it replaced (``TRAIN=s3://$(BUCKET)/train``)."""
    values: dict[str, str] = {}
    for e in env if isinstance(env, list) else []:
        if isinstance(e, dict) and isinstance(e.get("name"), str) \
                and isinstance(e.get("value"), str):
            values[e["name"]] = _expand(e["value"], values)
    return values


def shell_env(env: object, known: dict[str, str] | None = None) -> dict[str, str]:
    """The env a container's script sees, as far as it is known before the run: the
    literal values (*known*, else ``kube_env``), and a var set from elsewhere (``valueFrom``:
    the pod's labels, a Secret) as itself, so ``${JOB_NAME:-manual}`` stays the pod's value,
    not the default."""
    out = {str(e["name"]): "${" + str(e["name"]) + "}" for e in env if isinstance(e, dict)
           and isinstance(e.get("name"), str) and e.get("valueFrom") is not None} \
        if isinstance(env, list) else {}
    out.update(kube_env(env) if known is None else known)
    return out


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
    for a in _shell.shell_args(argv):
        if any(c in a for c in " \n\t") and len(a) < 20000 and not blank_key_uri(a):
            out.extend(_inner_scripts(_shell.script_words(a, env), env))
        else:
            out.append(a)
    return _without_payloads(_s3api(out))


def _inner_scripts(words: list[str], env: dict[str, str] | None, depth: int = 0) -> list[str]:
    """A script's ``bash -c '...'`` (a RayJob's entrypoint, a wrapper's line): the inner
    script's words in place of its one word, as the inner shell runs them."""
    if depth > 2:
        return words
    out: list[str] = []
    for i, w in enumerate(words):
        if i >= 2 and _shell.runs_script(words, i - 2) and any(c in w for c in " \n\t") \
                and len(w) < 20000:
            out.extend(_inner_scripts(_shell.script_words(w, env), env, depth + 1))
        else:
            out.append(w)
    return out


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
            end = _shell.command_end(words, i)
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
    ... ``PY``); `_shell.script_words` leaves their lines out, the callers read them as Python."""
    return [m.group(2) for m in _PY_HEREDOC.finditer(script)] if "<<" in script else []


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
    tokens: list[str], flag_dirs: dict[str, str] | None = None, lists: bool = False
) -> dict[int, str | None]:
    """Direction of each token that holds a location or an absolute path.

    Index -> 'read' | 'write' | 'unknown' | None (nothing in the command line
    says; the caller decides); with *lists*, 'list' for a location a listing
    verb (`ls`, `du`, `stat`) only lists (else 'unknown').
    `flag_dirs` maps option names (`-`/`_` alike)
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
                    out[k] = "list" if lists else "unknown"
            else:
                for k in locs:
                    out[k] = "write" if len(operands) > 1 and k == operands[-1] else "read"
            i = j
            continue
        t = tokens[i]
        flag, val = flag_value(tokens, i)
        if val is not None and _is_location(val):
            d = fd.get(flag.replace("-", "_")) if flag else None
            key = override_key(val)  # --conf spark.eventLog.dir=s3a://...: by its key too
            out[i if "=" in t else i + 1] = d or name_direction(flag) or (
                key_direction(key) if key else None)
            i += 1 if "=" in t else 2
            continue
        key = override_key(t)
        if key is not None and i not in out and _is_location(t.split("=", 1)[1]):
            # an override or a make variable (trainer.output_dir=s3://..., OUT=s3://...):
            # by its key, as a flag by its name
            out[i] = key_direction(key)
            i += 1
            continue
        if _is_location(t) and i not in out:
            out[i] = None
        i += 1
    _program_in_out(tokens, out)
    _http_transfers(tokens, out)
    _calls(tokens, out)
    return out


# the call a location is an argument of, in code of a language not analysed as such (R, SQL
# functions, JavaScript): a writer's (`write.csv(df, 's3://b/x')`, `arrow::write_parquet`,
# `aws.s3::s3write_using`, `saveRDS`, `fwrite`) is written; a message's (`console.log`,
# `message`, `cat`) is no location used at all
_WRITER_CALL = re.compile(r"(?:s3)?(?:write|save|upload|export|put|fwrite)", re.IGNORECASE)
_MESSAGE_CALLS = frozenset({"log", "info", "debug", "warn", "warning", "error", "print",
                            "println", "message", "cat"})
_CALL_NAME = re.compile(r"([A-Za-z_][\w.:$]*)\Z")


def _calls(tokens: list[str], out: dict[int, str | None]) -> None:
    """Locations the command line says nothing of, by the call they are passed to."""
    for i in [i for i, d in out.items() if d is None]:
        name = _enclosing_call(tokens, i)
        if name is None:
            continue
        parts = _name_parts(name)
        if not parts:
            continue
        if parts[-1].lower() in _MESSAGE_CALLS:
            del out[i]
        elif _writes(parts):
            out[i] = "write"


def _name_parts(name: str) -> list[str]:
    """A call's name in its parts: ``aws.s3::s3write_using`` -> aws, s3, s3write_using."""
    return [x for x in re.split(r"::|[.$]", name) if x]


def _writes(parts: list[str]) -> bool:
    """Whether a call of that name writes what it is given (``write.csv``, ``saveRDS``)."""
    return any(_WRITER_CALL.match(x) for x in parts)


def _enclosing_call(tokens: list[str], i: int) -> str | None:
    """The name of the call whose parentheses hold the location at *tokens[i]*
    (``write.csv(df,`` ``s3://b/x)``), looking back through its command; None outside one."""
    depth = 0
    head = tokens[i].split("://", 1)[0]
    for j in range(i, max(-1, i - 16), -1):
        t = head if j == i else tokens[j]
        if j != i and t in _SEPARATORS:
            return None
        for k in range(len(t) - 1, -1, -1):
            if t[k] == ")":
                depth += 1
            elif t[k] == "(":
                if depth == 0:
                    m = _CALL_NAME.search(t[:k])
                    return m.group(1) if m else None
                depth -= 1
    return None


# An object named by bucket and key in SDK calls of other languages: the AWS SDK for
# JavaScript (v3 `new GetObjectCommand({Bucket: "b", Key: "k"})`, v2 `s3.getObject({...})`),
# R's aws.s3 (`s3read_using(read.csv, object = "k", bucket = "b")`) and arrow
# (`b <- arrow::s3_bucket("b")` ... `b$path("k")`)
_JS_OBJECT_CALL = re.compile(
    r"\b(?:(Get|Put)ObjectCommand\s*\(|\.(getObject|putObject|upload)\s*\()\s*"
    r"\{((?:[^{}\"'`]|\"[^\"]*\"|'[^']*'|`[^`]*`|\{\{[^{}]*\}\})*)\}")  # (quotes, {{...}})
_JS_FIELD = r"\b{}\s*:\s*([\"'`])([^\"'`$]+)\1"
_R_OBJECT_CALL = re.compile(
    r"\b(s3read_using|s3readRDS|s3load|get_object|save_object|s3write_using|s3saveRDS|"
    r"s3save|put_object)\s*\(")
_R_ARG = r"\b{}\s*=\s*([\"'])([^\"']+)\1"
_R_BUCKET_OBJ = re.compile(r"\b([A-Za-z_][\w.]*)\s*(?:<-|=)\s*(?:arrow::)?s3_bucket\s*\(\s*"
                           r"([\"'])([a-z0-9][a-z0-9.-]+)\2")


def sdk_objects(text: str) -> list[tuple[str, str]]:
    """(``s3://BUCKET/KEY``, "read" or "write") of each object *text* names by bucket and
    key in a JavaScript or R SDK call (literal names only)."""
    if "bucket" not in text.lower():
        return []
    out: list[tuple[str, str]] = []
    for m in _JS_OBJECT_CALL.finditer(text):
        fields = m.group(3)
        b = re.search(_JS_FIELD.format("Bucket"), fields)
        k = re.search(_JS_FIELD.format("Key"), fields)
        if b and k:
            verb = (m.group(1) or m.group(2) or "").lower()
            out.append((f"s3://{b.group(2)}/{k.group(2)}",
                        "read" if verb in ("get", "getobject") else "write"))
    for m in _R_OBJECT_CALL.finditer(text):
        args = _call_args(text, m.end())
        b = re.search(_R_ARG.format("bucket"), args)
        o = re.search(_R_ARG.format("object"), args)
        if b and o and "://" not in o.group(2):
            write = m.group(1) in ("s3write_using", "s3saveRDS", "s3save", "put_object")
            out.append((f"s3://{b.group(2)}/{o.group(2).lstrip('/')}",
                        "write" if write else "read"))
    for m in _R_BUCKET_OBJ.finditer(text):
        var, bucket = m.group(1), m.group(3)
        for p in re.finditer(re.escape(var) + r"\$path\s*\(\s*([\"'])([^\"']+)\1", text):
            write = _writes(_name_parts(_enclosing_call([text[: p.start()]], 0) or ""))
            out.append((f"s3://{bucket}/{p.group(2).lstrip('/')}", "write" if write else "read"))
    return out


def _call_args(text: str, start: int) -> str:
    """The text of a call's arguments from *start* (just after its ``(``) to its ``)``."""
    depth = 0
    for i in range(start, min(len(text), start + 2000)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            if depth == 0:
                return text[start:i]
            depth -= 1
    return text[start:start + 2000]


# curl and wget options that send data to the URL (an upload, a PUT or POST), not fetch it
_METHODS = ("PUT", "POST", "PATCH", "DELETE")
_METHOD_FLAG = r"(-X|--request|--method)=?"
_SENDS = re.compile(r"-T|--upload-file(=.*)?|-d|--data(-[a-z]+)?(=.*)?|-F|--form(=.*)?|"
                    r"--post-(file|data)(=.*)?|--body-(file|data)(=.*)?|"
                    + _METHOD_FLAG + "(" + "|".join(_METHODS) + ")")


def _http_transfers(tokens: list[str], out: dict[int, str | None]) -> None:
    """``curl``/``wget`` of an S3 object by its HTTP(S) address: fetched (read) unless the
    command sends data to it (``-T``, ``--upload-file``, ``-X PUT``, ``--post-file``: a
    write)."""
    for seg in command_spans(tokens):
        # (after `sh -c`, `timeout 60`: where the tool's words start)
        tool = next((k for k in seg if tokens[k].rsplit("/", 1)[-1] in ("curl", "wget")),
                    None)
        if tool is None:
            continue
        words = range(tool, seg.stop)
        sends = any(_SENDS.fullmatch(tokens[k]) or re.fullmatch(_METHOD_FLAG, tokens[k])
                    and k + 1 < len(tokens) and tokens[k + 1] in _METHODS for k in words)
        for k in words:
            if out.get(k, "x") is None and (S3_HTTPS_RE.search(tokens[k]) or
                                            S3_SERVICE_RE.search(tokens[k])):
                out[k] = "write" if sends else "read"


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
    else the whole (``checkpoint.dirpath``: unknown). A catalog's warehouse
    (``spark.sql.catalog.iot.warehouse``, ``spark.sql.warehouse.dir``,
    ``hive.metastore.warehouse.dir``) is where every table of it lives, read and written by
    name: unknown, never the whole of it warmed (blind round 60)."""
    parts = key.lower().split(".")
    if "warehouse" in parts[-2:]:
        return "unknown"
    return name_direction(key.rsplit(".", 1)[-1]) or name_direction(key)


def _program_in_out(tokens: list[str], out: dict[int, str | None]) -> None:
    """`prog SRC DST`: in a command with two or more bare URI operands, the last could be
    the output (`convert.py s3://in s3://out`): unknown rather than a guessed read."""
    for seg in command_spans(tokens):
        bare = [i for i in seg if i in out and out[i] is None
                and (URI_RE.search(tokens[i]) or _GDAL_S3.search(tokens[i]))
                and not tokens[i].startswith("-") and override_key(tokens[i]) is None and (
                    # --x=s3://...: a flag's value; an override (data.root=s3://...) goes
                    # by its key, whatever the key says
                    i == 0 or not tokens[i - 1].startswith("-") or "=" in tokens[i - 1])]
        if len(bare) >= 2 and any(tokens[k].rsplit("/", 1)[-1] == "ogr2ogr" for k in seg):
            out[bare[0]] = "write"  # ogr2ogr DST SRC: GDAL's vector tool names its output first
        elif len(bare) >= 2:
            out[bare[-1]] = "unknown"


def command_spans(tokens: list[str]) -> list[range]:
    """The index ranges of the commands in *tokens*, between their separators."""
    spans, start = [], 0
    for i, t in enumerate([*tokens, ";"]):
        if t in _SEPARATORS:
            spans.append(range(start, i))
            start = i + 1
    return spans


def flag_value(tokens: list[str], i: int) -> tuple[str | None, str | None]:
    """(flag without its dashes, value) of ``--flag=VALUE`` or ``--flag VALUE`` at *i*;
    (None, None) when tokens[i] is no flag with a value."""
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
