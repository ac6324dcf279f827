"""A node's life and what it is trusted for: its state, its pods, its telemetry."""
