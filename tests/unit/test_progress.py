"""The stderr progress bar: redrawn in place on a terminal, periodic plain lines otherwise, driven by a fake
clock (no timing in the tests)."""

from __future__ import annotations

import io
import re

import pytest

from binlake.progress import FilePositions, ProgressBar, human_bytes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_are_periodic_and_short_runs_stay_silent() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("stats", total=10 << 20, stream=out, tty=False, every=10, clock=clock)
    bar.update(1 << 20)
    clock.now += 5
    bar.update(2 << 20)
    assert out.getvalue() == ""  # nothing before `every` seconds
    clock.now += 5
    bar.update(5 << 20)
    assert out.getvalue() == "stats: 5.0 MB / 10.0 MB (50%) 512.0 KB/s ETA 10s\n"
    clock.now += 10
    bar.update(10 << 20)
    bar.close()
    bar.close()  # idempotent
    lines = out.getvalue().splitlines()
    assert lines[1:] == ["stats: 10.0 MB / 10.0 MB (100%) 512.0 KB/s in 20s"] * 2

    quiet = io.StringIO()
    with ProgressBar("stats", total=100, stream=quiet, tty=False, every=10, clock=clock) as short:
        short.update(100)
    assert quiet.getvalue() == ""


def _screen(output: str) -> list[str]:
    """The lines a terminal shows after `output`: carriage return, erase line and cursor up are applied, other
    control sequences (colours, cursor visibility) dropped."""
    lines, row, col = [""], 0, 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", output):
        if token == "\n":
            row, col = row + 1, 0
            lines.extend([""] * (row + 1 - len(lines)))
        elif token == "\r":
            col = 0
        elif token == "\x1b[2K":
            lines[row] = ""
        elif token == "\x1b[1A":
            row -= 1
        elif not token.startswith("\x1b"):
            lines[row] = lines[row][:col].ljust(col) + token + lines[row][col + len(token):]
            col += len(token)
    return [line for line in lines if line]


@pytest.fixture
def terminal_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A colour terminal as rich sees it (its colour and dumb-terminal choices come from the environment)."""
    monkeypatch.setenv("TERM", "xterm-256color")
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def test_terminal_bar_redraws_in_place_and_notes_do_not_break_it(terminal_env) -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("bootstrap", total=4, unit="chunks", stream=out, tty=True, every=0.1, clock=clock, width=8)
    clock.now += 1
    bar.update(1)
    assert _screen(out.getvalue()) == ["━━╺━━━━━ bootstrap: 1 / 4 chunks (25%) 1.0 chunks/s ETA 3s"]
    bar.note("[ingest] hello")  # printed as given (no markup), above the bar
    assert _screen(out.getvalue()) == ["[ingest] hello",
                                       "━━╺━━━━━ bootstrap: 1 / 4 chunks (25%) 1.0 chunks/s ETA 3s"]
    clock.now += 0.05
    bar.update(2)  # sooner than `every`: not redrawn
    assert _screen(out.getvalue())[-1].endswith("1 / 4 chunks (25%) 1.0 chunks/s ETA 3s")
    clock.now += 0.95
    bar.update(4)
    bar.close()
    text = out.getvalue()
    assert _screen(text) == ["[ingest] hello", "━━━━━━━━ bootstrap: 4 / 4 chunks (100%) 2.0 chunks/s in 2s"]
    assert text.endswith("\n\x1b[?25h")  # the bar ends its line and the cursor is shown again


def test_plain_mode_writes_lines_as_given() -> None:
    """No control codes, markup, emoji, wrapping or tab expansion off a terminal."""
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("decode [x]", total=1 << 40, stream=out, tty=False, every=0, clock=clock)
    bar.note("[ingest] hello :smile:\t[bold]x[/bold] https://example.invalid/" + "y" * 200)
    clock.now += 3
    bar.update(1 << 39)
    bar.close()
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
    line = "decode [x]: 512.0 GB / 1.0 TB (50%) 170.7 GB/s ETA 3s"
    assert out.getvalue().splitlines() == ["[ingest] hello :smile:\t[bold]x[/bold] https://example.invalid/" + "y" * 200,
                                           line, line]


def test_error_lines_are_plain_off_a_terminal_and_styled_on_one(terminal_env) -> None:
    from binlake.terminal import print_error

    plain = io.StringIO()
    print_error("binlake: error:", "cannot read [x]\t:smile: binlog.000001: No such file", plain)
    assert plain.getvalue() == "binlake: error: cannot read [x]\t:smile: binlog.000001: No such file\n"

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    print_error("binlake: error:", "cannot read [x]", tty)
    assert tty.getvalue().startswith("\x1b[1;31mbinlake: error:\x1b[0m cannot read [x]")
    assert _screen(tty.getvalue()) == ["binlake: error: cannot read [x]"]


def test_unknown_total_and_sizes() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("decode", stream=out, tty=False, every=0, clock=clock)
    clock.now += 2
    bar.update(3 << 30)
    assert out.getvalue() == "decode: 3.0 GB 1.5 GB/s in 2s\n"
    assert human_bytes(1023) == "1023 B" and human_bytes(1536) == "1.5 KB"


def test_file_positions_accumulate_across_files(tmp_path) -> None:
    a, b = tmp_path / "bin.000001", tmp_path / "bin.000002"
    a.write_bytes(b"x" * 100)
    b.write_bytes(b"y" * 50)
    bar = ProgressBar("decode", stream=io.StringIO(), tty=False, every=1e9, clock=Clock())
    where = FilePositions([str(a), str(b)], bar)
    assert (bar.done, bar.total) == (0, 150)
    where("bin.000001", 40)
    assert bar.done == 40
    where("bin.000002", 10)
    assert bar.done == 110
    where("bin.000002", 5000)  # a gzip file's uncompressed offsets: capped at the file
    assert bar.done == 150
    where("other.000009", 7)  # not one of the files: ignored
    assert bar.done == 150


def test_time_and_rate_stop_at_completion() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("ingest decode", total=100, unit="bytes", stream=out, tty=False, every=0, clock=clock)
    clock.now += 4
    bar.update(100)
    clock.now += 6  # merging and committing: the decode bar stays as it was
    bar.note("[ingest] committed")
    bar.finish()
    lines = out.getvalue().splitlines()
    assert lines[1] == "[ingest] committed"
    assert set(lines[:1] + lines[2:]) == {"ingest decode: 100 B / 100 B (100%) 25 B/s in 4s"}
