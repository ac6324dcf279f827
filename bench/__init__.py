"""Benchmarks: fleet-sized load on the real local Kafka (``python -m bench.run``)."""
