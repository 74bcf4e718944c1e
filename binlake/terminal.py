"""Messages on the terminal through `rich`: a Console on stderr that writes text as given, the one-line error, and
reports (`binlake ingest`, `binlake stats`) as rich tables on a terminal.

Off a terminal (logs, CI, pipes) lines are written exactly as given, with no control codes; rich is only asked to
style them on a terminal (it would expand tabs and drop control characters, which logs must keep). A report sent
to a pipe or a file stays the plain text scripts parse.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from rich.console import Console, RenderableType
from rich.text import Text


def stderr_console(stream: TextIO | None = None, tty: bool | None = None) -> Console:
    """A rich Console on `stream` (stderr by default) that writes text as given: no markup, highlighting, emoji or
    wrapping, and no control codes unless it is a terminal (`tty`, by default the stream's isatty())."""
    if tty is None:
        target = stream if stream is not None else sys.stderr
        tty = bool(getattr(target, "isatty", lambda: False)())
    return Console(file=stream, stderr=stream is None, force_terminal=tty, markup=False, highlight=False,
                   emoji=False, soft_wrap=True)


def stdout_console(stream: TextIO | None = None, tty: bool | None = None) -> Console:
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


def write_line(console: Console, line: str) -> None:
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
        console.print(Text.assemble((prefix, "bold red"), " ", message))
    else:
        write_line(console, f"{prefix} {message}")
