# ruff: noqa
"""Wildlife camera-trap triage (Hera -> Argo Workflow): volumeClaimTemplate scratch, aws s3 sync
of a season prefix, MegaDetector CLI with a positional weights URI, a Hera @script species
classifier looped with_items over dicts carrying checkpoint URIs, and a `when`-gated publish."""
from hera.workflows import DAG, Container, Parameter, Workflow, script, models as m

VOL = [m.VolumeMount(name="work", mount_path="/work")]


@script(image="ghcr.io/acme-wildlife/species-cls:1.2.0", volume_mounts=VOL,
        inputs=[Parameter(name="model"), Parameter(name="ckpt")])
def classify(model: str, ckpt: str):
    import json
    import fsspec
    import pandas as pd
    fs = fsspec.filesystem("s3")
    fs.get(ckpt, "/tmp/ckpt", recursive=True)
    dets = json.load(open("/work/detections.json"))
    rows = [{"file": d["file"], "model": model, "n": len(d["detections"])} for d in dets["images"]]
    pd.DataFrame(rows).to_csv(f"s3://acme-wildlife-results/season11/{model}.csv", index=False)


with Workflow(
    generate_name="camtrap-triage-",
    entrypoint="main",
    arguments=[Parameter(name="images_prefix", value="s3://acme-wildlife/camtrap/serengeti/season11/"),
               Parameter(name="md_weights", value="s3://acme-wildlife-models/megadetector/md_v5a.0.0.pt"),
               Parameter(name="publish", value="true")],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name="work"),
        spec=m.PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"],
                                         resources=m.VolumeResourceRequirements(requests={"storage": "100Gi"})))],
) as w:
    stage = Container(name="stage-images", image="amazon/aws-cli:2.17.0",
                      command=["aws"],
                      args=["s3", "sync", "{{workflow.parameters.images_prefix}}", "/work/images",
                            "--only-show-errors"], volume_mounts=VOL)
    detect = Container(name="megadetector", image="ghcr.io/acme-wildlife/megadetector:5.0.28",
                       command=["python", "run_detector_batch.py"],
                       args=["{{workflow.parameters.md_weights}}", "/work/images", "/work/detections.json",
                             "--threshold", "0.2", "--recursive"], volume_mounts=VOL)
    publish = Container(name="publish-detections", image="amazon/aws-cli:2.17.0",
                        command=["aws", "s3", "cp", "/work/detections.json",
                                 "s3://acme-wildlife-results/season11/detections.json"],
                        volume_mounts=VOL)
    with DAG(name="main"):
        s = stage()
        d = detect()
        c = classify(with_items=[{"model": "speciesnet", "ckpt": "s3://acme-wildlife-models/speciesnet/v4.0.1/"},
                                 {"model": "zamba", "ckpt": "s3://acme-wildlife-models/zamba/2.5/"}],
                     arguments={"model": "{{item.model}}", "ckpt": "{{item.ckpt}}"})
        p = publish(when="{{workflow.parameters.publish}} == true")
        s >> d >> [c, p]

if __name__ == "__main__":
    import os
    with open(os.path.splitext(__file__)[0] + ".yaml", "w") as f:
        f.write(w.to_yaml())
