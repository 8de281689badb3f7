# ruff: noqa
"""Antibody library screening against a target panel (Hera Workflow): withParam over a JSON-list workflow
parameter of dicts, an init container staging a protein LM, withParam over a script's result, DuckDB fan-in."""
from hera.workflows import DAG, Container, Parameter, Workflow, models as m, script

PY = "ghcr.io/abxlab/protein-py:2025.06"


@script(image=PY)
def select_targets(panel: str, max_targets: int):
    import json

    import pandas as pd

    df = pd.read_csv(f"s3://abx-data/targets/panel_{panel}.csv")
    df = df[df["structure_available"]].head(max_targets)
    print(json.dumps(df["target_id"].tolist()))


embed = Container(
    name="embed-library",
    image="ghcr.io/abxlab/esm-embed:2.0.1-cu121",
    inputs=[Parameter(name="lib-name"), Parameter(name="lib-uri")],
    init_containers=[m.UserContainer(
        name="stage-esm",
        image="amazon/aws-cli:2.17.0",
        command=["aws", "s3", "cp", "--recursive", "s3://abx-models/esm2_t33_650M_UR50D/", "/models/esm2/"],
        mirror_volume_mounts=True,
    )],
    command=["python", "-m", "esm_embed.run"],
    args=["--sequences", "{{inputs.parameters.lib-uri}}", "--model", "/models/esm2",
          "--batch-tokens", "16384", "--out", "s3://abx-embeddings/{{inputs.parameters.lib-name}}/"],
    volume_mounts=[m.VolumeMount(name="models", mount_path="/models")],
    volumes=[m.Volume(name="models", empty_dir=m.EmptyDirVolumeSource())],
)


@script(image="ghcr.io/abxlab/dock-score:1.7.0-cu121")
def dock_target(target: str):
    import pyarrow.dataset as ds
    import fsspec
    from dockscore import score_pairs

    with fsspec.open(f"s3://abx-data/structures/{target}.pdb") as f:
        pdb = f.read()
    emb = ds.dataset("s3://abx-embeddings/", format="parquet").to_table()
    hits = score_pairs(pdb, emb, top_k=500)
    hits.to_parquet(f"s3://abx-results/{target}/hits.parquet")


@script(image=PY)
def rank_hits(panel: str):
    import duckdb

    duckdb.sql("INSTALL httpfs; LOAD httpfs;")
    duckdb.sql(f"""
        COPY (SELECT target_id, clone_id, score FROM read_parquet('s3://abx-results/*/hits.parquet')
              QUALIFY row_number() OVER (PARTITION BY target_id ORDER BY score DESC) <= 100)
        TO 's3://abx-reports/{panel}/top100.csv' (HEADER, DELIMITER ',')
    """)


LIBS = '[{"name": "naive-vh", "uri": "s3://abx-libraries/ngs/naive_vh_2025q2.parquet"}, ' \
       '{"name": "immune-llama", "uri": "s3://abx-libraries/ngs/immunized_llama_vhh_2025q2.parquet"}]'

with Workflow(
    generate_name="antibody-screen-",
    entrypoint="screen",
    arguments=[Parameter(name="panel", value="onc-2025b"), Parameter(name="max-targets", value="12"),
               Parameter(name="libraries", value=LIBS)],
) as w:
    embed
    with DAG(name="screen"):
        st = select_targets(name="select-targets", arguments={"panel": "{{workflow.parameters.panel}}",
                                                              "max_targets": "{{workflow.parameters.max-targets}}"})
        em = embed(name="embed", arguments={"lib-name": "{{item.name}}", "lib-uri": "{{item.uri}}"},
                   with_param="{{workflow.parameters.libraries}}")
        dk = dock_target(name="dock", arguments={"target": "{{item}}"}, with_param=st.result)
        rk = rank_hits(name="rank", arguments={"panel": "{{workflow.parameters.panel}}"})
        [st, em] >> dk >> rk

if __name__ == "__main__":
    open(__file__.replace(".py", ".yaml"), "w").write(w.to_yaml())
