"""The dcgm-exporter the agent would scrape: ``exporter.reach``, ``exporter.local``,
``exporter.mode``.

Found as the agent finds it (the settings' URL, or its node's exporter pod through
:class:`agents.locate.ExporterLocator` when ``discover``), read with the agent's own parser, and
checked with the worker's one rule for "provably this node's" (:func:`streams.core.node.
telemetry.verify`) against the devices the node itself lists: the kubelet's allocatable and held
devices, its ResourceSlices, and its inventory (NVML or the inventory file), combined by
:func:`streams.core.devices.roster.known_gpus` exactly as the worker combines them.
:func:`ask` is the I/O; the ``judge_*`` functions are pure."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from agents.dcgm.perpod import NO_POD_UID
from agents.dcgm.translate import ParseResult, parse_exposition
from agents.inventory import InventoryError, read_inventory
from agents.kube.dra import slice_record
from agents.kube.translate import exporter_pod
from agents.locate import ExporterLocator, NotFound, Target
from contract.inputs import DcgmScrape, PodResourcesSnapshot, ResourceSliceRecord
from gpuattr.doctor import kubelet
from gpuattr.doctor.lines import Line, fail, ok, skipped, warn
from gpuattr.doctor.settings import DoctorSettings
from infra.kube import make_api_client
from streams.core.devices.dra import device_map, placed_keys
from streams.core.devices.holders import apply_podresources
from streams.core.devices.identity import EMPTY_INVENTORY, Inventory
from streams.core.devices.roster import known_gpus
from streams.core.flow.processor import inventory_of
from streams.core.node.telemetry import LABEL_HOSTNAME, Verdict, verify

REACH, LOCAL, MODE = "exporter.reach", "exporter.local", "exporter.mode"


@dataclass(frozen=True, slots=True)
class Fetched:
    text: str


@dataclass(frozen=True, slots=True)
class FetchFailed:
    reason: str


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the node itself lists, to check the exporter's rows against."""

    host_names: tuple[str, ...]
    known: frozenset[str]
    pci_buses: dict[str, str] = field(default_factory=dict)
    sources: tuple[str, ...] = ()  # which sources answered, for the line


@dataclass(frozen=True, slots=True)
class ExporterFacts:
    target: Target | NotFound
    fetched: Fetched | FetchFailed | None = None


# --- judging (pure)


def judge_reach(facts: ExporterFacts, discover: bool, parsed: ParseResult | None) -> Line:
    target = facts.target
    if isinstance(target, NotFound):
        return fail(
            REACH,
            f"no dcgm-exporter to scrape: {target.detail}",
            "deploy the GPU Operator's dcgm-exporter on this node (nvidia.com/gpu.deploy."
            "dcgm-exporter=true), or set GPUATTR_DCGM_EXPORTER_NAMESPACE/_DAEMONSET to your "
            "install's, or give GPUATTR_DCGM_URL",
            reason=target.reason,
        )
    where = target.url + (f" (pod {target.pod})" if target.pod else "")
    if isinstance(facts.fetched, FetchFailed) or facts.fetched is None:
        why = facts.fetched.reason if facts.fetched is not None else "not asked"
        fix = (
            "check the exporter pod is Running and Ready and its metrics port is reachable from "
            "the agent's pod (NetworkPolicy)"
            if discover
            else "point GPUATTR_DCGM_URL at this node's exporter (its pod IP, or a Service with "
            "internalTrafficPolicy: Local), or set GPUATTR_DCGM_DISCOVER=true"
        )
        return fail(REACH, f"dcgm-exporter at {where} does not answer: {why}", fix, url=target.url)
    if parsed is None or not parsed.samples:
        return fail(
            REACH,
            f"dcgm-exporter at {where} answers, but with no GPU row",
            "check the exporter's log (DCGM not reachable? no GPU visible to its container?) "
            "and that the URL is its /metrics",
            url=target.url,
        )
    return ok(
        REACH,
        f"dcgm-exporter at {where}: {len(parsed.samples)} devices",
        url=target.url,
        devices=len(parsed.samples),
    )


def judge_local(verdict: Verdict, node: NodeFacts) -> Line:
    uuids = sorted({s.uuid for s in verdict.accepted})
    if not verdict.refused:
        said = f"every GPU it reports is this node's ({len(uuids)}: checked against "
        return ok(LOCAL, said + f"{', '.join(node.sources)})", uuids=uuids)
    foreign = sorted({s.uuid for s in verdict.refused})
    facts = {"cause": verdict.cause, "foreign_uuids": foreign, "sources": list(node.sources)}
    if verdict.cause == "unverifiable":
        return fail(
            LOCAL,
            f"cannot prove the exporter is this node's: {verdict.reason}",
            "the worker refuses every scrape it cannot check: let the agent read the node's "
            "devices (kubelet GetAllocatableResources, ResourceSlices, NVML or "
            "GPUATTR_INVENTORY_FILE)",
            **facts,
        )
    return fail(
        LOCAL,
        f"not this node's exporter: {verdict.reason}",
        "scrape this node's own exporter: GPUATTR_DCGM_DISCOVER=true (its pod on this node), "
        "or a URL that cannot reach another node's (pod IP; a Service needs "
        "internalTrafficPolicy: Local — the GPU Operator's is Cluster by default)",
        **facts,
    )


def judge_mode(parsed: ParseResult) -> Line:
    """What the scrape's labels mean for attribution: informational."""
    samples = parsed.samples
    claims = [c for s in samples for c in s.exporter_claims]
    labelled = sum(bool(s.exporter_claims) for s in samples)
    with_uid = sum(bool(c.pod_uid) for c in claims)
    per_pod = sum(s.usage is not None and bool(s.usage.pods) for s in samples)
    dra = sum(bool(c.dra_claim) for c in claims)
    mig = sum(s.mig_instance_id is not None for s in samples)
    facts = {
        "devices": len(samples),
        "pod_labelled": labelled,
        "pod_uid_filled": with_uid,
        "per_pod_rows": per_pod,
        "dra_labelled": dra,
        "mig_instances": mig,
    }
    parts = []
    if labelled:
        uid = f"pod_uid on {with_uid} of {len(claims)}" if with_uid else "pod_uid empty"
        parts.append(f"pod labels on {labelled} of {len(samples)} devices ({uid})")
    else:
        parts.append("no pod labels (gpuattr attributes from the kubelet's PodResources itself)")
    if per_pod:
        parts.append(f"per-pod virtual-GPU rows on {per_pod} devices: per-pod readings are used")
    if dra:
        parts.append(f"DRA labels on {dra} rows")
    if mig:
        parts.append(f"{mig} MIG instances (GPU_UTIL is not measured per instance)")
    said = "; ".join(parts)
    reasons = {r.reason for r in parsed.rejected}
    if any(s.usage is not None and s.usage.unread for s in samples):
        return warn(
            MODE,
            f"{said}; per-pod rows read 0 while the GPU works",
            "the exporter maps no process to a pod: run it with hostPID: true and its pod "
            "informer (--kubernetes-enable-pod-uid), or per-pod readings stay unknown",
            **facts,
        )
    if NO_POD_UID in reasons:
        return warn(
            MODE,
            f"{said}; per-pod rows without pod_uid are not credited",
            "run the exporter with --kubernetes-enable-pod-uid so its per-pod rows can be "
            "credited to their pods",
            **facts,
        )
    return ok(MODE, said, **facts)


def node_facts(
    node: str,
    host_label: str,
    inventory: Inventory | None,
    kubelet_facts: kubelet.KubeletFacts,
    slices: Sequence[ResourceSliceRecord],
    now_ms: int,
) -> NodeFacts:
    """The node's own devices, combined as the worker combines them."""
    inv = inventory or EMPTY_INVENTORY
    allocatable = kubelet.allocatable_devices(kubelet_facts.allocatable)
    held = kubelet.held_devices(kubelet_facts.listed)
    dra = device_map(slices)
    index = None
    if kubelet_facts.listed is not None:
        snapshot = PodResourcesSnapshot(node, now_ms, tuple(sorted(held)), allocatable)
        index, _ = apply_podresources(None, {}, snapshot, inv, dra)
    known = known_gpus(inv, index, placed_keys(dra, inv) if dra else frozenset())
    sources = []
    if inventory is not None:
        sources.append("inventory")
    if allocatable:
        sources.append("kubelet allocatable")
    if held:
        sources.append("kubelet held devices")
    if dra:
        sources.append("ResourceSlices")
    names = tuple(n for n in (node, host_label) if n)
    return NodeFacts(names, known, dict(inv.pci_buses), tuple(sources))


def judge(
    settings: DoctorSettings,
    facts: ExporterFacts,
    node: NodeFacts | None,
    now_ms: int,
) -> list[Line]:
    parsed = None
    if isinstance(facts.fetched, Fetched):
        parsed = parse_exposition(
            facts.fetched.text,
            node=settings.node or "",
            ts_ms=now_ms,
            per_pod=settings.dcgm.per_pod_rows,
        )
    reach = judge_reach(facts, settings.dcgm.discover, parsed)
    if reach.status == "fail" or parsed is None:
        because = "no exporter answer to read"
        return [reach, skipped(LOCAL, because), skipped(MODE, because)]
    if node is None or not settings.node:
        local = fail(
            LOCAL,
            "no node name: which node's exporter this should be is unknown",
            "set NODE_NAME (the DaemonSet sets it from spec.nodeName) or pass --node",
        )
    else:
        target = facts.target
        assert isinstance(target, Target)
        scrape = DcgmScrape(settings.node, now_ms, parsed.samples, target.url, target.pod)
        local = judge_local(verify(scrape, node.known, node.host_names, node.pci_buses), node)
    return [reach, local, judge_mode(parsed)]


# --- asking (I/O)


async def _fetch(url: str, timeout_s: float) -> Fetched | FetchFailed:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp,
        ):
            if resp.status != 200:
                return FetchFailed(f"HTTP {resp.status} {resp.reason or ''}".rstrip())
            body = await resp.read()
    except TimeoutError:
        return FetchFailed(f"no complete answer within {timeout_s:g}s")
    except aiohttp.ClientError as exc:
        return FetchFailed(f"{type(exc).__name__}: {exc}")
    return Fetched(body.decode("utf-8", errors="replace"))


async def _from_api(
    settings: DoctorSettings, now_ms: int
) -> tuple[Target | NotFound | None, str, list[ResourceSliceRecord]]:
    """Through the API server, as the agent's watchers see it: the exporter pod (when
    discovering), the node's ``kubernetes.io/hostname`` label and its ResourceSlices. What
    cannot be read is left out (``api.*`` lines say why)."""
    dcgm, node = settings.dcgm, settings.node or ""
    target: Target | NotFound | None = None
    host_label, slices = "", list[ResourceSliceRecord]()
    try:
        api = await make_api_client(settings.kube)
    except Exception as exc:  # no client configuration: the api.server line says it
        return (NotFound("no-api", f"the API server cannot be asked: {exc}"), "", [])
    try:
        core = client.CoreV1Api(api)
        timeout = settings.timeout_s
        if dcgm.discover:
            locator = ExporterLocator(
                dcgm.pod_selector,
                namespace=dcgm.exporter_namespace,
                daemonset=dcgm.exporter_daemonset,
                scheme=dcgm.scheme,
                path=dcgm.path,
            )
            try:
                pods = await core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={node}",
                    label_selector=dcgm.pod_selector,
                    _request_timeout=timeout,
                )
                locator.relisted(
                    exporter_pod(p, port_name=dcgm.port_name, default_port=dcgm.port)
                    for p in pods.items
                )
                target = locator.target()
            except (ApiException, aiohttp.ClientError, OSError, TimeoutError) as exc:
                target = NotFound("no-api", f"listing the exporter pods failed: {exc}")
        try:
            nodes = await core.list_node(
                field_selector=f"metadata.name={node}", _request_timeout=timeout
            )
            for item in nodes.items:
                host_label = (item.metadata.labels or {}).get(LABEL_HOSTNAME, "")
        except (ApiException, aiohttp.ClientError, OSError, TimeoutError):
            pass  # the Hostname check then knows the node's name only
        if settings.kube.dra:
            custom = client.CustomObjectsApi(api)
            try:
                listing = await custom.list_cluster_custom_object(
                    "resource.k8s.io",
                    "v1",
                    "resourceslices",
                    field_selector=f"spec.nodeName={node}",
                    _request_timeout=timeout,
                )
                for obj in listing.get("items") or []:
                    record = slice_record(obj, node=node, ts_ms=now_ms)
                    if record is not None:
                        slices.append(record)
            except (ApiException, aiohttp.ClientError, OSError, TimeoutError):
                pass  # not served, or not allowed: api.dra says which
    finally:
        await api.close()
    return target, host_label, slices


def _inventory(settings: DoctorSettings, now_ms: int) -> Inventory | None:
    try:
        record = read_inventory(settings.node or "", now_ms, settings.inventory.file)
    except InventoryError:
        return None
    return inventory_of(record) if record is not None else None


async def check(settings: DoctorSettings) -> list[Line]:
    now_ms = time.time_ns() // 1_000_000
    host_label, slices = "", list[ResourceSliceRecord]()
    target: Target | NotFound | None = None
    if settings.kube.enabled and settings.node:
        target, host_label, slices = await _from_api(settings, now_ms)
    if not settings.dcgm.discover:
        target = Target(settings.dcgm.url, "")
    elif target is None:
        target = NotFound(
            "no-api",
            "GPUATTR_DCGM_DISCOVER finds the exporter through the API server: it needs "
            "GPUATTR_KUBE_ENABLED=true and the node's name",
        )
    fetched = None
    if isinstance(target, Target):
        fetched = await _fetch(target.url, min(settings.dcgm.timeout_s, settings.timeout_s))
    facts = ExporterFacts(target, fetched)
    node = None
    if settings.node:
        node = node_facts(
            settings.node,
            host_label,
            _inventory(settings, now_ms),
            await kubelet.ask(settings),
            slices,
            now_ms,
        )
    return judge(settings, facts, node, now_ms)
