"""spark-submit entry point: `binlake ingest --spark`, decoding spread over Spark tasks (one per file range).

    spark-submit spark_jobs/ingest.py --source local:/data/binlogs --lake /data/lake [--schemas DIR] ...
"""

from __future__ import annotations

import sys

from binlake.cli import main as cli_main


def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    return cli_main(["ingest", "--spark", *argv])


if __name__ == "__main__":
    sys.exit(main())
