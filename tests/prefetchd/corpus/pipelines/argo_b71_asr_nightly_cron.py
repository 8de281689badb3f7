# ruff: noqa
"""Nightly ASR evaluation of the latest fine-tuned Whisper (Hera -> Argo CronWorkflow, steps).

The test set belongs to the QA vendor, who sends a presigned path-style URL
each quarter (its key has a blank). Models are shared from the model-registry
account through the `asr-models` S3 access point and addressed by ARN with the
AWS CLI. MUSAN noise comes from a requester-pays mirror via an rclone
on-the-fly remote; the pronunciation lexicon from another requester-pays
bucket with `s3api get-object`. The evaluator compares against a baseline JSON
published (public-read) in the reports bucket. When WER beats the gate, the
model folder is promoted inside the access point.

Generate: python argo_b71_asr_nightly_cron.py -> argo_b71_asr_nightly_cron.yaml
"""
import os

from hera.workflows import Container, CronWorkflow, Parameter, Steps
from hera.workflows import models as m

AP = 'arn:aws:s3:us-east-1:210987654321:accesspoint/asr-models'
TESTSET = ('https://s3.us-east-1.amazonaws.com/speech-eval/test-sets/callcenter%20v3/audio.tar'
           '?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAVENDOR%2F20250301%2Fus-east-1%2Fs3%2Faws4_request'
           '&X-Amz-Date=20250301T000000Z&X-Amz-Expires=604800&X-Amz-SignedHeaders=host&X-Amz-Signature=9a8b7c6d5e4f')
DATA = m.VolumeMount(name='scratch', mount_path='/data')

with CronWorkflow(
    name='asr-nightly-eval',
    schedules=['0 3 * * *'],
    timezone='UTC',
    concurrency_policy='Forbid',
    entrypoint='nightly',
    service_account_name='asr-eval',
    arguments=[Parameter(name='model_date', value='2025-03-10'),
               Parameter(name='testset_url', value=TESTSET),
               Parameter(name='wer_gate', value='0.12')],
    volumes=[m.Volume(name='scratch', persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name='asr-eval-scratch'))],
) as cw:
    testset = Container(
        name='fetch-testset', image='busybox:1.36',
        command=['sh', '-c', 'wget -q -O /data/audio.tar "$0" && tar -xf /data/audio.tar -C /data/audio'],
        args=['{{workflow.parameters.testset_url}}'],
        volume_mounts=[DATA])

    model = Container(
        name='fetch-model', image='amazon/aws-cli:2.15.30',
        command=['aws', 's3', 'cp', '--recursive',
                 f's3://{AP}/whisper-ft/{{{{workflow.parameters.model_date}}}}/', '/data/model/'],
        volume_mounts=[DATA])

    refs = Container(
        name='fetch-refs', image='ghcr.io/acme-speech/tools:2.3.0',
        command=['bash', '-c'],
        args=['set -e\n'
              'rclone copy --s3-requester-pays ":s3,provider=AWS,env_auth=true:musan-mirror/noise/free-sound/" /data/noise/\n'
              'aws s3 ls --request-payer requester s3://asr-shared-lexicons/cmudict/\n'
              'aws s3api get-object --request-payer requester --bucket asr-shared-lexicons '
              '--key cmudict/cmudict-0.7b.txt /data/lexicon.txt\n'],
        volume_mounts=[DATA])

    evaluate = Container(
        name='evaluate', image='ghcr.io/acme-speech/asr-eval:1.8.0',
        command=['python', '-m', 'asr_eval.run'],
        args=['--audio', '/data/audio', '--model', '/data/model', '--noise', '/data/noise',
              '--lexicon', '/data/lexicon.txt',
              '--baseline', 'https://asr-reports.s3.us-east-1.amazonaws.com/baselines/whisper-large-v3/wer.json',
              '--report', '/data/wer.json'],
        outputs=[Parameter(name='wer', value_from=m.ValueFrom(path='/data/wer.txt'))],
        volume_mounts=[DATA])

    promote = Container(
        name='promote-model', image='amazon/aws-cli:2.15.30',
        command=['sh', '-c'],
        args=[f'aws s3 cp --recursive "s3://{AP}/whisper-ft/$0/" "s3://{AP}/whisper-ft/production/" && '
              'aws s3 cp /data/wer.json "s3://asr-reports/nightly/$0/wer.json"',
              '{{workflow.parameters.model_date}}'],
        volume_mounts=[DATA])

    with Steps(name='nightly') as s:
        with s.parallel():
            testset()
            model()
            refs()
        evaluate()
        promote(when='{{steps.evaluate.outputs.parameters.wer}} < {{workflow.parameters.wer_gate}}')

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(cw.to_yaml())
