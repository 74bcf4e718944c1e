"""The README's main command: `binlake demo` writes binlogs with an ALTER mid-stream, ingests, traces."""

from __future__ import annotations

from binlake.cli import main


def test_demo_ingests_and_traces(tmp_path, capsys, mariadb_servers) -> None:
    code = main(["demo", "--workdir", str(tmp_path / "demo")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "shop.customers               3" in out
    assert "shop.customers__history      7" in out
    assert "shop.all_types__history      67" in out  # every lake table is counted, history included
    # The row inserted after `ALTER ... MODIFY city ... AFTER id` keeps city and name apart.
    assert "{'id': 40, 'city': 'Zürich', 'name': 'Linus'" in out
    trace = [line for line in out.splitlines() if " at mysql-bin." in line]
    assert len(trace) == 2 and "insert" in trace[0] and "'4 -> 40'" in trace[1]
    assert "running ingest again: nothing new to ingest" in out
    assert (tmp_path / "demo" / "lake" / "shop" / "customers" / "_delta_log").is_dir()
