"""DRA ``DeviceTaintRule`` objects in the worker: the live ones a partition holds, and which DRA
devices each selects. Pure; a table value (``device-taint-rules``, keyed by input partition).

The cluster role publishes each rule into every partition of the input topic (like the
ClusterPolicy): each partition keeps the live ones (:class:`PartitionTaintRules`, bounded by the
cluster's rules: a deleted one leaves), and every node's view reads them, so a rule reaches the
devices of nodes that sent nothing since. A rule selects a device by driver, pool and device
name, each absent field selecting all (:func:`selects`); what the taint says of the device's
health is :func:`streams.core.devices.healthsources.rule_words`'.
"""

from __future__ import annotations

from contract.inputs import DeviceTaintRuleRecord
from contract.records import Record, replace
from streams.core.devices.dra import DeviceRef


class PartitionTaintRules(Record, frozen=True):
    """The live DeviceTaintRules, by name."""

    rules: tuple[DeviceTaintRuleRecord, ...] = ()

    def apply(self, record: DeviceTaintRuleRecord) -> PartitionTaintRules:
        kept = tuple(r for r in self.rules if r.name != record.name)
        if record.deleted:
            return replace(self, rules=kept)
        return replace(self, rules=tuple(sorted((*kept, record), key=lambda r: r.name)))


def selects(rule: DeviceTaintRuleRecord, ref: DeviceRef) -> bool:
    """Whether the rule's taint applies to the DRA device ``ref`` (driver, pool, device): never
    for a rule without a selector, one we cannot evaluate, or one without a usable taint."""
    if rule.deleted or rule.taint is None or not rule.selector or rule.unevaluable:
        return False
    driver, pool, device = ref
    return (
        (rule.driver is None or rule.driver == driver)
        and (rule.pool is None or rule.pool == pool)
        and (rule.device is None or rule.device == device)
    )
