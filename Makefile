# Leapfrog: PGXS build.  `make demo` and `make test` are the two entry points
# for a newcomer; both install what they need (see README.md).

EXTENSION   = leapfrog
MODULE_big  = leapfrog
OBJS        = $(patsubst %.c,%.o,$(wildcard src/*.c))
DATA        = sql/leapfrog--0.1.sql
PG_CPPFLAGS = -I$(srcdir)/src -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers -Werror

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

demo: deps
	./scripts/demo.sh

test: deps
	./scripts/test.sh

# Benchmarks are not tests: they report figures (bench/README.md).
bench-smoke: deps
	.venv/bin/python bench/run.py --profile smoke

bench-quick: deps
	.venv/bin/python bench/run.py --profile quick

bench: deps
	.venv/bin/python bench/run.py --profile full

# Not part of `make test`: the background and snapshot differential tests
# over many seeds, each run SOAK_REPEAT times (timing decides what the
# worker has migrated when, so a run can differ from the last).  A flaky
# failure here is a wrong answer: replay its seed with LEAPFROG_DIFF_SEEDS.
SOAK_BACKGROUND ?= 2000
SOAK_SNAPSHOTS ?= 1000
SOAK_REPEAT ?= 1
soak: deps
	LEAPFROG_SUITES=python \
	LEAPFROG_PYTEST_ARGS="test/python/test_differential.py::test_differential_background test/python/test_differential.py::test_differential_snapshots" \
	LEAPFROG_DIFF_BACKGROUND_COUNT=$(SOAK_BACKGROUND) LEAPFROG_DIFF_SNAPSHOT_COUNT=$(SOAK_SNAPSHOTS) \
	LEAPFROG_DIFF_REPEAT=$(SOAK_REPEAT) ./scripts/test.sh
