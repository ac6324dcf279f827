"""Kubernetes quantities (``80Gi``, ``500m``, ``1e3``), read within bounds. Pure.

Capacities and consumption are never negative: a signed quantity is refused too. The API
server canonicalises quantities to at most 18 significant digits and an exponent that
fits 64 bits; a longer one on the wire is not a quantity Kubernetes wrote. :func:`parse` reads
only those bounds, so a million-digit "quantity" is refused (``None``) instead of overflowing
decimal arithmetic: the agent drops such a value where it enters (counted), and the worker
refuses a record carrying one as bad input (dead-lettered).
"""

from __future__ import annotations

import re
from decimal import Context, Decimal, InvalidOperation

MAX_CHARS = 40
_QUANTITY = re.compile(
    r"^(?P<num>[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})"
    r"(?P<unit>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]{1,3})?$"
)
_UNITS = {
    None: Decimal(1),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
#: enough precision for every bounded quantity, and an exponent range none of them leaves
_CONTEXT = Context(prec=80, Emax=10_000, Emin=-10_000)


def parse(text: str) -> Decimal | None:
    """A quantity's value, or ``None`` when it is not one (or not one within the bounds)."""
    text = text.strip()
    if len(text) > MAX_CHARS:
        return None
    m = _QUANTITY.match(text)
    if m is None:
        return None
    unit = m["unit"]
    try:
        number = Decimal(m["num"])
        if unit and unit[0] in "eE":
            return _CONTEXT.scaleb(number, int(unit[1:]))
        return _CONTEXT.multiply(number, _UNITS[unit])
    except (InvalidOperation, ArithmeticError):
        return None


def valid(text: str) -> bool:
    return parse(text) is not None
