#!/usr/bin/env bash
# binlake developer entry point: `setup`, `demo` (set up + run the main job), `test` (set up + ruff + pytest),
# `jars` (only the Maven jar steps of setup: Delta, Kafka).
# Installs what the machine lacks (Debian packages when run as root, the venv) and is safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY=${BINLAKE_PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

log() { printf '[binlake] %s\n' "$*" >&2; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    log "missing system packages ($*); install them with: sudo apt-get install -y $*"
    return 0
  fi
  log "installing Debian packages: $*"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

setup_system() {
  local pkgs=()
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || pkgs+=(mariadb-server mariadb-client)
  command -v mariadb-binlog >/dev/null 2>&1 || pkgs+=(mariadb-client)
  command -v java >/dev/null 2>&1 || pkgs+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null 2>&1 || pkgs+=(maven)  # fetches the Delta jars (setup_delta_jars)
  command -v chromium >/dev/null 2>&1 || pkgs+=(chromium)  # headless: the tests render the HTML reports
  command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)  # the Kafka sink's Redis consumer example
  if [ ${#pkgs[@]} -gt 0 ]; then apt_install "${pkgs[@]}"; fi
}

setup_venv() {
  local stamp="$VENV/.binlake-installed"
  local want
  want=$(sha256sum pyproject.toml | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  log "installing binlake and its pinned dependencies into $VENV (first run takes several minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e ".[all]"
  echo "$want" > "$stamp"
}

# The Delta Lake jars for the delta-spark engine, fetched from Maven Central with Maven into .venv/jars/delta
# (binlake/spark.py puts them on spark.jars). The versions come from the installed delta-spark and pyspark
# packages, so the jars always match the pins; scripts/maven/pom.xml says what is fetched. Maven's local
# repository is .venv/m2, private to this venv: a fresh machine needs no ~/.m2 state, nothing outside the project
# is written, and deleting .venv resets everything. Skipped when the stamp (pom + versions) matches.
setup_delta_jars() {
  local dir="$VENV/jars/delta" repo="$VENV/m2" pom="$ROOT/scripts/maven/pom.xml"
  local versions delta spark_ver spark_bin want excludes
  versions=$("$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import os
import re

import pyspark

names = {re.sub(r"-[0-9][^-]*(-[0-9][^-]*)?\.jar$", "", f) for f in os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))}
print(md.version("delta-spark"), md.version("pyspark"), ",".join(sorted(n for n in names if n)))
PY
  ) || { log "cannot read the delta-spark and pyspark versions from $VENV (is the venv complete?)"; return 1; }
  read -r delta spark_ver excludes <<<"$versions"
  spark_bin=$(echo "$spark_ver" | cut -d. -f1-2)
  want="$( (cat "$pom"; echo "$delta $spark_ver $excludes") | sha256sum | cut -c1-16)"
  if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ]; then return 0; fi
  command -v mvn >/dev/null 2>&1 || { log "Maven (mvn) is missing: install it (apt-get install -y maven) and re-run setup"; return 1; }
  log "fetching the Delta jars (io.delta:delta-spark_${spark_bin}_2.13:$delta and its dependencies Spark lacks) into $dir"
  local tmp="$dir.tmp" out
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # Artifacts Spark already ships (any version) are left out: Spark's own copies are the ones loaded anyway.
  if ! out=$(mvn -B -q -U -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$repo" -Ddelta.version="$delta" -Dspark.binary="$spark_bin" \
      dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime -DexcludeArtifactIds="$excludes" 2>&1); then
    # Maven's first error line is the cause (the rest is boilerplate).
    printf '%s\n' "$out" | sed -e 's/\x1b\[[0-9;]*m//g' -e 's/ -> \[Help 1\]$//' | grep -m 1 -E '^\[ERROR\] [^ ]' >&2 || true
    log "Maven could not fetch the Delta jars (above); the delta-spark engine needs them in $dir"
    rm -rf "$tmp"
    return 1
  fi
  if ! ls "$tmp"/delta-spark_*.jar >/dev/null 2>&1; then
    log "Maven finished but $tmp holds no delta-spark jar"
    return 1
  fi
  echo "$want" > "$tmp/.stamp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  log "Delta jars ready: $(ls "$dir"/*.jar | wc -l) jars, $(du -sh "$dir" | cut -f1) in $dir"
}

# The Apache Kafka broker jars (kafka_2.13 and its runtime dependencies) for the Kafka sink's tests, benchmark and
# demo, fetched from Maven Central with Maven into .venv/jars/kafka; binlake/testing/kafka.py runs the broker from
# them with Java (single-node KRaft on loopback). scripts/maven/kafka-pom.xml says what is fetched; same private
# Maven repository and stamp rule as the Delta jars.
setup_kafka_jars() {
  local dir="$VENV/jars/kafka" repo="$VENV/m2" pom="$ROOT/scripts/maven/kafka-pom.xml" want
  want="$(sha256sum "$pom" | cut -c1-16)"
  if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ]; then return 0; fi
  command -v mvn >/dev/null 2>&1 || { log "Maven (mvn) is missing: install it (apt-get install -y maven) and re-run setup"; return 1; }
  log "fetching the Kafka broker jars (org.apache.kafka:kafka_2.13 and its dependencies) into $dir"
  local tmp="$dir.tmp" out
  rm -rf "$tmp"
  mkdir -p "$tmp"
  if ! out=$(mvn -B -q -U -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$repo" \
      dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime 2>&1); then
    printf '%s\n' "$out" | sed -e 's/\x1b\[[0-9;]*m//g' -e 's/ -> \[Help 1\]$//' | grep -m 1 -E '^\[ERROR\] [^ ]' >&2 || true
    log "Maven could not fetch the Kafka jars (above); the Kafka sink's tests need them in $dir"
    rm -rf "$tmp"
    return 1
  fi
  if ! ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1; then
    log "Maven finished but $tmp holds no kafka_2.13 jar"
    return 1
  fi
  echo "$want" > "$tmp/.stamp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  log "Kafka jars ready: $(ls "$dir"/*.jar | wc -l) jars, $(du -sh "$dir" | cut -f1) in $dir"
}

cmd=${1:-help}
shift || true
case "$cmd" in
  setup)
    setup_system
    setup_venv
    setup_delta_jars
    setup_kafka_jars
    ;;
  jars)
    setup_delta_jars
    setup_kafka_jars
    ;;
  demo)
    setup_system
    setup_venv
    setup_delta_jars
    setup_kafka_jars
    export SPARK_LOCAL_IP=127.0.0.1
    exec "$VENV/bin/binlake" demo "$@"
    ;;
  test)
    setup_system
    setup_venv
    setup_delta_jars
    setup_kafka_jars
    export SPARK_LOCAL_IP=127.0.0.1
    # The jars are in place, so a skipped delta-spark test would hide a broken setup: make it a failure.
    export BINLAKE_REQUIRE_DELTA_SPARK=1
    export BINLAKE_REQUIRE_KAFKA=1  # likewise the Kafka broker jars
    log "ruff check"
    "$VENV/bin/ruff" check .
    log "pytest"
    set +e
    "$VENV/bin/python" -m pytest "$@"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then
      log "pytest collected no tests: failing"
      exit 1
    fi
    exit "$rc"
    ;;
  *)
    echo "usage: scripts/dev.sh setup|demo|test [pytest args]|jars" >&2
    exit 2
    ;;
esac
