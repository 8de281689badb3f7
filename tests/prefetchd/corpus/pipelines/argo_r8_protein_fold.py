# ruff: noqa
"""Proteomix kinase campaign: MSA search, ESM embeddings, structure prediction, ranking.

Reference databases are staged onto a per-run volume (volumeClaimTemplate),
the target FASTA comes in as an S3 input artifact and is split into chunks
(the chunk count is only known once the file is read), MSAs are searched per
chunk, ESM embeddings are computed for a fixed list of checkpoints, OpenFold
predicts structures with weights from a shared read-only PVC, and the
predictions are ranked.
"""
from hera.workflows import (
    DAG,
    Artifact,
    Container,
    ExistingVolume,
    Parameter,
    S3Artifact,
    Volume,
    Workflow,
    models as m,
    script,
)

TOOLS = "ghcr.io/proteomix/bio-tools:2025.04"
ESM_CKPTS = [
    {"model": "esm2_t33_650M", "ckpt": "s3://proteomix-models/esm2/esm2_t33_650M_UR50D.pt"},
    {"model": "esm2_t36_3B", "ckpt": "s3://proteomix-models/esm2/esm2_t36_3B_UR50D.pt"},
]

work = Volume(name="work", size="800Gi", mount_path="/work", storage_class_name="gp3")
af_params = ExistingVolume(
    name="openfold-params", claim_name="openfold-params", mount_path="/params", sub_path="openfold/v2.0.0", read_only=True
)


@script(
    image="python:3.11-slim",
    inputs=[
        S3Artifact(
            name="targets",
            path="/work/targets.fasta",
            bucket="proteomix-targets",
            key="campaigns/{{workflow.parameters.campaign}}/targets.fasta",
            endpoint="s3.amazonaws.com",
        ),
        Parameter(name="chunk_size", value="25"),
    ],
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
)
def split_targets(chunk_size: int):
    import json
    import os

    records, cur = [], []
    for line in open("/work/targets.fasta"):
        if line.startswith(">") and cur:
            records.append("".join(cur))
            cur = []
        cur.append(line)
    if cur:
        records.append("".join(cur))
    os.makedirs("/work/chunks", exist_ok=True)
    chunks = []
    for i in range(0, len(records), chunk_size):
        name = f"chunk-{i // chunk_size:03d}"
        with open(f"/work/chunks/{name}.fasta", "w") as f:
            f.write("".join(records[i : i + chunk_size]))
        chunks.append(name)
    print(json.dumps(chunks))


@script(
    image="ghcr.io/proteomix/esm:2.0.1-cu121",
    inputs=[Parameter(name="model"), Parameter(name="ckpt"), Parameter(name="campaign")],
    volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
)
def embed_esm(model: str, ckpt: str, campaign: str):
    import subprocess
    from urllib.parse import urlparse

    import boto3

    u = urlparse(ckpt)
    local = f"/tmp/{model}.pt"
    boto3.client("s3").download_file(u.netloc, u.path.lstrip("/"), local)
    subprocess.run(
        ["esm-extract", local, "/work/targets.fasta", f"/work/emb/{model}", "--include", "mean"], check=True
    )
    subprocess.run(
        ["aws", "s3", "sync", f"/work/emb/{model}",
         f"s3://proteomix-results/{campaign}/embeddings/{model}/"],
        check=True,
    )


@script(
    image="python:3.11-slim",
    inputs=[Parameter(name="campaign")],
)
def rank_structures(campaign: str):
    import io
    import json

    import boto3

    s3 = boto3.client("s3")
    bucket = "proteomix-results"
    prefix = f"{campaign}/structures/"
    rows = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith("_confidence.json"):
                conf = json.load(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"])
                rows.append((obj["Key"].split("/")[-1].replace("_confidence.json", ""), conf["ptm"], conf["plddt"]))
    rows.sort(key=lambda r: -r[1])
    buf = io.StringIO()
    buf.write("target,ptm,plddt\n")
    for r in rows:
        buf.write(",".join(map(str, r)) + "\n")
    s3.put_object(Bucket=bucket, Key=f"{campaign}/ranking.csv", Body=buf.getvalue().encode())


with Workflow(
    generate_name="kinase-fold-",
    entrypoint="main",
    arguments=[
        Parameter(name="campaign", value="kinase-2025q2"),
        Parameter(name="uniref_release", value="2024_05"),
    ],
    volumes=[work, af_params],
    service_account_name="proteomix-pipelines",
) as w:
    stage_db = Container(
        name="stage-db",
        image="amazon/aws-cli:2.17.0",
        command=["bash", "-c"],
        args=[
            """set -euo pipefail
REL="{{workflow.parameters.uniref_release}}"
mkdir -p /work/db/uniref90 /work/db/pdb
aws s3 sync "s3://proteomix-refdata/uniref90/${REL}/" /work/db/uniref90/ --only-show-errors
aws s3 cp s3://proteomix-refdata/pdb_seqres/pdb_seqres.txt /work/db/pdb/pdb_seqres.txt
ls -lh /work/db/uniref90
"""
        ],
        volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
    )

    msa = Container(
        name="msa-search",
        image=TOOLS,
        inputs=[Parameter(name="chunk")],
        command=["bash", "-c"],
        args=[
            """set -euo pipefail
CHUNK="{{inputs.parameters.chunk}}"
mkdir -p /work/msa/${CHUNK}
jackhmmer --cpu 16 -N 3 -E 0.0001 \\
  -A /work/msa/${CHUNK}/uniref90.sto \\
  /work/chunks/${CHUNK}.fasta /work/db/uniref90/uniref90.fasta
hhblits -i /work/msa/${CHUNK}/uniref90.sto -oa3m /work/msa/${CHUNK}/${CHUNK}.a3m -n 1
"""
        ],
        volume_mounts=[m.VolumeMount(name="work", mount_path="/work")],
        outputs=[
            S3Artifact(
                name="a3m",
                path="/work/msa/{{inputs.parameters.chunk}}/{{inputs.parameters.chunk}}.a3m",
                bucket="proteomix-results",
                key="{{workflow.parameters.campaign}}/msa/{{inputs.parameters.chunk}}.a3m.tgz",
                endpoint="s3.amazonaws.com",
            )
        ],
        resources=m.ResourceRequirements(requests={"cpu": "16", "memory": "64Gi"}),
    )

    fold = Container(
        name="fold-structures",
        image="ghcr.io/proteomix/openfold:2.0.0-cu121",
        command=["bash", "-c"],
        args=[
            """set -euo pipefail
python3 /opt/openfold/run_pretrained_openfold.py /work/chunks /work/db/pdb \\
  --use_precomputed_alignments /work/msa \\
  --config_preset model_1_ptm \\
  --openfold_checkpoint_path /ckpt/finetuning_ptm_2.pt \\
  --jax_param_path /params/params_model_1_ptm.npz \\
  --output_dir /work/structures
aws s3 sync /work/structures/ "s3://proteomix-results/{{workflow.parameters.campaign}}/structures/"
"""
        ],
        inputs=[
            S3Artifact(
                name="openfold-ckpt",
                path="/ckpt/finetuning_ptm_2.pt",
                bucket="proteomix-models",
                key="openfold/finetuning_ptm_2.pt",
                endpoint="s3.amazonaws.com",
            )
        ],
        volume_mounts=[
            m.VolumeMount(name="work", mount_path="/work"),
            m.VolumeMount(name="openfold-params", mount_path="/params", sub_path="openfold/v2.0.0", read_only=True),
        ],
        resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
    )

    with DAG(name="main"):
        db = stage_db()
        split = split_targets(name="split-targets")
        msas = msa(
            name="msa-search",
            arguments={"chunk": "{{item}}"},
            with_param=split.result,
        )
        emb = embed_esm(
            name="embed-esm",
            arguments={
                "model": "{{item.model}}",
                "ckpt": "{{item.ckpt}}",
                "campaign": "{{workflow.parameters.campaign}}",
            },
            with_items=ESM_CKPTS,
        )
        folds = fold(name="fold-structures")
        rank = rank_structures(name="rank", arguments={"campaign": "{{workflow.parameters.campaign}}"})

        db >> msas
        split >> [msas, emb]
        [msas, emb] >> folds >> rank


if __name__ == "__main__":
    with open(__file__.replace(".py", ".yaml"), "w") as f:
        f.write(w.to_yaml())
