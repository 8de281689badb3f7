# ruff: noqa
"""Tree species mapping from NEON hyperspectral + lidar canopy height (Hera -> Argo Workflow)."""
from hera.workflows import DAG, Container, Parameter, Script, Workflow, models as m

CHM = m.Volume(name="chm", persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="neon-chm-cache", read_only=True))
SCRATCH = m.Volume(name="scratch", empty_dir=m.EmptyDirVolumeSource())

with Workflow(
    generate_name="tree-species-",
    entrypoint="species",
    on_exit="cleanup-chips",
    arguments=[Parameter(name="site", value="HARV"),
               Parameter(name="aop-year", value="2024"),
               Parameter(name="min-dbh-cm", value="10")],
    volumes=[CHM, SCRATCH],
    service_account_name="forest-ml",
) as w:
    list_plots = Script(
        name="list-plots",
        image="ghcr.io/forestml/geo-py:2025.06",
        command=["python"],
        source='''import json
import pandas as pd
site, min_dbh = "{{workflow.parameters.site}}", float("{{workflow.parameters.min-dbh-cm}}")
plots = pd.read_csv(f"s3://forest-inventory/neon-vst/{site}/plot_index.csv")
trees = pd.read_parquet(f"s3://forest-inventory/neon-vst/{site}/mapped_stems.parquet", columns=["plotID", "stemDiameter"])
keep = trees[trees.stemDiameter >= min_dbh].plotID.unique()
print(json.dumps(sorted(set(plots.plotID) & set(keep))))
''',
    )

    extract = Container(
        name="extract-chips",
        image="ghcr.io/forestml/aop-tools:1.3.2",
        inputs=[Parameter(name="plot")],
        command=["bash", "-c"],
        args=['''set -euxo pipefail
PLOT="{{inputs.parameters.plot}}"
SITE="{{workflow.parameters.site}}"
YEAR="{{workflow.parameters.aop-year}}"
printf '%s\\n' vnir swir | while read -r b; do
  aws s3 cp "s3://neon-aop/${YEAR}/${SITE}/hyperspectral/${b}/${PLOT}_reflectance.h5" "/scratch/${PLOT}_${b}.h5"
done
python -m aop.chips --hsi-dir /scratch --chm /chm/${SITE}/${PLOT}_chm.tif --plot "$PLOT" --out /scratch/${PLOT}.npz
aws s3 cp "/scratch/${PLOT}.npz" "s3://forest-chips/${SITE}/${YEAR}/${PLOT}.npz"
'''],
        volume_mounts=[m.VolumeMount(name="chm", mount_path="/chm", read_only=True, sub_path="chm/2024"),
                       m.VolumeMount(name="scratch", mount_path="/scratch")],
    )

    train = Script(
        name="train-species",
        image="ghcr.io/forestml/spectral-former:0.8.0-cu121",
        command=["python"],
        source='''import io
import fsspec
import numpy as np
import torch
from spectralformer import SpectralFormer, fit

site, year = "{{workflow.parameters.site}}", "{{workflow.parameters.aop-year}}"
fs = fsspec.filesystem("s3")
X, y = [], []
for key in fs.glob(f"forest-chips/{site}/{year}/*.npz"):
    with fs.open(key, "rb") as f:
        z = np.load(io.BytesIO(f.read()))
    X.append(z["x"]); y.append(z["y"])
with fsspec.open("s3://forest-models/spectral-former/base_v1.pt", "rb") as f:
    state = torch.load(f, map_location="cpu")
model = SpectralFormer(n_bands=426, n_classes=24)
model.load_state_dict(state, strict=False)
fit(model, np.concatenate(X), np.concatenate(y), epochs=40)
with fsspec.open(f"s3://forest-models/species/{site}/{year}/model.pt", "wb") as f:
    torch.save(model.state_dict(), f)
''',
    )

    map_species = Container(
        name="map-species",
        image="ghcr.io/forestml/spectral-former:0.8.0-cu121",
        inputs=[Parameter(name="season")],
        command=["python", "-m", "spectralformer.predict"],
        args=["--mosaic", "s3://neon-aop/{{workflow.parameters.aop-year}}/{{workflow.parameters.site}}/mosaic/{{inputs.parameters.season}}/",
              "--model", "s3://forest-models/species/{{workflow.parameters.site}}/{{workflow.parameters.aop-year}}/model.pt",
              "--out", "s3://forest-maps/{{workflow.parameters.site}}/{{workflow.parameters.aop-year}}/species_{{inputs.parameters.season}}.tif"],
    )

    cleanup = Container(
        name="cleanup-chips",
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "rm", "--recursive", "s3://forest-chips/{{workflow.parameters.site}}/{{workflow.parameters.aop-year}}/"],
    )

    with DAG(name="species"):
        lp = list_plots()
        ex = extract(name="extract", arguments={"plot": "{{item}}"}, with_param=lp.result)
        tr = train(name="train")
        mp = map_species(name="map", arguments={"season": "{{item}}"}, with_items=["leaf-on", "leaf-off"])
        lp >> ex >> tr >> mp

with open(__file__.replace(".py", ".yaml"), "w") as f:
    f.write(w.to_yaml())
