"""The doctor's kubelet, API-server and exporter judges: tables of facts → lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.dcgm.translate import parse_exposition
from agents.locate import NotFound, Target
from agents.podresources.translate import Unusable
from contract.inputs import AllocatableDevice, DeviceAssignment, DraDevice, ResourceSliceRecord
from gpuattr.doctor import api, exporter, kubelet
from gpuattr.doctor.api import Answers, ServerFacts
from gpuattr.doctor.settings import DoctorSettings
from infra.settings import (
    ClusterSettings,
    DcgmSettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
)
from sim.exporter_rows import ExporterRow, render
from tests.dcgm_captures import FIXTURES

SOCK = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
GPU_A, GPU_B = (
    "GPU-aaaaaaaa-0000-0000-0000-000000000001",
    "GPU-aaaaaaaa-0000-0000-0000-000000000002",
)
FOREIGN = "GPU-ffffffff-0000-0000-0000-00000000000f"


def settings(role: str = "agent", *, dra: bool = True, node: str | None = "n1") -> DoctorSettings:
    return DoctorSettings(
        role=role,  # type: ignore[arg-type]
        kafka=KafkaSettings(),
        kubelet=KubeletSettings(socket_path=SOCK),
        dcgm=DcgmSettings(url="http://127.0.0.1:9400/metrics"),
        kube=KubeSettings(api_url="http://127.0.0.1:1", dra=dra),
        cluster=ClusterSettings(),
        worker_app_id="w",
        sink_group="s",
        node=node,
    )


# --- kubelet

LISTED = kubelet.Listed(
    (
        DeviceAssignment("ns", "train", "main", "nvidia.com/gpu", GPU_A),
        DeviceAssignment("ns", "claimed", "main", "dra:gpu.example.com", "n1/gpu-0", "ns/c"),
    ),
    frozenset({"ns/train", "ns/claimed", "gpuattr/agent"}),
    (),
)
ALLOC = kubelet.Allocatable((AllocatableDevice("nvidia.com/gpu", GPU_A),), ())
UNIMPLEMENTED = kubelet.RpcFailed("UNIMPLEMENTED", "unknown method", not_served=True)


@pytest.mark.parametrize(
    ("facts", "own_pod", "want"),
    [
        pytest.param(
            kubelet.KubeletFacts(kubelet.SocketFacts(False)),
            "",
            ["fail", "skip", "skip"],
            id="missing",
        ),
        pytest.param(
            kubelet.KubeletFacts(kubelet.SocketFacts(True, False, True)),
            "",
            ["fail", "skip", "skip"],
            id="not-a-socket",
        ),
        pytest.param(
            kubelet.KubeletFacts(kubelet.SocketFacts(True, True, False)),
            "",
            ["fail", "skip", "skip"],
            id="no-access",
        ),
        pytest.param(
            kubelet.KubeletFacts(kubelet.SocketFacts(True, True, True), LISTED, ALLOC),
            "gpuattr/agent",
            ["ok", "ok", "ok"],
            id="green",
        ),
        pytest.param(
            kubelet.KubeletFacts(kubelet.SocketFacts(True, True, True), LISTED, ALLOC),
            "gpuattr/other",
            ["ok", "warn", "ok"],
            id="own-pod-not-listed",
        ),
        pytest.param(
            kubelet.KubeletFacts(
                kubelet.SocketFacts(True, True, True), kubelet.Listed((), frozenset(), ()), ALLOC
            ),
            "",
            ["ok", "warn", "ok"],
            id="lists-nothing",
        ),
        pytest.param(
            kubelet.KubeletFacts(
                kubelet.SocketFacts(True, True, True),
                kubelet.Listed(
                    LISTED.rows, LISTED.pods, (Unusable("empty_device_id", "pod ns/x"),)
                ),
                ALLOC,
            ),
            "",
            ["ok", "warn", "ok"],
            id="unusable-entries",
        ),
        pytest.param(
            kubelet.KubeletFacts(
                kubelet.SocketFacts(True, True, True),
                kubelet.RpcFailed("UNAVAILABLE", "down"),
                ALLOC,
            ),
            "",
            ["ok", "fail", "ok"],
            id="list-fails",
        ),
        pytest.param(
            kubelet.KubeletFacts(kubelet.SocketFacts(True, True, True), LISTED, UNIMPLEMENTED),
            "",
            ["ok", "ok", "warn"],
            id="allocatable-not-served",
        ),
        pytest.param(
            kubelet.KubeletFacts(
                kubelet.SocketFacts(True, True, True), LISTED, kubelet.RpcFailed("INTERNAL", "x")
            ),
            "",
            ["ok", "ok", "fail"],
            id="allocatable-fails",
        ),
        pytest.param(
            kubelet.KubeletFacts(
                kubelet.SocketFacts(True, True, True), LISTED, kubelet.Allocatable((), ())
            ),
            "",
            ["ok", "ok", "warn"],
            id="nothing-allocatable",
        ),
    ],
)
def test_kubelet_lines(facts: kubelet.KubeletFacts, own_pod: str, want: list[str]) -> None:
    lines = kubelet.judge(SOCK, facts, own_pod)
    assert [line.check for line in lines] == [
        "kubelet.socket",
        "kubelet.list",
        "kubelet.allocatable",
    ]
    assert [line.status for line in lines] == want


def test_kubelet_list_says_devices_by_resource_and_claims() -> None:
    line = kubelet.judge_list(LISTED, "")
    assert "nvidia.com/gpu 1" in line.said
    assert "dra:gpu.example.com 1" in line.said
    assert "1 DRA claims" in line.said
    assert line.facts["pods"] == 3


def test_a_missing_socket_names_the_mount_and_the_setting() -> None:
    line = kubelet.judge_socket(SOCK, kubelet.SocketFacts(False))
    assert "GPUATTR_KUBELET_SOCKET_PATH" in line.fix
    assert "hostPath" in line.fix
    assert "microk8s" in line.fix


def test_stat_socket_tells_a_file_from_nothing(tmp_path: Path) -> None:
    assert kubelet.stat_socket(tmp_path / "none") == kubelet.SocketFacts(False)
    (tmp_path / "file").write_text("")
    assert kubelet.stat_socket(tmp_path / "file").is_socket is False


# --- API server


def _all(checks: tuple[api.Check, ...], **over: Answers) -> dict[str, Answers]:
    out = {api.key(n): Answers(200) for c in checks for n in c.needs}
    for plural, answer in over.items():
        for c in checks:
            for n in c.needs:
                if n.resource.plural == plural:
                    out[api.key(n)] = answer
    return out


AGENT = api.checks_for(settings("agent"))
CLUSTER = api.checks_for(settings("cluster"))


def test_the_tables_follow_the_shipped_rbac() -> None:
    assert [c.name for c in AGENT] == ["api.pods", "api.nodes", "api.dra"]
    assert [c.name for c in api.checks_for(settings("agent", dra=False))] == [
        "api.pods",
        "api.nodes",
    ]
    assert [c.name for c in CLUSTER] == [
        "api.nodes",
        "api.pods",
        "api.lease",
        "api.intent",
        "api.kueue",
        "api.dra",
    ]
    assert api.checks_for(settings("worker")) == ()
    pods = AGENT[0].needs[0].resource
    assert pods.field_selector == "spec.nodeName=n1"
    assert AGENT[0].needs[0].verbs == (
        "list",
        "watch",
    )
    lease = {n.resource.name: n.verbs for n in CLUSTER[2].needs}
    assert lease == {"": ("create",), "gpuattr-cluster": ("get", "update")}


@pytest.mark.parametrize(
    ("checks", "over", "want"),
    [
        pytest.param(AGENT, {}, {}, id="agent-green"),
        pytest.param(
            AGENT, {"pods": Answers(200, ("watch",))}, {"api.pods": "fail"}, id="no-watch-pods"
        ),
        pytest.param(AGENT, {"nodes": Answers(403)}, {"api.nodes": "fail"}, id="no-list-nodes"),
        pytest.param(
            AGENT,
            {"resourceslices": Answers(404), "resourceclaims": Answers(404)},
            {"api.dra": "warn"},
            id="dra-not-served",
        ),
        pytest.param(AGENT, {"pods": Answers(500)}, {"api.pods": "fail"}, id="server-error"),
        pytest.param(
            AGENT, {"pods": Answers(200, (), ("watch",))}, {"api.pods": "warn"}, id="review-refused"
        ),
        pytest.param(CLUSTER, {}, {}, id="cluster-green"),
        pytest.param(
            CLUSTER,
            {
                "clusterpolicies": Answers(404),
                "gpuclusters": Answers(404),
                "nvidiadrivers": Answers(404),
            },
            {"api.intent": "fail"},
            id="no-operator",
        ),
        pytest.param(
            CLUSTER,
            {"gpuclusters": Answers(404), "nvidiadrivers": Answers(404)},
            {},
            id="clusterpolicy-only",
        ),
        pytest.param(CLUSTER, {"clusterpolicies": Answers(404)}, {}, id="gpucluster-only"),
        pytest.param(
            CLUSTER,
            {"clusterpolicies": Answers(403)},
            {"api.intent": "fail"},
            id="intent-forbidden",
        ),
        pytest.param(
            CLUSTER,
            {
                p: Answers(404)
                for p in ("workloads", "localqueues", "clusterqueues", "resourceflavors")
            },
            {"api.kueue": "warn"},
            id="no-kueue",
        ),
        pytest.param(CLUSTER, {"devicetaintrules": Answers(404)}, {}, id="no-taint-rules"),
        pytest.param(
            CLUSTER,
            {"leases": Answers(None, ("update",))},
            {"api.lease": "fail"},
            id="lease-not-updatable",
        ),
    ],
)
def test_api_lines(
    checks: tuple[api.Check, ...], over: dict[str, Answers], want: dict[str, str]
) -> None:
    lines = api.judge(checks, ServerFacts(None, 200, "v1.35.4", _all(checks, **over)))
    assert lines[0].check == "api.server"
    assert lines[0].status == "ok"
    got = {line.check: line.status for line in lines[1:]}
    assert got == {c.name: want.get(c.name, "ok") for c in checks}


def test_forbidden_names_verb_resource_and_role() -> None:
    lines = api.judge(AGENT, ServerFacts(None, 200, "", _all(AGENT, pods=Answers(200, ("watch",)))))
    line = next(x for x in lines if x.check == "api.pods")
    assert "may not watch pods" in line.said
    assert "gpuattr-agent" in line.fix


def test_no_operator_says_so_and_one_served_names_it() -> None:
    absent = {p: Answers(404) for p in ("clusterpolicies", "gpuclusters", "nvidiadrivers")}
    line = api.judge_check(CLUSTER[3], _all(CLUSTER, **absent))
    assert "the GPU Operator's CRDs are not installed" in line.said
    assert line.fix
    line = api.judge_check(CLUSTER[3], _all(CLUSTER, gpuclusters=Answers(404)))
    assert "clusterpolicies.nvidia.com/v1" in line.said
    assert "gpuclusters" not in line.said.split(";")[0]


@pytest.mark.parametrize(
    ("facts", "status"),
    [
        (ServerFacts("ClientConnectorError: refused"), "fail"),
        (ServerFacts("HTTP 401", 401), "fail"),
    ],
    ids=["unreachable", "unauthorized"],
)
def test_an_unreachable_server_skips_the_rest(facts: ServerFacts, status: str) -> None:
    lines = api.judge(AGENT, facts)
    assert [x.status for x in lines] == [status, "skip", "skip", "skip"]


# --- exporter

NODE = exporter.NodeFacts(("n1",), frozenset({GPU_A, GPU_B}), {}, ("kubelet allocatable",))


def _rows(uuids: list[str], hostname: str = "n1") -> str:
    return render(
        [
            ExporterRow(
                gpu=i,
                uuid=u,
                model="H100",
                hostname=hostname,
                values=(("DCGM_FI_DEV_GPU_UTIL", 5.0),),
            )
            for i, u in enumerate(uuids)
        ]
    )


@pytest.mark.parametrize(
    ("text", "node", "want"),
    [
        pytest.param(_rows([GPU_A, GPU_B]), NODE, ["ok", "ok", "ok"], id="this-node"),
        pytest.param(_rows([FOREIGN]), NODE, ["ok", "fail", "ok"], id="another-nodes-gpus"),
        pytest.param(
            _rows([GPU_A], hostname="n2"), NODE, ["ok", "fail", "ok"], id="another-hostname"
        ),
        pytest.param(
            _rows([GPU_A]),
            exporter.NodeFacts(("n1",), frozenset()),
            ["ok", "fail", "ok"],
            id="unverifiable",
        ),
        pytest.param("# nothing\n", NODE, ["fail", "skip", "skip"], id="no-gpu-row"),
    ],
)
def test_exporter_lines(text: str, node: exporter.NodeFacts, want: list[str]) -> None:
    facts = exporter.ExporterFacts(Target("http://x/metrics", ""), exporter.Fetched(text))
    lines = exporter.judge(settings(), facts, node, 1_000)
    assert [x.check for x in lines] == ["exporter.reach", "exporter.local", "exporter.mode"]
    assert [x.status for x in lines] == want


def test_foreign_uuids_are_named() -> None:
    facts = exporter.ExporterFacts(
        Target("http://x/metrics", ""), exporter.Fetched(_rows([GPU_A, FOREIGN]))
    )
    local = exporter.judge(settings(), facts, NODE, 1_000)[1]
    assert local.status == "fail"
    assert FOREIGN in local.said
    assert local.facts["foreign_uuids"] == [FOREIGN]
    assert "GPUATTR_DCGM_DISCOVER" in local.fix


@pytest.mark.parametrize(
    "facts",
    [
        exporter.ExporterFacts(NotFound("no-exporter-pod", "no pod labelled app=x runs here")),
        exporter.ExporterFacts(
            Target("http://x/metrics", ""), exporter.FetchFailed("ClientConnectorError")
        ),
    ],
    ids=["no-exporter-pod", "refused"],
)
def test_an_absent_exporter_fails_reach_and_skips_the_rest(facts: exporter.ExporterFacts) -> None:
    lines = exporter.judge(settings(), facts, NODE, 1_000)
    assert [x.status for x in lines] == ["fail", "skip", "skip"]
    assert lines[0].fix


def test_no_node_name_fails_local() -> None:
    facts = exporter.ExporterFacts(Target("http://x/metrics", ""), exporter.Fetched(_rows([GPU_A])))
    assert exporter.judge(settings(node=None), facts, None, 1)[1].status == "fail"


def test_node_facts_combine_allocatable_held_and_slices_as_the_worker_does() -> None:
    dra_uuid = "GPU-dddddddd-0000-0000-0000-000000000001"
    slices = [
        ResourceSliceRecord(
            node="n1",
            ts_ms=1,
            name="s",
            driver="gpu.example.com",
            pool="n1",
            pool_generation=1,
            devices=(DraDevice(name="gpu-0", uuid=dra_uuid),),
        )
    ]
    facts = kubelet.KubeletFacts(
        kubelet.SocketFacts(True, True, True),
        kubelet.Listed(
            (DeviceAssignment("ns", "p", "c", "nvidia.com/gpu", f"{GPU_B}::2"),),
            frozenset({"ns/p"}),
            (),
        ),
        kubelet.Allocatable((AllocatableDevice("nvidia.com/gpu", f"{GPU_A}::1"),), ()),
    )
    node = exporter.node_facts("n1", "n1.example", None, facts, slices, 5)
    assert node.known == {GPU_A, GPU_B, dra_uuid}
    assert node.host_names == ("n1", "n1.example")
    assert node.sources == ("kubelet allocatable", "kubelet held devices", "ResourceSlices")


@pytest.mark.parametrize("capture", FIXTURES, ids=lambda p: p.stem)
def test_every_genuine_capture_reads_through_the_exporter_judges(capture: Path) -> None:
    text = capture.read_text()
    parsed = parse_exposition(text, node="n1", ts_ms=1)
    uuids = frozenset(s.uuid for s in parsed.samples)
    hosts = tuple(sorted({s.hostname for s in parsed.samples if s.hostname})) or ("n1",)
    facts = exporter.ExporterFacts(Target("http://x/metrics", ""), exporter.Fetched(text))
    ours = exporter.NodeFacts(hosts, uuids, {}, ("inventory",))
    lines = exporter.judge(settings(node=hosts[0]), facts, ours, 1)
    assert [x.status for x in lines[:2]] == ["ok", "ok"], lines
    assert lines[2].status in ("ok", "warn")
    assert lines[2].facts["devices"] == len(parsed.samples)
    theirs = exporter.NodeFacts(hosts, frozenset({FOREIGN}), {}, ("inventory",))
    assert exporter.judge(settings(node=hosts[0]), facts, theirs, 1)[1].status == "fail"


MODES = {
    "01-kops-l4-full-scrape-no-holder": "no pod labels",
    "02-vks-h100-vgpu-full-scrape-pod-attributed": "pod labels on 1 of 1",
    "04-dcgm-exporter-317-a30-mig-instances-excerpt": "6 MIG instances",
    "05-dcgm-exporter-363-a5000-no-pod-labels": "no pod labels",
    "06-dcgm-exporter-pr570-gh200-dra-shared-and-free": "DRA labels",
}


@pytest.mark.parametrize(("prefix", "said"), sorted(MODES.items()))
def test_mode_says_what_each_capture_shows(prefix: str, said: str) -> None:
    capture = next(p for p in FIXTURES if p.name.startswith(prefix))
    line = exporter.judge_mode(parse_exposition(capture.read_text(), node="n1", ts_ms=1))
    assert said in line.said, line.said
