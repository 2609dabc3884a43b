#!/usr/bin/env bash
# install-deps.sh: install what building and testing Leapfrog needs.
#
# Idempotent and fast when everything is present (no network then).  As root
# it installs the missing Debian packages (PostgreSQL 15 server and PGXS,
# pg_regress, pg_isolation_regress, IPC::Run for the TAP tests, a C
# toolchain, python3-venv) and creates the Python venv .venv with the
# packages the Python tests and benchmarks use, and the project's own
# command-line tool `leapfrog` (.venv/bin/leapfrog).  Not as root, it says
# exactly what to install and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

PG_MAJOR=15
PY_PKGS=(psycopg[binary] pytest matplotlib)
PY_IMPORTS="import psycopg, pytest, matplotlib"

missing=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
need_pkg() { have_pkg "$1" || missing+=("$1"); }

need_pkg "postgresql-$PG_MAJOR"
need_pkg "postgresql-server-dev-$PG_MAJOR"
need_pkg libipc-run-perl
command -v make >/dev/null || need_pkg make
command -v gcc >/dev/null || need_pkg gcc
command -v prove >/dev/null || need_pkg perl
# The venv is built from Debian's python3 so that the postgres OS user (the
# tests run as postgres when invoked as root) can execute it.
if [ ! -x /usr/bin/python3 ]; then
    need_pkg python3
    need_pkg python3-venv
elif ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
    need_pkg python3-venv
fi

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: missing Debian packages: ${missing[*]}" >&2
        echo "install-deps: run as root:" >&2
        echo "    apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
for f in "$PG_BIN/initdb" "$PG_BIN/postgres" \
         "/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test/regress/pg_regress" \
         "/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test/isolation/pg_isolation_regress"; do
    [ -x "$f" ] || { echo "install-deps: $f is missing after install" >&2; exit 1; }
done
if [ "$(pg_config --version | sed 's/^PostgreSQL \([0-9]*\).*/\1/')" != "$PG_MAJOR" ]; then
    echo "install-deps: pg_config is not PostgreSQL $PG_MAJOR: $(command -v pg_config) ($(pg_config --version))" >&2
    exit 1
fi

# Python venv for the Python tests and the benchmarks.  It must come from
# /usr/bin/python3: a venv made from a private interpreter (pyenv under
# /root) cannot be run by the postgres OS user.
if ! grep -qx 'home = /usr/bin' .venv/pyvenv.cfg 2>/dev/null ||
   ! .venv/bin/python -c "$PY_IMPORTS" 2>/dev/null; then
    echo "install-deps: creating .venv"
    rm -rf .venv
    /usr/bin/python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q "${PY_PKGS[@]}"
    .venv/bin/python -c "$PY_IMPORTS"
fi

# The command-line tool `leapfrog` (python/leapfrog_cli, declared in
# pyproject.toml), installed editable: .venv/bin/leapfrog runs this
# checkout's code.  Setuptools 66 (Debian 12's venv) builds with wheel.
if [ ! -x .venv/bin/leapfrog ] ||
   ! .venv/bin/python -c 'import os, leapfrog_cli
assert os.path.dirname(leapfrog_cli.__file__) == os.path.realpath("python/leapfrog_cli")' 2>/dev/null; then
    echo "install-deps: installing the leapfrog command into .venv"
    .venv/bin/python -c 'import wheel' 2>/dev/null || .venv/bin/python -m pip install -q wheel
    if ! .venv/bin/python -m pip install -q --no-build-isolation -e . >.venv/leapfrog-install.log 2>&1; then
        cat .venv/leapfrog-install.log >&2
        echo "install-deps: pip install -e . failed" >&2
        exit 1
    fi
    .venv/bin/leapfrog --version >/dev/null
fi
