#!/usr/bin/env bash
# test.sh: the body of `make test`.
#
# Builds (warnings are errors here) and installs the extension, then runs
#   1. the pg_regress suite        test/regress   (make installcheck, REGRESS)
#   2. the isolation suite         test/isolation (make installcheck, ISOLATION)
#   3. the TAP tests               test/t/*.pl    (make installcheck, TAP_TESTS)
#   4. the Python tests            test/python, bench/tests (.venv's pytest)
# each against temporary instances configured by test/leapfrog.conf (the
# Makefile declares the suites, as PGXS expects: packagers run them with
# `make installcheck`), and ends with one line "N passed, N failed" summing
# all suites.
#
# PostgreSQL refuses to run initdb as root: as root, the suites run as the
# postgres OS user on a copy of the tree in a scratch directory under /tmp
# (the checkout may be owned by root or unreadable to postgres).
# LEAPFROG_KEEP_TMP=1 keeps the scratch directory; LEAPFROG_SUITES limits the
# suites run (for example LEAPFROG_SUITES="regress isolation");
# LEAPFROG_PYTEST_ARGS replaces the Python suite's test paths (make soak).
# The tests' own knobs (LEAPFROG_DIFF_*, LEAPFROG_STRESS_*, ...) pass through.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SUITES=${LEAPFROG_SUITES:-regress isolation tap python}

PG_CONFIG=${PG_CONFIG:-pg_config}
PG_BINDIR=$("$PG_CONFIG" --bindir)

echo "== build and install"
if ! make -s WERROR=-Werror || ! make -s install; then
    echo "build or install failed (make install writes into $("$PG_CONFIG" --pkglibdir) and $("$PG_CONFIG" --sharedir)/extension: run as root)"
    echo "0 passed, 1 failed"
    exit 1
fi

# Scratch directory, and the user the suites run as.
WORK=$(mktemp -d /tmp/leapfrog-test.XXXXXX)
# Never leave a temporary server behind (interrupted run, crashed suite).
stop_servers() {
    local pidfile
    for pidfile in "$WORK"/repo/test/*/tmp_check*/data/postmaster.pid \
                   "$WORK"/repo/tmp_check/*/pgdata/postmaster.pid; do
        [ -f "$pidfile" ] && kill -QUIT "$(head -n 1 "$pidfile")" 2>/dev/null
    done
    return 0
}
trap stop_servers EXIT
trap 'exit 130' INT TERM
mkdir -p "$WORK/repo" "$WORK/tmp"
tar -C "$ROOT" --exclude=./.git --exclude=./.venv --exclude=./bench/out --exclude='*.o' \
    --exclude='*.so' --exclude='*.bc' -cf - . | tar -C "$WORK/repo" -xf -
if [ "$(id -u)" -eq 0 ]; then
    RUN=(runuser -u postgres --)
    chown -R postgres: "$WORK"
    # The venv's interpreter must be runnable by postgres; if the checkout is
    # not reachable by postgres, run a copy of the venv.
    PY=$ROOT/.venv/bin/python
    if [ -x "$PY" ] && ! "${RUN[@]}" "$PY" -c 'import pytest' >/dev/null 2>&1; then
        cp -a "$ROOT/.venv" "$WORK/venv" && chown -R postgres: "$WORK/venv"
        PY=$WORK/venv/bin/python
    fi
else
    RUN=()
    PY=$ROOT/.venv/bin/python
fi

# A clean environment for the clients: the temporary instances are reached
# through the variables pg_regress and the test frameworks set themselves.
unset PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGSERVICE PGPASSWORD \
      PGPASSFILE PGOPTIONS PGDATA PGAPPNAME PGSSLMODE PGTZ PGDATESTYLE
export PATH="$PG_BINDIR:$PATH"
export TMPDIR="$WORK/tmp"
export LEAPFROG_ROOT="$WORK/repo"      # the tree the tests see (a copy)
export LEAPFROG_TEST_TMP="$WORK/tmp"   # writable scratch space for tests
export PG_CONFIG
# isolationtester cancels a step stuck longer than this (default 300 s).
export PGISOLATIONTIMEOUT=${PGISOLATIONTIMEOUT:-120}

as_runner() { "${RUN[@]}" env PATH="$PATH" TMPDIR="$TMPDIR" LEAPFROG_ROOT="$LEAPFROG_ROOT" \
    LEAPFROG_TEST_TMP="$LEAPFROG_TEST_TMP" PG_CONFIG="$PG_CONFIG" \
    PGISOLATIONTIMEOUT="$PGISOLATIONTIMEOUT" "$@"; }

TOTAL_PASS=0
TOTAL_FAIL=0
FAILED_SUITES=()

# Count pg_regress-style result lines ("test x ... ok", "... FAILED").
count_regress() {   # $1 = suite name, $2 = log, $3 = exit code, $4 = outputdir
    local ok failed
    ok=$(grep -cE '\.\.\. ok( |$)' "$2")
    failed=$(grep -cE '\.\.\. (FAILED|failed)' "$2")
    if [ "$3" -ne 0 ] && [ "$failed" -eq 0 ]; then
        failed=1      # the suite could not run at all
    fi
    TOTAL_PASS=$((TOTAL_PASS + ok))
    TOTAL_FAIL=$((TOTAL_FAIL + failed))
    if [ "$3" -ne 0 ] || [ "$failed" -ne 0 ]; then
        FAILED_SUITES+=("$1")
        if [ -f "$4/regression.diffs" ]; then
            echo "---- $1: regression.diffs"
            head -n 3000 "$4/regression.diffs"
        fi
        for log in "$4/log/postmaster.log"; do
            if [ -f "$log" ]; then
                echo "---- $1: last lines of the server log"
                tail -n 60 "$log"
            fi
        done
    fi
}

R=$WORK/repo/test

# One kind of the Makefile's suites: make installcheck with the others off.
installcheck() {   # $1 = kind: REGRESS, ISOLATION or TAP_TESTS; then make variables
    local off=() k kind=$1
    shift
    for k in REGRESS ISOLATION TAP_TESTS; do [ "$k" = "$kind" ] || off+=("$k="); done
    (cd "$WORK/repo" && as_runner make -s installcheck PG_CONFIG="$PG_CONFIG" "${off[@]}" "$@")
}

for suite in $SUITES; do
case $suite in
regress)
    echo "== pg_regress: test/regress"
    installcheck REGRESS 2>&1 | tee "$WORK/regress.log"
    count_regress regress "$WORK/regress.log" "${PIPESTATUS[0]}" "$R/regress"
    ;;
isolation)
    echo "== isolation: test/isolation"
    installcheck ISOLATION 2>&1 | tee "$WORK/isolation.log"
    count_regress isolation "$WORK/isolation.log" "${PIPESTATUS[0]}" "$R/isolation/output_iso"
    ;;
tap)
    shopt -s nullglob
    tap_files=("$R"/t/*.pl)
    shopt -u nullglob
    [ "${#tap_files[@]}" -gt 0 ] || continue
    echo "== TAP: test/t"
    installcheck TAP_TESTS PROVE_FLAGS=-v 2>&1 | tee "$WORK/tap.log"
    rc=${PIPESTATUS[0]}
    ok=$(grep -cE '^ok [0-9]+' "$WORK/tap.log")
    failed=$(grep -cE '^not ok [0-9]+' "$WORK/tap.log")
    if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
    TOTAL_PASS=$((TOTAL_PASS + ok)); TOTAL_FAIL=$((TOTAL_FAIL + failed))
    if [ "$rc" -ne 0 ]; then
        FAILED_SUITES+=(tap)
        for f in "$WORK"/repo/tmp_check/log/*; do
            [ -f "$f" ] && { echo "---- TAP log $f (tail)"; tail -n 40 "$f"; }
        done
    fi
    ;;
python)
    [ -d "$R/python" ] || continue
    echo "== pytest: ${LEAPFROG_PYTEST_ARGS:-test/python bench/tests}"
    if [ ! -x "$PY" ]; then
        echo "no .venv: run ./scripts/install-deps.sh"
        TOTAL_FAIL=$((TOTAL_FAIL + 1)); FAILED_SUITES+=(python); continue
    fi
    # LEAPFROG_PYTEST_ARGS: other tests or options (make soak), word-split.
    (cd "$R/.." && as_runner "$PY" -m pytest -q -p no:cacheprovider \
        ${LEAPFROG_PYTEST_ARGS:-test/python bench/tests}) 2>&1 | tee "$WORK/python.log"
    rc=${PIPESTATUS[0]}
    last=$(grep -E '[0-9]+ (passed|failed|error)' "$WORK/python.log" | tail -n 1)
    ok=$(echo "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || true)
    failed=$(echo "$last" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || true)
    errors=$(echo "$last" | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+' || true)
    ok=${ok:-0}; failed=$(( ${failed:-0} + ${errors:-0} ))
    # 5 = no test collected: not a failure of this suite.
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && [ "$failed" -eq 0 ]; then failed=1; fi
    TOTAL_PASS=$((TOTAL_PASS + ok)); TOTAL_FAIL=$((TOTAL_FAIL + failed))
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then FAILED_SUITES+=(python); fi
    ;;
*)
    echo "unknown suite $suite"; exit 2 ;;
esac
done

echo
if [ "${#FAILED_SUITES[@]}" -gt 0 ]; then
    echo "failed suites: ${FAILED_SUITES[*]} (outputs kept in $WORK)"
elif [ -z "${LEAPFROG_KEEP_TMP:-}" ]; then
    rm -rf "$WORK"
else
    echo "outputs kept in $WORK"
fi
echo "$TOTAL_PASS passed, $TOTAL_FAIL failed"
[ "${#FAILED_SUITES[@]}" -eq 0 ] && [ "$TOTAL_FAIL" -eq 0 ]
