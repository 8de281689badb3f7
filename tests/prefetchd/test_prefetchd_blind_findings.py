"""Idioms of real workflows that a blind test (pipelines written, with their truth, by someone
who had not read the analysis) found read wrongly; each is valid Argo or KFP as the upstream
controllers run it.
"""

from __future__ import annotations

import copy
import json
import os
import textwrap
from typing import Any

import pytest
import yaml

from prefetchd import pipeline
from prefetchd import warm as warm_mod
from prefetchd.pipeline import _code, _scan, _shell, _uri
from prefetchd.pipeline._model import Step
from prefetchd.pipeline._resolve import Val, const

_ARGO = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"}}


def _plan(templates: list[dict], **spec: object) -> pipeline.Plan:
    doc = {**_ARGO, "spec": {"entrypoint": "main", "templates": templates, **spec}}
    [plan] = pipeline.analyze_documents([doc], source="w.yaml")
    return plan


def _container(name: str, *args: str) -> dict:
    return {"name": name, "inputs": {"parameters": [{"name": "part", "value": "-"}]},
            "container": {"image": "x", "command": ["python", f"{name}.py"], "args": list(args)}}


def _fed_by_output(consumer: dict, param: str) -> Step:
    """The step of *consumer* (a template taking input *param*) run after a step ``make``
    whose output parameter feeds *param*: a value only the run knows."""
    main = {"name": "main", "dag": {"tasks": [
        {"name": "make", "template": "make"},
        {"name": "use", "template": consumer["name"], "depends": "make", "arguments": {
            "parameters": [{"name": param,
                            "value": "{{tasks.make.outputs.parameters.out}}"}]}}]}}
    make = {"name": "make", "outputs": {"parameters": [{"name": "out",
                                                      "valueFrom": {"path": "/tmp/out"}}]},
            "container": {"image": "x", "command": ["make.sh"]}}
    return _plan([main, make, consumer]).step("use")


def _component(code: str, inputs: dict[str, Val], env: tuple[str, ...] = (),
               with_argv: bool = True) -> Step:
    """A KFP v2 lightweight component's step, read as ``_kfp2`` reads one: its program in
    argv (literal locations, by the code's use; *with_argv*) and its inputs."""
    step = Step(id="component", kind="container")
    argv = ["sh", "-c", "...", code, "{{$}}"]
    code_dirs = _scan.code_directions(argv)
    if with_argv:
        _scan.scan_argv(step, argv, lambda _t: None, [], code_dirs, env=env)
    _scan.scan_named_inputs(step, inputs, code_dirs, _scan.code_pairs(argv),
                            _scan.code_built(argv))
    return step


def test_with_sequence_items_take_its_format_as_argo_expands_them() -> None:
    """``withSequence`` with ``format: "%03d"``: the items are 001..004 (the controller's
    expandSequence), so the parts read are part-001.parquet..., not part-1.parquet."""
    main = {"name": "main", "dag": {"tasks": [{
        "name": "featurize", "template": "featurize",
        "arguments": {"parameters": [{"name": "part", "value": "{{item}}"}]},
        "withSequence": {"start": "1", "end": "4", "format": "%03d"}}]}}
    featurize = _container("featurize",
                           "--data", "s3://lake/tx/part-{{inputs.parameters.part}}.parquet")
    plan = _plan([main, featurize])
    assert plan.step("featurize").loop.items == ["001", "002", "003", "004"]
    assert [d[0] for d in plan.datasets()] == [
        f"s3://lake/tx/part-00{i}.parquet" for i in range(1, 5)]


def test_a_suspend_gate_in_a_dag_keeps_the_order_of_what_comes_after_it() -> None:
    """prepare -> approve (suspend, no pod) -> train: train still waits for prepare."""
    main = {"name": "main", "dag": {"tasks": [
        {"name": "prepare", "template": "prepare"},
        {"name": "approve", "template": "approve", "depends": "prepare"},
        {"name": "train", "template": "train", "depends": "approve"}]}}
    plan = _plan([main, _container("prepare", "--data", "s3://raw/x/"),
                  {"name": "approve", "suspend": {}},
                  _container("train", "--data", "s3://curated/x/")])
    assert [s.id for s in plan.steps] == ["prepare", "train"]
    assert plan.step("train").depends_on == ["prepare"]
    assert plan.step("train").stage == 1


def test_the_workflow_exit_hook_runs_like_on_exit() -> None:
    """``spec.hooks.exit`` is the newer spelling of ``spec.onExit``."""
    main = {"name": "main", "dag": {"tasks": [{"name": "train", "template": "train"}]}}
    plan = _plan([main, _container("train", "--data", "s3://curated/x/"),
                  _container("report", "--metrics", "s3://curated/x/metrics.json")],
                 hooks={"exit": {"template": "report"}})
    report = plan.step("report")
    assert report.exit_handler and report.depends_on == ["train"]


def test_flag_values_are_no_bare_operands_and_weights_are_read() -> None:
    """``--train_files=s3://a --eval_files=s3://b``: two flags' values, not ``prog SRC DST``
    (whose last operand may be the output); ``--weights`` loads weights, in a step named
    ``export-onnx`` too."""
    tokens = ["python", "t.py", "--train_files=s3://a/t-*.rec", "--eval_files=s3://a/e-*.rec"]
    assert set(_uri.classify_tokens(tokens).values()) == {None}
    main = {"name": "main", "dag": {"tasks": [{"name": "export-onnx", "template": "export"}]}}
    export = _container("export", "--weights", "s3://models/yolo/best.pt",
                        "--out", "s3://models/yolo/best.onnx")
    step = _plan([main, export]).step("export-onnx")
    assert [r.uri for r in step.reads] == ["s3://models/yolo/best.pt"]
    assert [w.uri for w in step.writes] == ["s3://models/yolo/best.onnx"]


def test_an_f_string_location_is_a_template_not_the_prefix_before_its_first_field() -> None:
    """``read_parquet(f"s3://lake/events/dt={ds}/part-0.parquet")`` reads one partition
    known only at run time: not ``s3://lake/events/dt=``, every partition of the table."""
    code = textwrap.dedent('''\
        import pandas as pd
        def load(ds: str):
            df = pd.read_parquet(f"s3://lake/events/dt={ds}/part-0.parquet")
            df2 = pd.read_parquet("s3://lake/dim/customers.parquet")
        ''')
    script = {"name": "load", "script": {"image": "python", "command": ["python"],
                                         "source": code}}
    main = {"name": "main", "dag": {"tasks": [{"name": "load", "template": "load"}]}}
    plan = _plan([main, script])
    assert [d[0] for d in plan.datasets()] == ["s3://lake/dim/customers.parquet"]


def test_with_sequence_bounds_from_a_workflow_parameter_make_a_parameter_loop() -> None:
    main = {"name": "main", "dag": {"tasks": [{
        "name": "featurize", "template": "featurize",
        "arguments": {"parameters": [{"name": "part", "value": "{{item}}"}]},
        "withSequence": {"count": "{{workflow.parameters.parts}}"}}]}}
    plan = _plan([main, _container("featurize", "--data", "s3://lake/p-{{inputs.parameters.part}}")],
                 arguments={"parameters": [{"name": "parts", "value": "2"}]})
    loop = plan.step("featurize").loop
    assert (loop.items_from, loop.items) == ("parameter", ["0", "1"])


def test_a_workflow_argument_artifact_passed_on_through_a_dag_is_read_where_it_lands() -> None:
    """The entry DAG takes the workflow's artifact as an input and hands it to a task with
    ``from: "{{inputs.artifacts.annotations}}"``: not an intermediate of the run."""
    main = {"name": "main", "inputs": {"artifacts": [{"name": "annotations"}]},
            "dag": {"tasks": [{"name": "check", "template": "check", "arguments": {
                "artifacts": [{"name": "ann", "from": "{{inputs.artifacts.annotations}}"}]}}]}}
    check = {"name": "check", "inputs": {"artifacts": [{"name": "ann", "path": "/in/ann.json"}]},
             "container": {"image": "x", "command": ["python", "check.py", "/in/ann.json"]}}
    plan = _plan([main, check], arguments={"artifacts": [{
        "name": "annotations", "s3": {"bucket": "vision", "key": "coco/instances.json"}}]})
    assert [r.uri for r in plan.step("check").reads] == ["s3://vision/coco/instances.json"]


def test_a_kfp_task_that_ignores_upstream_failures_is_no_exit_handler() -> None:
    """Both have the trigger ALL_UPSTREAM_TASKS_COMPLETED; only the task after an
    ExitHandler's group is its exit task."""
    path = os.path.join(os.path.dirname(__file__), "corpus", "pipelines",
                        "kfp2_nested_conditions.yaml")
    with open(path) as f:
        docs = list(yaml.safe_load_all(f))
    [plan] = pipeline.analyze_documents(copy.deepcopy(docs), source=path)
    assert plan.step("cleanup").exit_handler
    tasks = docs[0]["root"]["dag"]["tasks"]
    tasks["cleanup"]["dependentTasks"] = [k for k in tasks if k != "cleanup"
                                          and not k.startswith("exit-handler-")][:1]
    [plan] = pipeline.analyze_documents(docs, source=path)
    assert not plan.step("cleanup").exit_handler


def test_locations_built_in_code_from_inputs_are_named_from_their_values() -> None:
    """A lightweight component that builds its paths: ``f"s3://{bucket}/raw/{day}/"`` (each
    input only a part of it), ``uri + "model.json"`` (the input the parent of what is read),
    ``os.path.join``. The built locations are read, per loop item; an input used only to
    build them is no location of its own; one also handed to code not followed still is."""
    code = textwrap.dedent('''\
        import os
        import pandas as pd
        import torchvision
        def prep(bucket: str, day: str, model_dst: str, root: str, images: str):
            tx = pd.read_csv(f"s3://{bucket}/raw/{day}/transactions.csv.gz")
            model = pd.read_json(model_dst + "model.json")
            labels = pd.read_csv(os.path.join(root, "labels.csv"))
            pd.read_parquet(f"s3://{bucket}/dim/{day}.parquet").to_parquet(
                f"s3://{bucket}/out/{day}/")
            ds = torchvision.datasets.ImageFolder(images)
            meta = pd.read_csv(images + "/meta.csv")
        ''')
    flow_args = {"bucket": ["lake"], "day": ["2024-06-01", "2024-06-02"],
                 "model_dst": ["s3://models/fraud/"], "root": ["s3://lake/labels/"],
                 "images": ["s3://lake/images/"]}
    step = _component(code, {k: Val(values=v, origin="pipeline-parameter")
                             for k, v in flow_args.items()}, with_argv=False)
    assert sorted(r.uri for r in step.reads) == sorted([
        "s3://lake/raw/2024-06-01/transactions.csv.gz",
        "s3://lake/raw/2024-06-02/transactions.csv.gz",
        "s3://models/fraud/model.json",
        "s3://lake/labels/labels.csv",
        "s3://lake/dim/2024-06-01.parquet", "s3://lake/dim/2024-06-02.parquet",
        "s3://lake/images/meta.csv",
        "s3://lake/images/",  # also given to ImageFolder, which may read all of it
    ])
    assert sorted(w.uri for w in step.writes) == ["s3://lake/out/2024-06-01/",
                                                  "s3://lake/out/2024-06-02/"]


def test_kfp_v1_parallel_for_keeps_its_parallelism_from_the_loop_template() -> None:
    """KFP v1 compiles ``ParallelFor(..., parallelism=2)`` to a ``parallelism`` on the looped
    DAG template, not on the task that loops it."""
    path = os.path.join(os.path.dirname(__file__), "corpus", "pipelines",
                        "kfp1_blind_fraud_lightweight.yaml")
    with open(path) as f:
        [plan] = pipeline.analyze_documents(list(yaml.safe_load_all(f)), source=path)
    assert plan.step("backtest").loop.parallelism == 2


def test_more_ways_code_builds_and_reads_locations() -> None:
    """str.format, ``%s``, ``sep.join([...])`` with ``rstrip("/")``, a glob's pattern, polars
    and Spark readers and writers; data a reader returns is no location (passing a DataFrame
    on reads nothing more), and a constant that only starts a location is none itself."""
    code = textwrap.dedent('''\
        import polars as pl
        import fsspec
        def job(lake: str, store: str, day: str, models: str, key: str, spark):
            cal = pl.read_parquet("s3://lake/{}/calendar.parquet".format(day))
            sales = pl.scan_parquet("/".join([lake.rstrip("/"), "sales", "store=" + store])
                                    + "/*.parquet")
            prices = pl.scan_parquet("s3://lake/prices/%s/" % day)
            fs = fsspec.filesystem("s3")
            files = fs.glob(lake + "shards/*.tar")
            fs.get(files, "/tmp/shards/")
            model = fit(sales, cal)
            weights = "s3://models/" + key
            df = spark.read.parquet("s3://lake/events/", "s3://lake/users/")
            df.write.mode("overwrite").parquet(models + "features/")
            sales.sink_parquet(f"{models}agg/{day}.parquet")
        ''')
    values = {"lake": "s3://lake/", "store": "CA_1", "day": "2024-06-01",
              "models": "s3://models/m5/", "key": "x3d/model.pyth"}
    step = _component(code, {k: Val(values=[v], origin="pipeline-parameter")
                             for k, v in values.items()})
    assert step.unknown == []
    assert sorted(r.uri for r in step.reads) == sorted([
        "s3://lake/2024-06-01/calendar.parquet",
        "s3://lake/sales/store=CA_1/*.parquet",
        "s3://lake/prices/2024-06-01/",
        "s3://lake/shards/*.tar",
        "s3://lake/events/", "s3://lake/users/",
    ])
    assert sorted(w.uri for w in step.writes) == [
        "s3://models/m5/agg/2024-06-01.parquet", "s3://models/m5/features/"]
    # a literal %-template and the start of "s3://models/" + key name no location
    flow = _code.analyze(code)
    assert {"s3://models/"} <= flow.partial and "s3://lake/prices/%s/" not in flow.lits


def test_a_folder_glob_matches_the_keys_under_the_folders_it_names() -> None:
    from prefetchd.pipeline import _shard

    match = _shard.compile_pattern("events/dt=2025-06-*/")
    assert match("events/dt=2025-06-01/part-0.parquet")
    assert not match("events/dt=2025-07-01/part-0.parquet")
    assert not _shard.compile_pattern("events/dt=2025-06-*")("events/dt=2025-06-01/x")


def test_path_objects_aliases_env_defaults_and_copy_switches() -> None:
    """From a third blind test: ``UPath(root) / "manifest.csv"``; ``from smart_open import open
    as sopen`` and a location built inline in its call; an ``os.environ.get`` default the step
    overrides is not read; a Python f-string's escaped ``{{...}}`` is no placeholder;
    ``--work-dir`` may be written; ``aws s3 cp --recursive SRC DST`` (a switch, no value)."""
    code = textwrap.dedent('''\
        import os
        import pandas as pd
        from smart_open import open as sopen
        from upath import UPath
        def job(root: str, corpus: str):
            p = UPath(root)
            m = pd.read_csv(str(p / "manifest.csv"))
            with sopen(corpus + "/metadata.csv") as f:
                f.read()
            labels = pd.read_json(os.environ.get("LABELS", "s3://cfg/labels-v1.json"))
            shards = [f"s3://tts/{{000..031}}/{i}.tar" for i in range(2)]
        ''')
    step = _component(code, {"root": Val(values=["s3://mri/holdout-v2"],
                                         origin="pipeline-parameter"),
                             "corpus": Val(values=["s3://tts/ljspeech"],
                                           origin="pipeline-parameter")}, env=("LABELS",))
    assert sorted(r.uri for r in step.reads) == [
        "s3://mri/holdout-v2/manifest.csv", "s3://tts/ljspeech/metadata.csv"]
    assert _uri.name_direction("--work-dir") == "unknown"
    toks = ["aws", "s3", "cp", "--recursive", "/tmp/out", "s3://models/run7/"]
    assert _uri.classify_tokens(toks) == {4: "read", 5: "write"}


def test_s3fs_paths_without_a_scheme_are_s3_locations() -> None:
    """``s3fs.S3FileSystem().get(f"{bucket}/hrrr.{day}/conus/", ...)`` and
    ``fs.open("noaa-gfs/index.json")``: s3fs takes ``bucket/key`` without ``s3://``."""
    code = textwrap.dedent('''\
        import s3fs
        def fetch(bucket: str, day: str):
            fs = s3fs.S3FileSystem(anon=True)
            fs.get(f"{bucket}/hrrr.{day}/conus/", "/tmp/hrrr/", recursive=True)
            with fs.open("noaa-gfs-bdp-pds/index.json") as f:
                f.read()
            with open("/tmp/local.txt") as g:
                g.read()
        ''')
    step = _component(code, {
        "bucket": Val(values=["noaa-hrrr-bdp-pds"], origin="pipeline-parameter"),
        "day": Val(values=["20230715", "20230716"], origin="pipeline-parameter")})
    assert sorted(r.uri for r in step.reads) == [
        "s3://noaa-gfs-bdp-pds/index.json",
        "s3://noaa-hrrr-bdp-pds/hrrr.20230715/conus/",
        "s3://noaa-hrrr-bdp-pds/hrrr.20230716/conus/"]


def test_fourth_blind_test_idioms() -> None:
    """gcsfs paths without a scheme, a config dict's entry, writers that take the data first
    (pyarrow ``write_table``, lance ``write_dataset``) or the table first (deltalake), and SQL
    handed to DuckDB (``read_parquet('...')`` reads, ``COPY ... TO '...'`` writes)."""
    code = textwrap.dedent('''\
        import duckdb, gcsfs, lance
        import pyarrow.parquet as pq
        from deltalake import write_deltalake
        def job(root: str, period: str):
            fs = gcsfs.GCSFileSystem()
            files = fs.glob(f"acme-sim/{period}/*.npy")
            cfg = {"names": "s3://ref/surrogates/names.parquet", "k": 3}
            names = pq.read_table(cfg["names"])
            pq.write_table(names, f"{root}/out/{period}.parquet")
            lance.write_dataset(names, f"{root}/index.lance")
            write_deltalake(f"{root}/delta", names)
            feats = "s3://wind/features/" + "*.parquet"
            con = duckdb.connect()
            con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{feats}')")
            con.execute("COPY t TO 's3://wind/alerts/alerts.parquet' (FORMAT PARQUET)")
        ''')
    step = _component(code, {"root": Val(values=["s3://idx/2024-11"],
                                         origin="pipeline-parameter"),
                             "period": Val(values=["2024-10"], origin="pipeline-parameter")})
    assert sorted(r.uri for r in step.reads) == [
        "gs://acme-sim/2024-10/*.npy", "s3://ref/surrogates/names.parquet",
        "s3://wind/features/*.parquet"]
    assert sorted(w.uri for w in step.writes) == [
        "s3://idx/2024-11/delta", "s3://idx/2024-11/index.lance",
        "s3://idx/2024-11/out/2024-10.parquet", "s3://wind/alerts/alerts.parquet"]


def test_a_template_reached_by_template_ref_calls_its_own_templates() -> None:
    """A WorkflowTemplate whose DAG runs its own templates by plain name, called from a
    Workflow through templateRef: the names are the WorkflowTemplate's (the controller's
    rule); and the exit handler gets the workflow's arguments, as the entrypoint does."""
    lib = {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
           "metadata": {"name": "change-lib"},
           "spec": {"templates": [
               {"name": "pipeline", "dag": {"tasks": [{"name": "detect",
                                                      "template": "detect-changes"}]}},
               _container("detect-changes", "--data", "s3://tiles/2024/")]}}
    wf = {**_ARGO, "spec": {
        "entrypoint": "main", "onExit": "cleanup",
        "arguments": {"parameters": [{"name": "run", "value": "r7"}]},
        "templates": [
            {"name": "main", "steps": [[{"name": "run-lib", "templateRef": {
                "name": "change-lib", "template": "pipeline"}}]]},
            {"name": "cleanup", "inputs": {"parameters": [{"name": "run"}]},
             "container": {"image": "x", "command": ["python", "report.py"],
                           "args": ["--input", "s3://tiles/runs/{{inputs.parameters.run}}/"]}}]}}
    [plan] = pipeline.analyze_documents([wf, lib], source="w.yaml")
    assert [d[0] for d in plan.datasets()] == ["s3://tiles/2024/", "s3://tiles/runs/r7/"]


def test_a_boto3_key_built_from_inputs_names_the_object_per_loop_item() -> None:
    """``get_object(Bucket=bucket, Key=f"ltr/judgments/{locale}/manifest.json")`` over a loop
    of locales; as a KFP v1 component's options too (``--locale VALUE``)."""
    code = textwrap.dedent('''\
        import boto3
        def train(bucket: str, locale: str):
            s3 = boto3.client("s3")
            body = s3.get_object(Bucket=bucket, Key=f"ltr/judgments/{locale}/manifest.json")
            s3.upload_file("/tmp/m.txt", bucket, "ltr/models/" + locale + "/model.txt")
        ''')
    step = _component(code, {"bucket": Val(values=["shop"], origin="pipeline-parameter"),
                             "locale": Val(values=["en_US", "de_DE"], origin="loop-item")},
                      with_argv=False)
    assert sorted(r.uri for r in step.reads) == [
        "s3://shop/ltr/judgments/de_DE/manifest.json",
        "s3://shop/ltr/judgments/en_US/manifest.json"]
    assert sorted(w.uri for w in step.writes) == [
        "s3://shop/ltr/models/de_DE/model.txt", "s3://shop/ltr/models/en_US/model.txt"]


def test_a_flag_keeps_its_run_time_value_and_its_way() -> None:
    """``--netlist_file={{inputs.parameters.netlist_uri}}`` fed by another step's output: a
    runtime-only read of the value (not of ``--netlist_file=...``); ``--output_dir={{...}}``
    of the same kind is a write."""
    place = {"name": "place", "inputs": {"parameters": [{"name": "netlist_uri"}]},
             "container": {"image": "x", "command": ["python", "place.py"], "args": [
                 "--netlist_file={{inputs.parameters.netlist_uri}}",
                 "--output_dir={{inputs.parameters.netlist_uri}}.placed"]}}
    step = _fed_by_output(place, "netlist_uri")
    assert [(r.uri, r.pattern) for r in step.reads] == [
        (None, "{{inputs.parameters.netlist_uri}}")]
    assert [w.pattern for w in step.writes] == ["{{inputs.parameters.netlist_uri}}.placed"]


def test_a_location_holding_a_shell_variable_is_known_at_run_time_only() -> None:
    assert _uri.find_uris("aws s3 cp s3://bk/daily/$DAY/part.parquet /tmp/") == []
    assert _uri.find_uris("s3://bk/models/${RUN}/ s3://bk/$(X)/y") == []
    assert _uri.find_uris("s3://bk/fixed/part.parquet") == ["s3://bk/fixed/part.parquet"]


def test_locations_built_in_loops_are_one_per_item() -> None:
    """Loops in a component's code: over a literal list (also held in a variable, or a
    literal dict's ``.items()``), over an input's JSON list (``json.loads(p)``, a list
    input), ``p.split(",")``, ``range`` of a constant or of an input with a format spec,
    ``enumerate``, tuple unpacking, a list comprehension handed to a reader, and a helper
    function of one ``return``; each item names its own location, and an input used only
    for them (the list) is no location of its own."""
    code = textwrap.dedent('''\
        import json
        import boto3
        import pandas as pd
        import s3fs
        import xarray as xr
        def prep(root: str, families: str, stations: list, splits: str, shards: int):
            fs = s3fs.S3FileSystem()
            s3 = boto3.client("s3")
            for fam in json.loads(families):
                fs.get(f"{root}/{fam}/preds.parquet", f"/tmp/{fam}.parquet")
            ds = xr.open_mfdataset([f"{root}/wave/{s}.zarr" for s in stations])
            for split in splits.split(","):
                pd.read_csv(root + "/labels/" + split + ".csv")
            LANGS = ["en", "de"]
            for lang in LANGS:
                s3.download_file("lex", f"vocab/{lang}.txt", "/tmp/v")
            for i in range(shards):
                pd.read_parquet(f"{root}/part-{i:05d}.parquet")
            for i, name in enumerate(["a", "b"]):
                pd.read_json(f"{root}/idx/{i}-{name}.json")
            for kind, n in [("img", 2), ("txt", 1)]:
                pd.read_csv(f"{root}/{kind}/n{n}.csv")
            cfg = {"eval": "x", "test": "y"}
            for k, v in cfg.items():
                pd.read_csv(f"{root}/{k}/{v}.csv")
            def model_uri(fam):
                return f"{root}/models/{fam}.pt"
            for fam in ["lgbm"]:
                fs.get(model_uri(fam), "/tmp/m")
            for j in range(2):
                pd.read_csv(f"s3://lit/days/{j}.csv")
        ''')
    inputs = {"root": ["s3://b/r"], "families": ['["lgbm", "tft"]'],
              "stations": ['["CI.PASC", "CI.SVD"]'], "splits": ["train,val"], "shards": ["2"]}
    step = _component(code, {k: Val(values=v, origin="pipeline-parameter")
                             for k, v in inputs.items()})
    assert sorted(r.uri for r in step.reads) == sorted([
        "s3://b/r/lgbm/preds.parquet", "s3://b/r/tft/preds.parquet",
        "s3://b/r/wave/CI.PASC.zarr", "s3://b/r/wave/CI.SVD.zarr",
        "s3://b/r/labels/train.csv", "s3://b/r/labels/val.csv",
        "s3://lex/vocab/en.txt", "s3://lex/vocab/de.txt",
        "s3://b/r/part-00000.parquet", "s3://b/r/part-00001.parquet",
        "s3://b/r/idx/0-a.json", "s3://b/r/idx/1-b.json",
        "s3://b/r/img/n2.csv", "s3://b/r/txt/n1.csv",
        "s3://b/r/eval/x.csv", "s3://b/r/test/y.csv",
        "s3://b/r/models/lgbm.pt",
        "s3://lit/days/0.csv", "s3://lit/days/1.csv",
    ])
    assert step.writes == [] and step.unknown == []


def test_a_location_split_into_bucket_and_key_in_code_names_the_object() -> None:
    """``bucket, prefix = uri[len("s3://"):].split("/", 1)`` (and ``urlparse``) then a boto3
    call on the bucket and a key built from the prefix: the object, not the whole root."""
    code = textwrap.dedent('''\
        import boto3
        from urllib.parse import urlparse
        def qini(campaign_root: str, holdout_key: str, model_uri: str):
            s3 = boto3.client("s3")
            bucket, prefix = campaign_root[len("s3://"):].split("/", 1)
            s3.download_file(Bucket=bucket, Key=prefix.rstrip("/") + "/" + holdout_key,
                             Filename="/tmp/h.csv")
            u = urlparse(model_uri)
            s3.download_file(u.netloc, u.path.lstrip("/") + "/model.pkl", "/tmp/m")
        ''')
    inputs = {"campaign_root": ["s3://camp/retention-q1/"], "holdout_key": ["holdout/r.csv"],
              "model_uri": ["s3://models/uplift"], }
    step = _component(code, {k: Val(values=v, origin="pipeline-parameter")
                             for k, v in inputs.items()})
    assert sorted(r.uri for r in step.reads) == [
        "s3://camp/retention-q1/holdout/r.csv", "s3://models/uplift/model.pkl"]
    # a "bucket" and key of a location on another store are not an S3 object
    step = _component(code, {k: Val(values=[v[0].replace("s3://", "gs://")],
                                    origin="pipeline-parameter")
                             for k, v in inputs.items()})
    assert [r.uri for r in step.reads if r.uri and r.uri.startswith("s3://")] == []


def test_a_script_variable_names_the_location_it_is_expanded_in() -> None:
    """``REL="{{workflow.parameters.release}}"`` on one line, ``"s3://m/${REL}/"`` on the
    next: the location is known. ``--exclude '*/validation/*'`` is the option's value, not
    the copy's destination; a variable set from a command (``$(date)``) stays run-time."""
    script = textwrap.dedent('''\
        set -euo pipefail
        REL="{{workflow.parameters.release}}"
        export STAMP=$(date +%s)
        aws s3 sync "s3://models/liver/${REL}/" \\
          "s3://registry/liver/$REL/" --exclude '*.npz' --exclude '*/validation/*'
        aws s3 cp /tmp/m.json "s3://registry/runs/${STAMP}/m.json"
        ''')
    step = _plan([{"name": "main", "container": {"image": "x", "command": ["bash", "-c"],
                                                 "args": [script]}}],
                 arguments={"parameters": [{"name": "release", "value": "v2"}]}).step("main")
    assert [r.uri for r in step.reads] == ["s3://models/liver/v2/"]
    # the STAMP one is written too, where only the run knows (round 20)
    assert [(w.uri, w.static) for w in step.writes] == [
        ("s3://registry/liver/v2/", True), (None, False)]
    assert step.writes[1].pattern == "s3://registry/runs/${STAMP}/m.json"


def test_a_task_that_runs_on_another_tasks_failure_is_conditional() -> None:
    """``depends: "train.Failed || evaluate.Failed"`` does not run when all succeed: as
    conditional as a ``when``; ``(a.Succeeded || a.Failed) && b`` runs when all succeed."""
    def task(name: str, depends: str | None = None) -> dict:
        return {"name": name, "template": "t", **({"depends": depends} if depends else {})}
    main = {"name": "main", "dag": {"tasks": [
        task("train"), task("evaluate", "train"),
        task("page", "train.Failed || evaluate.Failed"),
        task("report", "(train.Succeeded || train.Failed) && evaluate"),
        task("again", "!evaluate.Succeeded")]}}
    t = {"name": "t", "container": {"image": "x", "command": ["true"]}}
    plan = _plan([main, t])
    assert plan.step("page").condition == "train.Failed || evaluate.Failed"
    assert plan.step("again").condition == "!evaluate.Succeeded"
    assert plan.step("report").condition is None and plan.step("evaluate").condition is None


def test_a_listing_whose_objects_are_read_reads_its_prefix() -> None:
    """boto3 ``list_objects_v2``/``paginate(Bucket=, Prefix=)`` then ``get_object`` of the
    listed keys: the prefix is read; a listing whose keys are only counted is not; ``a, b =
    x, y`` assigns element by element."""
    code = textwrap.dedent('''\
        import boto3
        from urllib.parse import urlparse
        def pick(registry: str):
            u = urlparse(registry)
            bucket, root = u.netloc, u.path.strip("/")
            s3 = boto3.client("s3")
            for page in s3.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket, Prefix=root + "/candidates/"):
                for obj in page.get("Contents", []):
                    s3.get_object(Bucket=bucket, Key=obj["Key"])
            s3.get_object(Bucket=bucket, Key=root + "/prod/metrics.json")
        ''')
    step = _component(code, {"registry": Val(values=["s3://reg/fraud"],
                                             origin="pipeline-parameter")})
    assert sorted(r.uri for r in step.reads) == [
        "s3://reg/fraud/candidates/", "s3://reg/fraud/prod/metrics.json"]
    only_counted = code.replace('s3.get_object(Bucket=bucket, Key=obj["Key"])', "n = 1")
    step = _component(only_counted, {"registry": Val(values=["s3://reg/fraud"],
                                                     origin="pipeline-parameter")})
    assert [r.uri for r in step.reads] == ["s3://reg/fraud/prod/metrics.json"]


def test_a_flag_naming_a_model_reads_in_a_step_named_as_an_export() -> None:
    """``export-cog`` runs ``predict --models s3://.../`` then copies its output up: the models
    are read (a flag naming a model beats the step's verb, not an input's name)."""
    script = ("python -m predict --models s3://models/crop/2024/ --out /mnt/m.tif\n"
              "aws s3 cp /mnt/m.tif s3://deliver/crop/m.tif")
    step = _plan([{"name": "export-cog", "container": {
        "image": "x", "command": ["bash", "-c"], "args": [script]}}],
        entrypoint="export-cog").step("export-cog")
    assert [r.uri for r in step.reads] == ["s3://models/crop/2024/"]
    assert [w.uri for w in step.writes] == ["s3://deliver/crop/m.tif"]
    assert _uri.names_model("--model-path") and not _uri.names_model("--model-dir")


def test_code_reading_another_steps_output_is_a_run_time_read() -> None:
    """A component given another step's output (``model_uris=Collected(train.output)``,
    ``checkpoint_uri=ft.output``) that reads it (a loop over it, ``aws s3 sync`` of it):
    a runtime-only read from the task output; a ``subprocess`` list word built from inputs
    (``f"s3://data/{eval_set}/wav/"``) is named from their values."""
    code = textwrap.dedent('''\
        import subprocess
        import s3fs
        def evaluate(model_uris: list, checkpoint_uri: str, eval_set: str, lm_bucket: str):
            fs = s3fs.S3FileSystem()
            for uri in model_uris:
                with fs.open(uri, "r") as f:
                    f.read()
            subprocess.run(["aws", "s3", "sync", checkpoint_uri, "/tmp/ckpt"], check=True)
            lm_uri = "s3://" + lm_bucket + "/kenlm/5gram.bin"
            subprocess.run(["aws", "s3", "cp", lm_uri, "/tmp/lm.bin"], check=True)
            subprocess.run(["aws", "s3", "sync", f"s3://data/{eval_set}/wav/", "/tmp/w"])
        ''')
    later = Val(values=None, origin="task-output")
    step = _component(code, {"model_uris": later, "checkpoint_uri": later,
                             "eval_set": Val(values=["a", "b"], origin="loop-item"),
                             "lm_bucket": Val(values=["lm"], origin="pipeline-parameter")})
    assert sorted(r.uri for r in step.reads if r.static) == [
        "s3://data/a/wav/", "s3://data/b/wav/", "s3://lm/kenlm/5gram.bin"]
    assert sorted(r.pattern or "" for r in step.reads if not r.static) == [
        "{{checkpoint_uri}}", "{{model_uris}}"]
    assert {r.origin for r in step.reads if not r.static} == {"task-output"}


def test_a_small_class_holding_a_root_and_an_existence_check() -> None:
    """``store = ResultStore(f"s3://{bucket}/{prefix}")`` with ``self.root = root`` and methods
    of one ``return self.root + ...``: each call names its location, the root alone is not
    read; ``head_object`` only checks that an object exists: nothing is read."""
    code = textwrap.dedent('''\
        import boto3
        import pandas as pd
        from urllib.parse import urlparse
        def judge(bucket: str, prefix: str, model_uri: str):
            class ResultStore:
                def __init__(self, root):
                    self.root = root
                def generations(self, suite):
                    return self.root + "/" + suite + "/generations.jsonl"
            store = ResultStore(f"s3://{bucket}/{prefix}")
            for suite in ["mmlu", "gsm8k"]:
                pd.read_json(store.generations(suite), lines=True)
            u = urlparse(model_uri)
            boto3.client("s3").head_object(Bucket=u.netloc, Key=u.path.lstrip("/") + "x.json")
        ''')
    step = _component(code, {"bucket": Val(values=["ev"], origin="pipeline-parameter"),
                             "prefix": Val(values=["runs/7"], origin="pipeline-parameter"),
                             "model_uri": Val(values=["s3://ck/step-9/"],
                                              origin="pipeline-parameter")})
    assert sorted(r.uri for r in step.reads) == [
        "s3://ev/runs/7/gsm8k/generations.jsonl", "s3://ev/runs/7/mmlu/generations.jsonl"]


def test_a_location_made_run_time_by_another_steps_output_has_that_origin() -> None:
    """``{{inputs.parameters.registry}}/candidates/{{...select-champion-Output}}/``: the
    champion's name, another step's output, is what only the run knows (origin
    ``task-output``), not the registry parameter; ``{{workflow.name}}`` beside a parameter
    keeps it a parameter's expression."""
    from prefetchd.pipeline import _resolve

    known = {"registry": Val(values=("s3://reg",), origin="pipeline-parameter"),
             "champ": _resolve.runtime("task-output", producer="select")}
    v = _resolve.substitute("{{registry}}/candidates/{{champ}}/", known.get,
                            pattern=_resolve.re.compile(r"\{\{(\w+)\}\}"))
    assert v is not None and v.values is None and v.origin == "task-output"
    known["champ"] = _resolve.runtime("workflow-runtime")
    v = _resolve.substitute("{{registry}}/runs/{{champ}}/", known.get,
                            pattern=_resolve.re.compile(r"\{\{(\w+)\}\}"))
    assert v is not None and v.origin == "parameter-expression"


def test_an_env_var_the_step_sets_builds_a_location_in_code() -> None:
    """``vocab_uri = os.environ["VOCAB_URI"]`` then ``f"{vocab_uri.rstrip('/')}/sizes.json"``
    in a KFP v2 component whose task sets VOCAB_URI: the file is read, not the folder the
    env var names; awswrangler's ``to_parquet(df, path=...)`` writes its ``path``."""
    code = textwrap.dedent('''\
        import json, os
        import awswrangler as wr
        import s3fs
        def featurize(logs_uri: str, out_root: str):
            vocab_uri = os.environ["VOCAB_URI"]
            with s3fs.S3FileSystem().open(f"{vocab_uri.rstrip('/')}/sizes.json") as f:
                json.load(f)
            df = wr.s3.read_parquet(path=logs_uri, dataset=True)
            wr.s3.to_parquet(df, path=f"{out_root}/dt=1/", dataset=True)
        ''')
    spec = {"pipelineInfo": {"name": "p"}, "schemaVersion": "2.1.0", "sdkVersion": "kfp-2.7.0",
            "root": {"dag": {"tasks": {"featurize": {
                "taskInfo": {"name": "featurize"},
                "componentRef": {"name": "comp-featurize"},
                "inputs": {"parameters": {
                    "logs_uri": {"runtimeValue": {"constant": "s3://logs/clicks/"}},
                    "out_root": {"runtimeValue": {"constant": "s3://feats/ctr"}}}}}}}},
            "components": {"comp-featurize": {
                "executorLabel": "exec-featurize",
                "inputDefinitions": {"parameters": {
                    "logs_uri": {"parameterType": "STRING"},
                    "out_root": {"parameterType": "STRING"}}}}},
            "deploymentSpec": {"executors": {"exec-featurize": {"container": {
                "image": "python:3.11",
                "command": ["sh", "-ec", "python3 -m kfp.dsl.executor_main", code],
                "args": ["--executor_input", "{{$}}", "--function_to_execute", "featurize"],
                "env": [{"name": "VOCAB_URI", "value": "s3://feats/vocab/v14/"}]}}}}}
    [plan] = pipeline.analyze_documents([spec], source="p.yaml")
    step = plan.step("featurize")
    assert sorted(r.uri for r in step.reads) == ["s3://feats/vocab/v14/sizes.json",
                                                 "s3://logs/clicks/"]
    assert [w.uri for w in step.writes] == ["s3://feats/ctr/dt=1/"]


def test_another_steps_output_a_copy_reads_is_a_run_time_read() -> None:
    """``aws s3 sync {{inputs.parameters.fit-Output}} s3://serving/...``: the value's name
    says nothing, but a copy's source is read: a runtime-only read from the task output."""
    publish = {"name": "publish", "inputs": {"parameters": [{"name": "fit-Output"}]},
               "container": {"image": "x", "command": ["sh", "-c"], "args": [
                   "aws s3 sync {{inputs.parameters.fit-Output}} s3://serving/topics/ "
                   "--delete"]}}
    step = _fed_by_output(publish, "fit-Output")
    assert [(r.uri, r.origin) for r in step.reads] == [(None, "task-output")]
    assert [w.uri for w in step.writes] == ["s3://serving/topics/"]


def test_a_run_time_value_under_a_flag_named_for_a_source_language_is_no_read() -> None:
    """``--src-lang {{inputs.parameters.src}}`` fed by a loop over another step's output: the
    flag's name ("src") is no evidence that a value the run makes is a location."""
    main = {"name": "main", "dag": {"tasks": [
        {"name": "ls", "template": "ls"},
        {"name": "prep", "template": "prep", "depends": "ls",
         "withParam": "{{tasks.ls.outputs.result}}",
         "arguments": {"parameters": [{"name": "src", "value": "{{item.src}}"}]}}]}}
    ls = {"name": "ls", "container": {"image": "x", "command": ["ls.sh"]}}
    prep = {"name": "prep", "inputs": {"parameters": [{"name": "src"}]},
            "container": {"image": "x", "command": ["python", "-m", "prep"],
                          "args": ["--src-lang", "{{inputs.parameters.src}}"]}}
    assert _plan([main, ls, prep]).step("prep").reads == []


def test_a_location_known_only_to_a_folder_a_dict_inputs_field_and_lancedb() -> None:
    """``f"{root}/{rec}.dat"`` with ``rec = f"records500/{i // 1000:05d}/..."`` over rows
    the run reads: the folder ``root/records500/`` is read (not ``root`` whole, and
    ``f"{bucket}/{key}"`` keeps the input itself); a dict input's field (``cohort["uri"]``,
    a ParallelFor over dicts) names the location per item; lancedb's ``open_table("t")``
    reads ``<db>/t.lance/`` and ``create_table`` writes it."""
    code = textwrap.dedent('''\
        import lancedb
        import pandas as pd
        import s3fs
        def pack(root: str, cohort: dict, db_uri: str, table: str, rows: list):
            fs = s3fs.S3FileSystem()
            for ecg_id in rows:
                rec = f"records500/{ecg_id // 1000 * 1000:05d}/{ecg_id:05d}_hr"
                fs.get(f"{root}/{rec}.dat", "/tmp/x")
            pd.read_parquet(cohort["uri"])
            db = lancedb.connect(db_uri)
            db.open_table(table).search([0.1]).limit(10)
            db.create_table(table + "_v2", [{"x": 1}])
        ''')
    step = _component(code, {
        "root": Val(values=["s3://raw/ptb-xl/1.0.3"], origin="pipeline-parameter"),
        "cohort": Val(values=['{"name": "a", "uri": "s3://ext/a/test.parquet"}',
                              '{"name": "b", "uri": "s3://ext/b/test.parquet"}'],
                      origin="loop-item"),
        "db_uri": Val(values=["s3://idx/lance"], origin="pipeline-parameter"),
        "table": Val(values=["funcs"], origin="pipeline-parameter"),
        "rows": Val(values=None, origin="task-output")})
    assert sorted(r.uri for r in step.reads if r.static) == [
        "s3://ext/a/test.parquet", "s3://ext/b/test.parquet", "s3://idx/lance/funcs.lance/",
        "s3://raw/ptb-xl/1.0.3/records500/"]
    assert [w.uri for w in step.writes] == ["s3://idx/lance/funcs_v2.lance/"]


def test_a_run_time_value_with_a_path_after_it_or_under_a_place_flag_is_read() -> None:
    """``s5cmd sync "{{...snapshot-Output}}audio/*" /data/`` and ``--model_load_path
    {{...model_dir}}`` (a flag naming a place): runtime-only reads of another step's
    output."""
    use = {"name": "use", "inputs": {"parameters": [{"name": "snap"}]},
           "container": {"image": "x", "command": ["sh", "-c"], "args": [
               's5cmd sync "{{inputs.parameters.snap}}audio/*" /data/ && '
               "python -m eval --model_load_path {{inputs.parameters.snap}}"]}}
    step = _fed_by_output(use, "snap")
    assert sorted(r.pattern or "" for r in step.reads) == [
        "{{inputs.parameters.snap}}", "{{inputs.parameters.snap}}audio/*"]
    assert {r.origin for r in step.reads} == {"task-output"}


def test_sql_built_around_inputs_reads_its_sources_and_writes_its_copy_target() -> None:
    """DuckDB SQL in an f-string: both ``read_parquet('{root}/.../*.parquet')`` sources are
    read (a second ``s3://`` in the text keeps its slashes), a part we cannot tell (``TO
    '{out.path}'``) names nothing, and ``COPY ... TO 's3://...{day}.parquet'`` is written."""
    code = textwrap.dedent('''\
        import duckdb
        def sessions(root: str, day: str, aoi: str, out: str):
            con = duckdb.connect()
            con.execute(f"""
                COPY (SELECT * FROM read_parquet('{root}/impressions/dt={day}/*.parquet') i
                      JOIN read_parquet('{root}/applications/dt={day}/*.parquet') a USING (id))
                TO '{out.path}' (FORMAT PARQUET)""")
            con.sql(f"COPY t TO 's3://reports/dark/{aoi}/{day}.parquet' (FORMAT PARQUET)")
        ''')
    step = _component(code, {"root": Val(values=["s3://lake/events"], origin="pipeline-parameter"),
                             "day": Val(values=["2025-05-18"], origin="pipeline-parameter"),
                             "aoi": Val(values=["north-sea"], origin="pipeline-parameter")})
    assert sorted(r.uri for r in step.reads) == [
        "s3://lake/events/applications/dt=2025-05-18/*.parquet",
        "s3://lake/events/impressions/dt=2025-05-18/*.parquet"]
    assert [w.uri for w in step.writes] == ["s3://reports/dark/north-sea/2025-05-18.parquet"]


def test_a_script_location_holding_another_steps_output_is_read_at_run_time() -> None:
    """A Hera script whose location holds an input fed by a loop over another step's output
    (``f"s3://cells/raw/{cell}/cycles.csv.gz"``): a runtime-only read from the task output,
    never a static read of ``.../__runtime__/...``."""
    main = {"name": "main", "dag": {"tasks": [
        {"name": "ls", "template": "ls"},
        {"name": "parse", "template": "parse", "depends": "ls",
         "withParam": "{{tasks.ls.outputs.result}}",
         "arguments": {"parameters": [{"name": "cell", "value": "{{item}}"}]}}]}}
    ls = {"name": "ls", "container": {"image": "x", "command": ["ls.sh"]}}
    parse = {"name": "parse", "inputs": {"parameters": [{"name": "cell"}]},
             "script": {"image": "python:3.11", "command": ["python"], "source": (
                 "import pandas as pd\n"
                 "cell = '{{inputs.parameters.cell}}'\n"
                 "df = pd.read_csv(f's3://cells/raw/{cell}/cycles.csv.gz')\n")}}
    step = _plan([main, ls, parse]).step("parse")
    assert [(r.uri, r.origin, r.static) for r in step.reads] == [(None, "task-output", False)]


def test_a_flags_path_value_narrows_a_mount_and_a_script_variable_is_no_read() -> None:
    """``--taxonomy=/data/taxonomy.csv`` names a file under the claim mounted at /data (the
    mount is not read whole), whatever the step's verb (``export-onnx``); ``DATA=/data/tok``
    then ``--train "$DATA/train"`` reads ``/data/tok/train``, not all of ``/data/tok``."""
    tmpl = {"name": "export-onnx", "container": {
        "image": "x", "command": ["bash", "-c"], "args": [
            'DATA=/data/tok\npython -m export --taxonomy=/data/taxonomy.csv '
            '--train "$DATA/train"'],
        "volumeMounts": [{"name": "d", "mountPath": "/data", "readOnly": True}]}}
    doc = {**_ARGO, "spec": {"entrypoint": "export-onnx", "templates": [tmpl], "volumes": [
        {"name": "d", "persistentVolumeClaim": {"claimName": "comp"}}]}}
    [plan] = pipeline.analyze_documents([doc], pvc_map={"comp": "s3://bkt/comp"}, source="w")
    assert sorted(r.uri for r in plan.step("export-onnx").reads) == [
        "s3://bkt/comp/taxonomy.csv", "s3://bkt/comp/tok/train"]


def test_a_local_path_built_from_another_steps_output_is_no_read() -> None:
    """``glob.glob(f"{scratch}/scenes/{scene_id}/*.tiff")`` with ``scratch="/scratch"`` and
    ``scene_id`` from a loop over another step's output: a path on a volume, not a location
    to read at run time; ``f"{root}/x/"`` with ``root`` from another step still is."""
    code = textwrap.dedent('''\
        import glob
        import pandas as pd
        def detect(scratch: str, scene_id: str, root: str):
            tif = glob.glob(f"{scratch}/scenes/{scene_id}/*.tiff")[0]
            pd.read_parquet(f"{root}section=news/")
        ''')
    later = Val(values=None, origin="task-output")
    step = _component(code, {"scratch": Val(values=["/scratch"], origin="pipeline-parameter"),
                             "scene_id": later, "root": later})
    assert [(r.pattern, r.origin) for r in step.reads] == [
        ("{{root}}section=news/", "task-output")]


def test_an_rclone_remote_the_env_makes_s3_and_a_listing_downloaded_locally() -> None:
    """``rclone copy hydro:bucket/x /cache`` with ``RCLONE_CONFIG_HYDRO_TYPE=s3`` reads
    ``s3://bucket/x``; a paginated listing downloaded to local paths made with
    ``os.makedirs`` reads the listed prefix (making a local folder writes no location)."""
    tmpl = {"name": "mirror", "container": {
        "image": "rclone/rclone", "command": ["rclone"],
        "args": ["copy", "hydro:forcings/daymet/camels", "/cache/daymet", "--include", "*.nc"],
        "env": [{"name": "RCLONE_CONFIG_HYDRO_TYPE", "value": "s3"},
                {"name": "RCLONE_CONFIG_HYDRO_ENV_AUTH", "value": "true"}]}}
    assert [r.uri for r in _plan([tmpl], entrypoint="mirror").step("mirror").reads] == [
        "s3://forcings/daymet/camels"]
    code = textwrap.dedent('''\
        import os
        from urllib.parse import urlparse
        import boto3
        def fetch(eval_uri: str, eval_set: str):
            u = urlparse(eval_uri)
            s3 = boto3.client("s3")
            for page in s3.get_paginator("list_objects_v2").paginate(
                    Bucket=u.netloc, Prefix=u.path.lstrip("/")):
                for obj in page.get("Contents", []):
                    dest = os.path.join(f"/tmp/{eval_set}",
                                        os.path.relpath(obj["Key"], u.path.lstrip("/")))
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    s3.download_file(u.netloc, obj["Key"], dest)
        ''')
    step = _component(code, {"eval_uri": Val(values=["s3://adas/gtsdb/test/"],
                                             origin="loop-item"),
                             "eval_set": Val(values=["gtsdb"], origin="loop-item")})
    assert [r.uri for r in step.reads] == ["s3://adas/gtsdb/test/"] and step.writes == []


def test_round_13_idioms() -> None:
    """``SEASON="$0"; MATCH="$1"`` on one line (two commands) then
    ``s3://raw/${SEASON}/${MATCH}/*.mp4``; ``--model {{item.ckpt}}`` (a checkpoint to load);
    ``publish-*`` with ``--blocks X --out Y`` (the output named: X is an input); a script's
    listing under a prefix built from an env var, its listed keys downloaded."""
    extract = {"name": "extract", "inputs": {"parameters": [{"name": "match"}]},
               "container": {"image": "x", "command": ["bash", "-c"], "args": [
                   'SEASON="$0"; MATCH="$1"\n'
                   's5cmd cp "s3://raw/${SEASON}/${MATCH}/*.mp4" /frames/\n',
                   "2024-25", "{{inputs.parameters.match}}"]}}
    publish = {"name": "publish-blocks", "container": {"image": "x", "args": [
        "--blocks", "s3://geo/blocks/grid.csv", "--out", "s3://products/graded.csv"]}}
    score = {"name": "score", "inputs": {"parameters": [{"name": "ckpt"}]},
             "container": {"image": "x", "args": ["--model", "{{inputs.parameters.ckpt}}"]}}
    gate = {"name": "gate", "script": {"image": "x", "command": ["python"],
            "env": [{"name": "SNAPSHOT", "value": "2025-06-01"}], "source": (
                "import os, boto3\n"
                "s3 = boto3.client('s3')\n"
                "for lang in ('en', 'de'):\n"
                "    prefix = f\"models/router/{os.environ['SNAPSHOT']}/{lang}/\"\n"
                "    for obj in s3.list_objects_v2(Bucket='ml', Prefix=prefix)['Contents']:\n"
                "        s3.download_file('ml', obj['Key'], '/tmp/' + obj['Key'])\n")}}
    main = {"name": "main", "dag": {"tasks": [
        {"name": "extract", "template": "extract",
         "arguments": {"parameters": [{"name": "match", "value": "m0412"}]}},
        {"name": "publish-blocks", "template": "publish-blocks"},
        {"name": "score", "template": "score", "withItems": [{"ckpt": "s3://m/a.onnx"}],
         "arguments": {"parameters": [{"name": "ckpt", "value": "{{item.ckpt}}"}]}},
        {"name": "gate", "template": "gate"}]}}
    plan = _plan([main, extract, publish, score, gate])
    assert [r.uri for r in plan.step("extract").reads] == ["s3://raw/2024-25/m0412/*.mp4"]
    assert [r.uri for r in plan.step("publish-blocks").reads] == ["s3://geo/blocks/grid.csv"]
    assert [r.uri for r in plan.step("score").reads] == ["s3://m/a.onnx"]
    assert sorted(r.uri for r in plan.step("gate").reads) == [
        "s3://ml/models/router/2025-06-01/de/", "s3://ml/models/router/2025-06-01/en/"]


def test_round_14_idioms() -> None:
    """``f"{root}/year={year}/month={month:02d}/"`` formats an input (the IR writes an int's
    default as 4.0); a ``python - <<'PY'`` document inside a script is read as Python; a
    location the program writes into a file it hands on is no location it reads."""
    code = textwrap.dedent('''\
        import polars as pl
        def ingest(root: str, year: int, month: int):
            src = f"{root}/year={year}/month={month:02d}/"
            pl.read_parquet(src + "*.parquet")
        ''')
    step = _component(code, {"root": Val(values=["s3://bts/ontime"], origin="pipeline-parameter"),
                             "year": Val(values=["2025"], origin="pipeline-parameter"),
                             "month": Val(values=["4.0"], origin="pipeline-parameter")})
    assert [r.uri for r in step.reads] == ["s3://bts/ontime/year=2025/month=04/*.parquet"]
    script = ("pip install -q boto3 && python - <<'PY'\n"
              "import boto3\n"
              "s3 = boto3.client('s3')\n"
              "for f in range(2):\n"
              "    s3.get_object(Bucket='models', Key=f'usleep/fold-{f}/metrics.json')\n"
              "open('/tmp/out', 'w').write(f's3://models/usleep/best/')\n"
              "PY")
    tmpl = {"name": "agg", "container": {"image": "x", "command": ["sh", "-c"], "args": [script]}}
    step = _plan([tmpl], entrypoint="agg").step("agg")
    assert sorted(r.uri for r in step.reads) == ["s3://models/usleep/fold-0/metrics.json",
                                                 "s3://models/usleep/fold-1/metrics.json"]


def test_round_18_idioms() -> None:
    """A chat message a step posts with ``curl -d`` names a report, which nothing reads
    there; a ``python -c`` program's ``sys.argv[1]`` is the word after it (here a parameter),
    and a boto3 key formatted from a constant is a constant (``Key=f"regions/{region}/..."``)."""
    alert = {"name": "alert", "container": {"image": "curlimages/curl", "command": ["sh", "-c"],
             "args": ['curl -fsS -X POST "$HOOK" -H \'Content-Type: application/json\' '
                      '-d "{\\"text\\": \\"see s3://reports/x/2025-07-09.json\\"}"']}}
    assert _plan([alert], entrypoint="alert").step("alert").reads == []
    code = ("import json, sys, boto3\n"
            "region = sys.argv[1]\n"
            "obj = boto3.client('s3').get_object(\n"
            "    Bucket='cfg', Key=f'regions/{region}/farms.json')\n"
            "json.dump([f['id'] for f in json.load(obj['Body'])], open('/tmp/farms.json', 'w'))\n")
    farms = {"name": "farms", "inputs": {"parameters": [{"name": "region", "value": "west"}]},
             "container": {"image": "python:3.11", "command": ["python", "-c"],
                           "args": [code, "{{inputs.parameters.region}}"]}}
    step = _plan([farms], entrypoint="farms").step("farms")
    assert [r.uri for r in step.reads] == ["s3://cfg/regions/west/farms.json"]
    local = ("import boto3\nr = 'east'\n"
             "boto3.client('s3').get_object(Bucket='cfg', Key=f'{r}/a.json')\n")
    assert _code.program_locations(local) == [("s3://cfg/east/a.json", "read")]


def test_an_argo_templates_init_containers_and_sidecars_are_the_steps_reads() -> None:
    """Round 20: an init container staging a model into an emptyDir runs in the step's pod,
    on its node, before the main container: its read is the step's (so is a sidecar's), and
    a sidecar's write stays a write."""
    tmpl = {"name": "main",
            "initContainers": [{"name": "stage", "image": "amazon/aws-cli",
                                "command": ["aws", "s3", "cp", "--recursive",
                                            "s3://models/esm2/", "/models/esm2/"],
                                "mirrorVolumeMounts": True}],
            "sidecars": [{"name": "ship", "image": "amazon/aws-cli",
                          "command": ["sh", "-c",
                                      "aws s3 sync /logs s3://runs/logs/ && sleep 5"],
                          "resources": {"requests": {"cpu": "500m"}}}],
            "container": {"image": "x", "command": ["python", "-m", "embed"],
                          "args": ["--sequences", "s3://libs/naive.parquet",
                                   "--model", "/models/esm2"],
                          "resources": {"requests": {"cpu": "4"}},
                          "volumeMounts": [{"name": "models", "mountPath": "/models"}]},
            "volumes": [{"name": "models", "emptyDir": {}}]}
    step = _plan([tmpl]).step("main")
    assert sorted(r.uri for r in step.reads) == ["s3://libs/naive.parquet",
                                                "s3://models/esm2/"]
    assert [w.uri for w in step.writes] == ["s3://runs/logs/"]
    # the sidecar runs beside the main container: its requests count
    assert step.scheduling["containers"] == [{"resources": {"requests": {"cpu": "4"}}},
                                             {"resources": {"requests": {"cpu": "500m"}}}]


def test_a_copy_source_holding_a_shell_variable_is_a_run_time_read() -> None:
    """Round 20: ``while read -r sid; do aws s3 sync "${ROOT}/dicom/${sid}/" ...`` was
    dropped whole; its place is known (under the parameter's prefix), its rest only at run
    time. A destination holding one stays a write; a fully known source stays static."""
    script = textwrap.dedent("""\
        ROOT="{{workflow.parameters.root}}"
        aws s3 cp "${ROOT}/splits/test.txt" /work/series.txt
        while read -r sid; do
          aws s3 sync "${ROOT}/dicom/${sid}/" "/work/dicom/${sid}/"
          aws s3 cp "/work/out/${sid}.json" "s3://results/${sid}.json"
        done < /work/series.txt
        """)
    tmpl = {"name": "main", "script": {"image": "x", "command": ["bash"], "source": script}}
    step = _plan([tmpl], arguments={"parameters": [{"name": "root",
                                                    "value": "s3://ct/v2"}]}).step("main")
    assert [(r.uri, r.static, r.origin) for r in step.reads if r.uri] == [
        ("s3://ct/v2/splits/test.txt", True, "parameter-expression")]
    assert [(r.pattern, r.static, r.origin) for r in step.reads if r.uri is None] == [
        ("s3://ct/v2/dicom/${sid}/", False, "parameter-expression")]
    assert [w.pattern for w in step.writes] == ["s3://results/${sid}.json"]
    # the same in a plain container's bash -c, with a constant prefix
    tmpl = {"name": "main", "container": {"image": "x", "command": ["bash", "-c"], "args": [
        'for d in $(cat /days.txt); do aws s3 cp "s3://logs/day=$d/events.parquet" /in/; done']}}
    step = _plan([tmpl]).step("main")
    assert [(r.pattern, r.origin) for r in step.reads] == [
        ("s3://logs/day=$d/events.parquet", "constant")]


def test_run_time_locations_are_those_holding_a_shell_variable() -> None:
    assert _uri.run_time_locations('aws s3 sync "s3://b/x/${sid}/" /w') == ["s3://b/x/${sid}/"]
    assert _uri.run_time_locations("s3://b/$DAY/x.csv") == ["s3://b/$DAY/x.csv"]
    # none: a known location, a format template, a Kubernetes $(VAR)
    for text in ("s3://b/x/", "s3://b/{day}/x", "s3://b/${A}{B}", "s3://b/x/$(DATA)"):
        assert _uri.run_time_locations(text) == [], text


def _nested(train: dict) -> pipeline.Plan:
    """*train* (taking region and taxon) run in a loop over 3 taxa nested in a loop over 2
    regions, as a DAG of templates does it."""
    outer = {"name": "main", "dag": {"tasks": [{
        "name": "outer", "template": "inner-loop",
        "arguments": {"parameters": [{"name": "region", "value": "{{item.region}}"}]},
        "withItems": [{"region": "benelux"}, {"region": "po-valley"}]}]}}
    inner = {"name": "inner-loop", "inputs": {"parameters": [{"name": "region"}]},
             "dag": {"tasks": [{
                 "name": "train", "template": "train",
                 "arguments": {"parameters": [
                     {"name": "region", "value": "{{inputs.parameters.region}}"},
                     {"name": "taxon", "value": "{{item}}"}]},
                 "withItems": ["betula", "poaceae", "ambrosia"]}]}}
    train = {"name": "train",
             "inputs": {"parameters": [{"name": "region"}, {"name": "taxon"}]}, **train}
    return _plan([outer, inner, train])


_SIX = sorted(f"s3://obs/{r}/{t}/counts.csv" for r in ("benelux", "po-valley")
              for t in ("betula", "poaceae", "ambrosia"))


def test_code_in_a_loop_nested_in_another_reads_every_pair_of_items() -> None:
    """Round 20: code whose location takes an item of each of two nested loops read only
    the outer loop's first item (an Argo script), or nothing (a KFP v1 component's code
    given the items as options); each read is one per pair, labelled as a loop item's."""
    src = ('import pandas as pd\n'
           'df = pd.read_csv("s3://obs/{{inputs.parameters.region}}/'
           '{{inputs.parameters.taxon}}/counts.csv")\n')
    step = _nested({"script": {"image": "x", "command": ["python"], "source": src}}).step(
        "train")
    assert sorted(r.uri for r in step.reads) == _SIX
    assert {r.origin for r in step.reads} == {"loop-item"}
    component = textwrap.dedent("""\
        def train(region, taxon):
            import pandas as pd
            pd.read_csv(f"s3://obs/{region}/{taxon}/counts.csv")

        import argparse
        _parser = argparse.ArgumentParser(prog='Train', description='')
        _parser.add_argument("--region", dest="region", type=str, required=True)
        _parser.add_argument("--taxon", dest="taxon", type=str, required=True)
        _parsed_args = vars(_parser.parse_args())
        _outputs = train(**_parsed_args)
        """)
    step = _nested({"container": {
        "image": "x", "command": ["sh", "-ec", 'program_path=$(mktemp)\nprintf "%s" "$0" > '
                                  '"$program_path"\npython3 -u "$program_path" "$@"\n',
                                  component],
        "args": ["--region", "{{inputs.parameters.region}}",
                 "--taxon", "{{inputs.parameters.taxon}}"]}}).step("train")
    assert sorted(r.uri for r in step.reads) == _SIX
    # python -c reading sys.argv[1], the location in its argument: one read per location
    step = _nested({"container": {
        "image": "x", "command": ["python", "-c",
                                  "import sys, pandas as pd; pd.read_csv(sys.argv[1])"],
        "args": ["s3://obs/{{inputs.parameters.region}}/{{inputs.parameters.taxon}}/"
                 "counts.csv"]}}).step("train")
    assert sorted(r.uri for r in step.reads) == _SIX


def test_a_location_code_builds_from_a_parameter_and_the_run_name_is_its_expression() -> None:
    """Round 20: ``f"s3://surge-runs/{region}/{run_name}/..."`` with run_name the workflow's
    name was labelled workflow-runtime; the run's own name does not make it less the
    parameter's expression (as in a template's text). A location built from a parameter
    in code is the parameter's expression, not a constant."""
    src = ("import fsspec\nfs = fsspec.filesystem('s3')\n"
           "region = '{{inputs.parameters.region}}'\nrun = '{{inputs.parameters.run}}'\n"
           "fs.get(f's3://models/{region}/v3/', '/tmp/m/', recursive=True)\n"
           "fs.glob(f's3://runs/{region}/{run}/*/max.nc')\n")
    main = {"name": "main", "dag": {"tasks": [{
        "name": "emulate", "template": "emulate", "arguments": {"parameters": [
            {"name": "region", "value": "{{workflow.parameters.region}}"},
            {"name": "run", "value": "{{workflow.name}}"}]}}]}}
    emulate = {"name": "emulate", "inputs": {"parameters": [{"name": "region"},
                                                            {"name": "run"}]},
               "script": {"image": "x", "command": ["python"], "source": src}}
    step = _plan([main, emulate], arguments={"parameters": [
        {"name": "region", "value": "gulf"}]}).step("emulate")
    assert [(r.uri, r.origin) for r in step.reads if r.uri] == [
        ("s3://models/gulf/v3/", "parameter-expression")]
    assert [(r.pattern, r.origin) for r in step.reads if r.uri is None] == [
        ("s3://runs/gulf/{{inputs.parameters.run}}/*/max.nc", "parameter-expression")]


def test_a_shell_for_loop_over_literal_items_reads_each_item() -> None:
    """``for s in dev test; do aws s3 cp "s3://b/evals/${s}.jsonl" ...; done`` names both
    files before the run (rounds 15-16 judged it run-time only; the writers' ideal was the
    files): a loop over literal words or a numeric brace range is written out per item,
    nested loops too; one over a command's output or a glob stays run-time."""
    script = textwrap.dedent("""\
        set -e
        for s in dev test; do
          aws s3 cp "s3://b/evals/${s}.jsonl" /w/evals/
        done
        for r in eu us; do for i in {0..1}; do
          aws s3 cp s3://b/$r/part-$i.tar /w/; done; done
        for f in $(cat /w/list.txt); do aws s3 cp "s3://b/x/$f" /w/; done
        for f in /w/*.csv; do aws s3 cp "$f" "s3://out/$(basename $f)"; done
        """)
    tmpl = {"name": "main", "container": {"image": "x", "command": ["bash", "-c"],
                                          "args": [script]}}
    step = _plan([tmpl]).step("main")
    assert sorted(r.uri for r in step.reads if r.uri) == [
        "s3://b/eu/part-0.tar", "s3://b/eu/part-1.tar", "s3://b/evals/dev.jsonl",
        "s3://b/evals/test.jsonl", "s3://b/us/part-0.tar", "s3://b/us/part-1.tar"]
    assert [r.pattern for r in step.reads if r.uri is None] == ["s3://b/x/$f"]
    words = _uri.tokenize(["bash", "-c", "for i in {0..99}; do cp s3://b/p-$i /w; done"])
    assert "s3://b/p-$i" in words  # more items than MAX_SHELL_LOOP_ITEMS: left as written


def test_shell_functions_and_parameter_expansion_name_what_a_script_reads() -> None:
    """Round 21: ``ROOT="${1%/}"`` left ``%/`` in the location (a bogus prefix warmed), and
    ``$1`` inside a function took the script's argument. Now ``%``/``%%``/``#``/``##`` and
    ``:-`` apply (to a pipeline's value once it is resolved), a function's body replaces
    each call with the call's words as ``$1``..., and ``$0`` in a location is a variable."""
    script = textwrap.dedent("""\
        set -euo pipefail
        STORM="$0"
        ROOT="${1%/}"
        SPLIT="${SPLIT:-test}"
        fetch() {
          local layer="$1"
          aws s3 sync "${ROOT}/${STORM}/${layer}/" "/tiles/${layer}/"
        }
        for layer in rgb dsm; do
          fetch "$layer"
        done
        aws s3 cp "${ROOT}/splits/${SPLIT}.txt" /w/
        """)
    tmpl = {"name": "main", "container": {"image": "x", "command": ["bash", "-c"], "args": [
        script, "storm-7", "{{workflow.parameters.root}}"]}}
    step = _plan([tmpl], arguments={"parameters": [
        {"name": "root", "value": "s3://aerial/nearmap/"}]}).step("main")
    assert sorted(r.uri for r in step.reads) == [
        "s3://aerial/nearmap/splits/test.txt", "s3://aerial/nearmap/storm-7/dsm/",
        "s3://aerial/nearmap/storm-7/rgb/"]
    # the same with the root a literal argument; `#`/`##` too
    words = _uri.tokenize(["bash", "-c", 'R="${1%/}"; N="${2##*/}"; aws s3 cp "$R/$N" /w',
                           "x", "s3://b/p/", "models/v3"])
    assert "s3://b/p/v3" in words
    assert _uri.find_uris("s3://b/aux/$0.tif") == []  # run time, not a static read
    assert _shell.param_expand("a/b/c.tar.gz", "%%", ".*") == "a/b/c"
    assert _shell.param_expand(None, ":-", "d") == "d"
    assert _shell.param_expand("x", ":-", "d") == "x"


def test_arrays_heredocs_and_fan_outs_name_what_a_script_reads() -> None:
    """Round 21: ``STATIONS=(A B); for st in "${STATIONS[@]}"`` was a run-time read, a
    variable in an unquoted heredoc (``<<EOF``) was left unexpanded, and ``printf '%s\\n' a
    b | xargs -P 3 -I{} aws s3 cp "s3://.../{}.tif"`` read nothing; GNU parallel and
    ``xargs sh -c '... $0'`` alike. Items only the run knows leave a run-time read."""
    script = textwrap.dedent("""\
        STATIONS=(USW1 USW2)
        for st in "${STATIONS[@]}"; do aws s3 cp "s3://noaa/${st}.csv" /w/; done
        aws s3 cp "s3://noaa/meta/${STATIONS[1]}.json" /w/
        Q="$0"
        cat > /tmp/c.yaml <<EOF
        data: s3://ec/raw/${Q}/
        EOF
        cat > /tmp/d.yaml <<'EOF'
        data: s3://ec/raw/${Q}/literal/
        EOF
        printf '%s\\n' a b | xargs -P 3 -I{} aws s3 cp "s3://aux/{}.tif" /aux/
        echo c d | xargs -n1 sh -c 'aws s3 cp "s3://aux/$0.tif" /aux/'
        parallel -j 2 aws s3 cp s3://aux/{}.vrt /aux/ ::: e f
        cat /w/more.txt | xargs -I{} aws s3 cp "s3://aux/{}.tif" /aux/
        """)
    tmpl = {"name": "main", "container": {"image": "x", "command": ["bash", "-c"],
                                          "args": [script, "2025Q2"]}}
    step = _plan([tmpl]).step("main")
    assert sorted(r.uri for r in step.reads if r.uri) == [
        "s3://aux/a.tif", "s3://aux/b.tif", "s3://aux/c.tif", "s3://aux/d.tif",
        "s3://aux/e.vrt", "s3://aux/f.vrt", "s3://ec/raw/2025Q2/",
        "s3://noaa/USW1.csv", "s3://noaa/USW2.csv", "s3://noaa/meta/USW2.json"]
    assert sorted(r.pattern for r in step.reads if r.uri is None) == [
        "s3://aux/${item}.tif", "s3://ec/raw/${Q}/literal/"]


def test_a_global_output_is_another_steps_output() -> None:
    """Round 21: ``{{workflow.outputs.parameters.base-version}}`` (a step's output published
    by ``globalName``) in a location made it a parameter's expression; it is a task output,
    produced by the step that publishes it."""
    main = {"name": "main", "steps": [[{"name": "pick", "template": "pick"}],
                                      [{"name": "train", "template": "train"}]]}
    pick = {"name": "pick", "outputs": {"parameters": [
        {"name": "base", "globalName": "base-version", "valueFrom": {"path": "/tmp/v"}}]},
        "container": {"image": "x", "command": ["pick.sh"]}}
    train = {"name": "train", "container": {"image": "x", "command": ["train"], "args": [
        "--init-from", "s3://models/{{workflow.parameters.fleet}}/"
        "{{workflow.outputs.parameters.base-version}}"]}}
    step = _plan([main, pick, train], arguments={"parameters": [
        {"name": "fleet", "value": "ne"}]}).step("train")
    [r] = step.reads
    assert (r.uri, r.origin, r.producer) == (None, "task-output", "pick")


def test_case_branches_read_loops_padding_and_python_joins() -> None:
    """Round 22 and job round 19: a variable a ``case`` sets in its branches names each
    branch's location (every branch is warmed, as every branch of a condition is); ``while
    read -r split n; ... done <<'EOF'`` over literal lines reads each line's first word;
    ``{00..03}`` keeps its zeros; a heredoc config's keys give its locations' way
    (``report_uri`` is written); ``os.path.join("s3://qc", "m1", "x.csv")`` does not make its
    first part a location of its own; a scheme-less path given ``filesystem=`` an S3 file
    system is on S3; a command line built into a list first and run by name is followed,
    a built location under a flag that says nothing read."""
    script = textwrap.dedent("""\
        case "$0" in
          cotton*) SUB=cotton_knit ;;
          poly*)   SUB=polyester_woven ;;
          *) echo "unknown"; exit 1 ;;
        esac
        aws s3 cp "s3://ref/sub/${SUB}.parquet" /w/
        while read -r split n; do
          aws s3 sync "s3://mri/knee/multicoil_${split}/" "/k/${split}/"
        done <<'EOF'
        train 973
        val 199
        EOF
        for p in {00..01}; do aws s3 cp "s3://raw/batch-${p}.tar" /w/; done
        cat > /tmp/bt.json <<EOF
        {"scored_uri": "s3://lake/scores/w48/", "report_uri": "s3://reports/w48/r.json"}
        EOF
        python -m bt --config /tmp/bt.json
        """)
    tmpl = {"name": "main", "container": {"image": "x", "command": ["bash", "-c"],
                                          "args": [script, "cotton-jersey"]}}
    step = _plan([tmpl]).step("main")
    assert sorted(r.uri for r in step.reads) == [
        "s3://lake/scores/w48/", "s3://mri/knee/multicoil_train/",
        "s3://mri/knee/multicoil_val/", "s3://raw/batch-00.tar", "s3://raw/batch-01.tar",
        "s3://ref/sub/cotton_knit.parquet"]  # ($0 is known: its branch only, round 36)
    assert [w.uri for w in step.writes] == ["s3://reports/w48/r.json"]
    code = textwrap.dedent("""\
        import os, subprocess
        import pandas as pd
        import pyarrow.dataset as ds
        from pyarrow import fs
        pd.DataFrame().to_csv(os.path.join("s3://qc", "m1", "x.csv"))
        t = ds.dataset("ehr/visits/year=2025/", filesystem=fs.S3FileSystem(endpoint_override="x"))
        net = "pv"
        cmd = ["python", "-m", "t", "--weather", f"s3://wx/{net}/2025.zarr",
               "--save-model", "s3://models/pv/"]
        subprocess.run(cmd, check=True)
        """)
    tmpl = {"name": "main", "script": {"image": "x", "command": ["python"], "source": code}}
    step = _plan([tmpl]).step("main")
    assert sorted(r.uri for r in step.reads) == ["s3://ehr/visits/year=2025/",
                                                "s3://wx/pv/2025.zarr"]
    assert sorted(w.uri for w in step.writes) == ["s3://models/pv/", "s3://qc/m1/x.csv"]


def test_round_23_shell_and_python_idioms() -> None:
    """Round 23: ``"/data/$(basename "$src")/"`` made the copy's source unknown; an rclone
    on-the-fly remote with a quoted ``endpoint='http://...'`` named nothing; ``<<< "text"``
    after ``aws s3 cp /dev/stdin s3://...`` made the write a read; ``aws s3api get-object
    --bucket B --key K OUT`` named nothing; ``f"{root}/x"`` with ``root = "s3://era5/land"``
    read the whole root beside the file."""
    script = textwrap.dedent("""\
        for src in "s3://bkt/a/" "s3://bkt/b/"; do
          aws s3 sync "$src" "/data/$(basename "$src")/"
        done
        rclone sync ":s3,provider=Minio,endpoint='http://minio:9000':bkt/models/v1" /m/
        aws s3 cp /dev/stdin "s3://bkt/runs/status.txt" <<< "done"
        aws s3api get-object --bucket bkt --key ref/table.csv /data/table.csv
        aws s3api put-object --bucket bkt --key out/r.json --body /data/r.json
        """)
    tmpl = {"name": "main", "container": {"image": "x", "command": ["bash", "-c"],
                                          "args": [script]}}
    step = _plan([tmpl]).step("main")
    assert sorted(r.uri for r in step.reads) == [
        "s3://bkt/a/", "s3://bkt/b/", "s3://bkt/models/v1", "s3://bkt/ref/table.csv"]
    assert sorted(w.uri for w in step.writes) == ["s3://bkt/out/r.json",
                                                 "s3://bkt/runs/status.txt"]
    code = ('import fsspec\nroot = "s3://era5/land"\n'
            'with fsspec.open(f"{root}/basin/precip.nc", "rb") as f:\n    f.read()\n')
    step = _plan([{"name": "main", "script": {"image": "x", "command": ["python"],
                                              "source": code}}]).step("main")
    assert [r.uri for r in step.reads] == ["s3://era5/land/basin/precip.nc"]


def test_a_while_read_loop_fed_literal_lines_by_a_pipe_reads_each() -> None:
    """Round 22's note: ``printf '%s\\n' vnir swir | while read -r b; do ... "${b}.h5"``
    stayed run-time; the lines are literal, so each band's file is known (a pipe from a
    command whose output only the run knows stays run-time)."""
    words = _uri.tokenize(["bash", "-c", "printf '%s\\n' vnir swir | while read -r b; do\n"
                           '  aws s3 cp "s3://neon/hs/${b}.h5" /w/\ndone\n'
                           "cat /w/list | while read -r x; do aws s3 cp s3://b/$x /w; done"])
    assert [w for w in words if w.startswith("s3://")] == [
        "s3://neon/hs/vnir.h5", "s3://neon/hs/swir.h5", "s3://b/$x"]


def test_a_root_stripped_of_its_slash_in_code_starts_the_file_only() -> None:
    """Round 23's note: ``root = "s3://era5/land/"`` then ``f"{root.rstrip('/')}/basin/x"``
    read the root whole beside the file, and the file with a double slash
    (``land//basin``); ``removesuffix("/")`` likewise."""
    for strip in ("rstrip('/')", "removesuffix('/')", "strip('/')"):
        code = ('import fsspec, xarray as xr\nroot = "s3://era5/land/"\n'
                f'ds = xr.open_zarr(fsspec.get_mapper(f"{{root.{strip}}}/basin/p.zarr"))\n'
                f'with fsspec.open(root.{strip} + "/basin/p.nc") as f:\n    f.read()\n')
        step = _plan([{"name": "main", "script": {"image": "x", "command": ["python"],
                                                  "source": code}}]).step("main")
        assert sorted(r.uri for r in step.reads) == [
            "s3://era5/land/basin/p.nc", "s3://era5/land/basin/p.zarr"], strip


def _script_reads(code: str, env: list[dict] | None = None) -> list[str]:
    step = _plan([{"name": "main", "script": {"image": "x", "command": ["python"],
                                              "source": code, "env": env or []}}]).step("main")
    return sorted(r.uri for r in step.reads)


def test_round_24_python_idioms() -> None:
    """Round 24: a comprehension's list looped over (``for s in shards``, ``range(n)`` with
    ``n = 4``), ``"/".join([...])`` whose head was also read whole, ``"%s" % (x[:7],)``, a
    literal dict looked up by a variable (``SOURCES[kind]``: the other entries were read
    whole), an argparse ``--out`` default read as a location."""
    assert _script_reads(textwrap.dedent("""\
        import s3fs
        fs = s3fs.S3FileSystem()
        root, n = "s3://museum/met", 3
        shards = [f"{root}/shards/images-{i:05d}.tar" for i in range(n)]
        for s in shards:
            with fs.open(s, "rb") as fh:
                fh.read()
        """)) == [f"s3://museum/met/shards/images-0000{i}.tar" for i in range(3)]
    assert _script_reads(textwrap.dedent("""\
        import pyarrow.parquet as pq, pandas as pd
        exchange = "xnas"
        q = pq.read_table("/".join(["s3://ticks-raw", exchange, "quotes"]))
        region, as_of = "northeast", "2025-07-01"
        r = pd.read_csv("s3://beds/rosters/%s/%s.csv" % (region, as_of[:7]))
        SOURCES = {"lab": "s3://brew-lab/gravity", "sensor": "s3://brew-iot/tilt"}
        kind = "sensor"
        t = pq.read_table(f"{SOURCES[kind]}/fv01.parquet")
        """)) == ["s3://beds/rosters/northeast/2025-07.csv", "s3://brew-iot/tilt/fv01.parquet",
                  "s3://ticks-raw/xnas/quotes"]
    assert _script_reads('import argparse, pandas as pd\nap = argparse.ArgumentParser()\n'
                         'ap.add_argument("--out", default="s3://det/")\na = ap.parse_args()\n'
                         'pd.DataFrame().to_parquet(a.out + "x.parquet")\n') == []


def test_round_24_component_inputs_json_and_dict_lookup() -> None:
    """Round 24: a KFP component's JSON config input (``json.loads(cfg)["data"]["x"]``),
    a root renamed (``root = collection_root.removesuffix("/")``) looped over in a
    comprehension, a literal dict looked up by an input's value."""
    step = _component(textwrap.dedent("""\
        def comp(config_json: str, collection_root: str, n: int, kind: str):
            import json, s3fs, pandas as pd
            fs = s3fs.S3FileSystem()
            cfg = json.loads(config_json)
            pd.read_json(cfg["data"]["captions"], lines=True)
            root = collection_root.removesuffix("/")
            for s in [f"{root}/images-{i:05d}.tar" for i in range(n)]:
                fs.open(s, "rb").read()
            SOURCES = {"lab": "s3://brew-lab/gravity", "sensor": "s3://brew-iot/tilt"}
            pd.read_parquet(f"{SOURCES[kind]}/2025-06.parquet")
        """), {"config_json": const('{"data": {"captions": "s3://txt/c.jsonl"}}'),
               "collection_root": const("s3://museum/met/"), "n": const("2"),
               "kind": const("sensor")})
    assert sorted(r.uri for r in step.reads) == [
        "s3://brew-iot/tilt/2025-06.parquet", "s3://museum/met/images-00000.tar",
        "s3://museum/met/images-00001.tar", "s3://txt/c.jsonl"]


def test_round_24_a_steps_env_in_its_script_and_args() -> None:
    """Round 24: a container's env var that holds no location (``BREWERY=north-yard``) was
    not expanded in its script (``${BREWERY}``), nor in its args (``$(BREWERY)``, the
    kubelet's); a root env var spelled out there (``${DATA_ROOT}/x``) was read whole; a
    quoted heredoc that ``envsubst`` fills; ``${ROOT%/}`` of a parameter's value; an
    exported root the script builds on. A location given whole stays the env var's read."""
    script = textwrap.dedent("""\
        export POS_ROOT="s3://chess/positions" VARIANT="standard"
        cat > /tmp/t.tmpl <<'EOF'
        {"model": "s3://brew-models/${BREWERY}/model.json",
         "glob": "${POS_ROOT}/${VARIANT}/*.parquet"}
        EOF
        envsubst < /tmp/t.tmpl > /tmp/t.json
        aws s3 cp "s3://brew-lab/recipes/${BREWERY}/active.yaml" /tmp/a.yaml
        aws s3 cp "${DATA_ROOT}/north-yard/x.yaml" /tmp/x.yaml
        ROOT="{{workflow.parameters.root}}"
        aws s3 cp "${ROOT%/}/base/model.pt" /tmp/model.pt
        python eval.py --holdout "$HOLDOUT_URI"
        """)
    env = [{"name": "BREWERY", "value": "north-yard"},
           {"name": "DATA_ROOT", "value": "s3://brew-lab/recipes"},
           {"name": "HOLDOUT_URI", "value": "s3://risk/holdout.parquet"}]
    tmpl = {"name": "main", "container": {"image": "x", "command": ["bash", "-c"],
                                          "args": [script], "env": env}}
    step = _plan([tmpl], arguments={"parameters": [{"name": "root",
                                                    "value": "s3://ticks/deeplob/"}]}
                 ).step("main")
    reads = sorted((r.uri, r.origin) for r in step.reads)
    assert reads == [
        ("s3://brew-lab/recipes/north-yard/active.yaml", "constant"),
        ("s3://brew-lab/recipes/north-yard/x.yaml", "constant"),
        ("s3://brew-models/north-yard/model.json", "constant"),
        ("s3://chess/positions/standard/*.parquet", "constant"),
        ("s3://risk/holdout.parquet", "env"),
        ("s3://ticks/deeplob/base/model.pt", "parameter-expression")], reads
    args = {"name": "main", "container": {
        "image": "x", "command": ["python", "eval.py"],
        "args": ["--recipes=s3://brew-lab/recipes/$(BREWERY)/active.yaml",
                 "--holdout=$(HOLDOUT_URI)"], "env": [env[0], env[2]]}}
    assert sorted((r.uri, r.origin) for r in _plan([args]).step("main").reads) == [
        ("s3://brew-lab/recipes/north-yard/active.yaml", "constant"),
        ("s3://risk/holdout.parquet", "env")]


def test_round_25_python_idioms() -> None:
    """Round 25: ``itertools.product`` of literal lists, ``"a,b".split(",")`` looped over,
    ``to_zarr`` (a write), a YAML string with ``\\n`` escapes (no ``stats.json\\nthreshold:``),
    ``TEMPLATE.replace``/``.format(**d)``/``.format_map({**d, ...})``, ``"{}/x".format(root)``
    (no root read whole), a helper of two statements, ``removeprefix("s3://")`` into a
    PurePosixPath for s3fs, dataclass and NamedTuple defaults."""
    assert _script_reads(textwrap.dedent("""\
        import itertools, os, json, yaml, fsspec, s3fs, pandas as pd, xarray as xr
        from dataclasses import dataclass
        from pathlib import PurePosixPath
        from typing import NamedTuple
        for shift, wave in itertools.product(["am", "pm"], ["single"]):
            pd.read_parquet(f"s3://b/prof/{shift}/{wave}.parquet")
        machines = "d3d,east".split(",")
        for m in machines:
            pd.read_parquet(os.path.join("s3://efit", m, "s.parquet"))
        xr.Dataset().to_zarr("s3://b/feat/c.zarr", mode="w")
        cfg = yaml.safe_load('\\nnorm: s3://b/norm/stats.json\\nthreshold: 0.4\\n')
        fsspec.open(cfg["norm"]).open()
        T = "s3://b/layouts/{SITE}/t.npz"
        fsspec.open(T.replace("{SITE}", "reno")).open()
        paths = {"root": "s3://b/wds", "city": "lis"}
        pd.read_parquet("{root}/{city}/l.parquet".format(**paths))
        pd.read_parquet("{root}/{city}/{split}/m.parquet".format_map({**paths, "split": "val"}))
        root = "s3://b/r"
        pd.read_parquet("{}/x.parquet".format(root))
        def month_glob(r, seg):
            base = f"{r}/{seg}"
            return f"{base}/month=07/*.parquet"
        pd.read_parquet(month_glob(root, "res"))
        fs = s3fs.S3FileSystem()
        spoc = PurePosixPath("s3://tess/spoc/".removeprefix("s3://"))
        fs.glob(str(spoc / "s61" / "*_lc.fits"))
        @dataclass
        class Cfg:
            cadence: str = "120s"
        class Promo(NamedTuple):
            bucket: str = "merch"
            key: str = "p/w.parquet"
        c, p = Cfg(), Promo()
        fs.glob(str(spoc / c.cadence / "*.fits"))
        pd.read_parquet(f"s3://{p.bucket}/{p.key}")
        """)) == sorted([
            "s3://b/prof/am/single.parquet", "s3://b/prof/pm/single.parquet",
            "s3://efit/d3d/s.parquet", "s3://efit/east/s.parquet", "s3://b/norm/stats.json",
            "s3://b/layouts/reno/t.npz", "s3://b/wds/lis/l.parquet",
            "s3://b/wds/lis/val/m.parquet", "s3://b/r/x.parquet",
            "s3://b/r/res/month=07/*.parquet", "s3://tess/spoc/s61/*_lc.fits",
            "s3://tess/spoc/120s/*.fits", "s3://merch/p/w.parquet"])


def test_round_25_shell_idioms_and_overrides() -> None:
    """Round 25: ``make train DATA=... OUT=...`` and ``trainer.output_dir=...`` go by their
    key (the output was read); ``printf -v``; ``read -r A B <<< "..."``; ``IFS=, read -ra``;
    ``mapfile -t`` over a heredoc."""
    script = textwrap.dedent("""\
        make train DATA=s3://b/features.parquet OUT=s3://b/models/r25/
        python t.py data.root=s3://b/f2.parquet trainer.output_dir=s3://b/models/r26/
        printf -v ANN "s3://b/%s/export_%s.zip" "lisbon" "v7"
        aws s3 cp "$ANN" /tmp/
        read -r BUCKET PREFIX <<< "bkt data/v1"
        aws s3 cp "s3://${BUCKET}/${PREFIX}/index.csv" /tmp/index.csv
        IFS=, read -ra ZONES <<< "A1,A2"
        for z in "${ZONES[@]}"; do aws s3 cp "s3://b/zone=${z}/bins.csv" /tmp/; done
        mapfile -t REFS <<'END'
        a/x.parquet
        END
        for ref in "${REFS[@]}"; do aws s3 cp "s3://r/${ref}" /tmp/; done
        """)
    step = _plan([{"name": "main", "container": {"image": "x", "command": ["bash", "-c"],
                                                 "args": [script]}}]).step("main")
    assert sorted(r.uri for r in step.reads) == [
        "s3://b/f2.parquet", "s3://b/features.parquet", "s3://b/lisbon/export_v7.zip",
        "s3://b/zone=A1/bins.csv", "s3://b/zone=A2/bins.csv", "s3://bkt/data/v1/index.csv",
        "s3://r/a/x.parquet"]
    assert sorted(w.uri for w in step.writes) == ["s3://b/models/r25/", "s3://b/models/r26/"]


def test_round_26_idioms() -> None:
    """Round 26: a step env var holding a loop item's value (``TABLE={{inputs...}}``) in its
    script; ``posixpath.join`` of a loop item in a script (the second item was lost, the root
    read whole); CloudPath/UPath ``read_text``/``download_to``; ``os.path.dirname`` of a
    constant or an input; a literal dict's ``.items()`` with non-text values and a JSON dict
    input's ``.items()``; ``S3Path.from_uri(f"...").write_bytes()`` a write (was a read)."""
    loop = {"name": "main", "dag": {"tasks": [{
        "name": "step", "template": "step",
        "arguments": {"parameters": [{"name": "table", "value": "{{item}}"}]},
        "withItems": ["trips", "events"]}]}}
    step_t = {"name": "step", "inputs": {"parameters": [{"name": "table"}]},
              "script": {"image": "x", "command": ["bash"],
                         "source": 'aws s3 cp "s3://bkt/bronze/${TABLE}/m.json" /tmp/\n',
                         "env": [{"name": "TABLE", "value": "{{inputs.parameters.table}}"}]}}
    plan = _plan([loop, step_t])
    assert sorted(r.uri for r in plan.step("step").reads) == [
        "s3://bkt/bronze/events/m.json", "s3://bkt/bronze/trips/m.json"]
    py_t = {"name": "step", "inputs": {"parameters": [{"name": "table"}]},
            "script": {"image": "x", "command": ["python"], "source": (
                'import posixpath, pandas as pd\nds = "{{inputs.parameters.table}}"\n'
                'pd.read_parquet(posixpath.join("s3://bkt/raw", ds, "s.parquet"))\n')}}
    assert sorted(r.uri for r in _plan([loop, py_t]).step("step").reads) == [
        "s3://bkt/raw/events/s.parquet", "s3://bkt/raw/trips/s.parquet"]
    assert _script_reads(textwrap.dedent("""\
        import os, pandas as pd
        from cloudpathlib import CloudPath
        from upath import UPath
        (CloudPath("s3://bkt/models") / "chronos").download_to("/tmp/m")
        terms = (UPath("s3://bkt/ref") / "glossary" / "terms.csv").read_text()
        holdout = "s3://bkt/holdout/2025-05/part-0.parquet"
        pd.read_csv(os.path.join(os.path.dirname(holdout), "calib.csv"))
        for name, w in {"spider": 0.5, "bird": 0.3}.items():
            pd.read_json(f"s3://bkt/sft/{name}/train.jsonl", lines=True)
        """)) == ["s3://bkt/holdout/2025-05/calib.csv", "s3://bkt/models/chronos",
                  "s3://bkt/ref/glossary/terms.csv", "s3://bkt/sft/bird/train.jsonl",
                  "s3://bkt/sft/spider/train.jsonl"]
    step = _component(textwrap.dedent("""\
        def comp(root: str, mix: str, holdout_uri: str, season: str):
            import json, os, posixpath, pandas as pd
            from s3path import S3Path
            for name, w in json.loads(mix).items():
                pd.read_json(posixpath.join(root, name, "train.jsonl"), lines=True)
            pd.read_csv(os.path.join(os.path.dirname(holdout_uri), "calib.csv"))
            S3Path.from_uri(f"s3://models/{season}/best.pt").write_bytes(b"")
        """), {"root": const("s3://sft"), "mix": const('{"spider": 0.5, "bird": 0.5}'),
               "holdout_uri": const("s3://h/2025-05/p.parquet"), "season": const("q2")})
    assert sorted(r.uri for r in step.reads) == [
        "s3://h/2025-05/calib.csv", "s3://sft/bird/train.jsonl", "s3://sft/spider/train.jsonl"]
    assert [w.uri for w in step.writes] == ["s3://models/q2/best.pt"]


def test_round_27_env_copy_source_and_a_runtime_write_in_code() -> None:
    """Round 27: ``aws s3 sync "$BASE_MODEL" /tmp/base/`` (a root-named var used whole) lost
    its origin ``env``; a write a program builds from an item of a loop over another step's
    output was dropped (its read was listed)."""
    script = 'aws s3 sync "$BASE_MODEL" /tmp/base/\n'
    tmpl = {"name": "main", "container": {
        "image": "x", "command": ["bash", "-c"], "args": [script],
        "env": [{"name": "BASE_MODEL", "value": "s3://bkt/models/base/"}]}}
    assert [(r.uri, r.origin) for r in _plan([tmpl]).step("main").reads] == [
        ("s3://bkt/models/base/", "env")]
    consumer = {"name": "use", "inputs": {"parameters": [{"name": "batch"}]},
                "script": {"image": "x", "command": ["python"], "source": (
                    'import pandas as pd\nb = "{{inputs.parameters.batch}}"\n'
                    'df = pd.read_json(f"s3://bkt/in/{b}.jsonl", lines=True)\n'
                    'df.to_json(f"s3://bkt/out/{b}.jsonl")\n')}}
    step = _fed_by_output(consumer, "batch")
    assert [w.pattern for w in step.writes] == ["s3://bkt/out/{{inputs.parameters.batch}}.jsonl"]
    assert [r.pattern for r in step.reads] == ["s3://bkt/in/{{inputs.parameters.batch}}.jsonl"]


def test_round_28_a_programs_paths_narrow_a_mount_and_mkdir_reads_nothing() -> None:
    """Round 28: a program's own paths under a mounted claim (``pd.read_parquet(
    "/data/lab/r.parquet")``, ``df.to_parquet("/data/out.parquet")``) did not narrow the mount,
    which was read whole (a write-only program too); ``mkdir -p /data/raw`` before a copy
    into it made the folder a read."""
    def reads(container: dict) -> list[str]:
        tmpl = {"name": "s", **container}
        doc = {**_ARGO, "spec": {"entrypoint": "s", "templates": [tmpl], "volumes": [
            {"name": "d", "persistentVolumeClaim": {"claimName": "scratch"}}]}}
        [plan] = pipeline.analyze_documents([doc], pvc_map={"scratch": "s3://pv-bkt/scratch"},
                                            source="w")
        return sorted(r.uri for r in plan.step("s").reads)

    mount = [{"name": "d", "mountPath": "/data"}]
    assert reads({"script": {"image": "x", "command": ["python"], "volumeMounts": mount,
                             "source": 'import pandas as pd\n'
                                       'pd.read_parquet("/data/lab/r.parquet")\n'}}) == [
        "s3://pv-bkt/scratch/lab/r.parquet"]
    assert reads({"container": {"image": "x", "command": ["python", "-c"], "volumeMounts": mount,
                                "args": ['import pandas as pd\npd.read_csv("s3://b/x.csv")'
                                         '.to_parquet("/data/out.parquet")\n']}}) == [
        "s3://b/x.csv"]
    assert reads({"container": {"image": "x", "command": ["sh", "-c"], "volumeMounts": mount,
                                "args": ["mkdir -p /data/raw && aws s3 sync s3://b/raw/ "
                                         "/data/raw/ && ls /data/raw"]}}) == ["s3://b/raw/"]
    # round 29: an input's value in the path, as the run has it (not the placeholder)
    assert reads({"inputs": {"parameters": [{"name": "season", "value": "2025-q2"}]},
                  "script": {"image": "x", "command": ["python"], "volumeMounts": mount,
                             "source": 'import glob\nseason = "{{inputs.parameters.season}}"\n'
                                       'glob.glob(f"/data/artisan/{season}/*.alog")\n'}}) == [
        "s3://pv-bkt/scratch/artisan/2025-q2/*.alog"]


def test_a_noun_that_begins_like_a_write_verb_is_not_a_write_flag() -> None:
    """``--uploads s3://lake/uploads/2025-11/`` (what users uploaded: the job's input, blind
    job round 26), ``--outliers``, ``--outcomes``: not rule 2's write flags, which
    ``--upload-to``, ``--outdir``, ``--out``, ``--outputs`` and ``--output_path`` stay."""
    for flag in ("--uploads", "--uploaded-files", "--outliers", "--outcomes_csv"):
        assert _uri.name_direction(flag) is None, flag
    for flag in ("--upload-to", "--upload_dir", "--outdir", "--out", "--out-dir",
                 "--outfile", "--outputs", "--output_path", "--save-path", "--export"):
        assert _uri.name_direction(flag) == "write", flag
    toks = ["python", "near_dup.py", "--uploads", "s3://lake/uploads/2025-11/",
            "--report", "s3://idx/reports/2025-11/"]
    assert _uri.classify_tokens(toks) == {3: None, 5: "write"}  # neutral: read by rule 7


def test_a_components_path_under_a_mount_built_from_its_input_narrows_the_mount() -> None:
    """Round 30: ``pd.read_csv(f"/ref/icd10/map_{version}.csv")`` in a KFP v2 component
    (an input's value in a path under a mounted claim; a loop item's too) left the claim read
    whole; as a literal path, an argument, or an Argo script's, it narrowed it."""
    def reads(code: str, inputs: dict[str, Any], loop: list[str] | None = None) -> list[str]:
        tasks: dict[str, Any] = {"read-ref": {
            "taskInfo": {"name": "read-ref"}, "componentRef": {"name": "comp-read-ref"},
            "inputs": {"parameters": inputs}}}
        loops: dict[str, Any] = {}
        if loop is not None:  # dsl.ParallelFor over a literal list, as kfp 2 compiles it
            loops = {"comp-for-loop-1": {"dag": {"tasks": tasks}, "inputDefinitions": {
                "parameters": {"pipelinechannel--loop-item": {"parameterType": "STRING"}}}}}
            tasks = {"for-loop-1": {
                "taskInfo": {"name": "for-loop-1"}, "componentRef": {"name": "comp-for-loop-1"},
                "parameterIterator": {"itemInput": "pipelinechannel--loop-item",
                                      "items": {"raw": json.dumps(loop)}}}}
        spec = {"pipelineInfo": {"name": "p"}, "schemaVersion": "2.1.0",
                "sdkVersion": "kfp-2.17.3", "root": {"dag": {"tasks": tasks}},
                "components": {**loops, "comp-read-ref": {
                    "executorLabel": "exec-read-ref",
                    "inputDefinitions": {"parameters": {
                        k: {"parameterType": "STRING"} for k in inputs}}}},
                "deploymentSpec": {"executors": {"exec-read-ref": {"container": {
                    "image": "python:3.11",
                    "command": ["sh", "-ec", "python3 -m kfp.dsl.executor_main", code],
                    "args": ["--executor_input", "{{$}}", "--function_to_execute",
                             "read_ref"]}}}}}
        platform = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {
            "exec-read-ref": {"pvcMount": [{"constant": "ehr-ref", "mountPath": "/ref"}]}}}}}}
        [plan] = pipeline.analyze_documents([spec, platform], source="p.yaml",
                                            pvc_map={"ehr-ref": "s3://pv-bkt/reference"})
        return sorted(r.uri for r in plan.step("read-ref").reads)

    code = ('import pandas as pd\ndef read_ref(version: str):\n'
            '    pd.read_csv(f"/ref/icd10/map_{version}.csv")\n')
    version = {"version": {"runtimeValue": {"constant": "v2025"}}}
    assert reads(code, version) == ["s3://pv-bkt/reference/icd10/map_v2025.csv"]
    code = ('import glob\ndef read_ref(site: str):\n'
            '    glob.glob(f"/ref/sites/{site}/*.parquet")\n')
    site = {"site": {"componentInputParameter": "pipelinechannel--loop-item"}}
    assert reads(code, site, loop=["north", "south"]) == [
        "s3://pv-bkt/reference/sites/north/*.parquet", "s3://pv-bkt/reference/sites/south/*.parquet"]
    # a local path that is under no mount narrows nothing and is no dataset
    code = ('import pandas as pd\ndef read_ref(version: str):\n'
            '    pd.read_csv(f"/tmp/{version}.csv")\n')
    assert reads(code, version) == ["s3://pv-bkt/reference/"]


def test_a_pvc_mapping_with_a_bad_bucket_name_is_refused() -> None:
    """Round 30: ``--pvc lib=s3://pv/lib`` (a 2-letter bucket) or ``s3://Bad_Bucket/lib``
    was planned and listed to warm; ``warm`` refused it later. Refused at once, naming it."""
    for uri, bad in (("s3://pv/lib", "'pv'"), ("s3://Bad_Bucket/lib", "'Bad_Bucket'")):
        with pytest.raises(pipeline.PipelineError, match=f"--pvc lib={uri}: invalid bucket "
                                                         f"name {bad}"):
            pipeline.parse_pvc_map({"lib": uri})
    assert pipeline.parse_pvc_map({"lib": "s3a://olive-ref/lib"}) == {
        "lib": "s3a://olive-ref/lib"}


def test_round_31_loops_items_records_and_run_time_names() -> None:
    """Round 31: a path under a mount built in a loop over a literal list read the whole
    claim (a loop that only writes there too); a literal dict's ``.items()`` whose values
    are variables lost every location built from its keys; a location packed into a
    namedtuple (KFP's way to return several outputs) was read; a script's run-time
    location showed another run-time placeholder of the script."""
    def reads(source: str) -> list[str]:
        tmpl = {"name": "s", "script": {"image": "x", "command": ["python"], "source": source,
                                        "volumeMounts": [{"name": "d", "mountPath": "/ref"}]}}
        doc = {**_ARGO, "spec": {"entrypoint": "s", "templates": [tmpl], "volumes": [
            {"name": "d", "persistentVolumeClaim": {"claimName": "splits"}}]}}
        [plan] = pipeline.analyze_documents([doc], pvc_map={"splits": "s3://rx-data/pvc"},
                                            source="w")
        return sorted(r.uri for r in plan.step("s").reads)

    assert reads('import pandas as pd\nfor split in ["train", "val"]:\n'
                 '    pd.read_parquet(f"/ref/splits/{split}.parquet")\n') == [
        "s3://rx-data/pvc/splits/train.parquet", "s3://rx-data/pvc/splits/val.parquet"]
    assert reads('import pandas as pd\ndf = pd.read_csv("s3://rx-data/index.csv")\n'
                 'for split in ["train", "val"]:\n'
                 '    df.to_parquet(f"/ref/splits/{split}.parquet")\n') == [
        "s3://rx-data/index.csv"]

    code = textwrap.dedent('''\
        import pandas as pd
        def load(run_id: str):
            tr, va = 10, 20
            for split, n_rows in {"train": tr, "val": va}.items():
                pd.read_parquet(f"s3://rx-data/splits/{run_id}/{split}.parquet").head(n_rows)
        ''')
    step = _component(code, {"run_id": Val(values=["r7"], origin="pipeline-parameter")})
    assert sorted(r.uri for r in step.reads) == ["s3://rx-data/splits/r7/train.parquet",
                                                 "s3://rx-data/splits/r7/val.parquet"]

    for ret in ('namedtuple("TrainOut", ["f1", "model_uri"])(f1, uri)',
                'Outputs(f1, uri)'):
        code = textwrap.dedent(f'''\
            from collections import namedtuple
            from typing import NamedTuple
            Outputs = NamedTuple("Outputs", [("f1", float), ("model_uri", str)])
            def train(run: str):
                f1 = 0.9
                uri = f"s3://hvac-models/afdd/{{run}}/model.pt"
                return {ret}
            ''')
        step = _component(code, {"run": Val(values=["v4"], origin="pipeline-parameter")})
        assert step.reads == [], ret

    audit = {"name": "main", "script": {"image": "x", "command": ["python"], "source": (
        'import pandas as pd\nprint("status={{workflow.status}}")\n'
        'pd.read_csv("s3://ctm-audit/runs/{{workflow.name}}/summary.csv")\n')}}
    assert [r.pattern for r in _plan([audit]).step("main").reads] == [
        "s3://ctm-audit/runs/{{workflow.name}}/summary.csv"]


def test_round_32_team_habits_save_to_disk_argparse_defaults_and_numbers() -> None:
    """Round 32: ``ds.save_to_disk("s3://...")`` was read (and warmed); an argparse
    option's default in an f-string (``f"s3://b/{args.week}/x"``) lost the location; an
    f-string field holding a number constant (``YEAR = 2025``, ``{T:.2f}``) lost it too;
    with ``--pvc`` an ``--out`` default under the mount was read. A counter bound again in
    a loop (``n += 1``) is no constant; ``torch.save(obj, path)`` writes its second."""
    def flow(code: str) -> dict[str, str]:
        f = _code.analyze(textwrap.dedent(code))
        assert f is not None
        return dict(f.lits)

    assert flow('''\
        from datasets import load_dataset
        ds = load_dataset("parquet", data_files="s3://rp-raw/train/*.parquet")
        ds.save_to_disk("s3://rp-public/hf/train-v2")
        ''') == {"s3://rp-raw/train/*.parquet": "read", "s3://rp-public/hf/train-v2": "write"}
    assert flow('''\
        import argparse
        import polars as pl
        p = argparse.ArgumentParser()
        p.add_argument("--week", default="2025-W46")
        args = p.parse_args()
        week = args.week
        pl.read_parquet(f"s3://rp-staging/{args.week}/marks.parquet")
        pl.read_parquet(f"s3://rp-staging/{week}/owners.parquet")
        ''') == {"s3://rp-staging/2025-W46/marks.parquet": "read",
                 "s3://rp-staging/2025-W46/owners.parquet": "read"}
    assert flow('''\
        import pandas as pd
        import torch
        YEAR = 2025
        T = 0.83
        pd.read_parquet(f"s3://b/y={YEAR}/t={T:.1f}/x.parquet")
        torch.save({"w": 1}, f"s3://b/models/{YEAR}/m.pt")
        n = 0
        for _ in range(3):
            pd.read_parquet(f"s3://b/part-{n}.parquet")
            n += 1
        ''') == {"s3://b/y=2025/t=0.8/x.parquet": "read", "s3://b/models/2025/m.pt": "write"}

    source = ('import argparse\nimport pandas as pd\np = argparse.ArgumentParser()\n'
              'p.add_argument("--src", default="/work/in/marks.parquet")\n'
              'p.add_argument("--out", default="/work/emb/words.parquet")\n'
              'args = p.parse_args()\npd.read_parquet(args.src).to_parquet(args.out)\n')
    tmpl = {"name": "s", "script": {"image": "x", "command": ["python"], "source": source,
                                    "volumeMounts": [{"name": "w", "mountPath": "/work"}]}}
    doc = {**_ARGO, "spec": {"entrypoint": "s", "templates": [tmpl], "volumes": [
        {"name": "w", "persistentVolumeClaim": {"claimName": "tm-work"}}]}}
    [plan] = pipeline.analyze_documents([doc], pvc_map={"tm-work": "s3://tm-scratch/work"},
                                        source="w")
    assert [r.uri for r in plan.step("s").reads] == ["s3://tm-scratch/work/in/marks.parquet"]


def test_round_33_data_engineering_writers_spark_and_handed_dicts() -> None:
    """Round 33: ``spark-submit --conf spark.eventLog.dir=s3a://...`` warmed the history
    folder; ``tf.io.TFRecordWriter``, Ray Data's and polars' other writers were reads; a
    location built in a literal dict handed on (``fn_constructor_kwargs={"model_root":
    f"s3://..."}``) was dropped; ``output = mlflow.pyfunc.load_model("s3://...")`` was a
    write by its variable's name; ``spark.read.parquet(*[...])`` read nothing; with ``--pvc``
    a file the step copies into the claim and then reads was read from the claim."""
    def flow(code: str) -> _code.Flow:
        f = _code.analyze(textwrap.dedent(code))
        assert f is not None
        return f

    f = flow('''\
        import mlflow, polars as pl, ray, tensorflow as tf
        from pyspark.sql import SparkSession
        DAYS = ["2025-11-30", "2025-12-01"]
        spark = SparkSession.builder.getOrCreate()
        df = spark.read.parquet(*[f"s3a://rp-in/dt={d}/" for d in DAYS])
        with tf.io.TFRecordWriter("s3://rp-tfrec/eval.tfrecord") as w:
            w.write(b"")
        ds = ray.data.read_parquet("s3://rp-in/c/")
        ds.write_json("s3://rp-out/json/")
        ds.write_webdataset("s3://rp-out/wds/")
        pl.read_parquet("s3://rp-in/x.parquet").write_delta("s3://rp-out/delta/")
        output = mlflow.pyfunc.load_model("s3://rp-models/prod/")
        ''')
    assert f.lits == {
        "s3a://rp-in/dt=2025-11-30/": "read", "s3a://rp-in/dt=2025-12-01/": "read",
        "s3://rp-tfrec/eval.tfrecord": "write", "s3://rp-in/c/": "read",
        "s3://rp-out/json/": "write", "s3://rp-out/wds/": "write",
        "s3://rp-in/x.parquet": "read", "s3://rp-out/delta/": "write",
        "s3://rp-models/prod/": "read"}
    f = flow('''\
        import requests
        def run(day: str):
            scored = feats.map_batches(P, fn_constructor_kwargs={
                "model_root": f"s3://rp-models/{day}/"}, batch_size=64)
            requests.post("https://hooks/x", json={"text": f"done s3://rp-out/{day}/"})
        ''')
    assert [p for p, _ in f.built] == [("s3://rp-models/", ("param", "day"), "/")]

    toks = ["spark-submit", "--conf", "spark.eventLog.dir=s3a://rp-history/etl/",
            "local:///opt/etl.py", "--input", "s3a://rp-lake/raw/", "--output",
            "s3a://rp-lake/clean/"]
    assert _uri.classify_tokens(toks) == {2: "write", 5: "read", 7: "write"}

    script = ("set -euo pipefail\naws s3 cp s3://rp-cms/a.jsonl.gz /work/a.jsonl.gz\n"
              "python -m p --articles /work/a.jsonl.gz --labels /work/labels.csv\n")
    tmpl = {"name": "s", "container": {
        "image": "x", "command": ["bash", "-c"], "args": [script],
        "volumeMounts": [{"name": "w", "mountPath": "/work"}]}}
    doc = {**_ARGO, "spec": {"entrypoint": "s", "templates": [tmpl], "volumes": [
        {"name": "w", "persistentVolumeClaim": {"claimName": "work"}}]}}
    [plan] = pipeline.analyze_documents([doc], pvc_map={"work": "s3://pvc-bkt/work"},
                                        source="w")
    assert sorted(r.uri for r in plan.step("s").reads) == [
        "s3://pvc-bkt/work/labels.csv", "s3://rp-cms/a.jsonl.gz"]


def test_round_34_a_scripts_json_list_parameter_and_a_withparam_typo() -> None:
    """Round 34: a loop over ``json.loads('{{workflow.parameters.lanes}}')`` in a script, and
    Hera's ``try: lanes = json.loads(r'''...''') except: lanes = r'''...'''`` for a list
    input, read nothing; a ``withParam`` naming no task was planned (exit 0) where the same
    typo in ``depends`` is refused."""
    for source in (
            "import json\nimport pandas as pd\n"
            "lanes = json.loads('{{workflow.parameters.lanes}}')\nfor lane in lanes:\n    pd.read_parquet(f's3://rp-lanes/{lane}/d.parquet')\n",
            "import json\ntry: lanes = json.loads(r'''{{workflow.parameters.lanes}}''')\n"
            "except: lanes = r'''{{workflow.parameters.lanes}}'''\nimport pandas as pd\n"
            "for lane in lanes:\n    pd.read_parquet(f's3://rp-lanes/{lane}/d.parquet')\n"):
        main = {"name": "main", "script": {"image": "x", "command": ["python"],
                                           "source": source}}
        plan = _plan([main], arguments={"parameters": [{"name": "lanes",
                                                         "value": '["a", "b"]'}]})
        assert sorted(r.uri for r in plan.step("main").reads) == [
            "s3://rp-lanes/a/d.parquet", "s3://rp-lanes/b/d.parquet"], source
    dag = {"name": "main", "dag": {"tasks": [
        {"name": "list-parts", "template": "c"},
        {"name": "sync", "template": "c", "depends": "list-parts",
         "withParam": "{{tasks.list-partz.outputs.result}}"}]}}
    c = {"name": "c", "container": {"image": "x", "command": ["true"]}}
    with pytest.raises(pipeline.PipelineError, match=r"dag.tasks\[sync\].withParam: unknown "
                                                     r"task 'list-partz'"):
        _plan([dag, c])


def test_an_output_artifact_with_its_own_s3_place_is_a_write() -> None:
    """Round 34: ``outputs.artifacts`` with ``s3: {bucket, key}`` (``archive: none``) were not
    listed as writes, so a state file a step reads and writes back at one key was warmed
    as a read; it is unknown now, and a plain output artifact a write."""
    state = {"name": "s3", "s3": {"bucket": "rp-state", "key": "watermarks/latest.json"}}
    main = {"name": "main", "inputs": {"artifacts": [{**state, "path": "/in/state.json"}]},
            "outputs": {"artifacts": [
                {**state, "path": "/out/state.json", "archive": {"none": {}}},
                {"name": "report", "path": "/out/r.html", "archive": {"none": {}},
                 "s3": {"bucket": "rp-reports", "key": "daily/{{workflow.parameters.day}}.html"}}]},
            "container": {"image": "x", "command": ["python", "-m", "update"]}}
    step = _plan([main], arguments={"parameters": [{"name": "day", "value": "2025-12-03"}]}
                 ).step("main")
    assert step.reads == []
    assert [w.uri for w in step.writes] == ["s3://rp-reports/daily/2025-12-03.html"]
    assert [u.uri for u in step.unknown] == ["s3://rp-state/watermarks/latest.json"]


def test_kfp_run_placeholders_are_the_runs_not_unresolved() -> None:
    """Round 34: a location holding ``dsl.PIPELINE_JOB_NAME_PLACEHOLDER``
    (``{{$.pipeline_job_name}}``) was ``unresolved``; it is known when the run starts, as
    Argo's ``{{workflow.name}}`` is, and a parameter's expression with it keeps that label."""
    spec = {"pipelineInfo": {"name": "p"}, "schemaVersion": "2.1.0",
            "root": {"dag": {"tasks": {"reg": {
                "taskInfo": {"name": "reg"}, "componentRef": {"name": "comp-reg"},
                "inputs": {"parameters": {
                    "run": {"runtimeValue": {"constant": "{{$.pipeline_job_name}}"}}}}}}}},
            "components": {"comp-reg": {"executorLabel": "exec-reg", "inputDefinitions": {
                "parameters": {"run": {"parameterType": "STRING"}}}}},
            "deploymentSpec": {"executors": {"exec-reg": {"container": {
                "image": "x", "command": ["aws", "s3", "cp"],
                "args": ["s3://models/{{$.inputs.parameters['run']}}/m.onnx", "/m/"]}}}}}
    [plan] = pipeline.analyze_documents([spec], source="p.yaml")
    [r] = plan.step("reg").reads
    assert r.uri is None and r.origin == "workflow-runtime", r


def test_round_36_a_case_on_a_known_word_and_a_listing_read_one_object_a_line() -> None:
    """Blind round 36: ``case "{{workflow.parameters.kit}}" in v4) ...;; v5) ...;; esac``
    read every branch though the parameter's value picks one (now only that one, also with
    ``--param``-style overrides and a script's own known variable; a word only the run knows
    still reads every branch); ``aws s3 ls "$P" | awk ... | while read -r f; do aws s3 cp
    "$P$f" ...`` was a run-time read beside an unknown folder (each object the listing names
    is read: the folder)."""
    case = textwrap.dedent("""\
        case "{{workflow.parameters.kit}}" in
          v4) SRC="s3://calib/rig-v4/" ;;
          v5|v6) SRC="s3://calib/rig-v5/" ;;
          *) SRC="s3://calib/default/" ;;
        esac
        aws s3 cp --recursive "$SRC" /calib/
        """)
    tmpl = {"name": "main", "script": {"image": "x", "command": ["bash"], "source": case}}
    for kit, want in (("v5", ["s3://calib/rig-v5/"]), ("v6", ["s3://calib/rig-v5/"]),
                      ("v9", ["s3://calib/default/"]), ("v4", ["s3://calib/rig-v4/"])):
        plan = _plan([tmpl], arguments={"parameters": [{"name": "kit", "value": kit}]})
        assert sorted(r.uri for r in plan.step("main").reads) == want, kit
    words = _shell.script_words(case.replace('"{{workflow.parameters.kit}}"', '"$KIT"'))
    assert {w for w in words if w.startswith("s3://")} == {
        "s3://calib/rig-v4/", "s3://calib/rig-v5/", "s3://calib/default/"}  # run-time word
    words = _shell.script_words(case.replace('"{{workflow.parameters.kit}}"', '"$KIT"'),
                                {"KIT": "v4"})
    assert {w for w in words if w.startswith("s3://")} == {"s3://calib/rig-v4/"}
    listing = textwrap.dedent("""\
        P="s3://golden/labels/2024-06-14/"
        aws s3 ls "$P" | awk '{print $4}' | grep -v manifest | while read -r f; do
          aws s3 cp "${P}${f}" /tmp/golden/
        done
        aws s3 cp /tmp/report.json s3://golden/reports/
        """)
    tmpl = {"name": "main", "script": {"image": "x", "command": ["bash"], "source": listing}}
    step = _plan([tmpl]).step("main")
    assert [r.uri for r in step.reads] == ["s3://golden/labels/2024-06-14/"]
    assert step.unknown == [] and [w.uri for w in step.writes] == ["s3://golden/reports/"]


def test_round_37_an_exit_hook_inside_a_looped_template_runs_per_item() -> None:
    """Blind round 37: a task's ``hooks.exit`` inside a DAG template that a loop runs lost the
    loop (it runs once per item, as the task it follows does)."""
    main = {"name": "main", "dag": {"tasks": [{
        "name": "per-scene", "template": "scene", "withItems": ["a", "b", "c"],
        "arguments": {"parameters": [{"name": "s", "value": "{{item}}"}]}}]}}
    scene = {"name": "scene", "inputs": {"parameters": [{"name": "s"}]}, "dag": {"tasks": [
        {"name": "work", "template": "work", "hooks": {"exit": {"template": "stats"}}}]}}
    work = _container("work", "--scene", "s3://scenes/{{inputs.parameters.s}}/")
    stats = _container("stats", "--in", "s3://scenes/stats/")
    plan = _plan([main, scene, work, stats])
    hook = plan.step("stats")
    assert hook.exit_handler and hook.depends_on == ["work"]
    assert hook.loop is not None and hook.loop.items == ["a", "b", "c"]


def test_round_39_an_s3_object_by_its_https_address_is_that_object() -> None:
    """Blind round 39: ``curl -o x https://coco-mirror.s3.us-west-2.amazonaws.com/...`` read
    nothing (no read, no unknown). An AWS S3 HTTPS address, virtual-hosted or path-style,
    is now the object it names (``s3://BUCKET/KEY``, the key URL-decoded, a presigned
    query left out), fetched by curl/wget unless the command sends data to it (a write)."""
    assert _uri.find_uris("https://coco-mirror.s3.us-west-2.amazonaws.com/ann/train.json") == [
        "s3://coco-mirror/ann/train.json"]
    assert _uri.find_uris("https://s3.eu-central-1.amazonaws.com/lake/a%2Bb.parquet?X-Amz-"
                          "Signature=abc") == ["s3://lake/a+b.parquet"]
    assert _uri.find_uris("https://lake.s3.dualstack.us-east-1.amazonaws.com/k") == [
        "s3://lake/k"]
    for other in ("https://example.com/lake/x", "https://lake.s3-website-us-east-1.amazonaws."
                  "com/index.html"):
        assert _uri.find_uris(other) == [], other
    # (a key with a blank, once left out, is named whole since round 46: the URL is one word)
    assert _uri.find_uris("https://s3.amazonaws.com/lake/a%20b.txt") == ["s3://lake/a b.txt"]
    # (but not one cut at a bracket: "a%20(5k)/x" would name a wider "a " before it)
    assert _uri.find_uris("https://s3.amazonaws.com/lake/val%20subset%20(5k)/i.tar") == []
    script = ("curl -fsSL -o /tmp/a.json https://coco-mirror.s3.amazonaws.com/ann/val.json && "
              "wget -q https://s3.us-west-2.amazonaws.com/coco-mirror/ann/test.json -O /tmp/b && "
              "curl -T /tmp/r.json https://coco-mirror.s3.amazonaws.com/reports/r.json")
    tmpl = {"name": "main", "container": {"image": "curl", "command": ["sh", "-c", script]}}
    step = _plan([tmpl]).step("main")
    assert sorted(r.uri for r in step.reads) == ["s3://coco-mirror/ann/test.json",
                                                 "s3://coco-mirror/ann/val.json"]
    assert [w.uri for w in step.writes] == ["s3://coco-mirror/reports/r.json"]


def test_round_40_a_containersets_own_volume_mounts_are_its_containers() -> None:
    """Blind round 40: a claim mounted through ``containerSet.volumeMounts`` (every container
    of the set gets it) was not reported; declared on a container of the set, it was."""
    tmpl = {"name": "main", "containerSet": {
        "volumeMounts": [{"name": "shared-data", "mountPath": "/data"}],
        "containers": [
            {"name": "prep", "image": "x", "command": ["python", "prep.py", "--in", "/data/raw"]},
            {"name": "tile", "image": "x", "command": ["python", "tile.py"],
             "dependencies": ["prep"]}]}}
    plan = _plan([tmpl], volumes=[{"name": "shared-data",
                                   "persistentVolumeClaim": {"claimName": "aoi-tiles"}}])
    [mount] = plan.step("main").pvc_mounts
    assert (mount.claim, mount.mount_path) == ("aoi-tiles", "/data")


def _bash_reads(script: str, env: list[dict] | None = None) -> list[str | None]:
    """The reads of one Argo step running *script* with ``bash -c``, the workflow parameter
    ``root`` = ``s3://bkt/logs/clicks``."""
    tmpl = {"name": "main", "container": {"image": "x", "command": ["bash", "-c"],
                                          "args": [textwrap.dedent(script)], "env": env or []}}
    plan = _plan([tmpl], arguments={"parameters": [{"name": "root",
                                                    "value": "s3://bkt/logs/clicks"}]})
    return sorted(r.uri or f"runtime: {r.pattern}" for r in plan.step("main").reads)


def test_round_42_shell_as_real_steps_write_it() -> None:
    """Blind round 42: a variable set inside a loop or a function from its item or argument
    (``SRC="$ROOT/hour=$h/"``, ``printf -v src ... "$1"``, ``local h="$1" src``) read
    nothing; ``${X/old/new}``, ``$(dirname "$M")/x``, a brace range with a prefix in a loop
    (``2024-{04..05}``) and ``tr ' ' '\\n' <<< "$DAYS" | xargs`` were not expanded (a read
    lost, or the wrong object); ``${PRE:-default}`` read the default though the container
    sets PRE; envsubst's list of names (``envsubst '${SRC}'``) was read as a location."""
    root = "{{workflow.parameters.root}}"
    hours = ["s3://bkt/logs/clicks/hour=00/", "s3://bkt/logs/clicks/hour=01/"]
    assert _bash_reads(f"""\
        for h in 00 01; do
          SRC="{root}/hour=$h/"
          aws s3 sync "$SRC" /tmp/h/
        done
        """) == hours
    assert _bash_reads(f"""\
        for h in {{00..01}}; do
          printf -v SRC "%s/hour=%s/" "{root}" "$h"
          aws s3 sync "$SRC" "/tmp/h$h/"
        done
        """) == hours
    assert _bash_reads(f"""\
        LOGS="{root}"
        sync_hour() {{
          local h="$1" src
          printf -v src '%s/hour=%s/' "$LOGS" "$h"
          aws s3 sync "$src" "/work/hour=$h/"
        }}
        for h in {{00..01}}; do
          sync_hour "$h" &
        done
        wait
        """) == hours
    # a function's own variable is its own: a loop variable of the same name after it
    assert _bash_reads(f"""\
        fetch() {{
          local layer="$1"
          aws s3 sync "{root}/$layer/" "/tiles/$layer/"
        }}
        for layer in rgb dsm; do
          fetch "$layer"
        done
        """) == ["s3://bkt/logs/clicks/dsm/", "s3://bkt/logs/clicks/rgb/"]
    assert _bash_reads(f"""\
        ROOT="{root}"
        aws s3 cp --recursive "${{ROOT/clicks/impressions}}/" /tmp/impr/
        """) == ["s3://bkt/logs/impressions/"]
    assert _bash_reads(f"""\
        M="{root}/model.tar.gz"
        aws s3 cp "$(dirname "$M")/calibration.json" /tmp/calibration.json
        aws s3 cp "s3://bkt/models/$(basename "$M" .tar.gz).json" /tmp/m.json
        """) == ["s3://bkt/logs/clicks/calibration.json", "s3://bkt/models/model.json"]
    assert _bash_reads(f"""\
        for m in 2024-{{04..05}}; do
          aws s3 cp "{root}/month=$m/load.parquet" /tmp/
        done
        """) == ["s3://bkt/logs/clicks/month=2024-04/load.parquet",
                 "s3://bkt/logs/clicks/month=2024-05/load.parquet"]
    assert _bash_reads(f"""\
        DATES="2024-06-29 2024-06-30"
        tr " " "\\n" <<<"$DATES" | xargs -P 2 -I{{}} aws s3 cp --recursive "{root}/dt={{}}/" /t/
        """) == ["s3://bkt/logs/clicks/dt=2024-06-29/", "s3://bkt/logs/clicks/dt=2024-06-30/"]
    assert _bash_reads("""\
        P="${PRE:-s3://bkt/models/base-v3/}"
        aws s3 sync "$P" /tmp/pre/
        """, env=[{"name": "PRE", "value": "s3://bkt/models/base-v4/"}]) == [
        "s3://bkt/models/base-v4/"]
    assert _bash_reads(f"""\
        export SRC="{root}/dt=2024-06-30"
        envsubst '${{SRC}}' > /tmp/cmds.txt <<'EOF'
        cp ${{SRC}}/part-*.gz /tmp/in/
        EOF
        s5cmd run /tmp/cmds.txt
        """) == ["s3://bkt/logs/clicks/dt=2024-06-30/part-*.gz"]
    # jq over a file the script wrote: a pipeline's JSON value, or a heredoc
    tmpl = {"name": "main", "inputs": {"parameters": [{"name": "sources", "value": json.dumps(
        {"text": "s3://shop/item_text/v7/", "img": "s3://shop/image_emb/clip/"})}]},
        "container": {"image": "x", "command": ["bash", "-c", textwrap.dedent("""\
            printf '%s' "$1" > /tmp/sources.json
            TEXT_URI=$(jq -r '.text' /tmp/sources.json)
            IMG_URI=$(jq -r .img /tmp/sources.json)
            aws s3 sync "$TEXT_URI" /w/text/
            s5cmd cp "${IMG_URI%/}/*.npy" /w/images/
            """), "fetch", "{{inputs.parameters.sources}}"]}}
    assert sorted(r.uri for r in _plan([tmpl]).step("main").reads) == [
        "s3://shop/image_emb/clip/*.npy", "s3://shop/item_text/v7/"]
    assert _bash_reads("""\
        cat > /tmp/c.json <<EOF
        {"train": {"uri": "s3://bkt/train/"}, "shards": ["s3://bkt/s0.tar"]}
        EOF
        aws s3 cp --recursive "$(jq -r .train.uri /tmp/c.json)" /data/
        aws s3 cp "$(jq -r '.shards[0]' /tmp/c.json)" /data/
        """) == ["s3://bkt/s0.tar", "s3://bkt/train/"]
    assert [_shell.param_expand(v, op, w) for v, op, w in (
        ("a-b-c", "//", "-/_"), ("a-b-c", "/", "-/_"), ("s3://b/x.csv", "/", "%.csv/.pq"),
        ("s3://b/x.csv", "/", "#s3/s3a"), ("s3://b/2024/x", "/", "20??/Y"))] == [
        "a_b_c", "a_b-c", "s3://b/x.pq", "s3a://b/x.csv", "s3://b/Y/x"]


def test_round_42_a_location_cut_into_bucket_and_key_in_code() -> None:
    """Blind round 42: ``bucket, _, prefix = root[len("s3://"):].partition("/")`` of a known
    root, then ``get_object(Bucket=bucket, Key=f"{prefix}/_index/x.json")``, read the root
    twice (with and without its slash) and missed the object; ``.split("/", 1)`` likewise."""
    for cut in ('root[len("s3://"):].partition("/")', 'root[5:].split("/", 1)'):
        names = "bucket, _, prefix" if "partition" in cut else "bucket, prefix"
        assert _script_reads(textwrap.dedent(f"""\
            import boto3
            root = "s3://bkt/sessions/v4/".rstrip("/")
            {names} = {cut}
            obj = boto3.client("s3").get_object(Bucket=bucket, Key=f"{{prefix}}/_index/w.json")
            """)) == ["s3://bkt/sessions/v4/_index/w.json"], cut


def test_round_43_a_location_only_printed_is_no_read() -> None:
    """Blind round 43: ``print(json.dumps(["s3://bkt/scenes/a.SAFE", ...]))`` (a list a later
    step loops over, from this step's output) and a message naming a folder were read and
    warmed; a literal that is also used is still read."""
    assert _script_reads('import json\nprint(json.dumps(["s3://bkt/scenes/a.SAFE",'
                         ' "s3://bkt/scenes/b.SAFE"]))\n') == []
    assert _script_reads('import logging\nlogging.info("results go to s3://bkt/out/")\n') == []
    assert _script_reads('import pandas as pd\nprint("reading s3://bkt/x.csv")\n'
                         'df = pd.read_csv("s3://bkt/x.csv")\n') == ["s3://bkt/x.csv"]


def test_round_43_a_string_method_on_an_input_applies_to_its_value() -> None:
    """Blind round 43: ``f"s3://bkt/constraints/{season.lower()}/floors.csv"`` of a
    component's input read nothing (the method was not applied to the value)."""
    step = _component(textwrap.dedent("""\
        def comp(season: str, region: str):
            import pandas as pd
            pd.read_csv(f"s3://bkt/constraints/{season.lower()}/floors.csv")
            pd.read_parquet("s3://bkt/prices/" + region.replace("_", "-") + "/p.parquet")
        """), {"season": const("SS24"), "region": const("eu_west")})
    assert sorted(r.uri for r in step.reads) == [
        "s3://bkt/constraints/ss24/floors.csv", "s3://bkt/prices/eu-west/p.parquet"]


def test_round_43_dates_computed_in_code_name_the_partitions_read() -> None:
    """Blind round 43: a date computed in code (``date(2024, 6, 30)``,
    ``datetime.strptime(end_date, "%Y-%m-%d").date()``, ``- timedelta(days=i)`` over a
    loop, written with ``{day:%Y-%m-%d}``, ``.strftime``, ``.isoformat()``) lost every
    location holding it, or read the root it was built on (a whole folder of days); a
    location built from inputs and stripped of its scheme for an S3 file system
    (``uri.removeprefix("s3://")``, ``"s3://" + uri.replace("s3://", "", 1)``) read the
    input's root (a whole bucket)."""
    days = ["s3://bkt/sales/dt=2024-06-29/pos.parquet", "s3://bkt/sales/dt=2024-06-30/pos.parquet"]
    for write in ('f"s3://bkt/sales/dt={day:%Y-%m-%d}/pos.parquet"',
                  '"s3://bkt/sales/dt=" + day.strftime("%Y-%m-%d") + "/pos.parquet"',
                  'f"s3://bkt/sales/dt={day.isoformat()}/pos.parquet"',
                  'f"s3://bkt/sales/dt={day}/pos.parquet"'):
        assert _script_reads(textwrap.dedent(f"""\
            from datetime import date, timedelta
            import pandas as pd
            end = date(2024, 6, 30)
            for i in range(2):
                day = end - timedelta(days=i)
                pd.read_parquet({write})
            """)) == days, write
    step = _component(textwrap.dedent("""\
        def pull(root: str, end_date: str, lookback: int):
            from datetime import datetime, timedelta
            import pyarrow.parquet as pq, s3fs
            fs = s3fs.S3FileSystem()
            end = datetime.strptime(end_date, "%Y-%m-%d").date()
            for i in range(lookback):
                day = end - timedelta(days=i)
                uri = f"{root.rstrip('/')}/dt={day:%Y-%m-%d}/pos.parquet"
                pq.read_table(uri.removeprefix("s3://"), filesystem=fs)
        """), {"root": const("s3://bkt/sales/"), "end_date": const("2024-06-30"),
               "lookback": const("2")})
    assert sorted(r.uri for r in step.reads) == days
    assert _script_reads(textwrap.dedent("""\
        import fsspec, json
        from datetime import datetime, timedelta
        scene = "2024-04-12"
        start = datetime.fromisoformat(scene)
        for h in range(0, 24, 12):
            ts = start + timedelta(hours=h)
            with fsspec.open(f"s3://ais/{ts:%Y%m%d}/{ts:%H%M}.csv.zst", "rb") as f:
                f.read()
        """)) == ["s3://ais/20240412/0000.csv.zst", "s3://ais/20240412/1200.csv.zst"]
    step = _component(textwrap.dedent("""\
        def hist(lake: str):
            import pandas as pd
            uri = f"{lake}/prices/p.parquet"
            pd.read_parquet("s3://" + uri.replace("s3://", "", 1))
        """), {"lake": const("s3://bkt")})
    assert [r.uri for r in step.reads] == ["s3://bkt/prices/p.parquet"]


def test_round_43_an_s3fs_find_of_a_path_without_its_scheme_reads_the_folder() -> None:
    """Blind round 43: ``fs.find("bkt/policies/2024/")`` on an S3 file system, then each key
    opened, read nothing (``open``, ``glob`` and ``get`` of such a path were read)."""
    assert _script_reads(textwrap.dedent("""\
        import s3fs
        fs = s3fs.S3FileSystem()
        for key in fs.find("bkt/policies/2024/"):
            with fs.open(key, "rb") as f:
                f.read()
        """)) == ["s3://bkt/policies/2024/"]


def test_round_43_a_known_date_split_into_its_parts() -> None:
    """Blind round 43: ``y, m, d = "2024-05-18".split("-")`` (a parameter's value) then
    ``f"s3://bkt/l2a/{int(y)}/{int(m)}/{int(d)}/B02.parquet"`` read nothing; a list of
    locations split apart is still each one's read."""
    assert _script_reads(textwrap.dedent("""\
        import pandas as pd
        y, m, d = "2024-05-18".split("-")
        pd.read_parquet(f"s3://bkt/l2a/{int(y)}/{int(m)}/{int(d)}/B02.parquet")
        pd.read_parquet(f"s3://bkt/l2a/{y}/{m}/{d}/B03.parquet")
        """)) == ["s3://bkt/l2a/2024/05/18/B03.parquet", "s3://bkt/l2a/2024/5/18/B02.parquet"]
    assert _script_reads(textwrap.dedent("""\
        import pandas as pd
        a, b = "s3://bkt/x.csv,s3://bkt/y.csv".split(",")
        pd.read_csv(a)
        pd.read_csv(b)
        """)) == ["s3://bkt/x.csv", "s3://bkt/y.csv"]


def test_round_43_argv_the_program_gives_itself_and_a_while_loop_over_days() -> None:
    """Blind round 43: ``p.parse_args(["--prefix", root, "--since", day])`` (the program's
    own argv) read the bare prefix, and an option of ``type=date.fromisoformat`` formatted
    with ``{args.since:%Y/%m}`` was lost; ``while day <= args.until: ...; day +=
    timedelta(days=1)`` read one folder of the parent instead of one per day. A counter
    the loop changes holds no one value in it, and a loop over days that cannot be
    counted is not followed; one whose end comes before its start reads no day."""
    assert _script_reads(textwrap.dedent("""\
        import argparse
        from datetime import date
        import s3fs
        p = argparse.ArgumentParser()
        p.add_argument("--prefix", required=True)
        p.add_argument("--since", type=date.fromisoformat, required=True)
        args = p.parse_args(["--prefix", "s3://bkt/docs/police/", "--since=2024-06-03"])
        fs = s3fs.S3FileSystem()
        for key in fs.find(f"{args.prefix}{args.since:%Y/%m}/"):
            fs.open(key).read()
        """)) == ["s3://bkt/docs/police/2024/06/"]
    loop = textwrap.dedent("""\
        import argparse
        from datetime import date, timedelta
        import s3fs
        p = argparse.ArgumentParser()
        p.add_argument("--root", default="s3://bkt/photos/")
        p.add_argument("--since", type=date.fromisoformat, default="2024-06-28")
        p.add_argument("--until", type=date.fromisoformat, default="UNTIL")
        args = p.parse_args()
        fs = s3fs.S3FileSystem()
        day, n = args.since, 0
        while day CMP args.until:
            for key in fs.glob(f"{args.root.rstrip('/')}/dt={day.isoformat()}/*/*.jpg"):
                fs.get(key, f"/cache/{n}.jpg")
                n += 1
            day += timedelta(days=1)
        """)
    days = [f"s3://bkt/photos/dt=2024-06-{d}/*/*.jpg" for d in (28, 29, 30)]
    assert _script_reads(loop.replace("UNTIL", "2024-06-30").replace("CMP", "<=")) == days
    assert _script_reads(loop.replace("UNTIL", "2024-06-30").replace("CMP", "<")) == days[:2]
    # the end before the start: the body never runs, so no day is read
    assert not [u for u in _script_reads(loop.replace("UNTIL", "2024-06-27").replace(
        "CMP", "<=")) if "dt=" in u]
    # a counter changed by the loop's body is not its first value inside it
    assert _script_reads(textwrap.dedent("""\
        import pandas as pd
        part = 0
        while part < 3:
            pd.read_parquet(f"s3://bkt/parts/{part}.parquet")
            part += 1
        """)) == []


def test_round_43_a_template_from_an_inline_config_and_a_precision_spec() -> None:
    """Blind round 43: ``cfg["labels"].format(snapshot=day)`` of ``cfg = json.loads('{...}')``
    read nothing, nor did a precision spec (``"{snapshot:.7}".format(...)``,
    ``f"{s:.7}"``: the text cut to its first 7 characters)."""
    day = "2024-06-30"
    assert _script_reads(textwrap.dedent(f"""\
        import json
        import pandas as pd
        cfg = json.loads('{{"labels": "s3://bkt/labels/{{snapshot}}.parquet"}}')
        pd.read_parquet(cfg["labels"].format(snapshot="{day}"))
        """)) == ["s3://bkt/labels/2024-06-30.parquet"]
    assert _script_reads(textwrap.dedent(f"""\
        import yaml
        import pandas as pd
        cfg = yaml.safe_load('''
        labels: s3://bkt/labels/{{snapshot:.7}}.parquet
        ''')
        pd.read_parquet(cfg["labels"].format(snapshot="{day}"))
        """)) == ["s3://bkt/labels/2024-06.parquet"]
    assert _script_reads(f's = "{day}"\nimport pandas as pd\n'
                         'pd.read_parquet(f"s3://bkt/labels/{s:.7}.parquet")\n') == [
        "s3://bkt/labels/2024-06.parquet"]
    # a spec a text cannot take is no text: nothing made up
    assert _script_reads('import pandas as pd\npd.read_parquet("s3://bkt/{n:05d}.parquet"'
                         '.format(n="x"))\n') == []


def _command_io(command: list[str], args: list[str], env: list[dict] | None = None,
                source: str | None = None) -> tuple[list[str], list[str]]:
    """(reads, writes) of one Argo step: a container, or a script with *source*."""
    body = {"image": "x", "command": command, "args": args, "env": env or []}
    if source is not None:
        body["source"] = source
    step = _plan([{"name": "main", "script" if source is not None else "container": body}],
                 arguments={"parameters": [{"name": "panel", "value": "cardio-v3"}]}
                 ).step("main")
    return (sorted(r.uri or f"runtime: {r.pattern}" for r in step.reads),
            sorted(r.uri or "" for r in step.writes))


def test_round_44_minio_client_aliases() -> None:
    """Blind round 44: ``mc cp lake/bkt/x`` read nothing, whether the alias came from ``mc
    alias set`` in the script or from ``MC_HOST_<alias>`` in the env; an upload by ``mc``
    stays a write, and a path that only looks like an alias outside ``mc`` is no location."""
    assert _command_io(["sh", "-c"], [
        "mc alias set lake http://minio:9000 $AK $SK && mc cp --recursive lake/bkt/clicks/ "
        "/tmp/c/ && mc cp /tmp/out.parquet lake/bkt/out/o.parquet"]) == (
        ["s3://bkt/clicks/"], ["s3://bkt/out/o.parquet"])
    assert _command_io(["mc"], ["mirror", "refs/bkt/images/", "/tmp/i/"],
                       [{"name": "MC_HOST_refs", "value": "https://ceph-rgw.example"}]) == (
        ["s3://bkt/images/"], [])
    assert _command_io(["sh", "-c"], ["cp lake/bkt/x /tmp/"],
                       [{"name": "MC_HOST_lake", "value": "https://minio.example"}]) == ([], [])


def test_round_44_calls_of_other_languages() -> None:
    """Blind round 44: R's and JavaScript's calls. A location passed to a writer
    (``write.csv(df, 's3://...')``, ``aws.s3::s3write_using``) was read; one in a log line
    (``console.log(`... s3://${r.Bucket}/...`)``) was a run-time read; an object named by
    bucket and key (``new GetObjectCommand({Bucket, Key})``, ``s3read_using(object=,
    bucket=)``, ``arrow::s3_bucket('b')$path('k')``) was lost; arrow's URI options
    (``?endpoint_override=...``) stayed in the location."""
    r = ["Rscript", "-e"]
    assert _command_io(r, ["df <- read.csv('s3://bkt/in/a.csv'); "
                           "write.csv(df, 's3://bkt/out/y.csv')"]) == (
        ["s3://bkt/in/a.csv"], ["s3://bkt/out/y.csv"])
    assert _command_io(r, ["aws.s3::s3write_using(mtcars, write.csv, "
                           "object = 's3://bkt/out/summary.csv')"]) == (
        [], ["s3://bkt/out/summary.csv"])
    assert _command_io(r, ["x <- arrow::read_parquet("
                           "'s3://bkt/a.parquet?endpoint_override=minio:9000&scheme=http')"]) \
        == (["s3://bkt/a.parquet"], [])
    assert _command_io(r, ["h <- aws.s3::s3read_using(read.csv, object = 'cal/h.csv', "
                           "bucket = 'bkt')\nb <- arrow::s3_bucket('bkt', endpoint_override = "
                           "'minio:9000')\nx <- arrow::read_parquet(b$path('attrs/i.parquet'))\n"
                           "arrow::write_parquet(x, b$path('out/o.parquet'))"]) == (
        ["s3://bkt/attrs/i.parquet", "s3://bkt/cal/h.csv"], ["s3://bkt/out/o.parquet"])
    js = textwrap.dedent("""\
        const { S3Client, GetObjectCommand, PutObjectCommand } = require("@aws-sdk/client-s3");
        const s3 = new S3Client({ endpoint: "http://minio:9000", forcePathStyle: true });
        (async () => {
          const r = await s3.send(new GetObjectCommand({
            Bucket: "bkt",
            Key: "panels/{{workflow.parameters.panel}}.bed",
          }));
          console.log(`fetched s3://${r.Bucket}/${r.Key}`);
          await s3.send(new PutObjectCommand({ Bucket: "bkt", Key: "out/p.json", Body: "{}" }));
        })();
        """)
    assert _command_io(["node"], [], source=js) == (["s3://bkt/panels/cardio-v3.bed"],
                                                     ["s3://bkt/out/p.json"])


def test_round_45_training_code_and_its_configs() -> None:
    """Blind round 45: ``pl.Trainer(default_root_dir="s3://...")`` (where Lightning writes)
    was read, though the same key was a write as an override or in a YAML config;
    ``trainer.ckpt_path=s3://...`` (Lightning resumes from it) was unknown and not warmed;
    ``mlflow.artifacts.download_artifacts(artifact_uri=...)`` in a step named
    ``register-model`` was taken for a write; a heredoc config holding a pipeline's value
    as a plain YAML value (``max_epochs: $0`` with ``$0`` a placeholder) lost its keys, so
    its ``default_root_dir`` was read."""
    assert _script_reads('import pytorch_lightning as pl\n'
                         'trainer = pl.Trainer(max_epochs=1, default_root_dir="s3://bkt/runs/")\n'
                         ) == []
    assert _command_io(["python", "-m", "train"],
                       ["trainer.ckpt_path=s3://bkt/ckpt/last.ckpt"])[0] == [
        "s3://bkt/ckpt/last.ckpt"]
    step = _plan([{"name": "register-model", "script": {
        "image": "x", "command": ["python"],
        "source": "import mlflow\nmlflow.artifacts.download_artifacts("
                  "artifact_uri='s3://bkt/calib/a/', dst_path='/tmp/calib')\n"}}],
                 entrypoint="register-model").step("register-model")
    assert [r.uri for r in step.reads] == ["s3://bkt/calib/a/"] and not step.writes
    script = ("cat > /tmp/c.yaml <<YAML\ntrainer:\n  max_epochs: $0\n"
              "  default_root_dir: s3://bkt/runs/b/\nYAML\npython -m train --config /tmp/c.yaml\n")
    assert _command_io(["bash", "-c"], [script, "{{workflow.parameters.panel}}"])[0] == []
    assert _command_io(["bash", "-c"], [script, "60"])[0] == []


def test_round_46_endpoints_and_spellings_of_a_location() -> None:
    """Blind round 46: ``wget http://minio.agri.svc:9000/bkt/key`` and ``curl
    "$S3_ENDPOINT/bkt/key"`` read nothing though the step sets that endpoint
    (AWS_ENDPOINT_URL, S3_ENDPOINT); an Argo ``http`` input artifact at an S3 object's HTTPS
    address read nothing; a boto3 key with a blank in it also read a location cut at the
    blank (a wider prefix)."""
    minio = [{"name": "AWS_ENDPOINT_URL", "value": "http://minio.agri.svc:9000"}]
    assert _command_io(["wget", "-O", "/tmp/x",
                        "http://minio.agri.svc:9000/agri-weather/era5/2024-06.nc"], [],
                       minio)[0] == ["s3://agri-weather/era5/2024-06.nc"]
    # (with no endpoint set, a host named for an S3 service names it too: round 46 again,
    # test_round_46_an_s3_service_by_its_name_and_the_boto3_resource_api)
    ceph = [{"name": "S3_ENDPOINT", "value": "http://rook-ceph-rgw.rook-ceph.svc:8080"}]
    assert _command_io(["sh", "-c"], ['curl -o /tmp/x "$S3_ENDPOINT/nlp/ann/train.jsonl"'],
                       ceph)[0] == ["s3://nlp/ann/train.jsonl"]
    # the endpoint alone (a client's setting) is no location
    assert _command_io(["sh", "-c"], ["mc alias set lake http://minio.agri.svc:9000 a b"],
                       minio) == ([], [])
    step = _plan([{"name": "main", "inputs": {"artifacts": [{
        "name": "d", "path": "/in/d", "http": {
            "url": "https://s3.eu-central-1.amazonaws.com/agri-dem/dem30/tiles.tar.gz"}}]},
        "container": {"image": "x", "command": ["ls", "/in"]}}]).step("main")
    assert [r.uri for r in step.reads] == ["s3://agri-dem/dem30/tiles.tar.gz"]
    assert _script_reads('import boto3\ns3 = boto3.client("s3")\ns3.download_file('
                         'Bucket="labels", Key="cb/2024 Q2/labels.csv", Filename="/tmp/l")\n'
                         ) == ["s3://labels/cb/2024 Q2/labels.csv"]


def test_round_46_an_s3_service_by_its_name_and_the_boto3_resource_api() -> None:
    """Blind round 46 again: a path-style URL of a host named for an in-cluster S3 service
    (MinIO, Ceph's RADOS gateway) read nothing when the step set no endpoint, and the boto3
    resource API (``s3.Bucket(b).download_file(key, f)``, ``s3.Object(b, k)``) was not
    read at all."""
    for url, uri in [
            ("http://minio.agri.svc:9000/agri-weather/era5/2024-06.nc",
             "s3://agri-weather/era5/2024-06.nc"),
            ("http://minio-service.kubeflow:9000/mlpipeline/ref/x.csv?X-Amz-Expires=60",
             "s3://mlpipeline/ref/x.csv"),
            ("http://rook-ceph-rgw-store.rook-ceph.svc/nlp/ann/a%C3%A9.jsonl",
             "s3://nlp/ann/a\u00e9.jsonl")]:
        assert _command_io(["wget", "-O", "/tmp/x", url], []) == ([uri], []), url
    # MinIO's own paths, a bucket alone, another host, AWS's own address (one read)
    for url in ["http://minio:9000/minio/health/live", "http://minio:9000/bucket",
                "http://models.internal:8080/v1/models/x.bin"]:
        assert _command_io(["curl", "-f", url], []) == ([], []), url
    assert _command_io(["curl", "-o", "/tmp/x", "https://s3.eu-west-1.amazonaws.com/bkt/k.csv"],
                       []) == (["s3://bkt/k.csv"], [])
    assert _command_io(["curl", "-T", "/tmp/m.bin", "http://minio:9000/models/m.bin"],
                       [])[1] == ["s3://models/m.bin"]
    # a presigned URL's key with a blank (once read nothing): that object whole
    assert _command_io(["sh", "-c"], [
        'curl -fsSL -o "$0" "https://fraud-ref.s3.eu-west-1.amazonaws.com/merchants/risk%20'
        'scores%202024.parquet?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=beef"', "/o"]
        ) == (["s3://fraud-ref/merchants/risk scores 2024.parquet"], [])
    reads, writes = _command_io(["python"], [], source=textwrap.dedent("""\
        import boto3
        s3 = boto3.resource("s3", endpoint_url="http://minio:9000")
        s3.Bucket("clinical-reference").download_file("abbrev/m\u00e9dical.csv", "/tmp/a.csv")
        body = s3.Object("ref", "codes/icd10.tsv").get()["Body"].read()
        model = s3.Bucket("models").Object("coder/v3.1/model.safetensors")
        model.download_file("/tmp/m")
        corpus = s3.Bucket("corpus")
        for o in corpus.objects.filter(Prefix="notes/2024/"):
            corpus.download_file(o.key, "/tmp/" + o.key.rsplit("/", 1)[-1])
        s3.Bucket("out").upload_file("/tmp/a.csv", "results/a.csv")
        s3.Object("out", "results/b.json").put(Body=b"{}")
        """))
    assert reads == ["s3://clinical-reference/abbrev/m\u00e9dical.csv",
                     "s3://corpus/notes/2024/", "s3://models/coder/v3.1/model.safetensors",
                     "s3://ref/codes/icd10.tsv"]
    assert writes == ["s3://out/results/a.csv", "s3://out/results/b.json"]
    # a bucket's listing alone reads nothing; a handle rebound to something else is no handle
    assert _script_reads(textwrap.dedent("""\
        import boto3
        b = boto3.resource("s3").Bucket("corpus")
        keys = [o.key for o in b.objects.filter(Prefix="notes/")]
        b = open("/tmp/x")
        b.get()
        """)) == []


def test_round_47_shell_loops_after_and_or_over_seq_and_brace_lists() -> None:
    """Blind round 47: a ``for`` loop after ``&&``/``||``, over ``$(seq 4 9)`` or
    `` `seq -w ...` ``, or over a brace list ``{de,fr,sw}`` was left a run-time location
    (``s3://b/holidays/$r/2024.csv``); bash runs each over items known before the run."""
    cases = [
        ("mkdir -p /tmp/h && for r in us eu; do aws s3 cp s3://bkt/h/$r/2024.csv /tmp/; done",
         ["s3://bkt/h/eu/2024.csv", "s3://bkt/h/us/2024.csv"]),
        ("false || for r in us eu; do aws s3 cp s3://bkt/h/$r/x.csv /tmp/; done",
         ["s3://bkt/h/eu/x.csv", "s3://bkt/h/us/x.csv"]),
        ("for m in $(seq 8 10); do aws s3 cp s3://bkt/era5/$m/t2m.nc /tmp/; done",
         ["s3://bkt/era5/10/t2m.nc", "s3://bkt/era5/8/t2m.nc", "s3://bkt/era5/9/t2m.nc"]),
        ("for m in `seq -w 8 2 12`; do aws s3 cp s3://bkt/era5/$m/t.nc /tmp/; done",
         ["s3://bkt/era5/08/t.nc", "s3://bkt/era5/10/t.nc", "s3://bkt/era5/12/t.nc"]),
        ('for s in $(seq -f "shard-%03g" 0 1); do aws s3 cp s3://bkt/wds/$s.tar /tmp/; done',
         ["s3://bkt/wds/shard-000.tar", "s3://bkt/wds/shard-001.tar"]),
        ("for l in {de,fr}; do aws s3 cp s3://bkt/g2p/$l/lexicon.tsv /tmp/; done",
         ["s3://bkt/g2p/de/lexicon.tsv", "s3://bkt/g2p/fr/lexicon.tsv"]),
        ("if true; then for l in de fr; do aws s3 cp s3://bkt/x/$l.tsv /tmp/; done; fi",
         ["s3://bkt/x/de.tsv", "s3://bkt/x/fr.tsv"]),
    ]
    for script, reads in cases:
        assert _command_io(["bash", "-c"], [script]) == (reads, []), script
    # what only the run knows stays a run-time location: a variable in the list, a long seq
    for script in ["for l in {de,$X}; do aws s3 cp s3://bkt/g/$l /tmp/; done",
                   "for m in $(seq 1 1000); do aws s3 cp s3://bkt/e/$m/t.nc /tmp/; done",
                   "for m in $(seq $N); do aws s3 cp s3://bkt/e/$m/t.nc /tmp/; done"]:
        reads, _ = _command_io(["bash", "-c"], [script])
        assert len(reads) == 1 and reads[0].startswith("runtime: s3://bkt/"), script


def test_round_47_what_an_earlier_step_writes_is_read_but_not_warmed_ahead() -> None:
    """Blind rounds 47 and jobs 40: a step's ``aws s3 cp`` of an object the step before it
    uploads (or of the folder a loop's steps write their parts into) was put on the list of
    datasets to warm at submission, when it does not exist yet. It is still the step's read,
    marked with its writer, and no dataset of the plan; a step that is no ancestor of the
    reader does not count."""
    def step(name: str, script: str) -> dict:
        return {"name": name, "container": {"image": "x", "command": ["sh", "-c", script]}}
    plan = _plan([
        {"name": "main", "dag": {"tasks": [
            {"name": "produce", "template": "produce"},
            {"name": "side", "template": "side"},
            {"name": "consume", "template": "consume", "depends": "produce"},
            {"name": "merge", "template": "merge", "depends": "consume"}]}},
        step("produce", "python -m job && aws s3 cp /tmp/n.parquet s3://bkt/run/net/us.parquet"),
        step("side", "aws s3 cp /tmp/r.json s3://bkt/ref/side.json"),
        step("consume", "aws s3 cp s3://bkt/run/net/us.parquet /tmp/ && "
                        "aws s3 cp s3://bkt/ref/side.json /tmp/ && "
                        "aws s3 cp s3://bkt/ref/lookup.csv /tmp/"),
        step("merge", "aws s3 sync s3://bkt/run/net/ /tmp/net/")])
    reads = {s.id: [(r.uri, r.written_by) for r in s.reads] for s in plan.steps}
    assert reads["consume"] == [("s3://bkt/run/net/us.parquet", "produce"),
                                ("s3://bkt/ref/side.json", None),
                                ("s3://bkt/ref/lookup.csv", None)]
    assert reads["merge"] == [("s3://bkt/run/net/", "produce")]
    assert [u for u, _, _ in plan.datasets()] == ["s3://bkt/ref/side.json",
                                                  "s3://bkt/ref/lookup.csv"]


def _kfp2_task(container: dict[str, Any], passed: dict[str, str],
               defaults: dict[str, str] | None = None) -> list[str]:
    """The reads of one KFP v2 task (its component's executor *container*), given the
    inputs *passed* and the component's input *defaults*, as kfp 2.17 compiles them."""
    params = {k: {"parameterType": "STRING", **({"defaultValue": v} if v else {})}
              for k, v in {**dict.fromkeys(passed, ""), **(defaults or {})}.items()}
    spec = {"pipelineInfo": {"name": "p"}, "schemaVersion": "2.1.0", "sdkVersion": "kfp-2.17.3",
            "root": {"dag": {"tasks": {"t": {
                "taskInfo": {"name": "t"}, "componentRef": {"name": "comp-t"},
                "inputs": {"parameters": {k: {"runtimeValue": {"constant": v}}
                                          for k, v in passed.items()}}}}}},
            "components": {"comp-t": {"executorLabel": "exec-t", **(
                {"inputDefinitions": {"parameters": params}} if params else {})}},
            "deploymentSpec": {"executors": {"exec-t": {"container": container}}}}
    [plan] = pipeline.analyze_documents([spec], source="p.yaml")
    return sorted(r.uri or f"runtime: {r.pattern}" for r in plan.step("t").reads)


def test_round_48_locations_through_defaults_env_and_local_names() -> None:
    """Blind round 48: a KFP v2 component's default location was read beside the value the
    task passed (``def fit(prior="s3://.../v2.parquet")`` called with v3), and when it only
    started one (``f"{index_root}{day}.json"``); ``${SPEND_URI:-s3://...}`` read its
    fallback though the task sets SPEND_URI; ``aws s3 cp "${FLEET_REF}/meta/x.parquet"``
    read the var's folder whole; a copy to a local file named after the location
    (``f"/tmp/{name}"``) made it read-and-written (not warmed); a JSON dict given as
    ``sys.argv[2]`` read the entries the program never looks up."""
    def component(code: str, fn: str) -> dict:
        return {"image": "python:3.11",
                "command": ["sh", "-ec", "python3 -m kfp.dsl.executor_main", code],
                "args": ["--executor_input", "{{$}}", "--function_to_execute", fn]}
    fit = component("def fit(prior: str = 's3://bkt/priors/v2.parquet'):\n"
                    "    import pandas as pd\n    pd.read_parquet(prior)\n", "fit")
    assert _kfp2_task(fit, {"prior": "s3://bkt/priors/v3.parquet"},
                      {"prior": "s3://bkt/priors/v2.parquet"}) == ["s3://bkt/priors/v3.parquet"]
    assert _kfp2_task(fit, {}, {"prior": "s3://bkt/priors/v2.parquet"}) == [
        "s3://bkt/priors/v2.parquet"]  # (not passed: the default is the value)
    index = component("def cat_index(day: str, index_root: str = 's3://bkt/index/'):\n"
                      "    import s3fs\n    s3fs.S3FileSystem().cat(f'{index_root}{day}.json')\n",
                      "cat_index")
    assert _kfp2_task(index, {"day": "2024-09-01"}, {"index_root": "s3://bkt/index/"}) == [
        "s3://bkt/index/2024-09-01.json"]
    # a helper the program calls without the parameter, or hands on (fire), uses its default
    for tail in ("\nmain()\n", "\nimport fire\nfire.Fire(main)\n"):
        assert _script_reads("import pandas as pd\ndef main(src='s3://bkt/ref/a.csv'):\n"
                             "    pd.read_csv(src)\n" + tail) == ["s3://bkt/ref/a.csv"], tail
    sync = {"image": "amazon/aws-cli:2.17.20", "command": ["sh", "-c"],
            "args": ['aws s3 sync "${SPEND_URI:-s3://bkt/spend/2024-09/}" /tmp/spend'],
            "env": [{"name": "SPEND_URI", "value": "s3://bkt/spend/2024-09-reconciled/"}]}
    assert _kfp2_task(sync, {}) == ["s3://bkt/spend/2024-09-reconciled/"]
    fleet = [{"name": "FLEET_REF", "value": "s3://turbine-ref/fleet"}]
    assert _command_io(["sh", "-c"], ['aws s3 cp "${FLEET_REF}/meta/m.parquet" /tmp/x'],
                       fleet) == (["s3://turbine-ref/fleet/meta/m.parquet"], [])
    # (a program that may read the var itself keeps it whole, as before)
    assert "s3://turbine-ref/fleet" in _command_io(
        ["sh", "-c"], ['aws s3 cp "${FLEET_REF}/meta/m.parquet" /tmp/x && python -m t'],
        fleet)[0]
    assert _script_reads('import subprocess\nuri = "s3://bkt/shards/part-0.parquet"\n'
                         'name = uri.rsplit("/", 1)[-1]\n'
                         'subprocess.run(["aws", "s3", "cp", uri, f"/tmp/{name}"])\n'
                         ) == ["s3://bkt/shards/part-0.parquet"]
    sources = ('{"dma": "s3://bkt/geo/dma.csv", "census": "s3://bkt/geo/acs.parquet", '
               '"tv": "s3://bkt/geo/tv.csv"}')
    code = ('import json, sys, pandas as pd\nsrc = json.loads(sys.argv[2])\n'
            'pd.read_csv(src["dma"]); pd.read_parquet(src["census"])\n')
    assert _command_io(["python", "-c"], [code, "--sources", sources])[0] == [
        "s3://bkt/geo/acs.parquet", "s3://bkt/geo/dma.csv"]


def test_round_49_key_only_artifacts_of_a_repository_given_in_the_file() -> None:
    """Blind round 49: a key-only artifact (``s3: {key: ...}``) was a run-time read though
    the artifact repository was a ConfigMap in the same file (the default one by its
    annotation, or the one ``artifactRepositoryRef`` names); an input artifact at the key an
    output artifact upstream wrote (a folder a loop's items write into) is passed between
    steps, no read; and an input parameter filling a folder deep in a written-out location
    (``.../uploads/{{inputs.parameters.upload_date}}/x``) made it a write by its name."""
    repos = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "artifact-repositories", "namespace": "tns", "annotations": {
                 "workflows.argoproj.io/default-artifact-repository": "default-v1"}},
             "data": {"default-v1": "s3:\n  bucket: tns-ml\n  endpoint: s3.amazonaws.com\n",
                      "structures": "s3:\n  bucket: fold-structures\n"}}

    def plans(**spec: Any) -> pipeline.Plan:
        entry = spec["templates"][0]["name"]
        wf = {**_ARGO, "metadata": {"name": "w", "namespace": "tns"},
              "spec": {"entrypoint": entry, **spec}}
        [plan] = pipeline.analyze_documents([repos, wf], source="w.yaml")
        return plan

    model = {"name": "classify", "inputs": {"artifacts": [{
        "name": "model", "path": "/m", "s3": {"key": "models/nsfw-vit/v14/model.onnx"}}]},
        "container": {"image": "x", "command": ["python", "-m", "classify", "/m"]}}
    step = plans(templates=[model]).step("classify")
    assert [(r.uri, r.origin) for r in step.reads] == [
        ("s3://tns-ml/models/nsfw-vit/v14/model.onnx", "default-artifact-repository")]
    step = plans(templates=[model], artifactRepositoryRef={
        "configMap": "artifact-repositories", "key": "structures"}).step("classify")
    assert [r.uri for r in step.reads] == ["s3://fold-structures/models/nsfw-vit/v14/model.onnx"]
    # a map writing per item into a folder its reduce reads: passed on, no read
    plan = plans(templates=[
        {"name": "main", "dag": {"tasks": [
            {"name": "verdict", "template": "verdict", "withItems": ["a", "b"],
             "arguments": {"parameters": [{"name": "clip", "value": "{{item}}"}]}},
            {"name": "report", "template": "report", "depends": "verdict"}]}},
        {"name": "verdict", "inputs": {"parameters": [{"name": "clip"}]},
         "container": {"image": "x", "command": ["sh", "-c", "echo {} > /out/v.json"]},
         "outputs": {"artifacts": [{"name": "v", "path": "/out/v.json", "s3": {
             "key": "verdicts/{{workflow.name}}-x/{{inputs.parameters.clip}}.json"}}]}},
        {"name": "report", "inputs": {"artifacts": [{"name": "vs", "path": "/in", "s3": {
            "key": "verdicts/w-x/"}}]},
         "container": {"image": "x", "command": ["python", "-m", "report", "/in"]}}])
    assert [(r.uri, r.written_by) for r in plan.step("report").intermediate] == [
        ("s3://tns-ml/verdicts/w-x/", "verdict")]
    assert plan.step("report").reads == [] and plan.datasets() == []
    # a date filling a folder of a location written out: the command line's way (read)
    tmpl = {"name": "list-uploads", "inputs": {"parameters": [{"name": "upload_date"}]},
            "container": {"image": "x", "command": ["python", "-m", "tns.list_uploads"],
                          "args": ["--manifest", "s3://ugc/uploads/"
                                   "{{inputs.parameters.upload_date}}/_manifest.jsonl"]}}
    plan = _plan([{"name": "main", "dag": {"tasks": [{
        "name": "list-uploads", "template": "list-uploads", "arguments": {"parameters": [
            {"name": "upload_date", "value": "{{workflow.parameters.upload_date}}"}]}}]}},
        tmpl], arguments={"parameters": [{"name": "upload_date", "value": "2024-11-20"}]})
    assert [r.uri for r in plan.step("list-uploads").reads] == [
        "s3://ugc/uploads/2024-11-20/_manifest.jsonl"]


def test_round_50_the_aws_cli_and_command_lines_in_depth() -> None:
    """Blind round 50: ``aws s3 presign`` was read (it signs a URL, reads nothing); an
    Argo script's ``args`` did not replace its argparse defaults (both models were read),
    nor did a command line replace a click option's or a typer parameter's; a getopts loop's
    ``s) SEASON="$OPTARG"`` left SEASON its earlier "" (``season=/`` was read)."""
    assert _command_io(["sh", "-c"], ["aws s3 presign s3://bkt/report.html --expires-in 600"]
                       )[0] == []
    source = ('import argparse, boto3\nap = argparse.ArgumentParser()\n'
              'ap.add_argument("--model", default="s3://bkt/model-v2.pkl")\n'
              'a = ap.parse_args()\nb, k = a.model[5:].split("/", 1)\n'
              'boto3.client("s3").download_file(b, k, "/tmp/m")\n')
    step = _plan([{"name": "main", "script": {
        "image": "python:3.11", "command": ["python3"], "source": source,
        "args": ["--model", "s3://bkt/model-v3.pkl"]}}]).step("main")
    assert [r.uri for r in step.reads] == ["s3://bkt/model-v3.pkl"]
    click = ('import boto3, click\n@click.command()\n'
             '@click.option("--regions", default="s3://bkt/regions/v1.json")\n'
             'def main(regions):\n    b, k = regions[5:].split("/", 1)\n'
             '    boto3.client("s3").download_file(b, k, "/tmp/r")\nmain()\n')
    assert _command_io(["python3", "-c"], [click, "--regions", "s3://bkt/regions/v2.json"]
                       )[0] == ["s3://bkt/regions/v2.json"]
    typer = ('import boto3, typer\napp = typer.Typer()\n@app.command()\n'
             'def main(dem_path: str = "s3://bkt/dem-europe.vrt"):\n'
             '    b, k = dem_path[5:].split("/", 1)\n'
             '    boto3.client("s3").download_file(b, k, "/tmp/d")\napp()\n')
    assert _command_io(["python3", "-c"], [typer, "--dem-path", "s3://bkt/dem-spain.vrt"]
                       )[0] == ["s3://bkt/dem-spain.vrt"]
    # (NeMo's tarred shards: _OP_0..3_CL_ is its spelling of {0..3}, blind job round 43)
    assert _uri.find_uris("model.train_ds.tarred_audio_filepaths=s3://bkt/ls960/"
                          "audio__OP_0..3_CL_.tar") == ["s3://bkt/ls960/audio_{0..3}.tar"]
    getopts = ('SEASON=""\nwhile getopts "s:" opt; do case "$opt" in s) SEASON="$OPTARG" ;; '
               'esac; done\naws s3 cp "s3://bkt/season=${SEASON}/" /data/ --recursive\n')
    assert _command_io(["bash", "-c"], [getopts, "pull", "-s", "fw24"])[0] == [
        "runtime: s3://bkt/season=${SEASON}/"]


def test_round_51_a_subpath_known_in_part_names_its_folder() -> None:
    """Blind round 51: a mount's ``subPath: "{{workflow.parameters.call_date}}/
    {{inputs.parameters.queue}}"`` inside a ``withParam`` loop (the queue known only when the
    run lists it) kept the workflow parameter unresolved: the known folder was lost."""
    plan = _plan([
        {"name": "main", "steps": [
            [{"name": "list", "template": "list"}],
            [{"name": "read", "template": "read", "withParam": "{{steps.list.outputs.result}}",
              "arguments": {"parameters": [{"name": "queue", "value": "{{item}}"}]}}]]},
        {"name": "list", "script": {"image": "python:3.11", "command": ["python"],
                                    "source": "print('[\"billing\"]')"}},
        {"name": "read", "inputs": {"parameters": [{"name": "queue"}]},
         "container": {"image": "busybox", "command": ["ls", "/audio"], "volumeMounts": [
             {"name": "audio", "mountPath": "/audio",
              "subPath": "{{workflow.parameters.call_date}}/{{inputs.parameters.queue}}"}]}}],
        arguments={"parameters": [{"name": "call_date", "value": "2025-03-14"}]},
        volumes=[{"name": "audio", "persistentVolumeClaim": {"claimName": "cc-call-audio"}}])
    [mount] = plan.step("read").pvc_mounts
    assert mount.sub_path == "2025-03-14/{{inputs.parameters.queue}}"


def test_round_51_a_number_another_task_makes_is_no_location() -> None:
    """Blind round 51: a KFP v2 input typed NUMBER_DOUBLE, another task's float, handed to a
    program as ``--load`` was a run-time read; a number is never a location (a STRING input
    the same way still is one)."""
    def reads(ptype: str) -> list[str]:
        code = ("def use_load(load):\n    import subprocess\n"
                "    subprocess.run(['solvency', '--load', str(load)], check=True)\n")
        spec = {"pipelineInfo": {"name": "p"}, "schemaVersion": "2.1.0",
                "sdkVersion": "kfp-2.17.3",
                "root": {"dag": {"tasks": {
                    "make": {"taskInfo": {"name": "make"}, "componentRef": {"name": "comp-make"}},
                    "use": {"taskInfo": {"name": "use"}, "componentRef": {"name": "comp-use"},
                            "dependentTasks": ["make"],
                            "inputs": {"parameters": {"load": {"taskOutputParameter": {
                                "producerTask": "make", "outputParameterKey": "Output"}}}}}}}},
                "components": {
                    "comp-make": {"executorLabel": "exec-make", "outputDefinitions": {
                        "parameters": {"Output": {"parameterType": ptype}}}},
                    "comp-use": {"executorLabel": "exec-use", "inputDefinitions": {
                        "parameters": {"load": {"parameterType": ptype}}}}},
                "deploymentSpec": {"executors": {
                    "exec-make": {"container": {"image": "python:3.11", "command": ["true"]}},
                    "exec-use": {"container": {
                        "image": "python:3.11",
                        "command": ["sh", "-ec", "python3 -m kfp.dsl.executor_main", code],
                        "args": ["--executor_input", "{{$}}", "--function_to_execute",
                                 "use_load"]}}}}}
        [plan] = pipeline.analyze_documents([spec], source="p.yaml")
        return [r.uri or f"runtime: {r.pattern}" for r in plan.step("use").reads]

    assert reads("NUMBER_DOUBLE") == []
    assert len(reads("STRING")) == 1


def test_round_69_an_mc_alias_to_a_host_the_step_has_no_value_for_is_not_s3() -> None:
    """Blind round 69: ``mc alias set partner "$PARTNER_URL" ...`` with the URL from a Secret
    (a partner's MinIO) made ``partner/inventory-drops/...`` a read of AWS's
    ``s3://inventory-drops/...``; as for ``MC_HOST_<alias>`` from a Secret, no read. A host
    the step's env or script gives stays a read."""
    secret = [{"name": "PARTNER_URL",
               "valueFrom": {"secretKeyRef": {"name": "partner-minio", "key": "url"}}}]
    script = ('mc alias set partner "$PARTNER_URL" "$K" "$S"\n'
              "mc alias set lake https://s3.amazonaws.com \"$K2\" \"$S2\"\n"
              "mc cp --recursive partner/inventory-drops/2026-12-01/ /tmp/drop/\n"
              "mc cp --recursive /tmp/drop/ lake/acme-lake/partner/2026-12-01/\n")
    assert _command_io(["bash"], [], secret, source=script) == (
        [], ["s3://acme-lake/partner/2026-12-01/"])
    known = [{"name": "PARTNER_URL", "value": "http://minio.partner:9000"}]
    assert _command_io(["bash"], [], known, source=script)[0] == [
        "s3://inventory-drops/2026-12-01/"]
    own = 'URL=http://minio:9000\nmc alias set p "$URL" a b\nmc cp p/bkt/x /tmp/x\n'
    assert _command_io(["bash"], [], [], source=own)[0] == ["s3://bkt/x"]


@pytest.mark.parametrize("program, read", [
    ("n = len(fs.glob('s3://bkt/sh/*/shard-*.tar'))\nprint(n)", False),
    ("for key in fs.glob('bkt/sh/*/shard-*.tar'):\n    print('s3://' + key)", False),
    ("keys = ['s3://' + k for k in fs.glob('bkt/sh/*/shard-*.tar')]\n"
     "with fs.open('bkt/manifests/m.json', 'w') as f:\n    json.dump(keys, f)", False),
    ("by = collections.defaultdict(list)\n"
     "for key in sorted(fs.glob('bkt/sh/*/shard-*.tar')):\n"
     "    by[key.split('/')[2]].append('s3://' + key)\nprint(json.dumps(by))", False),
    ("by = collections.defaultdict(list)\nfor key in fs.glob('bkt/sh/*/shard-*.tar'):\n"
     "    lang = key.split('/')[3]\n    by[lang].append('s3://' + key)\n"
     "print(json.dumps({k: len(v) for k, v in by.items()}))", False),
    # what it lists is opened: a read of the pattern
    ("for key in fs.glob('bkt/sh/*/shard-*.tar'):\n    with fs.open(key) as f:\n"
     "        f.read()", True),
    ("paths = fs.glob('bkt/sh/*/shard-*.tar')\nds = wds.WebDataset(paths)\nrun(ds)", True),
    ("df = pd.read_parquet(fs.glob('s3://bkt/sh/*/shard-*.tar'))", True),
    ("keys = []\nfor k in fs.glob('bkt/sh/*/shard-*.tar'):\n    keys.append(k)\n"
     "train(keys)", True),
])
def test_round_69_a_glob_whose_names_are_only_told_is_a_listing(program: str,
                                                                  read: bool) -> None:
    """Blind round 69: an s3fs glob whose names are only counted, printed or written into a
    manifest opens no object, as one printed whole (round 52) does not; one whose names
    are opened, handed to a reader or to a call we do not know stays a read."""
    code = "import collections, json, s3fs\nfs = s3fs.S3FileSystem()\n" + program + "\n"
    reads, _ = _command_io(["python", "-c"], [code])
    assert reads == (["s3://bkt/sh/*/shard-*.tar"] if read else []), reads


def test_round_70_a_frameworks_own_store_and_encoded_parameters_are_no_reads() -> None:
    """Blind round 70 (pipelines as other tools emit them): Metaflow's datastore root, its
    code package and card root (--datastore-root, METAFLOW_*) were read, so every step
    warmed the whole Metaflow datastore; its NAME,f,{{=toBase64(...)}} parameter hand-over
    was a run-time read. A dataset the same step names stays a read."""
    env = [{"name": "METAFLOW_CODE_URL", "value": "s3://mf/metaflow/Flow/data/ab/ab12"},
           {"name": "METAFLOW_DATASTORE_SYSROOT_S3", "value": "s3://mf/metaflow"},
           {"name": "METAFLOW_DATATOOLS_S3ROOT", "value": "s3://mf/metaflow/data"},
           {"name": "METAFLOW_CARD_S3ROOT", "value": "s3://mf/metaflow/mf.cards"}]
    reads, _ = _command_io(["bash", "-c"], [
        "python flow.py --quiet --datastore=s3 --datastore-root=s3://mf/metaflow step start "
        "--run-id argo-{{workflow.name}} --input-paths s3://lake/sales/2024/"], env)
    assert reads == ["s3://lake/sales/2024/"], reads
    step = _plan([{"name": "main", "container": {"image": "x", "command": ["bash", "-c"], "args": [
        "python -m metaflow.plugins.argo.set_parameters params.sh "
        "data_uri,f,{{=toBase64(workflow.parameters['data_uri'])}} && cat params.sh"]}}],
        arguments={"parameters": [{"name": "data_uri", "value": '"s3://lake/events/"'}]}
    ).step("main")
    assert not step.reads, step.reads


def test_round_70_an_env_var_a_program_hands_to_a_command_it_runs_is_read() -> None:
    """Blind round 70: ``subprocess.run(["aws", "s3", "sync", os.environ["EVAL_SET_URI"],
    "/tmp/val/"])`` with the var from a ConfigMap read nothing (``pd.read_csv`` of it was a
    run-time read); one handed on as the copy's destination stays no read."""
    env = [{"name": "EVAL_SET_URI", "valueFrom": {"configMapKeyRef": {
        "name": "shelfcam-settings", "key": "eval_set_uri"}}},
           {"name": "OUT_URI", "valueFrom": {"configMapKeyRef": {
               "name": "shelfcam-settings", "key": "out_uri"}}}]
    source = ('import os, subprocess\n'
              'subprocess.run(["aws", "s3", "sync", os.environ["EVAL_SET_URI"], "/tmp/val/"],'
              ' check=True)\n'
              'subprocess.run(["aws", "s3", "cp", "/tmp/m.bin", os.environ["OUT_URI"]])\n')
    reads, _ = _command_io(["python"], [], env, source=source)
    assert reads == ["runtime: ${EVAL_SET_URI}"], reads


def test_round_70_gdal_virtual_s3_paths() -> None:
    """Blind round 70: GDAL's /vsis3/BUCKET/KEY (gdal_translate, ogr2ogr, rasterio.open) read
    nothing. It is that S3 object; gdal_translate's last operand may be its output, and
    ogr2ogr names its output first."""
    assert _command_io(["sh", "-c"], [
        "gdal_translate -of GTiff /vsis3/geo-ref/dem/rhine.vrt /work/dem.tif"])[0] == [
        "s3://geo-ref/dem/rhine.vrt"]
    assert _command_io(["sh", "-c"], [
        "ogr2ogr -f Parquet /vsis3/geo-out/roads.parquet /vsis3/geo-ref/osm/roads.gpkg"]) == (
        ["s3://geo-ref/osm/roads.gpkg"], ["s3://geo-out/roads.parquet"])
    assert _command_io(["python", "-c"], [
        "import rasterio\nwith rasterio.open('/vsis3/geo-ref/dem/a.tif') as src:\n"
        "    src.read(1)\n"])[0] == ["s3://geo-ref/dem/a.tif"]


def test_round_70_a_query_holding_a_run_time_value_still_names_its_literal_locations() -> None:
    """Blind round 70: duckdb -c "... read_parquet('<an input artifact's path>') ...
    read_csv_auto('s3://...')": the whole query was one run-time read, the CSV lost."""
    reads, _ = _command_io(["sh", "-c"], [
        "duckdb -c \"SELECT count(*) FROM read_parquet('/tmp/{{workflow.uid}}/labels.parquet') "
        "a LEFT JOIN read_csv_auto('s3://shelf-ref/taxonomy/sku.csv') t USING (sku)\""])
    assert reads == ["s3://shelf-ref/taxonomy/sku.csv"], reads


def test_round_71_an_access_point_arn_is_read_but_not_warmed() -> None:
    """Blind round 71: boto3 given an access point ARN as its bucket read nothing, and the
    plan listed s3://<ARN>/key (as the AWS CLI takes it) to warm, which `prefetchd warm`
    could not address. It is read, shown as not warmed."""
    arn = "arn:aws:s3:us-west-2:123456789012:accesspoint/train-ap"
    step = _plan([{"name": "main", "script": {"image": "x", "command": ["python"], "source": (
        "import boto3\ns3 = boto3.client('s3')\n"
        f"s3.download_file('{arn}', 'vocab/v4.txt', '/tmp/v4.txt')\n")}}]).step("main")
    assert [(r.uri, r.supported) for r in step.reads] == [(f"s3://{arn}/vocab/v4.txt", False)]
    with pytest.raises(warm_mod.WarmError, match="access point ARN cannot be warmed"):
        warm_mod.parse_s3_uri(f"s3://{arn}/vocab/v4.txt")


def test_round_71_a_loop_over_range_of_an_inputs_value() -> None:
    """Blind round 71: ``for i in range(int("{{workflow.parameters.n_parts}}"))`` (and a KFP
    v2 integer input, written 2.0 in the IR: the corpus case kfp2_b71_ctr_train) read
    nothing, where range(2) was followed."""
    step = _plan([{"name": "main", "script": {"image": "x", "command": ["python"], "source": (
        "import boto3\ns3 = boto3.client('s3')\n"
        "n_parts = int('{{workflow.parameters.n_parts}}')\n"
        "for i in range(n_parts):\n"
        "    s3.download_file('ctr-clicks', f'clicks/part-{i:04d}.parquet', f'/tmp/{i}')\n")}}],
        arguments={"parameters": [{"name": "n_parts", "value": "2"}]}).step("main")
    assert sorted(r.uri for r in step.reads) == ["s3://ctr-clicks/clicks/part-0000.parquet",
                                                 "s3://ctr-clicks/clicks/part-0001.parquet"]
