"""Protocol-faithful doubles of the kubelet, dcgm-exporter and API server, driven by scenarios."""
