"""``gpuattr doctor``: one line per check of a role's install, each failure with its fix.

- :mod:`gpuattr.doctor.lines`: the verdict type, its text and JSON renderings, the exit status
  (pure).
- :mod:`gpuattr.doctor.run`: which checks a role runs, in which order, each bounded in time;
  a check whose prerequisite failed is skipped, not failed, so exactly the broken line is red.
- one module per subsystem asked (Kafka, the clock, the kubelet socket, the API server, the
  exporter): each gathers facts through the same clients the role uses and judges them with
  pure functions tested by tables.
"""
