# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""A Workflow that runs the WorkflowTemplate `churn-train` (argo_wftmplref_lib.yaml)
through `spec.workflowTemplateRef`, overriding one parameter.

Generate: python argo_wftmplref_run.py  -> argo_wftmplref_run.yaml
"""
import os

from hera.workflows import Parameter, Workflow
from hera.workflows import models as m

with Workflow(
    generate_name='churn-train-',
    workflow_template_ref=m.WorkflowTemplateRef(name='churn-train'),
    arguments=[Parameter(name='snapshot', value='gs://example-warehouse/churn/2024-07-01/')],
) as w:
    pass

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(w.to_yaml())
