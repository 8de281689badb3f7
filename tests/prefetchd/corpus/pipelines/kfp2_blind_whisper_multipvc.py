# ruff: noqa
"""KFP v2 (blind test): Whisper fine-tuning on a shared-filesystem scratch volume.
Two CreatePVCs (one a clone of a VolumeSnapshot via data_source) and two DeletePVCs;
one task mounting three PVCs (created scratch, existing claim with a constant sub_path, claim
named by a pipeline parameter); container args from f-strings over two pipeline
parameters; an importer whose .uri goes to --init-from; secret and config map as
volumes; set_retry; a manifest flag that is read and an --output-dir on a PVC.

Compile: /tmp/kfp2/bin/python kfp2_blind_whisper_multipvc.py
"""
import os

from kfp import compiler, dsl, kubernetes

IMAGE = 'ghcr.io/acme-ml/speech:0.22.0'


@dsl.container_component
def stage_audio(manifest: str, lang: str):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=['python', '-m', 'speech.stage'],
        args=['--manifest', manifest, '--lang', lang, '--dest', '/scratch/audio', '--workers', '64'])


@dsl.container_component
def finetune(init: dsl.Input[dsl.Artifact], noise_uri: str, run: str):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=['torchrun', '--nproc_per_node=4', '-m', 'speech.finetune_whisper'],
        args=['--init-from', init.uri,
              '--train-dir', '/scratch/audio',
              '--lexicon', '/lexicons/lexicon.txt',
              '--noise', noise_uri,
              '--output-dir', f'/ckpt/{run}'])


@dsl.container_component
def score_wer(eval_manifest: str, run: str):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=['python', '-m', 'speech.score'],
        args=['--eval-manifest', eval_manifest, '--ckpt-dir', f'/ckpt/{run}', '--lm', '/lm/4gram.bin',
              '--report', f's3://acme-speech-reports/wer/{run}.json'])


@dsl.pipeline(name='whisper-finetune-multipvc')
def whisper(lang: str = 'de', corpus_bucket: str = 'acme-speech', release: str = 'cv17',
            run: str = 'whisper-de-r3', ckpt_pvc: str = 'whisper-ckpts'):
    scratch = kubernetes.CreatePVC(pvc_name_suffix='-whisper-scratch', access_modes=['ReadWriteMany'],
                                   size='800Gi', storage_class_name='fsx-lustre')
    lm = kubernetes.CreatePVC(pvc_name_suffix='-kenlm', access_modes=['ReadOnlyMany'], size='50Gi',
                              storage_class_name='ebs-gp3',
                              data_source={'apiGroup': 'snapshot.storage.k8s.io', 'kind': 'VolumeSnapshot',
                                           'name': 'kenlm-de-4gram-snap'})
    init = dsl.importer(artifact_uri='s3://acme-speech-models/openai/whisper-large-v3/', artifact_class=dsl.Artifact,
                        reimport=False)

    st = stage_audio(manifest=f's3://{corpus_bucket}/{release}/{lang}/train.tsv', lang=lang)
    kubernetes.mount_pvc(st, pvc_name=scratch.outputs['name'], mount_path='/scratch')

    ft = finetune(init=init.output, noise_uri=f's3://{corpus_bucket}/musan/noise/', run=run).after(st)
    ft.set_retry(num_retries=3)
    ft.set_accelerator_type('nvidia.com/gpu').set_accelerator_limit(4)
    kubernetes.mount_pvc(ft, pvc_name=scratch.outputs['name'], mount_path='/scratch')
    kubernetes.mount_pvc(ft, pvc_name='speech-lexicons', mount_path='/lexicons', sub_path='de/v2')
    kubernetes.mount_pvc(ft, pvc_name=ckpt_pvc, mount_path='/ckpt')
    kubernetes.use_secret_as_volume(ft, secret_name='wandb-api', mount_path='/secrets/wandb')
    kubernetes.use_config_map_as_volume(ft, config_map_name='whisper-train-cfg', mount_path='/etc/whisper')

    sc = score_wer(eval_manifest=f's3://{corpus_bucket}/{release}/{lang}/test.tsv', run=run).after(ft)
    kubernetes.mount_pvc(sc, pvc_name=ckpt_pvc, mount_path='/ckpt')
    kubernetes.mount_pvc(sc, pvc_name=lm.outputs['name'], mount_path='/lm')

    kubernetes.DeletePVC(pvc_name=scratch.outputs['name']).after(ft)
    kubernetes.DeletePVC(pvc_name=lm.outputs['name']).after(sc)


if __name__ == '__main__':
    compiler.Compiler().compile(whisper, os.path.splitext(__file__)[0] + '.yaml')
