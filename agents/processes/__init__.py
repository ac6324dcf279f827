"""Per-process GPU usage read on the node (NVML), each process placed in its pod by its cgroup."""
