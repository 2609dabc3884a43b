/*-------------------------------------------------------------------------
 * progress.c
 *	  The progress log: how many input rows each transaction migrated.
 *
 * leapfrog.progress counts migrated rows for leapfrog.migrations.  Steps
 * (migrate.c) add their count to a backend-local tally, by subtransaction
 * level: an aborted subtransaction's rows are back in the inputs, so its
 * counts are dropped; a committed one's pass to its parent.  The tally is
 * written at pre-commit (or pre-prepare), one row per migration
 * (lf_catalog_log_progress), so it commits with the rows it counts and is
 * lost with them.  Completion in the same transaction (leapfrog.complete())
 * folds the tally into tuples_total (lf_progress_pending); a migration no
 * longer active at pre-commit is then not logged again.
 *
 * Why a tally: when every step inserted its own row, that was a quarter of
 * the cost of a statement's step (perf, TPC-C), and the log grew by a row
 * per statement for the view to sum.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/xact.h"
#include "utils/memutils.h"

typedef struct PendingCount
{
	int			migration_id;
	int			level;			/* transaction nesting level that counted */
	int64		n;
} PendingCount;

static PendingCount *pending = NULL;	/* in TopMemoryContext */
static int	npending = 0;
static int	maxpending = 0;
static bool callbacks = false;

/* Rows of migration_id this transaction has migrated, not yet logged. */
int64
lf_progress_pending(int migration_id)
{
	int64		n = 0;
	int			i;

	for (i = 0; i < npending; i++)
		if (pending[i].migration_id == migration_id)
			n += pending[i].n;
	return n;
}

/* Write the tally: one row per migration.  Called at pre-commit. */
static void
flush(void)
{
	int			i;

	if (npending == 0)
		return;
	if (!lf_cache_valid)
		lf_cache_load();

	/*
	 * Every entry is at the top level now; those passed up by committed
	 * subtransactions can repeat a migration: one row for them all.
	 */
	for (i = 0; i < npending; i++)
	{
		int			j;
		int64		n = pending[i].n;

		if (n == 0)
			continue;
		for (j = i + 1; j < npending; j++)
			if (pending[j].migration_id == pending[i].migration_id)
			{
				n += pending[j].n;
				pending[j].n = 0;
			}
		if (lf_migration_by_id(pending[i].migration_id) == NULL)
			continue;			/* completed by this transaction, which counted it */
		lf_catalog_log_progress(pending[i].migration_id, n);
		pending[i].n = 0;
	}
	npending = 0;
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			flush();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			npending = 0;
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i,
				j = 0;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	for (i = 0; i < npending; i++)
	{
		if (pending[i].level >= level)
		{
			if (event == SUBXACT_EVENT_ABORT_SUB)
				continue;		/* its rows are unmigrated again */
			pending[i].level = level - 1;
		}
		pending[j++] = pending[i];
	}
	npending = j;
}

/* Count n rows of migration_id as migrated by the current (sub)transaction. */
void
lf_progress_add(int migration_id, uint64 n)
{
	int			level = GetCurrentTransactionNestLevel();
	int			i;

	if (n == 0)
		return;
	if (!callbacks)
	{
		RegisterXactCallback(xact_callback, NULL);
		RegisterSubXactCallback(subxact_callback, NULL);
		callbacks = true;
	}
	for (i = 0; i < npending; i++)
		if (pending[i].migration_id == migration_id && pending[i].level == level)
		{
			pending[i].n += n;
			return;
		}
	if (npending == maxpending)
	{
		maxpending = Max(8, maxpending * 2);
		pending = pending ? repalloc(pending, maxpending * sizeof(PendingCount))
			: MemoryContextAlloc(TopMemoryContext, maxpending * sizeof(PendingCount));
	}
	pending[npending].migration_id = migration_id;
	pending[npending].level = level;
	pending[npending].n = (int64) n;
	npending++;
}
