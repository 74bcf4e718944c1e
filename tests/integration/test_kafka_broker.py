"""The private Kafka broker (binlake/testing/kafka.py): a real KRaft broker whose transactions work on one node."""

from __future__ import annotations

import random
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from binlake.testing.kafka import PrivateKafka


def _read_all(broker: PrivateKafka, topic: str, isolation: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[bytes] = []
        while True:
            msg = consumer.poll(5)
            if msg is None:
                break  # nothing more within 5 s: the partition is read to its end for this isolation level
            assert msg.error() is None, msg.error()
            out.append(msg.value())
            if msg.offset() >= high - 1:
                break
        return out
    finally:
        consumer.close()


def test_broker_transactions_commit_and_abort(kafka_broker: PrivateKafka) -> None:
    """Committed transactions reach a read_committed consumer in order; aborted ones only a read_uncommitted one."""
    rng = random.Random(20)
    topic = f"t{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"tx-{topic}",
                         "enable.idempotence": True})
    producer.init_transactions(30)
    committed: list[bytes] = []
    every: list[bytes] = []
    for batch in range(6):
        producer.begin_transaction()
        values = [f"{batch}:{i}:{rng.random()}".encode() for i in range(rng.randint(1, 20))]
        for v in values:
            producer.produce(topic, value=v, partition=0)
        producer.flush(30)  # on the broker before the outcome (an abort would purge unsent messages)
        every += values
        if rng.random() < 0.5 or batch == 0:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.abort_transaction(30)
    producer.flush(30)
    assert _read_all(kafka_broker, topic, "read_committed") == committed
    assert _read_all(kafka_broker, topic, "read_uncommitted") == every
    assert committed != every  # the seed aborts at least one batch
