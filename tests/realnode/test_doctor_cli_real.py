"""``gpuattr doctor`` as an operator runs it, against the whole real local stack: the process with
a role's environment, the secured broker (TLS, SCRAM, ACLs from ``infra/acls.py``, topics from
``infra/topics.py``), the real kubelet's socket, the real API server under the shipped RBAC's
ServiceAccount tokens, and the exporter double serving this node's GPUs.

A good install is green on every line; each fault then turns exactly its own line red across all
groups (a check whose prerequisite failed is skipped, never red), with its fix, and the exit
status says so."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from gpuattr.localkafka import LocalKafka
from gpuattr.localkube.cluster import LocalCluster
from gpuattr.procs import kafka_env, settings_env
from infra.acls import DEFAULT_PRINCIPALS, Role, create_acls, role_acls
from infra.admin import create_topics
from infra.kafka import client_options
from infra.settings import KafkaSettings
from infra.topics import topic_specs
from sim.exporter_rows import ExporterRow
from sim.exporter_server import ExporterDouble
from tests.doctor_cli import doctor, run_doctor
from tests.helpers import wait_for_async
from tests.kube_fixture import Rest
from tests.realkube.crds import install_crds
from tests.realnode.node import agent_pod
from tests.realnode.pipeline import Telemetry
from tests.realnode.test_doctor_real import GPU_OPERATOR, INTENT, _remove, token_kubeconfig

pytestmark = pytest.mark.integration

PARTITIONS = 2
AGENT_LINES = (
    "kafka.connect",
    "kafka.topics",
    "kafka.acls",
    "clock.skew",
    "kubelet.socket",
    "kubelet.list",
    "kubelet.allocatable",
    "api.server",
    "api.pods",
    "api.nodes",
    "api.dra",
    "exporter.reach",
    "exporter.local",
    "exporter.mode",
)


async def install_kafka(
    broker: LocalKafka, prefix: str, users: Mapping[Role, str]
) -> KafkaSettings:
    """Topics by ``infra/topics.py`` under ``prefix``; each role's ACLs for its user."""
    admin = broker.client_settings(topic_prefix=prefix, partitions=PARTITIONS)
    app_id = f"{prefix}worker"
    await create_topics(broker.bootstrap, topic_specs(admin, app_id), **client_options(admin))
    principals = {**DEFAULT_PRINCIPALS, **users}
    acls = role_acls(admin, app_id, f"{prefix}sink", principals)
    rules = [acl for role in users for acl in acls[role]]
    await create_acls(broker.bootstrap, rules, **client_options(admin))
    return admin


async def delete_topic(admin: KafkaSettings, name: str) -> None:
    client = AIOKafkaAdminClient(bootstrap_servers=admin.bootstrap, **client_options(admin))
    await client.start()
    try:
        await client.delete_topics([name])

        async def gone() -> bool:
            return name not in set(await client.list_topics())

        await wait_for_async(gone, timeout_s=30, what=f"{name} deleted")
    finally:
        await client.close()


async def test_the_agent_and_cluster_role_are_green_and_each_fault_turns_exactly_its_line_red(
    real_node: LocalCluster, secure_broker: LocalKafka, tmp_path: Path
) -> None:
    node = real_node.node
    prefix = f"e{uuid.uuid4().hex[:8]}."
    admin = await install_kafka(
        secure_broker, prefix, {"agent": "e2e-agent", "cluster": "e2e-cluster"}
    )
    # the narrow user: the agent's ACLs but Write on its one input topic
    narrow = [
        a
        for a in role_acls(
            admin, f"{prefix}worker", f"{prefix}sink", {**DEFAULT_PRINCIPALS, "agent": "e2e-narrow"}
        )["agent"]
        if a.name != f"{prefix}node-events"
    ]
    await create_acls(secure_broker.bootstrap, narrow, **client_options(admin))

    def kafka_as(user: str) -> dict[str, str]:
        return kafka_env(
            secure_broker.client_settings(user, topic_prefix=prefix, partitions=PARTITIONS)
        )

    await agent_pod(Rest.admin(real_node.kube))
    agent_config = await token_kubeconfig(real_node, "agent", tmp_path)
    inventory = tmp_path / "inventory.json"
    node.write_inventory(inventory)

    async with ExporterDouble(Telemetry(real_node).rows) as exporter:
        agent = {
            **kafka_as("e2e-agent"),
            **settings_env(
                KUBELET_SOCKET_PATH=node.podresources_socket,
                KUBE_KUBECONFIG=agent_config,
                DCGM_URL=exporter.url,
                INVENTORY_FILE=inventory,
                WORKER_APP_ID=f"{prefix}worker",
            ),
            "NODE_NAME": node.name,
        }
        good = await doctor("agent", agent)
        assert (good.code, set(good.statuses().values())) == (0, {"ok"}), good.lines
        assert tuple(good.lines) == AGENT_LINES
        # as a person reads it: one line per check, then the count
        code, out = await run_doctor("agent", agent)
        text = out.decode().splitlines()
        print("\n".join(text))  # the healthy output deploy/README.md shows
        assert code == 0
        assert [line.split()[:2] for line in text[:-1]] == [["✓", name] for name in AGENT_LINES]
        assert text[-1] == f"{len(AGENT_LINES)} checks: 0 failed, 0 warnings"

        # a wrong password: the connect line, the other Kafka lines skipped, the rest green
        wrong = await doctor("agent", {**agent, "GPUATTR_KAFKA_SASL_PASSWORD": "not-it"})
        assert (wrong.code, wrong.red()) == (1, ["kafka.connect"]), wrong.lines
        assert wrong.statuses()["kafka.acls"] == "skip"
        assert "not-it" not in orjson.dumps(wrong.lines).decode()
        code, out = await run_doctor("agent", {**agent, "GPUATTR_KAFKA_SASL_PASSWORD": "not-it"})
        (said,) = [line for line in out.decode().splitlines() if line.startswith("✗")]
        assert said.startswith("✗ kafka.connect"), said
        assert " → fix: " in said, said

        # an ACL too narrow
        tight = await doctor("agent", {**agent, **kafka_as("e2e-narrow")})
        assert (tight.code, tight.red()) == (1, ["kafka.acls"]), tight.lines
        assert f"{prefix}node-events" in tight.lines["kafka.acls"]["said"]

        # a socket path that does not exist
        nosock = await doctor("agent", agent, "--kubelet-socket", str(tmp_path / "none.sock"))
        assert (nosock.code, nosock.red()) == (1, ["kubelet.socket"]), nosock.lines
        assert nosock.lines["kubelet.socket"]["fix"]

        # an exporter of another node
        foreign_uuid = "GPU-0badc0de-0000-4000-8000-00000000e2e0"
        foreign = [
            ExporterRow(
                gpu=0,
                uuid=foreign_uuid,
                model="NVIDIA H100 80GB HBM3",
                hostname=node.name,
                values=(("DCGM_FI_DEV_GPU_UTIL", 40.0),),
            )
        ]
        async with ExporterDouble(lambda: foreign) as other:
            elsewhere = await doctor("agent", {**agent, "GPUATTR_DCGM_URL": other.url})
        assert (elsewhere.code, elsewhere.red()) == (1, ["exporter.local"]), elsewhere.lines
        assert foreign_uuid in elsewhere.lines["exporter.local"]["said"]

        # a missing topic (the agent's input; last, the cases above need it)
        await delete_topic(admin, f"{prefix}node-events")
        missing = await doctor("agent", agent)
        assert (missing.code, missing.red()) == (1, ["kafka.topics"]), missing.lines
        assert f"{prefix}node-events" in missing.lines["kafka.topics"]["said"]
        specs = topic_specs(admin, f"{prefix}worker")  # back, for the cluster role's lines
        await create_topics(secure_broker.bootstrap, specs, **client_options(admin))

    # the cluster role: green with the GPU Operator's CRDs, exactly api.intent red without
    rest = Rest.admin(real_node.kube)
    await install_crds(rest, *(GPU_OPERATOR / file for file, _ in INTENT.values()))
    cluster = {
        **kafka_as("e2e-cluster"),
        **settings_env(
            KUBE_KUBECONFIG=await token_kubeconfig(real_node, "cluster", tmp_path),
            CLUSTER_LEASE_NAMESPACE="gpuattr",
        ),
    }
    healthy = await doctor("cluster", cluster)
    assert (healthy.code, healthy.red()) == (0, []), healthy.lines
    assert {s for s in healthy.statuses().values()} <= {"ok", "warn"}, healthy.lines
    for crd, (_, path) in INTENT.items():
        await _remove(rest, crd, path)
    try:
        bare = await doctor("cluster", cluster)
        assert (bare.code, bare.red()) == (1, ["api.intent"]), bare.lines
        assert "the GPU Operator's CRDs are not installed" in bare.lines["api.intent"]["said"]
    finally:
        await install_crds(rest, *(GPU_OPERATOR / file for file, _ in INTENT.values()))
