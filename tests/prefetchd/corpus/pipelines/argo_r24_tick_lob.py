# ruff: noqa
"""Limit-order-book mid-price model (Hera -> Argo Workflow): per-symbol features, DeepLOB per horizon, backtest."""
from hera.workflows import DAG, Container, Parameter, Workflow, script, models as m

SCRATCH = m.Volume(name="scratch", persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="tick-scratch"))


@script(image="ghcr.io/quantml/arrow:17.0.0", volume_mounts=[m.VolumeMount(name="scratch", mount_path="/work")])
def symbol_features(symbol: str, exchange: str, trade_date: str):
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    def day_uri(kind, d):
        return f"s3://ticks-raw/{exchange}/{kind}/date={d}/"

    trades = ds.dataset(day_uri("trades", trade_date), format="parquet", partitioning="hive")
    t = trades.to_table(filter=pc.field("symbol") == symbol)
    quotes = pq.read_table("/".join(["s3://ticks-raw", exchange, "quotes", f"date={trade_date}", f"symbol={symbol}"]))
    pq.write_table(quotes, f"/work/{trade_date}/{symbol}.quotes.parquet")
    pq.write_table(t, f"s3://ticks-features/{exchange}/{trade_date}/{symbol}.parquet")


@script(image="ghcr.io/quantml/backtest:2.4.0")
def backtest(exchange: str, trade_date: str, model_root: str):
    import json
    import fsspec
    import pandas as pd
    files = fsspec.open_files(f"s3://ticks-features/{exchange}/{trade_date}/*.parquet", "rb")
    frames = []
    for of in files:
        with of as f:
            frames.append(pd.read_parquet(f))
    model_dir = model_root.removesuffix("/") + f"/{exchange}/{trade_date}"
    with fsspec.open(model_dir + "/h10/model.pt", "rb") as f:
        blob = f.read()
    pnl = {"rows": sum(len(x) for x in frames), "model_bytes": len(blob)}
    with fsspec.open(f"s3://ticks-reports/backtest/{exchange}/{trade_date}.json", "w") as f:
        json.dump(pnl, f)
    print(json.dumps(pnl))


with Workflow(
    generate_name="tick-lob-",
    entrypoint="main",
    on_exit="cleanup-scratch",
    arguments=[Parameter(name="exchange", value="xnas"),
               Parameter(name="trade-date", value="2025-06-13"),
               Parameter(name="symbols", value='["AAPL", "MSFT", "NVDA"]'),
               Parameter(name="model-root", value="s3://ticks-models/deeplob/"),
               Parameter(name="run-backtest", value="true")],
    volumes=[SCRATCH],
    service_account_name="quant-ml",
) as w:
    calendar = Container(
        name="fetch-calendar",
        image="rclone/rclone:1.67",
        command=["rclone"],
        args=["copyto", ":s3,provider=AWS,env_auth=true:ticks-ref/calendars/{{workflow.parameters.exchange}}.json",
              "/work/calendar.json"],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/work")],
    )

    train = Container(
        name="train-deeplob",
        image="ghcr.io/quantml/deeplob:1.1.0-cu124",
        inputs=[Parameter(name="horizon"), Parameter(name="loss")],
        command=["bash", "-c"],
        args=['''set -euo pipefail
ROOT="{{workflow.parameters.model-root}}"
OUT="${ROOT%/}/{{workflow.parameters.exchange}}/{{workflow.parameters.trade-date}}/h{{inputs.parameters.horizon}}"
python -m deeplob.train \\
  --features "s3://ticks-features/{{workflow.parameters.exchange}}/{{workflow.parameters.trade-date}}/" \\
  --calendar /work/calendar.json \\
  --pretrained s3://ticks-models/deeplob/base-2025q1/ \\
  --horizon {{inputs.parameters.horizon}} --loss {{inputs.parameters.loss}} \\
  --output-dir /tmp/out
aws s3 cp /tmp/out/model.pt "$OUT/model.pt"
'''],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/work")],
        resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1", "memory": "64Gi"}),
        node_selector={"karpenter.sh/nodepool": "gpu-l40s"},
        tolerations=[m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
    )

    cleanup = Container(
        name="cleanup-scratch",
        image="busybox:1.36",
        command=["sh", "-c"],
        args=["rm -rf /work/{{workflow.parameters.trade-date}} /work/calendar.json"],
        volume_mounts=[m.VolumeMount(name="scratch", mount_path="/work")],
    )

    with DAG(name="main"):
        cal = calendar(name="fetch-calendar")
        feats = symbol_features(name="features",
                                arguments={"symbol": "{{item}}", "exchange": "{{workflow.parameters.exchange}}",
                                           "trade_date": "{{workflow.parameters.trade-date}}"},
                                with_param="{{workflow.parameters.symbols}}")
        tr = train(name="train", arguments={"horizon": "{{item.h}}", "loss": "{{item.loss}}"},
                   with_items=[{"h": "10", "loss": "ce"}, {"h": "50", "loss": "focal"}])
        bt = backtest(name="backtest",
                      arguments={"exchange": "{{workflow.parameters.exchange}}",
                                 "trade_date": "{{workflow.parameters.trade-date}}",
                                 "model_root": "{{workflow.parameters.model-root}}"},
                      when="{{workflow.parameters.run-backtest}} == true")
        [cal, feats] >> tr >> bt

open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
