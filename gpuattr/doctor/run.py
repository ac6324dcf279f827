"""Which checks a role runs, in order, each group bounded in time.

A group is one subsystem asked through the role's own clients and settings; it returns its
lines, skipping (not failing) the checks whose prerequisite failed, so one fault turns exactly
one line red."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from gpuattr.doctor.lines import Line, fail, ok, warn
from gpuattr.doctor.settings import DoctorSettings
from infra.acls import Role

Group = Callable[[DoctorSettings], Awaitable[list[Line]]]


async def _kafka(settings: DoctorSettings) -> list[Line]:
    from gpuattr.doctor import kafka

    return await kafka.check(settings)


async def _kubelet(settings: DoctorSettings) -> list[Line]:
    from gpuattr.doctor import kubelet

    return await kubelet.check(settings)


async def _api(settings: DoctorSettings) -> list[Line]:
    from gpuattr.doctor import api

    return await api.check(settings)


async def _exporter(settings: DoctorSettings) -> list[Line]:
    from gpuattr.doctor import exporter

    return await exporter.check(settings)


SIGNING, DESTINATIONS = "secrets.signing", "secrets.destinations"


async def _secrets(settings: DoctorSettings) -> list[Line]:
    """The role's own secrets: the sink's destinations; the cluster role's and the workers'
    signing key (ClusterKeySettings)."""
    if settings.role == "sink":
        if settings.sink_destinations:
            return [ok(DESTINATIONS, f"delivers to {' and '.join(settings.sink_destinations)}")]
        return [
            warn(
                DESTINATIONS,
                "neither a Slack nor a webhook URL is set: alerts are read and delivered nowhere",
                "set GPUATTR_SINK_SLACK_WEBHOOK_URL and/or GPUATTR_SINK_WEBHOOK_URL (with "
                "GPUATTR_SINK_WEBHOOK_SECRET) in gpuattr-sink-secrets",
            )
        ]
    if settings.signing_key_set:
        return [
            ok(
                SIGNING,
                "GPUATTR_CLUSTER_SIGNING_KEY is set (the cluster role's and every worker's "
                "must be the same key: a worker refuses what another key signed)",
            )
        ]
    return [
        warn(
            SIGNING,
            "GPUATTR_CLUSTER_SIGNING_KEY is not set: the cluster role signs nothing and the "
            "workers honour unsigned clock ticks, ClusterPolicies and DeviceTaintRules",
            "put one random key (openssl rand -hex 32) as GPUATTR_CLUSTER_SIGNING_KEY in both "
            "gpuattr-cluster-secrets and gpuattr-worker-secrets",
        )
    ]


#: each role's groups, in the order they print (Kafka first: every role needs it)
GROUPS: Mapping[Role, tuple[tuple[str, Group], ...]] = {
    "agent": (("kafka", _kafka), ("kubelet", _kubelet), ("api", _api), ("exporter", _exporter)),
    "cluster": (("kafka", _kafka), ("api", _api), ("secrets", _secrets)),
    "worker": (("kafka", _kafka), ("secrets", _secrets)),
    "sink": (("kafka", _kafka), ("secrets", _secrets)),
    "reader": (("kafka", _kafka),),
}

#: a group asks a few questions in turn, each bounded by ``timeout_s``; this bounds the whole
GROUP_BUDGET = 6


#: where a group's settings come from, for the fix of a refused one (``{role}``: the role's name)
SETTINGS_FIX: Mapping[str, str] = {
    "kafka": "set GPUATTR_KAFKA_* in the role's ConfigMap and its user and password in the "
    "Secret gpuattr-{role}-secrets (Strimzi: the Secret named after the KafkaUser, key "
    "password), or name your own Secret with the chart's secrets.{role}.existingSecret",
    "kubelet": "correct GPUATTR_KUBELET_* in the agent's environment",
    "api": "correct GPUATTR_KUBE_* / GPUATTR_CLUSTER_* in the role's environment",
    "exporter": "correct GPUATTR_DCGM_* / GPUATTR_INVENTORY_* in the agent's environment",
    "secrets": "set GPUATTR_CLUSTER_SIGNING_KEY to a random key (openssl rand -hex 32), the same "
    "in gpuattr-cluster-secrets and gpuattr-worker-secrets, or leave it empty in both",
    "secrets/sink": "set GPUATTR_SINK_SLACK_WEBHOOK_URL, GPUATTR_SINK_WEBHOOK_URL and "
    "GPUATTR_SINK_WEBHOOK_SECRET in gpuattr-sink-secrets to real values (or leave them empty)",
}


def settings_fix(group: str, role: Role) -> str:
    return SETTINGS_FIX.get(f"{group}/{role}", SETTINGS_FIX[group]).format(role=role)


async def run_doctor(settings: DoctorSettings) -> list[Line]:
    lines: list[Line] = []
    for name, group in GROUPS[settings.role]:
        refused = settings.refused.get(name)
        if refused is not None:  # the role would not start: nothing of this group to ask
            why = f"the role would refuse these settings: {refused}"
            lines.append(fail(f"{name}.settings", why, settings_fix(name, settings.role)))
            continue
        try:
            async with asyncio.timeout(settings.timeout_s * GROUP_BUDGET):
                lines += await group(settings)
        except TimeoutError:
            lines.append(
                fail(
                    name,
                    f"no answer within {settings.timeout_s * GROUP_BUDGET:.0f} s",
                    f"see why the {name} checks hang: run with --log-level DEBUG",
                )
            )
    return lines
