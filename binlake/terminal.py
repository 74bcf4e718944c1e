"""Messages on the terminal through `rich`: a Console on stderr that writes text as given, the one-line error, and
reports (`binlake ingest`, `binlake stats`) as rich tables on a terminal.

Off a terminal (logs, CI, pipes) lines are written exactly as given, with no control codes; rich is only asked to
style them on a terminal (it would expand tabs and drop control characters, which logs must keep). A report sent
to a pipe or a file stays the plain text scripts parse. rich itself is imported only for a terminal (its import
costs about 0.03 s of CPU, a tenth of a short `binlake stats` run).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console, RenderableType


class PlainConsole:
    """What binlake uses of a rich Console off a terminal: `is_terminal` (False) and `file` (the stream, or stderr
    as it is when written to)."""

    is_terminal = False

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    @property
    def file(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr


def stderr_console(stream: TextIO | None = None, tty: bool | None = None) -> Console | PlainConsole:
    """A rich Console on `stream` (stderr by default) that writes text as given: no markup, highlighting, emoji or
    wrapping, and no control codes unless it is a terminal (`tty`, by default the stream's isatty()); off a
    terminal a PlainConsole (lines are written as given there, without rich)."""
    if tty is None:
        target = stream if stream is not None else sys.stderr
        tty = bool(getattr(target, "isatty", lambda: False)())
    if not tty:
        return PlainConsole(stream)
    from rich.console import Console

    return Console(file=stream, stderr=stream is None, force_terminal=tty, markup=False, highlight=False,
                   emoji=False, soft_wrap=True)


def stdout_console(stream: TextIO | None = None, tty: bool | None = None) -> Console | PlainConsole:
    """Like stderr_console, on stdout (the stream as it is now: tests and callers may have replaced it)."""
    return stderr_console(stream if stream is not None else sys.stdout, tty)


def print_report(text: str, view: Callable[[], RenderableType], stream: TextIO | None = None,
                 tty: bool | None = None) -> None:
    """A report on stdout: on a terminal `view()` (rich tables), otherwise `text` exactly as given."""
    console = stdout_console(stream, tty)
    if console.is_terminal:
        console.print(view())
    else:
        write_line(console, text)


def write_line(console: Console | PlainConsole, line: str) -> None:
    """`line` and a newline: styled by rich on a terminal (above a live progress bar, if one is shown), as given
    otherwise."""
    if console.is_terminal:
        console.print(line)
    else:
        console.file.write(line + "\n")
        console.file.flush()


def print_error(prefix: str, message: str, stream: TextIO | None = None) -> None:
    """`{prefix} {message}` on one line, e.g. `binlake: error: ...`; on a terminal the prefix is bold red."""
    console = stderr_console(stream)
    if console.is_terminal:
        from rich.text import Text

        console.print(Text.assemble((prefix, "bold red"), " ", message))
    else:
        write_line(console, f"{prefix} {message}")
