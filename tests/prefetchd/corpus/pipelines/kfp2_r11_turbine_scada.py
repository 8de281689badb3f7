# ruff: noqa
"""Wind-farm SCADA anomaly detection (weekly).

10-minute SCADA from the lakehouse (Delta, silver layer) + turbine alarm logs
-> per-turbine normal-behaviour features on the shared feature PVC -> LSTM
autoencoder -> anomaly scores appended to the gold Delta table; if any turbine
is over threshold, work orders are opened in the CMMS.

    /tmp/kfp2/bin/python kfp2_r11_turbine_scada.py
"""
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Input, Metrics, Model, Output

LAKE_IMAGE = "ghcr.io/acme-renewables/lakehouse-py:3.2.0"
TORCH_IMAGE = "pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime"


@dsl.component(base_image=LAKE_IMAGE)
def read_scada(site: str, since: str, out_dir: str) -> int:
    import os

    import polars as pl

    df = pl.read_delta(
        "s3://acme-renewables-lake/silver/scada_10min",
        pyarrow_options={"partitions": [("site", "=", site)]},
    ).filter(pl.col("ts") >= pl.lit(since).str.to_datetime())
    os.makedirs(out_dir, exist_ok=True)
    df.write_parquet(f"{out_dir}/scada.parquet", compression="zstd")
    return df.select("turbine_id").n_unique()


@dsl.component(base_image=LAKE_IMAGE)
def load_alarms(out_dir: str):
    import os

    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    alarms = ds.dataset(os.environ["ALARM_LOG_URI"], format="parquet", partitioning="hive")
    tbl = alarms.to_table(filter=ds.field("severity") >= 2,
                          columns=["turbine_id", "alarm_code", "start_ts", "end_ts"])
    pq.write_table(tbl, f"{out_dir}/alarms.parquet")


@dsl.component(base_image=LAKE_IMAGE)
def build_features(out_dir: str, window: int):
    import polars as pl

    scada = pl.read_parquet(f"{out_dir}/scada.parquet")
    alarms = pl.read_parquet(f"{out_dir}/alarms.parquet")
    # drop curtailment / alarm windows so the model only sees normal behaviour
    normal = scada.join_asof(alarms.sort("start_ts"), left_on="ts", right_on="start_ts",
                             by="turbine_id").filter(pl.col("alarm_code").is_null()
                                                     | (pl.col("ts") > pl.col("end_ts")))
    feats = normal.group_by_dynamic("ts", every="1h", group_by="turbine_id").agg(
        pl.col(["wind_speed", "active_power", "gen_bearing_temp", "gearbox_oil_temp",
                "pitch_angle", "rotor_rpm"]).mean())
    feats.write_parquet(f"{out_dir}/features_w{window}.parquet")


@dsl.component(base_image=TORCH_IMAGE, packages_to_install=["polars==1.12.0"])
def train_autoencoder(out_dir: str, window: int, epochs: int,
                      model: Output[Model], metrics: Output[Metrics]):
    import polars as pl
    import torch
    from torch import nn

    x = pl.read_parquet(f"{out_dir}/features_w{window}.parquet").drop(["ts", "turbine_id"])
    x = torch.tensor(x.to_numpy(), dtype=torch.float32)
    seqs = x.unfold(0, window, 1).permute(0, 2, 1)

    class LSTMAE(nn.Module):
        def __init__(self, d, h=64):
            super().__init__()
            self.enc = nn.LSTM(d, h, batch_first=True)
            self.dec = nn.LSTM(h, d, batch_first=True)

        def forward(self, s):
            z, _ = self.enc(s)
            y, _ = self.dec(z)
            return y

    net = LSTMAE(seqs.shape[-1]).cuda()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    for ep in range(epochs):
        for b in torch.split(seqs[torch.randperm(len(seqs))], 1024):
            b = b.cuda()
            loss = nn.functional.mse_loss(net(b), b)
            opt.zero_grad(); loss.backward(); opt.step()
    metrics.log_metric("final_mse", float(loss))
    torch.save(net, model.path)


@dsl.component(base_image=TORCH_IMAGE,
               packages_to_install=["polars==1.12.0", "deltalake==0.21.0"])
def score_fleet(model: Input[Model], out_dir: str, window: int, site: str,
                threshold: float, run_id: str) -> int:
    import polars as pl
    import torch
    from deltalake import write_deltalake

    net = torch.load(model.path, map_location="cpu").eval()
    feats = pl.read_parquet(f"{out_dir}/features_w{window}.parquet")
    rows = []
    for tid, g in feats.group_by("turbine_id"):
        x = torch.tensor(g.drop(["ts", "turbine_id"]).to_numpy(), dtype=torch.float32)
        s = x.unfold(0, window, 1).permute(0, 2, 1)
        with torch.no_grad():
            err = ((net(s) - s) ** 2).mean(dim=(1, 2))
        rows.append({"site": site, "turbine_id": tid[0], "score": float(err[-168:].mean())})
    scores = pl.DataFrame(rows).with_columns((pl.col("score") > threshold).alias("alert"),
                                             pl.lit(run_id).alias("run_id"))
    write_deltalake("s3://acme-renewables-lake/gold/turbine_anomalies", scores.to_arrow(),
                    mode="append", partition_by=["site"])
    return int(scores["alert"].sum())


@dsl.component(base_image=LAKE_IMAGE)
def open_work_orders(site: str, run_id: str):
    import os

    import requests
    from deltalake import DeltaTable

    df = DeltaTable("s3://acme-renewables-lake/gold/turbine_anomalies").to_pandas(
        partitions=[("site", "=", site)], filters=[("run_id", "=", run_id), ("alert", "=", True)])
    for r in df.itertuples():
        requests.post(f"{os.environ['CMMS_URL']}/api/v2/workorders", timeout=30, json={
            "asset": f"{site}/{r.turbine_id}", "priority": "P2",
            "summary": f"SCADA NBM anomaly score {r.score:.3f}"},
            headers={"Authorization": f"Bearer {os.environ['CMMS_TOKEN']}"})


@dsl.component(base_image="python:3.11-slim")
def mark_healthy(site: str, n_turbines: int):
    print(f"{site}: all {n_turbines} turbines within normal behaviour")


@dsl.pipeline(name="scada-nbm-weekly")
def turbine_scada(
    site: str = "hornsea-2",
    since: str = "2025-02-01",
    feature_pvc: str = "renewables-feature-store",
    window: int = 24,
    epochs: int = 30,
    threshold: float = 0.035,
):
    scada = read_scada(site=site, since=since, out_dir="/features/scada-nbm")
    kubernetes.mount_pvc(scada, pvc_name=feature_pvc, mount_path="/features")
    kubernetes.use_secret_as_env(scada, "lakehouse-s3", {"access_key": "AWS_ACCESS_KEY_ID",
                                                         "secret_key": "AWS_SECRET_ACCESS_KEY"})

    alarms = load_alarms(out_dir="/features/scada-nbm")
    alarms.set_env_variable("ALARM_LOG_URI", "s3://acme-renewables-lake/bronze/alarm_logs/site=hornsea-2/")
    kubernetes.mount_pvc(alarms, pvc_name=feature_pvc, mount_path="/features")
    kubernetes.use_secret_as_env(alarms, "lakehouse-s3", {"access_key": "AWS_ACCESS_KEY_ID",
                                                          "secret_key": "AWS_SECRET_ACCESS_KEY"})

    feats = build_features(out_dir="/features/scada-nbm", window=window).after(scada, alarms)
    kubernetes.mount_pvc(feats, pvc_name=feature_pvc, mount_path="/features")

    train = train_autoencoder(out_dir="/features/scada-nbm", window=window, epochs=epochs).after(feats)
    train.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
    train.set_caching_options(False)
    kubernetes.mount_pvc(train, pvc_name=feature_pvc, mount_path="/features")

    score = score_fleet(model=train.outputs["model"], out_dir="/features/scada-nbm",
                        window=window, site=site, threshold=threshold,
                        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    kubernetes.mount_pvc(score, pvc_name=feature_pvc, mount_path="/features")
    kubernetes.use_secret_as_env(score, "lakehouse-s3", {"access_key": "AWS_ACCESS_KEY_ID",
                                                         "secret_key": "AWS_SECRET_ACCESS_KEY"})

    with dsl.If(score.output > 0, name="has-alerts"):
        wo = open_work_orders(site=site, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
        kubernetes.use_secret_as_env(wo, "cmms-api", {"url": "CMMS_URL", "token": "CMMS_TOKEN"})
    with dsl.Else(name="all-normal"):
        mark_healthy(site=site, n_turbines=scada.output)


if __name__ == "__main__":
    compiler.Compiler().compile(turbine_scada, __file__.replace(".py", ".yaml"))
