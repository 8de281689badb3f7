# ruff: noqa
"""SMS spam / smishing filter for a mobile operator: monthly labelled message corpus -> dedup -> tokenize with a
multilingual DistilBERT -> fine-tune on GPU -> per-language holdout eval -> pushed to serving when F1 is high enough."""
import kfp
from kfp import dsl
from kfp.components import InputPath, OutputPath, create_component_from_func
from kubernetes import client as k8s

SPAM_IMAGE = "registry.telco.internal/msg-safety/spamguard:0.7.4"


def dedup_messages(corpus_uri: str, clean_jsonl: OutputPath("JSONL")):
    import fsspec
    import pandas as pd

    msgs = pd.read_json(corpus_uri, lines=True)
    with fsspec.open("s3://msg-safety/reference/known_ham_shortcodes.txt", "r") as f:
        ham_codes = {line.strip() for line in f if line.strip()}
    msgs = msgs[~msgs["sender"].isin(ham_codes) | (msgs["label"] == "ham")]
    msgs["norm"] = msgs["text"].str.lower().str.replace(r"\d", "0", regex=True)
    msgs = msgs.drop_duplicates(subset=["norm", "label"])
    msgs.drop(columns=["norm"]).to_json(clean_jsonl, orient="records", lines=True)


def tokenize(base_model: str, clean_jsonl: InputPath("JSONL"), tokenized: OutputPath("Dataset")):
    import datasets
    import s3fs
    from transformers import AutoTokenizer

    s3fs.S3FileSystem().get(base_model, "/tmp/base_model/", recursive=True)
    tok = AutoTokenizer.from_pretrained("/tmp/base_model")
    ds = datasets.load_dataset("json", data_files=clean_jsonl, split="train")
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=128), batched=True)
    ds.train_test_split(test_size=0.05, seed=7).save_to_disk(tokenized)


def eval_language(lang: str, run_name: str):
    import json

    import pandas as pd
    import s3fs
    from spamguard.eval import score

    fs = s3fs.S3FileSystem()
    fs.get(f"s3://msg-safety-models/spamguard/{run_name}/", "/tmp/model/", recursive=True)
    test = pd.read_parquet(f"s3://msg-safety/holdout/{lang}/test.parquet")
    res = score("/tmp/model", test)
    with fs.open(f"s3://msg-safety-reports/spamguard/{run_name}/{lang}.json", "w") as f:
        json.dump(res, f)


dedup_op = create_component_from_func(dedup_messages, base_image=SPAM_IMAGE)
tokenize_op = create_component_from_func(tokenize, base_image=SPAM_IMAGE)
eval_op = create_component_from_func(eval_language, base_image=SPAM_IMAGE)


@dsl.pipeline(name="sms-spam-filter", description="Fine-tune the smishing classifier monthly")
def sms_spam(corpus_uri: str = "s3://msg-safety/corpora/sms/2025-07/messages.jsonl",
             base_model: str = "s3://msg-safety-models/hf/distilbert-base-multilingual-cased/",
             run_name: str = "spamguard-2025-07",
             min_f1: float = 0.965):
    report = dsl.ContainerOp(
        name="report-status",
        image="curlimages/curl:8.8.0",
        command=["sh", "-c"],
        arguments=['curl -sf -X POST "$CHAT_WEBHOOK" -H "Content-Type: application/json" '
                   '-d "{\\"text\\": \\"sms-spam-filter {{workflow.name}} finished: {{workflow.status}}\\"}"'],
    )
    report.container.add_env_variable(k8s.V1EnvVar(
        name="CHAT_WEBHOOK",
        value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(name="msg-safety-chat", key="url"))))

    with dsl.ExitHandler(report):
        dedup = dedup_op(corpus_uri=corpus_uri)
        tok = tokenize_op(base_model=base_model, clean_jsonl=dedup.outputs["clean_jsonl"])

        ft = dsl.ContainerOp(
            name="finetune",
            image=SPAM_IMAGE,
            command=["python", "-m", "spamguard.finetune"],
            arguments=["--train-dir", dsl.InputArgumentPath(tok.outputs["tokenized"], path="/in/tokenized"),
                       "--model_name_or_path", base_model,
                       "--epochs", "3",
                       "--output-dir", f"s3://msg-safety-models/spamguard/{run_name}/",
                       "--f1-file", "/tmp/f1.txt"],
            file_outputs={"f1": "/tmp/f1.txt"},
        )
        ft.set_gpu_limit(2)
        ft.add_node_selector_constraint("nvidia.com/gpu.product", "NVIDIA-L40S")
        ft.container.add_env_variable(k8s.V1EnvVar(name="TOKENIZERS_PARALLELISM", value="false"))

        with dsl.ParallelFor(["en", "es", "pt"]) as lang:
            eval_op(lang=lang, run_name=run_name).after(ft)

        with dsl.Condition(ft.outputs["f1"] > min_f1):
            dsl.ContainerOp(
                name="push-to-serving",
                image="amazon/aws-cli:2.17.0",
                command=["aws", "s3", "sync"],
                arguments=[f"s3://msg-safety-models/spamguard/{run_name}/", "s3://msg-safety-serving/spamguard/current/",
                           "--delete"],
            )


if __name__ == "__main__":
    kfp.compiler.Compiler().compile(sms_spam, __file__.replace(".py", ".yaml"))
