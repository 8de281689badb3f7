"""Argo Workflows as ``kubectl get -o yaml`` shows them, found read wrongly by the blind round
"jobs 40" (/tmp/blindjobs40/REPORT.md).

A ``steps:`` list written flat (steps, not lists of parallel steps), which Argo's CRD refuses,
was planned (D8).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from prefetchd import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "wf.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


# ---- D8: a flat `steps` list is refused ----------------------------------------------------

def test_a_flat_steps_list_is_refused(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """D8: ``steps: [- name: ocr ...]`` (a step where a list of parallel steps belongs) was
    planned; Argo's CRD and controller refuse it."""
    path = write(tmp_path, """\
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {generateName: repro-8-, namespace: claims-ml}
        spec:
          entrypoint: main
          templates:
          - name: main
            steps:
            - name: ocr
              template: ocr
          - name: ocr
            container: {image: busybox, args: [--input, "s3://bkt/docs/"]}
        """)
    rc, out, err = run(capsys, "plan", path)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert "template 'main' steps[0]" in err and "list of parallel steps" in err
