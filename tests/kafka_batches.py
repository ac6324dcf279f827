"""How a topic's record batches are stored on the broker: read raw with a Fetch request, as a
consumer receives them before it decompresses anything."""

from __future__ import annotations

from collections import Counter

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

CODECS = {
    DefaultRecordBatch.CODEC_NONE: "none",
    DefaultRecordBatch.CODEC_GZIP: "gzip",
    DefaultRecordBatch.CODEC_SNAPPY: "snappy",
    DefaultRecordBatch.CODEC_LZ4: "lz4",
    DefaultRecordBatch.CODEC_ZSTD: "zstd",
}


async def batch_codecs(bootstrap: str, topic: str, partitions: int) -> Counter[str]:
    """The compression of every record batch on ``topic`` from its start (up to 16 MiB a
    partition), counted by codec name."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    found: Counter[str] = Counter()
    try:
        await client.force_metadata_update()
        for n in range(partitions):
            leader = client.cluster.leader_for_partition(TopicPartition(topic, n))
            if leader is None or leader < 0:
                raise AssertionError(f"{topic}[{n}] has no leader")
            request = FetchRequest(0, 1, 16 << 20, 0, [(topic, [(n, 0, 16 << 20)])])
            response = await client.send(leader, request)
            for _, parts in response.topics:
                for _, error, _, *data in parts:
                    assert error == 0, f"{topic}[{n}]: fetch error {error}"
                    records = MemoryRecords(data[-1])
                    while (batch := records.next_batch()) is not None:
                        found[CODECS[batch.compression_type]] += 1
    finally:
        await client.close()
    return found
