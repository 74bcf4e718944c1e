"""Thin spark-submit entry points over binlake (binlake.spark builds the session): one call each."""
