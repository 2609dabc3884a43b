#!/usr/bin/env bash
# Leapfrog demo: a live TPC-C load, a table split applied with leapfrog.start,
# the switch time, a progress bar until the data has moved, the load's error
# count, and a check of the result against the eager migration.
# Usage: scripts/demo.sh [--warehouses N] [--rate TPS]   (see bench/demo.py -h)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"

# Python dependencies (psycopg, matplotlib) in the project venv.
if ! "$REPO/.venv/bin/python" -c 'import psycopg, matplotlib' >/dev/null 2>&1; then
    echo "demo: setting up $REPO/.venv (psycopg, matplotlib)"
    python3 -m venv "$REPO/.venv"
    "$REPO/.venv/bin/pip" install -q -r "$REPO/bench/requirements.txt"
fi

# Build and install the extension; the demo explains what is missing if that fails.
mkdir -p "$REPO/bench/out"
INSTALL_LOG="$REPO/bench/out/demo-make-install.log"
if make -C "$REPO" install >"$INSTALL_LOG" 2>&1; then
    export LEAPFROG_DEMO_INSTALL=ok
else
    export LEAPFROG_DEMO_INSTALL=failed
    export LEAPFROG_DEMO_INSTALL_LOG="$INSTALL_LOG"
fi

exec "$REPO/.venv/bin/python" "$REPO/bench/demo.py" "$@"
