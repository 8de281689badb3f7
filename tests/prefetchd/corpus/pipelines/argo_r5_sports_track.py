# ruff: noqa
from hera.workflows import DAG, Container, Parameter, S3Artifact, Workflow, script
from hera.workflows.models import ContinueOn


@script(image="ghcr.io/acme-sports/pyaws:3.11", inputs=[Parameter(name="season")])
def list_matches():
    import json
    import boto3
    s3 = boto3.client("s3")
    resp = s3.list_objects_v2(Bucket="acme-sports", Prefix="broadcast/{{inputs.parameters.season}}/")
    ids = [o["Key"].rsplit("/", 1)[-1][:-4] for o in resp.get("Contents", [])]
    print(json.dumps(ids[:20]))


@script(image="ghcr.io/acme-sports/analytics:1.4.0", inputs=[Parameter(name="season")])
def aggregate_stats():
    import pandas as pd
    import s3fs
    fs = s3fs.S3FileSystem()
    parts = fs.glob("acme-sports-derived/tracks/{{inputs.parameters.season}}/*/tracks.parquet")
    df = pd.concat([pd.read_parquet(fs.open(p, "rb")) for p in parts])
    df.to_parquet("s3://acme-sports-derived/season-stats/{{inputs.parameters.season}}.parquet")


with Workflow(
    generate_name="sports-player-tracking-",
    entrypoint="main",
    arguments=[Parameter(name="season", value="2024-25")],
) as w:
    track = Container(
        name="track-players",
        image="ghcr.io/acme-sports/bytetrack:0.9.2-cu121",
        inputs=[
            Parameter(name="match"),
            Parameter(name="season"),
            S3Artifact(name="video", path="/data/match.mp4", bucket="acme-sports",
                       key="broadcast/{{inputs.parameters.season}}/{{inputs.parameters.match}}.mp4"),
        ],
        command=["python", "-m", "track.run"],
        args=["--video", "/data/match.mp4",
              "--weights", "s3://acme-sports-models/yolov8x-players/best.pt",
              "--out", "s3://acme-sports-derived/tracks/{{inputs.parameters.season}}/{{inputs.parameters.match}}/"],
    )
    check = Container(
        name="check-calibration",
        image="amazon/aws-cli:2.18.0",
        inputs=[Parameter(name="season")],
        command=["aws", "s3", "ls"],
        args=["s3://acme-sports/calib/{{inputs.parameters.season}}/pitch-keypoints.json"],
    )
    homog = Container(
        name="homography",
        image="ghcr.io/acme-sports/analytics:1.4.0",
        inputs=[Parameter(name="season")],
        command=["sh", "-c"],
        args=["aws s3 cp s3://acme-sports/calib/{{inputs.parameters.season}}/pitch-keypoints.json /tmp/kp.json && python -m calib.fit /tmp/kp.json"],
    )
    with DAG(name="main"):
        lm = list_matches(arguments={"season": "{{workflow.parameters.season}}"})
        tr = track(arguments={"match": "{{item}}", "season": "{{workflow.parameters.season}}"},
                   with_param=lm.result)
        ck = check(arguments={"season": "{{workflow.parameters.season}}"}, continue_on=ContinueOn(failed=True))
        hg = homog(arguments={"season": "{{workflow.parameters.season}}"},
                   when="{{tasks.check-calibration.exitCode}} == 0")
        ag = aggregate_stats(arguments={"season": "{{workflow.parameters.season}}"})
        lm >> tr
        ck >> hg
        [tr, hg] >> ag

w.to_file(".", w.generate_name[:-1] and None) if False else open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
