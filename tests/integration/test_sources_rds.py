"""The RDS source against the local RDS OpenAPI server, driven only through the real SDK (alibabacloud_rds20140815)
and plain HTTP: listing across pages and windows, signatures, throttling, downloads with dropped connections,
expired links, .tar packing, wrong checksums, a primary/standby switch continued by GTIDs, and `binlake ingest
--source rds:...` end to end on files a private MariaDB wrote."""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from binlake.binlog.api import iter_changes
from binlake.binlog.decoder import BinlogDecoder
from binlake.binlog.records import RowChange
from binlake.lake.control import ControlTable
from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest
from binlake.sources import open_source
from binlake.sources.base import ChecksumMismatchError, SourceError
from binlake.sources.checksum import crc64_bytes
from binlake.sources.fetch import land_files
from binlake.sources.http import RetryPolicy
from binlake.sources.rds import RdsApiError, RdsSource
from binlake.testing.binlog_writer import BinlogWriter, column
from binlake.testing.rds_server import LocalRdsServer

INSTANCE = "rm-binlake0test"
T0 = datetime(2024, 5, 1, tzinfo=UTC)
FAST = RetryPolicy(attempts=5, backoff=0.01, max_backoff=0.05)


@pytest.fixture
def rds():
    with LocalRdsServer() as server:
        yield server


def make_source(rds: LocalRdsServer, **kw) -> RdsSource:
    kw.setdefault("policy", FAST)
    return RdsSource(INSTANCE, endpoint=f"http://{rds.endpoint}", access_key_id=rds.access_key_id,
                     access_key_secret=rds.access_key_secret, **kw)


def sample_binlog(rows: int = 2000, ts: int = 1714521600, name_seed: int = 0) -> bytes:
    """A MySQL-format binlog of `rows` inserts in 20 transactions (a few hundred KB)."""
    out = io.BytesIO()
    w = BinlogWriter(out, timestamp=ts)
    w.query("CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(200))", database="shop", timestamp=ts)
    t = w.define_table(1, "shop", "t", [column("int", "id", 0), column("varchar(200)", "note", 1)], [0])
    per = rows // 20
    for k in range(20):
        with w.transaction(timestamp=ts + k) as tx:
            tx.insert(t, [[name_seed + k * per + i, f"row {k * per + i} " + "x" * 100] for i in range(per)])
    w.stop(timestamp=ts + 30)
    return out.getvalue()


# -- listing ------------------------------------------------------------------------------------------------------


def test_listing_pages_through_every_page_and_cuts_windows_exactly_once(rds) -> None:
    for i in range(75):
        for host in ("1001", "1002"):  # primary and standby copies: same names, two lineages
            rds.add_file(INSTANCE, host, f"mysql-bin.{i + 1:06d}", b"\xfebin" + bytes([i]) * 10,
                         begin=T0 + timedelta(hours=i), end=T0 + timedelta(hours=i, minutes=59, seconds=59))
    src = make_source(rds, page_size=30)
    everything = src.list_all()
    assert len(everything) == 150 == len({(f.lineage, f.name) for f in everything})
    assert rds.api_calls == [("DescribeBinlogFiles", "OK")] * 5  # 150 records, 30 a page

    f = everything[0]
    assert set(f.extra) >= {"LogFileName", "FileSize", "LogBeginTime", "LogEndTime", "DownloadLink",
                            "IntranetDownloadLink", "LinkExpiredTime", "Checksum", "HostInstanceID", "RemoteStatus"}
    assert f.location == f.extra["IntranetDownloadLink"] and "/intranet/" in f.location
    assert f.checksum == crc64_bytes(b"\xfebin" + bytes([0]) * 10) and f.size == 14

    # Windows that start and end inside files: the straddling files are in, once; seconds at the edge count.
    src.lineage = "1001"
    w1 = src.list_files(T0 + timedelta(hours=10, minutes=30), T0 + timedelta(hours=40, minutes=30))
    assert [x.seq for x in w1] == list(range(11, 42))
    w2 = src.list_files(T0 + timedelta(hours=40, minutes=30), T0 + timedelta(hours=75))
    assert [x.seq for x in w2] == list(range(41, 76))
    # A window ending exactly where a file begins leaves it out; one starting at a file's last second keeps it.
    edge = src.list_files(T0 + timedelta(hours=4, minutes=59, seconds=59), T0 + timedelta(hours=6))
    assert [x.seq for x in edge] == [5, 6]
    sub_second = src.list_files(T0 + timedelta(hours=6, microseconds=500_000), T0 + timedelta(hours=6, seconds=1))
    assert [x.seq for x in sub_second] == [7]


def test_a_file_straddling_two_windows_is_fetched_and_ingested_once(rds, tmp_path) -> None:
    base = 1714521600
    datas = [sample_binlog(100, ts=base + 3600 * i, name_seed=1000 * i) for i in range(3)]
    for i, data in enumerate(datas):  # file 2 spans 01:00-02:30, across the 02:00 boundary
        rds.add_file(INSTANCE, "1001", f"mysql-bin.{i + 1:06d}", data, begin=T0 + timedelta(hours=i),
                     end=T0 + timedelta(hours=i, minutes=30 if i != 1 else 90))
    lake, landing = tmp_path / "lake", str(tmp_path / "landing")
    rows = 0
    for lo, hi in ((T0, T0 + timedelta(hours=2)), (T0 + timedelta(hours=2), T0 + timedelta(hours=4))):
        landed = land_files(make_source(rds), landing, lo, hi, lake=str(lake))
        summary = run_ingest(IngestOptions(lake=str(lake), files=landed.paths, instance=INSTANCE,
                                           lineage=landed.lineage))
        rows += sum(summary.rows.values())
    assert sorted(d["name"] for d in rds.downloads) == ["mysql-bin.000001", "mysql-bin.000002", "mysql-bin.000003"]
    assert rows == 300
    assert get_engine().read(LakeLayout(str(lake)).history_path("shop", "t")).num_rows == 300


def test_listing_pages_again_when_the_list_moves_while_paging(rds) -> None:
    for i in range(40):
        rds.add_file(INSTANCE, "1001", f"mysql-bin.{i + 1:06d}", b"\xfebin", begin=T0 + timedelta(hours=i),
                     end=T0 + timedelta(hours=i, minutes=30))
    original = rds.describe_binlog_files

    def shifting(params):  # a new file arrives (sorted first) right after page 1 was served
        body = original(params)
        if params.get("PageNumber") == "1" and not any(f.name == "mysql-bin.000000" for f in rds.files):
            rds.add_file(INSTANCE, "1001", "mysql-bin.000000", b"\xfebin", begin=T0 - timedelta(hours=1),
                         end=T0 - timedelta(minutes=30))
        return body

    rds.describe_binlog_files = shifting
    files = make_source(rds, page_size=30).list_all()
    assert [f.seq for f in files] == list(range(41))
    assert len(rds.api_calls) == 4  # two pages, then both again


def test_bad_signatures_and_unknown_keys_are_refused_with_the_api_error(rds) -> None:
    rds.add_file(INSTANCE, "1001", "mysql-bin.000001", sample_binlog(100))
    bad = RdsSource(INSTANCE, endpoint=f"http://{rds.endpoint}", access_key_id=rds.access_key_id,
                    access_key_secret="not-the-secret", policy=FAST)
    with pytest.raises(RdsApiError) as err:
        bad.list_all()
    assert err.value.code == "SignatureDoesNotMatch" and err.value.status == 400
    assert "not-the-secret" not in str(err.value) and "not-the-secret" not in repr(bad)
    unknown = RdsSource(INSTANCE, endpoint=f"http://{rds.endpoint}", access_key_id="LTAI-nobody",
                        access_key_secret=rds.access_key_secret, policy=FAST)
    with pytest.raises(RdsApiError) as err:
        unknown.list_all()
    assert err.value.code == "InvalidAccessKeyId.NotFound"
    assert [c for _, c in rds.api_calls] == ["SignatureDoesNotMatch", "InvalidAccessKeyId.NotFound"]  # no retries
    assert [f.name for f in make_source(rds).list_all()] == ["mysql-bin.000001"]


def test_replayed_nonces_and_stale_dates_are_refused(rds, monkeypatch) -> None:
    from alibabacloud_tea_openapi.utils import Utils

    rds.add_file(INSTANCE, "1001", "mysql-bin.000001", sample_binlog(100))
    src = make_source(rds)
    monkeypatch.setattr(Utils, "get_nonce", staticmethod(lambda: "same-nonce-every-time"))
    assert len(src.list_all()) == 1
    with pytest.raises(RdsApiError) as err:
        src.list_all()
    assert err.value.code == "SignatureNonceUsed"
    monkeypatch.undo()
    monkeypatch.setattr(Utils, "get_timestamp", staticmethod(lambda: "2020-01-01T00:00:00Z"))
    with pytest.raises(RdsApiError) as err:
        src.list_all()
    assert err.value.code == "InvalidTimeStamp.Expired"


def test_throttling_and_5xx_are_retried_other_errors_are_not(rds) -> None:
    rds.add_file(INSTANCE, "1001", "mysql-bin.000001", sample_binlog(100))
    rds.faults.throttle, rds.faults.unavailable = 2, 1
    assert len(make_source(rds).list_all()) == 1
    assert [c for _, c in rds.api_calls] == ["Throttling", "Throttling", "ServiceUnavailable", "OK"]

    rds.api_calls.clear()
    rds.faults.throttle = 10
    with pytest.raises(SourceError, match="giving up after 5 attempts: Throttling"):
        make_source(rds).list_all()
    rds.faults.throttle = 0

    rds.api_calls.clear()
    with pytest.raises(RdsApiError) as err:
        RdsSource("rm-nothere", endpoint=f"http://{rds.endpoint}", access_key_id=rds.access_key_id,
                  access_key_secret=rds.access_key_secret, policy=FAST).list_all()
    assert err.value.code == "InvalidDBInstanceId.NotFound" and len(rds.api_calls) == 1


def test_credentials_come_from_the_environment(rds, monkeypatch) -> None:
    rds.add_file(INSTANCE, "1001", "mysql-bin.000001", sample_binlog(100))
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", rds.access_key_id)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", rds.access_key_secret)
    src = open_source(f"rds:{INSTANCE}", endpoint=f"http://{rds.endpoint}", policy=FAST)
    assert [f.name for f in src.list_files()] == ["mysql-bin.000001"]
    monkeypatch.delenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET")
    with pytest.raises(SourceError, match="no credentials"):
        open_source(f"rds:{INSTANCE}", endpoint=f"http://{rds.endpoint}")


# -- downloads ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "tar"])
def test_download_resumes_after_drops_and_verifies(rds, tmp_path, packed) -> None:
    data = sample_binlog()
    served = rds.add_file(INSTANCE, "1001", "mysql-bin.000007", data, tar=packed)
    rds.faults.drops["mysql-bin.000007"] = [1000, 50_000, 7]
    src = make_source(rds)
    [f] = src.list_files()
    assert f.size == len(served.payload) and f.extra["packed"] is packed
    path = Path(src.fetch(f, str(tmp_path / "landing")))
    assert path == tmp_path / "landing" / INSTANCE / "1001" / "mysql-bin.000007"
    assert path.read_bytes() == data
    assert [(d["start"], d["status"], d["flavour"]) for d in rds.downloads] == [
        (0, 200, "intranet"), (1000, 206, "intranet"), (51_000, 206, "intranet"), (51_007, 206, "intranet")]
    assert not list(path.parent.glob(".*part"))
    # A second fetch finds the verified file and downloads nothing.
    assert Path(src.fetch(f, str(tmp_path / "landing"))) == path and len(rds.downloads) == 4

    public = make_source(rds, public_link=True)
    [g] = public.list_files()
    assert Path(public.fetch(g, str(tmp_path / "public"))).read_bytes() == data
    assert rds.downloads[-1]["flavour"] == "public"


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "tar"])
def test_open_decodes_straight_from_the_http_stream(rds, tmp_path, packed) -> None:
    data = sample_binlog(600)
    rds.add_file(INSTANCE, "1001", "mysql-bin.000003", data, tar=packed)
    rds.faults.drops["mysql-bin.000003"] = [30_000]
    local = tmp_path / "mysql-bin.000003"
    local.write_bytes(data)
    expected = [(c.pos, c.row, c.after) for c in iter_changes([local])]
    src = make_source(rds)
    [f] = src.list_files()
    with src.open(f) as stream:
        got = [(c.pos, c.row, c.after) for c in BinlogDecoder().decode_stream(stream, f.name)]
    assert got == expected and len(expected) == 600
    assert len(rds.downloads) == 2 and not list(tmp_path.glob("**/*.part"))


def test_open_reports_a_wrong_checksum_at_the_end_of_the_stream(rds) -> None:
    rds.add_file(INSTANCE, "1001", "mysql-bin.000005", sample_binlog(200))
    rds.faults.wrong_checksum.add("mysql-bin.000005")
    src = make_source(rds)
    [f] = src.list_files()
    with src.open(f) as stream, pytest.raises(ChecksumMismatchError, match=r"mysql-bin\.000005: CRC-64"):
        for _ in BinlogDecoder().decode_stream(stream, f.name):
            pass


def test_expired_link_is_refreshed_through_the_api(rds, tmp_path) -> None:
    data = sample_binlog(300)
    rds.add_file(INSTANCE, "1001", "mysql-bin.000002", data)
    src = make_source(rds)
    [f] = src.list_files()
    first_link = f.location
    calls = len(rds.api_calls)
    rds.advance_clock(2 * rds.link_ttl)  # the listed link is past its LinkExpiredTime now
    assert Path(src.fetch(f, str(tmp_path))).read_bytes() == data
    assert [d["status"] for d in rds.downloads] == [403, 200]
    assert len(rds.api_calls) == calls + 1 and f.location != first_link

    # Expiring in the middle of a download: resumes at the same byte with the fresh link.
    rds.add_file(INSTANCE, "1001", "mysql-bin.000004", data)
    [g] = [x for x in src.list_files() if x.name == "mysql-bin.000004"]
    rds.downloads.clear()
    rds.faults.drops["mysql-bin.000004"] = [20_000]
    rds.faults.expire_on_drop = True
    assert Path(src.fetch(g, str(tmp_path))).read_bytes() == data
    assert [(d["start"], d["status"]) for d in rds.downloads] == [(0, 200), (20_000, 403), (20_000, 206)]


def test_wrong_checksum_is_rejected_and_the_file_marked(rds, tmp_path) -> None:
    good, bad = sample_binlog(200, ts=1714521600), sample_binlog(200, ts=1714521700, name_seed=10_000)
    rds.add_file(INSTANCE, "1001", "mysql-bin.000001", good)
    rds.add_file(INSTANCE, "1001", "mysql-bin.000002", bad)
    rds.faults.wrong_checksum.add("mysql-bin.000002")
    lake = tmp_path / "lake"
    with pytest.raises(ChecksumMismatchError, match=r"mysql-bin\.000002: CRC-64 of the downloaded bytes"):
        land_files(make_source(rds), str(tmp_path / "landing"), lake=str(lake))
    states = ControlTable(get_engine(), LakeLayout(str(lake))).load()
    marked = states[(INSTANCE, "1001", "mysql-bin.000002")]
    assert marked.status == "quarantined" and "CRC-64" in marked.last_error and not marked.complete
    assert (INSTANCE, "1001", "mysql-bin.000001") not in states  # nothing recorded for a run that failed
    landing = tmp_path / "landing" / INSTANCE / "1001"
    assert sorted(p.name for p in landing.iterdir()) == ["mysql-bin.000001", "mysql-bin.000001.source.json"]

    # Once the source serves a matching checksum, the same run lands both and ingest takes them.
    rds.faults.wrong_checksum.clear()
    landed = land_files(make_source(rds), str(tmp_path / "landing"), lake=str(lake))
    assert [Path(p).read_bytes() for p in landed.paths] == [good, bad]
    # What the source announced is on the control rows of files it did not know yet (the marked one stays marked
    # until ingest takes it).
    states = ControlTable(get_engine(), LakeLayout(str(lake))).load()
    fetched = states[(INSTANCE, "1001", "mysql-bin.000001")]
    assert (fetched.status, fetched.checksum, fetched.size) == ("fetched", crc64_bytes(good), len(good))
    assert fetched.first_ts is not None and fetched.last_ts >= fetched.first_ts
    summary = run_ingest(IngestOptions(lake=str(lake), files=landed.paths, instance=INSTANCE,
                                       lineage=landed.lineage))
    assert sum(summary.rows.values()) == 400
    states = ControlTable(get_engine(), LakeLayout(str(lake))).load()
    assert states[(INSTANCE, "1001", "mysql-bin.000002")].status != "quarantined"


# -- lineages -----------------------------------------------------------------------------------------------------

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "5b3c0b7a-0c5e-11ef-8f2b-0242ac120002"


def _lineage_files(tmp_path: Path) -> dict[str, list[tuple[str, bytes]]]:
    """Primary 1001 writes A:1-11; standby 1002 replicates them into its own files, is promoted, writes B:1-4."""
    cols = [column("int", "id", 0), column("int", "v", 1)]
    ts = 1714521600

    def work(w: BinlogWriter, t, step: int, base: int) -> None:
        if step == 0:
            w.query("CREATE TABLE t (id INT PRIMARY KEY, v INT)", database="shop", timestamp=base)
        elif step <= 5:
            with w.transaction(timestamp=base + step) as tx:
                tx.insert(t, [[step, step * 10]])
        else:
            with w.transaction(timestamp=base + step) as tx:
                tx.update(t, [([step - 5, (step - 5) * 10], [step - 5, (step - 5) * 10 + 1])])

    out: dict[str, list[tuple[str, bytes]]] = {"1001": [], "1002": []}
    # Primary: mysql-bin.000001 = A:1-6, mysql-bin.000002 = A:7-11.
    b1, b2 = io.BytesIO(), io.BytesIO()
    w = BinlogWriter(b1, server_id=1, start_gtid=f"{UUID_A}:1", timestamp=ts)
    t = w.define_table(1, "shop", "t", cols, [0])
    for step in range(6):
        work(w, t, step, ts)
    w.rotate("mysql-bin.000002", b2, timestamp=ts + 6)
    for step in range(6, 11):
        work(w, t, step, ts)
    w.stop(timestamp=ts + 11)
    out["1001"] = [("mysql-bin.000001", b1.getvalue()), ("mysql-bin.000002", b2.getvalue())]
    # Standby: mysql-bin.000011 = A:1-4, mysql-bin.000012 = A:5-11 then (promoted) B:1-2, mysql-bin.000013 = B:3-4.
    s1, s2, s3 = io.BytesIO(), io.BytesIO(), io.BytesIO()
    w = BinlogWriter(s1, server_id=2, start_gtid=f"{UUID_A}:1", timestamp=ts)
    t = w.define_table(1, "shop", "t", cols, [0])
    for step in range(4):
        work(w, t, step, ts)
    w.rotate("mysql-bin.000012", s2, timestamp=ts + 4)
    for step in range(4, 11):
        work(w, t, step, ts)
    w.sid, w.next_gno = uuid.UUID(UUID_B), 1
    with w.transaction(timestamp=ts + 100) as tx:
        tx.insert(t, [[6, 60]])
    with w.transaction(timestamp=ts + 101) as tx:
        tx.update(t, [([1, 11], [1, 12])])
    w.rotate("mysql-bin.000013", s3, timestamp=ts + 102)
    with w.transaction(timestamp=ts + 103) as tx:
        tx.insert(t, [[7, 70]])
    with w.transaction(timestamp=ts + 104) as tx:
        tx.delete(t, [[2, 21]])
    w.stop(timestamp=ts + 105)
    out["1002"] = [("mysql-bin.000011", s1.getvalue()), ("mysql-bin.000012", s2.getvalue()),
                   ("mysql-bin.000013", s3.getvalue())]
    return out


def _current(lake: Path) -> dict:
    rows = get_engine().read(LakeLayout(str(lake)).current_path("shop", "t")).to_pylist()
    return {r["id"]: r["v"] for r in rows}


def test_lineage_is_pinned_and_a_switch_continues_from_the_applied_gtids(rds, tmp_path) -> None:
    files = _lineage_files(tmp_path)
    for name, data in files["1001"]:
        rds.add_file(INSTANCE, "1001", name, data)
    s1, s2, s3 = files["1002"]
    rds.add_file(INSTANCE, "1002", *s1)
    lake, landing = tmp_path / "lake", str(tmp_path / "landing")
    ts = datetime.fromtimestamp(1714521600, UTC)

    # Run 1: both lineages listed; the primary (newest file ends last) is pinned and ingested, alone.
    first = land_files(make_source(rds), landing, ts - timedelta(hours=1), ts + timedelta(seconds=20),
                       lake=str(lake))
    assert first.lineage == "1001" and [Path(p).name for p in first.paths] == ["mysql-bin.000001",
                                                                              "mysql-bin.000002"]
    run_ingest(IngestOptions(lake=str(lake), files=first.paths, instance=INSTANCE, lineage=first.lineage))
    assert _current(lake) == {1: 11, 2: 21, 3: 31, 4: 41, 5: 51}
    states = ControlTable(get_engine(), LakeLayout(str(lake))).load()
    assert {k[1] for k in states} == {"1001"}

    # The primary fails over: the standby (promoted) has its copy of A:5-11 and new transactions B:1-4.
    rds.add_file(INSTANCE, "1002", *s2, begin=ts + timedelta(seconds=4), end=ts + timedelta(seconds=102))
    rds.add_file(INSTANCE, "1002", *s3)
    window = (ts + timedelta(seconds=30), ts + timedelta(hours=1))
    # Still pinned: the 1001 lineage is what was ingested, and an explicit choice wins.
    assert {f.lineage for f in make_source(rds, lineage="1001").list_files(*window)} == set()
    second = land_files(make_source(rds), landing, *window, lake=str(lake))
    assert second.lineage == "1002" and second.switched_from == "1001"
    assert [Path(p).name for p in second.paths] == ["mysql-bin.000012", "mysql-bin.000013"]
    assert second.continuation.start_index == 0 and second.continuation.start_pos > 4
    summary = run_ingest(IngestOptions(lake=str(lake), files=second.paths, instance=INSTANCE,
                                       lineage=second.lineage))
    # Only B:1-4 were applied: 2 inserts, 1 update, 1 delete; A:5-11 in 000012 were not applied twice.
    assert sum(summary.rows.values()) == 4
    assert _current(lake) == {1: 12, 3: 31, 4: 41, 5: 51, 6: 60, 7: 70}
    history = get_engine().read(LakeLayout(str(lake)).history_path("shop", "t"))
    assert history.num_rows == 5 + 5 + 4
    assert run_ingest(IngestOptions(lake=str(lake), files=second.paths, instance=INSTANCE,
                                    lineage="1002")).batch is None


def test_lineage_switch_refuses_a_diverged_standby(rds, tmp_path) -> None:
    files = _lineage_files(tmp_path)
    for name, data in files["1001"]:
        rds.add_file(INSTANCE, "1001", name, data)
    lake, landing = tmp_path / "lake", str(tmp_path / "landing")
    ts = datetime.fromtimestamp(1714521600, UTC)
    first = land_files(make_source(rds), landing, ts - timedelta(hours=1), ts + timedelta(seconds=20),
                       lake=str(lake))
    run_ingest(IngestOptions(lake=str(lake), files=first.paths, instance=INSTANCE, lineage=first.lineage))
    # A standby that never received A:7-11 (asynchronous replication lost them) and went on with B:1.
    out = io.BytesIO()
    w = BinlogWriter(out, server_id=2, previous_gtids=f"{UUID_A}:1-6", timestamp=1714521700)
    w.sid, w.next_gno = uuid.UUID(UUID_B), 1
    t = w.define_table(1, "shop", "t", [column("int", "id", 0), column("int", "v", 1)], [0])
    with w.transaction(timestamp=1714521701) as tx:
        tx.insert(t, [[9, 90]])
    w.stop(timestamp=1714521702)
    rds.add_file(INSTANCE, "1002", "mysql-bin.000020", out.getvalue())
    window = (ts + timedelta(seconds=30), ts + timedelta(hours=1))
    with pytest.raises(SourceError, match="missing on the new one"):
        land_files(make_source(rds), landing, *window, lake=str(lake))
    # A complete standby whose file numbers are below the ones applied: refused (changes would order wrongly).
    files = _lineage_files(tmp_path)
    rds.files = [f for f in rds.files if f.host != "1002"]
    rds.add_file(INSTANCE, "1002", "mysql-bin.000002", files["1002"][1][1], begin=ts + timedelta(seconds=4),
                 end=ts + timedelta(seconds=102))
    with pytest.raises(SourceError, match=r"numbered at or below mysql-bin\.000002"):
        land_files(make_source(rds), landing, *window, lake=str(lake))
    states = ControlTable(get_engine(), LakeLayout(str(lake))).load()
    assert {k[1] for k in states} == {"1001"}  # nothing recorded for the refused lineage


# -- binlake ingest --source rds:... ------------------------------------------------------------------------------


def test_cli_ingest_from_rds_equals_select(rds, mariadb_full, fresh_database, tmp_path, monkeypatch, capsys) -> None:
    from binlake.cli import main

    server = mariadb_full
    db = fresh_database(server)
    server.flush_logs()
    start_file = server.binlog_files()[-1].name  # the active file our writes start in
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, amount DECIMAL(10,2), note VARCHAR(40))")
        for i in range(1, 201):
            cur.execute(f"INSERT INTO orders VALUES ({i}, {i}.25, 'n{i}')")
        cur.execute("UPDATE orders SET amount = amount * 2 WHERE id % 3 = 0")
        cur.execute("DELETE FROM orders WHERE id % 7 = 0")
    server.flush_logs()
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE orders SET note = 'late' WHERE id < 20")
    files = [p for p in server.flush_logs() if p.name >= start_file]  # closed files only
    assert len(files) >= 2
    for i, p in enumerate(files):
        rds.add_path(INSTANCE, "1001", p, tar=(i == 0))
    rds.faults.drops[files[0].name] = [5_000]
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", rds.access_key_id)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", rds.access_key_secret)
    lake, landing = tmp_path / "lake", tmp_path / "landing"
    now = datetime.now(UTC)
    argv = ["ingest", "--source", f"rds:{INSTANCE}", "--rds-endpoint", f"http://{rds.endpoint}", "--lake", str(lake),
            "--landing", str(landing), "--databases", db,
            "--from", (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "--to", (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert rds.access_key_secret not in out.out + out.err
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, amount, note FROM orders")
        expected = {r[0]: (format(r[1], "f"), r[2]) for r in cur.fetchall()}
    rows = get_engine().read(LakeLayout(str(lake)).current_path(db, "orders")).to_pylist()
    got = {r["id"]: (format(r["amount"], "f") if isinstance(r["amount"], Decimal) else r["amount"], r["note"])
           for r in rows}
    assert got == expected and len(expected) == 200 - 28
    states = ControlTable(get_engine(), LakeLayout(str(lake))).load()
    mine = {k[2]: s for k, s in states.items() if k[0] == INSTANCE}
    assert set(mine) >= {p.name for p in files} and all(s.lineage == "1001" for s in mine.values())
    assert all(mine[p.name].complete for p in files)
    # What the source announced survives the ingest's own control-table records.
    for i, p in enumerate(files):
        st = mine[p.name]
        assert st.checksum is not None and st.size == p.stat().st_size
        if i > 0:  # the first one was served packed as a .tar: its announced checksum is the archive's
            assert st.checksum == crc64_bytes(p.read_bytes())
        assert st.first_ts is not None and st.last_ts is not None and st.first_ts <= st.last_ts
    side = json.loads((landing / INSTANCE / "1001" / f"{files[0].name}.source.json").read_text())
    assert side["packed"] is True
    downloads = len(rds.downloads)
    assert main(argv) == 0  # a second run: nothing downloaded again, nothing new ingested
    assert len(rds.downloads) == downloads and "nothing new to ingest" in capsys.readouterr().out


# -- python -m binlake.testing.rds_server --dir=... (the compose stack's rds service) --------------------------------


def _start_rds_cli(directory: Path, instance: str, *extra: str) -> tuple[subprocess.Popen, int]:
    """The server as the stack runs it, on a free port; returns the process and the port it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "binlake.testing.rds_server", "--host=127.0.0.1", "--port=0",
                             f"--dir={directory}", f"--instance={instance}", "--access-key-id=cli-ak",
                             "--access-key-secret=cli-sk", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.match(r"rds server on 127\.0\.0\.1:(\d+), instance (\S+) lineage (\S+)", line)
    if m is None:
        proc.kill()
        pytest.fail(f"no start line: {line!r} {proc.communicate()[1]}")
    return proc, int(m.group(1))


def test_cli_serves_a_directory_rescanned_on_every_listing(mariadb_minimal, fresh_database, tmp_path) -> None:
    server = mariadb_minimal
    db = fresh_database(server)
    server.flush_logs()
    start_file = server.binlog_files()[-1].name
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    server.flush_logs()
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (4, 'd')")  # into the file the server still has open
    datadir = tmp_path / "datadir"
    datadir.mkdir()
    (datadir / "aria_log.00000001").write_bytes(b"\xfe\xfe\x07\x01not a binlog")  # named like one, in a datadir
    (datadir / "aria_log.00000002").write_bytes(b"\xfe\xfe\x07\x01not a binlog")

    def copy_binlogs() -> list[str]:
        names = [p.name for p in server.binlog_files() if p.name >= start_file]
        for name in names:
            shutil.copyfile(server.binlog_dir / name, datadir / name)
        (datadir / "mysql-bin.index").write_text("".join(f"./{n}\n" for n in names))
        return names

    first = copy_binlogs()
    assert len(first) == 2  # a closed file and the open one
    proc, port = _start_rds_cli(datadir, "rm-binlake-cli")
    try:
        window = (datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1))
        src = open_source("rds:rm-binlake-cli", endpoint=f"http://localhost:{port}", access_key_id="cli-ak",
                          access_key_secret="cli-sk", policy=FAST)
        listed = src.list_files(*window)
        assert [(f.name, f.lineage) for f in listed] == [(first[0], "rm-binlake-cli-primary")]  # open one left out
        assert listed[0].checksum == crc64_bytes((datadir / first[0]).read_bytes())

        # The server rotates: the open file is closed (and copied again, complete), a new one opens.
        server.flush_logs()
        second = copy_binlogs()
        assert second[:2] == first and len(second) == 3
        listed = src.list_files(*window)
        assert [f.name for f in listed] == second[:2]
        closed = listed[1]
        assert closed.size == (datadir / closed.name).stat().st_size
        # Its link names the host the request reached (the Host header), not the bound address.
        assert closed.location.startswith(f"http://localhost:{port}/intranet/rm-binlake-cli/")
        path = Path(src.fetch(closed, str(tmp_path / "landing")))
        assert path.read_bytes() == (datadir / closed.name).read_bytes()
        rows = [(c.table.table, c.op, list(c.after)) for c in iter_changes([path])
                if isinstance(c, RowChange) and c.table.database == db]
        assert rows == [("t", "insert", [4, "d"])]
        by_ip = open_source("rds:rm-binlake-cli", endpoint=f"http://127.0.0.1:{port}", access_key_id="cli-ak",
                            access_key_secret="cli-sk", policy=FAST).list_files(*window)
        assert all(f.location.startswith(f"http://127.0.0.1:{port}/") for f in by_ip)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip().endswith("rds server stopped")
    # The file named like a binlog without the magic is left out, and said so once (the newest is the open one).
    assert err.count("aria_log.00000001: named like a binlog but without the binlog magic") == 1
    assert "aria_log.00000002" not in err


def test_directory_serving_rules_and_public_host(tmp_path) -> None:
    """MariaDB-style names, relay logs left out, several base names refused, --public-host in the links."""
    d = tmp_path / "binlogs"
    d.mkdir()
    datas = [sample_binlog(100, ts=1714521600 + 3600 * i, name_seed=1000 * i) for i in range(3)]
    for i, data in enumerate(datas):
        (d / f"mariadb-bin.{i + 1:06d}").write_bytes(data)
        (d / f"db1-relay-bin.{i + 1:06d}").write_bytes(data)
    with LocalRdsServer(public_host="rds.example:8090") as rds:
        rds.serve_directory(d, INSTANCE, "h1")
        [item] = rds.describe_binlog_files({"DBInstanceId": INSTANCE, "StartTime": "2024-05-01T01:00:00Z",
                                            "EndTime": "2024-05-01T01:30:00Z"})["Items"]["BinLogFile"]
        assert item["LogFileName"] == "mariadb-bin.000002" and item["HostInstanceID"] == "h1"
        assert item["DownloadLink"].startswith("http://rds.example:8090/public/")
        assert [f.name for f in rds.files] == ["mariadb-bin.000001", "mariadb-bin.000002"]
        (d / "mariadb-bin.000001").unlink()  # purged: gone from the next listing
        files = make_source(rds).list_files()
        assert [f.name for f in files] == ["mariadb-bin.000002"]
        (d / "mysql-bin.000001").write_bytes(datas[0])
        (d / "mysql-bin.000002").write_bytes(datas[0])
        with pytest.raises(SourceError, match=r"several base names \(mariadb-bin, mysql-bin\).*--basename"):
            make_source(rds, policy=RetryPolicy(attempts=1)).list_files()
    with LocalRdsServer() as rds:
        rds.serve_directory(d, INSTANCE, "h1", include_open=True, basename="db1-relay-bin")
        assert [f.name for f in make_source(rds).list_files()] == [f"db1-relay-bin.{i:06d}" for i in (1, 2, 3)]
