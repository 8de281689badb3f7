# ruff: noqa
"""Web-log sessionization for one day plus the monthly rollup (Argo Workflow, Hera, DAG).

Raw CloudFront-style logs land under hive `dt=` / `hour=` folders as gzipped
JSON parts. The day is copied with an s5cmd wildcard onto a per-run volume,
sessionized with polars (bot user-agents from a reference CSV, GeoIP from a
monthly folder), and written to the curated bucket; the monthly rollup globs
every day of the month with DuckDB; the rollup is pushed to the BI team's
MinIO with rclone named remotes configured through env vars.

Generate: python argo_b69_weblogs_sessionize.py  -> argo_b69_weblogs_sessionize.yaml
"""
import os

from hera.workflows import DAG, Container, Env, Parameter, Script, Workflow
from hera.workflows import models as m

ETL_IMAGE = 'ghcr.io/acme-web/logs-etl:2026.11.2'

with Workflow(
    generate_name='weblogs-sessionize-',
    entrypoint='main',
    service_account_name='weblogs-etl',
    arguments=[
        Parameter(name='dt', value='2026-12-01'),
        Parameter(name='month', value='2026-11'),
        Parameter(name='raw_bucket', value='acme-weblogs'),
    ],
    volume_claim_templates=[
        m.PersistentVolumeClaim(
            metadata=m.ObjectMeta(name='work'),
            spec=m.PersistentVolumeClaimSpec(
                access_modes=['ReadWriteOnce'],
                storage_class_name='gp3',
                resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('200Gi')}),
            ),
        )
    ],
) as w:
    count_parts = Container(
        name='count-parts',
        image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        args=['aws s3 ls --recursive s3://{{workflow.parameters.raw_bucket}}/raw/dt={{workflow.parameters.dt}}/ '
              '| grep -c "part-.*\\.json\\.gz$" > /tmp/n_parts'],
        outputs=[Parameter(name='n_parts', value_from=m.ValueFrom(path='/tmp/n_parts'))],
    )

    fetch_raw = Script(
        name='fetch-raw',
        image='peakcom/s5cmd:v2.2.2',
        command=['sh'],
        source='''set -eu
mkdir -p /work/raw /work/geoip
s5cmd --numworkers 64 cp 's3://{{workflow.parameters.raw_bucket}}/raw/dt={{workflow.parameters.dt}}/hour=*/part-*.json.gz' /work/raw/
s5cmd cp 's3://acme-weblogs-ref/geoip/{{workflow.parameters.month}}/*' /work/geoip/
echo "fetched $(ls /work/raw | wc -l) parts"
''',
        volume_mounts=[m.VolumeMount(name='work', mount_path='/work')],
    )

    sessionize = Script(
        name='sessionize',
        image=ETL_IMAGE,
        command=['python'],
        source='''import polars as pl
from weblogs.geo import GeoIP

DT = "{{workflow.parameters.dt}}"
bots = pl.read_csv("s3://acme-weblogs-ref/bot-agents/current.csv")
geo = GeoIP("/work/geoip/GeoLite2-City.mmdb")

hits = (
    pl.scan_ndjson("/work/raw/*.json.gz")
    .filter(~pl.col("user_agent").is_in(bots["user_agent"]))
    .with_columns(pl.col("ts").str.to_datetime())
    .sort(["visitor_id", "ts"])
)
gap = (pl.col("ts").diff().over("visitor_id") > pl.duration(minutes=30)).fill_null(True)
sessions = (
    hits.with_columns(gap.cum_sum().over("visitor_id").alias("session_seq"))
    .group_by(["visitor_id", "session_seq"])
    .agg(pl.col("ts").min().alias("start"), pl.col("ts").max().alias("end"),
         pl.len().alias("hits"), pl.col("ip").first())
    .collect()
)
sessions = geo.annotate(sessions, ip_col="ip")
sessions.write_parquet(f"s3://acme-weblogs-curated/sessions/dt={DT}/sessions.parquet")
print(f"{sessions.height} sessions for {DT}")
''',
        volume_mounts=[m.VolumeMount(name='work', mount_path='/work')],
    )

    monthly_rollup = Script(
        name='monthly-rollup',
        image=ETL_IMAGE,
        command=['python'],
        source='''import duckdb

month = "{{workflow.parameters.month}}"
con = duckdb.connect()
con.sql("INSTALL httpfs; LOAD httpfs; CREATE SECRET (TYPE S3, PROVIDER CREDENTIAL_CHAIN);")
con.sql(f"""
COPY (
  SELECT dt, count(*) AS sessions, avg(hits) AS hits_per_session,
         quantile_cont(epoch(\\"end\\" - start), 0.5) AS median_duration_s
  FROM read_parquet('s3://acme-weblogs-curated/sessions/dt={month}-*/sessions.parquet', hive_partitioning = true)
  GROUP BY dt ORDER BY dt
) TO 's3://acme-weblogs-curated/rollups/month={month}/daily.parquet' (FORMAT PARQUET)
""")
''',
    )

    publish_bi = Container(
        name='publish-bi',
        image='rclone/rclone:1.68',
        command=['rclone'],
        args=['copy', '--s3-no-check-bucket',
              'lake:acme-weblogs-curated/rollups/month={{workflow.parameters.month}}/',
              'bi:weblogs/rollups/{{workflow.parameters.month}}/'],
        env=[
            Env(name='RCLONE_CONFIG_LAKE_TYPE', value='s3'),
            Env(name='RCLONE_CONFIG_LAKE_PROVIDER', value='AWS'),
            Env(name='RCLONE_CONFIG_LAKE_ENV_AUTH', value='true'),
            Env(name='RCLONE_CONFIG_LAKE_REGION', value='us-east-1'),
            Env(name='RCLONE_CONFIG_BI_TYPE', value='s3'),
            Env(name='RCLONE_CONFIG_BI_PROVIDER', value='Minio'),
            Env(name='RCLONE_CONFIG_BI_ENDPOINT', value='http://minio.bi-platform.svc:9000'),
            m.EnvVar(name='RCLONE_CONFIG_BI_ACCESS_KEY_ID', value_from=m.EnvVarSource(
                secret_key_ref=m.SecretKeySelector(name='bi-minio', key='access_key'))),
            m.EnvVar(name='RCLONE_CONFIG_BI_SECRET_ACCESS_KEY', value_from=m.EnvVarSource(
                secret_key_ref=m.SecretKeySelector(name='bi-minio', key='secret_key'))),
        ],
    )

    with DAG(name='main'):
        c = count_parts()
        f = fetch_raw(when='{{tasks.count-parts.outputs.parameters.n_parts}} > 0')
        s = sessionize()
        r = monthly_rollup()
        p = publish_bi()
        c >> f >> s >> r >> p


if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
