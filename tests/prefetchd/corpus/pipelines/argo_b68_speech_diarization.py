# ruff: noqa
"""Stub: argo_b68_speech_diarization.yaml is hand-written Argo YAML, not generated.

The Workflow (AMI speaker-diarization benchmark with pyannote) is written
directly as an Argo manifest; this file only marks its origin. Nothing to run.

Exercises: steps syntax, bash and Python `script` templates, `withItems` of
maps carrying s3:// URIs under a `when`, memoize, a sidecar and the main
container mounting the same workflow-level PVC with different subPaths, a
`suspend` with a duration, a nested steps template whose output parameter is a
`valueFrom.expression` choosing a destination (a write, not a read), and a
step-level exit hook that the next step group waits for.
"""
