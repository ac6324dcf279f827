"""The embedded local Apache Kafka broker (KRaft), from Maven Central jars."""

from gpuattr.localkafka.broker import LocalKafka, LocalKafkaConfig, render_properties, run_forever
from gpuattr.localkafka.jars import KAFKA_VERSION, LocalKafkaError, resolve_jars

__all__ = [
    "KAFKA_VERSION",
    "LocalKafka",
    "LocalKafkaConfig",
    "LocalKafkaError",
    "render_properties",
    "resolve_jars",
    "run_forever",
]
