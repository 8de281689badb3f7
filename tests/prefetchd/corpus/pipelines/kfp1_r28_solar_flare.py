# ruff: noqa
"""Solar flare forecasting (>=M-class within 24h) from SDO/HMI SHARP patches and GOES XRS flux; nowcasts per active region."""
import kfp
from kfp import dsl
from kfp.components import create_component_from_func
from kubernetes import client as k8s

HELIO_IMAGE = "ghcr.io/helio-ml/flarenet:1.3.0"


def fetch_sharp(year: str):
    import s3fs

    fs = s3fs.S3FileSystem()
    for month in range(1, 13):
        fs.get(f"s3://helio-lake/sharp/cea-720s/{year}/{month:02d}/", f"/work/sharp/{month:02d}/", recursive=True)


def label_events(year: str, min_class: str):
    import pandas as pd

    flares = pd.read_csv("s3://helio-lake/events/hek_flares_2010_2025.csv", parse_dates=["peak_time"])
    flares = flares[flares["peak_time"].dt.year == int(year)]
    flares["label"] = flares["goes_class"].str[0].isin(["M", "X"] if min_class == "M" else ["X"])
    flares.to_parquet("/work/labels.parquet", index=False)


def list_active_regions(as_of: str) -> list:
    import pandas as pd

    ar = pd.read_csv(f"s3://helio-lake/sharp/nrt/active_regions_{as_of}.csv")
    return sorted(ar.loc[ar["area"] > 50, "harpnum"].astype(str).tolist())


def nowcast_region(harpnum: str, year: str, as_of: str):
    import pandas as pd
    import torch
    from flarenet.infer import load_model, score_patches

    patches = pd.read_parquet(f"s3://helio-lake/sharp/nrt/harp_{harpnum}/")
    model = load_model(f"s3://helio-models/flarenet/{year}/final/model.pt")
    probs = score_patches(model, patches)
    probs.to_json(f"s3://helio-forecasts/{as_of}/harp_{harpnum}.json", orient="records")


fetch_sharp_op = create_component_from_func(fetch_sharp, base_image=HELIO_IMAGE)
label_op = create_component_from_func(label_events, base_image=HELIO_IMAGE)
list_ar_op = create_component_from_func(list_active_regions, base_image=HELIO_IMAGE)
nowcast_op = create_component_from_func(nowcast_region, base_image=HELIO_IMAGE)


@dsl.pipeline(name="solar-flare-forecast")
def flare_pipeline(year: str = "2024", as_of: str = "2025-06-18", min_class: str = "M"):
    notify = dsl.ContainerOp(
        name="notify",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -s -X POST "$HOOK" -d "flare forecast {{workflow.name}} {{workflow.status}}"'],
    )
    notify.container.add_env_variable(
        k8s.V1EnvVar(name="HOOK", value_from=k8s.V1EnvVarSource(
            secret_key_ref=k8s.V1SecretKeySelector(name="helio-ops", key="webhook"))))

    with dsl.ExitHandler(notify):
        work = dsl.VolumeOp(name="work", resource_name="flare-work", size="400Gi", modes=dsl.VOLUME_MODE_RWO)

        goes = dsl.ContainerOp(
            name="fetch-goes",
            image="amazon/aws-cli:2.17.0",
            command=["sh", "-c"],
            arguments=[f'aws s3 sync s3://helio-lake/goes-xrs/g16/ /work/goes/ --exclude "*" '
                       f'--include "sci_xrsf-l2-avg1m_g16_y{year}*" --no-progress'],
            pvolumes={"/work": work.volume},
        )
        sharp = fetch_sharp_op(year=year).add_pvolumes({"/work": work.volume})
        labels = label_op(year=year, min_class=min_class).add_pvolumes({"/work": work.volume})

        train = dsl.ContainerOp(
            name="train-flarenet",
            image=HELIO_IMAGE,
            command=["python", "-m", "flarenet.train"],
            arguments=["--sharp-dir", "/work/sharp", "--goes-dir", "/work/goes", "--labels", "/work/labels.parquet",
                       "--pretrained", "s3://helio-models/flarenet/pretrain-2010-2023.ckpt",
                       "--checkpoint-dir", f"s3://helio-models/flarenet/{year}/ckpt/",
                       "--save-dir", f"s3://helio-models/flarenet/{year}/final/",
                       "--max-epochs", "30"],
            pvolumes={"/work": work.volume},
        ).after(goes, sharp, labels)
        train.set_gpu_limit(1)
        train.container.add_env_variable(k8s.V1EnvVar(name="TORCH_HOME", value="/work/.torch"))

        regions = list_ar_op(as_of=as_of)
        with dsl.ParallelFor(regions.output) as harp:
            nowcast_op(harpnum=harp, year=year, as_of=as_of).after(train)


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(flare_pipeline, __file__.replace(".py", ".yaml"))
