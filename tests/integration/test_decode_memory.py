"""Memory stays flat as transactions grow: a 10x larger transaction must not need 10x the memory to decode."""

from __future__ import annotations

import tracemalloc

from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.stats import BinlogStats


def _one_big_transaction(server, db: str, rows: int) -> list:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        cur.execute(f"USE `{db}`")
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, note VARCHAR(200), amount DECIMAL(10,2))")
        start = server.binlog_files()[-1].name
        cur.execute(
            f"INSERT INTO big SELECT seq, REPEAT(CHAR(65 + seq % 26), 150), seq / 100 FROM seq_1_to_{rows}"
        )
    files = server.flush_logs()
    return files[[f.name for f in files].index(start):]


def _peak_while_decoding(files: list, db: str) -> tuple[int, int, int]:
    tracemalloc.start()
    tracemalloc.reset_peak()
    stats = BinlogStats()
    decoder = BinlogDecoder(DecodeOptions(databases={db}, commits=True))
    stats.consume_batched(decoder.decode_files_batched(files))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    size = sum(f.stat().st_size for f in files)
    return peak, stats.total_rows, size


def test_memory_does_not_grow_with_transaction_size(mariadb_full) -> None:
    small_files = _one_big_transaction(mariadb_full, "mem_small", 20_000)
    large_files = _one_big_transaction(mariadb_full, "mem_large", 200_000)
    small_peak, small_rows, small_size = _peak_while_decoding(small_files, "mem_small")
    large_peak, large_rows, large_size = _peak_while_decoding(large_files, "mem_large")
    assert (small_rows, large_rows) == (20_000, 200_000)
    assert large_size > 8 * small_size  # the large transaction really is ~10x the bytes
    # Bounded by the read buffer, one event and the value caches, not by the transaction.
    assert large_peak < small_peak * 2 + (4 << 20), (small_peak, large_peak)
    assert large_peak < large_size / 2, (large_peak, large_size)
