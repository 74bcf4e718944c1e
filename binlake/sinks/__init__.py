"""Sinks beside the Delta lake, fed by the same decoded, schema-resolved changes: Kafka (kafka.py)."""
