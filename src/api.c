/*-------------------------------------------------------------------------
 * api.c
 *	  leapfrog.complete(), leapfrog.wait(), leapfrog.remaining(): the SQL
 *	  functions over completion (complete.c) and the catalog (catalog.c).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(leapfrog_complete);
PG_FUNCTION_INFO_V1(leapfrog_wait);
PG_FUNCTION_INFO_V1(leapfrog_remaining);

static void
unknown_migration(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("migration \"%s\" does not exist", name),
			 errhint("See SELECT name FROM leapfrog.migrations.")));
}

static LfMigration *
active_migration(const char *name)
{
	ListCell   *lc;

	if (!lf_cache_valid)
		lf_cache_load();
	foreach(lc, lf_active)
		if (strcmp(((LfMigration *) lfirst(lc))->name, name) == 0)
			return lfirst(lc);
	return NULL;
}

Datum
leapfrog_remaining(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	LfMigration *mig;
	uint64		n;

	lf_require_preload();
	lf_cache_load();
	mig = active_migration(name);
	if (mig == NULL)
	{
		if (lf_catalog_state(name, NULL) == NULL)
			unknown_migration(name);
		PG_RETURN_INT64(0);
	}
	/* STABLE: through the statement's snapshot */
	n = lf_rows_left(mig, GetActiveSnapshot());
	PG_RETURN_INT64((int64) n);
}

/*
 * Migrate everything left, now, in the caller's transaction, and finish the
 * migration.  The eager fallback: useful in tests and for operators.
 */
Datum
leapfrog_complete(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	LfMigration *mig;

	/* a standby: 25006, as any write (it would fail on assigning an xid) */
	PreventCommandDuringRecovery("leapfrog.complete()");
	lf_require_preload();
	lf_cache_load();
	mig = active_migration(name);
	if (mig == NULL)
	{
		char	   *state = lf_catalog_state(name, NULL);

		if (state == NULL)
			unknown_migration(name);
		PG_RETURN_VOID();		/* already done */
	}
	if (!has_privs_of_role(GetUserId(), mig->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be the owner of migration \"%s\"", name)));
	/*
	 * Eagerly, the new tables hold nothing such a snapshot can see; the rows
	 * this transaction would migrate would be its own, and visible to it.
	 */
	if (IsolationUsesXactSnapshot() && !lf_xact_visible(&mig->started, GetTransactionSnapshot()))
		lf_snapshot_predates(name, "the transaction's snapshot predates its start.");
	lf_forbid_prepare("leapfrog.complete()");
	lf_complete_now(mig);
	PG_RETURN_VOID();
}

/* An error quotes row values: shown to those with the owner's privileges. */
static bool
may_see_error(const char *name)
{
	LfMigration *mig;

	lf_cache_load();
	mig = active_migration(name);
	return mig != NULL && has_privs_of_role(GetUserId(), mig->owner);
}

/*
 * A wait that cannot see the migration end fails rather than run out its
 * timeout (or forever): the caller's transaction snapshot never sees the
 * state change (REPEATABLE READ, SERIALIZABLE), or the caller's own
 * transaction holds the work: it started the migration (no worker sees it
 * before the commit), or it holds rows it migrated (completion waits for
 * them).
 */
static void
wait_can_end(const char *name)
{
	LfMigration *mig;

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("leapfrog.wait() cannot see migration \"%s\" end in a REPEATABLE READ or SERIALIZABLE transaction",
						name),
				 errdetail("The transaction's snapshot never sees a later state."),
				 errhint("Wait outside the transaction, or at READ COMMITTED.")));
	lf_cache_load();
	mig = active_migration(name);
	if (mig == NULL)
		return;
	if (FullTransactionIdIsValid(mig->started.fxid) &&
		TransactionIdIsCurrentTransactionId(XidFromFullTransactionId(mig->started.fxid)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("migration \"%s\" was started by this transaction", name),
				 errdetail("Its background work begins when the transaction commits."),
				 errhint("Commit first, or finish it now with SELECT leapfrog.complete('%s').", name)));
	if (lf_progress_pending(mig->id) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this transaction holds rows it migrated for migration \"%s\"", name),
				 errdetail("The migration cannot complete before the transaction ends."),
				 errhint("Commit first, or finish it now with SELECT leapfrog.complete('%s').", name)));
}

Datum
leapfrog_wait(PG_FUNCTION_ARGS)
{
	char	   *name;
	double		timeout_s = PG_ARGISNULL(1) ? -1 : PG_GETARG_FLOAT8(1);
	TimestampTz deadline = 0;
	bool		checked = false;

	lf_require_preload();
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	/* (a timeout beyond a century waits forever) */
	if (timeout_s >= 0 && timeout_s < 3.2e9)
		deadline = GetCurrentTimestamp() + (TimestampTz) (timeout_s * USECS_PER_SEC);
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	for (;;)
	{
		char	   *error = NULL;
		char	   *state = lf_catalog_state(name, &error);

		if (state == NULL)
			unknown_migration(name);
		if (strcmp(state, "done") == 0)
			PG_RETURN_BOOL(true);
		if (!checked)
		{
			wait_can_end(name);
			checked = true;
		}
		if (strcmp(state, "failed") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("migration \"%s\" failed", name),
					 errdetail("%s", !may_see_error(name) ? "Its error is shown to its owner." :
							   error ? error : "unknown error"),
					 errhint("See leapfrog.failed_rows: correct the rows (leapfrog.correct_row) or set them aside (leapfrog.quarantine_row), then leapfrog.resume('%s').", name)));
		if (deadline != 0 && GetCurrentTimestamp() >= deadline)
			PG_RETURN_BOOL(false);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
