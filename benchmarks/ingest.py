"""Ingest speed on the decoder benchmark's 500,000-change binlog (built by benchmarks/decode.py if missing).

Reports end-to-end rows/s, the split between decode, history append, quality gates and merge, peak memory,
decode-only time for comparison (target: ingest within 3x of decode-only), Spark local[1] vs local[2], and the
time of a second run over the same input (target: a no-op under 10 s). Like decode-only, ingest is timed after
its process's one-off module imports, which are reported apart (`imports`, and the ratio with them counted in);
the quality gates' Great Expectations import stays in the run's own split. Usage:

    .venv/bin/python benchmarks/ingest.py [--json OUT] [--no-spark]

`--spark` measures Spark at scale instead (issue 16): MB/s and rows/s of in-process, local[1] and local[2] on one
large generated binlog and on a batch of 8 generated files (benchmarks/big_binlog.py, cached outside the
repository), and (`--inputs next`) on the last 4 of those 8 files ingested into the lake the first 4 made (the
hourly steady state: merges into tables that hold rows), gates off, each run in a fresh process, with the machine's load average beside each figure. The Spark
runs commit with the delta-spark engine as `binlake ingest --spark` does (`--spark-engine delta-rs`: decode on
Spark, commits in the driver with delta-rs):

    .venv/bin/python benchmarks/ingest.py --spark [--one-mb 500] [--batch-mb 500] [--repeat 3] [--json OUT]

It reports the medians of wall seconds and of CPU seconds (user + sys of the run's whole process tree: with Spark,
the JVM and its Python workers) and of the decode and merge stages' seconds, the session start apart (not counted in
the run's seconds). `--batch-mb` is the 8 files' total (500: eight files of 62.5 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CHILD = r"""
import json, sys, time, resource
sys.path.insert(0, {root!r})
from binlake.lake.ingest import IngestOptions
from binlake.quality.stages import run_ingest
# One-off module imports, timed apart (decode-only is timed after its imports too): the stages run_ingest
# imports on first use, delta-rs, and pandas, which pyarrow imports on its first conversion of Python values.
t = time.perf_counter()
import binlake.quality.stages, deltalake, pyarrow
pyarrow.array([0])
imports = time.perf_counter() - t
mode, lake, files = sys.argv[1], sys.argv[2], sys.argv[3:]
executor = {{}}
if mode.startswith("spark"):
    from binlake.spark import build_spark_session, spark_executor
    spark = build_spark_session("bench", master="local[" + mode[5:] + "]")
    executor = {{"executor": spark_executor(spark)}}
quality = {{}}
if mode == "local-nogates":
    from binlake.settings import QualityConfig
    quality = {{"quality": QualityConfig(enabled=False)}}
opts = IngestOptions(lake=lake, files=files, split_bytes=8 << 20, **quality)
t, c = time.perf_counter(), time.process_time()
s = run_ingest(opts, **executor); first, first_cpu = time.perf_counter() - t, time.process_time() - c
t = time.perf_counter(); again = run_ingest(opts, **executor); second = time.perf_counter() - t
print(json.dumps({{"rows": sum(s.rows.values()), "first": first, "first_cpu": first_cpu, "second": second,
                  "imports": imports,
                  "split": s.seconds,
                  "second_batch": again.batch,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def decode_only(files: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of decoding every row of `files` in this process."""
    from binlake.binlog.decoder import BinlogDecoder

    t, c = time.perf_counter(), time.process_time()
    for _ in BinlogDecoder().decode_files(files):
        pass
    return time.perf_counter() - t, time.process_time() - c


def run_child(mode: str, files: list[str]) -> dict:
    lake = tempfile.mkdtemp(prefix=f"binlake-bench-{mode}-")
    try:
        code = CHILD.format(root=str(HERE.parent))
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
        done = subprocess.run([sys.executable, "-c", code, mode, lake, *files], capture_output=True, text=True,
                              env=env)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:  # delta-rs may abort at exit (delta-rs#2184) after printing; only missing output is fatal
            raise SystemExit(f"{mode} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return json.loads(lines[-1])
    finally:
        shutil.rmtree(lake, ignore_errors=True)


def gate_figures(run: dict) -> dict:
    """The quality gates' share of an ingest run (run_ingest's split: gates before and after the merge, and the
    one-off Great Expectations import of the process)."""
    split = run["split"]
    before, after = split.get("gate before merge", 0.0), split.get("gate after merge", 0.0)
    library = split.get("gate library import", 0.0)
    return {"before_merge_seconds": round(before, 2), "after_merge_seconds": round(after, 2),
            "library_import_seconds": round(library, 2),
            "share_of_ingest": round((before + after + library) / run["first"], 3),
            "ingest_seconds_without_gates": round(run["first"] - before - after - library, 2)}


SCALE_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
from binlake.lake.ingest import IngestOptions
from binlake.quality.stages import run_ingest
from binlake.settings import QualityConfig

from benchmarks.proctree import tree_cpu

mode, engine, split_mb, lake, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
kwargs = {{}}
t = time.perf_counter()
if mode != "in-process":  # as `binlake ingest --spark`: decode tasks on Spark, commits by `engine`
    from binlake.lake.engines import use_spark
    from binlake.spark import build_spark_session, spark_executor
    spark = build_spark_session("bench", master=mode, delta=engine == "delta-spark")
    use_spark(spark)
    kwargs["executor"] = spark_executor(spark)
else:
    engine = "delta-rs"
session = time.perf_counter() - t
opts = IngestOptions(lake=lake, files=files, split_bytes=split_mb << 20, quality=QualityConfig(enabled=False),
                     engine=engine)
t, c = time.perf_counter(), tree_cpu()
s = run_ingest(opts, **kwargs)
print(json.dumps({{"rows": sum(s.rows.values()), "seconds": time.perf_counter() - t, "cpu": tree_cpu() - c,
                  "session": session, "split": s.seconds}}))
"""


def scale_run(mode: str, files: list[str], split_mb: int, engine: str = "delta-spark",
              before: list[str] | None = None) -> dict:
    """One ingest of `files` (gates off) in a fresh process: in-process (delta-rs) or on Spark with master `mode`
    and `engine` committing. `before`: files ingested first the same way, in a process of their own and not timed
    (the timed run then ingests what `files` add: the next batch into tables that hold rows)."""
    lake = tempfile.mkdtemp(prefix="binlake-bench-scale-")
    try:
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
        if before:
            done = subprocess.run([sys.executable, "-c", SCALE_CHILD.format(root=str(HERE.parent)), mode, engine,
                                   str(split_mb), lake, *before], capture_output=True, text=True, env=env)
            if not any(line.startswith("{") for line in done.stdout.splitlines()):
                tail = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()][-3:]
                return {"mode": mode, "failed": done.returncode, "error": "first batch: " + " | ".join(tail)[-600:],
                        "load": round(os.getloadavg()[0], 1)}
        load = os.getloadavg()[0]
        done = subprocess.run([sys.executable, "-c", SCALE_CHILD.format(root=str(HERE.parent)), mode, engine,
                               str(split_mb), lake, *files], capture_output=True, text=True, env=env)
        load = max(load, os.getloadavg()[0])  # the higher of the load averages at the start and at the end
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            tail = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()][-3:]
            return {"mode": mode, "failed": done.returncode, "error": " | ".join(tail)[-600:], "load": round(load, 1)}
        run = json.loads(lines[-1])
        size = sum(os.path.getsize(f) for f in files if f not in (before or ()))
        run.update(mode=mode, mb=round(size / (1 << 20), 1), mb_per_s=round(size / (1 << 20) / run["seconds"], 2),
                   rows_per_s=round(run["rows"] / run["seconds"]), load=round(load, 1))
        return run
    finally:
        shutil.rmtree(lake, ignore_errors=True)


def _median(values: list[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def spark_scale(args: argparse.Namespace) -> int:
    """`--spark`: in-process, local[1] and local[2] on one large generated file and on a batch of 8 files (gates
    off, the command line's default 64 MB decode ranges), alternated per input, each in a fresh process, `--repeat`
    rounds; the medians of wall and CPU seconds (the process tree: JVM and Python workers included) are reported."""
    from benchmarks.big_binlog import cached

    wanted = (args.inputs or "one,batch").split(",")
    inputs = {}
    if "one" in wanted:
        one, _ = cached(args.one_mb, args.cache_dir)
        inputs[f"one file ({args.one_mb:g} MB)"] = [str(one)]
    if "batch" in wanted:
        batch_first, info = cached(args.batch_mb, args.cache_dir, files=8)
        inputs[f"8 files ({args.batch_mb:g} MB)"] = [str(batch_first.parent / n) for n in info["files"]]
    firsts: dict[str, list[str]] = {}
    if "next" in wanted:  # the hourly steady state: a batch into tables an earlier batch filled
        batch_first, info = cached(args.batch_mb, args.cache_dir, files=8)
        every = [str(batch_first.parent / n) for n in info["files"]]
        name = f"last 4 of the 8 files ({args.batch_mb:g} MB) into the lake of the first 4"
        inputs[name], firsts[name] = every, every[:4]
    modes = [m for m in ("in-process", "local[1]", "local[2]") if not args.modes or m in args.modes.split(",")]
    figures = {"cpus": os.cpu_count(), "split_mb": args.split_mb, "repeat": args.repeat,
               "spark_engine": args.spark_engine, "runs": []}
    for n in range(max(1, args.repeat)):
        for name, files in inputs.items():
            for mode in modes:
                run = scale_run(mode, files, args.split_mb, args.spark_engine, firsts.get(name))
                run.update(input=name, round=n)
                print(json.dumps(run, default=str), flush=True)
                figures["runs"].append(run)
    print("\n| input | run | seconds | CPU s | MB/s | rows/s | x in-process (wall) | x in-process (CPU) | "
          "decode s | merge s | session start s | load (1 min) |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    medians = []
    for name in inputs:
        base = None
        for mode in modes:
            runs = [r for r in figures["runs"] if r["input"] == name and r["mode"] == mode]
            ok = [r for r in runs if "seconds" in r]
            loads = sorted(r["load"] for r in runs)
            load = f"{loads[0]}-{loads[-1]}" if loads[0] != loads[-1] else f"{loads[0]}"
            if not ok:
                r = runs[-1]
                print(f"| {name} | {mode} | failed ({r['failed']}): {r['error'][:120]} | | | | | | | | | {load} |")
                continue
            wall, cpu = _median([r["seconds"] for r in ok]), _median([r["cpu"] for r in ok])
            if mode == "in-process":
                base = (wall, cpu)
            mb, rows = ok[0]["mb"], ok[0]["rows"]
            med = {"input": name, "mode": mode, "runs": len(ok), "seconds": round(wall, 2), "cpu": round(cpu, 2),
                   "mb_per_s": round(mb / wall, 2), "rows_per_s": round(rows / wall),
                   "session": round(_median([r["session"] for r in ok]), 2), "load": load,
                   **{stage: round(_median([r["split"].get(stage, 0.0) for r in ok]), 2)
                      for stage in ("decode", "history append", "merge")}}
            medians.append(med)
            ratio = f"{wall / base[0]:.2f}" if base else ""
            ratio_cpu = f"{cpu / base[1]:.2f}" if base else ""
            print(f"| {name} | {mode} | {wall:.1f} | {cpu:.1f} | {med['mb_per_s']} | {med['rows_per_s']:,} | "
                  f"{ratio} | {ratio_cpu} | {med['decode']} | {med['merge']} | {med['session']} | {load} |")
    figures["medians"] = medians
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--spark", action="store_true", help="instead: in-process against Spark local[1] and "
                        "local[2] on one large generated binlog and on a batch of 8 (benchmarks/big_binlog.py)")
    parser.add_argument("--one-mb", type=float, default=500, help="--spark: size of the one large file")
    parser.add_argument("--batch-mb", type=float, default=500, help="--spark: total size of the 8 files")
    parser.add_argument("--split-mb", type=int, default=64, help="--spark: decode range size (the CLI default)")
    parser.add_argument("--cache-dir", help="--spark: where the generated binlogs are kept")
    parser.add_argument("--spark-engine", default="delta-spark", choices=("delta-spark", "delta-rs"),
                        help="--spark: the engine committing the Spark runs (default delta-spark, as `binlake ingest "
                        "--spark`); in-process is always delta-rs")
    parser.add_argument("--modes", help="--spark: only these runs (comma-separated: in-process,local[1],local[2])")
    parser.add_argument("--inputs", help="--spark: only these inputs (comma-separated: one,batch,next; default "
                        "one,batch; next: the last 4 of the 8 files ingested into the lake of the first 4, timed)")
    parser.add_argument("--repeat", type=int, default=3, help="decode-only and in-process ingest runs, "
                        "alternated; the best of each is reported (other work on the machine only slows runs down). "
                        "--spark: rounds of every run, medians reported")
    args = parser.parse_args()
    if args.spark:
        return spark_scale(args)
    from benchmarks.decode import cached_binlog

    files = [str(f) for f in cached_binlog(500_000, False)]
    decodes, locals_, bare = [], [], []
    for _ in range(max(1, args.repeat)):
        decodes.append(decode_only(files))
        locals_.append(run_child("local", files))
        bare.append(run_child("local-nogates", files))
    wall, cpu = min(d[0] for d in decodes), min(d[1] for d in decodes)
    local = min(locals_, key=lambda r: r["first"])
    nogates = min(bare, key=lambda r: r["first"])
    figures = {"decode_only_seconds": round(wall, 2), "decode_only_cpu_seconds": round(cpu, 2), "repeat": args.repeat}
    figures["local"] = local
    figures["local_without_gates"] = nogates
    figures["ingest_over_decode"] = round(local["first"] / wall, 2)
    figures["ingest_over_decode_cpu"] = round(min(r["first_cpu"] for r in locals_) / cpu, 2)
    figures["ingest_without_gates_over_decode"] = round(nogates["first"] / wall, 2)
    figures["ingest_without_gates_over_decode_cpu"] = round(min(r["first_cpu"] for r in bare) / cpu, 2)
    # The same with the child's one-off imports counted in (a fresh process pays them once).
    figures["ingest_without_gates_cold_over_decode"] = round((nogates["first"] + nogates["imports"]) / wall, 2)
    figures["gates"] = gate_figures(local)
    figures["rows_per_second"] = round(local["rows"] / local["first"])
    if not args.no_spark:
        for cores in (1, 2):
            figures[f"spark_local_{cores}"] = run_child(f"spark{cores}", files)
        figures["spark_speedup_2_over_1"] = round(
            figures["spark_local_1"]["first"] / figures["spark_local_2"]["first"], 2)
    figures["peak_rss_mb_self"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(figures, indent=2, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
