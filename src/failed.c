/*-------------------------------------------------------------------------
 * failed.c
 *	  Rows that cannot be migrated: listing, correction, quarantine, resume.
 *
 * A row whose migration raises (its mapping fails on it, or inserting its
 * image breaks a constraint of a new table) stays unmigrated in its retired
 * table, and the statements that need it fail with that error.  The
 * background worker tries the rows of a failed batch one by one and records
 * each bad one in leapfrog.failed_row (worker.c).  By default it then fails
 * the migration; a migration started with on_error => 'quarantine' moves
 * the row into a quarantine table instead, and goes on.  An operator with
 * the privileges of the migration's owner lists the rows
 * (leapfrog.failed_rows, which shows each as jsonb through retired_row()),
 * corrects one (correct_row, an UPDATE of the retired row) or sets it aside
 * (quarantine_row), and resumes the migration.  Nothing is dropped: a
 * quarantined row stays in its quarantine table until the operator deletes
 * it.
 *
 * Privileges: the retired tables live in leapfrog_retired, which only the
 * extension's owner may reach by name.  A statement on one is parsed as the
 * catalog's owner with search_path = pg_catalog, pg_temp (which resolves
 * the names, nothing else), and runs as the migration's owner in a
 * security-restricted operation: the code it calls (type input and output,
 * defaults, constraints) runs with the owner's rights, never the catalog
 * owner's.
 *
 * Locking: a correction or a quarantine is an ordinary UPDATE or DELETE of
 * the retired row, so a statement migrating the row at the same moment
 * waits for its lock, or the other way round, as for any two writes.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_class.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "lib/qunique.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(leapfrog_retired_row);
PG_FUNCTION_INFO_V1(leapfrog_correct_row);
PG_FUNCTION_INFO_V1(leapfrog_quarantine_row);
PG_FUNCTION_INFO_V1(leapfrog_resume);

/* The running or failed migration called name, whose owner the caller acts for */
static LfMigration *
owned_migration(const char *name)
{
	ListCell   *lc;

	/* each caller writes: a standby gives 25006, not a failed xid */
	PreventCommandDuringRecovery("a leapfrog function that changes a migration");
	lf_require_preload();
	lf_cache_load();
	foreach(lc, lf_active)
	{
		LfMigration *mig = lfirst(lc);

		if (strcmp(mig->name, name) != 0)
			continue;
		if (!has_privs_of_role(GetUserId(), mig->owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("must be the owner of migration \"%s\"", name)));
		return mig;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("migration \"%s\" does not exist or is done", name),
			 errhint("See SELECT name, state FROM leapfrog.migrations.")));
	return NULL;				/* keep the compiler quiet */
}

/*
 * A live input tracked in place (live.c) is the application's own table:
 * its rows are changed with UPDATE and DELETE, and the migration reads a
 * group as it was at start(), so a row of a group that cannot be computed
 * cannot be corrected: the group can be set aside (quarantine_group).
 */
static void
refuse_live(LfMigration *mig, Oid relid)
{
	if (list_member_oid(mig->live, relid) && get_rel_namespace(relid) == lf_retired_namespace())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("rows of table \"%s\" of migration \"%s\" cannot be corrected: it is tracked by the keys of GROUP BY or join mappings",
						get_rel_name(relid), mig->name),
				 errdetail("A row is in a unit of each mapping that reads it, and a unit migrated already was computed from the row as it is."),
				 errhint("Set the row's groups aside with leapfrog.quarantine_row.")));
	if (list_member_oid(mig->live, relid))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("table \"%s\" of migration \"%s\" is live: its rows cannot be corrected",
						get_rel_name(relid), mig->name),
				 errdetail("The migration reads the table in place, as it was at start(); a write of a row first migrates the row's group."),
				 errhint("Set the row's group aside with leapfrog.quarantine_row: the new table does not get it, and the table's rows stay as they are.")));
}

/* The retired table of mig that was called input before start() */
static Oid
input_named(LfMigration *mig, const char *input)
{
	Oid			relid = lf_catalog_input_named(mig->id, input);

	if (!OidIsValid(relid) || !list_member_oid(mig->inputs, relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("migration \"%s\" has no input table \"%s\"", mig->name, input),
				 errhint("Name it as leapfrog.failed_rows shows it, schema-qualified.")));

	/*
	 * Hold it, then ask again: a completion that moved the last rows drops
	 * a retired table as soon as nobody holds it, and the row's functions
	 * then named a table that was gone (a crash in quote_identifier).
	 */
	if (!lf_lock_input_if_exists(relid, RowExclusiveLock) || !lf_still_running(mig->id))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("migration \"%s\" completed meanwhile", mig->name)));
	return relid;
}

/*
 * Run sql (parameters $1..) on the retired tables, as described at the top
 * of the file; SPI must be connected.  Returns SPI_processed.
 */
static uint64
run_as_owner(Oid owner, const char *sql, int nargs, Oid *types, Datum *values, int expect)
{
	int			nest = NewGUCNestLevel();
	SPIPlanPtr	plan;
	LfSavedUser saved;
	int			rc;

	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	saved = lf_become(lf_catalog_owner(), 0);
	plan = SPI_prepare(sql, nargs, types);
	lf_unbecome(saved);
	if (plan == NULL)
		elog(ERROR, "leapfrog: could not prepare \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	saved = lf_become(owner, SECURITY_RESTRICTED_OPERATION);
	rc = SPI_execute_plan(plan, values, NULL, false, 0);
	lf_unbecome(saved);
	AtEOXact_GUC(true, nest);
	if (rc != expect)
		elog(ERROR, "leapfrog: statement failed (%s): %s", SPI_result_code_string(rc), sql);
	return SPI_processed;
}

static void not_waiting(ItemPointer tid, const char *input, const char *name) pg_attribute_noreturn();

/* The error of a row that is no longer in its retired table */
static void
not_waiting(ItemPointer tid, const char *input, const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_NO_DATA_FOUND),
			 errmsg("row (%u,%u) of \"%s\" is not waiting for migration \"%s\"",
					ItemPointerGetBlockNumberNoCheck(tid),
					ItemPointerGetOffsetNumberNoCheck(tid), input, name),
			 errdetail("It was migrated, corrected or quarantined meanwhile."),
			 errhint("See leapfrog.failed_rows for the rows left and their ctids.")));
}

/*
 * leapfrog.retired_row(input regclass, row_tid tid): the row of a retired
 * table, as jsonb, as the statement's snapshot sees it; NULL if it is gone.
 */
Datum
leapfrog_retired_row(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	ItemPointer tid = (ItemPointer) PG_GETARG_POINTER(1);
	Relation	rel;
	TupleTableSlot *slot;
	Datum		result = (Datum) 0;
	bool		found = false;
	HeapTuple	tup;

	/*
	 * A caller without the owner's privileges may not lock the table either
	 * (it would queue behind, and block, its owner's DDL): checked on the
	 * catalog first, and again once locked (below).
	 */
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		PG_RETURN_NULL();
	if (!has_privs_of_role(GetUserId(), ((Form_pg_class) GETSTRUCT(tup))->relowner))
	{
		LfMigration *mig;

		lf_cache_load();
		mig = lf_migration_by_input(relid);
		if (mig == NULL || !has_privs_of_role(GetUserId(), mig->owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("must have the privileges of the owner of the migration of \"%s\"",
							NameStr(((Form_pg_class) GETSTRUCT(tup))->relname))));
	}
	ReleaseSysCache(tup);
	rel = try_relation_open(relid, AccessShareLock);
	if (rel == NULL)
		PG_RETURN_NULL();
	if (RelationGetNamespace(rel) == lf_retired_namespace() &&
		rel->rd_rel->relkind == RELKIND_RELATION)
	{
		if (!has_privs_of_role(GetUserId(), rel->rd_rel->relowner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("must have the privileges of the owner of the migration of \"%s\"",
							RelationGetRelationName(rel))));
	}
	else
	{
		/* a live input tracked in place: the application's table, as it is */
		LfMigration *mig;

		lf_cache_load();
		mig = lf_migration_by_input(relid);
		if (mig == NULL || !list_member_oid(mig->live, relid))
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("\"%s\" is not a retired table of a migration", RelationGetRelationName(rel))));
		if (!has_privs_of_role(GetUserId(), mig->owner) ||
			pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("must have the privileges of the owner of the migration of \"%s\" and SELECT on it",
							RelationGetRelationName(rel))));
	}
	slot = table_slot_create(rel, NULL);
	if (ItemPointerIsValid(tid) &&
		ItemPointerGetBlockNumber(tid) < RelationGetNumberOfBlocks(rel))
		found = table_tuple_fetch_row_version(rel, tid, GetActiveSnapshot(), slot);
	if (found)
	{
		Datum		row = ExecFetchSlotHeapTupleDatum(slot);
		FmgrInfo	flinfo;
		LfSavedUser saved;

		/* to_jsonb(row): its argument's type comes from the expression */
		fmgr_info(F_TO_JSONB, &flinfo);
		fmgr_info_set_expr((Node *) makeFuncExpr(F_TO_JSONB, JSONBOID,
												 list_make1(makeNullConst(RelationGetDescr(rel)->tdtypeid,
																		  -1, InvalidOid)),
												 InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL),
						   &flinfo);
		saved = lf_become(rel->rd_rel->relowner, SECURITY_RESTRICTED_OPERATION);
		result = FunctionCall1(&flinfo, row);
		lf_unbecome(saved);
	}
	ExecDropSingleTupleTableSlot(slot);
	relation_close(rel, AccessShareLock);
	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* Is attnum of input a key of the units of a group or join mapping? */
static bool
unit_key(LfMigration *mig, Oid input, AttrNumber attnum)
{
	ListCell   *lc;

	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);

		if (m->kind == LF_MAP_ROWS)
			continue;
		for (int i = 0; i < m->ninputs; i++)
			for (int k = 0; k < m->nkeys; k++)
				if (m->inputs[i] == input && m->keys[i][k] == attnum)
					return true;
	}
	return false;
}

/*
 * Does a later migration read a table mig fills with a GROUP BY or join
 * mapping?  Its units' rows are pulled by key (migrate.c): a row of mig
 * corrected into another key could arrive after that key migrated.
 */
static bool
feeds_units(LfMigration *mig)
{
	ListCell   *lc,
			   *lm;

	foreach(lc, lf_active)
	{
		LfMigration *down = lfirst(lc);

		foreach(lm, down->mappings)
		{
			LfMapping  *m = lfirst(lm);

			if (m->kind == LF_MAP_ROWS)
				continue;
			for (int i = 0; i < m->ninputs; i++)
				if (lf_upstream_of(down, m->inputs[i]) == mig)
					return true;
		}
	}
	return false;
}

/*
 * leapfrog.correct_row(migration, input, row_tid, changes jsonb): set the
 * columns named in changes, as jsonb_populate_record reads them, on a row
 * not migrated yet.  Returns the row's new ctid.
 */
Datum
leapfrog_correct_row(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *input = text_to_cstring(PG_GETARG_TEXT_PP(1));
	ItemPointer tid = (ItemPointer) PG_GETARG_POINTER(2);
	Jsonb	   *changes = PG_GETARG_JSONB_P(3);
	LfMigration *mig = owned_migration(name);
	Oid			relid = input_named(mig, input);
	char	   *qname = quote_qualified_identifier("leapfrog_retired", get_rel_name(relid));
	StringInfoData cols;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			depth = 0;
	Oid			types[2] = {JSONBOID, TIDOID};
	Datum		values[2] = {JsonbPGetDatum(changes), ItemPointerGetDatum(tid)};
	ItemPointerData newtid;
	char	   *sqlstate;
	char	   *error;

	refuse_live(mig, relid);
	if (feeds_units(mig))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("migration \"%s\" fills a table a later GROUP BY or join mapping reads", name),
				 errdetail("A corrected row could arrive in a group or join key that migrated already."),
				 errhint("Set the row aside with leapfrog.quarantine_row, or correct it once the later migration is done.")));
	if (!JB_ROOT_IS_OBJECT(changes) || JB_ROOT_IS_SCALAR(changes))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("changes must be a jsonb object of column names and values")));
	initStringInfo(&cols);
	it = JsonbIteratorInit(&changes->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *col;
		AttrNumber	attnum;

		if (tok == WJB_BEGIN_OBJECT)
			depth++;
		else if (tok == WJB_END_OBJECT)
			depth--;
		if (tok != WJB_KEY || depth != 1)
			continue;
		col = pnstrdup(v.val.string.val, v.val.string.len);
		attnum = get_attnum(relid, col);
		if (attnum <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" of input \"%s\" does not exist", col, input)));
		if (get_attgenerated(relid, attnum))
			ereport(ERROR,
					(errcode(ERRCODE_GENERATED_ALWAYS),
					 errmsg("column \"%s\" of input \"%s\" is generated", col, input)));
		if (unit_key(mig, relid, attnum))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("column \"%s\" of input \"%s\" is a group or join key of migration \"%s\"",
							col, input, name),
					 errdetail("Its rows migrate a key at a time: a row moved to another key could join a key migrated already."),
					 errhint("Set the row aside with leapfrog.quarantine_row, and insert it into the new table yourself once the migration is done.")));
		appendStringInfo(&cols, "%s%s", cols.len ? ", " : "", quote_identifier(col));
	}
	if (cols.len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("changes names no column")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (run_as_owner(mig->owner,
					 psprintf("UPDATE %s AS t SET (%s) = (SELECT %s FROM pg_catalog.jsonb_populate_record(t, $1) AS r) "
							  "WHERE t.ctid OPERATOR(pg_catalog.=) $2 RETURNING t.ctid",
							  qname, cols.data, cols.data),
					 2, types, values, SPI_OK_UPDATE_RETURNING) == 0)
		not_waiting(tid, input, name);
	{
		bool		isnull;

		newtid = *DatumGetItemPointer(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_finish();
	(void) lf_catalog_forget_failed_row(mig->id, relid, tid, &sqlstate, &error);
	{
		ItemPointer res = palloc(sizeof(ItemPointerData));

		ItemPointerCopy(&newtid, res);
		PG_RETURN_POINTER(res);
	}
}

/*
 * Whether the group of row tid in live mapping m migrates now, in a
 * subtransaction of its own, kept if it does; false if it fails.  A
 * transient error (lf_transient_error) says nothing of the rows: thrown.
 */
static bool
group_migrates(LfMigration *mig, LfMapping *m, Oid input, ItemPointer tid)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		(void) lf_migrate_rows(mig, input, m, tid, 1);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *e = lf_abort_with_error(cxt, true, owner);

		if (lf_transient_error(e))
			ReThrowError(e);
		FreeErrorData(e);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

static Oid	quarantine_table(LfMigration *mig, Oid input);
static uint64 quarantine_rows(LfMigration *mig, Oid input, Oid qrel, ItemPointerData *rows,
							  int nrows, Datum sqlstate, Datum error);

/*
 * Set aside the group of row tid of input, a live input tracked in place
 * (live.c), into quarantine table qrel: its key goes into the mapping's
 * table of done keys, so that the new table never gets the group and
 * writes of its rows go through, and a copy of its rows, as they were at
 * start() (nobody had claimed it), into qrel; the rows themselves stay, the
 * application's.  Its rows leave leapfrog.failed_row.  Of a table read by
 * several GROUP BY mappings, the row's group in each is tried first
 * (group_migrates): only those that fail are set aside, their rows copied
 * once (a row failing in one mapping must not take its groups in the
 * others, which hold other rows, along).  Returns how many rows were
 * copied: 0 if the row is gone or its groups migrated meanwhile.
 */
static uint64
quarantine_group(LfMigration *mig, Oid input, ItemPointer tid, Oid qrel, Datum sqlstate,
				 Datum error)
{
	Relation	rel;
	TupleTableSlot *slot;
	Snapshot	snap;
	ItemPointerData *rows = NULL;
	int			nrows = 0;
	ListCell   *lc;
	List	   *failing = NIL;	/* ids of the mappings to set the group aside in */
	List	   *others = NIL;	/* (join mapping, unit) whose other side goes too */
	int			mig_id = mig->id;

	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);

		if (lf_tracks_keys(m, input))
			failing = lappend_int(failing, m->id);
	}
	if (list_length(failing) > 1)
	{
		List	   *tried = failing;

		failing = NIL;
		foreach(lc, mig->mappings)
		{
			LfMapping  *m = lfirst(lc);

			if (list_member_int(tried, m->id) && !group_migrates(mig, m, input, tid))
				failing = lappend_int(failing, m->id);
		}
		/* a subtransaction's end may have reloaded the cache */
		if (!lf_cache_valid)
			lf_cache_load();
		if ((mig = lf_migration_by_id(mig_id)) == NULL)
			return 0;
	}

	CommandCounterIncrement();
	snap = RegisterSnapshot(GetTransactionSnapshot());
	rel = table_open(input, RowExclusiveLock);
	slot = table_slot_create(rel, NULL);
	if (ItemPointerIsValid(tid) &&
		ItemPointerGetBlockNumber(tid) < RelationGetNumberOfBlocks(rel) &&
		table_tuple_fetch_row_version(rel, tid, snap, slot))
	{
		foreach(lc, mig->mappings)
		{
			LfMapping  *m = lfirst(lc);
			Datum		key[LF_KEY_MAX];
			LfDoneKeys *d;
			LfUnit	   *u;
			int			i;

			if (!list_member_int(failing, m->id) ||
				!lf_lock_input_if_exists(m->done_keys, RowExclusiveLock))
				continue;
			/* the key's values stay in the slot's pinned tuple until it is dropped */
			i = lf_unit_input_index(m, input);
			lf_live_tuple_key(m, i, ExecFetchSlotHeapTuple(slot, false, NULL), RelationGetDescr(rel), key);
			if (lf_key_joins_nothing(m, i, key))
				continue;		/* no unit, so it gives no row to set aside */
			d = lf_done_keys_open(m);
			if (lf_live_claim(d, m, key, snap, false) == LF_CLAIMED)
			{
				u = linitial(lf_units_by_keys(m, list_make1(key), snap));
				rows = rows ? repalloc(rows, sizeof(ItemPointerData) * (nrows + u->n[i]))
					: palloc(sizeof(ItemPointerData) * Max(u->n[i], 1));
				memcpy(rows + nrows, u->tids[i], sizeof(ItemPointerData) * u->n[i]);
				nrows += u->n[i];
				/* a join key's rows in the other input go into its quarantine table */
				if (m->ninputs == 2 && u->n[1 - i] > 0)
					others = lappend(others, list_make2(m, u));
			}
			lf_done_keys_close(d);
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	UnregisterSnapshot(snap);
	foreach(lc, others)
	{
		LfMapping  *m = linitial(lfirst(lc));
		LfUnit	   *u = lsecond(lfirst(lc));
		int			j = 1 - lf_unit_input_index(m, input);

		(void) quarantine_rows(mig, m->inputs[j], quarantine_table(mig, m->inputs[j]),
							   u->tids[j], u->n[j], sqlstate, error);
	}
	if (nrows == 0)
		return 0;
	/* a row in the groups of two mappings is set aside once */
	return quarantine_rows(mig, input, qrel, rows, nrows, sqlstate, error);
}

/*
 * Copy rows[0..nrows) of input, tracked by keys, into its quarantine table
 * qrel, once each, and forget them in leapfrog.failed_row.
 */
static uint64
quarantine_rows(LfMigration *mig, Oid input, Oid qrel, ItemPointerData *rows, int nrows,
				Datum sqlstate, Datum error)
{
	Datum	   *elems;
	Oid			types[3] = {TIDARRAYOID, TEXTOID, TEXTOID};
	Datum		values[3];

	qsort(rows, nrows, sizeof(ItemPointerData), (int (*) (const void *, const void *)) ItemPointerCompare);
	nrows = qunique(rows, nrows, sizeof(ItemPointerData),
					(int (*) (const void *, const void *)) ItemPointerCompare);
	elems = palloc(sizeof(Datum) * nrows);
	for (int j = 0; j < nrows; j++)
	{
		char	   *sq;
		char	   *er;

		elems[j] = ItemPointerGetDatum(&rows[j]);
		(void) lf_catalog_forget_failed_row(mig->id, input, &rows[j], &sq, &er);
	}
	values[0] = PointerGetDatum(construct_array(elems, nrows, TIDOID, sizeof(ItemPointerData),
												false, TYPALIGN_SHORT));
	values[1] = sqlstate;
	values[2] = error;
	return run_as_owner(mig->owner,
						psprintf("INSERT INTO %s SELECT t.*, $2, $3 FROM ONLY %s AS t "
								 "WHERE t.ctid OPERATOR(pg_catalog.=) ANY ($1)",
								 lf_relation_name(qrel), lf_relation_name(input)),
						3, types, values, SPI_OK_INSERT);
}

/* The name input of mig had in the script (its schema aside) */
static const char *
original_name(LfMigration *mig, Oid input)
{
	char	   *name = get_rel_name(input);
	char	   *orig;

	if (name == NULL || get_rel_namespace(input) != lf_retired_namespace())
		return name ? name : "";	/* the application's table, in its schema */
	/* retired tables are named m<id>_<oid>_<name> (start.c) */
	orig = strchr(name, '_');
	orig = orig ? strchr(orig + 1, '_') : NULL;
	return orig ? orig + 1 : name;
}

/* Does another input of mig have the original name orig? */
static bool
shares_name(LfMigration *mig, Oid input, const char *orig)
{
	ListCell   *lc;

	foreach(lc, mig->inputs)
		if (lfirst_oid(lc) != input && strcmp(original_name(mig, lfirst_oid(lc)), orig) == 0)
			return true;
	return false;
}

/*
 * Move one row of input (a retired table of mig) into the input's
 * quarantine table, created on first use and owned by the migration's
 * owner; returns the quarantine table, or InvalidOid if the row is gone.
 * A row of a live input tracked in place sets its whole group aside
 * (quarantine_group).  The worker calls it too, for on_error =>
 * 'quarantine'.
 */
/*
 * The quarantine table of input (a retired table of mig, or a live one
 * tracked in place), created on first use and owned by the migration's
 * owner.  The caller is connected to SPI.
 */
static Oid
quarantine_table(LfMigration *mig, Oid input)
{
	char	   *retired = get_rel_name(input);
	const char *orig;
	char		qname[NAMEDATALEN];
	Oid			qnsp = get_namespace_oid("leapfrog_quarantine", false);
	Oid			qrel;
	bool		live = list_member_oid(mig->live, input);
	char	   *source = live ? lf_relation_name(input) :
		quote_qualified_identifier("leapfrog_retired", retired);

	orig = original_name(mig, input);
	/* two inputs of one name (in two schemas) get a table each */
	if (shares_name(mig, input, orig))
		snprintf(qname, sizeof(qname), "%.*s_m%d_%u", NAMEDATALEN - 27, orig, mig->id, input);
	else
		snprintf(qname, sizeof(qname), "%.*s_m%d", NAMEDATALEN - 16, orig, mig->id);

	/*
	 * One creator of the input's quarantine table at a time (two workers
	 * may quarantine rows of it at once): a self-conflicting lock on the
	 * input, held to commit, which also makes a table created meanwhile
	 * visible once we have it.
	 */
	LockRelationOid(input, ShareUpdateExclusiveLock);
	qrel = get_relname_relid(qname, qnsp);
	if (!OidIsValid(qrel))
	{
		/* the columns of the input: CREATE TABLE ... LIKE runs no user code */
		LfSavedUser saved = lf_become(lf_catalog_owner(), 0);
		char	   *qq = quote_qualified_identifier("leapfrog_quarantine", qname);
		char	   *owner = GetUserNameFromId(mig->owner, false);

		if (SPI_execute(psprintf("CREATE TABLE %s (LIKE %s, failed_sqlstate text, failed_error text, "
								 "quarantined_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp())",
								 qq, source),
						false, 0) != SPI_OK_UTILITY ||
			SPI_execute(psprintf("ALTER TABLE %s OWNER TO %s", qq, quote_identifier(owner)),
						false, 0) != SPI_OK_UTILITY ||
			SPI_execute(psprintf("COMMENT ON TABLE %s IS %s", qq,
								 quote_literal_cstr(psprintf("Rows of %s that migration %s could not migrate, set aside.",
															 orig, mig->name))),
						false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "leapfrog: could not create quarantine table %s", qq);
		lf_unbecome(saved);
		CommandCounterIncrement();
		qrel = get_relname_relid(qname, qnsp);
	}

	/*
	 * The name is predictable, and a quarantine table's owner may rename it:
	 * rows go only into a table the migration's owner owns (a table of
	 * another role, a trigger on it, would run as this owner).
	 */
	if (!OidIsValid(qrel) || !pg_class_ownercheck(qrel, mig->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("quarantine table %s is not owned by the owner of migration \"%s\"",
						quote_qualified_identifier("leapfrog_quarantine", qname), mig->name),
				 errhint("Rename or drop that table.")));
	return qrel;
}

/*
 * Before a unit of input, tracked by keys, is set aside: the quarantine
 * tables' lock (quarantine_table) of every input its rows may go to, input
 * and the other inputs of the join mappings that track it, in OID order.
 * Two workers setting one join key aside from either side took them in
 * opposite orders, each waiting for the other's claim of the key
 * (deadlock, and the migration failed; isolation quarantine_join).
 */
static void
lock_unit_quarantines(LfMigration *mig, Oid input)
{
	List	   *rels = list_make1_oid(input);
	ListCell   *lc;

	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);

		if (lf_tracks_keys(m, input))
			for (int i = 0; i < m->ninputs; i++)
				rels = list_append_unique_oid(rels, m->inputs[i]);
	}
	list_sort(rels, list_oid_cmp);
	foreach(lc, rels)
		LockRelationOid(lfirst_oid(lc), ShareUpdateExclusiveLock);
}

/*
 * Move one row of input (a retired table of mig) into the input's
 * quarantine table; returns the quarantine table, or InvalidOid if the row
 * is gone.  A row of an input tracked by keys sets its whole unit aside
 * (quarantine_group).  The worker calls it too, for on_error =>
 * 'quarantine'.
 */
Oid
lf_quarantine(LfMigration *mig, Oid input, ItemPointer tid, const char *sqlstate,
		   const char *error)
{
	Oid			qrel;
	Oid			types[3] = {TIDOID, TEXTOID, TEXTOID};
	Datum		values[3] = {ItemPointerGetDatum(tid),
		CStringGetTextDatum(sqlstate ? sqlstate : ""), CStringGetTextDatum(error ? error : "")};
	uint64		moved;
	bool		by_keys = list_member_oid(mig->live, input);

	/* a worker's bad row: the migration may have completed since (input_named) */
	if (!lf_lock_input_if_exists(input, RowExclusiveLock) || !lf_still_running(mig->id))
		return InvalidOid;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (by_keys)
		lock_unit_quarantines(mig, input);
	qrel = quarantine_table(mig, input);
	if (by_keys)
		moved = quarantine_group(mig, input, tid, qrel, values[1], values[2]);
	else
		moved = run_as_owner(mig->owner,
							 psprintf("WITH moved AS (DELETE FROM %s AS t WHERE t.ctid OPERATOR(pg_catalog.=) $1 RETURNING t.*) "
									  "INSERT INTO %s SELECT moved.*, $2, $3 FROM moved",
									  quote_qualified_identifier("leapfrog_retired", get_rel_name(input)),
									  lf_relation_name(qrel)),
							 3, types, values, SPI_OK_INSERT);
	SPI_finish();
	return moved > 0 ? qrel : InvalidOid;
}

/* leapfrog.quarantine_row(migration, input, row_tid) */
Datum
leapfrog_quarantine_row(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *input = text_to_cstring(PG_GETARG_TEXT_PP(1));
	ItemPointer tid = (ItemPointer) PG_GETARG_POINTER(2);
	LfMigration *mig = owned_migration(name);
	Oid			relid = input_named(mig, input);
	char	   *sqlstate;
	char	   *error;
	Oid			qrel;

	(void) lf_catalog_forget_failed_row(mig->id, relid, tid, &sqlstate, &error);
	qrel = lf_quarantine(mig, relid, tid, sqlstate, error);
	if (!OidIsValid(qrel))
		not_waiting(tid, input, name);
	PG_RETURN_OID(qrel);
}

/* leapfrog.resume(name): a failed migration runs again */
Datum
leapfrog_resume(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	LfMigration *mig = owned_migration(name);

	if (!lf_catalog_resume(mig->id))
		ereport(NOTICE,
				(errmsg("migration \"%s\" is running already", name)));
	else
	{
		lf_forbid_prepare("leapfrog.resume()");
		lf_wake_worker_at_commit();
	}
	PG_RETURN_VOID();
}
