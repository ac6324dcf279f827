"""``gpuattr``: the command line. Each subcommand builds typed settings and calls one runner."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from infra.acls import DEFAULT_PRINCIPALS, ROLES
from infra.settings import (
    AlertSettings,
    ApiSettings,
    ClusterKeySettings,
    ClusterSettings,
    DcgmSettings,
    InventorySettings,
    KafkaSettings,
    KubeletSettings,
    KubeSettings,
    LocalKafkaSettings,
    ObserveSettings,
    SinkSettings,
    SpineSettings,
    WorkerSettings,
)
from sim.scenario import builtin_names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuattr", description=__doc__)
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (env GPUATTR_KAFKA_BOOTSTRAP)")
    p.add_argument(
        "--log-level",
        default=os.environ.get("GPUATTR_LOG_LEVEL"),
        help="default INFO for services, WARNING for the terminal tools (top, report)",
    )
    sub = p.add_subparsers(dest="command", required=True)

    k = sub.add_parser("kafka", help="run the embedded single-node Apache Kafka (KRaft)")
    k.add_argument("--data-dir", type=Path)
    k.add_argument("--port", type=int)

    kb = sub.add_parser(
        "kube", help="run a real kube-apiserver on etcd (built from the Go module proxy once)"
    )
    kb.add_argument("--dir", type=Path, default=Path("./.gpuattr/kube"))
    kb.add_argument(
        "--node",
        action="store_true",
        help="also kube-scheduler, kube-controller-manager and a kubelet on the fake runtime "
        "with a device plugin and the DRA example driver, in a private mount namespace",
    )
    kb.add_argument(
        "--build", action="store_true", help="only build (or find) every binary, node included"
    )

    s = sub.add_parser("sim", help="serve a scenario's kubelet, API-server and exporter doubles")
    s.add_argument("--scenario", default="mixed")
    s.add_argument("--dir", type=Path, default=Path("./.gpuattr/sim"))
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--advertise", help="host name agents use to reach this process")
    s.add_argument("--api-port", type=int, default=6443)
    s.add_argument("--exporter-port-base", type=int, default=9400)
    s.add_argument("--speed", type=float, default=1.0)

    r = sub.add_parser("receiver", help="a webhook endpoint that verifies and prints alerts")
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", type=int, default=8080)

    sub.add_parser("topics", help="create the topics (partitions, retention) on the Kafka cluster")

    acl = sub.add_parser(
        "acls", help="create each role's Kafka ACLs (connect as a principal allowed to)"
    )
    for role, user in DEFAULT_PRINCIPALS.items():
        acl.add_argument(f"--{role}", default=user, help=f"the {role}'s user (default {user})")
    acl.add_argument("--print", action="store_true", help="print the ACLs, create nothing")

    a = sub.add_parser("agent", help="run the node agent for one node")
    a.add_argument(
        "--node", default=os.environ.get("NODE_NAME"), required="NODE_NAME" not in os.environ
    )
    a.add_argument("--kubelet-socket", type=Path)
    a.add_argument("--dcgm-url")

    sub.add_parser(
        "cluster",
        help="the cluster role: node deletions, the GPU Operator's ClusterPolicy and every "
        "partition's clock (one leader, Lease)",
    )
    sub.add_parser("worker", help="run a Faust worker (scale out by running more)")
    sub.add_parser("sink", help="deliver alerts to Slack and webhooks (scale out by running more)")

    t = sub.add_parser("top", help="the cluster's GPUs, refreshed in place (like nvidia-smi)")
    t.add_argument("--url", default=os.environ.get("GPUATTR_API_URL", "http://127.0.0.1:6066"))
    t.add_argument("--node")
    t.add_argument("--namespace")
    t.add_argument("--workload", help="name or Kind/name")
    t.add_argument("--sharing", help="none, time-slicing, mps, mig, mig+time-slicing")
    t.add_argument("--idle", action="store_true", help="only devices in an idle episode")
    t.add_argument("--alerts", action="store_true", help="only devices with an open alert")
    t.add_argument("--sort", default="node", help="node, util, idle, tenants, namespace, model")
    t.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    t.add_argument("--once", action="store_true", help="print once and exit")
    t.add_argument("--json", action="store_true", help="with --once: the rows as JSON")
    t.add_argument(
        "--token-file",
        type=Path,
        help="the query API's bearer token, read from this file "
        "(default: GPUATTR_API_TOKEN, else GPUATTR_API_TOKEN_FILE)",
    )

    rp = sub.add_parser(
        "report", help="GPU-hours held (and GPU-hours waited) per namespace and workload"
    )
    rp.add_argument("--since", required=True, help="how far back: 30m, 2h, 1d, 1h30m")
    rp.add_argument("--csv", help="also write CSV to this file ('-': CSV to stdout only)")
    rp.add_argument(
        "--max-gap",
        type=float,
        default=None,
        help="seconds one event may cover (default: 1.5 x GPUATTR_SPINE_HEARTBEAT_S, 90)",
    )
    rp.add_argument("--idle-threshold", type=float, default=AlertSettings().idle_threshold_pct)
    rp.add_argument("--waited-csv", help="also write the GPU-hours waited as CSV to this file")

    dr = sub.add_parser(
        "doctor",
        help="check a role's install (Kafka, topics, ACLs, clock, kubelet socket, API server, "
        "exporter): one line each with its fix; exit 1 on any failure",
    )
    dr.add_argument(
        "--role",
        choices=ROLES,
        default=os.environ.get("GPUATTR_ROLE"),
        required="GPUATTR_ROLE" not in os.environ,
        help="the role whose settings these are (env GPUATTR_ROLE, set in each shipped pod)",
    )
    dr.add_argument("--node", default=os.environ.get("NODE_NAME"), help="the agent's node")
    dr.add_argument("--kubelet-socket", type=Path)
    dr.add_argument("--dcgm-url")
    dr.add_argument("--timeout", type=float, default=10.0, help="seconds one check may wait")
    dr.add_argument("--json", action="store_true", help="the lines as JSON, for scripts")

    d = sub.add_parser("demo", help="local Kafka + simulated cluster + agents + worker, live")
    d.add_argument(
        "--scenario",
        default="mixed",
        help=f"{', '.join(builtin_names())}, or a .toml path",
    )
    d.add_argument("--duration", type=float, help="seconds, then exit 0 (default: until Ctrl-C)")
    d.add_argument("--json", action="store_true", help="one JSON attribution event per line")
    d.add_argument("--speed", type=float, default=1.0, help="scenario time per wall second")
    d.add_argument("--workdir", type=Path, help="keep logs and data here (default: temp dir)")
    d.add_argument(
        "--secure",
        action="store_true",
        help="Kafka with TLS, SASL/SCRAM and ACLs: one user per role (embedded broker only)",
    )
    return p


def _doctor(args: argparse.Namespace) -> int:
    from gpuattr.doctor.lines import exit_status, render_json, render_text
    from gpuattr.doctor.run import run_doctor
    from gpuattr.doctor.settings import DoctorSettings, refusal

    refused: dict[str, str] = {}

    def read(group: str, make: Callable[[], T], otherwise: T) -> T:
        """The role's settings as the role reads them; a refusal is the group's line."""
        try:
            return make()
        except ValidationError as err:
            refused[group] = "; ".join(filter(None, (refused.get(group), refusal(err))))
            return otherwise

    kubelet = read("kubelet", KubeletSettings, KubeletSettings.model_construct())
    if args.kubelet_socket:
        kubelet = kubelet.model_copy(update={"socket_path": args.kubelet_socket})
    dcgm = read("exporter", DcgmSettings, DcgmSettings.model_construct())
    if args.dcgm_url:
        dcgm = dcgm.model_copy(update={"url": args.dcgm_url})
    # only the roles that read them: another role's refusal is not this one's
    sink = read("secrets", SinkSettings, None) if args.role == "sink" else None
    key = read("secrets", ClusterKeySettings, None) if args.role in ("cluster", "worker") else None
    settings = DoctorSettings(
        role=args.role,
        kafka=read("kafka", lambda: _kafka(args), KafkaSettings.model_construct()),
        kubelet=kubelet,
        dcgm=dcgm,
        kube=read("api", KubeSettings, KubeSettings.model_construct()),
        cluster=read("api", ClusterSettings, ClusterSettings.model_construct()),
        worker_app_id=read("kafka", lambda: WorkerSettings().app_id, "gpuattr-worker"),
        sink_group=sink.group_id if sink else "gpuattr-sink",
        node=args.node if args.role == "agent" else None,
        timeout_s=args.timeout,
        inventory=read("exporter", InventorySettings, InventorySettings.model_construct()),
        signing_key_set=key is not None and key.key() is not None,
        sink_destinations=tuple(
            name
            for name, value in (
                ("Slack", sink and sink.slack_webhook_url),
                ("webhook", sink and sink.webhook_url),
            )
            if value
        ),
        refused=refused,
    )
    lines = asyncio.run(run_doctor(settings))
    if args.json:
        sys.stdout.buffer.write(render_json(args.role, lines) + b"\n")
    else:
        print(render_text(lines, colour=sys.stdout.isatty()))
    return exit_status(lines)


def _kafka(args: argparse.Namespace) -> KafkaSettings:
    kafka = KafkaSettings()
    return kafka.model_copy(update={"bootstrap": args.bootstrap}) if args.bootstrap else kafka


T = TypeVar("T")

#: what ends a long-running command the way Ctrl-C does: a rollout's SIGTERM, a closed terminal
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def until_signalled(main: Coroutine[Any, Any, T]) -> T | None:
    """Run ``main`` until it returns, or until SIGINT, SIGTERM or SIGHUP cancels it; cancelling
    runs every ``async with`` cleanup on the way out (child processes, the embedded broker,
    temporary data). ``None`` when a signal ended it."""

    async def run() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, task.cancel)
        return await main

    try:
        return asyncio.run(run())
    except (KeyboardInterrupt, asyncio.CancelledError):
        return None


def _tune_gc(threshold: int) -> None:
    """What is alive now (modules, the app) is never collected: out of every collection; the
    young generation is collected every ``threshold`` allocations (WorkerSettings.gc_threshold)."""
    gc.collect()
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(threshold, second, third)


def _run_worker(
    kafka: KafkaSettings, worker: WorkerSettings, alerts: AlertSettings, spine: SpineSettings
) -> int:
    from infra.admin import wait_for_coordinator
    from infra.kafka import client_options
    from streams.worker.app import build_app
    from streams.worker.memtrim import libc_arenas
    from streams.worker.transport import Worker

    if worker.malloc_arenas:  # before any thread (the resolver's, the clients') allocates
        libc_arenas(worker.malloc_arenas)
    if kafka.bootstrap and not asyncio.run(
        wait_for_coordinator(kafka.bootstrap, worker.app_id, **client_options(kafka))
    ):
        logging.getLogger(__name__).warning("no coordinator yet for %s; starting", worker.app_id)
    app = build_app(
        kafka, worker, alerts, spine, ApiSettings(), KubeSettings(), ClusterKeySettings()
    )
    _tune_gc(worker.gc_threshold)
    Worker(app, loglevel=worker.loglevel, quiet=True).execute_from_commandline()
    return 0


def _acls(kafka: KafkaSettings, args: argparse.Namespace) -> int:
    """``gpuattr acls``: every role's rules (infra/acls.py) for these topics, app id and sink
    group, printed, and created unless ``--print``."""
    from infra.acls import create_acls, role_acls
    from infra.kafka import client_options

    principals = {role: getattr(args, role) for role in ROLES}
    rules = role_acls(kafka, WorkerSettings().app_id, SinkSettings().group_id, principals)
    for role, acls in rules.items():
        for acl in acls:
            print(
                f"{role:7} User:{acl.user} {acl.operation} {acl.resource} "
                f"{acl.name}{'*' if acl.pattern == 'prefix' else ''}"
            )
    if not args.print:
        assert kafka.bootstrap is not None
        every = [acl for acls in rules.values() for acl in acls]
        asyncio.run(create_acls(kafka.bootstrap, every, **client_options(kafka)))
    return 0


#: terminal tools: their output is the table or the report, not library chatter
QUIET_COMMANDS = ("top", "report", "doctor")


def _default_log_level(command: str) -> str:
    return "WARNING" if command in QUIET_COMMANDS else "INFO"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except ValidationError as err:  # settings refused (secret values are never in the message)
        print(f"gpuattr: settings refused: {err}", file=sys.stderr)
        return 2


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=(args.log_level or _default_log_level(args.command)).upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "doctor":  # a refused setting is one of its lines, not its end
        return _doctor(args)
    kafka = _kafka(args)
    if args.command == "kafka":
        from gpuattr.localkafka import LocalKafkaConfig, run_forever

        local = LocalKafkaSettings()
        config = LocalKafkaConfig(
            data_dir=args.data_dir or local.data_dir,
            port=args.port or local.port,
            controller_port=local.controller_port,
        )
        return asyncio.run(run_forever(config))
    if args.command == "kube":
        from gpuattr.localkafka import default_cache_dir
        from gpuattr.localkube import LocalKubeError, resolve_all
        from gpuattr.localkube import run_forever as run_kube
        from gpuattr.localkube.cluster import run_forever as run_node

        if args.build:
            try:
                for directory in resolve_all(default_cache_dir()):
                    print(directory)
            except LocalKubeError as err:
                print(f"gpuattr kube: {err}", file=sys.stderr)
                return 1
            return 0
        if args.node:
            return asyncio.run(run_node(args.dir, default_cache_dir()))
        return asyncio.run(run_kube(args.dir, default_cache_dir()))
    if args.command == "sim":
        from sim.serve import serve

        return asyncio.run(
            serve(
                args.scenario,
                args.dir,
                host=args.host,
                api_port=args.api_port,
                exporter_port_base=args.exporter_port_base,
                advertise=args.advertise,
                speed=args.speed,
            )
        )
    if args.command == "receiver":
        from sinks.receiver import run

        secret = SinkSettings().webhook_secret
        return run(args.host, args.port, secret.get_secret_value() if secret else None)
    if args.command == "top":
        from gpuattr.top import run as run_top
        from infra.apicreds import auth_headers

        api = ApiSettings()
        if args.token_file is not None:  # the flag wins over the environment
            api = api.model_copy(update={"token": None, "token_file": args.token_file})
        filters = {k: getattr(args, k) for k in ("node", "namespace", "workload", "sharing")}
        filters |= {"idle": args.idle, "alerts": args.alerts}
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(
                run_top(
                    args.url,
                    filters,
                    args.sort,
                    interval_s=args.interval,
                    once=args.once,
                    as_json=args.json,
                    credentials=lambda: auth_headers(api),
                )
            )
        return 0
    if args.command == "acls" and args.print:
        return _acls(kafka, args)
    if kafka.bootstrap is None and args.command in (
        "topics",
        "acls",
        "agent",
        "worker",
        "sink",
        "report",
    ):
        print(
            "gpuattr: no Kafka configured: set GPUATTR_KAFKA_BOOTSTRAP or --bootstrap "
            "(or run `gpuattr kafka` for a local broker)",
            file=sys.stderr,
        )
        return 2
    if args.command == "topics":
        from infra.admin import create_topics
        from infra.kafka import client_options
        from infra.topics import topic_specs

        assert kafka.bootstrap is not None
        specs = topic_specs(kafka, WorkerSettings().app_id)
        asyncio.run(create_topics(kafka.bootstrap, specs, **client_options(kafka)))
        return 0
    if args.command == "acls":
        return _acls(kafka, args)
    if args.command == "report":
        from gpuattr.report_cli import run as run_report

        return asyncio.run(
            run_report(
                kafka,
                args.since,
                csv_path=args.csv,
                max_gap_s=(
                    args.max_gap if args.max_gap is not None else 1.5 * SpineSettings().heartbeat_s
                ),
                idle_threshold_pct=args.idle_threshold,
                waited_csv_path=args.waited_csv,
            )
        )
    if args.command == "agent":
        from agents.main import AgentSettings, run_agent

        kubelet = KubeletSettings()
        if args.kubelet_socket:
            kubelet = kubelet.model_copy(update={"socket_path": args.kubelet_socket})
        dcgm = DcgmSettings()
        if args.dcgm_url:
            dcgm = dcgm.model_copy(update={"url": args.dcgm_url})
        agent = AgentSettings(
            args.node, kafka, kubelet, dcgm, KubeSettings(), InventorySettings(), ObserveSettings()
        )
        until_signalled(run_agent(agent))
        return 0
    if args.command == "cluster":
        from agents.cluster.main import ClusterRoleSettings, run_cluster

        until_signalled(run_cluster(ClusterRoleSettings(kafka, KubeSettings(), ClusterSettings())))
        return 0
    if args.command == "worker":
        return _run_worker(kafka, WorkerSettings(), AlertSettings(), SpineSettings())
    if args.command == "sink":
        from sinks.runner import run_sink

        until_signalled(run_sink(kafka, SinkSettings(), observe=ObserveSettings()))
        return 0
    if args.command == "demo":
        from gpuattr.demo import run_demo

        code = until_signalled(
            run_demo(
                kafka,
                args.scenario,
                args.duration,
                args.json,
                args.speed,
                args.workdir,
                secure=args.secure,
            )
        )
        return 130 if code is None else code
    return 2


if __name__ == "__main__":
    sys.exit(main())
