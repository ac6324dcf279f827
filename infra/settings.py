"""Typed settings, one group per concern, one env prefix (``GPUATTR_``), passed explicitly.

Examples: ``GPUATTR_KAFKA_BOOTSTRAP=broker:9092``, ``GPUATTR_KUBELET_SOCKET_PATH=...``,
``GPUATTR_DCGM_URL=http://localhost:9400/metrics``. Secrets are ``SecretStr`` and never logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from contract.topics import TopicRole
from infra.endpoints import endpoint

DEFAULT_KUBELET_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
MICROK8S_KUBELET_SOCKET = Path(
    "/var/snap/microk8s/common/var/lib/kubelet/pod-resources/kubelet.sock"
)


#: what stands in for a secret in examples and manifests: refused wherever a secret is read, so a
#: forgotten placeholder stops a component at start instead of signing or logging in with it
PLACEHOLDER_SECRETS = frozenset(
    {"change-me", "changeme", "change_me", "replace-me", "replaceme", "secret", "password", "todo"}
)
#: a webhook signing key shorter than this is refused (HMAC-SHA256 keys: 32 random bytes advised)
MIN_SIGNING_KEY_CHARS = 16


def is_placeholder(value: SecretStr) -> bool:
    text = value.get_secret_value().strip()
    return text.lower() in PLACEHOLDER_SECRETS or (text.startswith("<") and text.endswith(">"))


def check_signing_key(setting: str, key: SecretStr) -> None:
    """A signing key is real: a placeholder or short key is refused at start (naming the
    setting, never its value)."""
    if is_placeholder(key) or len(key.get_secret_value()) < MIN_SIGNING_KEY_CHARS:
        raise ValueError(
            f"{setting} is a placeholder or shorter than {MIN_SIGNING_KEY_CHARS} characters: "
            "set a random key (e.g. `openssl rand -hex 32`)"
        )


class KafkaSettings(BaseSettings):
    """Where Kafka is and how to talk to it. No bootstrap → the embedded local broker."""

    model_config = SettingsConfigDict(
        env_prefix="GPUATTR_KAFKA_",
        frozen=True,
        hide_input_in_errors=True,  # secrets inside
    )

    bootstrap: str | None = None
    topic_prefix: str = "gpuattr."
    partitions: int = Field(default=8, ge=1)
    replication: int = Field(default=1, ge=1)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaSettings:
        """SASL without a user or password fails at connect time, far from the cause: refuse it
        here, naming the settings (never their values)."""
        if self.security_protocol.startswith("SASL"):
            missing = [
                f"GPUATTR_KAFKA_{name.upper()}"
                for name, value in (
                    ("sasl_username", self.sasl_username),
                    ("sasl_password", self.sasl_password),
                )
                if not value
            ]
            if missing:
                raise ValueError(f"{self.security_protocol} needs {' and '.join(missing)}")
        if self.sasl_password is not None and is_placeholder(self.sasl_password):
            raise ValueError("GPUATTR_KAFKA_SASL_PASSWORD is a placeholder: set the real password")
        return self

    def topic(self, role: TopicRole) -> str:
        return f"{self.topic_prefix}{role}"


class KubeletSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUATTR_KUBELET_", frozen=True)

    socket_path: Path = DEFAULT_KUBELET_SOCKET
    poll_interval_s: float = Field(default=1.0, gt=0)
    snapshot_interval_s: float = Field(default=60.0, gt=0)
    rpc_timeout_s: float = Field(default=5.0, gt=0)
    #: the agent's own pod, ``<namespace>/<name>`` (the DaemonSet sets it from the downward
    #: API): a kubelet that lists it has its pods, so its answers can be believed (see
    #: agents/podresources/readiness.py); empty: judged without it
    own_pod: str = Field(default="", pattern=r"^$|^[a-z0-9.-]+/[a-z0-9.-]+$")
    #: how long a kubelet's answers are held while it is not ready (a plugin that does not
    #: come back, a node without pods) before they are taken as they are
    ready_timeout_s: float = Field(default=120.0, gt=0)


class DcgmSettings(BaseSettings):
    """Which dcgm-exporter the agent scrapes: its own node's, found through the pod watch
    (``discover``: pods on this node matching ``pod_selector`` in ``exporter_namespace`` and
    controlled by DaemonSet ``exporter_daemonset``, scraped by pod IP on the container port
    named ``port_name``, else ``port``), or the ``url`` given when discovery is off."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_DCGM_", frozen=True)

    url: str = "http://localhost:9400/metrics"
    discover: bool = False
    pod_selector: str = "app in (nvidia-dcgm-exporter,nvidia-dcgm-exporter-dra)"
    #: the exporter's namespace and DaemonSet, as the GPU Operator names them (a standalone
    #: dcgm-exporter Helm install names its own): a labelled pod elsewhere is never scraped
    exporter_namespace: str = Field(default="gpu-operator", min_length=1)
    exporter_daemonset: str = Field(default="nvidia-dcgm-exporter", min_length=1)
    port_name: str = "metrics"
    port: int = Field(default=9400, gt=0, lt=65536)
    scheme: Literal["http", "https"] = "http"
    path: str = "/metrics"
    scrape_interval_s: float = Field(default=5.0, gt=0)
    timeout_s: float = Field(default=4.0, gt=0)
    #: the first scrape of a run waits at most this long for the node's pod list and
    #: PodResources snapshot to be published, so no event names a holder without its identity
    first_sample_wait_s: float = Field(default=30.0, ge=0)
    #: how the pod-labelled rows of the per-process fields are read: ``auto`` (per-pod readings
    #: when the exporter prints the device row beside them: its virtual-GPU mode), ``on`` or
    #: ``off`` (copies of a device-wide value, as older exporters print them)
    per_pod_rows: Literal["auto", "on", "off"] = "auto"


class AgentStatusSettings(BaseSettings):
    """How often the agent publishes its ``agent.status`` (besides at every change of a source):
    the node's heartbeat. Keep it well under the worker's ``GPUATTR_SPINE_STALE_AFTER_S``."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_AGENT_", frozen=True)

    status_interval_s: float = Field(default=15.0, gt=0)


class AgentProcessSettings(BaseSettings):
    """Per-pod GPU usage read by the agent itself (off by default): NVML's processes of each
    device, each placed in its pod by ``<proc_root>/<pid>/cgroup``, attached to the exporter's
    samples that carry none. Needs the host's PID namespace (``hostPID``), with which
    ``proc_root`` (``/proc``) lists the host's processes:
    ``deploy/kustomize/overlays/nvml-processes``."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_AGENT_", frozen=True)

    nvml_processes: bool = False
    proc_root: Path = Path("/proc")


class ObserveSettings(BaseSettings):
    """Where the agent and the sink serve /metrics, /healthz and /readyz (port 0: disabled)."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_OBSERVE_", frozen=True)

    host: str = "0.0.0.0"
    agent_port: int = 9101
    sink_port: int = 9102
    cluster_port: int = 9103


class KubeSettings(BaseSettings):
    """How the agent reaches the API server: explicit URL, in-cluster, or a kubeconfig."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_KUBE_", frozen=True)

    enabled: bool = True
    api_url: str | None = None
    kubeconfig: Path | None = None
    context: str | None = None
    watch_timeout_s: int = Field(default=300, gt=0)
    max_backoff_s: float = Field(default=30.0, gt=0)
    #: also watch the node's ResourceSlices and the ResourceClaims allocated on it (DRA); on an
    #: API server that does not serve resource.k8s.io/v1 these watchers stop after one warning
    dra: bool = True
    #: the GPU Operator's namespace: the agent publishes the operand pods it runs on this node
    #: (``k8s.operand-pods``); empty: not watched. It must be the ClusterPolicy's
    #: ``status.namespace`` (OpenShift: ``nvidia-gpu-operator``): the worker judges no plane
    #: from another namespace's pods
    operator_namespace: str = "gpu-operator"


class ClusterSettings(BaseSettings):
    """The cluster role (``gpuattr cluster``): one leader among its replicas (a
    ``coordination.k8s.io`` Lease) reads what no node agent can — Node deletions, the GPU
    Operator's ClusterPolicies and DRA DeviceTaintRules, pending pods and Kueue's queued
    Workloads, cluster-wide — and gives every input
    partition its clock (``clock.tick`` every ``tick_interval_s``)."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_CLUSTER_", frozen=True)

    tick_interval_s: float = Field(default=15.0, gt=0)
    #: while the API server does not serve ``clusterpolicies.nvidia.com`` (no GPU Operator),
    #: how often the ClusterPolicy list is tried again
    policy_crd_retry_s: float = Field(default=60.0, gt=0)
    #: while the API server does not serve ``devicetaintrules.resource.k8s.io/v1alpha3`` (that
    #: API version not enabled), how often the list is tried again
    taint_rule_retry_s: float = Field(default=60.0, gt=0)
    #: while the API server serves neither ``v1beta2`` nor ``v1beta1`` of ``kueue.x-k8s.io``
    #: (Kueue not installed), how often its lists are tried again
    kueue_retry_s: float = Field(default=60.0, gt=0)
    leader_election: bool = True
    lease_name: str = "gpuattr-cluster"
    lease_namespace: str = "gpuattr"
    #: who this replica is in the Lease (default: the pod's hostname and a random suffix)
    identity: str | None = None
    #: whole seconds, as a Lease keeps them
    lease_duration_s: int = Field(default=15, ge=3)
    renew_deadline_s: int = Field(default=10, ge=2)
    retry_period_s: int = Field(default=2, ge=1)

    @model_validator(mode="after")
    def _lease_timing(self) -> ClusterSettings:
        if not self.lease_duration_s > self.renew_deadline_s > 1.2 * self.retry_period_s:
            raise ValueError(
                "GPUATTR_CLUSTER_LEASE_DURATION_S > GPUATTR_CLUSTER_RENEW_DEADLINE_S > "
                "1.2 x GPUATTR_CLUSTER_RETRY_PERIOD_S is required"
            )
        return self


class ClusterKeySettings(BaseSettings):
    """The key the cluster role signs its records with and the workers check them by
    (:mod:`contract.signature`): the cluster role's and every worker's, the same. Unset: the
    cluster role signs nothing and a worker honours unsigned ticks and policies (it says so
    at start); a placeholder or short key is refused."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_CLUSTER_", frozen=True)

    signing_key: SecretStr | None = None

    @model_validator(mode="after")
    def _real(self) -> ClusterKeySettings:
        if self.signing_key is not None and self.signing_key.get_secret_value():
            check_signing_key("GPUATTR_CLUSTER_SIGNING_KEY", self.signing_key)
        return self

    def key(self) -> bytes | None:
        secret = self.signing_key.get_secret_value() if self.signing_key is not None else ""
        return secret.encode() if secret else None


class InventorySettings(BaseSettings):
    """Where the agent reads the node's device inventory when NVML is not available."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_INVENTORY_", frozen=True)

    file: Path | None = None
    interval_s: float = Field(default=300.0, gt=0)


class AlertSettings(BaseSettings):
    """Alert thresholds and windows (event time), handed to the worker's alert decisions as they
    are (:func:`streams.core.alerts.alerts.step`). Idle overrides per pod by annotation."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_ALERTS_", frozen=True)

    idle_threshold_pct: float = Field(default=5.0, ge=0, le=100)
    idle_hysteresis_pct: float = Field(default=2.0, ge=0)
    idle_window_s: float = Field(default=1800.0, gt=0)
    cooldown_s: float = Field(default=3600.0, ge=0)
    orphan_fb_mib: float = Field(default=1024.0, ge=0)
    orphan_window_s: float = Field(default=300.0, gt=0)
    #: memory-hog: one tenant's own processes hold at least this share of a shared device's
    #: memory while other pods hold slots of it, for the window (event time)
    memory_hog_share: float = Field(default=0.5, gt=0, le=1)
    memory_hog_window_s: float = Field(default=120.0, gt=0)
    #: an XID alert resolves after this long without a new XID on the device
    xid_quiet_s: float = Field(default=900.0, gt=0)
    #: a node's stack-broken alert fires only once the same plane has stayed broken, with a GPU
    #: held, this long (a routine operand restart heals within it); 0 fires at once
    stack_grace_s: float = Field(default=60.0, ge=0)
    #: a fired stack-broken alert ends for lack of holders only once no pod has held a GPU on
    #: the node this long (one break across back-to-back batch Jobs pages once); 0 ends at once
    stack_holddown_s: float = Field(default=600.0, ge=0)
    #: low-efficiency: a held device busy (GPU_UTIL) at or above ``low_eff_busy_pct`` while its
    #: effective activity (SM active, else GR engine active) stays under ``low_eff_threshold_pct``
    #: for ``low_eff_window_s``; it ends when effective rises past threshold + hysteresis or busy
    #: falls under busy - hysteresis. Busy must stay above the idle band, so the two alerts
    #: never describe the same episode.
    low_eff_busy_pct: float = Field(default=50.0, gt=0, le=100)
    low_eff_threshold_pct: float = Field(default=15.0, ge=0, le=100)
    low_eff_hysteresis_pct: float = Field(default=5.0, ge=0)
    low_eff_window_s: float = Field(default=1800.0, gt=0)
    #: thermal: GPU or memory temperature at or over its threshold, or thermal throttling over
    #: ``thermal_throttle_pct`` of the time, for ``thermal_window_s``; resolves once every
    #: figure is back under its threshold (temperatures by ``thermal_hysteresis_c``)
    thermal_gpu_temp_c: float = Field(default=85.0, gt=0)
    thermal_memory_temp_c: float = Field(default=95.0, gt=0)
    thermal_throttle_pct: float = Field(default=10.0, gt=0, le=100)
    thermal_hysteresis_c: float = Field(default=3.0, ge=0)
    thermal_window_s: float = Field(default=300.0, gt=0)
    #: PCIe replays rising at or over this rate (per minute, between two scrapes) fire
    #: ``pcie-replays``; DCGM's own PCIe health watch uses 8 per minute
    pcie_replays_per_min: float = Field(default=8.0, gt=0)
    #: a memory-fault or pcie-replays alert resolves after this long without a new rise
    health_quiet_s: float = Field(default=900.0, gt=0)
    #: an idle, low-efficiency or thermal window never spans a gap without readings longer than
    #: this: the event that shows one ends the episode (resolved if it had fired) and the next
    #: reading starts a new one. Heartbeats show a gap (``GPUATTR_SPINE_HEARTBEAT_S``), so it is
    #: a few of them: the default is three, the spine's default ``stale_after_s`` (keep it at
    #: most that: a node reported stale then ends its windows)
    reading_gap_s: float = Field(default=180.0, gt=0)
    #: demand-while-idle: a pod of a pool has waited this long while a GPU of the same pool
    #: has been allocated and measured idle this long (event time)
    demand_window_s: float = Field(default=900.0, gt=0)

    @model_validator(mode="after")
    def _busy_above_idle(self) -> AlertSettings:
        if self.low_eff_busy_pct - self.low_eff_hysteresis_pct < (
            self.idle_threshold_pct + self.idle_hysteresis_pct
        ):
            raise ValueError(
                "GPUATTR_ALERTS_LOW_EFF_BUSY_PCT - GPUATTR_ALERTS_LOW_EFF_HYSTERESIS_PCT must "
                "be at least GPUATTR_ALERTS_IDLE_THRESHOLD_PCT + "
                "GPUATTR_ALERTS_IDLE_HYSTERESIS_PCT: a low-efficiency episode is never an idle one"
            )
        return self


class SpineSettings(BaseSettings):
    """The allocation spine's clock (event time): every device of a node is reported at least
    every heartbeat; a node silent for ``stale_after_s`` is stale, for ``node_ttl_s`` gone."""

    model_config = SettingsConfigDict(env_prefix="GPUATTR_SPINE_", frozen=True)

    heartbeat_s: float = Field(default=60.0, gt=0)
    stale_after_s: float = Field(default=180.0, gt=0)
    node_ttl_s: float = Field(default=600.0, gt=0)
    #: a tick or record further ahead of its partition's accepted event time than this is
    #: refused (dead-lettered) until another source confirms the jump; keep it under
    #: ``stale_after_s`` less 15 s, so a clock skewed within it makes no talking node stale
    max_clock_jump_s: float = Field(default=120.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> SpineSettings:
        if not self.heartbeat_s <= self.stale_after_s < self.node_ttl_s:
            raise ValueError(
                "GPUATTR_SPINE_HEARTBEAT_S <= GPUATTR_SPINE_STALE_AFTER_S < "
                "GPUATTR_SPINE_NODE_TTL_S is required"
            )
        return self


class SinkSettings(BaseSettings):
    """Alert delivery. URLs and signing keys are secrets: never logged, never in events."""

    model_config = SettingsConfigDict(
        env_prefix="GPUATTR_SINK_",
        frozen=True,
        hide_input_in_errors=True,  # secrets inside
    )

    group_id: str = "gpuattr-sink"
    slack_webhook_url: SecretStr | None = None
    webhook_url: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    timeout_s: float = Field(default=10.0, gt=0)
    max_attempts: int = Field(default=8, ge=1)
    base_delay_s: float = Field(default=0.5, gt=0)
    max_delay_s: float = Field(default=60.0, gt=0)
    rate_per_s: float = Field(default=1.0, gt=0)
    burst: int = Field(default=5, ge=1)
    #: alerts taken from Kafka per batch; the sink keeps polling (partitions paused) while it
    #: delivers them, so a slow or failing destination never gets it evicted from its group
    batch_max: int = Field(default=50, ge=1)
    max_poll_interval_s: float = Field(default=300.0, gt=0)
    #: a sink that stops heart-beating is out of the group after this; its partitions then
    #: move to the others (and a member joining or leaving is noticed within one heartbeat)
    session_timeout_s: float = Field(default=10.0, ge=6.0)  # the broker's minimum is 6 s
    heartbeat_interval_s: float = Field(default=3.0, gt=0)

    @model_validator(mode="after")
    def _signing_key_real(self) -> SinkSettings:
        """A webhook is always signed, with a real key: an empty, placeholder or short key is
        refused at start (naming the setting, never its value)."""
        key = self.webhook_secret
        if key is not None and key.get_secret_value():
            check_signing_key("GPUATTR_SINK_WEBHOOK_SECRET", key)
        elif self.webhook_url is not None and self.webhook_url.get_secret_value():
            raise ValueError("GPUATTR_SINK_WEBHOOK_URL needs GPUATTR_SINK_WEBHOOK_SECRET")
        return self

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> SinkSettings:
        if self.heartbeat_interval_s * 3 > self.session_timeout_s:
            raise ValueError(
                "GPUATTR_SINK_HEARTBEAT_INTERVAL_S must be at most a third of "
                "GPUATTR_SINK_SESSION_TIMEOUT_S"
            )
        return self


#: a query-API bearer token shorter than this is refused (32 random bytes advised)
MIN_API_TOKEN_CHARS = 16


class ApiSettings(BaseSettings):
    """Who may read the worker's query API (``/api/v1/*``) and what its clients send.

    The API answers a caller whose bearer token is ``token``, or, with ``kube_auth``, a
    Kubernetes token that the API server's TokenReview authenticates and whose user a
    SubjectAccessReview allows ``get`` of ``queryapi.gpuattr.io`` (the ``gpuattr-reader``
    ClusterRole); each decision is kept ``decision_ttl_s``. Nothing
    configured: every listing is refused. /metrics, /healthz and /readyz need no token.
    Clients (``gpuattr top``, the demo, a worker gathering from its peers) send ``token``, else
    the contents of ``token_file`` (read at each request: a projected ServiceAccount token is
    rotated)."""

    model_config = SettingsConfigDict(
        env_prefix="GPUATTR_API_",
        frozen=True,
        hide_input_in_errors=True,  # secrets inside
    )

    token: SecretStr | None = None
    token_file: Path | None = None
    kube_auth: bool = False
    decision_ttl_s: float = Field(default=10.0, ge=0)

    @field_validator("token")
    @classmethod
    def _token_real(cls, token: SecretStr | None) -> SecretStr | None:
        """A placeholder or short token is refused at start (naming the setting, never its
        value); an empty one is no token."""
        if token is None or not token.get_secret_value():
            return None
        if is_placeholder(token) or len(token.get_secret_value()) < MIN_API_TOKEN_CHARS:
            raise ValueError(
                "GPUATTR_API_TOKEN is a placeholder or shorter than "
                f"{MIN_API_TOKEN_CHARS} characters: set a random token "
                "(e.g. `openssl rand -hex 32`)"
            )
        return token


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUATTR_WORKER_", frozen=True)

    app_id: str = "gpuattr-worker"
    data_dir: Path = Path("./.gpuattr/worker")
    web_enabled: bool = True
    web_port: int = 6066
    web_host: str = "127.0.0.1"
    #: how other workers reach this one's API (a pod IP); defaults to web_host
    advertised_host: str | None = None
    #: the only workers this one sends query-API requests to (gathering listings, forwarding a
    #: node's request to its owner): ``http://host:port`` entries, comma-separated, and/or a DNS
    #: name (a headless Service) whose addresses, at this worker's web port, are the workers.
    #: An address another group member advertises is called only if it is one of these: nothing
    #: a Kafka client writes into the group's metadata makes a worker call a host of its choice.
    peers: Annotated[tuple[str, ...], NoDecode] = ()
    peer_service: str | None = None
    #: Faust's own web views (/router, /table, /graph, statistics): off unless asked for; they
    #: serve table contents and the group's topology without authentication. Only with them
    #: does the worker run Faust's full monitor, whose figures they show (~20 µs per consumed
    #: record: streams/worker/monitor.py)
    faust_views: bool = False
    loglevel: str = "warn"
    #: a worker that stops heart-beating (SIGKILL, node loss) is out of the group after this;
    #: its partitions then move to the others
    session_timeout_s: float = Field(default=10.0, ge=6.0)  # the broker's minimum is 6 s
    heartbeat_interval_s: float = Field(default=3.0, gt=0)
    #: how often the worker commits what it has processed (Faust's default); it also commits
    #: a partition's progress as the partition is handed over (streams/worker/transport.py), so
    #: its next owner starts where this one stopped, not up to this long before
    commit_interval_s: float = Field(default=2.8, gt=0)
    #: the producer's batches per partition (outputs and changelogs) and how long it waits to
    #: fill them: with Faust's 5 ms and 16 KiB, every few milliseconds a produce request went
    #: out per partition with a record or two in it (a worker at saturation spent a fifth of its
    #: time writing to sockets); 50 ms raised one worker's rate by half (bench.run)
    producer_batch_bytes: int = Field(default=262_144, ge=16_384)
    producer_linger_s: float = Field(default=0.05, ge=0)
    #: how the worker's produced batches (outputs and changelogs) are compressed; a consumer
    #: decompresses whatever a batch says (Kafka 2.1+ clients read zstd; aiokafka with
    #: cramjam). Attribution events are ~2.5 KB of JSON that repeat field names and holders:
    #: on the bench fleet the attribution topic took 8.7x fewer bytes on the broker in zstd
    #: (~7 events a batch), at no worker CPU per sample that alternating runs could tell apart
    producer_compression: Literal["none", "gzip", "lz4", "zstd", "snappy"] = "zstd"
    #: the outbox (streams/worker/outbox.py): the worker's outputs and changelog records go to
    #: the producer as whole per-partition batches once this many records or bytes of values are
    #: queued, or this long after the first one (and before every offset commit); it holds at
    #: most twice either before the worker waits. The linger sets how many records share a
    #: batch: a drain makes one batch per topic partition it holds records for (up to ~100
    #: here), and aiokafka's cost is per batch; at 10 ms a saturated worker's batches held a
    #: record or two, and 100 ms cut its CPU per sample by ~5 % (five alternating pairs,
    #: bench.run). Outputs wait up to this long more before they are sent
    #: the largest record (key and value) the worker hands to the producer, and the producer's
    #: max request size: at most the output topics' ``max.message.bytes`` (the broker's default
    #: is 1,048,588). A larger output is not sent but dead-lettered as a small
    #: ``output.refused`` record (streams/worker/outbox.py)
    max_record_bytes: int = Field(default=1_000_000, ge=65_536)
    outbox_records: int = Field(default=2048, ge=1)
    outbox_bytes: int = Field(default=1 << 20, ge=1)
    outbox_linger_s: float = Field(default=0.1, ge=0)
    #: what the worker reads ahead of its processing. Faust's defaults (4,096 events buffered per
    #: stream, 1 MiB fetched per partition) let a worker catching up on a backlog hold tens of
    #: MiB of input it has not reached, and the allocator keeps that high-water mark as RSS: on
    #: 10,000 devices, 64 events and 128 KiB held the same rate at ~25 MiB less
    #: (bench.run). A record larger than the fetch size still comes whole (the broker
    #: returns the first batch of a partition whatever its size)
    stream_buffer: int = Field(default=64, ge=1)
    fetch_bytes_per_partition: int = Field(default=131_072, ge=16_384)
    #: a pool's demand record whose answer did not move (nobody new waits or stops waiting, its
    #: allocation does not appear or run out, nor — while anybody waits — its idle GPUs; only
    #: figures and the idle list changed) is sent at most once per this much event time; 0: on
    #: every change. On a large pool the record is tens of KB and its figures move on nearly
    #: every node's supply change (streams/core/demand/demand.py, bench.run)
    demand_supply_every_s: float = Field(default=10.0, ge=0)
    #: the cyclic garbage collector: allocations between two young-generation collections
    #: (Python's default is 700). The worker's state is immutable records freed by reference
    #: counting, but every collection walks the young objects of each message; a collection
    #: every 10,000 costs a twentieth of the core's time less (bench.run). Objects
    #: alive when the worker starts (imports, the app) are frozen out of collections altogether
    gc_threshold: int = Field(default=10_000, ge=700)
    #: how often the worker hands the C allocator's free pages back to the system
    #: (``malloc_trim``, glibc only: streams/worker/memtrim.py); 0: never. Freed fetch and
    #: produce buffers otherwise stay resident at their high-water mark: on 10,000 devices at
    #: saturation one trim gave back ~18 MiB of 193 (bench.run)
    malloc_trim_every_s: float = Field(default=1.0, ge=0)
    #: the most arenas the C allocator may make for the worker's threads (glibc's
    #: ``M_ARENA_MAX``: streams/worker/memtrim.py); 0: glibc's own (8 per core). Each thread's
    #: arena keeps its freed blocks apart; with the trims every second, a worker at 10,000
    #: devices held ~12 MiB less than with 10 s and glibc's arenas (bench.run)
    malloc_arenas: int = Field(default=1, ge=0)

    @field_validator("peers", mode="before")
    @classmethod
    def _peer_list(cls, value: object) -> object:
        peers = value.split(",") if isinstance(value, str) else value
        if isinstance(peers, list | tuple):
            peers = tuple(str(p).strip().rstrip("/") for p in peers if str(p).strip())
            if bad := [p for p in peers if endpoint(p) is None]:
                raise ValueError(f"GPUATTR_WORKER_PEERS: not http://host:port: {', '.join(bad)}")
        return peers

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> WorkerSettings:
        if self.heartbeat_interval_s * 3 > self.session_timeout_s:
            raise ValueError(
                "GPUATTR_WORKER_HEARTBEAT_INTERVAL_S must be at most a third of "
                "GPUATTR_WORKER_SESSION_TIMEOUT_S"
            )
        return self


class LocalKafkaSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUATTR_LOCAL_KAFKA_", frozen=True)

    data_dir: Path = Path("./.gpuattr/kafka")
    port: int = 9092
    controller_port: int = 9093
