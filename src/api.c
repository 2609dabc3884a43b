/*-------------------------------------------------------------------------
 * api.c
 *	  leapfrog.complete(), leapfrog.wait(), leapfrog.remaining().
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "storage/itemptr.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(leapfrog_complete);
PG_FUNCTION_INFO_V1(leapfrog_wait);
PG_FUNCTION_INFO_V1(leapfrog_remaining);

/* State of a migration by name, read with a fresh snapshot; NULL if unknown. */
static char *
migration_state(const char *name, char **error)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(name)};
	char	   *state = NULL;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	lf_spi_exec_as_catalog_owner("SELECT state, error FROM leapfrog.migration WHERE name OPERATOR(pg_catalog.=) $1",
								 1, types, values, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		if (error)
			*error = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		state = MemoryContextStrdup(CurTransactionContext, state);
		if (error && *error)
			*error = MemoryContextStrdup(CurTransactionContext, *error);
	}
	SPI_finish();
	return state;
}

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
		if (migration_state(name, NULL) == NULL)
			unknown_migration(name);
		PG_RETURN_INT64(0);
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	n = lf_remaining(mig, true);
	SPI_finish();
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
	ListCell   *lc;
	int			id;

	lf_require_preload();
	lf_cache_load();
	mig = active_migration(name);
	if (mig == NULL)
	{
		char	   *state = migration_state(name, NULL);

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
	id = mig->id;

	foreach(lc, mig->inputs)
	{
		Oid			input = lfirst_oid(lc);

		for (;;)
		{
			char	   *sql;
			ItemPointerData *tids;
			uint64		i,
						n;
			Oid			save_user;
			int			save_sec;

			CHECK_FOR_INTERRUPTS();
			if (!lf_lock_input_if_exists(input, AccessShareLock))
				break;
			GetUserIdAndSecContext(&save_user, &save_sec);
			SetUserIdAndSecContext(lf_catalog_owner(), save_sec | SECURITY_LOCAL_USERID_CHANGE);
			if (SPI_connect() != SPI_OK_CONNECT)
				elog(ERROR, "SPI_connect failed");
			sql = psprintf("SELECT ctid FROM %s LIMIT 10000",
						   quote_qualified_identifier(get_namespace_name(get_rel_namespace(input)),
													  get_rel_name(input)));
			if (SPI_execute(sql, false, 0) != SPI_OK_SELECT)
				elog(ERROR, "leapfrog: could not read remaining rows");
			n = SPI_processed;
			tids = SPI_palloc(sizeof(ItemPointerData) * Max(n, 1));	/* outlives SPI_finish */
			for (i = 0; i < n; i++)
			{
				bool		isnull;

				tids[i] = *DatumGetItemPointer(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc, 1, &isnull));
			}
			SPI_finish();
			SetUserIdAndSecContext(save_user, save_sec);
			if (n == 0)
				break;
			lf_cache_load();
			mig = active_migration(name);
			if (mig == NULL || mig->id != id)
				PG_RETURN_VOID();
			(void) lf_migrate_rows(mig, input, tids, (int) n);
		}
	}
	lf_cache_load();
	mig = active_migration(name);
	if (mig && !lf_try_complete(mig, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("migration \"%s\" still has unmigrated rows", name)));
	PG_RETURN_VOID();
}

Datum
leapfrog_wait(PG_FUNCTION_ARGS)
{
	char	   *name;
	double		timeout_s = PG_ARGISNULL(1) ? -1 : PG_GETARG_FLOAT8(1);
	TimestampTz start = GetCurrentTimestamp();

	lf_require_preload();
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	for (;;)
	{
		char	   *error = NULL;
		char	   *state = migration_state(name, &error);

		if (state == NULL)
			unknown_migration(name);
		if (strcmp(state, "done") == 0)
			PG_RETURN_BOOL(true);
		if (strcmp(state, "failed") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("migration \"%s\" failed", name),
					 errdetail("%s", error ? error : "unknown error"),
					 errhint("Rows that cannot be migrated stay in their retired table; the statements that need them fail.")));
		if (timeout_s >= 0 &&
			TimestampDifferenceExceeds(start, GetCurrentTimestamp(), (int) (timeout_s * 1000)))
			PG_RETURN_BOOL(false);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
