# ruff: noqa
"""Stub: argo_b68_pathology_tiles.yaml is hand-written Argo YAML, not generated.

The Workflow (Camelyon17 tile classifier) is written directly as an Argo
manifest, like Argo's own examples; this file only marks its origin. Nothing
to run.

Exercises: withSequence start/end/format, a resource template creating a
Kubeflow PyTorchJob (successCondition/failureCondition on replicaStatuses),
a task-level running lifecycle hook that applies a TensorBoard Deployment,
workflow-level hooks (exit -> resource delete by selector, running -> http),
volumeClaimTemplates, a template-level PVC volume with subPath, and a
resource patch of a KServe InferenceService storageUri.
"""
