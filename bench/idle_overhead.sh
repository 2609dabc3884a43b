#!/usr/bin/env bash
# Idle cost of Leapfrog: instructions per statement with the extension
# preloaded and installed but no migration running, against the same server
# without it.  Instruction counts (valgrind's callgrind, single-user
# postgres) do not depend on what else the machine is doing; the marginal
# cost per statement is the difference between a run of N and of 3N
# statements, so start-up costs cancel out.
#
#   bench/idle_overhead.sh [N]      (default N=3000; needs valgrind, pgbench)
# Run as root or as a user that may run initdb (not root).
set -euo pipefail
N=${1:-3000}
BIN=$(pg_config --bindir)
WORK=$(mktemp -d /tmp/leapfrog-idle.XXXXXX)
RUN_AS=()
if [ "$(id -u)" = 0 ]; then chown postgres "$WORK"; RUN_AS=(runuser -u postgres --); fi
cd "$WORK"
"${RUN_AS[@]}" "$BIN/initdb" -D "$WORK/data" -A trust >/dev/null
"${RUN_AS[@]}" "$BIN/postgres" --single -D "$WORK/data" -c shared_preload_libraries=leapfrog postgres \
    <<< "CREATE EXTENSION leapfrog;" >/dev/null
"${RUN_AS[@]}" "$BIN/pg_ctl" -D "$WORK/data" -o "-c listen_addresses='' -c unix_socket_directories=$WORK" -w start >/dev/null
"${RUN_AS[@]}" "$BIN/pgbench" -h "$WORK" -i -s 10 -q postgres >/dev/null 2>&1
"${RUN_AS[@]}" "$BIN/pg_ctl" -D "$WORK/data" -w stop >/dev/null
for n in "$N" $((3 * N)); do
    python3 -c "import random; random.seed($n); print('\n'.join('SELECT abalance FROM pgbench_accounts WHERE aid = %d;' % random.randint(1, 1000000) for _ in range($n)))" > "$WORK/stmts_$n.sql"
done
chmod a+r "$WORK"/stmts_*.sql
count() {   # preload, statements -> instructions
    "${RUN_AS[@]}" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$BIN/postgres" --single -D "$WORK/data" -c shared_preload_libraries="$1" postgres \
        < "$2" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
base_n=$(count "" "$WORK/stmts_$N.sql");          base_3n=$(count "" "$WORK/stmts_$((3 * N)).sql")
lf_n=$(count leapfrog "$WORK/stmts_$N.sql");      lf_3n=$(count leapfrog "$WORK/stmts_$((3 * N)).sql")
python3 - "$N" "$base_n" "$base_3n" "$lf_n" "$lf_3n" <<'PY'
import sys
n, b1, b3, l1, l3 = map(int, sys.argv[1:])
base = (b3 - b1) / (2 * n)
lf = (l3 - l1) / (2 * n)
print(f"instructions per statement: without leapfrog {base:,.0f}, with leapfrog (idle) {lf:,.0f}")
print(f"idle overhead per statement: {lf - base:,.0f} instructions ({(lf / base - 1) * 100:.2f}%)")
PY
rm -rf "$WORK"
