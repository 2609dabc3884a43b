/*-------------------------------------------------------------------------
 * worker.c
 *	  Background migration: a launcher, and workers per database.
 *
 * The launcher is a static background worker (restarted after a crash).
 * At startup it asks for workers in every database that accepts
 * connections, since it cannot know which ones have migrations running;
 * after that, start() asks for them in its own database at commit.  A
 * database has leapfrog.background_workers workers.  Each migrates
 * unmigrated rows in physical order, in small transactions
 * (leapfrog.batch_size rows, leapfrog.background_naptime between batches,
 * leapfrog.background_delay after start()), skipping rows that sessions or
 * the other workers are migrating (SKIP LOCKED).  The workers of a
 * database share one cursor per input (LfCursor): each batch takes the next
 * range of blocks of the current pass, so no block is visited twice in a
 * pass.  When a pass has handed out every block, the last worker to finish
 * its range checks what the pass left (lf_try_complete counts the inputs):
 * nothing, and it completes the migration; rows sessions held, and a new
 * pass begins.  Workers exit when their database has no running migration
 * left, or when leapfrog.background is off: they then park the database's
 * slot, and the launcher launches them again when it sees the setting on
 * (its own reload may come after the workers', or be one of two coalesced).
 *
 * Why several: under a saturating load one worker gets a small share of
 * the CPU, and every statement pays the cost of the migration (relevance
 * queries, migrating the rows it needs) for as long as it lasts.
 *
 * Pacing (pacing.c): after its batches a worker pauses so that it takes
 * only the CPU the rest of the server leaves spare, less a headroom, and
 * never less than a floor; on an idle server that is no pause at all.
 *
 * Shared state (LfShared) is protected by its LWLock: slots[] says, per
 * database and worker number, whether a worker is wanted and which pid
 * runs it, and holds the cursors; a worker's `busy` bits are cleared when
 * its batch ends, and by worker_exit if it dies.  A worker clears its
 * `wanted` flag when it starts a round and exits only if nobody set it
 * again meanwhile, so a start() committed while the worker was finding
 * nothing to do is never missed.  A worker that exits because
 * leapfrog.background is off sets its slot's `parked` under the same lock;
 * the launcher clears it as it asks for the workers again.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#define LF_MAX_DATABASES 64
#define LF_MAX_CURSORS 32		/* inputs of running migrations per database */

/*
 * A pass of the workers over one input: blocks below `next` have been
 * handed out in this pass; bit k of `busy` is set while worker k migrates
 * a range of the migration or checks whether its pass left rows.
 */
typedef struct LfCursor
{
	int			migration_id;	/* 0: free */
	Oid			input;
	BlockNumber next;
	uint32		busy;
} LfCursor;

typedef struct LfSlot
{
	Oid			dboid;
	bool		wanted[LF_MAX_WORKERS];
	pid_t		pid[LF_MAX_WORKERS];	/* 0: none; -1: being launched */
	bool		parked;			/* a worker left a running migration because
								 * leapfrog.background was off */
	LfCursor	cursors[LF_MAX_CURSORS];
} LfSlot;

typedef struct LfShared
{
	LWLock	   *lock;
	Latch	   *launcher_latch;
	pg_atomic_uint32 reloads;	/* configuration reloads the launcher has done */
	LfSlot		slots[LF_MAX_DATABASES];
} LfShared;

static LfShared *lf_shared = NULL;
static int	my_worker_number = 0;	/* in a database worker */
static int	my_worker_count = 1;	/* workers of the database when it began */

/*
 * The launcher's count of configuration reloads when it asked for this
 * worker, then when this worker last read the configuration.  A reload the
 * postmaster signals between forking a worker and the worker's own SIGHUP
 * handler is lost: PostgreSQL's background worker startup sets SIGHUP to
 * SIG_IGN meanwhile, which discards it.  Such a worker kept the old
 * settings for good (leapfrog.background = off: it never migrated).  The
 * launcher, started long before, gets every reload; a worker that sees its
 * count move reads the configuration files again.
 */
static uint32 my_reloads = 0;
static Oid	wake_db_at_commit = InvalidOid;
static bool xact_callback_registered = false;

PGDLLEXPORT void lf_launcher_main(Datum arg);
PGDLLEXPORT void lf_worker_main(Datum arg);

/* ---------------------------------------------------------------------
 * Shared memory
 * ---------------------------------------------------------------------
 */
void
lf_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(LfShared)));
	RequestNamedLWLockTranche("leapfrog", 1);
}

void
lf_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	lf_shared = ShmemInitStruct("leapfrog", sizeof(LfShared), &found);
	if (!found)
	{
		memset(lf_shared, 0, sizeof(LfShared));
		lf_shared->lock = &(GetNamedLWLockTranche("leapfrog"))->lock;
		pg_atomic_init_u32(&lf_shared->reloads, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Caller holds the lock exclusively. */
static LfSlot *
slot_for(Oid dboid, bool create)
{
	int			i;
	LfSlot	   *free_slot = NULL;

	for (i = 0; i < LF_MAX_DATABASES; i++)
	{
		LfSlot	   *s = &lf_shared->slots[i];

		if (s->dboid == dboid)
			return s;
		if (free_slot == NULL && s->dboid == InvalidOid)
			free_slot = s;
	}
	if (create && free_slot)
	{
		memset(free_slot, 0, sizeof(LfSlot));
		free_slot->dboid = dboid;
	}
	return create ? free_slot : NULL;
}

static void
want_worker(Oid dboid)
{
	LfSlot	   *s;

	LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
	s = slot_for(dboid, true);
	if (s)
	{
		int			k;

		for (k = 0; k < lf_background_workers; k++)
			s->wanted[k] = true;
	}
	LWLockRelease(lf_shared->lock);
	if (s == NULL)
		ereport(WARNING,
				(errmsg("leapfrog: no background worker slot left for database %u", dboid)));
	if (lf_shared->launcher_latch)
		SetLatch(lf_shared->launcher_latch);
}

/*
 * The function that ran in this transaction and needs its commit to wake
 * the workers (start(), resume()) or may (complete(): tables left to drop):
 * a COMMIT PREPARED, in whatever session, runs no callback of ours, so the
 * migration would wait for a worker nobody asked for.  PREPARE TRANSACTION
 * is refused, as PostgreSQL refuses it after LISTEN or on temporary tables.
 */
static const char *no_prepare = NULL;

static void
lf_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_PREPARE && no_prepare)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has run %s", no_prepare),
				 errdetail("Its commit may need to start the leapfrog background workers, which COMMIT PREPARED cannot do."),
				 errhint("Commit it with COMMIT.")));
	if (event == XACT_EVENT_COMMIT && OidIsValid(wake_db_at_commit))
		want_worker(wake_db_at_commit);
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
	{
		wake_db_at_commit = InvalidOid;
		no_prepare = NULL;
	}
}

static void
register_xact_callback(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(lf_xact_callback, NULL);
		xact_callback_registered = true;
	}
}

void
lf_wake_worker_at_commit(void)
{
	register_xact_callback();
	wake_db_at_commit = MyDatabaseId;
}

/* what: the function, for the error of PREPARE TRANSACTION ("leapfrog.start()") */
void
lf_forbid_prepare(const char *what)
{
	register_xact_callback();
	no_prepare = what;
}

/* ---------------------------------------------------------------------
 * Launcher
 * ---------------------------------------------------------------------
 */
void
lf_register_launcher(void)
{
	BackgroundWorker w = {0};

	w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w.bgw_start_time = BgWorkerStart_RecoveryFinished;
	w.bgw_restart_time = 5;
	snprintf(w.bgw_library_name, BGW_MAXLEN, "leapfrog");
	snprintf(w.bgw_function_name, BGW_MAXLEN, "lf_launcher_main");
	snprintf(w.bgw_name, BGW_MAXLEN, "leapfrog launcher");
	snprintf(w.bgw_type, BGW_MAXLEN, "leapfrog launcher");
	RegisterBackgroundWorker(&w);
}

static void
want_all_databases(void)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	List	   *dbs = NIL;
	ListCell   *lc;

	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		if (db->datallowconn && !db->datistemplate)
			dbs = lappend_oid(dbs, db->oid);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	foreach(lc, dbs)
		want_worker(lfirst_oid(lc));
}

/*
 * The launcher's own record of the workers it started (a handle is valid
 * only in the process that registered it), so that it knows when one has
 * exited: a worker that dies before it clears its slot (a FATAL while it
 * connects, its database dropped meanwhile) used to pin the slot as "being
 * launched" until the server restarted, and its database got no worker
 * again.
 */
static BackgroundWorkerHandle *handles[LF_MAX_DATABASES][LF_MAX_WORKERS];
static TimestampTz relaunch_after[LF_MAX_DATABASES][LF_MAX_WORKERS];

#define LF_RELAUNCH_DELAY_MS 1000	/* after a worker that died without clearing its slot */

static bool
launch_worker(int slot, Oid dboid, int number)
{
	BackgroundWorker w = {0};
	uint32		reloads = pg_atomic_read_u32(&lf_shared->reloads);

	w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w.bgw_start_time = BgWorkerStart_RecoveryFinished;
	w.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(w.bgw_library_name, BGW_MAXLEN, "leapfrog");
	snprintf(w.bgw_function_name, BGW_MAXLEN, "lf_worker_main");
	snprintf(w.bgw_name, BGW_MAXLEN, "leapfrog worker %d for database %u", number, dboid);
	snprintf(w.bgw_type, BGW_MAXLEN, "leapfrog worker");
	w.bgw_main_arg = ObjectIdGetDatum(dboid);
	memcpy(w.bgw_extra, &number, sizeof(number));
	memcpy(w.bgw_extra + sizeof(number), &reloads, sizeof(reloads));
	w.bgw_notify_pid = MyProcPid;
	return RegisterDynamicBackgroundWorker(&w, &handles[slot][number]);
}

static bool
database_exists(Oid dboid)
{
	bool		exists;

	StartTransactionCommand();
	exists = SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(dboid));
	CommitTransactionCommand();
	return exists;
}

/*
 * Free the parked slots of databases dropped meanwhile (the migration went
 * with its database), before background = on unparks them: their workers
 * would fail to connect ("database ... does not exist").
 */
static void
forget_dropped_parked(void)
{
	Oid			parked[LF_MAX_DATABASES];
	int			n = 0;

	LWLockAcquire(lf_shared->lock, LW_SHARED);
	for (int i = 0; i < LF_MAX_DATABASES; i++)
		if (lf_shared->slots[i].dboid != InvalidOid && lf_shared->slots[i].parked)
			parked[n++] = lf_shared->slots[i].dboid;
	LWLockRelease(lf_shared->lock);
	for (int j = 0; j < n; j++)
	{
		if (database_exists(parked[j]))
			continue;
		LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
		for (int i = 0; i < LF_MAX_DATABASES; i++)
		{
			LfSlot	   *s = &lf_shared->slots[i];
			bool		busy = false;

			if (s->dboid != parked[j] || !s->parked)
				continue;
			for (int k = 0; k < LF_MAX_WORKERS; k++)
				busy |= s->pid[k] != 0 || s->wanted[k] || handles[i][k] != NULL;
			if (!busy)
			{
				s->parked = false;
				s->dboid = InvalidOid;
			}
		}
		LWLockRelease(lf_shared->lock);
	}
}

/*
 * A slot's worker that this launcher did not start: one a launcher before it
 * started (the launcher is restarted after an error, and its handles die
 * with it).  Gone when its process is (a worker that exits on an error
 * leaves its pid for the launcher: worker_exit), or when it was still being
 * launched LF_ADOPT_LAUNCH_MS after this launcher began (a registered worker
 * starts within milliseconds, or not at all).
 */
static TimestampTz launcher_began = 0;

#define LF_ADOPT_LAUNCH_MS 30000

static bool
adopted_worker_gone(pid_t pid)
{
	if (pid > 0)
		return kill(pid, 0) != 0 && errno == ESRCH;
	if (pid == -1)
		return TimestampDifferenceExceeds(launcher_began, GetCurrentTimestamp(),
										  LF_ADOPT_LAUNCH_MS);
	return false;
}

/*
 * Reap the workers that have exited.  One that exited without clearing its
 * slot (it failed to connect, or exited on an error: worker_exit) gets its
 * slot and busy bits cleared here, and is launched again no sooner than
 * LF_RELAUNCH_DELAY_MS later if it is still wanted; a dropped database
 * wants no worker any more.
 */
static void
reap_workers(void)
{
	int			i,
				k;

	for (i = 0; i < LF_MAX_DATABASES; i++)
		for (k = 0; k < LF_MAX_WORKERS; k++)
		{
			LfSlot	   *s = &lf_shared->slots[i];
			pid_t		pid;
			pid_t		adopted = 0;
			bool		gone;
			int			c;

			if (handles[i][k] == NULL)
			{
				LWLockAcquire(lf_shared->lock, LW_SHARED);
				adopted = s->pid[k];
				LWLockRelease(lf_shared->lock);
				if (!adopted_worker_gone(adopted))
					continue;
			}
			else if (GetBackgroundWorkerPid(handles[i][k], &pid) != BGWH_STOPPED)
				continue;
			else
			{
				pfree(handles[i][k]);
				handles[i][k] = NULL;
			}
			gone = !database_exists(s->dboid);
			elog(DEBUG1, "leapfrog: worker %d of database %u exited%s",
				 k, s->dboid, s->pid[k] != 0 ? " without clearing its slot" : "");
			LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
			/* (an adopted slot's worker may have started meanwhile) */
			if (s->pid[k] != 0 && (adopted == 0 || s->pid[k] == adopted))
			{
				s->pid[k] = 0;
				for (c = 0; c < LF_MAX_CURSORS; c++)
					s->cursors[c].busy &= ~(1U << k);
				relaunch_after[i][k] = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																   LF_RELAUNCH_DELAY_MS);
			}
			if (gone)
				memset(s->wanted, 0, sizeof(s->wanted));
			LWLockRelease(lf_shared->lock);
		}
}

void
lf_launcher_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	lf_shared->launcher_latch = MyLatch;
	launcher_began = GetCurrentTimestamp();
	want_all_databases();

	for (;;)
	{
		int			i;
		long		timeout = 10000;
		TimestampTz now = GetCurrentTimestamp();

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			pg_atomic_fetch_add_u32(&lf_shared->reloads, 1);
			if (lf_background)
				forget_dropped_parked();
		}
		reap_workers();
		LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
		for (i = 0; i < LF_MAX_DATABASES; i++)
		{
			LfSlot	   *s = &lf_shared->slots[i];
			bool		in_use = false;
			int			k;

			if (s->dboid == InvalidOid)
				continue;
			if (s->parked && lf_background)
			{
				s->parked = false;
				for (k = 0; k < lf_background_workers; k++)
					s->wanted[k] = true;
			}
			for (k = 0; k < LF_MAX_WORKERS; k++)
			{
				/* (a worker that cleared its slot may not have exited yet) */
				if (s->pid[k] == 0 && s->wanted[k] && handles[i][k] == NULL)
				{
					if (relaunch_after[i][k] > now)
						timeout = Min(timeout, (long) ((relaunch_after[i][k] - now) / 1000) + 1);
					else if (launch_worker(i, s->dboid, k))
					{
						s->pid[k] = -1;
						elog(DEBUG1, "leapfrog: launched worker %d for database %u", k, s->dboid);
					}
					else
						timeout = 1000; /* no bgworker slot free: retry soon */
				}
				in_use |= s->pid[k] != 0 || s->wanted[k] || handles[i][k] != NULL;
			}
			in_use |= s->parked;
			if (!in_use)
				s->dboid = InvalidOid;	/* free the slot */
		}
		LWLockRelease(lf_shared->lock);
		pgstat_report_stat(false);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* ---------------------------------------------------------------------
 * Database worker
 * ---------------------------------------------------------------------
 */
typedef struct InputCursor
{
	Oid			input;
	BlockNumber step;			/* blocks per batch, adapted */
	/* used only when the shared table of cursors is full: */
	bool		started;		/* next is set */
	BlockNumber next;			/* next block to visit */
} InputCursor;

static List *cursors = NIL;		/* in TopMemoryContext */

static InputCursor *
cursor_for(Oid input)
{
	ListCell   *lc;
	InputCursor *c;
	MemoryContext old;

	foreach(lc, cursors)
		if (((InputCursor *) lfirst(lc))->input == input)
			return lfirst(lc);
	old = MemoryContextSwitchTo(TopMemoryContext);
	c = palloc0(sizeof(InputCursor));
	c->input = input;
	c->step = 1;
	cursors = lappend(cursors, c);
	MemoryContextSwitchTo(old);
	return c;
}

/*
 * A worker leaving: its slot and busy bits are cleared.  One that exits on
 * an error (pg_terminate_backend, a failure outside a batch) may leave
 * migrations running: it asks to be launched again and leaves its pid for
 * the launcher, which waits LF_RELAUNCH_DELAY_MS first (reap_workers).  The
 * new worker exits if nothing is left to do.
 */
static void
worker_exit(int code, Datum arg)
{
	LfSlot	   *s;

	LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
	s = slot_for(MyDatabaseId, false);
	if (s && s->pid[my_worker_number] == MyProcPid)
	{
		int			i;

		if (code == 0)
			s->pid[my_worker_number] = 0;
		else
			s->wanted[my_worker_number] = true;
		for (i = 0; i < LF_MAX_CURSORS; i++)
			s->cursors[i].busy &= ~(1U << my_worker_number);
	}
	LWLockRelease(lf_shared->lock);
	if (lf_shared->launcher_latch)
		SetLatch(lf_shared->launcher_latch);
}

/*
 * The shared cursor of (migration, input) in this database's slot, made if
 * missing; NULL if the table is full of cursors of running migrations.
 * Caller holds lf_shared->lock exclusively and has lf_active loaded.
 */
static LfCursor *
shared_cursor(int migration_id, Oid input)
{
	LfSlot	   *s = slot_for(MyDatabaseId, false);
	LfCursor   *free_entry = NULL;
	LfCursor   *stale_entry = NULL;
	int			i;

	if (s == NULL)
		return NULL;
	for (i = 0; i < LF_MAX_CURSORS; i++)
	{
		LfCursor   *e = &s->cursors[i];

		if (e->migration_id == migration_id && e->input == input)
			return e;
		if (free_entry == NULL && e->migration_id == 0)
			free_entry = e;
		/* left by a migration that is over (as far as this worker knows) */
		if (stale_entry == NULL && e->migration_id != 0 && e->busy == 0 &&
			lf_migration_by_id(e->migration_id) == NULL)
			stale_entry = e;
	}
	if (free_entry == NULL)
		free_entry = stale_entry;
	if (free_entry)
	{
		free_entry->migration_id = migration_id;
		free_entry->input = input;
		free_entry->next = 0;
		free_entry->busy = 0;
	}
	return free_entry;
}

/*
 * Hand this worker the next range [*lo, *hi) of c's input in the current
 * pass, and mark it busy on the migration; false if the pass has handed
 * out every block.  The workers share one cursor per input, so they move
 * through it together and never revisit blocks another worker migrated
 * (scanning migrated blocks again, and counting the inputs at the end of
 * each worker's own pass, was a quarter of two workers' time).
 */
static bool
next_range(int migration_id, InputCursor *c, BlockNumber nblocks,
			BlockNumber *lo, BlockNumber *hi)
{
	LfCursor   *e;
	bool		ok;

	LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
	e = shared_cursor(migration_id, c->input);
	if (e)
	{
		ok = e->next < nblocks;
		if (ok)
		{
			*lo = e->next;
			*hi = Min(*lo + c->step, nblocks);
			e->next = *hi;
			e->busy |= 1U << my_worker_number;
		}
		LWLockRelease(lf_shared->lock);
		return ok;
	}
	LWLockRelease(lf_shared->lock);

	/* no room for a shared cursor: a pass of our own, worker k from k/n */
	if (!c->started)
	{
		c->next = (BlockNumber) ((uint64) nblocks * my_worker_number / my_worker_count);
		c->started = true;
	}
	if (c->next >= nblocks)
		return false;
	*lo = c->next;
	*hi = Min(*lo + c->step, nblocks);
	c->next = *hi;
	return true;
}

/*
 * Whether the current pass of every input of the migration is over: every
 * block handed out and no other worker busy on it.  If so, this worker
 * becomes busy on all of them to check what the pass left (the others then
 * wait for it).  With private cursors, whether this worker's pass is over.
 */
static bool
pass_over(LfMigration *mig)
{
	LfSlot	   *s;
	uint32		me = 1U << my_worker_number;
	bool		over = true;
	int			i;

	LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
	s = slot_for(MyDatabaseId, false);
	for (i = 0; s && i < LF_MAX_CURSORS; i++)
		if (s->cursors[i].migration_id == mig->id && (s->cursors[i].busy & ~me) != 0)
			over = false;
	for (i = 0; over && s && i < LF_MAX_CURSORS; i++)
		if (s->cursors[i].migration_id == mig->id)
			s->cursors[i].busy |= me;
	LWLockRelease(lf_shared->lock);
	return over;
}

/* Start a new pass over every input of the migration. */
static void
new_pass(LfMigration *mig)
{
	LfSlot	   *s;
	ListCell   *lc;
	int			i;

	LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
	s = slot_for(MyDatabaseId, false);
	for (i = 0; s && i < LF_MAX_CURSORS; i++)
		if (s->cursors[i].migration_id == mig->id)
			s->cursors[i].next = 0;
	LWLockRelease(lf_shared->lock);
	foreach(lc, mig->inputs)
		cursor_for(lfirst_oid(lc))->started = false;
}

/* This worker is no longer busy on the migration (its batch has ended). */
static void
release_ranges(int migration_id)
{
	LfSlot	   *s;
	int			i;

	LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
	s = slot_for(MyDatabaseId, false);
	for (i = 0; s && i < LF_MAX_CURSORS; i++)
		if (s->cursors[i].migration_id == migration_id)
			s->cursors[i].busy &= ~(1U << my_worker_number);
	LWLockRelease(lf_shared->lock);
}

/*
 * Migrate the unmigrated rows of the next blocks of input that no one else
 * is migrating (lf_migrate_range, which fills *claim as soon as it has
 * claimed them, so that they are known even if the step fails); returns
 * how many.  *pass_done: the pass has handed out every block of the input.
 */
static int
next_batch(LfMigration *mig, InputCursor *c, LfClaim *claim, bool *pass_done)
{
	Relation	rel;
	BlockNumber nblocks;
	BlockNumber lo,
				hi;
	int			n,
				target;

	*pass_done = false;
	if (!lf_lock_input_if_exists(c->input, AccessShareLock))
	{
		*pass_done = true;
		return 0;
	}
	rel = table_open(c->input, AccessShareLock);
	nblocks = RelationGetNumberOfBlocks(rel);
	table_close(rel, AccessShareLock);
	if (!next_range(mig->id, c, nblocks, &lo, &hi))
	{
		*pass_done = true;
		return 0;
	}
	lf_bulk_batch = true;		/* (rowcopy.c) */
	PG_TRY();
	{
		n = (int) lf_migrate_range(mig, c->input, lo, hi, claim);
	}
	PG_FINALLY();
	{
		lf_bulk_batch = false;
	}
	PG_END_TRY();
	/* aim at leapfrog.batch_size rows per batch, fewer when paced */
	target = lf_pacing_batch_rows();
	if (n < target / 2 && c->step < 1024 * 1024)
		c->step *= 2;
	else if (n > target * 2 && c->step > 1)
		c->step /= 2;
	return n;
}

/*
 * The ANALYZE of a migration this worker has just completed, in a
 * transaction of its own (lf_try_complete).  A failure only leaves the
 * statistics to autovacuum: the migration is done.
 */
static void
analyze_completed(int migration_id, Oid owner, List *targets)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "leapfrog: analyzing the new tables");
	PG_TRY();
	{
		lf_analyze_targets(owner, targets);
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		edata = lf_abort_with_error(TopMemoryContext, false, NULL);
		ereport(LOG,
				(errmsg("leapfrog: could not analyze the new tables of migration %d: %s",
						migration_id, edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	list_free(targets);
}

/*
 * One background batch: what it claimed and what came of it.  The rows are
 * known as soon as they are claimed (lf_migrate_range fills claim), so that
 * after an error they can be retried one by one.
 */
typedef struct Batch
{
	int			migration_id;
	Oid			input;			/* the input of the rows claimed */
	LfClaim		claim;			/* tids in TopMemoryContext */
	bool		more;			/* the migration has more work */
	bool		waiting;		/* another worker ends the pass */
	bool		failed;			/* a row error (not a serialization failure...) */
	bool		counts;			/* it records the migration's input rows */
	Oid			owner;			/* of a migration the batch completed ... */
	List	   *analyze;		/* ... whose new tables to analyze (TopMemoryContext) */
} Batch;

/* migrations whose input row count this worker has recorded (TopMemoryContext) */
static List *counted = NIL;

/* migrations this worker claimed rows of in the current pass (TopMemoryContext) */
static List *claimed_in_pass = NIL;

/* The work of a batch, in its transaction. */
static void
batch_work(Batch *b, LfMigration *mig)
{
	bool		all_passes_done = true;
	ListCell   *lc;

	/* (counted once the batch commits: an aborted one records nothing) */
	if (my_worker_number == 0 && !list_member_int(counted, mig->id))
	{
		lf_record_total(mig);
		b->counts = true;
	}
	foreach(lc, mig->inputs)
	{
		InputCursor *c = cursor_for(lfirst_oid(lc));
		bool		pass_done;

		b->input = c->input;
		if (next_batch(mig, c, &b->claim, &pass_done) > 0)
			break;
		if (!pass_done)
			all_passes_done = false;
	}
	if (b->claim.n > 0)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		claimed_in_pass = list_append_unique_int(claimed_in_pass, mig->id);
		MemoryContextSwitchTo(old);
		b->more = true;
	}
	else if (all_passes_done && pass_over(mig))
	{
		/*
		 * The pass is over: done, or it skipped rows that sessions held (or
		 * the empty ranges hid nothing).  lf_try_complete counts.  A pass
		 * that claimed nothing found only rows held (by a long or prepared
		 * transaction, say): the next one waits for the worker's nap, or
		 * the workers would scan the inputs over and over meanwhile.
		 */
		b->owner = mig->owner;
		if (!lf_try_complete(mig, &b->analyze))
		{
			new_pass(mig);
			if (list_member_int(claimed_in_pass, mig->id))
				b->more = true;
			else
				b->waiting = true;
		}
		claimed_in_pass = list_delete_int(claimed_in_pass, mig->id);
	}
	else if (!all_passes_done)
		b->more = true;
	else
		b->waiting = true;		/* another worker finishes the pass and checks it */
}

/* A batch in a transaction of its own; its errors are logged, not thrown. */
static void
run_batch(Batch *b)
{
	LfMigration *mig;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "leapfrog: migrating a batch");
	lf_cache_load();
	mig = lf_migration_by_id(b->migration_id);
	if (mig == NULL || mig->failed)
	{
		PopActiveSnapshot();
		CommitTransactionCommand();
		return;
	}
	PG_TRY();
	{
		batch_work(b, mig);
		PopActiveSnapshot();
		CommitTransactionCommand();
		if (b->counts)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			counted = list_append_unique_int(counted, b->migration_id);
			MemoryContextSwitchTo(old);
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata = lf_abort_with_error(TopMemoryContext, false, NULL);

		list_free(b->analyze);	/* not completed after all */
		b->analyze = NIL;
		b->more = false;
		b->waiting = false;
		b->failed = !lf_transient_error(edata);
		ereport(LOG,
				(errmsg("leapfrog: background batch failed: %s", edata->message)));
	}
	PG_END_TRY();
}

/*
 * Record a row the worker could not migrate, in a transaction of its own:
 * quarantined (on_error => 'quarantine'; true) or listed in
 * leapfrog.failed_row.  A quarantine that fails lists the row.
 */
static bool
record_bad_row(int migration_id, Oid input, ItemPointer tid, ErrorData *e)
{
	const char *sqlstate = unpack_sql_state(e->sqlerrcode);
	volatile bool quarantined = false;
	LfMigration *mig;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	lf_cache_load();
	mig = lf_migration_by_id(migration_id);
	if (mig && mig->quarantine)
	{
		PG_TRY();
		{
			(void) lf_quarantine(mig, input, tid, sqlstate, e->message);
			PopActiveSnapshot();
			CommitTransactionCommand();
			quarantined = true;
		}
		PG_CATCH();
		{
			ErrorData  *qe = lf_abort_with_error(TopMemoryContext, false, NULL);

			ereport(LOG,
					(errmsg("leapfrog: could not quarantine row (%u,%u) of %u: %s",
							ItemPointerGetBlockNumberNoCheck(tid),
							ItemPointerGetOffsetNumberNoCheck(tid), input, qe->message)));
			FreeErrorData(qe);
		}
		PG_END_TRY();
		if (quarantined)
			return true;
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		lf_cache_load();
		mig = lf_migration_by_id(migration_id);
	}
	if (mig)
		lf_catalog_add_failed_row(migration_id, input, tid, sqlstate, e->message);
	PopActiveSnapshot();
	CommitTransactionCommand();
	return false;
}

/*
 * After a batch failed on a row error: migrate its rows one by one, each in
 * a transaction, to find the rows that cannot be migrated.  Each is
 * quarantined (on_error => 'quarantine') or listed in leapfrog.failed_row;
 * a listed one fails the migration once the batch has been tried through,
 * so that the operator sees all of the batch's bad rows at once (failed.c).
 * False if it failed.
 */
static bool
fail_on_bad_row(Batch *b)
{
	volatile int i;
	char	   *volatile first = NULL;
	volatile int nfailed = 0;

	for (i = 0; i < b->claim.n; i++)
	{
		ItemPointer tid = &b->claim.tids[i];
		LfMigration *volatile mig = NULL;
		ErrorData  *volatile e = NULL;
		char	   *iname;

		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());

		/*
		 * Hold the input, then look: a completion drops it once nobody
		 * holds it, and the step would open a table gone ("could not open
		 * relation", reported as the migration's failure).
		 */
		if (lf_lock_input_if_exists(b->input, RowExclusiveLock))
		{
			lf_cache_load();
			mig = lf_migration_by_id(b->migration_id);
		}
		/* names are unreadable once the transaction is aborted */
		iname = MemoryContextStrdup(TopMemoryContext,
									get_rel_name(b->input) ? get_rel_name(b->input) : "?");
		PG_TRY();
		{
			if (mig)
				(void) lf_migrate_rows(mig, b->input, NULL, tid, 1);
			PopActiveSnapshot();
			CommitTransactionCommand();
		}
		PG_CATCH();
		{
			e = lf_abort_with_error(TopMemoryContext, false, NULL);
		}
		PG_END_TRY();
		if (e && lf_transient_error(e))
		{
			/* a conflict with another transaction: the row stays for later */
			ereport(LOG,
					(errmsg("leapfrog: input row (%u,%u) of %s left for a later batch: %s",
							ItemPointerGetBlockNumberNoCheck(tid),
							ItemPointerGetOffsetNumberNoCheck(tid), iname, e->message)));
			FreeErrorData(e);
		}
		else if (e)
		{
			char	   *msg = psprintf("input row (%u,%u) of %s: %s",
									   ItemPointerGetBlockNumberNoCheck(tid),
									   ItemPointerGetOffsetNumberNoCheck(tid), iname, e->message);

			if (record_bad_row(b->migration_id, b->input, tid, e))
				ereport(LOG, (errmsg("leapfrog: quarantined %s", msg)));
			else
			{
				if (first == NULL)
					first = MemoryContextStrdup(TopMemoryContext, msg);
				nfailed++;
			}
			FreeErrorData(e);
		}
		pfree(iname);
	}
	if (first)
	{
		char	   *msg = nfailed == 1 ? first :
			psprintf("%s (and %d more rows: see leapfrog.failed_rows)", first, nfailed - 1);

		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		lf_catalog_mark_failed(b->migration_id, msg);
		PopActiveSnapshot();
		CommitTransactionCommand();
		ereport(LOG, (errmsg("leapfrog: migration failed: %s", msg)));
		pfree(first);
		return false;
	}
	return true;
}

/*
 * One background batch of a migration.  Returns true if the migration has
 * more work or was completed now; false if it failed, or if this worker
 * has nothing to do until another one ends the pass (the caller sleeps).
 */
static bool
worker_batch(int migration_id)
{
	Batch		b = {.migration_id = migration_id};
	bool		go_on;

	run_batch(&b);
	release_ranges(migration_id);
	if (b.analyze != NIL)
		analyze_completed(migration_id, b.owner, b.analyze);
	go_on = !b.waiting && (b.more || !b.failed);
	if (b.failed && b.claim.n > 0 && !fail_on_bad_row(&b))
		go_on = false;
	if (b.claim.tids)
		pfree(b.claim.tids);
	return go_on;
}

#define LF_LEFTOVERS_EVERY_MS 10000
static TimestampTz next_leftovers_check = 0;

/* Migrations of this database that want the worker, and how long to sleep. */
static List *
runnable_migrations(MemoryContext cxt, long *sleep_ms, bool *any_running,
					List **leftovers)
{
	List	   *ids = NIL;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	*any_running = false;
	*sleep_ms = 1000;
	*leftovers = NIL;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	lf_cache_load();
	foreach(lc, lf_active)
		if (!((LfMigration *) lfirst(lc))->failed)
			*any_running = true;
	/*
	 * Retired tables a completion could not drop: looked for before the
	 * worker exits, and every LF_LEFTOVERS_EVERY_MS meanwhile (a query
	 * planned each time: once per batch it was a tenth of a small batch's
	 * cost).
	 */
	if (OidIsValid(lf_catalog_relid()) &&
		(!*any_running || !lf_background || now >= next_leftovers_check))
	{
		*leftovers = lf_catalog_done_inputs(cxt);
		next_leftovers_check = TimestampTzPlusMilliseconds(now, LF_LEFTOVERS_EVERY_MS);
	}
	foreach(lc, lf_active)
	{
		LfMigration *m = lfirst(lc);
		TimestampTz due = TimestampTzPlusMilliseconds(m->started_at, lf_background_delay);

		if (m->failed)
			continue;
		if (!lf_background)
			continue;
		/* chained: it starts when the migrations filling its inputs are done */
		if (lf_has_upstream(m))
			continue;
		if (due > now)
			*sleep_ms = Min(*sleep_ms, (long) ((due - now) / 1000) + 1);
		else
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			ids = lappend_int(ids, m->id);
			MemoryContextSwitchTo(old);
		}
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	return ids;
}

/*
 * Drop the retired tables of completed migrations that their completion
 * could not drop; false if that failed.  A failure (a dependent object,
 * say) is logged and does not stop the worker: the running migrations come
 * first.
 */
static bool
drop_leftovers(List *leftovers)
{
	volatile bool ok = true;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		lf_drop_retired(leftovers);
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata = lf_abort_with_error(TopMemoryContext, false, NULL);

		ereport(LOG,
				(errmsg("leapfrog: could not drop the retired tables of completed migrations: %s",
						edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

void
lf_worker_main(Datum arg)
{
	Oid			dboid = DatumGetObjectId(arg);
	LfSlot	   *s;
	MemoryContext loop_cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	/*
	 * Each batch is a transaction of its own, which must be able to write
	 * and has no use for a transaction snapshot, whatever the server's
	 * defaults say.
	 */
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * A batch's commit need not wait for its WAL flush: a crash that loses
	 * it loses its deletes and inserts together, the rows are unmigrated
	 * again and a later batch moves them (exactly once, as after any
	 * abort).  Whatever depends on it (a session that read or changed a
	 * row it moved) commits later in the WAL, and flushing that commit
	 * flushes this one.  The rows of a batch stay locked until its commit
	 * returns: no fsync (or synchronous standby) in between.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	memcpy(&my_worker_number, MyBgworkerEntry->bgw_extra, sizeof(my_worker_number));
	memcpy(&my_reloads, MyBgworkerEntry->bgw_extra + sizeof(my_worker_number), sizeof(my_reloads));
	my_worker_count = Max(lf_background_workers, my_worker_number + 1);
	LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
	s = slot_for(dboid, true);
	if (s)
		s->pid[my_worker_number] = MyProcPid;
	LWLockRelease(lf_shared->lock);
	before_shmem_exit(worker_exit, (Datum) 0);
	lf_pacing_register();
	pgstat_report_appname("leapfrog worker");
	loop_cxt = AllocSetContextCreate(TopMemoryContext, "leapfrog worker loop",
									 ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		/* pacing counts the whole round, catalog reads included */
		TimestampTz round_started = GetCurrentTimestamp();
		uint64		round_cpu = lf_pacing_cpu_now();
		long		sleep_ms;
		bool		any_running;
		bool		idle;
		List	   *ids;
		List	   *leftovers;
		ListCell   *lc;
		bool		worked = false;
		long		pause = 0;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending || pg_atomic_read_u32(&lf_shared->reloads) != my_reloads)
		{
			ConfigReloadPending = false;
			my_reloads = pg_atomic_read_u32(&lf_shared->reloads);
			ProcessConfigFile(PGC_SIGHUP);
		}
		LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
		if (s)
			s->wanted[my_worker_number] = false;
		LWLockRelease(lf_shared->lock);

		MemoryContextReset(loop_cxt);
		ids = runnable_migrations(loop_cxt, &sleep_ms, &any_running, &leftovers);
		/* nothing to migrate: no running migration, or leapfrog.background off */
		idle = !any_running || !lf_background;
		/*
		 * Retired tables still locked by some transaction: try again soon.
		 * A drop that failed is not retried every second: with nothing to
		 * migrate the worker exits, and the next worker of the database
		 * tries again.
		 */
		if (leftovers != NIL && drop_leftovers(leftovers) && idle)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 1000, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			continue;
		}
		/*
		 * Idle, a worker would hold a slot of max_worker_processes, which
		 * parallel query draws from: it exits, and with migrations running
		 * (leapfrog.background off) parks its database, whose workers the
		 * launcher launches again once it sees the setting on.
		 */
		if (idle)
		{
			bool		wanted;

			LWLockAcquire(lf_shared->lock, LW_EXCLUSIVE);
			wanted = s && s->wanted[my_worker_number];
			if (s && !wanted && any_running)
				s->parked = true;
			LWLockRelease(lf_shared->lock);
			if (!wanted)
			{
				elog(DEBUG1, "leapfrog: worker %d exits: %s", my_worker_number,
					 any_running ? "leapfrog.background is off" : "no running migration");
				proc_exit(0);
			}
			continue;
		}
		foreach(lc, ids)
			worked |= worker_batch(lfirst_int(lc));
		pgstat_report_stat(false);
		if (worked)
		{
			double		share;

			pause = lf_pacing_pause_ms(round_started, lf_pacing_cpu_now() - round_cpu, &share);

			if (pause > 0)
			{
				char		activity[64];

				snprintf(activity, sizeof(activity), "leapfrog: pacing, %.2f of a core", share);
				pgstat_report_activity(STATE_IDLE, activity);
			}
			else
				pgstat_report_activity(STATE_IDLE, NULL);
			sleep_ms = lf_background_naptime + pause;
		}
		else
			pgstat_report_activity(STATE_IDLE, NULL);
		if (sleep_ms > 0)
		{
			TimestampTz slept_from = GetCurrentTimestamp();

			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 sleep_ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			/* (the naptime is the setting's, not pacing's: its own part) */
			if (pause > 0)
				lf_pacing_slept(pause, (GetCurrentTimestamp() - slept_from) / 1000.0 -
								lf_background_naptime);
		}
	}
}
