"""Blind round 60 (table formats and dataset manifests): a Spark catalog's warehouse
(``--conf spark.sql.catalog.iot.warehouse=s3://...``) was read whole; a parquet dataset opened
through its ``_metadata`` summary read only the summary; ``pl.read_delta(table)`` in a step
named ``export-...`` was a write (the step's name decided, the reader unknown); a Delta MERGE
target was warmed as a read."""

from __future__ import annotations

import copy
from typing import Any

from prefetchd import pipeline

_ARGO = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
         "metadata": {"generateName": "t-", "namespace": "ml"}}


def _step(template: dict[str, Any]) -> pipeline.Step:
    doc = {**_ARGO, "spec": {"entrypoint": template["name"], "templates": [template]}}
    [plan] = pipeline.analyze_documents([copy.deepcopy(doc)], source="w.yaml")
    return plan.steps[0]


def _script(name: str, source: str) -> dict[str, Any]:
    return {"name": name, "script": {"image": "python:3.11", "command": ["python"],
                                     "source": source}}


def _uris(reads: list[pipeline.Read]) -> list[str | None]:
    return [r.uri for r in reads]


def test_a_catalogs_warehouse_is_not_read_whole() -> None:
    step = _step({"name": "land", "container": {
        "image": "spark:3.5.1", "command": ["/opt/spark/bin/spark-submit"],
        "args": ["--conf", "spark.sql.catalog.iot.warehouse=s3://iot-lake/warehouse",
                 "--conf", "spark.sql.warehouse.dir=s3://iot-lake/spark-wh",
                 "/opt/jobs/land.py", "--source", "s3://iot-landing/dt=2024-06-01/"]}})
    assert _uris(step.reads) == ["s3://iot-landing/dt=2024-06-01/"]


def test_a_parquet_summary_file_reads_its_folder() -> None:
    step = _step(_script("registry", "import pyarrow.dataset as ds\n"
                         "d = ds.parquet_dataset('s3://iot-ref/registry/_metadata', "
                         "partitioning='hive')\nprint(d.count_rows())\n"))
    assert _uris(step.reads) == ["s3://iot-ref/registry/"]


def test_a_delta_reader_in_a_step_named_export_reads() -> None:
    step = _step(_script("export-bi-extract", "import polars as pl\n"
                         "df = pl.read_delta('s3://ad-lake/delta/conversions')\n"
                         "print(df.height)\n"))
    assert _uris(step.reads) == ["s3://ad-lake/delta/conversions"] and not step.writes


def test_a_delta_table_changed_in_place_is_unknown() -> None:
    for change in ("DeltaTable(t).merge(u, 's.id = t.id').when_matched_update_all().execute()",
                   "dt = DeltaTable(t)\ndt.optimize.compact()\ndt.vacuum(retention_hours=168)"):
        step = _step(_script("upsert", "import pyarrow as pa\nfrom deltalake import DeltaTable\n"
                             "t = 's3://clin/delta/subject_status'\nu = pa.table({'id': [1]})\n"
                             + change + "\n"))
        assert not step.reads and not step.writes, change
        assert _uris(step.unknown) == ["s3://clin/delta/subject_status"], change
