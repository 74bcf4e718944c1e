"""`binlake stats --html` and `binlake report --lake`: one self-contained HTML page with altair (Vega-Lite) charts.

A real MariaDB writes a workload whose commit times are spread over minutes (SET timestamp), binlake reads the
files (stats) and ingests them into a Delta lake (two batches); the pages are rendered in headless Chromium with
its network off (every host name fails to resolve, every proxied request goes nowhere), which must run the inlined
Vega scripts and draw the charts (coloured chart pixels in every chart section of the screenshot) and whose DOM
must hold the charts' marks with the figures of the input. Skips when chromium is not installed.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from binlake.cli import main
from binlake.lake.ingest import IngestOptions
from binlake.quality.stages import run_ingest
from binlake.report.charts import PALETTE

DB = "report_db"
BASE = 1_700_000_000  # 2023-11-14T22:13:20Z
SCREEN_W, SCREEN_H = 1100, 3400


# -- the workload -------------------------------------------------------------------------------------------------


def write_workload(server, first_minute: int, minutes: int) -> dict[str, dict[str, int]]:
    """Transactions every 10 s of (fake) server time; one 300-row transaction and one lasting 45 s.

    Returns the row changes written per table and operation."""
    counts = {"orders": {"insert": 0, "update": 0, "delete": 0}, "customers": {"insert": 0}}
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SET timestamp = {BASE + first_minute * 60}")  # DDL commits are transactions, too
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
        cur.execute(f"USE {DB}")
        cur.execute("CREATE TABLE IF NOT EXISTS orders (id INT PRIMARY KEY, amount DECIMAL(10,2), note VARCHAR(20))")
        cur.execute("CREATE TABLE IF NOT EXISTS customers (id INT PRIMARY KEY, name VARCHAR(30))")
        for k in range(first_minute * 6, (first_minute + minutes) * 6):
            cur.execute(f"SET timestamp = {BASE + k * 10}")
            cur.execute("BEGIN")
            n = 1 + k % 7
            for j in range(n):
                cur.execute(f"INSERT INTO orders VALUES ({k * 100 + j}, {j}.50, 'o{k}')")
            cur.execute(f"UPDATE orders SET amount = amount + 1 WHERE id = {k * 100}")
            counts["orders"]["insert"] += n
            counts["orders"]["update"] += 1
            if k % 3 == 0:
                cur.execute(f"INSERT INTO customers VALUES ({k}, 'c{k}')")
                counts["customers"]["insert"] += 1
            if k % 5 == 0 and k > first_minute * 6:
                cur.execute(f"DELETE FROM orders WHERE id = {(k - 1) * 100}")
                counts["orders"]["delete"] += 1
            cur.execute("COMMIT")
        t = BASE + (first_minute * 6 + 3) * 10 + 5
        cur.execute(f"SET timestamp = {t}")
        cur.execute("BEGIN")
        lo = 1_000_000 + first_minute * 1000
        cur.execute(f"INSERT INTO customers SELECT seq, CONCAT('bulk', seq) FROM seq_{lo}_to_{lo + 299}")
        counts["customers"]["insert"] += 300
        cur.execute("COMMIT")
        cur.execute(f"SET timestamp = {t + 2}")
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO orders VALUES ({9_000_000 + first_minute}, 1.00, 'slow')")
        cur.execute(f"SET timestamp = {t + 47}")
        cur.execute("COMMIT")
        counts["orders"]["insert"] += 1
        cur.execute("SET timestamp = DEFAULT")
    return counts


@pytest.fixture(scope="module")
def workload(mariadb_full, tmp_path_factory):
    """Binlogs of two rounds of the workload (copied, closed) and the lake after ingesting each round."""
    work = tmp_path_factory.mktemp("report")
    with mariadb_full.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SET timestamp = {BASE}")
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
    first = write_workload(mariadb_full, 0, 8)
    with mariadb_full.connect() as conn, conn.cursor() as cur:  # another database, much later: not DB's figures
        cur.execute(f"SET timestamp = {BASE + 10**6}")
        cur.execute("CREATE DATABASE IF NOT EXISTS report_noise")
        cur.execute("CREATE TABLE IF NOT EXISTS report_noise.t (id INT PRIMARY KEY)")
        cur.execute("REPLACE INTO report_noise.t VALUES (1)")
    files1 = [shutil.copy(f, work / f.name) for f in mariadb_full.flush_logs()]
    lake = work / "lake"
    opts = IngestOptions(lake=str(lake), files=[str(f) for f in files1], databases={DB})
    s1 = run_ingest(opts)
    second = write_workload(mariadb_full, 8, 4)
    files2 = [shutil.copy(f, work / f.name) for f in mariadb_full.flush_logs()]
    opts.files = [str(f) for f in files2]
    s2 = run_ingest(opts)
    return {"work": work, "files1": files1, "lake": lake, "first": first, "second": second,
            "batches": (s1.batch, s2.batch)}


# -- Chromium -----------------------------------------------------------------------------------------------------


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("no chromium binary (apt-get install -y chromium; scripts/dev.sh setup_system installs it)")


def run_chromium(page: Path, tmp: Path, *mode: str) -> subprocess.CompletedProcess:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--hide-scrollbars", f"--user-data-dir={tmp / 'chromium-profile'}", f"--window-size={SCREEN_W},{SCREEN_H}",
           # no network: nothing resolves and every request would go to a closed local port
           "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
           # let the page's scripts finish (virtual time runs until nothing is pending, up to this many ms)
           "--virtual-time-budget=30000",
           *mode, page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def screenshot(page: Path, tmp: Path) -> list[list[tuple[int, int, int]]]:
    png = tmp / (page.stem + ".png")
    run_chromium(page, tmp, f"--screenshot={png}")
    return read_png(png.read_bytes())


def read_png(data: bytes) -> list[list[tuple[int, int, int]]]:
    """Rows of RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color_type, _, _, interlace = header
    assert depth == 8 and color_type in (2, 6) and interlace == 0, header
    bpp = 3 if color_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return rows


def chart_bands(pixels: list[list[tuple[int, int, int]]]) -> list[tuple[int, int]]:
    """Vertical spans of the screenshot where chart colours are drawn (rows with >= 4 palette pixels)."""
    colours = [tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in PALETTE[:3]]

    def near(p, c):
        return abs(p[0] - c[0]) + abs(p[1] - c[1]) + abs(p[2] - c[2]) < 40

    coloured = [y for y, row in enumerate(pixels) if sum(1 for p in row if any(near(p, c) for c in colours)) >= 4]
    bands: list[tuple[int, int]] = []
    for y in coloured:
        if bands and y - bands[-1][1] <= 45:
            bands[-1] = (bands[-1][0], y)
        else:
            bands.append((y, y))
    return [b for b in bands if b[1] - b[0] >= 10]


MARK_KINDS = {"mark-rect": "rect", "mark-line": "line", "mark-symbol": "symbol"}


class Dom(HTMLParser):
    """Sections by data-chart with the marks Vega drew in them (one path per bar, line or point inside the groups
    of class `mark-rect`/`mark-line`/`mark-symbol` and `role-mark`), plus every tag, URL attribute and text."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict[str, int]] = {}
        self.current: str | None = None
        self.groups: list[str | None] = []  # the mark kind of each open <g> (None: not a data mark group)
        self.tags: set[str] = set()
        self.urls: list[str] = []
        self.text: list[str] = []
        self.body: dict[str, str | None] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]
        if tag == "body":
            self.body = a
        if tag == "section" and a.get("data-chart"):
            self.current = a["data-chart"]
            self.sections[self.current] = {"rect": 0, "line": 0, "symbol": 0}
        if tag == "g":
            classes = (a.get("class") or "").split()
            self.groups.append(next((k for c, k in MARK_KINDS.items() if c in classes), None)
                               if "role-mark" in classes else None)
        elif tag == "path" and self.current and self.groups and self.groups[-1]:
            self.sections[self.current][self.groups[-1]] += 1

    def handle_endtag(self, tag):
        if tag == "g" and self.groups:
            self.groups.pop()
        if tag == "section":
            self.current = None

    def handle_data(self, data):
        self.text.append(data)


def dump_dom(page: Path, tmp: Path) -> Dom:
    dom = Dom()
    dom.feed(run_chromium(page, tmp, "--dump-dom").stdout)
    assert dom.body.get("data-charts") == "drawn", dom.body  # vega-embed drew every chart, offline
    return dom


def assert_self_contained(html: str) -> None:
    """The Vega scripts and the data are in the page: no script, style or image is loaded from anywhere."""
    lower = html.lower()
    assert lower.count("<script") == 2  # the charts' JSON and the bundled Vega/Vega-Lite/vega-embed module
    assert '<script type="application/json" id="binlake-charts">' in html and '<script type="module">' in html
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "<script></script>", lower, flags=re.S)  # the page's own tags
    assert not re.search(r"<[a-z]+\b[^>]*\b(src|href)=", markup)
    assert "url(" not in markup and "@import" not in markup


CHARTS = {"chart-volume", "chart-tps", "chart-largest", "chart-longest", "chart-lag"}


# -- tests --------------------------------------------------------------------------------------------------------


def test_stats_html_draws_every_chart(workload, tmp_path, capsys) -> None:
    page = tmp_path / "stats.html"
    files = [str(f) for f in workload["files1"]]
    assert main(["stats", "--databases", DB, "--json", "--html", str(page), *files]) == 0
    stats = json.loads(capsys.readouterr().out)
    html = page.read_text()
    assert_self_contained(html)

    first = workload["first"]
    assert stats["tables"][f"{DB}.orders"] == first["orders"]
    assert stats["tables"][f"{DB}.customers"] == first["customers"]
    assert stats["largest_transactions"][0]["rows"] == 300
    assert stats["longest_transactions"][0]["duration_s"] == 45
    series = stats["series"]
    assert series["start_epoch"] == BASE and series["span_s"] == 8  # 480 s of changes in 60 buckets
    assert sum(series["tables"][f"{DB}.orders"]) == sum(first["orders"].values())
    assert max(series["commit_delay_max_s"]) == 45

    dom = dump_dom(page, tmp_path)
    assert set(dom.sections) == CHARTS
    nonzero = sum(1 for vals in series["tables"].values() for v in vals if v)
    assert dom.sections["chart-volume"]["rect"] == nonzero  # one stacked segment per table and bucket
    assert dom.sections["chart-tps"]["line"] == 1 and dom.sections["chart-tps"]["symbol"] == series["buckets"]
    assert dom.sections["chart-largest"]["rect"] == 10 and dom.sections["chart-longest"]["rect"] == 10
    assert dom.sections["chart-lag"]["line"] == 2
    text = " ".join(dom.text)
    assert f"{DB}.orders" in text and "Largest transactions" in text and "Commit delay" in text
    assert not dom.urls

    bands = chart_bands(screenshot(page, tmp_path))
    assert len(bands) >= len(CHARTS), bands


def test_lake_report_for_one_batch(workload, tmp_path) -> None:
    b1, b2 = workload["batches"]
    assert b1 is not None and b2 is not None and b2 > b1
    page = tmp_path / "lake.html"
    assert main(["report", "--lake", str(workload["lake"]), "--batch", str(b2), "--out", str(page)]) == 0
    html = page.read_text()
    assert_self_contained(html)
    assert f"batch {b2}" in html
    second = workload["second"]
    total = sum(sum(c.values()) for c in second.values())
    assert f"{total:,} row changes" in html  # only the second batch's rows
    assert "years</b><span>max ingest lag" in html  # source commits of 2023, lake commits of today

    dom = dump_dom(page, tmp_path)
    assert set(dom.sections) == CHARTS
    assert dom.sections["chart-volume"]["rect"] > 20
    assert dom.sections["chart-largest"]["rect"] == 10
    assert dom.sections["chart-lag"]["line"] == 2
    text = " ".join(dom.text)
    assert "Ingest lag" in text and "Files (control table)" in text and "merged" in text
    bands = chart_bands(screenshot(page, tmp_path))
    assert len(bands) >= len(CHARTS), bands

    everything = tmp_path / "all.html"
    assert main(["report", "--lake", str(workload["lake"]), "--out", str(everything)]) == 0
    total_all = total + sum(sum(c.values()) for c in workload["first"].values())
    assert f"{total_all:,} row changes" in everything.read_text()


def test_lake_report_refuses_an_unknown_batch(workload, tmp_path, capsys) -> None:
    code = main(["report", "--lake", str(workload["lake"]), "--batch", "999", "--out", str(tmp_path / "x.html")])
    assert code == 2
    assert "no history rows for batch 999" in capsys.readouterr().err


def test_stats_html_with_nothing_selected_says_so(workload, tmp_path, capsys) -> None:
    page = tmp_path / "empty.html"
    files = [str(f) for f in workload["files1"]]
    assert main(["stats", "--databases", "no_such_db", "--json", "--html", str(page), *files]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 0
    dom = dump_dom(page, tmp_path)
    assert set(dom.sections) == CHARTS
    assert dom.sections["chart-volume"]["rect"] == 0  # the other databases' commits still count as transactions
    assert "no data in this range" in " ".join(dom.text)
