"""``LocalCluster``: a real control plane and one real node, for tests and ``gpuattr kube --node``.

The control plane is :class:`gpuattr.localkube.server.LocalKube` (etcd + kube-apiserver) plus
kube-scheduler and kube-controller-manager (the node lifecycle controller takes the not-ready
taint off, the garbage collector, namespace, ServiceAccount, ReplicaSet, Job and ResourceClaim
controllers do their work), each as its own bootstrap identity (``system:kube-scheduler``,
``system:kube-controller-manager`` with per-controller ServiceAccount credentials). The node is
:class:`gpuattr.localkube.node.LocalNode`. The DRA example driver's DeviceClass
(``gpu.example.com``) is created before the node starts. Pods created through the API are placed
by the real scheduler; nothing is written on the host outside the work directory.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import signal
import sys
from pathlib import Path

from gpuattr.localkube.binaries import LocalKubeError, NodeBinaries, resolve_all
from gpuattr.localkube.devices import Gpu, default_layout
from gpuattr.localkube.node import DRA_DRIVER, LocalNode
from gpuattr.localkube.process import HOST, Proc, spawn, wait_until
from gpuattr.localkube.server import LocalKube

log = logging.getLogger("gpuattr.localkube")
SCHEDULER = "system:kube-scheduler"
CONTROLLER_MANAGER = "system:kube-controller-manager"
#: the scheduler's and controller manager's gates: DRADeviceTaints and DRADeviceTaintRules run the
#: device-taint eviction controller (a NoExecute taint on a held DRA device evicts its holders)
FEATURE_GATES = (
    "--feature-gates=DRAConsumableCapacity=true,DRADeviceTaints=true,DRADeviceTaintRules=true"
)


class LocalCluster:
    """``await start()`` (or ``async with``): control plane, controllers, one node."""

    def __init__(
        self,
        workdir: Path,
        cache_dir: Path,
        *,
        node: str = "gpu-node-a",
        layout: tuple[Gpu, ...] | None = None,
        dra_devices: int = 2,
        ready_timeout_s: float = 180.0,
    ) -> None:
        self.workdir = workdir.resolve()
        self.cache_dir = cache_dir
        self.node_name = node
        self.layout = layout if layout is not None else default_layout(node)
        self.dra_devices = dra_devices
        self.ready_timeout_s = ready_timeout_s
        users = {
            f"system:node:{node}": ("system:nodes",),
            SCHEDULER: (),
            CONTROLLER_MANAGER: (),
        }
        self.kube = LocalKube(self.workdir / "control-plane", cache_dir, users=users)
        self.bins: NodeBinaries | None = None
        self._node: LocalNode | None = None
        self._scheduler: Proc | None = None
        self._controllers: Proc | None = None

    @property
    def node(self) -> LocalNode:
        if self._node is None:
            raise LocalKubeError("the cluster is not started")
        return self._node

    async def start(self) -> None:
        self.bins = await asyncio.to_thread(resolve_all, self.cache_dir)
        atexit.register(self.stop_sync)
        try:
            await self.kube.start()
            self._scheduler = self._spawn("kube-scheduler", self._scheduler_cmd())
            self._controllers = self._spawn("kube-controller-manager", self._controllers_cmd())
            await asyncio.to_thread(self._device_class)
            self._node = LocalNode(
                self.kube,
                self.workdir / "node",
                self.bins,
                name=self.node_name,
                layout=self.layout,
                dra_devices=self.dra_devices,
                ready_timeout_s=self.ready_timeout_s,
            )
            await self._node.start()
            await wait_until(
                self._controllers, self._default_service_account, 60, "the default ServiceAccount"
            )
        except BaseException:
            self.stop_sync()
            raise

    def stop_sync(self) -> None:
        """The node first, then the controllers, then the API server and etcd. Idempotent."""
        atexit.unregister(self.stop_sync)
        node, self._node = self._node, None
        if node is not None:
            node.stop_sync()
        for attr in ("_controllers", "_scheduler"):
            proc: Proc | None = getattr(self, attr)
            setattr(self, attr, None)
            if proc is not None:
                proc.stop(15.0)
        self.kube.stop_sync()

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def pids(self) -> list[int]:
        """Every running process of the cluster."""
        procs = [p.pid for p in (self._scheduler, self._controllers) if p and p.running()]
        return self.kube.pids() + procs + (self._node.pids() if self._node else [])

    # --- internals
    def _spawn(self, name: str, cmd: list[str]) -> Proc:
        return spawn(name, cmd, self.workdir / f"{name}.log")

    def _kubeconfig(self, user: str) -> Path:
        path = self.workdir / f"{user.replace(':', '-')}.kubeconfig"
        if not path.exists():
            self.kube.write_kubeconfig(path, token=self.kube.tokens[user], user=user)
        return path

    def _scheduler_cmd(self) -> list[str]:
        assert self.bins is not None
        return [
            str(self.bins.node / "kube-scheduler"),
            f"--kubeconfig={self._kubeconfig(SCHEDULER)}",
            f"--bind-address={HOST}",
            "--secure-port=0",
            "--leader-elect=false",
            FEATURE_GATES,
            "--v=1",
        ]

    def _controllers_cmd(self) -> list[str]:
        assert self.bins is not None
        work = self.kube.workdir
        return [
            str(self.bins.node / "kube-controller-manager"),
            f"--kubeconfig={self._kubeconfig(CONTROLLER_MANAGER)}",
            f"--bind-address={HOST}",
            "--secure-port=0",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={work / 'sa.key'}",
            f"--root-ca-file={self.kube.ca_file}",
            f"--flex-volume-plugin-dir={self.workdir / 'flex-volumes'}",
            FEATURE_GATES,
            "--v=1",
        ]

    def _device_class(self) -> None:
        self.kube.api(
            "POST",
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DRA_DRIVER},
                "spec": {
                    "selectors": [{"cel": {"expression": f"device.driver == '{DRA_DRIVER}'"}}]
                },
            },
        )

    def _default_service_account(self) -> bool:
        try:
            self.kube.api("GET", "/api/v1/namespaces/default/serviceaccounts/default")
        except (LocalKubeError, OSError):
            return False
        return True


async def run_forever(workdir: Path, cache_dir: Path) -> int:
    """``gpuattr kube --node``: run the cluster until SIGTERM or SIGINT, then stop it all."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    cluster = LocalCluster(workdir, cache_dir)
    try:
        starting = asyncio.create_task(cluster.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not starting.done():
            starting.cancel()
            await asyncio.wait({starting})
            return 0
        starting.result()
        node = cluster.node
        inventory = workdir / "inventory.json"
        await asyncio.to_thread(node.write_inventory, inventory)
        print(
            f"kube-apiserver ready at {cluster.kube.url}, node {node.name} Ready\n"
            f"  export KUBECONFIG={cluster.kube.kubeconfig}\n"
            f"  kubectl: {cluster.kube.kubectl()}\n"
            f"  PodResources socket: {node.podresources_socket}\n"
            f"  fake runtime control socket: {node.control_socket}\n"
            f"  agent: GPUATTR_KUBELET_SOCKET_PATH={node.podresources_socket} "
            f"GPUATTR_KUBE_KUBECONFIG={cluster.kube.kubeconfig} "
            f"GPUATTR_INVENTORY_FILE={inventory} gpuattr agent --node {node.name}",
            flush=True,
        )
        await stop.wait()
        return 0
    except LocalKubeError as err:
        print(f"gpuattr kube: {err}", file=sys.stderr)
        return 1
    finally:
        await cluster.stop()
        for sig in signals:
            loop.remove_signal_handler(sig)
