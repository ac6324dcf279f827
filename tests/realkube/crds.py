"""Vendored CustomResourceDefinitions installed on the real API server: one helper for all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers import wait_for_async
from tests.kube_fixture import Rest

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def install_crds(admin: Rest, *files: Path, timeout_s: float = 30) -> None:
    """Each file's CRD created as it is (409: already there); returns once every one is
    Established and each version it serves answers a list."""
    crds: list[dict[str, Any]] = [yaml.safe_load(path.read_text()) for path in files]
    for crd in crds:
        status, body = await admin.call("POST", CRDS, crd)
        assert status in (201, 409), body

    async def served() -> bool:
        for crd in crds:
            got = await admin.get(f"{CRDS}/{crd['metadata']['name']}")
            listed = (got.get("status") or {}).get("conditions") or []
            if {c["type"]: c["status"] for c in listed}.get("Established") != "True":
                return False
            group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
            for version in crd["spec"]["versions"]:
                if version["served"]:
                    status, _ = await admin.call("GET", f"/apis/{group}/{version['name']}/{plural}")
                    if status != 200:
                        return False
        return True

    names = ", ".join(path.name for path in files)
    await wait_for_async(served, timeout_s=timeout_s, what=f"{names} established and served")
