"""Run the gate stages in a helper process that imports Great Expectations while this process decodes.

Importing GE costs seconds of CPU once per process; an in-process ingest would pay it between decoding and
merging. `run_ingest` starts this helper first (a spawned process: nothing of the parent's state is inherited),
so on a machine with a free core the import overlaps decoding. The gate stages are ordinary stages: the helper
calls `gate_before_merge` / `gate_after_merge` with the same options and batch, reading and writing the lake like
an Airflow task would, and sends back the GateReport or the exception (GateFailed after quarantining). If the
helper cannot start or dies, the caller runs the stage in-process instead.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from typing import Any


def _serve(conn) -> None:
    import great_expectations  # noqa: F401  (the point of this process)

    from ..quality.runner import ensure_context
    from . import pipeline

    ensure_context()
    stages = {"before": pipeline.gate_before_merge, "after": pipeline.gate_after_merge}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        stage, opts, batch = msg
        try:
            conn.send(("ok", stages[stage](opts, batch)))
        except BaseException as exc:  # sent back and raised there; this process stays usable
            try:
                conn.send(("error", exc))
            except Exception:  # an exception that does not pickle: its text still does
                conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))


class WorkerDied(RuntimeError):
    """The helper process is gone; the caller falls back to running the stage itself."""


class GateWorker:
    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child,), name="binlake-gates", daemon=True)
        self.process.start()
        child.close()
        self.waited = 0.0  # seconds spent waiting beyond the gates' own work (the import not yet done)

    @classmethod
    def start(cls) -> GateWorker | None:
        try:
            return cls()
        except Exception:  # no process can be started here: the gates run in-process
            return None

    def call(self, stage: str, opts: Any, batch: int):
        t0 = time.perf_counter()
        try:
            self.conn.send((stage, opts, batch))
            kind, value = self.conn.recv()
        except (EOFError, OSError) as exc:
            raise WorkerDied(f"gate helper process ended ({exc!r})") from None
        if kind == "error":
            raise value
        self.waited += max(0.0, time.perf_counter() - t0 - value.seconds)
        return value

    def close(self, kill: bool = False) -> None:
        """Stop the helper: at once with `kill` (e.g. nothing to gate: it may still be importing)."""
        if kill:
            self.process.terminate()
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)
        self.conn.close()
