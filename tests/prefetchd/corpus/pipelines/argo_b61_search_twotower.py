# ruff: noqa
"""Two-tower product retrieval for e-commerce search as an Argo Workflow DAG (Hera).

The query log and product catalog are workflow parameters with defaults; the
synonym list and the golden relevance set are S3 input artifacts with
literal bucket/key; pair mining, a small temperature sweep (withItems) and
index building share a per-run volumeClaimTemplate; recall@100 gates the
index publish; a notify template is the onExit handler.

Generate: python argo_b61_search_twotower.py  -> argo_b61_search_twotower.yaml
"""
import os

from hera.workflows import DAG, Artifact, Container, Parameter, S3Artifact, Script, Workflow
from hera.workflows import models as m

IMAGE = 'ghcr.io/acme/two-tower:1.4.2'
WORK = m.VolumeMount(name='work', mount_path='/work')

with Workflow(
    generate_name='search-two-tower-',
    entrypoint='main',
    on_exit='notify',
    arguments=[Parameter(name='queries_uri', value='s3://acme-search/logs/queries/2024-06/'),
               Parameter(name='catalog_uri', value='s3://acme-search/catalog/products-2024-06-30.parquet'),
               Parameter(name='recall_gate', value='0.85')],
    volume_claim_templates=[m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name='work'),
        spec=m.PersistentVolumeClaimSpec(access_modes=['ReadWriteOnce'],
                                         resources=m.VolumeResourceRequirements(requests={'storage': m.Quantity('100Gi')})))],
) as w:
    validate = Container(
        name='validate-catalog', image=IMAGE, command=['python', '-m', 'twotower.validate'],
        args=['--catalog', '{{inputs.parameters.catalog}}', '--required', 'product_id,title,category,brand'],
        inputs=[Parameter(name='catalog')],
    )
    mine = Container(
        name='mine-pairs', image=IMAGE, command=['python', '-m', 'twotower.pairs'],
        args=['--queries', '{{workflow.parameters.queries_uri}}', '--catalog', '{{workflow.parameters.catalog_uri}}',
              '--synonyms', '/in/synonyms.txt', '--out', '/work/pairs'],
        inputs=[S3Artifact(name='synonyms', path='/in/synonyms.txt', bucket='acme-search',
                           key='resources/synonyms-en-v12.txt', endpoint='s3.amazonaws.com')],
        volume_mounts=[WORK],
    )
    train = Container(
        name='train-tower', image=IMAGE, command=['python', '-m', 'twotower.train'],
        args=['--pairs', '/work/pairs', '--temperature', '{{inputs.parameters.temperature}}',
              '--dim', '{{inputs.parameters.dim}}', '--out', '/work/models/t{{inputs.parameters.temperature}}'],
        inputs=[Parameter(name='temperature'), Parameter(name='dim')],
        volume_mounts=[WORK],
    )
    pick = Script(
        name='pick-best', image='python:3.11-slim', command=['python'],
        source=('import json, pathlib\n'
                'scores = {p.parent.name: json.loads(p.read_text())["val_recall"]\n'
                '          for p in pathlib.Path("/work/models").glob("*/metrics.json")}\n'
                'print(max(scores, key=scores.get))\n'),
        volume_mounts=[WORK],
    )
    index = Container(
        name='build-index', image=IMAGE, command=['python', '-m', 'twotower.index'],
        args=['--model', '/work/models/{{inputs.parameters.model}}', '--catalog', '{{workflow.parameters.catalog_uri}}',
              '--out', '/work/index'],
        inputs=[Parameter(name='model')],
        volume_mounts=[WORK],
    )
    evaluate = Container(
        name='eval-recall', image=IMAGE, command=['sh', '-c'],
        args=['python -m twotower.evaluate --index /work/index --golden /in/golden.jsonl --k 100 > /tmp/recall.txt'],
        inputs=[S3Artifact(name='golden', path='/in/golden.jsonl', bucket='acme-search',
                           key='golden/relevance-v7.jsonl', endpoint='s3.amazonaws.com')],
        outputs=[Parameter(name='recall', value_from=m.ValueFrom(path='/tmp/recall.txt'))],
        volume_mounts=[WORK],
    )
    publish = Container(
        name='publish-index', image='amazon/aws-cli:2.15.30', command=['aws', 's3', 'sync'],
        args=['/work/index', 's3://acme-search/indexes/two-tower/latest/'],
        volume_mounts=[WORK],
    )
    notify = Container(
        name='notify', image='curlimages/curl:8.8.0', command=['sh', '-c'],
        args=['curl -sf -X POST -d "{\\"text\\": \\"search-two-tower {{workflow.status}}\\"}" '
              'https://hooks.slack.com/services/T000/B000/XXXX || true'],
    )

    with DAG(name='main'):
        v = validate(name='validate-catalog', arguments={'catalog': '{{workflow.parameters.catalog_uri}}'})
        p = mine(name='mine-pairs')
        t = train(name='train', arguments={'temperature': '{{item.temperature}}', 'dim': '{{item.dim}}'},
                  with_items=[{'temperature': '0.05', 'dim': '256'},
                              {'temperature': '0.07', 'dim': '256'},
                              {'temperature': '0.1', 'dim': '256'}])
        b = pick(name='pick-best')
        i = index(name='build-index', arguments={'model': '{{tasks.pick-best.outputs.result}}'})
        e = evaluate(name='eval-recall')
        pub = publish(name='publish-index',
                      when='{{tasks.eval-recall.outputs.parameters.recall}} >= {{workflow.parameters.recall_gate}}')
        [v, p] >> t >> b >> i >> e >> pub

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
