# ruff: noqa
"""Common Crawl -> pretraining mixture refresh (KFP v2, pipelines nested three levels deep).

root  pretrain-mixture-refresh
  ExitHandler(notify-done) around all of it
    fetch-blocklist                                 (URL blocklist, constant S3 object)
    ParallelFor(langs)                              (list parameter)
      clean-language          <- level-2 pipeline
        score-partitions      <- level-3 pipeline: ParallelFor over static partitions,
                                 returns dsl.Collected(profile-partition.Output)
        ParallelFor(score-partitions.Output)        (loop over a Collected output)
          extract-text -> quality-filter
        minhash-dedup (Collected fan-in) -> write-lang-shards
    dsl.If / dsl.Elif / dsl.Else on tokenizer_mode (decided by the parameter default)
      train-tokenizer | load-tokenizer | fetch-base-tokenizer
    tokenize-corpus (OneOf tokenizer, Collected shards, existing PVC with the HF cache)
    mixture-eval              <- level-2 pipeline with its own ExitHandler(eval-report)
      contamination-check, sample-perplexity
    publish-mixture (after mixture-eval)

Compile: python kfp2_b37_pretrain_mixture.py  -> kfp2_b37_pretrain_mixture.yaml
"""
import os
from typing import List

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Artifact, Dataset, Input, Output

IMG = 'ghcr.io/acme-llm/dataproc:2024.06.1'
TOK_IMG = 'ghcr.io/acme-llm/tokenizers:0.19.1'
PARTITIONS = ['p00', 'p01', 'p02']


@dsl.component(base_image=IMG)
def fetch_blocklist(blocklist: Output[Artifact]):
    import subprocess
    subprocess.run(['aws', 's3', 'cp', 's3://llm-crawl-meta/blocklists/ut1-2024-05.txt', blocklist.path], check=True)


@dsl.component(base_image=IMG)
def profile_partition(partition_uri: str) -> str:
    import json, subprocess
    out = subprocess.run(['python', '-m', 'ccnet.profile', '--sample', '0.01', '--input', partition_uri],
                         check=True, capture_output=True, text=True)
    print(json.loads(out.stdout))
    return partition_uri


@dsl.component(base_image=IMG)
def extract_text(partition_uri: str, docs: Output[Dataset]):
    import subprocess
    subprocess.run(['python', '-m', 'ccnet.extract', '--wet', partition_uri, '--out', docs.path], check=True)


@dsl.component(base_image=IMG)
def quality_filter(docs: Input[Dataset], blocklist: Input[Artifact], classifier_uri: str, threshold: float,
                   kept: Output[Dataset]):
    import subprocess
    subprocess.run(['python', '-m', 'ccnet.quality', '--docs', docs.path, '--blocklist', blocklist.path,
                    '--model', classifier_uri, '--threshold', str(threshold), '--out', kept.path], check=True)


@dsl.component(base_image=IMG)
def minhash_dedup(parts: List[Dataset], num_perm: int, deduped: Output[Dataset]):
    import subprocess
    args = ['python', '-m', 'dedup.minhash', '--num-perm', str(num_perm), '--out', deduped.path]
    for p in parts:
        args += ['--input', p.path]
    subprocess.run(args, check=True)


@dsl.component(base_image=IMG)
def write_lang_shards(deduped: Input[Dataset], out_prefix: str, shards: Output[Dataset]):
    import shutil, subprocess
    subprocess.run(['aws', 's3', 'sync', deduped.path, out_prefix], check=True)
    shutil.copytree(deduped.path, shards.path)


@dsl.container_component
def lang_audit(lang: str, audit_uri: str):
    return dsl.ContainerSpec(image='ghcr.io/acme-llm/audit:1.4.0', command=['python', '-m', 'audit.lang'],
                             args=['--lang', lang, '--report', audit_uri])


@dsl.pipeline(name='score-partitions')
def score_partitions(crawl_root: str, lang: str) -> List[str]:
    with dsl.ParallelFor(PARTITIONS) as part:
        prof = profile_partition(partition_uri=f'{crawl_root}/wet/{lang}/{part}/')
    return dsl.Collected(prof.output)


@dsl.pipeline(name='clean-language')
def clean_language(crawl_root: str, lang: str, classifier_uri: str, staging_root: str,
                   blocklist: Input[Artifact]) -> Dataset:
    sp = score_partitions(crawl_root=crawl_root, lang=lang)
    with dsl.ParallelFor(sp.output, parallelism=2) as part_uri:
        ex = extract_text(partition_uri=part_uri)
        qf = quality_filter(docs=ex.outputs['docs'], blocklist=blocklist, classifier_uri=classifier_uri,
                            threshold=0.65)
    mh = minhash_dedup(parts=dsl.Collected(qf.outputs['kept']), num_perm=128)
    ws = write_lang_shards(deduped=mh.outputs['deduped'], out_prefix=f'{staging_root}/{lang}/')
    return ws.outputs['shards']


@dsl.component(base_image=IMG)
def contamination_check(tokens: Input[Dataset], benchmarks_uri: str, ngram: int):
    import subprocess
    subprocess.run(['python', '-m', 'decontam.check', '--tokens', tokens.path, '--benchmarks', benchmarks_uri,
                    '--ngram', str(ngram)], check=True)


@dsl.component(base_image=IMG)
def sample_perplexity(tokens: Input[Dataset], ref_model_uri: str):
    import subprocess
    subprocess.run(['python', '-m', 'evalkit.ppl', '--tokens', tokens.path, '--model', ref_model_uri,
                    '--sample', '20000'], check=True)


@dsl.container_component
def eval_report(report_uri: str):
    return dsl.ContainerSpec(image='ghcr.io/acme-llm/audit:1.4.0', command=['python', '-m', 'audit.eval_report'],
                             args=['--out', report_uri])


@dsl.pipeline(name='mixture-eval')
def mixture_eval(tokens: Input[Dataset], report_uri: str):
    rep = eval_report(report_uri=report_uri)
    with dsl.ExitHandler(rep, name='eval-exit'):
        contamination_check(tokens=tokens, benchmarks_uri='s3://llm-evals/decontam/benchmarks-v3/', ngram=13)
        sample_perplexity(tokens=tokens, ref_model_uri='s3://llm-models/ref-lm/pythia-410m/')


@dsl.component(base_image=TOK_IMG)
def train_tokenizer(vocab_size: int, tokenizer: Output[Artifact]):
    import subprocess
    subprocess.run(['python', '-m', 'tok.train_bpe', '--corpus', 's3://llm-corpora/tokenizer-sample/v5/',
                    '--vocab', str(vocab_size), '--out', tokenizer.path], check=True)


@dsl.component(base_image=TOK_IMG)
def load_tokenizer(tokenizer_uri: str, tokenizer: Output[Artifact]):
    import subprocess
    subprocess.run(['aws', 's3', 'sync', tokenizer_uri, tokenizer.path], check=True)


@dsl.container_component
def fetch_base_tokenizer(tokenizer: Output[Artifact]):
    return dsl.ContainerSpec(image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
                             args=['s3://llm-tokenizers/upstream/llama-3-8b/', tokenizer.path])


@dsl.component(base_image=TOK_IMG)
def tokenize_corpus(shards: List[Dataset], tokenizer: Input[Artifact], seq_len: int, tokens: Output[Dataset]):
    import subprocess
    args = ['python', '-m', 'tok.encode', '--tokenizer', tokenizer.path, '--seq-len', str(seq_len),
            '--cache', '/hf-cache', '--out', tokens.path]
    for s in shards:
        args += ['--shard', s.path]
    subprocess.run(args, check=True)


@dsl.component(base_image=IMG)
def publish_mixture(tokens: Input[Dataset], release_uri: str):
    import subprocess
    subprocess.run(['aws', 's3', 'sync', tokens.path, release_uri], check=True)


@dsl.container_component
def notify_done(channel: str):
    return dsl.ContainerSpec(image='curlimages/curl:8.8.0', command=['sh', '-c'],
                             args=[f'curl -s -X POST https://chat.internal/hooks/{channel} -d done'])


@dsl.pipeline(name='pretrain-mixture-refresh')
def pretrain_mixture_refresh(
        crawl_root: str = 's3://llm-crawl/CC-MAIN-2024-18',
        langs: List[str] = ['en', 'de'],
        classifier_uri: str = 's3://llm-models/fasttext-quality/v2/model.bin',
        staging_root: str = 's3://llm-pretrain-staging/cc-2024-18',
        tokenizer_mode: str = 'reuse',
        tokenizer_uri: str = 's3://llm-tokenizers/bpe-64k/v3/',
        release_uri: str = 's3://llm-pretrain/mixtures/2024-06/'):
    bye = notify_done(channel='pretrain-data')
    with dsl.ExitHandler(bye, name='refresh-exit'):
        blk = fetch_blocklist()
        with dsl.ParallelFor(langs, parallelism=2) as lang:
            cl = clean_language(crawl_root=crawl_root, lang=lang, classifier_uri=classifier_uri,
                                staging_root=staging_root, blocklist=blk.outputs['blocklist'])
        with dsl.If(tokenizer_mode == 'train'):
            tt = train_tokenizer(vocab_size=65536)
        with dsl.Elif(tokenizer_mode == 'reuse'):
            lt = load_tokenizer(tokenizer_uri=tokenizer_uri)
        with dsl.Else():
            fb = fetch_base_tokenizer()
        tok = tokenize_corpus(shards=dsl.Collected(cl.output),
                              tokenizer=dsl.OneOf(tt.outputs['tokenizer'], lt.outputs['tokenizer'],
                                                  fb.outputs['tokenizer']),
                              seq_len=4096)
        kubernetes.mount_pvc(tok, pvc_name='hf-tokenizer-cache', mount_path='/hf-cache')
        ev = mixture_eval(tokens=tok.outputs['tokens'], report_uri=f'{staging_root}/_reports/eval.json')
        publish_mixture(tokens=tok.outputs['tokens'], release_uri=release_uri).after(ev)


if __name__ == '__main__':
    compiler.Compiler().compile(pretrain_mixture_refresh, os.path.splitext(__file__)[0] + '.yaml')
