# ruff: noqa
"""Chess move prediction: monthly Lichess PGN dumps -> positions -> transformer policy net -> engine-graded eval."""
from pathlib import PurePosixPath
from kfp import dsl, compiler, kubernetes


@dsl.component(base_image="ghcr.io/chessml/pgn-tools:2.0.1")
def extract_positions(games_uri: str, month: str, variant: str) -> str:
    import subprocess
    from pathlib import PurePosixPath
    from urllib.parse import urlparse
    import boto3
    u = urlparse(games_uri)
    bucket, prefix = u.netloc, u.path.lstrip("/")
    key = str(PurePosixPath(prefix) / variant / f"lichess_db_{variant}_rated_{month}.pgn.zst")
    s3 = boto3.client("s3")
    s3.download_file(bucket, key, "/scratch/games.pgn.zst")
    subprocess.run(["pgn2parquet", "/scratch/games.pgn.zst", f"/scratch/positions/{month}.parquet",
                    "--min-elo", "1800"], check=True)
    out_key = f"positions/{variant}/{month}.parquet"
    s3.upload_file(f"/scratch/positions/{month}.parquet", "chess-features", out_key)
    return f"s3://chess-features/{out_key}"


@dsl.container_component
def fetch_engines():
    return dsl.ContainerSpec(
        image="ghcr.io/chessml/awscli-jq:2.17",
        command=["bash", "-c"],
        args=[
            'set -euo pipefail\n'
            "ENGINES='{\"stockfish\": \"s3://chess-engines/stockfish/17/stockfish-ubuntu-x86-64-avx2\", "
            "\"lc0\": \"s3://chess-engines/lc0/0.31.1/lc0-cuda\"}'\n"
            'for name in $(jq -r \'keys[]\' <<< "$ENGINES"); do\n'
            '  src=$(jq -r --arg n "$name" \'.[$n]\' <<< "$ENGINES")\n'
            '  aws s3 cp "$src" "/scratch/engines/$name" --only-show-errors\n'
            '  chmod +x "/scratch/engines/$name"\n'
            'done\n'
            'set -- s3://chess-engines/nets/t1-256x10-distilled.pb.gz s3://chess-engines/syzygy/3-4-5/\n'
            'aws s3 cp "$1" /scratch/engines/weights.pb.gz\n'
            'aws s3 sync "$2" /scratch/engines/syzygy/ --only-show-errors\n'
        ],
    )


@dsl.container_component
def train_policy(positions_root: str, variant: str, ckpt_dir: str):
    return dsl.ContainerSpec(
        image="ghcr.io/chessml/policy-net:0.9.0-cu124",
        command=["bash", "-c"],
        args=[
            'set -euo pipefail\n'
            'export POSITIONS_ROOT="$0" VARIANT="$1"\n'
            "cat > /tmp/train.tmpl <<'EOF'\n"
            'data:\n'
            '  train_glob: ${POSITIONS_ROOT}/${VARIANT}/*.parquet\n'
            '  eval_positions: s3://chess-features/benchmarks/lichess_puzzles_2025.parquet\n'
            'model:\n'
            '  layers: 12\n'
            'EOF\n'
            'envsubst < /tmp/train.tmpl > /tmp/train.yaml\n'
            'python -m policynet.train --config /tmp/train.yaml --save-dir "$2"\n',
            positions_root, variant, ckpt_dir,
        ],
    )


@dsl.component(base_image="ghcr.io/chessml/policy-net:0.9.0-cu124")
def grade_with_engine(ckpt_dir: str, engine: str) -> float:
    import subprocess, json
    res = subprocess.run(["python", "-m", "policynet.grade", "--policy", ckpt_dir.rstrip("/") + "/last.pt",
                          "--engine", f"/scratch/engines/{engine}", "--positions",
                          "s3://chess-features/benchmarks/grading_set_v4.parquet"],
                         check=True, capture_output=True, text=True)
    return json.loads(res.stdout)["acpl"]


@dsl.pipeline(name="chess-openings-policy")
def chess_openings(
    games_uri: str = "s3://lichess-mirror/standard-dumps",
    months: list = ["2025-04", "2025-05", "2025-06"],
    variant: str = "standard",
    ckpt_dir: str = "s3://chess-models/policy/standard/run-0716/",
):
    with dsl.ParallelFor(months, parallelism=2) as month:
        ex = extract_positions(games_uri=games_uri, month=month, variant=variant)
        kubernetes.mount_pvc(ex, pvc_name="chess-scratch", mount_path="/scratch")
    eng = fetch_engines()
    kubernetes.mount_pvc(eng, pvc_name="chess-scratch", mount_path="/scratch")
    tr = train_policy(positions_root="s3://chess-features/positions", variant=variant, ckpt_dir=ckpt_dir).after(ex)
    tr.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(4)
    kubernetes.add_toleration(tr, key="dedicated", operator="Equal", value="gpu-train", effect="NoSchedule")
    for eng_name in ["stockfish", "lc0"]:
        g = grade_with_engine(ckpt_dir=ckpt_dir, engine=eng_name).after(tr, eng)
        g.set_display_name(f"grade-{eng_name}")
        kubernetes.mount_pvc(g, pvc_name="chess-scratch", mount_path="/scratch")


if __name__ == "__main__":
    compiler.Compiler().compile(chess_openings, __file__.replace(".py", ".yaml"))
