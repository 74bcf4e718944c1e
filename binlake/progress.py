"""Progress of long work on stderr, without dependencies.

On a terminal a bar is redrawn in place (at most every `every` seconds, 0.1 by default); otherwise (logs, CI,
Airflow) a plain line is printed every `every` seconds (10 by default), so short runs stay quiet and long ones
show they are alive. Messages (`note`) are printed on their own lines without breaking the bar.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

UNITS = ("B", "KB", "MB", "GB", "TB")


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KB' (powers of 1024, one decimal from KB on)."""
    for unit in UNITS:
        if abs(n) < 1024 or unit == UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class ProgressBar:
    """Progress of one piece of work: `update(done)` or `advance(n)`, then `close()` (or use it as a context).

    `total` may be None (unknown: counts and rate only). `unit` "bytes" formats amounts as sizes; any other unit
    is written after plain counts ("3/12 chunks").
    """

    def __init__(self, label: str, total: int | None = None, unit: str = "bytes", stream: TextIO | None = None,
                 tty: bool | None = None, every: float | None = None, clock: Callable[[], float] = time.monotonic,
                 width: int = 28) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = tty if tty is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every if every is not None else (0.1 if self.tty else 10.0)
        self.clock = clock
        self.width = width
        self.done = 0
        self.started = clock()
        self._last_draw = self.started
        self._drawn = False  # a bar is on screen (TTY) or a line was printed (plain)
        self._closed = False
        self._completed_at: float | None = None  # rate and time stop when the total is reached

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int, total: int | None = None) -> None:
        """Set the amount done (and the total, when it became known); redraws when it is time to."""
        self.done = done
        if total is not None:
            self.total = total
        now = self.clock()
        if self.total and done >= self.total and self._completed_at is None:
            self._completed_at = now
        if now - self._last_draw >= self.every:
            self._last_draw = now
            self._draw(now)

    def note(self, message: str) -> None:
        """A message line; on a terminal the bar is cleared first and redrawn after it."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[K")
        self.stream.write(message + "\n")
        if self.tty and self._drawn:
            self._draw(self.clock())
        self.stream.flush()

    def finish(self) -> None:
        """The work completed: count it all done, then close."""
        if self.total is not None:
            self.update(self.total)
        self.close()

    def close(self) -> None:
        """Final state: on a terminal the bar is completed with a newline; in plain mode a last line is printed
        only if earlier lines were (a run too short to report stays silent)."""
        if self._closed:
            return
        self._closed = True
        if self.tty or self._drawn:
            self._draw(self.clock(), final=True)

    def text(self, now: float | None = None) -> str:
        """The progress as one line of text (without the bar)."""
        now = self.clock() if now is None else now
        elapsed = max((self._completed_at or now) - self.started, 1e-9)
        rate = self.done / elapsed
        suffix = f" {self.unit}" if self.unit and self.unit != "bytes" else ""
        parts = [f"{self.label}:"]
        if self.total:
            pct = min(100.0, 100.0 * self.done / self.total)
            parts.append(f"{self._amount(self.done)} / {self._amount(self.total)}{suffix} ({pct:.0f}%)")
        else:
            parts.append(f"{self._amount(self.done)}{suffix}")
        parts.append(f"{self._amount(rate)}/s" if self.unit == "bytes" else f"{rate:.1f}{suffix}/s")
        if self.total and rate > 0 and self.done < self.total:
            parts.append(f"ETA {_duration((self.total - self.done) / rate)}")
        else:
            parts.append(f"in {_duration(elapsed)}")
        return " ".join(parts)

    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.unit == "bytes" else f"{n:.0f}"

    def _draw(self, now: float, final: bool = False) -> None:
        line = self.text(now)
        if self.tty:
            bar = ""
            if self.total:
                filled = int(self.width * min(1.0, self.done / self.total))
                bar = "[" + "#" * filled + "-" * (self.width - filled) + "] "
            self.stream.write("\r\x1b[K" + bar + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self._drawn = True
        self.stream.flush()


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class FilePositions:
    """Bytes read across an ordered list of files, from (file name, position) reports, onto a ProgressBar.

    Positions past a file's size (a gzip file's uncompressed offsets) count as the whole file."""

    def __init__(self, paths: list, bar: ProgressBar) -> None:
        from pathlib import Path

        self.names = [Path(p).name for p in paths]
        sizes = [Path(p).stat().st_size if Path(p).is_file() else 0 for p in paths]  # the reader reports missing
        self.sizes = sizes
        self.offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        self.bar = bar
        self.index = 0
        bar.update(0, sum(sizes))

    def __call__(self, name: str, pos: int) -> None:
        if name != self.names[self.index]:
            try:
                self.index = self.names.index(name, self.index)
            except ValueError:
                return
        self.bar.update(self.offsets[self.index] + min(pos, self.sizes[self.index]))
