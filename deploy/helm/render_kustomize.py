"""Render the kustomize base from the Helm chart: one source for the manifests.

    .venv/bin/python deploy/helm/render_kustomize.py   (make manifests)

runs ``helm template`` on ``deploy/helm/gpuattr`` with its default values and writes each
template's documents to the base file of the same name (``agent.yaml``, ``cluster.yaml``, …,
split by Helm's ``# Source:`` comments), and the base's ``kustomization.yaml``. The overlays
stay kustomize patches on that base. ``helm`` is the one ``gpuattr kube --build`` builds from the
Go module proxy (:func:`gpuattr.localkube.binaries.resolve_helm`).
tests/unit/test_helm_chart.py fails when the committed base is not this script's output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHART = HERE / "gpuattr"
BASE = HERE.parent / "kustomize" / "base"
RELEASE = "gpuattr"
SOURCE = f"# Source: {CHART.name}/templates/"
HEADER = (
    "# Generated from the Helm chart deploy/helm/gpuattr (default values) by\n"
    "# deploy/helm/render_kustomize.py: edit the chart, then run `make manifests`.\n"
)


def helm_template(helm: Path, *args: str) -> str:
    """``helm template`` of the chart; ``args`` as helm takes them (``-f``, ``--set``)."""
    done = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def split_sources(rendered: str) -> dict[str, list[str]]:
    """Each template's documents, in the order Helm printed them, by template file name."""
    out: dict[str, list[str]] = {}
    for chunk in rendered.split("---\n"):
        first, _, body = chunk.partition("\n")
        if not first.startswith(SOURCE):
            if chunk.strip():
                raise ValueError(f"a document without its source: {chunk[:80]!r}")
            continue
        out.setdefault(first.removeprefix(SOURCE), []).append(body.strip("\n") + "\n")
    return out


def tidy(rendered: str) -> str:
    """Drop the blank-but-indented lines an empty optional block leaves (``{{- with }}`` in a
    ``nindent``), and trailing spaces: the same YAML, as a person would write it."""
    lines = [line.rstrip() for line in rendered.splitlines() if line == "" or line.strip()]
    return "\n".join(lines) + "\n"


def base_files(rendered: str) -> dict[str, str]:
    """The base's files: one per template, and the kustomization listing them."""
    sources = split_sources(tidy(rendered))
    files = {name: HEADER + "---\n".join(docs) for name, docs in sources.items()}
    resources = "".join(f"  - {name}\n" for name in sources)
    files["kustomization.yaml"] = (
        HEADER
        + "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        + resources
    )
    return files


def main() -> None:
    from gpuattr.localkafka.jars import default_cache_dir
    from gpuattr.localkube.binaries import resolve_helm

    helm = resolve_helm(default_cache_dir()) / "helm"
    for name, text in base_files(helm_template(helm)).items():
        (BASE / name).write_text(text)
        sys.stdout.write(f"wrote {BASE / name}\n")


if __name__ == "__main__":
    main()
