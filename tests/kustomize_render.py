"""The deploy manifests as kustomize renders them, for the tests that read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "deploy" / "kustomize" / "base"
OVERLAYS = ROOT / "deploy" / "kustomize" / "overlays"
MICROK8S = OVERLAYS / "microk8s"
NVML_PROCESSES = OVERLAYS / "nvml-processes"


def docs_of(directory: Path) -> list[dict[str, Any]]:
    """Every document of a kustomization's resources (nested directories included)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization.get("resources", []):
        path = directory / name
        if path.is_dir():
            docs += docs_of(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def base_docs() -> list[dict[str, Any]]:
    return docs_of(BASE)


def microk8s_docs() -> list[dict[str, Any]]:
    return overlay_docs(MICROK8S)


def nvml_processes_docs() -> list[dict[str, Any]]:
    return overlay_docs(NVML_PROCESSES)


def overlay_docs(directory: Path) -> list[dict[str, Any]]:
    """An overlay of the base rendered the way kustomize does for its JSON6902 patches."""
    overlay = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs = base_docs()
    for patch in overlay.get("patches", []):
        ops = json.loads((directory / patch["path"]).read_text())
        target = patch["target"]
        docs = [
            jsonpatch.apply_patch(d, ops)
            if (d["kind"], d["metadata"]["name"]) == (target["kind"], target["name"])
            else d
            for d in docs
        ]
    return docs
