"""``LocalKube``: a real kube-apiserver on a real etcd, on free loopback ports, for tests and dev.

What runs: Debian's ``etcd`` (one member, data in the work directory) and ``kube-apiserver``
built by :mod:`gpuattr.localkube.binaries`, with RBAC and the Node authorizer on
(``--authorization-mode=Node,RBAC``, the ``NodeRestriction`` admission plugin), a static admin
token (group ``system:masters``), a service-account signing key (so the TokenRequest API issues
real ServiceAccount tokens) and a self-signed serving certificate the API server writes itself.
No controller manager, scheduler or kubelet runs: whoever uses it creates objects directly and
drives pod status through the status subresource, as a kubelet would.

Ready means ``/readyz`` answers 200 to the admin token. Stop is SIGTERM, then SIGKILL, for both
processes; the API server can be stopped and started again on the same port (an API-server
restart), and etcd can be compacted (:meth:`LocalKube.compact`) to make old resourceVersions
expire for real.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import json
import logging
import secrets
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gpuattr.localkube.binaries import LocalKubeError, require_tool, resolve_binaries
from gpuattr.localkube.process import HOST, Proc, free_port, spawn, wait_until

log = logging.getLogger("gpuattr.localkube")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class LocalKube:
    """``await start()`` (or ``async with``); ``kubeconfig`` names the admin's kubeconfig."""

    def __init__(
        self,
        workdir: Path,
        cache_dir: Path,
        *,
        watch_cache: bool = True,
        ready_timeout_s: float = 120.0,
        users: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        self.watch_cache = watch_cache  # off: every watch is served by etcd itself
        self.cache_dir = cache_dir
        self.ready_timeout_s = ready_timeout_s
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.admin_token = secrets.token_hex(24)
        #: more static-token users (name → groups), e.g. a kubelet's ``system:node:<node>``
        self.tokens = {name: secrets.token_hex(24) for name in users or {}}
        self._groups = dict(users or {})
        self.bin_dir: Path | None = None
        self._etcd: Proc | None = None
        self._apiserver: Proc | None = None

    # --- where things are
    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{HOST}:{self.etcd_port}"

    @property
    def ca_file(self) -> Path:
        """The API server's self-signed serving certificate (written by it at first start)."""
        return self.workdir / "certs" / "apiserver.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def kubectl(self) -> Path:
        if self.bin_dir is None:
            raise LocalKubeError("LocalKube is not started")
        return self.bin_dir / "kubectl"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    # --- life cycle
    async def start(self) -> None:
        self.bin_dir = await asyncio.to_thread(resolve_binaries, self.cache_dir)
        await asyncio.to_thread(self._prepare)
        atexit.register(self.stop_sync)
        try:
            self._etcd = self._spawn("etcd", self._etcd_cmd())
            await wait_until(self._etcd, self._etcd_ready, self.ready_timeout_s)
            await self.start_apiserver()
        except BaseException:
            self.stop_sync()
            raise
        self.write_kubeconfig(self.kubeconfig, token=self.admin_token, user="admin")

    async def start_apiserver(self) -> None:
        """Start (or start again, on the same port) the API server; return once /readyz is 200."""
        if self._apiserver is not None:
            raise LocalKubeError(f"kube-apiserver already running on {self.url}")
        self._apiserver = self._spawn("kube-apiserver", self._apiserver_cmd())
        await wait_until(self._apiserver, self._apiserver_ready, self.ready_timeout_s)
        log.info("kube-apiserver ready on %s", self.url)

    def pids(self) -> list[int]:
        """The running processes (etcd, the API server)."""
        return [p.pid for p in (self._etcd, self._apiserver) if p is not None and p.running()]

    @property
    def apiserver_running(self) -> bool:
        return self._apiserver is not None

    def stop_apiserver(self, timeout_s: float = 15.0, *, kill: bool = False) -> None:
        """Stop the API server (``kill``: SIGKILL, a crash; else SIGTERM, then SIGKILL after
        ``timeout_s``: with watches open its graceful shutdown can hang past 30 s)."""
        proc, self._apiserver = self._apiserver, None
        if proc is not None:
            proc.stop(timeout_s, kill=kill)

    def stop_sync(self, timeout_s: float = 15.0) -> None:
        """Stop the API server, then etcd. Idempotent; nothing is left running."""
        atexit.unregister(self.stop_sync)
        self.stop_apiserver(timeout_s)
        etcd, self._etcd = self._etcd, None
        if etcd is not None:
            etcd.stop(timeout_s)

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)

    async def __aenter__(self) -> LocalKube:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- etcd's own API (its JSON gateway): compaction makes old resourceVersions expire
    def etcd_revision(self) -> int:
        head = self._etcd_call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        return int(head["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd at its current revision: every older resourceVersion is gone for real."""
        revision = self.etcd_revision()
        self._etcd_call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.etcd_url + path, data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            out: dict[str, Any] = json.loads(resp.read())
        return out

    # --- the API as the admin, blocking (for start-up and dev tools; tests have their client)
    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout_s: float = 10.0,
    ) -> Any:
        """One JSON request as the admin: the decoded answer; :class:`LocalKubeError` on an
        HTTP error status, naming it."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.admin_token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s, context=self.ssl_context()) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as err:
            raise LocalKubeError(f"{method} {path}: HTTP {err.code}: {err.read()[:500]!r}") from err

    # --- kubeconfigs
    def write_kubeconfig(self, path: Path, *, token: str, user: str) -> Path:
        """A kubeconfig for ``token`` (the admin's, or a ServiceAccount's from TokenRequest)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
            "current-context": user,
        }
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        path.chmod(0o600)
        return path

    # --- internals
    def _prepare(self) -> None:
        require_tool("etcd", "the local API server stores its objects in Debian's etcd-server")
        openssl = require_tool("openssl", "it makes the service-account signing key")
        (self.workdir / "certs").mkdir(parents=True, exist_ok=True)
        key = self.workdir / "sa.key"
        if not key.exists():
            subprocess.run(
                [openssl, "genrsa", "-out", str(key), "2048"], capture_output=True, check=True
            )
        tokens = self.workdir / "tokens.csv"
        lines = [f'{self.admin_token},admin,admin,"system:masters"']
        for user, token in self.tokens.items():
            lines.append(f'{token},{user},{user},"{",".join(self._groups[user])}"')
        tokens.write_text("\n".join(lines) + "\n")
        tokens.chmod(0o600)

    def _etcd_cmd(self) -> list[str]:
        peer = f"http://{HOST}:{self.etcd_peer_port}"
        return [
            require_tool("etcd", "Debian's etcd-server"),
            "--name=local",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}",
            "--log-level=warn",
            "--logger=zap",
        ]

    def _apiserver_cmd(self) -> list[str]:
        assert self.bin_dir is not None
        key = self.workdir / "sa.key"
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={self.port}",
            f"--cert-dir={self.workdir / 'certs'}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={key}",
            f"--service-account-signing-key-file={key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--profiling=false",
            f"--watch-cache={str(self.watch_cache).lower()}",
            # consumable capacity (KEP-5075, alpha in 1.35): without it the server drops
            # allowMultipleAllocations, shareID and consumedCapacity, which the dra scenario uses;
            # device health in the pod status (KEP-4680, alpha in 1.35): without it the server
            # drops the kubelet's containerStatuses[].allocatedResourcesStatus on every write;
            # device taints (KEP-5055, alpha in 1.35): without it the ResourceSlice strategy
            # drops spec.devices[].taints (a driver's health taint) on every write; with
            # DRADeviceTaintRules the bootstrap roles let the scheduler and the eviction
            # controller read DeviceTaintRules (theirs wait for that informer)
            "--feature-gates=DRAConsumableCapacity=true,ResourceHealthStatus=true,"
            "DRADeviceTaints=true,DRADeviceTaintRules=true",
            # DeviceTaintRule (KEP-5055): served only when its alpha API version is enabled
            "--runtime-config=resource.k8s.io/v1alpha3=true",
            "--v=1",
        ]

    def _spawn(self, name: str, cmd: list[str]) -> Proc:
        return spawn(name, cmd, self.workdir / f"{name}.log")

    def _etcd_ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _apiserver_ready(self) -> bool:
        if not self.ca_file.exists():
            return False
        req = urllib.request.Request(
            self.url + "/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=2, context=self.ssl_context()) as resp:
                return bool(resp.status == 200)
        except (OSError, ValueError, ssl.SSLError):
            return False


async def run_forever(workdir: Path, cache_dir: Path) -> int:
    """``gpuattr kube``: run etcd + kube-apiserver until SIGTERM or SIGINT, then stop both."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    kube = LocalKube(workdir, cache_dir)
    try:
        starting = asyncio.create_task(kube.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not starting.done():
            starting.cancel()
            await asyncio.wait({starting})
            return 0
        starting.result()
        print(
            f"kube-apiserver ready at {kube.url}\n"
            f"  export KUBECONFIG={kube.kubeconfig}\n"
            f"  kubectl: {kube.kubectl()}",
            flush=True,
        )
        await stop.wait()
        return 0
    except LocalKubeError as err:
        print(f"gpuattr kube: {err}", file=sys.stderr)
        return 1
    finally:
        await kube.stop()
        for sig in signals:
            loop.remove_signal_handler(sig)
