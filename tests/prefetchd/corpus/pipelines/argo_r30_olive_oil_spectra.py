# ruff: noqa
"""Olive-oil adulteration screening: FTIR spectra per incoming lot, baseline-corrected against a reference library on a
shared read-only claim -> 1D-CNN trained on the season's labelled lots (GPU) -> a certificate per lot when accuracy holds."""
from hera.workflows import DAG, Container, Parameter, Resources, Workflow, script, models as m

OQA = "ghcr.io/oliveqa/spectra-ml:3.0.1"
REF = m.VolumeMount(name="reference", mount_path="/reference", read_only=True)


@script(image=OQA, inputs=[Parameter(name="lot"), Parameter(name="spectra_root"), Parameter(name="model_version")],
        volume_mounts=[REF], resources=Resources(cpu_request="2", memory_request="8Gi"))
def preprocess_lot(lot: str, spectra_root: str, model_version: str):
    import h5py
    import pandas as pd
    from oliveqa.spectra import als_baseline, snv

    raw = pd.read_csv(f"{spectra_root}/{lot}/spectra.csv")
    with h5py.File("/reference/library/pure_evoo_2024.h5", "r") as h:
        ref = h["mean_spectrum"][:]
    feats = snv(als_baseline(raw, reference=ref))
    feats["lot"] = lot
    feats.to_parquet(f"s3://oliveqa-features/{model_version}/{lot}.parquet", index=False)


@script(image=OQA, inputs=[Parameter(name="model_version")],
        resources=Resources(cpu_request="8", memory_request="32Gi", gpus=1))
def train_cnn(model_version: str):
    import fsspec
    import pandas as pd
    import pyarrow.dataset as ds
    import torch
    from oliveqa.cnn import fit_cnn1d

    labelled = pd.read_parquet("s3://oliveqa-labels/adulteration/2025_labelled_lots.parquet")
    feats = ds.dataset(f"s3://oliveqa-features/{model_version}/", format="parquet").to_table().to_pandas()
    model, acc = fit_cnn1d(feats.merge(labelled, on="lot"), epochs=120)
    with fsspec.open(f"s3://oliveqa-models/cnn1d/{model_version}/model.pt", "wb") as f:
        torch.save(model.state_dict(), f)
    print(f"{acc:.3f}")


with Workflow(
    generate_name="olive-oil-spectra-",
    entrypoint="screen",
    on_exit="record-status",
    service_account_name="oliveqa-runner",
    arguments=[
        Parameter(name="lots", value='["andalusia-2025-041", "puglia-2025-017", "crete-2025-009"]'),
        Parameter(name="spectra_root", value="s3://oliveqa-raw/ftir/2025-10"),
        Parameter(name="model_version", value="v5"),
        Parameter(name="min_accuracy", value="0.95"),
    ],
    volumes=[m.Volume(name="reference",
                      persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name="oliveqa-reference-lib",
                                                                                  read_only=True))],
) as w:
    certify = Container(
        name="certify-lot",
        image=OQA,
        inputs=[Parameter(name="lot")],
        command=["python", "-m", "oliveqa.certify"],
        args=["--lot", "{{inputs.parameters.lot}}",
              "--spectra", "{{workflow.parameters.spectra_root}}/{{inputs.parameters.lot}}/spectra.csv",
              "--model", "s3://oliveqa-models/cnn1d/{{workflow.parameters.model_version}}/model.pt",
              "--report", "s3://oliveqa-certs/2025/{{inputs.parameters.lot}}/certificate.pdf"],
    )
    record = Container(
        name="record-status",
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=['echo "{{workflow.status}} {{workflow.duration}}" | aws s3 cp - "s3://oliveqa-runs/{{workflow.name}}/STATUS"'],
    )
    with DAG(name="screen"):
        pre = preprocess_lot(name="preprocess-lot",
                             arguments={"lot": "{{item}}", "spectra_root": "{{workflow.parameters.spectra_root}}",
                                        "model_version": "{{workflow.parameters.model_version}}"},
                             with_param="{{workflow.parameters.lots}}")
        tr = train_cnn(name="train-cnn", arguments={"model_version": "{{workflow.parameters.model_version}}"})
        cert = certify(name="certify-lot", arguments={"lot": "{{item}}"}, with_param="{{workflow.parameters.lots}}",
                       when=f"{tr.result} >= {{{{workflow.parameters.min_accuracy}}}}")
        pre >> tr >> cert

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
