"""Exit codes of the `binlake` command line, in one place (no imports: any layer may use them).

An exception can choose its own code by carrying an `exit_code` class attribute holding one of these; the
command line uses it before falling back to the exception's type (see `binlake.cli.exit_code_for`).
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    #: `binlake trace` found no change of the row (like grep finding nothing); never an error.
    NOT_FOUND = 1
    #: Bad arguments or configuration: unknown option or value, a path that does not exist or is the wrong kind
    #: (a directory for a file, a file for the lake), an unknown source scheme, missing credentials, a refused query.
    USAGE = 2
    #: A quality gate held a batch (or some tables) back: quarantined, the lake's current tables did not take it.
    QUARANTINED = 3
    #: The input data is bad: a corrupt, truncated or non-binlog file, a corrupt gzip body, a change that cannot be
    #: written in the requested format.
    BAD_DATA = 4
    #: A rows event does not match the schema version valid at its position (`SchemaMismatch`).
    SCHEMA_MISMATCH = 5
    #: Something outside binlake failed or refused: a source or server that cannot be reached or answers with an
    #: error, a permission denied, a read-only or full disk.
    UNAVAILABLE = 6
    #: A bug or an unexpected condition: a one-line message; the traceback with --debug or BINLAKE_DEBUG=1.
    INTERNAL = 70
    #: Interrupted (Ctrl-C, SIGINT): 128 + 2, as the shell reports it.
    INTERRUPTED = 130
    #: Standard output was closed early (`binlake ... | head -1`): quiet, as a process killed by SIGPIPE (128+13).
    BROKEN_PIPE = 141


class UsageError(Exception):
    """A bad argument, path or setting; the message names it (one line)."""

    exit_code = ExitCode.USAGE


class UnavailableError(Exception):
    """Something outside binlake cannot be used (unreachable, permission denied, read-only); names it."""

    exit_code = ExitCode.UNAVAILABLE
