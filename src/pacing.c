/*-------------------------------------------------------------------------
 * pacing.c
 *	  How much CPU the background workers take: what the rest of the server
 *	  leaves spare, and never less than a floor.
 *
 * Why: below saturation, workers that run flat out take their fair share of
 * the cores and can push the capacity left for the sessions below their
 * arrival rate; a queue then grows for as long as the migration runs
 * (bench/README.md, "Pacing the workers").  At saturation there is no spare
 * capacity, and the migration must still end.
 *
 * The evidence is the machine's CPU time (Linux /proc/stat, all CPUs: busy
 * is everything but idle and iowait, so steal counts as busy) minus the CPU
 * time of the leapfrog workers themselves (each adds its getrusage() time
 * to a shared counter).  That difference, U cores, is what the sessions,
 * their clients and the server's other processes used.  Every
 * LF_PACING_PERIOD_MS a worker measures U (smoothed over two periods) and
 * sets the workers' budget to
 *
 *		B = ncpu - U * (1 + leapfrog.background_headroom)
 *
 * cores, shared evenly among the running workers, each at most a whole
 * core and at least its part of the floor: leapfrog.background_min_share
 * of a core for all the workers together (floor_share).  After
 * batches that took c ms of CPU in w ms, a worker sleeps c / share - w, so
 * over batches and pause it uses its share.  What a round did not get (a
 * look's pause, a wake-up late on a busy machine) is owed to it, up to
 * LF_PACING_MAX_CREDIT_MS of pause the next rounds do not take: until
 * 2026-11-29 it was lost, and saturated workers took 0.079-0.098 of a
 * core for a floor of 0.1 (bench/README.md, "The floor kept").  Its
 * batches aim at the square
 * of that share times leapfrog.batch_size rows (lf_pacing_batch_rows says
 * why).  The headroom keeps the sessions' CPU below 1 / (1 + headroom) of
 * what the workers leave them, so requests do not queue behind the
 * migration.
 *
 * So on an idle server the workers run flat out, and under a steady load
 * they fill the cores the load leaves, less the headroom.  (As many workers
 * as cores keep just under a core each once anything else runs: the
 * headroom on it, shared.)  At saturation
 * every CPU second a worker takes is one the sessions lose: there the
 * workers keep to the floor, the migration's guaranteed progress.  (They
 * ran flat out there until 2026-11-27, so that the migration's cost to
 * every statement ended sooner: in 5 interleaved rounds of TPC-C at
 * saturation, flat out committed 0.82x the floor's count on the aggregate
 * and 1.00x on the split, bench/README.md "The workers at saturation".
 * The floor was each worker's until 2026-11-28: two workers took twice
 * the CPU a migration is guaranteed (bench/README.md, 2026-11-28).)
 * Saturation is told apart from a steady load near capacity by looking:
 * where even the floor leaves less than LF_PACING_SATURATED_IDLE of the CPU
 * idle for LF_PACING_SATURATED_PERIODS periods in a row, in the first
 * LF_PACING_PROBE_MS of the next LF_PACING_PROBE_EVERY_MS of the clock the
 * workers all pause (probe): still nothing idle, and they are saturated;
 * saturated, they keep to the floor with batches of a fifth of
 * leapfrog.batch_size rather than the floor's square (fewer, larger
 * batches: a batch's fixed cost counts against the floor), look the same
 * way every LF_PACING_PROBE_EVERY_MS, and idle CPU sends them back to
 * their shares.  Why look rather than decide on the periods: a steady load
 * at 65% of saturation has bursts with nothing idle, and the floor's own
 * CPU can fill what a heavy steady load leaves; either once sent the
 * workers flat out, the queue that built kept the server busy through every
 * look after, and p99 was 2 s.

 * A worker's first measurement covers the time from its start (at start(),
 * leapfrog.background_delay before its first batch) to the end of that
 * batch; until it has one it keeps to the floor.
 * leapfrog.background_min_share = 1 turns pacing off.  Where /proc/stat
 * cannot be read (not Linux), workers are not paced.  In a container, the
 * CPUs are the machine's as /proc/stat shows them, not a CPU quota.
 *
 * Shared state: three atomics (the workers' CPU time, the number of
 * workers, the mode), no lock.  The rest is the worker process's own.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include <math.h>
#include <sys/resource.h>
#include <unistd.h>

#include "miscadmin.h"
#include "port/atomics.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#define LF_PACING_PERIOD_MS 250
#define LF_PACING_MAX_SLEEP_MS 10000
#define LF_PACING_SATURATED_IDLE 0.05	/* idle fraction under which it is saturated */
#define LF_PACING_SATURATED_PERIODS 8	/* ... for this many periods in a row */
#define LF_PACING_PROBE_EVERY_MS 2000	/* saturated: how often the workers look */
#define LF_PACING_PROBE_MS 300	/* ... pausing for this long */
#define LF_PACING_LOG DEBUG1	/* every period: for a look with log_min_messages */
#define LF_PACING_MAX_CREDIT_MS 500 /* CPU time owed to a worker, as pause not taken */

/* LfPacingShared.mode */
#define LF_PACED 0				/* workers keep to their shares */
#define LF_SUSPECT 1			/* paced, and the next look decides */
#define LF_SATURATED 2			/* at the floor, larger batches, looks */

typedef struct LfPacingShared
{
	pg_atomic_uint64 worker_cpu_us; /* CPU time of all workers, ever */
	pg_atomic_uint32 workers;	/* workers running now */
	pg_atomic_uint32 mode;		/* LF_PACED, LF_SUSPECT or LF_SATURATED */
} LfPacingShared;

static LfPacingShared *pacing = NULL;

static void measure(void);

/* This worker's state */
static bool registered = false;
static bool have_sample = false;
static TimestampTz sample_at;
static uint64 sample_busy;		/* /proc/stat busy ticks, all CPUs */
static uint64 sample_total;		/* /proc/stat ticks, all CPUs */
static uint64 sample_workers_us;	/* worker_cpu_us then */
static uint64 my_cpu_us;		/* my CPU time last added to the counter */
static double others_cores = -1;	/* U, smoothed; < 0 until measured */
static double my_share = -1;	/* fraction of a core; < 0 until measured */
static int	starved_periods = 0;	/* in a row at the floor with nothing idle */
static double pause_owed = 0;	/* ms of pause not taken yet; < 0: owed CPU */

void
lf_pacing_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(LfPacingShared)));
}

void
lf_pacing_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	pacing = ShmemInitStruct("leapfrog pacing", sizeof(LfPacingShared), &found);
	if (!found)
	{
		pg_atomic_init_u64(&pacing->worker_cpu_us, 0);
		pg_atomic_init_u32(&pacing->workers, 0);
		pg_atomic_init_u32(&pacing->mode, LF_PACED);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * This worker's part of the floor: leapfrog.background_min_share of a core
 * for the workers together, shared evenly (1: each flat out, not paced).
 */
static double
floor_share(void)
{
	if (lf_background_min_share >= 1)
		return 1;
	return lf_background_min_share / Max(pg_atomic_read_u32(&pacing->workers), 1);
}

/* The process's CPU time, user and system, in microseconds. */
static uint64
process_cpu_us(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (uint64) (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
		ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

/*
 * The machine's CPU ticks since boot, busy and in all, from the first line
 * of /proc/stat ("cpu  user nice system idle iowait irq softirq steal ...";
 * guest time is already inside user).  false where there is no such file.
 */
static bool
read_cpu_ticks(uint64 *busy, uint64 *total)
{
	FILE	   *f = fopen("/proc/stat", "r");
	unsigned long long v[8] = {0};
	int			n;

	if (f == NULL)
		return false;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu",
			   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 5)
		return false;
	*total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
	*busy = *total - v[3] - v[4];
	return true;
}

/* The idle fraction of the CPU since the sample (false: no time passed). */
static bool
idle_since_sample(uint64 busy, uint64 total, double *idle)
{
	if (total <= sample_total)
		return false;
	*idle = 1 - (double) (busy - sample_busy) / (total - sample_total);
	return true;
}

static void
pacing_exit(int code, Datum arg)
{
	/* the last worker to leave forgets saturation: the next migration's look afresh */
	if (registered && pg_atomic_sub_fetch_u32(&pacing->workers, 1) == 0)
		pg_atomic_write_u32(&pacing->mode, LF_PACED);
	registered = false;
}

/* A worker begins: it counts among the workers that share the budget. */
void
lf_pacing_register(void)
{
	pg_atomic_fetch_add_u32(&pacing->workers, 1);
	registered = true;
	before_shmem_exit(pacing_exit, (Datum) 0);
	my_cpu_us = process_cpu_us();
	/* the first measurement covers what ran before the first batch */
	measure();
}

/* Add this worker's CPU time since the last call to the shared counter. */
static void
publish_cpu(void)
{
	uint64		now = process_cpu_us();

	if (now > my_cpu_us)
		pg_atomic_fetch_add_u64(&pacing->worker_cpu_us, now - my_cpu_us);
	my_cpu_us = now;
}

/*
 * A new measurement, once a period has passed since the last one: the
 * others' use U and the idle CPU, and from them this worker's share.  A
 * worker held to the floor with nothing idle even so for
 * LF_PACING_SATURATED_PERIODS periods asks for a look (probe).
 */
static void
measure(void)
{
	TimestampTz now = GetCurrentTimestamp();
	uint64		busy,
				total,
				workers_us;
	long		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	double		wall_s,
				used,
				idle,
				budget;
	uint32		nworkers;

	if (have_sample && !TimestampDifferenceExceeds(sample_at, now, LF_PACING_PERIOD_MS))
		return;
	if (!read_cpu_ticks(&busy, &total) || ncpu < 1)
	{
		my_share = 1;			/* no evidence: not paced */
		return;
	}
	workers_us = pg_atomic_read_u64(&pacing->worker_cpu_us);
	if (have_sample && idle_since_sample(busy, total, &idle))
	{
		/* ticks of all CPUs over the period, so busy fraction times ncpu */
		wall_s = (now - sample_at) / 1000000.0;
		used = (1 - idle) * ncpu - (workers_us - sample_workers_us) / 1000000.0 / wall_s;
		used = Max(used, 0);
		others_cores = others_cores < 0 ? used : (others_cores + used) / 2;
		budget = ncpu - others_cores * (1 + lf_background_headroom);
		nworkers = Max(pg_atomic_read_u32(&pacing->workers), 1);
		my_share = Min(Max(budget / nworkers, floor_share()), 1.0);
		if (my_share < 1 && budget / nworkers <= floor_share() &&
			idle < LF_PACING_SATURATED_IDLE)
		{
			uint32		expected = LF_PACED;

			if (++starved_periods >= LF_PACING_SATURATED_PERIODS)
				(void) pg_atomic_compare_exchange_u32(&pacing->mode, &expected, LF_SUSPECT);
		}
		else
			starved_periods = 0;
		elog(LF_PACING_LOG, "leapfrog pacing: the rest of the server used %.2f of %ld cores, %.0f%% idle, %u workers, share %.2f",
			 others_cores, ncpu, idle * 100, nworkers, my_share);
	}
	have_sample = true;
	sample_at = now;
	sample_busy = busy;
	sample_total = total;
	sample_workers_us = workers_us;
}

/*
 * A look (modes LF_SUSPECT and LF_SATURATED): in the first
 * LF_PACING_PROBE_MS of every LF_PACING_PROBE_EVERY_MS of the clock, the
 * workers all pause, and the idle CPU meanwhile sets the mode: under
 * LF_PACING_SATURATED_IDLE, saturated; otherwise paced.
 */
static void
probe(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		into = (now / 1000) % LF_PACING_PROBE_EVERY_MS;
	uint32		was = pg_atomic_read_u32(&pacing->mode);
	uint64		busy,
				total;
	double		idle;

	if (into > LF_PACING_PROBE_MS * 2 / 3)
		return;					/* too little of the window left: the next one */
	have_sample = false;
	measure();					/* the sample at the start */
	pgstat_report_activity(STATE_IDLE, "leapfrog: pausing to measure the load");
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 LF_PACING_PROBE_MS - into, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	if (!have_sample ||
		!TimestampDifferenceExceeds(sample_at, GetCurrentTimestamp(), LF_PACING_PROBE_MS / 3) ||
		!read_cpu_ticks(&busy, &total) || !idle_since_sample(busy, total, &idle))
		return;					/* too short to tell: the next look will */
	if (idle < LF_PACING_SATURATED_IDLE)
		pg_atomic_write_u32(&pacing->mode, LF_SATURATED);
	else
	{
		pg_atomic_write_u32(&pacing->mode, LF_PACED);
		starved_periods = 0;
		if (was == LF_SATURATED)
			others_cores = -1;	/* measured afresh */
	}
	if (pg_atomic_read_u32(&pacing->mode) != was)
		elog(LF_PACING_LOG, "leapfrog pacing: %.0f%% idle while the workers paused: %s",
			 idle * 100, idle < LF_PACING_SATURATED_IDLE ? "saturated" : "paced");
	have_sample = false;
	measure();					/* the next period starts now */
}

/*
 * After batches that began at `started` and used `cpu_us` of this process's
 * CPU: how long to pause so that this worker keeps to its share, in ms.
 * *share is set to the share it kept to (1 when not paced).
 */
long
lf_pacing_pause_ms(TimestampTz started, uint64 cpu_us, double *share)
{
	double		wall_ms,
				pause;

	publish_cpu();
	if (pg_atomic_read_u32(&pacing->mode) != LF_PACED)
		probe();
	if (pg_atomic_read_u32(&pacing->mode) == LF_SATURATED)
		my_share = floor_share();
	else
		measure();
	*share = my_share < 0 ? floor_share() : my_share;
	if (*share >= 1)
	{
		/* not paced: flat out (idle, or pacing turned off) */
		*share = 1;
		pause_owed = 0;
		return 0;
	}
	wall_ms = (GetCurrentTimestamp() - started) / 1000.0;
	/*
	 * Short rounds owe fractions of a millisecond: they add up.  A round
	 * that got less than its share (a look's pause, a busy machine that ran
	 * the worker late) is owed the difference: later rounds pause less, up
	 * to LF_PACING_MAX_CREDIT_MS, so that the floor holds over time.
	 */
	pause_owed = Max(pause_owed + cpu_us / 1000.0 / *share - wall_ms, -LF_PACING_MAX_CREDIT_MS);
	pause = pause_owed > 0 ? Min(floor(pause_owed), LF_PACING_MAX_SLEEP_MS) : 0;
	pause_owed -= pause;
	return (long) pause;
}

/*
 * A pause of `planned` ms, returned above, lasted `slept` ms: a worker woken
 * late (at saturation a sleeper runs some milliseconds after its timer)
 * did not get that CPU, and one woken early (its latch) did not take the
 * rest of its pause.  Either is settled in the pauses to come.
 */
void
lf_pacing_slept(long planned, double slept)
{
	pause_owed = Max(pause_owed + planned - slept, -LF_PACING_MAX_CREDIT_MS);
}

/*
 * Rows a batch aims at: leapfrog.batch_size, times the square of the share
 * when paced, a fifth of it when saturated.  A session that needs a row of
 * a batch in flight waits for the whole batch, holding whatever locks it
 * has (a TPC-C Payment holds its warehouse row), so where sessions want the
 * CPU, batches are short as well as rare.
 */
int
lf_pacing_batch_rows(void)
{
	double		share = my_share < 0 ? floor_share() : my_share;

	if (pg_atomic_read_u32(&pacing->mode) == LF_SATURATED)
		return Max(lf_batch_size / 5, Min(lf_batch_size, 100));
	share = Min(share, 1.0);
	return Max((int) (lf_batch_size * share * share), Min(lf_batch_size, 100));
}

/* This process's CPU time now, in microseconds (to pass back above). */
uint64
lf_pacing_cpu_now(void)
{
	return process_cpu_us();
}
