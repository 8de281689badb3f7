# Source stub for argo_b70_wftmplref_nlu_eval.yaml (hand-written YAML, no generator).
#
# Two YAML documents in one file, as a cluster holds them:
#   1. the Workflow `argo submit --from workflowtemplate/nlu-eval -p dataset_version=v12
#      -p locales='["en-US", "de-DE", "ja-JP", "pt-BR"]'` created (server-set metadata, the
#      workflow-template label, not yet picked up by the controller: no status);
#   2. the WorkflowTemplate nlu-eval it refers to (defaults v11, two locales).
# Programs: nlu_eval.run --model M (loads the model) --data URI (reads) --slots PATH (local copy of
# the S3 input artifact) --output URI (writes).
