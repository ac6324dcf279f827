"""The Kubernetes API client every role makes the same way: an explicit URL (the double, tests),
else in-cluster, else a kubeconfig."""

from __future__ import annotations

import os
from typing import Any

from kubernetes_asyncio import client, config

from infra.settings import KubeSettings


async def make_api_client(settings: KubeSettings) -> Any:
    """Explicit URL (the double, tests), else in-cluster, else a kubeconfig."""
    if settings.api_url:
        conf = client.Configuration()
        conf.host = settings.api_url
        return client.ApiClient(configuration=conf)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        return client.ApiClient()
    conf = client.Configuration()
    await config.load_kube_config(
        config_file=str(settings.kubeconfig) if settings.kubeconfig else None,
        context=settings.context,
        client_configuration=conf,
    )
    return client.ApiClient(configuration=conf)
