# ruff: noqa  (pipeline source in the SDK's own idiom: mutable defaults, typing.List)
"""A CronWorkflow that runs the WorkflowTemplate `churn-train` (argo_wftmplref_lib.yaml)
nightly through `spec.workflowSpec.workflowTemplateRef`, with its defaults.

Generate: python argo_cron_wftmplref.py  -> argo_cron_wftmplref.yaml
"""
import os

from hera.workflows import CronWorkflow
from hera.workflows import models as m

with CronWorkflow(
    name='churn-nightly',
    schedules=['30 2 * * *'],
    workflow_template_ref=m.WorkflowTemplateRef(name='churn-train'),
) as cw:
    pass

if __name__ == '__main__':
    with open(os.path.splitext(__file__)[0] + '.yaml', 'w') as f:
        f.write(cw.to_yaml())
