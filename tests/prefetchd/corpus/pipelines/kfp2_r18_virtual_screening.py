# ruff: noqa
"""Structure-based virtual screening campaign (drug discovery).

Stages an Enamine REAL subset onto a scratch RWX volume, filters it with an
ADMET ensemble registered through an importer, docks the survivors against a
static kinase panel, then rescores the poses on GPU (gnina) or CPU (vina
rescoring in Python) depending on a flag; the two branches meet in dsl.OneOf.
"""
import os

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Model, Output

CHEM = "ghcr.io/molforge/chem-py:3.4.1"

TARGETS = [
    {"target": "EGFR", "receptor": "s3://molforge-structures/prepared/egfr_7a2a.pdbqt"},
    {"target": "CDK2", "receptor": "s3://molforge-structures/prepared/cdk2_1hck.pdbqt"},
    {"target": "BTK", "receptor": "s3://molforge-structures/prepared/btk_5p9j.pdbqt"},
]


@dsl.container_component
def stage_library(library_uri: str):
    return dsl.ContainerSpec(
        image="amazon/aws-cli:2.17.0",
        command=["sh", "-c"],
        args=[
            'aws s3 sync "$0" /work/library/ --exclude "*" --include "*.smi.zst" --only-show-errors',
            library_uri,
        ],
    )


@dsl.component(base_image=CHEM)
def filter_admet(admet_model: Input[Model], max_mw: float, survivors: Output[Dataset]) -> int:
    import glob
    import json

    import pandas as pd
    import zstandard
    from chemprop_ensemble import Ensemble

    print("ADMET model registered at", admet_model.uri, admet_model.metadata)
    ens = Ensemble.load(admet_model.path)
    rules = json.load(open("/etc/admet/rules.json"))
    keep = []
    for shard in sorted(glob.glob("/work/library/*.smi.zst")):
        with zstandard.open(shard, "rt") as f:
            smi = [line.split()[0] for line in f]
        pred = ens.predict(smi)
        ok = (pred["herg"] < rules["herg_max"]) & (pred["mw"] <= max_mw)
        keep.extend(s for s, k in zip(smi, ok) if k)
    pd.DataFrame({"smiles": keep}).to_parquet(survivors.path)
    return len(keep)


@dsl.component(base_image=CHEM, packages_to_install=["s3fs==2024.6.1"])
def dock_target(target: str, receptor_uri: str, ligands: Input[Dataset], results_root: str, campaign: str):
    import subprocess

    import s3fs

    fs = s3fs.S3FileSystem()
    fs.get(receptor_uri, "/tmp/receptor.pdbqt")
    subprocess.run(
        ["unidock", "--receptor", "/tmp/receptor.pdbqt", "--ligand_index", ligands.path,
         "--search_mode", "balance", "--out", "/tmp/poses.sdf.gz"],
        check=True,
    )
    fs.put("/tmp/poses.sdf.gz", f"{results_root}/{campaign}/poses/{target}.sdf.gz")


@dsl.container_component
def gnina_rescore(poses_root: str, campaign: str, hits: Output[Dataset]):
    return dsl.ContainerSpec(
        image="gnina/gnina:1.1",
        command=["python3", "/opt/rescore/gnina_batch.py"],
        args=[
            "--poses", dsl.ConcatPlaceholder([poses_root, "/", campaign, "/poses/"]),
            "--cnn", "dense_ensemble",
            "--hits-out", hits.path,
        ],
    )


@dsl.component(base_image=CHEM, packages_to_install=["s3fs==2024.6.1", "vina==1.2.5"])
def vina_rescore(poses_root: str, campaign: str, hits: Output[Dataset]):
    import gzip

    import pandas as pd
    import s3fs
    from rescoring import vinardo_score

    fs = s3fs.S3FileSystem()
    rows = []
    for path in fs.glob(f"{poses_root}/{campaign}/poses/*.sdf.gz"):
        with fs.open(path, "rb") as f:
            rows.extend(vinardo_score(gzip.decompress(f.read())))
    pd.DataFrame(rows).sort_values("score").head(5000).to_parquet(hits.path)


@dsl.component(base_image=CHEM)
def summarize_hits(hits: Input[Dataset], results_root: str, campaign: str):
    import pandas as pd

    print("reading hits from", hits.uri)
    df = pd.read_parquet(hits.path)
    top = df.sort_values("score").head(500)
    top.to_csv(f"{results_root}/{campaign}/hits_top500.csv", index=False)


@dsl.pipeline(name="kinase-virtual-screen")
def kinase_virtual_screen(
    library_uri: str = "s3://molforge-libraries/enamine-real/2025-05/subset-50m/",
    results_root: str = "s3://molforge-screens/runs",
    campaign: str = "cmp-0712",
    use_gpu_rescoring: bool = True,
    max_mw: float = 500.0,
):
    pvc = kubernetes.CreatePVC(
        pvc_name_suffix="-screen-lib",
        access_modes=["ReadWriteMany"],
        size="500Gi",
        storage_class_name="efs-sc",
    )
    stage = stage_library(library_uri=library_uri)
    stage.set_caching_options(False)
    kubernetes.mount_pvc(stage, pvc_name=pvc.outputs["name"], mount_path="/work")

    admet = dsl.importer(
        artifact_uri="s3://molforge-models/chemprop/admet-ensemble-v5/",
        artifact_class=dsl.Model,
        reimport=False,
        metadata={"framework": "chemprop", "version": "1.7.1", "endpoints": "herg,mw,logs"},
    )
    filt = filter_admet(admet_model=admet.output, max_mw=max_mw).after(stage)
    kubernetes.mount_pvc(filt, pvc_name=pvc.outputs["name"], mount_path="/work")
    kubernetes.use_config_map_as_volume(filt, config_map_name="admet-rules", mount_path="/etc/admet")

    drop = kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(filt)

    with dsl.ParallelFor(items=TARGETS, parallelism=2) as t:
        dock = dock_target(
            target=t.target,
            receptor_uri=t.receptor,
            ligands=filt.outputs["survivors"],
            results_root=results_root,
            campaign=campaign,
        )
        dock.set_retry(num_retries=3, backoff_duration="60s")
        dock.set_cpu_limit("16").set_memory_limit("64G")

    with dsl.If(use_gpu_rescoring == True):
        g = gnina_rescore(poses_root=results_root, campaign=campaign).after(dock)
        g.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
    with dsl.Else():
        v = vina_rescore(poses_root=results_root, campaign=campaign).after(dock)

    summarize_hits(
        hits=dsl.OneOf(g.outputs["hits"], v.outputs["hits"]),
        results_root=results_root,
        campaign=campaign,
    )


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    compiler.Compiler().compile(kinase_virtual_screen, os.path.join(here, "kfp2_r18_virtual_screening.yaml"))
