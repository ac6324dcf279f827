"""Node agent: reads one node's kubelet, API-server view and dcgm-exporter and publishes records."""
