"""Telemetry: whether an exporter's answer is provably this node's, and what a device's usage is
when no fresh sample speaks for it. Pure.

**Verified local.** The agent is told which exporter to scrape, but a URL can lead anywhere (a
cluster-routed Service picks any node's exporter). An answer is accepted only when it is
provably the node's own (:func:`verify`):

* the exporter's ``Hostname`` label names this node: the node's name, its
  ``kubernetes.io/hostname``, or the exporter pod the agent found on it (dcgm-exporter reports
  ``NODE_NAME`` when set, as the GPU Operator does, else its pod's hostname) — another name
  refuses the whole answer;
* every row's ``pci_bus_id`` is the bus id the node's inventory (NVML) has for that GPU UUID,
  where both are known: the UUIDs of a node's GPUs are anybody's to read (the exporter's query
  API lists them), so an answer that names the node's GPUs at other bus addresses is not this
  node's exporter speaking, and is refused whole;
* every row's GPU UUID is one the node itself lists: its inventory, its allocatable devices, its
  held devices or its ResourceSlices. A row of another GPU is refused; with nothing to check
  against, the answer cannot be proven and is refused whole.

Refused rows never become devices, events or alerts; each refusal is a ``telemetry.refused``
record (flags topic) and a counter.

**Usage unknown, because …** (:func:`unknown`): the one rule every spine event follows. Where
the node's GPU stack says why its exporter does not answer (:func:`with_stack`: disabled on
purpose, waiting on the container toolkit, crash looping), that line is the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from contract.bounds import cut
from contract.inputs import DcgmSample, DcgmScrape
from contract.outputs import PlaneName, RefusalCause, Telemetry, TelemetryCause
from contract.records import Record
from streams.core.lifetimes import Lifetimes
from streams.core.node.nodestate import NodeState

LABEL_HOSTNAME = "kubernetes.io/hostname"
#: ``[domain:]bus:device.function``, hexadecimal
_PCI = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])")


class Verdict(Record, frozen=True):
    accepted: tuple[DcgmSample, ...]
    refused: tuple[DcgmSample, ...]
    cause: RefusalCause | None = None
    reason: str = ""


def _names(names: Iterable[str]) -> set[str]:
    out = set()
    for name in names:
        if name:
            out.add(name.lower())
            out.add(name.lower().split(".", 1)[0])  # a short host name for its FQDN
    return out


def pci_address(bus_id: str) -> str:
    """A PCI bus id in one spelling: NVML's ``00000000:3B:00.0``, its legacy ``0000:3B:00.0`` and
    either case are one address; a text that is not one stays as it came (lower case)."""
    text = bus_id.strip().lower()
    m = _PCI.fullmatch(text)
    if m is None:
        return text
    domain, bus, device, function = (int(g or "0", 16) for g in m.groups())
    return f"{domain:x}:{bus:x}:{device:x}.{function:x}"


def verify(
    scrape: DcgmScrape,
    known_gpus: frozenset[str],
    host_names: Sequence[str],
    pci_buses: Mapping[str, str] | None = None,
) -> Verdict:
    """Which rows of one scrape are provably the node's (module docstring). ``pci_buses``: GPU
    UUID → PCI bus id from the node's inventory."""
    allowed = _names(host_names)
    exporter_pod = scrape.exporter_pod.rpartition("/")[2]
    if exporter_pod:
        allowed |= _names([exporter_pod])
    hosts = sorted({s.hostname for s in scrape.samples if s.hostname})
    strangers = [h for h in hosts if h.lower() not in allowed]
    if strangers:
        return Verdict(
            (),
            scrape.samples,
            "hostname",
            cut(
                f"the exporter at {cut(scrape.exporter) or 'its URL'} reports Hostname "
                f"{cut(', '.join(strangers))}, not this node ({scrape.node})"
            ),
        )
    moved = sorted(
        {
            (s.uuid, s.pci_bus_id, listed)
            for s in scrape.samples
            if s.pci_bus_id
            and (listed := (pci_buses or {}).get(s.uuid))
            and pci_address(s.pci_bus_id) != pci_address(listed)
        }
    )
    if moved:
        more = ", …" if len(moved) > 3 else ""
        return Verdict(
            (),
            scrape.samples,
            "pci-bus-id",
            f"the exporter at {scrape.exporter or 'its URL'} reports GPU(s) at PCI bus ids this "
            f"node's inventory does not have them at ("
            + ", ".join(f"{u} at {theirs}, not {nvml}" for u, theirs, nvml in moved[:3])
            + f"{more})",
        )
    if not known_gpus:
        return Verdict(
            (),
            scrape.samples,
            "unverifiable",
            "no inventory, allocatable device list, held device or ResourceSlice from this node "
            "yet: the exporter's GPUs cannot be checked against the node's",
        )
    ours = tuple(s for s in scrape.samples if s.uuid in known_gpus)
    theirs = tuple(s for s in scrape.samples if s.uuid not in known_gpus)
    if not theirs:
        return Verdict(ours, ())
    uuids = sorted({s.uuid for s in theirs})
    more = ", …" if len(uuids) > 3 else ""
    return Verdict(
        ours,
        theirs,
        "foreign-devices",
        cut(
            f"the exporter at {cut(scrape.exporter) or 'its URL'} reports {len(uuids)} GPU(s) "
            f"this node does not have ({', '.join(uuids[:3])}{more})"
        ),
    )


def when(ms: int | None) -> str:
    """An event time as people read it (UTC)."""
    if ms is None:
        return "an unknown time"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):  # a clock far off: say the number as it came
        return f"{ms} ms since the epoch"


def unknown(state: NodeState, key: str, now_ms: int, life: Lifetimes) -> Telemetry | None:
    """Why the node's telemetry does not speak for device ``key`` at ``now_ms``; ``None`` when a
    fresh accepted sample does (its own event carries the reading)."""
    why = _node_unknown(state, now_ms, life)
    if why is not None:
        return why
    if key not in state.scraped:
        return Telemetry(
            "unknown",
            "no-row",
            "dcgm-exporter answers, but has no row for this device",
            None,
            state.scrape_at(now_ms, life.quantum_ms),
        )
    return None


def measured(state: NodeState, now_ms: int, life: Lifetimes) -> tuple[str, ...]:
    """The devices a fresh accepted sample speaks for at ``now_ms`` (:func:`unknown` is
    ``None`` for exactly these): the last accepted answer's rows, while the node's telemetry as
    a whole answers."""
    return state.scraped if _node_unknown(state, now_ms, life) is None else ()


def _node_unknown(state: NodeState, now_ms: int, life: Lifetimes) -> Telemetry | None:
    """Why the node's telemetry speaks for none of its devices at ``now_ms`` (``None``: it
    answers, fresh, for the devices its last accepted answer had rows for)."""
    scrape = state.scrape_at(now_ms, life.quantum_ms)  # the one this time read, processed again
    refusal = state.refused
    if refusal is not None:
        return Telemetry(
            "unknown",
            "scrape-refused",
            f"dcgm-exporter's answers refused since {when(refusal.since_ms)}: {refusal.reason}",
            refusal.since_ms,
            scrape,
        )
    dcgm = state.source("dcgm")
    if dcgm is not None and dcgm.state == "failing":
        target = f" at {dcgm.target}" if dcgm.target else ""
        return Telemetry(
            "unknown",
            "exporter-unreachable",
            f"dcgm-exporter{target} failing since {when(dcgm.since_ms)} "
            f"({dcgm.reason}): {dcgm.detail}".rstrip(": "),
            dcgm.since_ms,
            scrape,
        )
    if dcgm is not None and dcgm.state == "disabled":
        return Telemetry(
            "unknown",
            "no-exporter",
            f"no dcgm-exporter for this node: {dcgm.detail or dcgm.reason}",
            dcgm.since_ms,
            scrape,
        )
    if scrape is None:
        return Telemetry(
            "unknown",
            "no-sample-yet",
            f"no sample from dcgm-exporter since the node's agent started ({when(state.first_ms)})",
            state.first_ms,
        )
    if now_ms - scrape > life.fresh_ms:
        return Telemetry(
            "unknown",
            "samples-stopped",
            f"no sample from dcgm-exporter since {when(scrape)}",
            scrape,
            scrape,
        )
    return None


#: causes that are about the node's exporter as a whole: the GPU stack may say why
EXPORTER_CAUSES = frozenset(
    {"scrape-refused", "exporter-unreachable", "no-exporter", "no-sample-yet", "samples-stopped"}
)
INTENDED = "disabled by intent, not a fault"


def with_stack(
    why: Telemetry,
    stack_reason: str | None,
    intended: bool,
    plane: PlaneName | None = None,
) -> Telemetry:
    """The telemetry rule's answer with the GPU stack's word on the exporter
    (:func:`streams.core.stack.operatorstack.telemetry_reason`), when it has one: an exporter
    disabled
    on purpose is ``no-exporter``, "… (disabled by intent, not a fault)"; one that fails says so,
    and names its ``plane`` (:func:`~streams.core.stack.operatorstack.telemetry_plane`); one that
    waits on a broken lower plane is ``stack-broken``, naming that plane. A device-level cause
    (no row, holders changed) stays."""
    if stack_reason is None or why.cause not in EXPORTER_CAUSES:
        return why
    if intended:
        return Telemetry(
            "unknown",
            "no-exporter",
            f"{stack_reason} ({INTENDED})",
            why.since_ms,
            why.last_sample_ms,
        )
    below = plane is not None and plane != "dcgm-exporter"
    cause: TelemetryCause | None = "stack-broken" if below else why.cause
    return Telemetry("unknown", cause, stack_reason, why.since_ms, why.last_sample_ms, plane)


def holders_changed(at_ms: int, last_sample_ms: int | None) -> Telemetry:
    """An allocation change between samples: the new holders are not measured yet."""
    return Telemetry(
        "unknown",
        "holders-changed",
        f"holders changed at {when(at_ms)}: not measured since (the next sample is)",
        at_ms,
        last_sample_ms,
    )


def silent(last_ms: int) -> Telemetry:
    return Telemetry(
        "unknown",
        "node-silent",
        f"no record from the node's agent since {when(last_ms)}: holders and usage unknown now",
        last_ms,
    )


def gone(why: str, at_ms: int) -> Telemetry:
    return Telemetry("unknown", "gone", why, at_ms)


def unplaced(reason: str) -> Telemetry:
    return Telemetry("unknown", "unplaced", reason)
