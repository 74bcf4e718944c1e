"""OSS end to end: the local OSS server driven through the real oss2 SDK (V1 and V4 signatures) and plain HTTP,
the OSS source (listing, streaming, resumable verified fetch, OSS landing), the DDL snapshot store on OSS, and
ingest of binlogs a private MariaDB wrote, served from a bucket."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import oss2
import pytest

from binlake.binlog.output import image_to_dict
from binlake.cli import main
from binlake.lake.engines import get_engine
from binlake.lake.layout import LakeLayout
from binlake.schema.api import build_resolver
from binlake.schema.store import SnapshotStore, open_schemas
from binlake.sources.base import ChecksumMismatchError, SourceError
from binlake.sources.checksum import crc64_bytes
from binlake.sources.oss import OssSource, upload_landed
from binlake.storage.oss_client import OssSettings
from binlake.testing.oss_server import OssServer
from tests.integration.test_ingest import normalize, random_workload
from tests.integration.test_schema_timeline import decode, run_script

AK, SECRET, REGION, BUCKET = "binlake-test-ak", "binlake-test-secret", "cn-hangzhou", "binlake"


@pytest.fixture(scope="module")
def oss_server():
    with OssServer(AK, SECRET, REGION, buckets=(BUCKET,)) as server, pytest.MonkeyPatch.context() as env:
        env.setenv("OSS_ENDPOINT", server.endpoint)
        env.setenv("OSS_ACCESS_KEY_ID", AK)
        env.setenv("OSS_ACCESS_KEY_SECRET", SECRET)
        env.setenv("OSS_REGION", REGION)
        env.setenv("OSS_AUTH_VERSION", "v4")
        yield server


def bucket_for(server: OssServer, version: str, secret: str = SECRET, ak: str = AK) -> oss2.Bucket:
    if version == "v4":
        return oss2.Bucket(oss2.AuthV4(ak, secret), server.endpoint, BUCKET, region=REGION)
    return oss2.Bucket(oss2.Auth(ak, secret), server.endpoint, BUCKET)


def settings(server: OssServer, version: str = "v4") -> OssSettings:
    return OssSettings(server.endpoint, AK, SECRET, version, REGION if version == "v4" else None)


@pytest.fixture(scope="module")
def binlogs(mariadb_servers) -> tuple[object, list[Path]]:
    """Closed binlog files a MINIMAL-metadata MariaDB wrote for database oss_db (a table, then changes)."""
    server = mariadb_servers.get("MINIMAL")
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS oss_db")
        first = server.binlog_files()[-1].name
        cur.execute("CREATE DATABASE oss_db")
    rng, ids = random.Random(11), set()
    with server.connect("oss_db") as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, customer INT, amount DECIMAL(10,2), note VARCHAR(40))")
        for sql in random_workload(rng, ids, 80):
            cur.execute(sql)
        server.flush_logs()
        cur.execute("ALTER TABLE orders ADD COLUMN status VARCHAR(8) NOT NULL DEFAULT 'new' AFTER id")
        for sql in random_workload(rng, ids, 60):
            cur.execute(sql)
        server.flush_logs()
        for sql in random_workload(rng, ids, 40):
            cur.execute(sql)
        cur.execute("INSERT INTO orders (id, customer, amount, note) SELECT seq, seq % 50, seq / 100, "
                    "REPEAT('x', seq % 40) FROM seq_20001_to_26000")  # one file large enough to cut mid-body
        cur.execute("UPDATE orders SET amount = amount + 1 WHERE id > 20000 AND id % 3 = 0")
    closed = server.flush_logs()
    return server, [f for f in closed if f.name >= first]


# --- the server through oss2 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["v1", "v4"])
def test_signed_put_get_head_delete_with_percent_encoded_keys(oss_server, version) -> None:
    bucket = bucket_for(oss_server, version)
    key = f"{version}/dir with space/100%+ü&=?#/mysql-bin.000001"
    data = bytes(range(256)) * 40
    put = bucket.put_object(key, data, headers={"x-oss-meta-origin": "test"})
    assert put.status == 200 and put.crc == int(crc64_bytes(data))
    assert oss_server.get(BUCKET, key).data == data  # stored under the decoded key
    assert oss_server.requests[-1].auth_version == version
    got = bucket.get_object(key)
    assert got.read() == data and got.headers["x-oss-meta-origin"] == "test"
    head = bucket.head_object(key)
    assert head.content_length == len(data) and head.etag == put.etag
    part = bucket.get_object(key, byte_range=(1000, 1099))
    assert part.status == 206 and part.read() == data[1000:1100]
    assert part.headers["Content-Range"] == f"bytes 1000-1099/{len(data)}"
    tail = bucket.get_object(key, byte_range=(None, 10))
    assert tail.read() == data[-10:]
    with pytest.raises(oss2.exceptions.ServerError) as err:
        bucket.get_object(key, byte_range=(len(data) + 5, len(data) + 10))
    assert err.value.status == 416 and err.value.code == "InvalidRange"
    bucket.delete_object(key)
    with pytest.raises(oss2.exceptions.NoSuchKey) as missing:
        bucket.get_object(key)
    assert missing.value.details["Key"] == key and missing.value.request_id
    assert not bucket.object_exists(key)
    with pytest.raises(oss2.exceptions.ServerError) as bad_md5:
        bucket.put_object(key, data, headers={"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="})  # the MD5 of b""
    assert (bad_md5.value.status, bad_md5.value.code) == (400, "InvalidDigest") and not bucket.object_exists(key)
    bucket.put_object(key, b"first", headers={"x-oss-forbid-overwrite": "true"})
    with pytest.raises(oss2.exceptions.ServerError) as exists:
        bucket.put_object(key, b"second", headers={"x-oss-forbid-overwrite": "true"})
    assert exists.value.code == "FileAlreadyExists" and bucket.get_object(key).read() == b"first"


@pytest.mark.parametrize("version", ["v1", "v4"])
def test_bad_signatures_and_unknown_keys_are_refused(oss_server, version) -> None:
    bucket_for(oss_server, version).put_object("auth/object", b"secret bytes")
    with pytest.raises(oss2.exceptions.ServerError) as err:
        bucket_for(oss_server, version, secret="not-the-secret").get_object("auth/object")
    assert (err.value.status, err.value.code) == (403, "SignatureDoesNotMatch")
    assert err.value.request_id and err.value.details["StringToSign"]
    assert oss_server.requests[-1].auth_version == version
    with pytest.raises(oss2.exceptions.ServerError) as err:
        bucket_for(oss_server, version, ak="nobody").get_object("auth/object")
    assert (err.value.status, err.value.code) == (403, "InvalidAccessKeyId")
    # A V4 signature for another region is not accepted either.
    if version == "v4":
        other = oss2.Bucket(oss2.AuthV4(AK, SECRET), oss_server.endpoint, BUCKET, region="us-west-1")
        with pytest.raises(oss2.exceptions.ServerError):
            other.get_object("auth/object")


def test_plain_http_error_bodies_and_access_denied(oss_server) -> None:
    bucket_for(oss_server, "v1").put_object("plain/object", b"x")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{oss_server.endpoint}/{BUCKET}/plain/object", timeout=10)
    body = ET.fromstring(err.value.read())
    assert err.value.code == 403 and body.findtext("Code") == "AccessDenied"
    assert body.findtext("Message") and body.findtext("RequestId") == err.value.headers["x-oss-request-id"]
    # A key limited to another bucket is denied here even with a valid signature.
    oss_server.add_user("limited-ak", "limited-secret", buckets={"elsewhere"})
    with pytest.raises(oss2.exceptions.AccessDenied):
        bucket_for(oss_server, "v4", secret="limited-secret", ak="limited-ak").get_object("plain/object")


def test_list_v2_pages_prefix_and_delimiter(oss_server) -> None:
    bucket = bucket_for(oss_server, "v4")
    keys = [f"listing/a/mysql-bin.{i:06d}" for i in range(1, 24)] + ["listing/a/sub/x", "listing/a/sub/y",
                                                                     "listing/a/ü space", "listing/b/other"]
    for k in keys:
        oss_server.put(BUCKET, k, b"k")
    before = len(oss_server.requests)
    flat = [o.key for o in oss2.ObjectIteratorV2(bucket, prefix="listing/a/", max_keys=4)]
    assert flat == sorted(k for k in keys if k.startswith("listing/a/"))
    pages = [r for r in oss_server.requests[before:] if r.method == "GET" and not r.key]
    assert len(pages) == -(-len(flat) // 4) and all(r.status == 200 for r in pages)
    shallow = list(oss2.ObjectIteratorV2(bucket, prefix="listing/a/", delimiter="/", max_keys=5))
    assert [o.key for o in shallow if o.is_prefix()] == ["listing/a/sub/"]
    assert [o.key for o in shallow if not o.is_prefix()] == sorted(k for k in keys if k.startswith("listing/a/")
                                                                   and "/sub/" not in k)
    assert [o.key for o in oss2.ObjectIterator(bucket, prefix="listing/", max_keys=3)] == sorted(keys)
    v1 = bucket_for(oss_server, "v1")
    assert [o.key for o in oss2.ObjectIteratorV2(v1, prefix="listing/b/", max_keys=1)] == ["listing/b/other"]


# --- the OSS source ----------------------------------------------------------------------------------------------

def _upload(server: OssServer, prefix: str, files: list[Path], meta: list[dict] | None = None) -> None:
    for i, f in enumerate(files):
        server.put(BUCKET, f"{prefix}/{f.name}", f.read_bytes(), (meta or [{}] * len(files))[i])


def test_source_lists_binlogs_by_sequence_and_window(oss_server, binlogs) -> None:
    _, files = binlogs
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    spans = [(t0 + timedelta(hours=i), t0 + timedelta(hours=i + 1)) for i in range(len(files))]
    _upload(oss_server, "src/win", list(reversed(files)),
            [{"binlog-begin": b.isoformat(), "binlog-end": e.isoformat()} for b, e in reversed(spans)])
    oss_server.put(BUCKET, "src/win/mysql-bin.index", b"./mysql-bin.000001\n")
    oss_server.put(BUCKET, "src/win/notes.txt", b"not a binlog at all")
    oss_server.put(BUCKET, "src/win/deeper/mysql-bin.000001", files[0].read_bytes())
    source = OssSource(f"oss://{BUCKET}/src/win", settings(oss_server, "v1"))
    listed = source.list_files()
    assert [f.name for f in listed] == [f.name for f in files]
    assert sorted(source.skipped) == ["mysql-bin.index", "notes.txt"]
    first = listed[0]
    assert first.size == files[0].stat().st_size and first.checksum == crc64_bytes(files[0].read_bytes())
    assert (first.begin, first.end) == spans[0] and first.location == f"oss://{BUCKET}/src/win/{files[0].name}"
    # A window whose edges fall inside files keeps exactly the overlapping files, each once.
    window = source.list_files(spans[1][0] + timedelta(minutes=30), spans[2][0] + timedelta(minutes=1))
    assert [f.name for f in window] == [files[1].name, files[2].name]
    assert source.list_files(spans[-1][1] + timedelta(hours=1)) == []
    # An object named like a binlog that is not one is listed, not dropped: decoding it then fails loudly.
    oss_server.put(BUCKET, "src/win/mysql-bin.999999", b"PK\x03\x04 a zip, not a binlog")
    assert [f.name for f in source.list_files()][-1] == "mysql-bin.999999"


def test_source_begin_comes_from_the_first_event(oss_server, binlogs) -> None:
    _, files = binlogs
    _upload(oss_server, "src/plain", files)
    listed = OssSource(f"oss://{BUCKET}/src/plain", settings(oss_server)).list_files()
    head = files[0].read_bytes()[:8]
    assert listed[0].begin == datetime.fromtimestamp(int.from_bytes(head[4:8], "little"), UTC)
    assert all(f.begin <= f.end for f in listed)
    assert all(a.end <= b.begin for a, b in itertools.pairwise(listed))  # rotation bounds the end


def test_stream_and_fetch_survive_dropped_connections(oss_server, binlogs, tmp_path) -> None:
    _, files = binlogs
    big = max(files, key=lambda f: f.stat().st_size)
    data = big.read_bytes()
    assert len(data) > 200_000
    _upload(oss_server, "src/drop", [big])
    key = f"src/drop/{big.name}"
    source = OssSource(f"oss://{BUCKET}/src/drop", settings(oss_server))
    (f,) = source.list_files()

    oss_server.inject(BUCKET, key, "drop", after=70_000, times=2)
    start = len(oss_server.requests)
    with source.open(f) as stream:
        assert stream.read() == data
    ranges = [r.range for r in oss_server.requests[start:] if r.key == key]
    assert ranges[0] == "" and len(ranges) == 3 and all(r.startswith("bytes=") for r in ranges[1:])

    # A fetch resumes an earlier partial download and a drop in the middle, and lands identical bytes.
    landing = tmp_path / "landing"
    landed_dir = landing / "drop" / "default"  # LANDING/<instance>/<lineage>/, the instance named by the prefix
    landed_dir.mkdir(parents=True)
    (landed_dir / f".{big.name}.part").write_bytes(data[:50_000])
    oss_server.inject(BUCKET, key, "drop", after=100_000)
    start = len(oss_server.requests)
    path = source.fetch(f, str(landing))
    assert path == str(landed_dir / big.name) and Path(path).read_bytes() == data
    assert sorted(p.name for p in landed_dir.iterdir()) == [big.name, f"{big.name}.source.json"]
    ranges = [r.range for r in oss_server.requests[start:] if r.key == key]
    assert ranges[0] == "bytes=50000-" and len(ranges) == 2  # the earlier part, then once more after the drop
    assert 50_000 <= int(ranges[1][len("bytes="):-1]) <= 150_000  # from where it broke, not from the start
    start = len(oss_server.requests)
    assert source.fetch(f, str(landing)) == path  # already landed and verified: nothing downloaded
    assert not [r for r in oss_server.requests[start:] if r.method == "GET"]


def test_wrong_content_is_rejected_and_nothing_is_landed(oss_server, binlogs, tmp_path) -> None:
    _, files = binlogs
    _upload(oss_server, "src/bad", files[:1])
    key = f"src/bad/{files[0].name}"
    source = OssSource(f"oss://{BUCKET}/src/bad", settings(oss_server))
    (f,) = source.list_files()
    oss_server.inject(BUCKET, key, "corrupt", after=500)
    with pytest.raises(ChecksumMismatchError, match="CRC-64"):
        source.fetch(f, str(tmp_path))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    oss_server.inject(BUCKET, key, "corrupt", after=500)
    with pytest.raises(ChecksumMismatchError), source.open(f) as stream:
        stream.read()
    assert Path(source.fetch(f, str(tmp_path))).read_bytes() == files[0].read_bytes()
    # Without a CRC-64 from the store, a simple upload's ETag (its MD5) still catches wrong bytes.
    oss_server.crc64_headers = False
    try:
        (f,) = source.list_files()
        assert f.checksum is None
        oss_server.inject(BUCKET, key, "corrupt", after=700)
        with pytest.raises(ChecksumMismatchError, match="md5"):
            source.fetch(f, str(tmp_path / "md5"))
    finally:
        oss_server.crc64_headers = True
    # A file already in the landing place that differs from the source is never overwritten.
    other = tmp_path / "other"
    (other / "bad" / "default").mkdir(parents=True)
    (other / "bad" / "default" / files[0].name).write_bytes(b"\xfebin different")
    with pytest.raises(ChecksumMismatchError, match="not overwriting"):
        source.fetch(f, str(other))
    # An object replaced after it was listed is not mixed with the listed version (If-Match on the listed ETag).
    oss_server.put(BUCKET, key, files[0].read_bytes() + b"appended later")
    with pytest.raises(SourceError, match="changed while it was being read"):
        source.fetch(f, str(tmp_path / "replaced"))
    # Object names that are not plain file names never become paths.
    with pytest.raises(SourceError, match="refusing"):
        source.fetch(type(f)(name="../escape.000001", location="x"), str(tmp_path))


def test_oss_as_landing_storage(oss_server, binlogs, tmp_path) -> None:
    _, files = binlogs
    _upload(oss_server, "src/land", files[:2])
    source = OssSource(f"oss://{BUCKET}/src/land", settings(oss_server))
    listed = source.list_files()
    oss_server.inject(BUCKET, f"src/land/{files[0].name}", "drop", after=3000)
    landed = [source.fetch(f, f"oss://{BUCKET}/landing/inst") for f in listed]
    assert landed == [f"oss://{BUCKET}/landing/inst/land/default/{f.name}" for f in files[:2]]
    for f, src in zip(listed, files[:2], strict=True):
        obj = oss_server.get(BUCKET, f"landing/inst/land/default/{src.name}")
        assert obj.data == src.read_bytes()
        assert obj.meta["x-oss-meta-binlog-begin"] == f.begin.isoformat()
    puts = sum(r.method == "PUT" for r in oss_server.requests)
    assert source.fetch(listed[0], f"oss://{BUCKET}/landing/inst") == landed[0]  # idempotent
    assert sum(r.method == "PUT" for r in oss_server.requests) == puts
    # The landing prefix is itself a source: the time span travels in the metadata.
    again = OssSource(f"oss://{BUCKET}/landing/inst/land/default", settings(oss_server)).list_files()
    assert [(f.name, f.begin, f.checksum) for f in again] == [(f.name, f.begin, f.checksum) for f in listed]
    # A local landed file uploaded to a landing prefix (V1 this time).
    local = source.fetch(listed[1], str(tmp_path))
    url = upload_landed(local, f"oss://{BUCKET}/landing/v1", settings=settings(oss_server, "v1"), instance="land")
    assert oss_server.get(BUCKET, f"landing/v1/land/default/{files[1].name}").data == files[1].read_bytes()
    assert url == f"oss://{BUCKET}/landing/v1/land/default/{files[1].name}"


def test_settings_come_from_the_environment_and_never_show_the_secret(oss_server, monkeypatch) -> None:
    s = OssSettings.from_env()
    assert (s.endpoint, s.auth_version, s.region) == (oss_server.endpoint, "v4", REGION)
    assert SECRET not in repr(s) and SECRET not in repr(OssSource(f"oss://{BUCKET}/x"))
    monkeypatch.delenv("OSS_ACCESS_KEY_SECRET")
    with pytest.raises(SourceError, match="OSS_ACCESS_KEY_SECRET"):
        OssSettings.from_env()
    with pytest.raises(ValueError, match="bucket name"):
        OssSource("oss://Bad_Bucket/x", settings(oss_server))


def test_server_runs_as_a_module_and_compatible_endpoints_use_path_style(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "binlake.testing.oss_server", "--port", "0", "--bucket",
                             "binlake-binlogs", "--access-key-id", "demo-ak", "--access-key-secret", "demo-sk"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        port = int(line.split(":")[1].split(",")[0])
        s = OssSettings(f"http://localhost:{port}", "demo-ak", "demo-sk")
        s.bucket("binlake-binlogs").put_object("mysql8/mysql-bin.000001", b"\xfebin")
        assert s.bucket("binlake-binlogs").get_object("mysql8/mysql-bin.000001").read() == b"\xfebin"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # A single-label host (a compose service name) cannot carry the bucket as a subdomain: path style.
    assert OssSettings("http://oss:8091", "a", "b").bucket("bkt")._make_url("bkt", "k") == "http://oss:8091/bkt/k"
    aliyun = OssSettings("https://oss-cn-hangzhou.aliyuncs.com", "a", "b").bucket("bkt")
    assert aliyun._make_url("bkt", "k") == "https://bkt.oss-cn-hangzhou.aliyuncs.com/k"


# --- the snapshot store on OSS ----------------------------------------------------------------------------------

def test_snapshot_store_round_trip_on_oss(oss_server, mariadb_servers, capsys) -> None:
    server = mariadb_servers.get("MINIMAL")
    store = f"oss://{BUCKET}/schemas"
    files, snapshots = run_script(server, "oss_timeline_db", store)
    assert len(snapshots) == 2
    names = SnapshotStore.at(store).names()
    assert names == sorted(snapshots)
    assert oss_server.get(BUCKET, f"schemas/default/snapshots/{snapshots[0]}/manifest.json") is not None
    assert "CREATE TABLE `people`" in oss_server.get(
        BUCKET, f"schemas/default/snapshots/{snapshots[0]}/oss_timeline_db.sql").data.decode()
    # MINIMAL-metadata files decoded with the OSS store name rows as a full decode from the first file does.
    full = decode(files, build_resolver(files), "oss_timeline_db")
    later = files[1:]
    partial = decode(later, build_resolver(later, store), "oss_timeline_db")
    expected = [c for c in full if c.file in {f.name for f in later}]
    assert partial and [(c.file, c.pos, c.row) for c in partial] == [(c.file, c.pos, c.row) for c in expected]
    for ours, theirs in zip(partial, expected, strict=True):
        assert image_to_dict(ours.table, ours.after) == image_to_dict(theirs.table, theirs.after)
    # The CLI takes oss:// for --out and --schemas.
    cli = ["schema", "snapshot", "--mysql", server.uri, "--out", store, "--include", "oss_timeline_db.*"]
    assert main(cli) == 0  # stage 2 altered people after the last snapshot: a new one, and it says what changed
    assert json.loads(capsys.readouterr().out)["changes"]["changed"] == ["oss_timeline_db.people"]
    assert main(cli) == 0
    assert json.loads(capsys.readouterr().out)["stored"] is False  # nothing changed since
    assert main(["decode", "--schemas", store, "--databases", "oss_timeline_db", str(later[-1])]) == 0
    out = capsys.readouterr().out
    assert '"points"' in out and '"@1"' not in out
    # A plain <db>.sql prefix on OSS is a store too.
    oss_server.put(BUCKET, "sqlonly/oss_timeline_db.sql", b"CREATE TABLE people (id INT PRIMARY KEY, x INT);\n")
    (snap,) = open_schemas(f"oss://{BUCKET}/sqlonly")
    assert list(snap.ddl) == ["oss_timeline_db.people"]


# --- ingest from a bucket ---------------------------------------------------------------------------------------

def test_binlake_ingest_from_an_oss_prefix_equals_select(oss_server, binlogs, tmp_path, capsys) -> None:
    server, files = binlogs
    _upload(oss_server, "rds/oss_db", files)
    oss_server.inject(BUCKET, f"rds/oss_db/{files[-1].name}", "drop", after=100_000)
    lake, landing = tmp_path / "lake", tmp_path / "landing"
    argv = ["ingest", "--source", f"oss://{BUCKET}/rds/oss_db", "--landing", str(landing), "--lake", str(lake),
            "--databases", "oss_db"]
    assert main(argv) == 0  # endpoint and keys from the OSS_* environment, V4 signatures
    assert sorted(p.name for p in (landing / "oss_db" / "default").glob("mysql-bin.*[0-9]")) == [
        f.name for f in files]
    with server.connect("oss_db") as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM orders")
        names = [d[0] for d in cur.description]
        expected = {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
    current = get_engine().read(LakeLayout(str(lake)).current_path("oss_db", "orders")).to_pylist()
    got = {r["id"]: {k: v for k, v in r.items() if not k.startswith("_")} for r in current}
    assert len(expected) > 6000 and normalize(got) == normalize(expected)
    # A second run downloads nothing and ingests nothing new.
    capsys.readouterr()
    start = len(oss_server.requests)
    assert main(argv) == 0
    assert not [r for r in oss_server.requests[start:] if r.method == "GET" and r.key and not r.range]
    current_again = get_engine().read(LakeLayout(str(lake)).current_path("oss_db", "orders")).to_pylist()
    assert len(current_again) == len(current)
