# ruff: noqa
"""Accelerated knee MRI reconstruction (fastMRI VarNet) on a Ceph RGW mirror (KFP v2 + kfp-kubernetes)."""
from typing import List
from kfp import compiler, dsl, kubernetes

RECON = "registry.radiology-ml.example.org/recon/varnet:0.9.3-cu121"


@dsl.container_component
def stage_kspace(kspace_root: str):
    script = r'''set -euxo pipefail
ROOT="$0"
EP="${S3_ENDPOINT:-https://rgw.mri-lab.internal}"
while read -r split expected; do
  mkdir -p "/kspace/${split}"
  aws --endpoint-url "$EP" s3 sync "${ROOT}/multicoil_${split}/" "/kspace/${split}/" --exclude "*" --include "file1*.h5"
  got=$(find "/kspace/${split}" -name '*.h5' | wc -l)
  [ "$got" -ge "$expected" ] || { echo "short split ${split}: $got < $expected"; exit 1; }
done <<'EOF'
train 973
val 199
EOF
'''
    return dsl.ContainerSpec(image="amazon/aws-cli:2.17.0", command=["bash", "-c"], args=[script, kspace_root])


@dsl.container_component
def train_varnet(accel: str, run_tag: str):
    return dsl.ContainerSpec(
        image=RECON,
        command=["python", "-m", "varnet.train"],
        args=["--data-path", "/kspace/train", "--val-path", "/kspace/val",
              "--acceleration", accel, "--center-fraction", "0.08",
              "--init-weights", "s3://fastmri-models/varnet/knee_leaderboard_state_dict.pt",
              "--output-dir", dsl.ConcatPlaceholder(["s3://fastmri-runs/", run_tag, "/acc", accel, "/"])])


@dsl.component(base_image="registry.radiology-ml.example.org/recon/varnet-py:0.9.3")
def evaluate_recon(run_tag: str, accels: List[str]) -> float:
    import json
    import os
    import fsspec
    import pandas as pd
    import torch
    from varnet.metrics import ssim_on_slices

    opts = {"client_kwargs": {"endpoint_url": os.environ.get("S3_ENDPOINT", "https://rgw.mri-lab.internal")}}
    anno = pd.read_csv("s3://fastmri-raw/knee/annotations/knee_plus_v1.csv", storage_options=opts)
    rows = []
    for a in accels:
        with fsspec.open(f"s3://fastmri-runs/{run_tag}/acc{a}/model.pt", "rb", **opts) as f:
            state = torch.load(f, map_location="cpu")
        rows.append({"accel": a, "ssim": ssim_on_slices(state, "/kspace/val", anno)})
    out = pd.DataFrame(rows)
    with fsspec.open(f"s3://fastmri-runs/{run_tag}/metrics.json", "w", **opts) as f:
        json.dump(out.to_dict("records"), f)
    return float(out.ssim.min())


@dsl.pipeline(name="knee-mri-varnet")
def knee_mri(kspace_root: str = "s3://fastmri-raw/knee",
             run_tag: str = "varnet-2025-07",
             accels: List[str] = ["4", "8"]):
    pvc = kubernetes.CreatePVC(pvc_name_suffix="-mri-kspace", access_modes=["ReadWriteMany"], size="2Ti",
                               storage_class_name="cephfs-ssd")
    stage = stage_kspace(kspace_root=kspace_root).after(pvc)
    kubernetes.mount_pvc(stage, pvc_name=pvc.outputs["name"], mount_path="/kspace")
    kubernetes.use_secret_as_env(stage, secret_name="mri-rgw-creds",
                                 secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"})
    stage.set_env_variable("S3_ENDPOINT", "https://rgw.mri-lab.internal")

    with dsl.ParallelFor(["4", "8"], parallelism=2) as accel:
        tr = train_varnet(accel=accel, run_tag=run_tag).after(stage)
        kubernetes.mount_pvc(tr, pvc_name=pvc.outputs["name"], mount_path="/kspace")
        kubernetes.add_toleration(tr, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        kubernetes.add_pod_label(tr, "team", "mri-recon")
        tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
        tr.set_retry(num_retries=2, backoff_duration="120s")

    ev = evaluate_recon(run_tag=run_tag, accels=accels).after(tr)
    kubernetes.mount_pvc(ev, pvc_name=pvc.outputs["name"], mount_path="/kspace")
    kubernetes.use_secret_as_env(ev, secret_name="mri-rgw-creds",
                                 secret_key_to_env={"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY"})
    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(ev)


if __name__ == "__main__":
    compiler.Compiler().compile(knee_mri, __file__.replace(".py", ".yaml"))
