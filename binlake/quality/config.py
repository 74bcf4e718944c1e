"""The user expectations file (`schemas/expectations.yml`); the gate settings themselves (`QualityConfig`) are in
`binlake.settings`.

The expectations file maps `db.table` to a list of Great Expectations expectations, each written as its GE name
(snake case, as in GE's gallery) plus its keyword arguments; see schemas/expectations.md:

    tables:
      shop.orders:
        - expect_column_values_to_be_between: {column: amount, min_value: 0, max_value: 100000}
        - expect_column_values_to_be_in_set: {column: status, value_set: [new, paid, shipped]}

They are applied in the before-merge gate to the batch's rows (the row after each insert/update; deletes are
left out, the deleted row is no longer data the table holds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .runner import ensure_context


class ExpectationsFileError(ValueError):
    """The user expectations file is malformed (names the file and the entry)."""


@dataclass(frozen=True)
class UserExpectation:
    table: str
    name: str  # GE snake-case name, e.g. expect_column_values_to_be_between
    kwargs: dict[str, Any]


def load_expectations(path: str | None) -> dict[str, list[UserExpectation]]:
    """`db.table` -> the user's expectations for it. YAML (.yml/.yaml) or JSON; validated against GE."""
    if not path:
        return {}
    p = Path(path)
    if not p.exists():
        raise ExpectationsFileError(f"expectations file {p} does not exist")
    text = p.read_text()
    try:
        if p.suffix in (".yml", ".yaml"):
            from ruamel.yaml import YAML  # a Great Expectations dependency: present wherever gates run

            doc = YAML(typ="safe", pure=True).load(text) or {}
        else:
            doc = json.loads(text)
    except Exception as exc:
        kind = "YAML" if p.suffix in (".yml", ".yaml") else "JSON"
        raise ExpectationsFileError(f"{p}: not valid {kind}: {exc}") from None
    tables = doc.get("tables") if isinstance(doc, dict) else None
    if not isinstance(tables, dict):
        raise ExpectationsFileError(f"{p}: expected a top-level 'tables:' mapping of db.table to a list")
    out: dict[str, list[UserExpectation]] = {}
    for table, entries in tables.items():
        if "." not in str(table):
            raise ExpectationsFileError(f"{p}: table key {table!r} must be db.table")
        if not isinstance(entries, list):
            raise ExpectationsFileError(f"{p}: tables.{table} must be a list of expectations")
        for i, entry in enumerate(entries):
            where = f"{p}: tables.{table}[{i}]"
            if not isinstance(entry, dict) or len(entry) != 1:
                raise ExpectationsFileError(f"{where}: each entry is one 'expect_...: {{kwargs}}' mapping")
            (name, kwargs), = entry.items()
            if not isinstance(kwargs, dict):
                raise ExpectationsFileError(f"{where}: arguments of {name} must be a mapping")
            try:  # fail now, not at the first batch
                expectation_class(name, where)(**kwargs)
            except ExpectationsFileError:
                raise
            except Exception as exc:
                raise ExpectationsFileError(f"{where}: {name}: invalid arguments {kwargs}: {exc}") from None
            out.setdefault(str(table), []).append(UserExpectation(str(table), str(name), dict(kwargs)))
    return out


def expectation_class(name: str, where: str = "") -> type:
    """The GE expectation class for a snake-case name (expect_column_values_to_be_between)."""
    import great_expectations as gx

    ensure_context()
    camel = "".join(part.capitalize() for part in str(name).split("_"))
    cls = getattr(gx.expectations, camel, None)
    if not str(name).startswith("expect_") or cls is None:
        raise ExpectationsFileError(f"{where}: {name!r} is not a Great Expectations expectation")
    return cls
