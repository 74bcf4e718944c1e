"""Progress of long work on stderr, through `rich`.

On a terminal a rich progress bar is redrawn in place (at most every `every` seconds, 0.1 by default); otherwise
(logs, CI, Airflow) a plain line is printed every `every` seconds (10 by default), so short runs stay quiet and
long ones show they are alive. Messages (`note`) are printed on their own lines without breaking the bar.

Kept by hand: the periodic plain lines (rich's live display on a non-terminal prints only its last frame, and CI
logs need to see a long run is alive), and the line's wording (binary KB/MB and the average rate since the start,
as before; rich's own columns are decimal and use a sliding-window rate).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from .terminal import stderr_console, write_line

UNITS = ("B", "KB", "MB", "GB", "TB")


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KB' (powers of 1024, one decimal from KB on)."""
    for unit in UNITS:
        if abs(n) < 1024 or unit == UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _rich_progress(bar: ProgressBar, width: int):
    """rich's Progress for a terminal, its text the same line the plain mode prints (rich is imported here only)."""
    from rich.progress import BarColumn, Progress, ProgressColumn, Task
    from rich.text import Text

    class _LineColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text(bar.text())

    # Redrawn when binlake says so (auto_refresh off), so the clock it is given decides; stdout is left alone
    # (decoded records may be going there).
    return Progress(BarColumn(bar_width=width), _LineColumn(), console=bar.console, get_time=bar.clock,
                    auto_refresh=False, redirect_stdout=False)


class _PlainTask:
    """Off a terminal, what the bar reads of a rich Task, kept the same way (rich.progress.Progress.update): the
    time it started, and the elapsed time at which it reached its total (cleared when the total changes)."""

    def __init__(self, description: str, total: int | None, clock: Callable[[], float]) -> None:
        self.description = description
        self.total = total
        self.completed = 0
        self._clock = clock
        self.start_time = clock()
        self.finished_time: float | None = None

    @property
    def elapsed(self) -> float:
        return self._clock() - self.start_time

    def update(self, total: int | None = None, completed: int | None = None, description: str | None = None) -> None:
        if total is not None and total != self.total:
            self.total = total
            self.finished_time = None
        if completed is not None:
            self.completed = completed
        if description is not None:
            self.description = description
        if self.total is not None and self.completed >= self.total and self.finished_time is None:
            self.finished_time = self.elapsed


class ProgressBar:
    """Progress of one piece of work: `update(done)` or `advance(n)`, then `close()` (or use it as a context).

    `total` may be None (unknown: counts and rate only). `unit` "bytes" formats amounts as sizes; any other unit
    is written after plain counts ("3/12 chunks").
    """

    def __init__(self, label: str, total: int | None = None, unit: str = "bytes", stream: TextIO | None = None,
                 tty: bool | None = None, every: float | None = None, clock: Callable[[], float] = time.monotonic,
                 width: int = 28) -> None:
        self.unit = unit
        self.console = stderr_console(stream, tty)
        self.tty = self.console.is_terminal
        self.every = every if every is not None else (0.1 if self.tty else 10.0)
        self.clock = clock
        if self.tty:
            self._progress = _rich_progress(self, width)
            self._task_id = self._progress.add_task(label, total=total)
            self._task = self._progress.tasks[0]
        else:  # plain lines: no rich
            self._progress = None
            self._task = _PlainTask(label, total, clock)
        self._last_draw = clock()
        self._drawn = False  # the live bar is on screen (TTY) or a line was printed (plain)
        self._closed = False

    @property
    def label(self) -> str:
        return self._task.description

    @label.setter
    def label(self, value: str) -> None:
        if self._progress is None:
            self._task.update(description=value)
        else:
            self._progress.update(self._task_id, description=value)

    @property
    def done(self) -> int:
        return int(self._task.completed)

    @property
    def total(self) -> int | None:
        return None if self._task.total is None else int(self._task.total)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int, total: int | None = None) -> None:
        """Set the amount done (and the total, when it became known); redraws when it is time to."""
        if self._progress is None:
            self._task.update(total=total, completed=done)
        else:
            if total is not None:
                self._progress.update(self._task_id, total=total)
            self._progress.update(self._task_id, completed=done)  # rich stops the task's clock at the total
        now = self.clock()
        if now - self._last_draw >= self.every:
            self._last_draw = now
            self._draw()

    def note(self, message: str) -> None:
        """A message line; on a terminal it is printed above the bar, which is redrawn after it."""
        write_line(self.console, message)

    def finish(self) -> None:
        """The work completed: count it all done, then close."""
        if self.total is not None:
            self.update(self.total)
        self.close()

    def close(self) -> None:
        """Final state: on a terminal the bar is completed and left on its line; in plain mode a last line is
        printed only if earlier lines were (a run too short to report stays silent)."""
        if self._closed:
            return
        self._closed = True
        if self.tty:
            self._draw()
            self._progress.stop()
        elif self._drawn:
            self._draw()

    def text(self) -> str:
        """The progress as one line of text (without the bar)."""
        task = self._task
        elapsed = task.finished_time if task.finished_time is not None else task.elapsed or 0.0
        elapsed = max(elapsed, 1e-9)
        done, total = self.done, self.total
        rate = done / elapsed
        suffix = f" {self.unit}" if self.unit and self.unit != "bytes" else ""
        parts = [f"{self.label}:"]
        if total:
            pct = min(100.0, 100.0 * done / total)
            parts.append(f"{self._amount(done)} / {self._amount(total)}{suffix} ({pct:.0f}%)")
        else:
            parts.append(f"{self._amount(done)}{suffix}")
        parts.append(f"{self._amount(rate)}/s" if self.unit == "bytes" else f"{rate:.1f}{suffix}/s")
        if total and rate > 0 and done < total:
            parts.append(f"ETA {_duration((total - done) / rate)}")
        else:
            parts.append(f"in {_duration(elapsed)}")
        return " ".join(parts)

    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.unit == "bytes" else f"{n:.0f}"

    def _draw(self) -> None:
        if self.tty:
            if not self._drawn:
                self._progress.start()  # rich's live display: drawn now, redrawn in place by refresh()
            else:
                self._progress.refresh()
        else:
            write_line(self.console, self.text())
        self._drawn = True


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
