"""The embedded local Apache Kafka broker (KRaft), from Maven Central jars."""

from gpuattr.localkafka.broker import LocalKafka, free_port, run_forever
from gpuattr.localkafka.config import LocalKafkaConfig, render_properties
from gpuattr.localkafka.jars import KAFKA_VERSION, LocalKafkaError, default_cache_dir, resolve_jars
from gpuattr.localkafka.security import LocalKafkaSecurity

__all__ = [
    "KAFKA_VERSION",
    "LocalKafka",
    "LocalKafkaConfig",
    "LocalKafkaError",
    "LocalKafkaSecurity",
    "default_cache_dir",
    "free_port",
    "render_properties",
    "resolve_jars",
    "run_forever",
]
