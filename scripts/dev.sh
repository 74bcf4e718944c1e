#!/usr/bin/env bash
# binlake developer entry point: `setup`, `demo` (set up + run the main job), `test` (set up + ruff + pytest).
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
  command -v chromium >/dev/null 2>&1 || pkgs+=(chromium)  # headless: the tests render the HTML reports
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

cmd=${1:-help}
shift || true
case "$cmd" in
  setup)
    setup_system
    setup_venv
    ;;
  demo)
    setup_system
    setup_venv
    export SPARK_LOCAL_IP=127.0.0.1
    exec "$VENV/bin/binlake" demo "$@"
    ;;
  test)
    setup_system
    setup_venv
    export SPARK_LOCAL_IP=127.0.0.1
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
    echo "usage: scripts/dev.sh setup|demo|test [pytest args]" >&2
    exit 2
    ;;
esac
