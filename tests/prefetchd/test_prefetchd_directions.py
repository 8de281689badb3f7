"""Read, write or unknown, per rule, on small workflows; shard patterns and loop bounds.

Each case is one Argo container whose command line follows one convention of
docs/prefetchd.md ("Reads, writes and unknown"); the analysis must put every
location on the right side. The corpus tests cover the same rules inside whole
pipelines; these pin each rule down on its own so a regression names it.
"""

from __future__ import annotations

import time

import pytest

from prefetchd import pipeline
from prefetchd.pipeline import _code, _pieces, _shard


def _plan(args: list[str], *, env: list[dict] | None = None, name: str = "step",
          loop: dict | None = None, source: str | None = None) -> pipeline.Step:
    body: dict = {"image": "x", "command": args[:1], "args": args[1:]}
    if env:
        body["env"] = env
    tmpl: dict = {"name": "t", "container": body, "inputs": {"parameters": [{"name": "x"}]}}
    if source is not None:
        tmpl = {"name": "t", "script": {"image": "python:3.11", "command": ["python"],
                                        "source": source},
                "inputs": {"parameters": [{"name": "x"}]}}
    task = {"name": name, "template": "t", **(loop or {}),
            "arguments": {"parameters": [{"name": "x", "value": "{{item}}" if loop else "-"}]}}
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
          "spec": {"entrypoint": "main", "arguments": {"parameters": [
              {"name": "langs", "value": '["en", "de"]'}]},
              "templates": [{"name": "main", "dag": {"tasks": [task]}}, tmpl]}}
    [plan] = pipeline.analyze_documents([wf], source="t")
    return plan.step(name)


def _sides(s: pipeline.Step) -> tuple[list, list, list]:
    return ([r.uri for r in s.reads], [w.uri for w in s.writes], [u.uri for u in s.unknown])


@pytest.mark.parametrize("argv", [
    ["aws", "s3", "cp", "--recursive", "s3://aaa/src/", "s3://bbb/dst/"],
    ["aws", "--endpoint-url", "https://s3.example.com", "s3", "sync", "s3://aaa/src/", "s3://bbb/dst/"],
    ["gsutil", "-m", "cp", "-r", "s3://aaa/src/", "s3://bbb/dst/"],
    ["gsutil", "rsync", "-r", "s3://aaa/src/", "s3://bbb/dst/"],
    ["gcloud", "storage", "cp", "--recursive", "s3://aaa/src/", "s3://bbb/dst/"],
    ["gcloud", "storage", "rsync", "s3://aaa/src/", "s3://bbb/dst/"],
    ["rclone", "copy", ":s3:aaa/src/", ":s3,provider=AWS:bbb/dst/"],
    ["rclone", "sync", "--transfers", "8", ":s3:aaa/src/", ":s3:bbb/dst/"],
    ["s5cmd", "--numworkers", "64", "cp", "s3://aaa/src/", "s3://bbb/dst/"],
    ["azcopy", "copy", "s3://aaa/src/", "s3://bbb/dst/", "--recursive"],
    ["sh", "-c", "aws s3 sync s3://aaa/src/ s3://bbb/dst/ --exclude '*.tmp' && echo done"],
])
def test_copy_direction_source_read_destination_written(argv: list[str]) -> None:
    assert _sides(_plan(argv)) == (["s3://aaa/src/"], ["s3://bbb/dst/"], [])


def test_shell_positional_args_are_put_back_in_place() -> None:
    # KFP components: sh -c 'SCRIPT' ARG0 ARG1 ... with "$0", "$1", "$@" in the script
    s = _plan(["sh", "-c", 'aws s3 cp --recursive "$0" /data && train --out "$1"',
               "s3://in/x/", "s3://out/y/"])
    assert _sides(s) == (["s3://in/x/"], ["s3://out/y/"], [])
    s = _plan(["bash", "-ec", 'gsutil rsync -r /m "${0}"', "s3://out/m/"])
    assert _sides(s) == ([], ["s3://out/m/"], [])


def test_copy_to_a_local_path_reads_and_from_a_local_path_writes() -> None:
    assert _sides(_plan(["mc", "mirror", "--overwrite", "/data", "minio/b/x/"]))[0] == []
    assert _sides(_plan(["azcopy", "copy", "https://acct.blob.core.windows.net/c/x/", "/d"])) == (
        ["https://acct.blob.core.windows.net/c/x/"], [], [])
    assert _sides(_plan(["aws", "s3", "cp", "/tmp/model", "s3://b/m/", "--recursive"])) == (
        [], ["s3://b/m/"], [])
    assert _sides(_plan(["aws", "s3", "rm", "--recursive", "s3://b/old/"])) == (
        [], ["s3://b/old/"], [])
    assert _sides(_plan(["sh", "-c", "gsutil ls gs://b/x/ && aws s3 ls s3://b/y/"])) == (
        [], [], ["gs://b/x/", "s3://b/y/"])
    assert _sides(_plan(["sh", "-c", "tar c /d | aws s3 cp - s3://b/d.tar"])) == (
        [], ["s3://b/d.tar"], [])


@pytest.mark.parametrize("flag,side", [
    ("--to", 1), ("--dst", 1), ("--dest", 1), ("--output", 1), ("--output-dir", 1),
    ("--out", 1), ("--save-to", 1), ("--save_path", 1), ("--export", 1), ("--export-dir", 1),
    ("--logdir", 1), ("--log-dir", 1), ("--job-dir", 1), ("--predictions", 1),
    ("--metrics-uri", 1), ("--logs", 0), ("--dst-dir", 1), ("--logging_dir", 1),
    ("--dst-calendar", 0),  # daylight saving time, not a destination
    ("--from", 0), ("--src", 0), ("--source", 0), ("--input", 0), ("--input-table", 0),
    ("--data", 0), ("--data-dir", 0), ("--resume-from-checkpoint", 0),
    ("--checkpoint-dir", 2), ("--ckpt", 2), ("--model-dir", 2),
])
def test_flag_names(flag: str, side: int) -> None:
    for argv in (["tool", flag, "s3://b/x/"], ["tool", f"{flag}=s3://b/x/"]):
        got = _sides(_plan(argv))
        assert got[side] == ["s3://b/x/"] and sum(map(len, got)) == 1, (argv, got)


def test_program_with_two_bare_locations_may_write_the_last() -> None:
    s = _plan(["python", "/app/convert.py", "s3://in/a.csv", "s3://out/a.parquet"])
    assert _sides(s) == (["s3://in/a.csv"], [], ["s3://out/a.parquet"])
    s = _plan(["python", "/app/train.py", "--epochs", "3", "s3://in/a/"])
    assert _sides(s) == (["s3://in/a/"], [], [])


def test_explicit_read_flag_beats_an_output_verb_in_the_step_name() -> None:
    s = _plan(["registry", "--source", "s3://m/x/", "--dest", "s3://r/x/"], name="publish")
    assert _sides(s) == (["s3://m/x/"], ["s3://r/x/"], [])
    # with nothing else to go on, the step's name decides
    assert _sides(_plan(["registry", "s3://m/x/"], name="upload-model")) == ([], ["s3://m/x/"], [])


def test_read_flag_beats_an_input_named_as_an_output() -> None:
    # a pipeline's `model_out` is written by one step and read by the next (`--model`)
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
          "spec": {"entrypoint": "t", "templates": [{
              "name": "t", "inputs": {"parameters": [
                  {"name": "output-uri", "value": "s3://o/x/"},
                  {"name": "logs", "value": "s3://l/x/"}]},
              "container": {"image": "x", "args": [
                  "--input", "{{inputs.parameters.output-uri}}",
                  "--input-logs", "{{inputs.parameters.logs}}"]}}]}}
    [plan] = pipeline.analyze_documents([wf], source="t")
    assert _sides(plan.step("t")) == (["s3://o/x/", "s3://l/x/"], [], [])


def test_env_names() -> None:
    s = _plan(["train"], env=[{"name": "OUTPUT_URI", "value": "s3://o/"},
                              {"name": "TRAIN_DATA", "value": "s3://d/"}])
    assert _sides(s) == (["s3://d/"], ["s3://o/"], [])


def test_same_location_read_and_written_is_unknown() -> None:
    s = _plan(["dedup", "--input", "s3://b/t/", "--output", "s3://b/t"])
    assert _sides(s)[:2] == ([], []) and s.unknown
    s = _plan(["sh", "-c", "gsutil cp -r /m gs://b/m/ && gsutil rsync gs://b/m/ gs://c/m/"])
    assert _sides(s)[0] == [] and "gs://b/m/" in _sides(s)[2]


def test_python_one_liner_and_script_code_decide() -> None:
    s = _plan(["python", "-c", "import fsspec; fsspec.open('s3://b/out.json', 'wb').write(b'')"])
    assert _sides(s) == ([], ["s3://b/out.json"], [])
    s = _plan([], source="import boto3\nboto3.client('s3').download_file('bkt', 'k', '/tmp/k')\n"
                         "import fsspec\nwith fsspec.open('s3://b/in.csv') as f:\n    f.read()\n")
    assert _sides(s) == (["s3://b/in.csv", "s3://bkt/k"], [], [])


def test_boto3_bucket_and_key_name_a_location() -> None:
    src = (
        "import json\n"
        "try: bucket = json.loads(r'''{{inputs.parameters.x}}''')\n"
        "except: bucket = r'''{{inputs.parameters.x}}'''\n"
        "import boto3\n"
        "boto3.client('s3').download_file(bucket, 'data/train.csv', '/tmp/t')\n"
        "boto3.client('s3').put_object(Bucket='out-bkt', Key='res.json', Body=b'')\n"
    )
    s = _plan([], source=src, loop={"withItems": ["bkt-a", "bkt-b"]})
    assert _sides(s) == (["s3://bkt-a/data/train.csv", "s3://bkt-b/data/train.csv"],
                         ["s3://out-bkt/res.json"], [])


def test_code_analysis_follows_parameters() -> None:
    flow = _code.analyze(
        "def f(a, b, c, d, e, g):\n"
        "    import boto3, fsspec, subprocess\n"
        "    from urllib.parse import urlparse\n"
        "    u = urlparse(a)\n"
        "    boto3.client('s3').download_file(u.netloc, u.path[1:], '/tmp/x')\n"
        "    v = urlparse(b)\n"
        "    boto3.client('s3').upload_file('/tmp/x', Bucket=v.netloc, Key=v.path[1:])\n"
        "    subprocess.run(['sync', '--from', c, '--to', d], check=True)\n"
        "    with fsspec.open(e + '/x.bin', mode='rb') as fh:\n"
        "        fh.read()\n"
        "    with fsspec.open(g, 'r') as fh:\n"
        "        fh.read()\n"
        "    with fsspec.open(g, 'w') as fh:\n"
        "        fh.write('')\n"
    )
    assert flow is not None
    assert flow.params == {"c": "read", "d": "write", "g": "unknown"}
    # e + '/x.bin' is a location built from e: named by the caller, who knows e's value;
    # urlparse(a).netloc and .path[1:] are a's bucket and key
    assert [(p, d) for p, d in flow.built if ("param", "e") in p] == [
        ((("param", "e"), "/x.bin"), "read")]
    assert {(p, d) for p, d in flow.built if ("param", "e") not in p} == {
        ((("bucket", "a"),), "read"), ((("key", "a"),), "read"),
        ((("bucket", "b"),), "write"), ((("key", "b"),), "write")}
    [(pa, da), (pb, db)] = [(_code.pair_pieces(b, k), d) for b, k, d in flow.pairs]
    assert (_pieces.render(pa, {"a": "s3://in/x/y.csv"}), da) == ("s3://in/x/y.csv", "read")
    assert (_pieces.render(pb, {"b": "s3://out/m/"}), db) == ("s3://out/m/", "write")
    assert flow.lits == {}
    assert _code.analyze("def broken(:\n") is None


def test_hera_script_placeholders_are_resolved_before_the_code_is_read() -> None:
    # Hera's @script source: each input bound from a placeholder, then the function body
    src = (
        "import json\n"
        "try: a = json.loads(r'''{{inputs.parameters.x}}''')\n"
        "except: a = r'''{{inputs.parameters.x}}'''\n"
        "import boto3\nfrom urllib.parse import urlparse\n"
        "u = urlparse(a)\n"
        "boto3.client('s3').upload_file('/tmp/m', u.netloc, u.path[1:])\n"
        "out_dir = 's3://lit/out/'\n"
        "print(out_dir)\n"
    )
    s = _plan([], source=src, loop={"withItems": ["s3://m/1/", "s3://m/2/"]})
    assert _sides(s) == ([], ["s3://m/1/", "s3://lit/out/", "s3://m/2/"], [])



X = "{{inputs.parameters.x}}"


def test_argo_loops_resolve_static_items() -> None:
    s = _plan(["tok", "--input", f"s3://t/part-{X}.parquet"], loop={"withItems": ["en", "fr"]})
    assert _sides(s)[0] == ["s3://t/part-en.parquet", "s3://t/part-fr.parquet"]
    s = _plan(["tok", "--input", f"s3://t/{X}/"], loop={"withParam": '["a", "b", "c"]'})
    assert s.loop is not None and s.loop.items_from == "static"
    assert _sides(s)[0] == ["s3://t/a/", "s3://t/b/", "s3://t/c/"]
    s = _plan(["tok", "--input", "s3://t/{{inputs.parameters.x}}/"],
              loop={"withParam": "{{workflow.parameters.langs}}"})
    assert s.loop is not None and s.loop.items_from == "parameter"
    assert _sides(s)[0] == ["s3://t/en/", "s3://t/de/"]
    s = _plan(["tok", "--input", f"s3://t/{X}/"], loop={"withSequence": {"count": "3"}})
    assert s.loop is not None and s.loop.items == ["0", "1", "2"]


def test_s3_input_artifact_keyed_by_a_loop_item() -> None:
    wf = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
          "spec": {"entrypoint": "main", "templates": [
              {"name": "main", "dag": {"tasks": [{
                  "name": "a", "template": "t", "withItems": ["x", "y"],
                  "arguments": {"parameters": [{"name": "p", "value": "{{item}}"}]}}]}},
              {"name": "t", "inputs": {
                  "parameters": [{"name": "p"}],
                  "artifacts": [{"name": "d", "path": "/in", "s3": {
                      "bucket": "bk", "key": "data/{{inputs.parameters.p}}.csv"}}]},
               "container": {"image": "x", "args": ["ls", "/in"]}}]}}
    [plan] = pipeline.analyze_documents([wf], source="t")
    assert [(r.uri, r.static) for r in plan.step("a").reads] == [
        ("s3://bk/data/x.csv", True), ("s3://bk/data/y.csv", True)]


def test_loops_over_many_items_stay_bounded() -> None:
    t0 = time.process_time()
    s = _plan(["tok", "--input", "s3://t/{{inputs.parameters.x}}.bin"],
              loop={"withItems": [f"k{i}" for i in range(5000)]})
    assert len(s.reads) == 5000 and all(r.static for r in s.reads)
    # past MAX_LOOP_ITEMS the reads are runtime-only; a huge withSequence is never listed
    s = _plan(["tok", "--input", "s3://t/{{inputs.parameters.x}}.bin"],
              loop={"withSequence": {"count": "100000000"}})
    assert s.loop is not None and s.loop.items is None
    assert [r.static for r in s.reads] == [False]
    assert time.process_time() - t0 < 30  # generous: a bound on work, not a timing claim


def test_nested_loops_are_a_product_and_bounded() -> None:
    def wf(outer: int, inner: int) -> dict:
        return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"name": "w"}, "spec": {"entrypoint": "main", "templates": [
                    {"name": "main", "dag": {"tasks": [{
                        "name": "o", "template": "inner", "withItems": list(range(outer)),
                        "arguments": {"parameters": [{"name": "a", "value": "{{item}}"}]}}]}},
                    {"name": "inner", "inputs": {"parameters": [{"name": "a"}]},
                     "dag": {"tasks": [{
                         "name": "s", "template": "c", "withItems": list(range(inner)),
                         "arguments": {"parameters": [
                             {"name": "a", "value": "{{inputs.parameters.a}}"},
                             {"name": "b", "value": "{{item}}"}]}}]}},
                    {"name": "c", "inputs": {"parameters": [{"name": "a"}, {"name": "b"}]},
                     "container": {"image": "x", "args": [
                         "--data", "s3://n/{{inputs.parameters.a}}/{{inputs.parameters.b}}/"]}}]}}

    [plan] = pipeline.analyze_documents([wf(2, 3)], source="t")
    assert [r.uri for r in plan.step("s").reads] == [
        f"s3://n/{a}/{b}/" for a in range(2) for b in range(3)]
    [plan] = pipeline.analyze_documents([wf(200, 200)], source="t")  # 40,000 > 10,000
    assert [r.static for r in plan.step("s").reads] == [False]


def test_shard_patterns_kept_whole_and_never_expanded() -> None:
    s = _plan(["train", "--shards", "s3://w/train-{000000..001023}.tar",
               "--val", "s3://w/val-{a,b,c}.tar", "--labels", "s3://w/meta/part-??.json",
               "--all", "s3://w/raw/{0..99999999}.jpg", "--fmt", "s3://w/{split}/x"])
    reads = {r.uri: r for r in s.reads}
    assert set(reads) == {"s3://w/train-{000000..001023}.tar", "s3://w/val-{a,b,c}.tar",
                          "s3://w/meta/part-??.json", "s3://w/raw/{0..99999999}.jpg"}
    assert reads["s3://w/train-{000000..001023}.tar"].prefix == "s3://w/train-"
    assert reads["s3://w/raw/{0..99999999}.jpg"].pattern_kind == "shard"
    m = _shard.compile_pattern("raw/{0..99999999}.jpg")
    assert m("raw/99999999.jpg") and not m("raw/100000000.jpg") and not m("raw/012.jpg")
    m = _shard.compile_pattern("t-{000000..001023}.tar")
    assert m("t-000000.tar") and m("t-001023.tar") and not m("t-001024.tar")
    assert not m("t-1.tar") and not m("t-0000001.tar")
    m = _shard.compile_pattern("a/*/b/**.json")
    assert m("a/x/b/c/d.json") and not m("a/x/y/b/c.json")
    with pytest.raises(ValueError):
        _shard.compile_pattern("{1,2}" * 2000)


def test_an_env_var_a_command_line_names_is_its_value_never_its_name() -> None:
    """Blind round 35: ``subprocess.run([..., "--resume-from", os.environ["RUN_DIR"]])``
    listed ``RUN_DIR`` itself as a constant read (an unsupported scheme) beside the env
    var's value; the name is the env's way only."""
    code = ("import os, subprocess\n"
            "def train():\n"
            "    subprocess.run(['python', '-m', 'trainer', '--resume-from',\n"
            "                    os.environ['RUN_DIR']])\n")
    flow = _code.analyze(code)
    assert flow is not None and flow.lits == {}
    assert dict(flow.env_dirs) == {"RUN_DIR": "read"}
    assert _code.program_locations(code, ["RUN_DIR"]) == []
