"""The cluster role's signature: what tells its records from anything an agent could write.

Agents may write the node-events topic (and the cluster role the demand-events topic), and a
Kafka ACL grants a topic, not a record kind: an agent's credentials could write a clock tick, a
ClusterPolicy or a DeviceTaintRule. So the cluster role signs every record it publishes — an
HMAC (SHA-256) over the record's value bytes, with a key only it and the workers hold, in the
:data:`HEADER` Kafka header — and a worker that has the key honours a record of a
:data:`SIGNED` kind only with a good signature (:func:`refusal`). A replayed signed record
carries an old time: the partition's clock check (:func:`streams.core.lifetimes.jump`) and the
records' own memory judge it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence

from contract.inputs import (
    ClockTick,
    ClusterPolicyRecord,
    DeviceTaintRuleRecord,
    GpuClusterRecord,
    NvidiaDriverRecord,
    PendingPodList,
    QueuedWorkloadList,
)

HEADER = "gpuattr-signature"
#: the cluster role's records that move every node of a partition: the clock, the GPU Operator's
#: intent (ClusterPolicy, GPUCluster, NVIDIADriver), the DRA device taint rules, the pending-pod
#: and queued-workload lists
SIGNED: tuple[type, ...] = (
    ClockTick,
    ClusterPolicyRecord,
    GpuClusterRecord,
    NvidiaDriverRecord,
    DeviceTaintRuleRecord,
    PendingPodList,
    QueuedWorkloadList,
)

#: a Kafka record's headers, as aiokafka (pairs) or Faust (a mapping) hand them over
Headers = Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None


def sign(key: bytes, value: bytes) -> bytes:
    """The signature header's value: the HMAC-SHA256 of ``value``, hex."""
    return hmac.new(key, value, hashlib.sha256).hexdigest().encode()


def header(headers: Headers) -> bytes | None:
    if headers is None:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return next((v for k, v in pairs if k == HEADER), None)


def refusal(key: bytes, record: object, value: bytes, headers: Headers) -> str | None:
    """Why a record may not be honoured as the cluster role's (``None``: it may). Only the
    :data:`SIGNED` kinds are checked; the others are a node's, keyed and judged by node."""
    if not isinstance(record, SIGNED):
        return None
    given = header(headers)
    kind = type(record).__name__
    if given is None:
        return f"{kind} without the cluster role's signature"
    if not hmac.compare_digest(given, sign(key, value)):
        return f"{kind} with a bad signature (not the cluster role's key)"
    return None
