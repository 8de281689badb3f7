# ruff: noqa
"""Wastewater SARS-CoV-2 lineage surveillance (Freyja): importer from a parameter, ParallelFor over a list
parameter, Collected fan-in, If/Elif/Else on a task output, ExitHandler."""
from typing import List, NamedTuple

from kfp import compiler, dsl
from kfp.dsl import Artifact, Dataset, Input, Output

PY = "ghcr.io/ww-surveil/epi-py:2025.07"


@dsl.container_component
def demix_plant(seq_root: str, week: str, plant: str, barcodes: Input[Artifact], abundances: Output[Dataset]):
    return dsl.ContainerSpec(
        image="ghcr.io/ww-surveil/freyja:1.5.2",
        command=["bash", "-c"],
        args=["""set -euo pipefail
aws s3 cp "$0/$1/$2/" /tmp/reads/ --recursive --exclude "*" --include "*.bam*"
aws s3 cp s3://ww-ref/sars2/NC_045512.2.fasta /tmp/ref.fa
freyja variants /tmp/reads/merged.bam --variants /tmp/var.tsv --depths /tmp/depth.tsv --ref /tmp/ref.fa
freyja demix /tmp/var.tsv /tmp/depth.tsv --barcodes "$3" --output "$4"
""", seq_root, week, plant, barcodes.path, abundances.path],
    )


@dsl.component(base_image=PY)
def aggregate_lineages(abundances: List[Dataset], week: str, summary: Output[Dataset]) -> NamedTuple(
        "Agg", [("level", str), ("top_lineage", str)]):
    import pandas as pd

    pop = pd.read_csv("s3://ww-ref/sewersheds/population_served.csv")
    parts = [pd.read_csv(a.path, sep="\t") for a in abundances]
    df = pd.concat(parts).merge(pop, on="plant")
    df["week"] = week
    df.to_parquet(summary.path)
    growth = df.groupby("lineage")["weighted"].sum().sort_values(ascending=False)
    level = "surge" if growth.iloc[0] > 0.4 else ("elevated" if growth.iloc[0] > 0.15 else "quiet")
    from collections import namedtuple
    return namedtuple("Agg", ["level", "top_lineage"])(level, str(growth.index[0]))


@dsl.component(base_image=PY)
def variant_deep_dive(lineage: str, summary: Input[Dataset]):
    import json

    import fsspec

    with fsspec.open(f"s3://ww-ref/lineages/{lineage}/mutations.json") as f:
        muts = json.load(f)
    print(lineage, len(muts))


@dsl.component(base_image=PY)
def compare_history(summary: Input[Dataset]):
    import pandas as pd

    hist = pd.read_parquet("s3://ww-results/history/lineage_abundance.parquet")
    cur = pd.read_parquet(summary.path)
    print(cur.merge(hist, on=["plant", "lineage"], how="left").tail())


@dsl.component(base_image=PY)
def log_quiet_week(week: str):
    import fsspec

    with fsspec.open(f"s3://ww-results/quiet-weeks/{week}.txt", "w") as f:
        f.write("no lineage above threshold\n")


@dsl.component(base_image=PY)
def publish_dashboard(summary: Input[Dataset], week: str, dashboard_root: str):
    import pandas as pd

    pd.read_parquet(summary.path).to_parquet(f"{dashboard_root}/{week}/abundance.parquet")


@dsl.container_component
def notify_epi(week: str):
    return dsl.ContainerSpec(image="curlimages/curl:8.8.0", command=["sh", "-c"],
                             args=['curl -sf -X POST "$SLACK_HOOK" -d "{\\"text\\": \\"ww run $0 done\\"}"', week])


@dsl.pipeline(name="wastewater-lineage-surveillance")
def wastewater(plants: List[str] = ["oakland-eb", "san-jose-sv", "sf-oceanside"], week: str = "2025-W28",
               seq_root: str = "s3://ww-seq/illumina",
               barcodes_uri: str = "s3://ww-ref/freyja/usher_barcodes_2025-07-01.feather",
               dashboard_root: str = "s3://ww-dashboard/ca-bay-area"):
    exit_task = notify_epi(week=week)
    with dsl.ExitHandler(exit_task):
        bc = dsl.importer(artifact_uri=barcodes_uri, artifact_class=Artifact, reimport=False,
                          metadata={"source": "UShER", "date": "2025-07-01"})
        with dsl.ParallelFor(plants, parallelism=3) as plant:
            dm = demix_plant(seq_root=seq_root, week=week, plant=plant, barcodes=bc.output)
        agg = aggregate_lineages(abundances=dsl.Collected(dm.outputs["abundances"]), week=week)
        with dsl.If(agg.outputs["level"] == "surge"):
            variant_deep_dive(lineage=agg.outputs["top_lineage"], summary=agg.outputs["summary"])
        with dsl.Elif(agg.outputs["level"] == "elevated"):
            compare_history(summary=agg.outputs["summary"])
        with dsl.Else():
            log_quiet_week(week=week)
        publish_dashboard(summary=agg.outputs["summary"], week=week, dashboard_root=dashboard_root)


if __name__ == "__main__":
    compiler.Compiler().compile(wastewater, __file__.replace(".py", ".yaml"))
