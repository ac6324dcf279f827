"""``LocalNode``: a real kubelet on the fake CRI runtime, with our device plugin and the upstream
DRA example driver, in a private mount namespace so nothing on the host changes.

What runs, all as child processes (binaries from :mod:`gpuattr.localkube.binaries`):

* a *namespace holder*: ``unshare --mount --propagation private`` running a shell that mounts,
  in its own mount namespace only, overlays on ``/var/lib`` and ``/var/log`` (their upper
  directories in the work directory), the device-plugin directory (a work directory bound on
  ``/var/lib/kubelet/device-plugins``: the kubelet's registration socket has a fixed path),
  regular files over the ``/proc/sys`` entries the kubelet would set (``vm.overcommit_memory``,
  ``kernel.panic``, ...) and ``false`` over any iptables binary; then it sleeps. The kubelet,
  the device plugin and the DRA driver enter that namespace with ``nsenter``;
* ``fakecri``: the fake CRI runtime on a unix socket, with a control socket to make a
  container exit or a sandbox die (:meth:`exit_container`, :meth:`kill_sandbox`);
* the kubelet (``--root-dir`` in the work directory, so its PodResources socket is
  ``<workdir>/kubelet/pod-resources/kubelet.sock``), as ``system:node:<node>``;
* ``deviceplugin``: the :mod:`gpuattr.localkube.devices` layout's IDs, each Healthy until
  :meth:`set_device_health` says otherwise (the plugin reads its health file every 100 ms and
  sends the kubelet the new list, as a plugin whose GPU fails does);
* the DRA example driver's kubelet plugin (its ResourceSlice, CDI files in the work directory).

The kubelet and the device plugin can be stopped and started again (:meth:`restart_kubelet`,
:meth:`restart_device_plugin`), as on a real node; the runtime keeps its containers meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpuattr.localkube.binaries import LocalKubeError, NodeBinaries, require_tool
from gpuattr.localkube.devices import Gpu, plugin_config
from gpuattr.localkube.process import HOST, Proc, free_port, spawn, wait_until

if TYPE_CHECKING:
    from gpuattr.localkube.server import LocalKube

log = logging.getLogger("gpuattr.localkube")

DRA_DRIVER = "gpu.example.com"
#: sizeof(sockaddr_un.sun_path) on Linux: a socket path must be shorter
UNIX_PATH_MAX = 108
#: what the kubelet writes under /proc/sys unless told not to (pkg/kubelet/cm setupKernelTunables)
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
IPTABLES = (
    *tuple(
        f"{name}{suffix}"
        for name in ("iptables", "ip6tables")
        for suffix in ("", "-legacy", "-nft", "-save", "-restore", "-legacy-save", "-nft-save")
    ),
    "nft",
)
#: GPU feature discovery's node-wide labels for the default layout (hints: the IDs decide)
NODE_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
    "nvidia.com/gpu.replicas": "4",
    "nvidia.com/mig.strategy": "mixed",
}
#: KEP-4680 (alpha in 1.35, off by default): the kubelet writes each allocated device's health
#: into ``status.containerStatuses[].allocatedResourcesStatus`` (the API server needs it too)
KUBELET_FEATURE_GATES = {"ResourceHealthStatus": True}
DeviceHealth = Literal["Healthy", "Unhealthy"]


def node_ip() -> str:
    """A non-loopback address of this host (the kubelet refuses a loopback node IP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a source address
            addr = str(s.getsockname()[0])
        except OSError:
            addr = ""
    if addr and not addr.startswith("127."):
        return addr
    for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
        candidate = str(info[4][0])
        if not candidate.startswith("127."):
            return candidate
    raise LocalKubeError("no non-loopback IPv4 address for the kubelet's --node-ip")


def namespace_script(workdir: Path) -> str:
    """The namespace holder's shell script: private mounts only, then ``ready``, then sleep."""
    ns = workdir / "ns"
    q = shlex.quote
    lines = ["set -eu"]
    for target, name in (("/var/lib", "varlib"), ("/var/log", "varlog")):
        upper, work = ns / f"{name}.upper", ns / f"{name}.work"
        lines.append(
            f"mount -t overlay overlay -o lowerdir={target},upperdir={q(str(upper))},"
            f"workdir={q(str(work))} {target}"
        )
    lines += [
        "mkdir -p /var/lib/kubelet/device-plugins",
        f"mount --bind {q(str(workdir / 'device-plugins'))} /var/lib/kubelet/device-plugins",
    ]
    for entry in KUBELET_SYSCTLS:
        copy = ns / "sysctl" / entry.replace("/", ".")
        lines.append(f"cat /proc/sys/{entry} > {q(str(copy))}")
        lines.append(f"mount --bind {q(str(copy))} /proc/sys/{entry}")
    names = " ".join(IPTABLES)
    lines.append(
        f"for b in {names}; do p=$(command -v $b || true); "
        '[ -n "$p" ] && mount --bind "$(command -v false)" "$p"; done; true'
    )
    lines += [f"touch {q(str(ns / 'ready'))}", "exec sleep infinity"]
    return "\n".join(lines) + "\n"


class LocalNode:
    """One node of a :class:`gpuattr.localkube.cluster.LocalCluster`."""

    def __init__(
        self,
        kube: LocalKube,
        workdir: Path,
        bins: NodeBinaries,
        *,
        name: str,
        layout: tuple[Gpu, ...],
        dra_devices: int = 2,
        ready_timeout_s: float = 120.0,
    ) -> None:
        self.kube = kube
        self.workdir = workdir.resolve()
        longest = self.root / "plugins_registry" / f"{DRA_DRIVER}-reg.sock"
        if len(str(longest).encode()) >= UNIX_PATH_MAX:
            raise LocalKubeError(
                f"work directory {self.workdir} is too long: the DRA driver's socket {longest} "
                f"would exceed the {UNIX_PATH_MAX - 1}-byte limit of a unix socket path"
            )
        self.bins = bins
        self.name = name
        self.layout = layout
        self.dra_devices = dra_devices
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.healthz_port = free_port()
        self._holder: Proc | None = None
        self._cri: Proc | None = None
        self._kubelet: Proc | None = None
        self._plugin: Proc | None = None
        self._dra: Proc | None = None
        self._dra_hardware: tuple[tuple[str, str], ...] = ()
        self._unhealthy: frozenset[str] = frozenset()
        self.kubelet_starts = 0

    # --- where things are
    @property
    def root(self) -> Path:
        return self.workdir / "kubelet"

    @property
    def podresources_socket(self) -> Path:
        return self.root / "pod-resources" / "kubelet.sock"

    @property
    def cri_socket(self) -> Path:
        return self.workdir / "cri.sock"

    @property
    def control_socket(self) -> Path:
        return self.workdir / "cri-control.sock"

    @property
    def health_file(self) -> Path:
        """The device plugin's health file: device ID → ``Unhealthy`` (a device not named is
        Healthy)."""
        return self.workdir / "device-health.json"

    @property
    def user(self) -> str:
        return f"system:node:{self.name}"

    # --- life cycle
    async def start(self) -> None:
        await asyncio.to_thread(self._prepare)
        self._holder = spawn(
            "mount-namespace",
            [
                require_tool("unshare", "util-linux"),
                "--mount",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
                str(self.workdir / "ns" / "setup.sh"),
            ],
            self.workdir / "mount-namespace.log",
        )
        ready_file = self.workdir / "ns" / "ready"
        await wait_until(self._holder, ready_file.exists, 30, "the private mount namespace")
        self._cri = spawn(
            "fakecri",
            [str(self.bins.own / "fakecri"), str(self.cri_socket), str(self.control_socket)],
            self.workdir / "fakecri.log",
        )
        await wait_until(self._cri, self.control_socket.exists, 30, "the fake CRI runtime")
        await self.start_kubelet()
        await self.start_device_plugin()
        if self.dra_devices:
            self._dra = self._in_namespace("dra-driver", self._dra_cmd())
        await self.settled()
        self._dra_hardware = tuple(self.dra_gpus())

    async def settled(self) -> None:
        """Wait until the node is Ready and untainted, its status lists every device of the
        plugin's layout as allocatable, and the DRA driver's slice is published."""
        plugins = tuple(p for p in (self._plugin, self._dra) if p is not None)
        await wait_until(
            self._kubelet_proc(), self._node_ready, self.ready_timeout_s, "the node", also=plugins
        )

    async def start_kubelet(self) -> None:
        if self._kubelet is not None:
            raise LocalKubeError("the kubelet already runs")
        self._kubelet = self._in_namespace("kubelet", self._kubelet_cmd())
        self.kubelet_starts += 1
        await wait_until(
            self._kubelet, self.podresources_socket.exists, self.ready_timeout_s, "PodResources"
        )

    def stop_kubelet(self, *, kill: bool = False) -> None:
        """Stop the kubelet (SIGTERM as systemd would; ``kill``: SIGKILL). Its pods' containers
        keep running in the fake runtime. The old PodResources socket is left on disk, as a
        killed kubelet leaves it; the next kubelet makes it anew."""
        proc, self._kubelet = self._kubelet, None
        if proc is not None:
            proc.stop(15.0, kill=kill)

    async def restart_kubelet(self, *, kill: bool = False) -> None:
        self.stop_kubelet(kill=kill)
        # the next start waits for a new socket, not for the one the old kubelet left
        self.podresources_socket.unlink(missing_ok=True)
        await self.start_kubelet()

    async def start_device_plugin(self) -> None:
        path = self.workdir / "device-plugin.json"
        config = {**plugin_config(self.layout), "health_file": str(self.health_file)}
        path.write_text(json.dumps(config, indent=1))
        self._plugin = self._in_namespace(
            "device-plugin", [str(self.bins.own / "deviceplugin"), str(path)]
        )

    async def restart_device_plugin(self, layout: tuple[Gpu, ...] | None = None) -> None:
        """Stop the plugin and start it again, with ``layout`` if given (e.g. replicas now),
        as a plugin pod restarted with a new ConfigMap re-registers."""
        if self._plugin is not None:
            self._plugin.stop(10.0)
            self._plugin = None
        if layout is not None:
            self.layout = layout
        await self.start_device_plugin()

    def set_device_health(self, device_id: str, health: DeviceHealth) -> None:
        """The device plugin reports ``device_id`` (an ID it advertises: ``GPU-<uuid>``,
        ``GPU-<uuid>::<n>``, ``MIG-<uuid>``) with ``health`` from its next read of the health
        file (within 100 ms), on every ListAndWatch stream; kept across plugin restarts. The
        file is replaced atomically (the plugin never reads half of it)."""
        known = {i for gpu in self.layout for _, i in gpu.ids()}
        if device_id not in known:
            raise LocalKubeError(f"{device_id}: not a device of node {self.name}'s plugin")
        if health == "Unhealthy":
            self._unhealthy |= {device_id}
        else:
            self._unhealthy -= {device_id}
        tmp = self.health_file.with_name(self.health_file.name + ".tmp")
        tmp.write_text(json.dumps(dict.fromkeys(sorted(self._unhealthy), "Unhealthy")))
        os.replace(tmp, self.health_file)

    def stop_sync(self) -> None:
        """Stop everything, the namespace last. Idempotent; nothing is left running."""
        for attr in ("_plugin", "_dra", "_kubelet", "_cri", "_holder"):
            proc: Proc | None = getattr(self, attr)
            setattr(self, attr, None)
            if proc is not None:
                proc.stop(15.0)

    def pids(self) -> list[int]:
        """The node's running processes (namespace holder, runtime, kubelet, plugins)."""
        procs = (self._holder, self._cri, self._kubelet, self._plugin, self._dra)
        return [p.pid for p in procs if p is not None and p.running()]

    # --- the fake runtime's control socket: what a workload does
    def _control(self, method: str, path: str) -> Any:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect(str(self.control_socket))
            request = f"{method} {path} HTTP/1.0\r\nHost: fakecri\r\nContent-Length: 0\r\n\r\n"
            sock.sendall(request.encode())
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        finally:
            sock.close()
        head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        status = int(head.split()[1])
        if status != 200:
            raise LocalKubeError(f"fakecri {method} {path}: {status} {body.decode().strip()}")
        return json.loads(body) if path.startswith("/containers") else body.decode().strip()

    def exit_container(self, namespace: str, pod: str, container: str, code: int = 0) -> None:
        """The container's process ends with ``code`` (the kubelet sees it on its next sync)."""
        self._control(
            "POST", f"/exit?namespace={namespace}&pod={pod}&container={container}&code={code}"
        )

    def kill_sandbox(self, namespace: str, pod: str) -> None:
        """The pod's sandbox dies: the kubelet makes a new one and starts the pod again."""
        self._control("POST", f"/sandbox-notready?namespace={namespace}&pod={pod}")

    def containers(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self._control("GET", "/containers")
        return out

    # --- internals
    def _kubelet_proc(self) -> Proc:
        if self._kubelet is None:
            raise LocalKubeError("the kubelet is not running")
        return self._kubelet

    def _in_namespace(self, name: str, cmd: list[str]) -> Proc:
        if self._holder is None or not self._holder.running():
            raise LocalKubeError("the node's mount namespace is gone")
        nsenter = require_tool("nsenter", "util-linux")
        enter = [nsenter, f"--mount=/proc/{self._holder.pid}/ns/mnt", "--"]
        return spawn(name, enter + cmd, self.workdir / f"{name}.log")

    def _prepare(self) -> None:
        for sub in ("ns/sysctl", "device-plugins", "kubelet", "pod-logs", "volume-plugins", "cdi"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        for name in ("varlib", "varlog"):
            for kind in ("upper", "work"):
                (self.workdir / "ns" / f"{name}.{kind}").mkdir(exist_ok=True)
        (self.workdir / "ns" / "setup.sh").write_text(namespace_script(self.workdir))
        self.kube.write_kubeconfig(
            self.workdir / "kubelet.kubeconfig", token=self.kube.tokens[self.user], user=self.user
        )
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": HOST,
            "port": self.port,
            "healthzBindAddress": HOST,
            "healthzPort": self.healthz_port,
            "readOnlyPort": 0,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "failSwapOn": False,
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "containerRuntimeEndpoint": f"unix://{self.cri_socket}",
            "imageServiceEndpoint": f"unix://{self.cri_socket}",
            "podLogsDir": str(self.workdir / "pod-logs"),
            "volumePluginDir": str(self.workdir / "volume-plugins"),
            "resolvConf": "",
            # the host's disks and memory are not this node's business: never evict
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "0%",
                "nodefs.inodesFree": "0%",
                "imagefs.available": "0%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "kubeAPIQPS": 50,
            "kubeAPIBurst": 100,
            "featureGates": KUBELET_FEATURE_GATES,
        }
        (self.workdir / "kubelet-config.json").write_text(json.dumps(config, indent=1))

    def _kubelet_cmd(self) -> list[str]:
        labels = ",".join(f"{k}={v}" for k, v in sorted(NODE_LABELS.items()))
        return [
            str(self.bins.node / "kubelet"),
            f"--config={self.workdir / 'kubelet-config.json'}",
            f"--kubeconfig={self.workdir / 'kubelet.kubeconfig'}",
            f"--root-dir={self.root}",
            f"--cert-dir={self.root / 'pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={node_ip()}",
            f"--node-labels={labels}",
            "--v=2",
        ]

    def _dra_cmd(self) -> list[str]:
        return [
            str(self.bins.dra / "dra-example-kubeletplugin"),
            f"--node-name={self.name}",
            f"--cdi-root={self.workdir / 'cdi'}",
            f"--num-devices={self.dra_devices}",
            f"--kubelet-registrar-directory-path={self.root / 'plugins_registry'}",
            f"--kubelet-plugins-directory-path={self.root / 'plugins'}",
            f"--kubeconfig={self.kube.kubeconfig}",
        ]

    def _node_ready(self) -> bool:
        """Ready, untainted, every healthy plugin device allocatable (the kubelet leaves an
        unhealthy one out), the DRA slice published."""
        try:
            node = self.kube.api("GET", f"/api/v1/nodes/{self.name}")
        except (LocalKubeError, OSError):
            return False
        status = node.get("status", {})
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions", [])
        )
        if not ready or node.get("spec", {}).get("taints"):
            return False
        allocatable = status.get("allocatable", {})
        for resource in plugin_config(self.layout)["resources"]:
            healthy = [d for d in resource["devices"] if d["id"] not in self._unhealthy]
            if allocatable.get(resource["name"]) != str(len(healthy)):
                return False
        return not self.dra_devices or bool(self.dra_slices())

    def dra_slices(self) -> list[dict[str, Any]]:
        path = f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={self.name}"
        try:
            items: list[dict[str, Any]] = self.kube.api("GET", path)["items"]
        except (LocalKubeError, OSError):
            return []
        return [s for s in items if s["spec"].get("driver") == DRA_DRIVER]

    def dra_gpus(self) -> list[tuple[str, str]]:
        """(device name, uuid attribute) of each GPU the DRA driver publishes for this node."""
        out = []
        for s in self.dra_slices():
            for dev in s["spec"].get("devices", []):
                uuid = dev.get("attributes", {}).get("uuid", {}).get("string")
                if uuid:
                    out.append((dev["name"], uuid))
        return sorted(out)

    def dra_hardware(self) -> tuple[tuple[str, str], ...]:
        """The DRA driver's GPUs as the node has them — (device name, uuid attribute) as its
        slice listed them once the node had started — whatever the API server lists now: the
        kubelet deletes the node's ResourceSlices when it restarts, until the driver has
        registered and published again (26 to 56 s here), but the GPUs are still there, and NVML
        (so dcgm-exporter) still lists them. :meth:`dra_gpus` is the API server's view."""
        if self.dra_devices and not self._dra_hardware:
            raise LocalKubeError(f"node {self.name} has not started: its DRA GPUs are not known")
        return self._dra_hardware

    def write_inventory(self, path: Path) -> None:
        """What NVML would say on this node (the agent's ``GPUATTR_INVENTORY_FILE``)."""
        from gpuattr.localkube.devices import inventory

        extra = tuple((u, "LATEST-GPU-MODEL") for _, u in self.dra_hardware())
        path.write_text(json.dumps(inventory(self.layout, extra)))

    def healthz(self) -> bool:
        try:
            with socket.create_connection((HOST, self.healthz_port), timeout=2) as s:
                s.sendall(b"GET /healthz HTTP/1.0\r\nHost: kubelet\r\n\r\n")
                return s.recv(64).split()[1] == b"200"
        except (OSError, IndexError):
            return False
