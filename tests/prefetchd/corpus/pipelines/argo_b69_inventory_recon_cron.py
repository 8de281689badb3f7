# ruff: noqa
"""Nightly store-inventory reconciliation (Argo CronWorkflow, Hera, steps).

The retail data team's sources are one YAML config string parameter (lake
roots and the store dimension). A partner drops inventory snapshots on their
own MinIO (`mc` alias, host from a Secret); the drop is copied into the lake.
Orders and returns for the partition date are read with pyarrow / polars
(hive `dt=` folders); the point-of-sale snapshot for the scheduled hour is
read by path from {{workflow.scheduledTime}}. `reconcile` compares the
partner's counts with the book stock and writes a mismatch report.

Generate: python argo_b69_inventory_recon_cron.py  -> argo_b69_inventory_recon_cron.yaml
"""
import os

from hera.workflows import Container, CronWorkflow, Env, Parameter, Script, Steps
from hera.workflows import models as m

IMAGE = 'ghcr.io/acme-retail/inventory:3.8.0'

SOURCES = """orders: s3://acme-retail-lake/orders/
returns: s3://acme-retail-lake/returns/
stores: s3://acme-retail-ref/stores/v12/stores.parquet
"""

with CronWorkflow(
    name='inventory-recon-nightly',
    schedules=['30 2 * * *'],
    timezone='America/Chicago',
    concurrency_policy='Replace',
    entrypoint='nightly',
    on_exit='notify',
    service_account_name='retail-etl',
    arguments=[
        Parameter(name='partition_date', value='2026-12-01'),
        Parameter(name='sources', value=SOURCES),
    ],
    volumes=[m.Volume(name='scratch', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name='retail-etl-scratch'))],
) as cw:
    stage_drop = Script(
        name='stage-partner-drop',
        image='minio/mc:RELEASE.2024-11-21T17-21-54Z',
        command=['bash'],
        env=[
            m.EnvVar(name='PARTNER_URL', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='partner-minio', key='url'))),
            m.EnvVar(name='PARTNER_KEY', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='partner-minio', key='access_key'))),
            m.EnvVar(name='PARTNER_SECRET', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='partner-minio', key='secret_key'))),
            m.EnvVar(name='AWS_ACCESS_KEY_ID', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='retail-lake-writer', key='access_key'))),
            m.EnvVar(name='AWS_SECRET_ACCESS_KEY', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='retail-lake-writer', key='secret_key'))),
        ],
        source='''set -euo pipefail
DT="{{workflow.parameters.partition_date}}"
mc alias set partner "$PARTNER_URL" "$PARTNER_KEY" "$PARTNER_SECRET"
mc alias set lake https://s3.amazonaws.com "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY"
mkdir -p /scratch/partner/$DT
mc cp --recursive "partner/inventory-drops/$DT/" "/scratch/partner/$DT/"
mc cp --recursive "/scratch/partner/$DT/" "lake/acme-retail-lake/partner-inventory/dt=$DT/"
''',
        volume_mounts=[m.VolumeMount(name='scratch', mount_path='/scratch')],
    )

    load_book = Script(
        name='load-book-stock',
        image=IMAGE,
        command=['python'],
        source='''import polars as pl
import pyarrow.dataset as pads
import yaml

cfg = yaml.safe_load("""{{workflow.parameters.sources}}""")
dt = "{{workflow.parameters.partition_date}}"

orders = pl.from_arrow(pads.dataset(f"{cfg['orders']}dt={dt}/", format="parquet", partitioning="hive").to_table())
returns = pl.scan_parquet(f"{cfg['returns']}dt={dt}/*.parquet").collect()
stores = pl.read_parquet(cfg["stores"])
pos = pl.read_parquet("s3://acme-retail-pos/snapshots/{{workflow.scheduledTime}}/stock.parquet")

sold = orders.group_by(["store_id", "sku"]).agg(pl.col("qty").sum().alias("sold"))
back = returns.group_by(["store_id", "sku"]).agg(pl.col("qty").sum().alias("returned"))
book = (pos.join(sold, on=["store_id", "sku"], how="left").join(back, on=["store_id", "sku"], how="left")
        .fill_null(0).with_columns((pl.col("on_hand") - pl.col("sold") + pl.col("returned")).alias("book_qty"))
        .join(stores.select(["store_id", "region"]), on="store_id"))
book.write_parquet(f"s3://acme-retail-features/inventory/dt={dt}/book_stock.parquet")
''',
    )

    reconcile = Container(
        name='reconcile',
        image=IMAGE,
        command=['python', '-m', 'inventory.reconcile'],
        args=[
            '--partner', 's3://acme-retail-lake/partner-inventory/dt={{workflow.parameters.partition_date}}/',
            '--book', 's3://acme-retail-features/inventory/dt={{workflow.parameters.partition_date}}/book_stock.parquet',
            '--tolerance', '0.02',
            '--report', 's3://acme-retail-reports/inventory-recon/dt={{workflow.parameters.partition_date}}/mismatches.csv',
        ],
    )

    notify = Container(
        name='notify',
        image='curlimages/curl:8.8.0',
        command=['sh', '-c'],
        args=['curl -sf -X POST "$WEBHOOK" -d "{\\"text\\": \\"inventory-recon {{workflow.parameters.partition_date}}: '
              '{{workflow.status}} (s3://acme-retail-reports/inventory-recon/dt={{workflow.parameters.partition_date}}/)\\"}"'],
        env=[m.EnvVar(name='WEBHOOK', value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name='retail-chat', key='webhook')))],
    )

    with Steps(name="nightly") as s:
        with s.parallel():
            stage_drop()
            load_book()
        reconcile()


if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(cw.to_yaml())
