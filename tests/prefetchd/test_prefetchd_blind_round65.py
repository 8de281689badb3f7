"""Blind round 65 (pipelines structured for reuse: templateRef, workflowTemplateRef, nested KFP
pipelines, ConfigMap-valued arguments, default artifact repositories): a parameter named for
a registry of something else was a write by its name."""

from __future__ import annotations

from prefetchd.pipeline._uri import name_direction


def test_a_registry_of_something_else_is_read() -> None:
    """Blind round 65: ``vendor_registry_uri`` (a table the step looks vendors up in) was a
    write by its name, as a model registry is."""
    assert name_direction("vendor_registry_uri") is None  # (read by default)
    for name in ("--registry", "model_registry_uri", "--registry-uri", "mlflow-registry",
                 "--push-registry"):
        assert name_direction(name) == "write", name
