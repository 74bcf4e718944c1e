"""binlake: MySQL/MariaDB binary logs into Delta Lake."""

__version__ = "0.1.0"
