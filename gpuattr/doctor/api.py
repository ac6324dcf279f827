"""The API server's answers to this ServiceAccount, with the role's own client settings
(:func:`infra.kube.make_api_client`): ``api.server``, then one line per thing the role reads.

What each role needs is the shipped RBAC (``deploy/kustomize/base/rbac.yaml`` for the agent,
``cluster.yaml`` for the cluster role), written here as :class:`Need` tables: each resource is
listed once with ``limit=1`` (the verb every watcher starts with) and every other verb is asked
with a SelfSubjectAccessReview (any authenticated user may ask one about itself), so nothing is
written and no watch is held open. :func:`ask` is the I/O; :func:`judge` is pure.

404 on a list is "not served": a CRD not installed or an API version not enabled. Whether that
fails is the :class:`Need`'s to say (the GPU Operator's intent, where at least one of its kinds
must be served; Kueue and DeviceTaintRules are optional: the role retries and says so)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiException

from gpuattr.doctor.lines import Line, fail, ok, skipped, warn
from gpuattr.doctor.settings import DoctorSettings
from infra.kube import make_api_client

log = logging.getLogger(__name__)

SERVER = "api.server"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
#: what the cluster role does while an optional API is not served (its watchers retry)
KUEUE_ABSENT = "Kueue not installed: no queued Workloads in demand; the cluster role retries"
TAINTS_ABSENT = (
    "resource.k8s.io/v1alpha3 not enabled: no DeviceTaintRules are published; "
    "the cluster role retries"
)
DRA_ABSENT = "resource.k8s.io/v1 not served (Kubernetes before 1.34?): no DRA devices are read"


@dataclass(frozen=True, slots=True)
class Resource:
    """One resource a role reads, and how it is listed."""

    group: str
    version: str
    plural: str
    namespace: str = ""
    #: a resource name the grant is limited to (a Lease): then it is never listed, only reviewed
    name: str = ""
    field_selector: str = ""

    @property
    def title(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else self.plural

    def list_path(self) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        where = f"/namespaces/{self.namespace}" if self.namespace else ""
        return f"{base}{where}/{self.plural}"


@dataclass(frozen=True, slots=True)
class Need:
    """One resource and the verbs the role uses on it. ``list`` is asked by listing; the others
    by review. ``optional``: what the role does when it is not served (empty: it must be)."""

    resource: Resource
    verbs: tuple[str, ...] = ("list", "watch")
    optional: str = ""


@dataclass(frozen=True, slots=True)
class Check:
    """One line: the needs it covers and the ClusterRole (or Role) that grants them."""

    name: str
    needs: tuple[Need, ...]
    grantor: str
    #: at least one of the needs must be served (the GPU Operator's kinds); else all of them
    any_served: bool = False


@dataclass(frozen=True, slots=True)
class Answers:
    """What the API server said about one :class:`Need`."""

    list_status: int | None = None  # HTTP status of the list (None: not listed)
    denied: tuple[str, ...] = ()  # verbs a review said no to
    unreviewed: tuple[str, ...] = ()  # verbs whose review could not be made (itself refused)


@dataclass(frozen=True, slots=True)
class ServerFacts:
    #: None: answered; else why not (unreachable, refused the credentials)
    unreachable: str | None = None
    status: int = 0
    version: str = ""
    answers: Mapping[str, Answers] = field(default_factory=dict)  # Need key → answers


def key(need: Need) -> str:
    r = need.resource
    return f"{r.group}/{r.version}/{r.namespace}/{r.plural}/{r.name}"


def checks_for(settings: DoctorSettings) -> tuple[Check, ...]:
    """What the role reads, as its shipped RBAC grants it."""
    core = Resource
    if settings.role == "agent":
        on_node = f"spec.nodeName={settings.node}" if settings.node else ""
        node = f"metadata.name={settings.node}" if settings.node else ""
        out = [
            Check(
                "api.pods", (Need(core("", "v1", "pods", field_selector=on_node)),), "gpuattr-agent"
            ),
            Check(
                "api.nodes", (Need(core("", "v1", "nodes", field_selector=node)),), "gpuattr-agent"
            ),
        ]
        if settings.kube.dra:
            slices = core("resource.k8s.io", "v1", "resourceslices", field_selector=on_node)
            dra = (
                Need(slices, optional=DRA_ABSENT),
                Need(core("resource.k8s.io", "v1", "resourceclaims"), optional=DRA_ABSENT),
            )
            out.append(Check("api.dra", dra, "gpuattr-agent"))
        return tuple(out)
    if settings.role == "cluster":
        lease_ns, lease = settings.cluster.lease_namespace, settings.cluster.lease_name
        nvidia = "nvidia.com"
        cluster_dra = (
            Need(core("resource.k8s.io", "v1", "resourceclaims"), ("list",), DRA_ABSENT),
            Need(core("resource.k8s.io", "v1", "resourceclaimtemplates"), ("list",), DRA_ABSENT),
            Need(core("resource.k8s.io", "v1alpha3", "devicetaintrules"), optional=TAINTS_ABSENT),
        )
        out = [
            Check("api.nodes", (Need(core("", "v1", "nodes")),), "gpuattr-cluster"),
            Check("api.pods", (Need(core("", "v1", "pods")),), "gpuattr-cluster"),
        ]
        if settings.cluster.leader_election:
            lease_needs = (
                Need(core("coordination.k8s.io", "v1", "leases", lease_ns), ("create",)),
                Need(
                    core("coordination.k8s.io", "v1", "leases", lease_ns, lease), ("get", "update")
                ),
            )
            out.append(Check("api.lease", lease_needs, f"Role {lease_ns}/gpuattr-cluster-lease"))
        intent = (
            Need(core(nvidia, "v1", "clusterpolicies")),
            Need(core(nvidia, "v1alpha1", "gpuclusters")),
            Need(core(nvidia, "v1alpha1", "nvidiadrivers"), optional="no NVIDIADriver objects"),
        )
        out.append(Check("api.intent", intent, "gpuattr-cluster", any_served=True))
        # the cluster role reads v1beta2 and falls back to v1beta1: either is enough
        kueue = tuple(
            Need(core("kueue.x-k8s.io", version, p), optional=KUEUE_ABSENT)
            for version in ("v1beta2", "v1beta1")
            for p in ("workloads", "localqueues", "clusterqueues", "resourceflavors")
        )
        out.append(Check("api.kueue", kueue, "gpuattr-cluster"))
        out.append(Check("api.dra", cluster_dra, "gpuattr-cluster"))
        return tuple(out)
    return ()


# --- judging (pure)


def judge_server(facts: ServerFacts, api_url: str) -> Line:
    if facts.unreachable is None:
        return ok(
            SERVER, f"API server answers (Kubernetes {facts.version or '?'})", version=facts.version
        )
    if facts.status == 401:
        return fail(
            SERVER,
            f"the API server refuses these credentials (401): {facts.unreachable}",
            "the ServiceAccount token is missing or expired: check automountServiceAccountToken "
            "on the role's ServiceAccount, or the kubeconfig's user (GPUATTR_KUBE_KUBECONFIG)",
            status=401,
        )
    where = api_url or "in-cluster / kubeconfig"
    return fail(
        SERVER,
        f"the API server ({where}) does not answer: {facts.unreachable}",
        "check GPUATTR_KUBE_API_URL / GPUATTR_KUBE_KUBECONFIG / GPUATTR_KUBE_CONTEXT (outside a "
        "pod), or that the pod reaches the kubernetes Service (NetworkPolicy egress to the API "
        "server)",
        status=facts.status,
    )


def _forbidden(check: Check, need: Need, verbs: Sequence[str]) -> Line:
    r = need.resource
    scope = f" in namespace {r.namespace}" if r.namespace else ""
    named = f" named {r.name}" if r.name else ""
    return fail(
        check.name,
        f"forbidden: this ServiceAccount may not {'/'.join(verbs)} {r.title}{named}{scope}",
        f"grant {', '.join(verbs)} on {r.title}{named} in {check.grantor} as the shipped "
        "deploy/kustomize/base RBAC does, and bind it to the role's ServiceAccount",
        resource=r.title,
        verbs=list(verbs),
    )


def judge_check(check: Check, answers: Mapping[str, Answers]) -> Line:
    """One line from the answers about the check's needs."""
    served: list[str] = []
    absent: list[Need] = []
    for need in check.needs:
        got = answers.get(key(need), Answers())
        if got.list_status == 403:
            return _forbidden(check, need, ("list",))
        if got.list_status == 404:
            absent.append(need)
            continue
        if got.list_status not in (None, 200):
            return fail(
                check.name,
                f"listing {need.resource.title} answered HTTP {got.list_status}",
                "see the API server's log for this request",
                resource=need.resource.title,
                status=got.list_status,
            )
        if got.denied:
            return _forbidden(check, need, got.denied)
        if got.unreviewed:
            return warn(
                check.name,
                f"could not ask whether this ServiceAccount may {'/'.join(got.unreviewed)} "
                f"{need.resource.title} (SelfSubjectAccessReview refused)",
                "the system:basic-user ClusterRole (create selfsubjectaccessreviews) must stay "
                "bound to system:authenticated",
                resource=need.resource.title,
            )
        served.append(need.resource.title)
    missing = [n.resource.title for n in absent]
    facts: dict[str, Any] = {"served": served, "not_served": missing}
    if check.any_served:
        return _judge_any(check, served, absent, facts)
    required = [n for n in absent if not n.optional]
    if required:
        titles = ", ".join(n.resource.title for n in required)
        return fail(
            check.name,
            f"not served: {titles}",
            "the API server does not serve this resource: check the cluster's Kubernetes "
            "version and enabled API groups",
            **facts,
        )
    if absent:
        said = "; ".join(sorted({n.optional for n in absent}))
        line = f"{', '.join(served)} readable; not served: {', '.join(missing)} ({said})"
        if served:
            return ok(check.name, line, **facts)
        return warn(check.name, f"not served: {', '.join(missing)} ({said})", said, **facts)
    verbs = sorted({v for n in check.needs for v in n.verbs})
    return ok(check.name, f"may {'/'.join(verbs)} {', '.join(served)}", **facts)


def _judge_any(check: Check, served: list[str], absent: list[Need], facts: dict[str, Any]) -> Line:
    """The GPU Operator's intent: the ClusterPolicy (device plugin stack) or the GPUCluster
    (DRA stack) must be served; NVIDIADriver comes with newer operators."""
    required = [n for n in check.needs if not n.optional]
    if not any(n.resource.title in served for n in required):
        names = " nor ".join(n.resource.title for n in required)
        return fail(
            check.name,
            f"the GPU Operator's CRDs are not installed: neither {names} is served",
            "install the NVIDIA GPU Operator (helm install gpu-operator nvidia/gpu-operator), or "
            "its CRDs alone; until then the cluster role publishes no operator intent and "
            "every node's plane reads unknown",
            **facts,
        )
    stack = [n.resource.title for n in required if n.resource.title in served]
    extra = f"; not served: {', '.join(n.resource.title for n in absent)}" if absent else ""
    return ok(check.name, f"served and readable: {', '.join(stack)}{extra}", **facts)


def judge(checks: Sequence[Check], facts: ServerFacts, api_url: str = "") -> list[Line]:
    server = judge_server(facts, api_url)
    if server.status == "fail":
        return [server, *(skipped(c.name, "the API server does not answer") for c in checks)]
    return [server, *(judge_check(c, facts.answers) for c in checks)]


# --- asking (I/O)


async def _get(api: Any, path: str, query: list[tuple[str, Any]], timeout_s: float) -> Any:
    return await api.call_api(
        path,
        "GET",
        query_params=query,
        header_params={"Accept": "application/json"},
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _request_timeout=timeout_s,
    )


async def _allowed(api: Any, resource: Resource, verb: str, timeout_s: float) -> bool:
    attributes = {"verb": verb, "group": resource.group, "resource": resource.plural}
    if resource.namespace:
        attributes["namespace"] = resource.namespace
    if resource.name:
        attributes["name"] = resource.name
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    answer = await api.call_api(
        SSAR,
        "POST",
        body=review,
        header_params={"Accept": "application/json", "Content-Type": "application/json"},
        response_types_map={201: "object", 200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _request_timeout=timeout_s,
    )
    return bool((answer.get("status") or {}).get("allowed"))


async def _answers(api: Any, need: Need, timeout_s: float) -> Answers:
    r = need.resource
    status: int | None = None
    if "list" in need.verbs and not r.name:
        query: list[tuple[str, Any]] = [("limit", 1)]
        if r.field_selector:
            query.append(("fieldSelector", r.field_selector))
        try:
            await _get(api, r.list_path(), query, timeout_s)
            status = 200
        except ApiException as exc:
            status = int(exc.status or 0)
        if status != 200:
            return Answers(status)
    denied, unreviewed = [], []
    for verb in need.verbs:
        if verb == "list" and status == 200:
            continue
        try:
            if not await _allowed(api, r, verb, timeout_s):
                denied.append(verb)
        except ApiException:
            unreviewed.append(verb)
    return Answers(status, tuple(denied), tuple(unreviewed))


async def ask(settings: DoctorSettings, checks: Sequence[Check]) -> ServerFacts:
    try:
        api = await make_api_client(settings.kube)
    except Exception as exc:  # no kubeconfig, a broken one, no in-cluster token: said as is
        return ServerFacts(f"no client configuration: {exc}")
    try:
        try:
            version = await _get(api, "/version", [], settings.timeout_s)
        except ApiException as exc:
            return ServerFacts(f"HTTP {exc.status} {exc.reason}", int(exc.status or 0))
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return ServerFacts(f"{type(exc).__name__}: {exc}")
        answers = {
            key(need): await _answers(api, need, settings.timeout_s)
            for check in checks
            for need in check.needs
        }
        return ServerFacts(None, 200, str(version.get("gitVersion", "")), answers)
    finally:
        await api.close()


async def check(settings: DoctorSettings) -> list[Line]:
    if not settings.kube.enabled:
        checks = checks_for(settings)
        because = "GPUATTR_KUBE_ENABLED is false: this role does not read the API server"
        return [skipped(SERVER, because), *(skipped(c.name, because) for c in checks)]
    checks = checks_for(settings)
    return judge(checks, await ask(settings, checks), settings.kube.api_url or "")
