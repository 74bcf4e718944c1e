"""Keep a Redis cache equal to the source tables, from binlake's Kafka change stream (docs/kafka.md).

Each keyed table is the Redis hash `PREFIX.db.table`: field = the key (JSON), value = the row (JSON). The consumer's
Kafka offsets are stored in Redis in the same MULTI/EXEC as the changes they cover, so a consumer killed and started
again applies every change exactly once. Tables without a key are not cached (a cache looks rows up by key).

    python docs/examples/redis_cache.py BOOTSTRAP PREFIX REDIS_URL [IDLE_SECONDS]

IDLE_SECONDS: stop after that long without a new change (default: run until interrupted).
"""

import json
import sys
import time

import redis
from confluent_kafka import Consumer, TopicPartition


def apply(tx, topic, partition, key, value):
    """One record; returns False for a TRUNCATE, which needs the keys the partition wrote (read outside MULTI)."""
    if value is None:  # a tombstone: the delete before it did the work
        return True
    event, written = json.loads(value), f"{topic}#p{partition}"  # the set of keys this partition wrote
    if event["op"] == "t":
        return False
    if key is None:  # a table without a key
        return True
    if event["op"] == "d":
        tx.hdel(topic, key)
        tx.srem(written, key)
    else:  # c, u, r
        tx.hset(topic, key, json.dumps(event["after"]))
        tx.sadd(written, key)
    return True


def main(bootstrap, prefix, url, idle=None):
    r = redis.Redis.from_url(url)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"redis-cache-{prefix}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    assigned, last = set(), time.monotonic()
    while idle is None or time.monotonic() - last < idle:
        topics = {t: len(m.partitions) for t, m in consumer.list_topics(timeout=10).topics.items()
                  if t.startswith(prefix + ".") and not t.endswith((".schema-changes", ".binlake-offsets"))}
        new = [(t, p) for t, n in topics.items() for p in range(n) if (t, p) not in assigned]
        if new:  # start each partition where the cache's own offsets say
            offsets = r.hgetall(f"{prefix}#offsets")
            assigned |= set(new)
            consumer.assign([TopicPartition(t, p, int(offsets.get(f"{t}:{p}".encode(), 0)))
                             for t, p in sorted(assigned)])
        records = consumer.consume(1000, 1.0)
        tx = r.pipeline(transaction=True)
        for msg in records:
            if msg.error():
                raise RuntimeError(msg.error().str())
            last = time.monotonic()
            key = msg.key().decode() if msg.key() is not None else None
            if not apply(tx, msg.topic(), msg.partition(), key, msg.value()):  # TRUNCATE
                tx.execute()
                members = r.smembers(f"{msg.topic()}#p{msg.partition()}")
                tx = r.pipeline(transaction=True)
                if members:
                    tx.hdel(msg.topic(), *members)
                tx.delete(f"{msg.topic()}#p{msg.partition()}")
            tx.hset(f"{prefix}#offsets", f"{msg.topic()}:{msg.partition()}", msg.offset() + 1)
        tx.execute()
    consumer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else None)
