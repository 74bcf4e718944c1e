"""Thin spark-submit entry points over binlake: session setup and one call each."""
