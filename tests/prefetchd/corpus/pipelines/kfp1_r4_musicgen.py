# ruff: noqa
"""KFP v1 (blind test r4): fine-tuning a text-to-music model on licensed stems.

Idioms: a VolumeOp scratch claim shared by every step through pvolumes chaining
(`.pvolume`), a static ParallelFor over genres staging stems with `aws s3 sync` onto a
sub-folder of the claim, a lightweight tokenizer pulling EnCodec weights with
torch.hub.load_state_dict_from_url (https), s3fs `cat` of a path without a scheme built from a
bucket and a version, a base checkpoint handed to a helper in the image, fsspec + pandas
reads of an evaluation set, dsl.Condition on the FAD score, `aws s3 cp --recursive` push.

Compile: /tmp/kfp1/bin/python kfp1_r4_musicgen.py
"""
import os

import kfp
from kfp import components, dsl

MUSIC = 'ghcr.io/acme-audio/musicgen-train:0.6.0-cu121'


def tokenize_stems(stems_dir: str, tokens_dir: str, sample_rate: int):
    import torch
    from musicml.encodec import EncodecModel, encode_folder  # shared helper in the image

    state = torch.hub.load_state_dict_from_url(
        "https://dl.fbaipublicfiles.com/encodec/v0/encodec_32khz.th", map_location="cpu")
    model = EncodecModel.from_state(state, sample_rate=sample_rate)
    encode_folder(model, stems_dir, tokens_dir)


tokenize_op = components.create_component_from_func(tokenize_stems, base_image=MUSIC)


def finetune_lm(tokens_dir: str, caption_bucket: str, caption_version: str, base_model: str,
                ckpt_dir: str, steps: int):
    import json

    import s3fs
    from musicml.lm import load_lm, train  # shared helper in the image

    fs = s3fs.S3FileSystem()
    raw = fs.cat(f"{caption_bucket}/captions/{caption_version}.jsonl")
    captions = [json.loads(l) for l in raw.decode().splitlines()]
    lm = load_lm(base_model)
    train(lm, tokens_dir, captions, steps=steps, out_dir=ckpt_dir)


finetune_op = components.create_component_from_func(
    finetune_lm, base_image=MUSIC, packages_to_install=['s3fs==2024.10.0'])


def fad_eval(ckpt_dir: str, prompts_csv: str, ref_stats: str) -> float:
    import fsspec
    import numpy as np
    import pandas as pd
    from musicml.eval import frechet_audio_distance, generate  # shared helper

    prompts = pd.read_csv(prompts_csv)
    with fsspec.open(ref_stats, "rb") as f:
        ref = np.load(f)
    audio = generate(ckpt_dir, prompts["caption"].tolist(), seconds=10)
    return float(frechet_audio_distance(audio, mu=ref["mu"], sigma=ref["sigma"]))


fad_op = components.create_component_from_func(
    fad_eval, base_image=MUSIC, packages_to_install=['s3fs==2024.10.0'])


@dsl.pipeline(name='musicgen-finetune', description='Fine-tune a text-to-music LM on licensed stems')
def musicgen(stems_root: str = 's3://acme-music/licensed/stems-v3',
             caption_bucket: str = 'acme-music',
             caption_version: str = 'v3-2024-10',
             base_model: str = 's3://acme-music-models/musicgen-medium/2024-06/',
             prompts_csv: str = 's3://acme-music/eval/musiccaps/prompts-1k.csv',
             ref_stats: str = 's3://acme-music/eval/musiccaps/vggish-ref-stats.npz',
             release: str = 'mg-ft-2024-11'):
    vop = dsl.VolumeOp(name='stems-scratch', resource_name='stems', size='800Gi',
                       modes=dsl.VOLUME_MODE_RWO, storage_class='gp3')
    with dsl.ParallelFor(['jazz', 'ambient', 'lofi']) as genre:
        stage = dsl.ContainerOp(
            name='stage-stems', image='amazon/aws-cli:2.18.0',
            command=['aws', 's3', 'sync', f'{stems_root}/{genre}/', f'/work/stems/{genre}/', '--only-show-errors'],
            pvolumes={'/work': vop.volume})
    tok = tokenize_op(stems_dir='/work/stems', tokens_dir='/work/tokens', sample_rate=32000)
    tok.add_pvolumes({'/work': vop.volume}).after(stage)
    ft = finetune_op(tokens_dir='/work/tokens', caption_bucket=caption_bucket, caption_version=caption_version,
                     base_model=base_model, ckpt_dir='/work/ckpt', steps=20000)
    ft.add_pvolumes({'/work': tok.pvolume}).set_gpu_limit(8)
    fad = fad_op(ckpt_dir='/work/ckpt', prompts_csv=prompts_csv, ref_stats=ref_stats)
    fad.add_pvolumes({'/work': ft.pvolume}).set_gpu_limit(1)
    with dsl.Condition(fad.output < 4.5, name='fad-ok'):
        dsl.ContainerOp(
            name='push-model', image='amazon/aws-cli:2.18.0',
            command=['aws', 's3', 'cp', '--recursive', '/work/ckpt',
                     f's3://acme-music-models/musicgen-ft/{release}/'],
            pvolumes={'/work': fad.pvolume})


if __name__ == '__main__':
    kfp.compiler.Compiler().compile(musicgen, os.path.splitext(__file__)[0] + '.yaml')
