"""Which checks a role runs, in order, each group bounded in time.

A group is one subsystem asked through the role's own clients and settings; it returns its
lines, skipping (not failing) the checks whose prerequisite failed, so one fault turns exactly
one line red."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from gpuattr.doctor.lines import Line, fail
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


#: each role's groups, in the order they print (Kafka first: every role needs it)
GROUPS: Mapping[Role, tuple[tuple[str, Group], ...]] = {
    "agent": (("kafka", _kafka), ("kubelet", _kubelet), ("api", _api), ("exporter", _exporter)),
    "cluster": (("kafka", _kafka), ("api", _api)),
    "worker": (("kafka", _kafka),),
    "sink": (("kafka", _kafka),),
    "reader": (("kafka", _kafka),),
}

#: a group asks a few questions in turn, each bounded by ``timeout_s``; this bounds the whole
GROUP_BUDGET = 6


async def run_doctor(settings: DoctorSettings) -> list[Line]:
    lines: list[Line] = []
    for name, group in GROUPS[settings.role]:
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
