"""How long a free-text string copied from a source may be on the wire: one rule, one size.

A source can send a label of any length (dcgm-exporter's ``Hostname`` has been seen at ~560 KB);
copied into a record, then into a refusal's reason and the node's state, it makes outputs larger
than Kafka takes. Every string a translator copies from a source (a dcgm-exporter label, a pod's
annotation, a node's label, a pending pod's or GPU Operator object's string) and every reason
the worker builds from such strings goes through :func:`cut`: at most :data:`MAX_TEXT_CHARS`
characters, a cut one ending in :data:`CUT_MARK` so that readers see it was cut. Names the API
server bounds (a pod's name: 253) are far below the size, so a cut never changes a real
identity. Pure; the agents count what they cut (:mod:`agents.bounds`,
``gpuattr_agent_cut_values_total{what}``).
"""

from __future__ import annotations

#: the most characters a copied string keeps (cut ones included, the mark counted)
MAX_TEXT_CHARS = 1024
CUT_MARK = "…[cut]"


def cut(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` when it fits in ``limit`` characters, else its head and :data:`CUT_MARK`, in
    exactly ``limit`` characters (the same object when it fits: callers test ``is``)."""
    if len(text) <= limit:
        return text
    if limit <= len(CUT_MARK):  # no room for the mark
        return text[:limit]
    return text[: limit - len(CUT_MARK)] + CUT_MARK
