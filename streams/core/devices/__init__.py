"""A device and who holds it: identity, the two allocation paths, sharing, accounting, and the
attribution of one reading to its holders."""
