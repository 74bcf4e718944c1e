"""The errors of anything that lists, reads or writes files in a store or a source (re-exported by
binlake.sources.base)."""

from __future__ import annotations

from ..exitcodes import ExitCode


class SourceError(RuntimeError):
    """A source could not list or deliver a file; names the source and the file."""

    exit_code = ExitCode.UNAVAILABLE


class SourceConfigError(SourceError, ValueError):
    """The source is named or configured wrongly (unknown kind, no instance, no credentials, a bad option)."""

    exit_code = ExitCode.USAGE
