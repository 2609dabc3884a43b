/*-------------------------------------------------------------------------
 * snapshot.c
 *	  Which state of a migration a statement's snapshot sees.
 *
 * Eager equivalence: a statement sees what the eager script would have
 * left, as of the statement's snapshot.  As a snapshot sees it, a migration
 * is not started (it cannot see start()'s transaction), running, or done
 * (it sees the completing transaction).  The backend's cache holds the
 * newest state.  Under READ COMMITTED a statement runs on a snapshot taken
 * after that state was read (migrate.c makes sure of it), so the two agree.
 * A REPEATABLE READ or SERIALIZABLE transaction keeps one snapshot, which
 * may be older:
 *
 *	- Before start(): the eager new tables hold no row the snapshot can see.
 *	  The statement migrates nothing and runs on its snapshot: the new
 *	  tables hold only rows of transactions it cannot see, and its own.
 *	  Only a write of a unique key that an unmigrated row holds has an
 *	  eager answer we cannot give (a violation against a row the snapshot
 *	  cannot see): 40001 (migrate.c).
 *	- Running: the relevance queries run on the snapshot (migrate.c).  A
 *	  row another transaction migrated after the snapshot is still in the
 *	  retired table for it, and claiming it fails with 40001.
 *	- Done, and the snapshot can see neither start() nor the completion:
 *	  as before start(), except a table altered in place eagerly, whose
 *	  rows the snapshot saw eagerly and the migration moved after it:
 *	  40001, as while it ran.
 *	- Done, but the snapshot cannot see the completion: 40001.  The
 *	  completion marks a migration done when it sees no row left, so every
 *	  migrating transaction had committed before it, but not necessarily
 *	  before the snapshot: the rows moved after the snapshot are invisible
 *	  in the new tables and gone from the retired ones, or the retired
 *	  tables are gone.  (The statement used to run on its snapshot and miss
 *	  them: a SELECT returned nothing, a DELETE deleted nothing.)
 *	- Done, and the snapshot sees the completion: every migrating
 *	  transaction committed before the snapshot.  Nothing to do.
 *
 * A snapshot sees a committed transaction unless its id is in the
 * snapshot's in-progress set or at or above its xmax (XidInMVCCSnapshot).
 * The catalog records the top-level ids (leapfrog.migration.start_xid and
 * done_xid).  Once an id precedes every backend's xmin
 * (GlobalVisCheckRemovableFullXid, which compares 64-bit ids, so it is
 * safe however old the id is), every snapshot sees it, now and later, and
 * the answer is remembered (LfXact.all_see).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/xact.h"
#include "nodes/pg_list.h"
#include "parser/parsetree.h"
#include "utils/snapmgr.h"

/* Does snap see transaction x, which has committed or is ours? */
bool
lf_xact_visible(LfXact *x, Snapshot snap)
{
	TransactionId xid;

	if (x->all_see)
		return true;
	xid = XidFromFullTransactionId(x->fxid);
	if (TransactionIdIsCurrentTransactionId(xid))
		return true;
	if (!XidInMVCCSnapshot(xid, snap))
		return true;
	/* in progress for snap, unless older than every snapshot (wraparound) */
	if (GlobalVisCheckRemovableFullXid(NULL, x->fxid))
	{
		x->all_see = true;
		return true;
	}
	return false;
}

/*
 * Does stmt read one of relids: in its own plan, or through its relevance
 * queries (chained migrations: an input of a later migration is a new
 * table of an earlier one)?
 */
bool
lf_stmt_reads_any(PlannedStmt *stmt, List *relids)
{
	ListCell   *lc;

	foreach(lc, stmt->rtable)
	{
		RangeTblEntry *rte = lfirst(lc);

		if (rte->rtekind == RTE_RELATION && list_member_oid(relids, rte->relid))
			return true;
	}
	foreach(lc, lf_plan_items(stmt))
		if (list_member_oid(relids, lf_item_input(lfirst(lc))))
			return true;
	return false;
}

/*
 * Whether snap sees the completion of every recently completed migration
 * whose new tables stmt reads.  If not, *unseen is one that it does not
 * see.  A snapshot that does not see the migration's start either sees
 * what eager left before it, the new tables empty, which it sees of them
 * too; except a table altered in place eagerly, whose old rows it saw
 * eagerly and which the migration's transactions moved into the copy
 * after it (*before_start: 40001, as while the migration ran; the
 * differential snapshot test, seed 3310128: a DELETE deleted nothing).
 * Migrations whose completion every snapshot sees are dropped from the
 * cache's list on the way, so this costs nothing once the older snapshots
 * are gone.  The cache must be current.
 */
bool
lf_completions_visible(PlannedStmt *stmt, Snapshot snap, LfMigration **unseen,
					   bool *before_start)
{
	ListCell   *lc;

	foreach(lc, lf_recent_done)
	{
		LfMigration *m = lfirst(lc);

		if (m->done.all_see || GlobalVisCheckRemovableFullXid(NULL, m->done.fxid))
		{
			lf_recent_done = foreach_delete_current(lf_recent_done, lc);
			continue;
		}
		if (!lf_stmt_reads_any(stmt, m->targets) || lf_xact_visible(&m->done, snap))
			continue;
		*before_start = !lf_xact_visible(&m->started, snap);
		if (*before_start && !lf_stmt_reads_any(stmt, m->in_place_targets))
			continue;
		*unseen = m;
		return false;
	}
	return true;
}

/* The 40001 of a snapshot that cannot see what a migration did. */
void
lf_snapshot_predates(const char *migration, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access due to a concurrent leapfrog migration"),
			 errdetail_internal("Migration \"%s\": %s", migration, detail),
			 errhint("The transaction might succeed if retried.")));
}
