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

.PHONY: deps demo test bench bench-quick bench-smoke
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
