"""The `binlake ...` command lines quoted in the operator docs use subcommands and options that exist; the full
commands of the pages' shell blocks parse with the real command-line parser, so the pages cannot drift from it."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from binlake.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["docs/playbook.md", "docs/analysts.md", "docs/sizing.md", "docs/comparison.md", "docker/README.md",
         "README.md", "docs/decoder.md", "docs/lake.md", "docs/sources.md", "docs/cli.md", "docs/speed.md", "docs/airflow.md",
         "docs/kafka.md"]
PLACEHOLDERS = {"BATCH": "7", "POS": "4", "START": "2026-01-15T00:00:00Z", "END": "2026-01-15T01:00:00Z"}


def _clean(cmd: str) -> list[str]:
    cmd = re.sub(r"\[[^\]]*\]", "", cmd.replace("\\|", "|")).split("|")[0].strip()  # optional parts and pipes are not the command
    return [PLACEHOLDERS.get(a, a) for a in shlex.split(cmd)[1:]]


def inline_commands(page: str) -> list[list[str]]:
    return [_clean(c) for c in re.findall(r"`(binlake [^`]+)`", (ROOT / page).read_text())]


def block_commands(page: str) -> list[list[str]]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", (ROOT / page).read_text(), re.S):
        for m in re.finditer(r"(?:\.venv/bin/|exec \w+ )(binlake [^\n#]+)", block.replace("\\\n", " ")):
            out.append(_clean(m.group(1)))
    return out


def subparser_for(argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The innermost subcommand parser named by argv, and the remaining arguments."""
    parser, rest = build_parser(), list(argv)
    while rest:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or rest[0] not in subs[0].choices:
            break
        parser = subs[0].choices[rest.pop(0)]
    return parser, rest


@pytest.mark.parametrize("page", PAGES)
def test_quoted_options_exist(page: str) -> None:
    cmds = inline_commands(page) + block_commands(page)
    assert cmds, f"{page} quotes no binlake command"
    top = build_parser()
    names = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices
    for argv in cmds:
        assert argv and argv[0] in names, f"{page}: `binlake {' '.join(argv)}`: no such subcommand"
        parser, rest = subparser_for(argv)
        for token in rest:
            option = token.split("=", 1)[0]
            if option.startswith("--"):
                assert option in parser._option_string_actions, f"{page}: `{parser.prog}` has no {option}"
        # a quoted command may leave out required arguments, but what it gives must be in the right places
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
            build_parser().parse_args(argv)
        assert "unrecognized arguments" not in err.getvalue(), f"{page}: `binlake {' '.join(argv)}`: {err.getvalue()}"
        assert "invalid" not in err.getvalue(), f"{page}: `binlake {' '.join(argv)}`: {err.getvalue()}"


@pytest.mark.parametrize("page", [p for p in PAGES if block_commands(p)])
def test_shell_block_commands_parse(page: str) -> None:
    for argv in block_commands(page):
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:
            pytest.fail(f"{page}: `binlake {' '.join(argv)}` does not parse")
        assert getattr(args, "func", None)
