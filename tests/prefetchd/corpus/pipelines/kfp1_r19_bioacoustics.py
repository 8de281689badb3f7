# ruff: noqa
"""Passive acoustic monitoring: bird/bat call detection per recorder site (static ParallelFor of dicts, onprem PVC, env, Condition)."""
import kfp
from kfp import dsl, onprem
from kfp.components import create_component_from_func
from kubernetes.client import V1EnvVar

SITES = [
    {"site": "kruger-north", "region": "za", "recorder_bucket": "wildsound-raw-af"},
    {"site": "pantanal-sul", "region": "br", "recorder_bucket": "wildsound-raw-sa"},
    {"site": "danum-valley", "region": "my", "recorder_bucket": "wildsound-raw-as"},
]


def aggregate_detections(month: str, min_conf: float) -> int:
    import duckdb

    con = duckdb.connect()
    con.sql("INSTALL httpfs; LOAD httpfs;")
    con.sql(f"""
        COPY (
          SELECT site, species_code, count(*) AS n, max(confidence) AS top
          FROM read_csv_auto('s3://wildsound-detections/*/{month}/detections.csv', hive_partitioning=false)
          WHERE confidence >= {min_conf}
          GROUP BY ALL
        ) TO 's3://wildsound-reports/{month}/site_species.parquet' (FORMAT PARQUET)
    """)
    redlist = con.sql(
        "SELECT count(*) FROM read_parquet('s3://wildsound-reports/%s/site_species.parquet') r "
        "JOIN read_csv_auto('s3://wildsound-ref/iucn/redlist_2025.csv') i USING (species_code) "
        "WHERE i.status IN ('EN','CR')" % month
    ).fetchone()[0]
    return int(redlist)


aggregate_op = create_component_from_func(aggregate_detections, base_image="ghcr.io/wildsound/pam-py:1.6.0",
                                          packages_to_install=["duckdb==1.0.0"])


@dsl.pipeline(name="pam-call-detection")
def pam(month: str = "2025-06", min_conf: float = 0.7,
        classifier: str = "s3://wildsound-models/birdnet-ft/v2.4-tropics/"):
    with dsl.ParallelFor(SITES) as s:
        sync = dsl.ContainerOp(
            name="sync-recordings",
            image="peakcom/s5cmd:v2.2.2",
            command=["/s5cmd"],
            arguments=["--numworkers", "24", "cp",
                       "s3://%s/%s/%s/*.flac" % (s.recorder_bucket, s.site, month),
                       "/audio/%s/%s/" % (s.site, month)],
        ).apply(onprem.mount_pvc("acoustic-scratch", "scratch", "/audio"))
        classify = dsl.ContainerOp(
            name="classify-calls",
            image="ghcr.io/wildsound/birdnet-runner:2.4.1-cu121",
            command=["python", "-m", "birdnet_runner.analyze"],
            arguments=["--audio-root", "/audio/%s/%s" % (s.site, month),
                       "--classifier", classifier,
                       "--species-list", "s3://wildsound-ref/species-lists/%s.txt" % s.region,
                       "--min-conf", min_conf,
                       "--output", "s3://wildsound-detections/%s/%s/detections.csv" % (s.site, month)],
        ).apply(onprem.mount_pvc("acoustic-scratch", "scratch", "/audio")).after(sync)
        classify.container.add_env_variable(
            V1EnvVar(name="TAXONOMY_URI", value="s3://wildsound-ref/taxonomy/ebird_clements_2024.csv"))
    agg = aggregate_op(month=month, min_conf=min_conf).after(classify)
    with dsl.Condition(agg.output > 0, name="redlist-found"):
        dsl.ContainerOp(
            name="share-with-partners",
            image="google/cloud-sdk:483.0.0-slim",
            command=["bash", "-c"],
            arguments=["""set -e
MONTH="$0"
gsutil -m cp "s3://wildsound-reports/${MONTH}/site_species.parquet" "gs://conservation-partners-inbox/wildsound/${MONTH}/"
""", month],
        )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(pam, __file__.replace(".py", ".yaml"))
