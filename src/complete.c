/*-------------------------------------------------------------------------
 * complete.c
 *	  Rows left, and the completion of a migration.
 *
 * A migration is complete when no input row is left.  Once a fresh
 * snapshot sees no row left in any input, no row can come back (inputs only
 * ever lose rows, and a claim not yet committed still shows the row), so
 * the migration is marked done at once: statements stop migrating and
 * plans lose their LeapfrogMigrate node.  Dropping the retired tables needs
 * AccessExclusiveLock, which transactions that read them may hold for a
 * while: it is tried without waiting, and retried by the workers
 * (lf_drop_retired asks for one at commit) until it succeeds.
 *
 * Callers: leapfrog.complete() and leapfrog.remaining() (api.c), the
 * background workers (worker.c).  The rows left are counted here only, by
 * scanning the retired tables in C (no statement, no privilege to check:
 * they are the extension's).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/genam.h"
#include "access/relation.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* complete() migrates what is left in steps of this many rows */
#define LF_COMPLETE_STEP 10000
/* ... and first walks a table tracked by keys in ranges of this many blocks */
#define LF_COMPLETE_BLOCKS 64
/* ... and walks the inputs at most this many times (lf_complete_now) */
#define LF_COMPLETE_PASSES 100

/*
 * Rows of a retired table that snap sees; with tids, their tids, at most
 * max of them, from block *from on (*from becomes the block of the last
 * one: complete() walks the table once, rather than over the rows it
 * deleted at every step).  The caller holds a lock on it.
 */
static uint64
input_rows(Oid input, Snapshot snap, BlockNumber *from, ItemPointerData *tids, uint64 max)
{
	Relation	rel = table_open(input, NoLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	TableScanDesc scan;
	uint64		n = 0;

	if (tids)
	{
		ItemPointerData lo,
					hi;

		ItemPointerSet(&lo, *from, FirstOffsetNumber);
		ItemPointerSet(&hi, MaxBlockNumber, MaxOffsetNumber);
		scan = table_beginscan_tidrange(rel, snap, &lo, &hi);
		while (n < max && table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot))
		{
			CHECK_FOR_INTERRUPTS();
			tids[n++] = slot->tts_tid;
			*from = ItemPointerGetBlockNumber(&slot->tts_tid);
		}
	}
	else
	{
		scan = table_beginscan(rel, snap, 0, NULL);
		while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
		{
			CHECK_FOR_INTERRUPTS();
			n++;
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	table_close(rel, NoLock);
	return n;
}

/*
 * Unmigrated rows of input that snap sees: a retired table's rows, or a
 * live input's rows whose group is not migrated, per GROUP BY mapping that
 * reads it (live.c; a row counts once per mapping that has not migrated
 * its group).
 */
static uint64
unmigrated_rows(LfMigration *mig, Oid input, Snapshot snap)
{
	uint64		n = 0;
	ListCell   *lc;

	if (!list_member_oid(mig->live, input))
		return input_rows(input, snap, NULL, NULL, 0);
	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);

		/* the tables of done keys go at completion, and the live input stays */
		if (lf_tracks_keys(m, input) &&
			lf_lock_input_if_exists(m->done_keys, AccessShareLock))
			n += lf_live_rows_left(m, input, snap);
	}
	return n;
}

/*
 * complete()'s next step: the tids of at most max unmigrated rows of input
 * that snap sees, from block *from on (a live input's rows once, whatever
 * the number of mappings that have not migrated their groups).
 */
static uint64
next_unmigrated(LfMigration *mig, Oid input, Snapshot snap, BlockNumber *from,
				ItemPointerData *tids, uint64 max)
{
	ListCell   *lc;

	if (!list_member_oid(mig->live, input))
		return input_rows(input, snap, from, tids, max);
	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);

		if (lf_tracks_keys(m, input) &&
			!lf_lock_input_if_exists(m->done_keys, AccessShareLock))
			return 0;			/* completed meanwhile */
	}
	return lf_live_rows_from(mig, input, snap, from, tids, max);
}

/*
 * complete()'s first walk of a live input keyed by its primary key: the
 * workers' step over each range of blocks (lf_migrate_range), which claims
 * the keys read from the rows without waiting and copies the rows as read,
 * where the steps of next_unmigrated look each row's key up in the table of
 * done keys, then claim it with another look-up (3M rows: 23.2 s against
 * 27.7 s, bench/README.md).  What it leaves (rows other transactions were
 * migrating) the steps find after it, at the cost of a second walk.  Not
 * for groups: where a group's rows are scattered, the second walk and the
 * look-ups of groups claimed made complete() slower (3.2 times the eager
 * script's CPU against 2.8, the same page).
 */
static void
claim_ranges(int id, Oid input)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "leapfrog complete",
											  ALLOCSET_DEFAULT_SIZES);

	for (BlockNumber lo = 0;; lo += LF_COMPLETE_BLOCKS)
	{
		LfMigration *mig;
		LfClaim		claim = {NULL, 0};
		BlockNumber nblocks;
		Relation	rel;
		MemoryContext old;

		CHECK_FOR_INTERRUPTS();
		if (!lf_lock_input_if_exists(input, AccessShareLock))
			break;
		rel = table_open(input, NoLock);
		nblocks = RelationGetNumberOfBlocks(rel);
		table_close(rel, NoLock);
		if (lo >= nblocks)
			break;
		CommandCounterIncrement();
		lf_cache_load();
		if ((mig = lf_migration_by_id(id)) == NULL)
			break;				/* completed meanwhile */
		old = MemoryContextSwitchTo(cxt);
		(void) lf_migrate_range(mig, input, lo, Min(lo + LF_COMPLETE_BLOCKS, nblocks), &claim);
		MemoryContextSwitchTo(old);
		if (claim.tids)
			pfree(claim.tids);
		MemoryContextReset(cxt);
	}
	MemoryContextDelete(cxt);
}

/* Unmigrated rows of mig that snap sees (an input dropped meanwhile: none). */
uint64
lf_rows_left(LfMigration *mig, Snapshot snap)
{
	uint64		total = 0;
	ListCell   *lc;

	foreach(lc, mig->inputs)
		if (lf_lock_input_if_exists(lfirst_oid(lc), AccessShareLock))
			total += unmigrated_rows(mig, lfirst_oid(lc), snap);
	return total;
}

/*
 * Record the migration's input row count, for leapfrog.migrations: rows
 * still in the inputs plus rows logged as migrated, read on one snapshot,
 * which is exact because a step deletes rows and logs them atomically.
 * Done once per migration, by the worker, so that watching a migration
 * does not scan its inputs.
 */
void
lf_record_total(LfMigration *mig)
{
	Snapshot	snap;
	int64		total;

	CommandCounterIncrement();
	snap = RegisterSnapshot(GetTransactionSnapshot());
	PushActiveSnapshot(snap);
	total = (int64) lf_rows_left(mig, snap) + lf_catalog_progress_sum(mig->id);
	PopActiveSnapshot();
	UnregisterSnapshot(snap);
	lf_catalog_set_total(mig->id, total);
}

/* Drop the retired tables whose lock can be had now; the others are left. */
/*
 * A retired table and its sequences are members of the extension while
 * they are retired (join), so that pg_dump leaves them out: the dump of
 * the new tables holds their rows (compute.c).  Leaving (join false) lets
 * them be dropped.
 */
void
lf_retired_join_extension(Oid relid, bool join)
{
	List	   *rels = lcons_oid(relid, getOwnedSequences(relid));
	ObjectAddress ext;
	ListCell   *lc;

	ObjectAddressSet(ext, ExtensionRelationId, get_extension_oid("leapfrog", false));
	foreach(lc, rels)
	{
		ObjectAddress obj;

		ObjectAddressSet(obj, RelationRelationId, lfirst_oid(lc));
		if (join)
			recordDependencyOn(&obj, &ext, DEPENDENCY_EXTENSION);
		else
			deleteDependencyRecordsForClass(RelationRelationId, lfirst_oid(lc),
											ExtensionRelationId, DEPENDENCY_EXTENSION);
	}
}

static const char *
name_or_oid(Oid relid)
{
	char	   *name = get_rel_name(relid);

	return name ? name : psprintf("%u", relid);
}

/*
 * A table lf_drop_retired cannot lock now (locked: the relation that is;
 * InvalidOid: one this transaction is using, as an open cursor does):
 * a worker retries at commit, even with leapfrog.background off.  Said at
 * LOG by a session (complete()), with the processes holding locks on it,
 * since the retired table then outlives the call; at DEBUG1 by the worker
 * that retries every second.
 */
static void
drop_later(Oid relid, Oid locked)
{
	LOCKTAG		tag;
	char	   *pids;

	lf_wake_worker_at_commit();
	if (!message_level_is_interesting(MyBackendType == B_BG_WORKER ? DEBUG1 : LOG))
		return;
	if (!OidIsValid(locked))
	{
		ereport(MyBackendType == B_BG_WORKER ? DEBUG1 : LOG,
				(errmsg("leapfrog: could not drop retired table \"%s\" yet: this transaction is using it",
						name_or_oid(relid)),
				 errdetail("A background worker drops it once the transaction has ended.")));
		return;
	}
	SET_LOCKTAG_RELATION(tag, MyDatabaseId, locked);
	pids = lf_lock_holders(&tag, AccessExclusiveLock);
	ereport(MyBackendType == B_BG_WORKER ? DEBUG1 : LOG,
			(errmsg("leapfrog: could not drop retired table \"%s\" yet: \"%s\" is locked%s%s",
					name_or_oid(relid), name_or_oid(locked),
					pids[0] ? " by process " : "", pids),
			 errdetail("A background worker drops it once the lock is gone.")));
	pfree(pids);
}

/*
 * AccessExclusiveLock on relid without queueing for it, tried again every
 * LF_DROP_LOCK_INTERVAL_MS for up to LF_DROP_LOCK_MS, as VACUUM retries
 * the lock it truncates under: a lock held for an instant need not leave
 * the table to a worker.  (Every backend that reloads its cache of
 * migrations holds a live input's AccessShareLock while it looks up the
 * input's primary key: a complete() 11 ms after start() met the workers
 * that start() had launched doing just that, and left the input's trigger
 * for a worker: regress live_shared failed once in 7 runs.)
 */
#define LF_DROP_LOCK_MS 50
#define LF_DROP_LOCK_INTERVAL_MS 5

static bool
lock_for_drop(Oid relid)
{
	for (int waited = 0;; waited += LF_DROP_LOCK_INTERVAL_MS)
	{
		if (ConditionalLockRelationOid(relid, AccessExclusiveLock))
			return true;
		if (waited >= LF_DROP_LOCK_MS)
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 LF_DROP_LOCK_INTERVAL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Is relid, or one of its indexes, open in this backend (a cursor of the
 * transaction that completes, a query calling complete()), or has it
 * pending trigger events?  DROP would fail (CheckTableNotInUse, 55006) and
 * take the transaction with it; the table is left to a worker instead.
 * The caller holds its AccessExclusiveLock, and no reference of its own.
 */
static bool
in_use_here(Oid relid)
{
	Relation	rel = relation_open(relid, NoLock);
	bool		busy = rel->rd_refcnt > 1 || AfterTriggerPendingOnRel(relid);
	List	   *indexes = busy ? NIL : RelationGetIndexList(rel);
	ListCell   *lc;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), NoLock);

		busy |= idx->rd_refcnt > 1;
		index_close(idx, NoLock);
	}
	relation_close(rel, NoLock);
	return busy;
}

static bool
is_retired(Oid relid)
{
	Oid			nsp = lf_retired_namespace();

	return OidIsValid(nsp) && get_rel_namespace(relid) == nsp;
}

void
lf_drop_retired(List *relids)
{
	ListCell   *lc;

	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);
		ObjectAddress addr;
		List	   *live;
		int			locked = 0;
		Oid			busy = InvalidOid;

		/*
		 * Dropped meanwhile, or the OID now names a table outside
		 * leapfrog_retired (OIDs wrap around): not ours to lock or drop.
		 * Asked again under the lock.
		 */
		if (!is_retired(relid))
			continue;
		if (!lock_for_drop(relid))
		{
			drop_later(relid, relid);
			continue;
		}
		if (!is_retired(relid))
		{
			UnlockRelationOid(relid, AccessExclusiveLock);
			continue;
		}
		if (in_use_here(relid))
		{
			UnlockRelationOid(relid, AccessExclusiveLock);
			drop_later(relid, InvalidOid);
			continue;
		}

		/*
		 * A live input's table of done keys takes the input's trigger with it
		 * (a join's, the triggers of both inputs), which needs the input's
		 * AccessExclusiveLock: only if free now.
		 */
		live = lf_live_trigger_tables(relid);
		while (locked < list_length(live) && !OidIsValid(busy))
		{
			if (lock_for_drop(list_nth_oid(live, locked)))
				locked++;
			else
				busy = list_nth_oid(live, locked);
		}
		if (OidIsValid(busy))
		{
			for (int j = 0; j < locked; j++)
				UnlockRelationOid(list_nth_oid(live, j), AccessExclusiveLock);
			UnlockRelationOid(relid, AccessExclusiveLock);
			drop_later(relid, busy);
			continue;
		}

		lf_retired_join_extension(relid, false);
		CommandCounterIncrement();
		ObjectAddressSet(addr, RelationRelationId, relid);
		lf_dropping_own = true;
		PG_TRY();
		{
			performDeletion(&addr, DROP_RESTRICT, PERFORM_DELETION_INTERNAL);
		}
		PG_FINALLY();
		{
			lf_dropping_own = false;
		}
		PG_END_TRY();
	}
}

/*
 * ANALYZE the new tables of a completed migration, as its owner, and
 * invalidate their plans.  They were filled row by row and have no
 * statistics, or statistics autovacuum took while they were partly filled
 * in the inputs' physical order (one warehouse only, say); with those the
 * planner can pick an index that matches fewer columns (measured: TPC-C
 * lookups by name scanning a whole district after completion).  A table
 * dropped meanwhile is skipped; one renamed is analyzed by its new name.
 */
void
lf_analyze_targets(Oid owner, List *targets)
{
	ListCell   *lc;
	LfSavedUser saved;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	saved = lf_become(owner, SECURITY_RESTRICTED_OPERATION);
	foreach(lc, targets)
	{
		Oid			relid = lfirst_oid(lc);
		char	   *sql;

		if (get_rel_name(relid) == NULL)
			continue;
		sql = psprintf("ANALYZE %s", lf_relation_name(relid));
		if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "leapfrog: could not analyze %s", sql);
		CacheInvalidateRelcacheByRelid(relid);
	}
	lf_unbecome(saved);
	SPI_finish();
}

/*
 * The inputs of mig to drop at completion: all but the live tables tracked
 * in place (a retired one tracked by keys is in leapfrog_retired).
 */
static List *
retired_inputs(LfMigration *mig)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, mig->inputs)
		if (!list_member_oid(mig->live, lfirst_oid(lc)) ||
			get_rel_namespace(lfirst_oid(lc)) == lf_retired_namespace())
			result = lappend_oid(result, lfirst_oid(lc));
	return result;
}

/*
 * Complete mig if no input row is left; false if some are.  With
 * analyze_later NULL the new tables are analyzed in this transaction
 * (leapfrog.complete()); otherwise *analyze_later gets them, allocated in
 * TopMemoryContext, for lf_analyze_targets in a transaction of the
 * caller's after this one commits.  Why later: every statement on the new
 * tables runs its relevance queries until the migration is seen done, and
 * the ANALYZE took 2-2.5 s of a TPC-C run at saturation (W=10), with no
 * row left to migrate.  Plans made in between are rebuilt after it.
 */
bool
lf_try_complete(LfMigration *mig, List **analyze_later)
{
	ListCell   *lc;
	char	   *name = pstrdup(mig->name);
	/* the retired tables, and the tables of done keys */
	List	   *inputs = list_concat(retired_inputs(mig), mig->live_keys);
	List	   *targets = list_copy(mig->targets);
	Oid			owner = mig->owner;
	Snapshot	snap;
	uint64		left;

	/* chained: an earlier migration may still move rows into an input */
	if (lf_has_upstream(mig))
		return false;
	/* a snapshot that sees this transaction's own steps */
	CommandCounterIncrement();
	snap = RegisterSnapshot(GetTransactionSnapshot());
	left = lf_rows_left(mig, snap);
	UnregisterSnapshot(snap);
	if (left > 0)
		return false;
	if (!lf_catalog_mark_done(mig->id, lf_progress_pending(mig->id)))
		return true;			/* another worker, or complete(), was first */
	/* plans of the new tables lose their LeapfrogMigrate node */
	foreach(lc, targets)
		CacheInvalidateRelcacheByRelid(lfirst_oid(lc));
	CommandCounterIncrement();
	if (analyze_later)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		*analyze_later = list_copy(targets);
		MemoryContextSwitchTo(old);
	}
	else
		lf_analyze_targets(owner, targets);
	lf_drop_retired(inputs);
	ereport(LOG, (errmsg("leapfrog: migration \"%s\" done", name)));
	return true;
}

/*
 * complete()'s walk of one input, from its first block to its last,
 * migrating the rows not migrated (first: a live input keyed by its primary
 * key is claimed by ranges first, claim_ranges).  False if the migration
 * completed meanwhile.
 */
static bool
walk_input(int id, Oid input, bool first, ItemPointerData *tids)
{
	BlockNumber from = 0;
	LfMigration *mig;
	LfMapping  *um;

	lf_cache_load();
	if ((mig = lf_migration_by_id(id)) == NULL)
		return false;
	if (first && (um = lf_unit_mapping(mig, input)) != NULL && um->row_keys)
		claim_ranges(id, input);
	for (;;)
	{
		Snapshot	snap;
		uint64		n;

		CHECK_FOR_INTERRUPTS();
		if (!lf_lock_input_if_exists(input, AccessShareLock))
			return true;
		CommandCounterIncrement();
		snap = RegisterSnapshot(GetTransactionSnapshot());
		lf_cache_load();
		mig = lf_migration_by_id(id);
		if (mig == NULL)
		{
			UnregisterSnapshot(snap);
			return false;
		}
		n = next_unmigrated(mig, input, snap, &from, tids, LF_COMPLETE_STEP);
		UnregisterSnapshot(snap);
		if (n == 0)
			return true;
		(void) lf_migrate_rows(mig, input, NULL, tids, (int) n);
	}
}

/*
 * Migrate every row left now, in the caller's transaction, waiting for rows
 * other transactions are migrating (lf_migrate_rows), and complete the
 * migration: leapfrog.complete().
 */
void
lf_complete_now(LfMigration *mig)
{
	int			id = mig->id;
	char	   *name = pstrdup(mig->name);
	List	   *inputs = list_copy(mig->inputs);
	ItemPointerData *tids = palloc(sizeof(ItemPointerData) * LF_COMPLETE_STEP);
	ListCell   *lc;

	/* chained: the earlier migrations that fill its inputs complete first */
	foreach(lc, inputs)
	{
		LfMigration *up;

		lf_cache_load();
		mig = lf_migration_by_id(id);
		if (mig == NULL)
			return;
		if ((up = lf_upstream_of(mig, lfirst_oid(lc))) != NULL)
		{
			if (up->failed)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("migration \"%s\" reads a table that failed migration \"%s\" fills",
								name, up->name),
						 errhint("See leapfrog.failed_rows, then leapfrog.resume('%s').", up->name)));
			lf_complete_now(up);
		}
	}

	/*
	 * Walk each input from its first block to its last; then, if rows are
	 * left, walk again.  A live input's row may move behind the walk: an
	 * UPDATE that changes no column a mapping reads leaves its group
	 * unmigrated (live.c, unit_columns_changed), and its new version may
	 * land in a block walked already.  Every other write of a live input
	 * migrates the row's group first, so what a walk can miss shrinks.
	 */
	for (int pass = 1;; pass++)
	{
		foreach(lc, inputs)
		{
			if (!walk_input(id, lfirst_oid(lc), pass == 1, tids))
				return;			/* completed meanwhile */
		}
		lf_cache_load();
		mig = lf_migration_by_id(id);
		if (mig == NULL || lf_try_complete(mig, NULL))
			return;
		if (pass == LF_COMPLETE_PASSES || mig->live == NIL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("migration \"%s\" still has unmigrated rows", name)));
	}
}
