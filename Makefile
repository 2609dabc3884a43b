# Leapfrog: PGXS build.  `make demo` and `make test` are the two entry points
# for a newcomer; both install what they need (see README.md).  Packagers:
# `make && make install`, then `make installcheck` (as a user that may run
# initdb: every suite runs on a temporary instance that preloads leapfrog,
# configured by test/leapfrog.conf).

EXTENSION   = leapfrog
MODULE_big  = leapfrog
OBJS        = src/alter.o src/api.o src/replace.o src/catalog.o src/complete.o src/compute.o src/estimate.o src/failed.o src/guc.o src/init.o src/live.o \
              src/migrate.o src/pacing.o src/probe.o src/progress.o src/relevance.o src/rowcopy.o src/scan.o src/snapshot.o \
              src/start.o src/units.o src/utility.o src/worker.o
DATA        = sql/leapfrog--0.1.sql
PG_CPPFLAGS = -I$(srcdir)/src
# Warnings, errors only where the code is ours to fix (make test and CI set
# WERROR=-Werror), never in a packager's build.
WERROR     ?=
PG_CFLAGS   = -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare \
              -Wno-missing-field-initializers $(WERROR)

# Tests, the PGXS way: pg_regress, isolation and TAP suites, run by
# `make installcheck` (scripts/test.sh runs them one kind at a time, with
# the Python tests, for `make test`).
TEMP_CONFIG     = --temp-config=$(srcdir)/test/leapfrog.conf
REGRESS         = create_extension replace_type split ctas filtered reads writes unique_indexes plans \
                  fkey fkey_actions migrations_view explain errors search_path privileges \
                  row_errors step_copy alter_table aggregate join live live_in_place live_join live_shared shared_join shared_null complete compute plan estimates parallel probe retired_pages pinned
REGRESS_OPTS    = --inputdir=$(srcdir)/test/regress --outputdir=test/regress \
                  --temp-instance=test/regress/tmp_check $(TEMP_CONFIG)
ISOLATION       = same_row abort rc_update rr_serialization insert_conflict start_lock \
                  background rr_completion rr_before_start fkey_snapshot rc_completion \
                  rr_worker fkey_incoming rr_replace group_claim live_input live_rows live_fence live_old_snapshot compute_reads live_shared retired_shared live_moved_seed shared_join shared_join_types live_join_complete live_stale_cache shared_null live_null quarantine_join \
                  failed_rows rr_chain rc_chain_rounds rc_chain_keys complete_walk compute_pinned rc_stable_key ssi_computed retired_row_lock
ISOLATION_OPTS  = --inputdir=$(srcdir)/test/isolation --outputdir=test/isolation/output_iso \
                  --temp-instance=test/isolation/tmp_check_iso $(TEMP_CONFIG)
TAP_TESTS       = 1
PROVE_TESTS     = test/t/*.pl
EXTRA_CLEAN     = test/regress/results test/regress/regression.diffs \
                  test/regress/regression.out test/regress/log test/regress/tmp_check \
                  test/isolation/output_iso test/isolation/tmp_check_iso

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
endif

# Every file includes the shared header (PGXS tracks no header dependencies).
$(OBJS): src/leapfrog.h

.PHONY: deps demo test soak bench bench-quick bench-smoke
deps:
	./scripts/install-deps.sh

# DEMO_ARGS="--migration aggregate" (or join) shows the other migrations.
DEMO_ARGS ?=
demo: deps
	./scripts/demo.sh $(DEMO_ARGS)

test: deps
	./scripts/test.sh

# Not part of `make test`: the background and snapshot differential tests
# over many seeds, each run SOAK_REPEAT times (timing decides what the
# worker has migrated when, so a run can differ from the last).  A flaky
# failure here is a wrong answer: replay its seed with LEAPFROG_DIFF_SEEDS.
SOAK_BACKGROUND ?= 2000
SOAK_SNAPSHOTS ?= 1000
SOAK_REPEAT ?= 1
soak: deps
	LEAPFROG_SUITES=python \
	LEAPFROG_PYTEST_ARGS="test/python/test_differential.py::test_differential_background test/python/test_differential.py::test_differential_snapshots test/python/test_differential.py::test_differential_chain test/python/test_differential.py::test_differential_chain_background test/python/test_differential.py::test_differential_chain_snapshots" \
	LEAPFROG_DIFF_BACKGROUND_COUNT=$(SOAK_BACKGROUND) LEAPFROG_DIFF_SNAPSHOT_COUNT=$(SOAK_SNAPSHOTS) \
	LEAPFROG_DIFF_REPEAT=$(SOAK_REPEAT) ./scripts/test.sh

# Benchmarks are not tests: they report figures (bench/README.md).
bench-smoke: deps
	.venv/bin/python bench/run.py --profile smoke

bench-quick: deps
	.venv/bin/python bench/run.py --profile quick

bench: deps
	.venv/bin/python bench/run.py --profile full
