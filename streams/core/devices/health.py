"""A device's health at one sample: temperatures, clocks, throttling, memory and PCIe errors, and
the marks they earn. Pure.

Counters are read as the agent's increases since its previous scrape (:class:`SinceLast`):
throttle shares are violation time over the interval, PCIe replays a rate per minute, remapped
rows and double-bit ECC errors an increase. An increase the agent could not know (the first
scrape of a device, a counter that went backwards because the exporter or driver restarted:
``counter_resets``) is ``None`` — never a rise, so a reset never marks anything.

Marks (thresholds from :class:`infra.settings.AlertSettings`, the alerts' own):

- ``hot``: GPU temperature at or over ``thermal_gpu_temp_c``, or memory temperature at or over
  ``thermal_memory_temp_c``;
- ``throttled``: thermal throttling at or over ``thermal_throttle_pct`` of the interval, or a
  thermal clock-event reason set (software or hardware thermal slowdown);
- ``memory-fault``: uncorrectable remapped rows or double-bit ECC errors rose, or row remapping
  failed (the device's condition; the alert fires only on a change);
- ``pcie-replays``: PCIe replays at or over ``pcie_replays_per_min``.
"""

from __future__ import annotations

from contract.inputs import CounterName, DcgmSample, SinceLast
from contract.outputs import Health, HealthMark
from infra.settings import AlertSettings

#: NVML's clocks-event reasons (``nvmlClocksEventReason*``, formerly ``nvmlClocksThrottleReason*``;
#: DCGM_FI_DEV_CLOCKS_EVENT_REASONS carries the same bitmask), bit → name
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu-idle"),
    (0x2, "applications-clocks-setting"),
    (0x4, "sw-power-cap"),
    (0x8, "hw-slowdown"),
    (0x10, "sync-boost"),
    (0x20, "sw-thermal-slowdown"),
    (0x40, "hw-thermal-slowdown"),
    (0x80, "hw-power-brake-slowdown"),
    (0x100, "display-clock-setting"),
)
_KNOWN_BITS = sum(bit for bit, _ in CLOCK_EVENT_REASONS)
#: the reasons that mean the clocks were cut for heat
THERMAL_REASONS = frozenset({"sw-thermal-slowdown", "hw-thermal-slowdown"})


def clock_events(mask: int | None) -> tuple[str, ...]:
    """The reasons a clocks-event bitmask sets, by name; a bit NVML does not define is named by
    its value (``bit-0x200``) rather than dropped."""
    if mask is None or mask <= 0:
        return ()
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    rest, bit = mask & ~_KNOWN_BITS, 1
    while rest:
        if rest & bit:
            names.append(f"bit-{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return tuple(names)


def share_pct(violation_us: float | None, since: SinceLast | None) -> float | None:
    """Throttled time over the interval, in percent (at most 100: counter granularity)."""
    if violation_us is None or since is None or since.interval_ms <= 0:
        return None
    return round(min(100.0, max(0.0, violation_us / (since.interval_ms * 1000.0) * 100.0)), 2)


def per_min(increase: float | None, since: SinceLast | None) -> float | None:
    if increase is None or since is None or since.interval_ms <= 0:
        return None
    return round(max(0.0, increase) / (since.interval_ms / 60_000.0), 2)


def rose(increase: float | None) -> bool:
    return increase is not None and increase > 0


def _marks(
    policy: AlertSettings,
    gpu_temp_c: float | None,
    memory_temp_c: float | None,
    thermal_throttle_pct: float | None,
    events: tuple[str, ...],
    remapped_increase: float | None,
    dbe_increase: float | None,
    remap_failure: bool | None,
    pcie_per_min: float | None,
) -> tuple[HealthMark, ...]:
    """The marks a device's health earns (the module docstring's rules)."""
    out: list[HealthMark] = []
    if (gpu_temp_c is not None and gpu_temp_c >= policy.thermal_gpu_temp_c) or (
        memory_temp_c is not None and memory_temp_c >= policy.thermal_memory_temp_c
    ):
        out.append("hot")
    if (
        thermal_throttle_pct is not None and thermal_throttle_pct >= policy.thermal_throttle_pct
    ) or not THERMAL_REASONS.isdisjoint(events):
        out.append("throttled")
    if rose(remapped_increase) or rose(dbe_increase) or remap_failure:
        out.append("memory-fault")
    if pcie_per_min is not None and pcie_per_min >= policy.pcie_replays_per_min:
        out.append("pcie-replays")
    return tuple(out)


def health(sample: DcgmSample, policy: AlertSettings) -> Health:
    """What one sample says of its device's condition, with the marks it earns."""
    since = sample.since_last
    pcie, dbe = increase(since, "pcie_replays"), increase(since, "ecc_dbe_volatile")
    thermal = share_pct(increase(since, "thermal_violation_us"), since)
    events = clock_events(sample.clock_event_reasons)
    pcie_per_min = per_min(pcie, since)
    remapped = increase(since, "uncorrectable_remapped_rows")
    gpu_temp, memory_temp, failure = sample.temp_c, sample.memory_temp_c, sample.row_remap_failure
    return Health(
        gpu_temp_c=gpu_temp,
        memory_temp_c=memory_temp,
        sm_clock_mhz=sample.sm_clock_mhz,
        power_w=sample.power_w,
        thermal_throttle_pct=thermal,
        power_throttle_pct=share_pct(increase(since, "power_violation_us"), since),
        clock_events=events,
        pcie_replays_per_min=pcie_per_min,
        uncorrectable_remapped_rows=sample.uncorrectable_remapped_rows,
        correctable_remapped_rows=sample.correctable_remapped_rows,
        row_remap_failure=failure,
        ecc_dbe_volatile=sample.ecc_dbe_volatile,
        uncorrectable_remapped_rows_increase=remapped,
        ecc_dbe_increase=dbe,
        counter_resets=tuple(since.resets) if since else (),
        marks=_marks(
            policy, gpu_temp, memory_temp, thermal, events, remapped, dbe, failure, pcie_per_min
        ),
        watched=_watched(
            gpu_temp,
            memory_temp,
            thermal,
            sample.clock_event_reasons is not None,
            remapped,
            dbe,
            failure,
            pcie_per_min,
        ),
    )


def _watched(
    gpu_temp_c: float | None,
    memory_temp_c: float | None,
    thermal_throttle_pct: float | None,
    clock_known: bool,
    remapped_increase: float | None,
    dbe_increase: float | None,
    remap_failure: bool | None,
    pcie_per_min: float | None,
) -> tuple[HealthMark, ...]:
    """The marks the figures can judge (``clock_known``: the clock-event reasons were
    exported): a mark whose every input is missing (not exported, or a counter's increase not
    known at this sample) is unknown, never reported as clear."""
    out: list[HealthMark] = []
    if gpu_temp_c is not None or memory_temp_c is not None:
        out.append("hot")
    if thermal_throttle_pct is not None or clock_known:
        out.append("throttled")
    if remapped_increase is not None or dbe_increase is not None or remap_failure is not None:
        out.append("memory-fault")
    if pcie_per_min is not None:
        out.append("pcie-replays")
    return tuple(out)


def increase(since: SinceLast | None, name: CounterName) -> float | None:
    """A counter's increase over the interval; ``None`` where not known, and where the counter
    reset (whatever figure came with it: a reset is never a rise)."""
    if since is None or name in since.resets:
        return None
    value: float | None = getattr(since, name)
    return value
