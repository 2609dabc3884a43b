/*-------------------------------------------------------------------------
 * live.c
 *	  Inputs that stay live, tracked in place: the table of migrated keys,
 *	  its claims, and the row trigger that migrates a group before a write.
 *
 * A mapping's input that the script does not drop stays live: the
 * application reads and writes it, and the mapping must read it as it was
 * at start().  When GROUP BY or join mappings read the table, and
 * otherwise only row mappings, whose rows move with the first one's units
 * (lf_keys_carrier), with at most four group key columns that may be NULL
 * (a key is its values and a mask of its NULLs, NULLs equal: LF_KEY_SIZE)
 * and a join's key columns on the table NOT NULL;
 * or when only row mappings read it and it has a primary key (each row a group of
 * its own, by that key: the first row mapping owns the keys and carries
 * the others; units.c, lf_describe_row_keys) (start.c, why_not_in_place),
 * the table is not replaced: it stays where it is, and the migration keeps
 *
 *	- per mapping, a table of the keys of its groups migrated ("done
 *	  keys", D; leapfrog.mapping.done_keys), in
 *	  leapfrog_retired, with a unique index of the key index's operator
 *	  classes: a group is migrated exactly as long as its key is in D, and
 *	  the key commits or aborts with the group's new row;
 *	- a BEFORE INSERT OR UPDATE OR DELETE row trigger on the table, internal
 *	  (pg_dump leaves it out), firing ALWAYS (replicas applying changes too),
 *	  that migrates the group or join key of the old and of the new row
 *	  first, in each mapping; an UPDATE that changes neither the key nor any
 *	  column the unit's copy reads (unit_columns_changed) migrates nothing.
 *	  A join's table of done keys covers both its inputs, and each live one
 *	  has the trigger (lf_live_watch).
 *
 * A retired table (dropped by the script, or live and replaced) that
 * several GROUP BY or join mappings read is tracked the same way (start.c,
 * track_shared_retired), without the trigger: nobody writes it.  A join's
 * table of done keys holds its key in input 0's columns, of the type both
 * sides' values convert to (LfMapping.keytypes: input 0's, or the wider of
 * two, units.c) and covers both its inputs: a key claimed from a row of
 * either side migrates the rows of both.  A join's row with a NULL key
 * matches nothing: on a side the join preserves, or with a row mapping
 * riding on the join's units, its key is the row (LF_KEY_ROW), in two more
 * columns of the table of done keys; elsewhere it is no unit at all
 * (lf_key_joins_nothing).
 *
 * So a row written after start() only ever lands in a group already
 * migrated, and an unmigrated group holds exactly its rows at start(), as
 * far as its mappings read them: the mapping reads them with the step's own
 * snapshot, no copy of the table, no frozen version.  Relevance and
 * computing reads exclude the groups in D (an anti-join,
 * lf_live_unmigrated_query, or for one pinned group the gate,
 * leapfrog.group_migrated); the worker walks the table's blocks;
 * completion counts the rows whose key is not in D (and walks again what an
 * UPDATE moved behind its walk, complete.c).
 *
 * Locking rules.
 *	- A claim of a key (lf_live_claim) looks for it in D with a dirty
 *	  snapshot, under a transaction lock on the key's hash taken for the
 *	  look-up and the insert only (LOCKTAG_ADVISORY: the table of done keys,
 *	  the hash, field4 LF_LIVE_LOCK_CLASS; everyone waits for it, its holder
 *	  for nothing), so that two claimers never both insert a key.
 *	  Found and committed (or ours): migrated.  Found and in progress: its
 *	  claimer is migrating the group; a session releases the lock, waits for
 *	  that transaction (XactLockTableWait: sleeping, deadlock-checked) and
 *	  looks again.  Not found: the key is inserted, and once inserted,
 *	  the in-progress key is what the next claimer meets.  An abort removes
 *	  the key with the rows.  A worker (lf_live_claim_nowait), under the
 *	  same lock, inserts first and leaves the group if the unique index
 *	  already holds the key, committed or in progress; it deletes its
 *	  duplicate before it releases the lock.
 *	- The trigger's step (migrate.c, lf_migrate_live_key) first locks every
 *	  input of the mapping and its table of done keys, as a worker's step
 *	  does: a join's other input is not the table written, and a
 *	  completion that committed since the writer last looked drops a
 *	  retired input as soon as nobody holds a lock on it; one gone means
 *	  the migration completed, and the trigger does nothing.
 *	- The trigger claims a written row's groups one mapping after the other,
 *	  in the order of the script, each held to commit: two writers meeting
 *	  a customer's and a day's group in opposite orders can deadlock
 *	  (40P01, one rolled back), as writers of two rows each can eagerly.
 *	- Under REPEATABLE READ and SERIALIZABLE a statement that needs a group
 *	  migrated by a transaction its snapshot cannot see fails with 40001, as
 *	  a claim of a retired row does, and so does a write of one of its rows:
 *	  the transaction would then miss the group's new row (a DELETE of an
 *	  order's only line, then an UPDATE of its total that finds no row:
 *	  test_stress_live_aggregate).
 *	- start() creates the trigger under ShareRowExclusiveLock of the table,
 *	  with the switch's lock_timeout and retries: writes in flight are
 *	  fenced.  Dropping D at completion drops the trigger, which needs the
 *	  table's AccessExclusiveLock: taken only conditionally (lf_drop_retired),
 *	  retried by the workers; until then the trigger finds no migration and
 *	  returns at once.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_am.h"
#include "catalog/index.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_index.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_func.h"
#include "parser/parsetree.h"
#include "port/pg_bitutils.h"
#include "rewrite/rewriteManip.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "common/hashfn.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(leapfrog_live_input_trigger);

/* field4 of the advisory lock tag of a claim's look-up and insert */
#define LF_LIVE_LOCK_CLASS 0x4C46

/*
 * Does m own a table of done keys of input: a GROUP BY or join mapping of
 * an input tracked by keys, or the row mapping that a live input only row mappings
 * read is tracked by (its units are its rows, by primary key)?  (Another
 * row mapping of such an input shares its carrier's table: its rows move
 * with that mapping's units.)
 */
bool
lf_tracks_keys(LfMapping *m, Oid input)
{
	return (m->kind != LF_MAP_ROWS || m->row_keys) && OidIsValid(m->done_keys) &&
		lf_unit_input_index(m, input) >= 0;
}

/*
 * The mapping of mig whose units carry m's rows: m itself, or the mapping
 * that owns the table of done keys a row mapping shares; NULL if m is not
 * tracked by keys.
 */
LfMapping *
lf_keys_carrier(LfMigration *mig, LfMapping *m)
{
	ListCell   *lc;

	if (!OidIsValid(m->done_keys))
		return NULL;
	if (lf_tracks_keys(m, m->inputs[0]))
		return m;
	foreach(lc, mig->mappings)
		if (lf_tracks_keys(lfirst(lc), m->input) &&
			((LfMapping *) lfirst(lc))->done_keys == m->done_keys)
			return lfirst(lc);
	return NULL;
}

/* ---------------------------------------------------------------------
 * start(): the table of done keys and the trigger
 * ---------------------------------------------------------------------
 */

/* Is column att of relid NOT NULL? */
bool
lf_column_not_null(Oid relid, AttrNumber att)
{
	HeapTuple	tup = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid), Int16GetDatum(att));
	bool		notnull;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for column %d of %u", att, relid);
	notnull = ((Form_pg_attribute) GETSTRUCT(tup))->attnotnull;
	ReleaseSysCache(tup);
	return notnull;
}

/* "schema"."name" of a catalog object in namespace nsp */
static char *
qualified(Oid nsp, const char *name)
{
	return quote_qualified_identifier(get_namespace_name(nsp), name);
}

/*
 * Why the inputs of group or join mapping m, or of row mapping m keyed by
 * the input's primary key (lf_describe_row_keys), cannot be tracked by
 * keys, or NULL.  (start.c checks what concerns the script: other mappings,
 * replacements; and it tracks a join's inputs by keys only when the script
 * retires them.)  Key columns may be NULL (LF_KEY_SIZE), at most
 * LF_MAX_NULLABLE_KEYS of them per input.
 */
const char *
lf_live_unsupported(LfMapping *m)
{
	const char *why = NULL;

	if (m->nkeys == 0 || (m->kind == LF_MAP_ROWS && !m->row_keys))
		return "not a GROUP BY mapping";
	for (int i = 0; why == NULL && i < m->ninputs; i++)
	{
		Relation	rel = table_open(m->inputs[i], AccessShareLock);
		int			nullable = 0;	/* of input i (lf_live_unmigrated_query) */

		if (rel->rd_rel->relkind != RELKIND_RELATION)
			why = "not a plain table";
		else if (rel->rd_rel->relrowsecurity)
			why = "row security";
		else if (rel->rd_rules)
			why = "rules";
		for (int k = 0; why == NULL && k < m->nkeys; k++)
		{
			Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), m->keys[i][k] - 1);

			if (!att->attnotnull && ++nullable > LF_MAX_NULLABLE_KEYS)
				why = psprintf("more than %d key columns that may be NULL", LF_MAX_NULLABLE_KEYS);
			/*
			 * A BEFORE row trigger sees a stored generated column before it
			 * is computed (NULL on INSERT, the old value on UPDATE): ours
			 * would claim the wrong group.
			 */
			if (why == NULL && att->attgenerated)
				why = psprintf("key column \"%s\" is generated", NameStr(att->attname));
		}
		/* one table of done keys holds the keys of both sides of a join */
		if (why == NULL)
			why = m->key_types_why;
		if (why == NULL && rel->trigdesc)
		{
			/*
			 * A BEFORE row trigger firing after ours could change the key
			 * (ours is internal: a join's other input may have it already).
			 */
			for (int t = 0; t < rel->trigdesc->numtriggers; t++)
			{
				Trigger    *tg = &rel->trigdesc->triggers[t];

				if (TRIGGER_FOR_ROW(tg->tgtype) && TRIGGER_FOR_BEFORE(tg->tgtype) && !tg->tgisinternal &&
					tg->tgenabled != TRIGGER_DISABLED && strcmp(tg->tgname, "~leapfrog") >= 0)
					why = "a BEFORE row trigger named after \"~leapfrog\"";
			}
		}
		table_close(rel, AccessShareLock);
	}
	return why;
}

/*
 * The key columns of input i of m that may be NULL, as a mask (bit k for
 * key column k): each subset of them is a pattern of NULLs that reads and
 * counts test on its own (lf_live_unmigrated_query, lf_live_rows_left).
 * lf_live_unsupported allows LF_MAX_NULLABLE_KEYS of them.
 */
static uint32
nullable_key_columns(LfMapping *m, int i)
{
	uint32		mask = 0;

	for (int k = 0; k < m->nkeys; k++)
		if (!lf_column_not_null(m->inputs[i], m->keys[i][k]))
			mask |= 1u << k;
	Assert(pg_popcount32(mask) <= LF_MAX_NULLABLE_KEYS);
	return mask;
}

/* May key column k of an input of m be NULL? */
static bool
key_may_be_null(LfMapping *m, int k)
{
	for (int i = 0; i < m->ninputs; i++)
		if (!lf_column_not_null(m->inputs[i], m->keys[i][k]))
			return true;
	return false;
}

/*
 * The type, typmod and collation of key column k of m's table of done keys:
 * input 0's column's, or of a join's key of two types, the one the other
 * converts to (keytypes).
 */
static void
done_key_column(LfMapping *m, int k, Oid *type, int32 *typmod, Oid *coll)
{
	get_atttypetypmodcoll(m->inputs[0], m->keys[0][k], type, typmod, coll);
	if (*type != m->keytypes[k])
	{
		*type = m->keytypes[k];
		*typmod = -1;
	}
}

/*
 * Create the table of done keys of group, join or row-keyed mapping m for
 * migration migration_id, owned by the extension's owner, in
 * leapfrog_retired, named after input 0 and the first free number; returns
 * its OID.  The trigger of a live input comes apart (lf_live_watch): a
 * join's table covers both inputs, and each live one gets the trigger.
 * The caller runs inside SPI, in the switch's subtransaction.
 */
Oid
lf_live_track(LfMapping *m, int migration_id)
{
	Oid			relid = m->inputs[0];
	Oid			keyidx = lf_unit_index(m, 0);
	Relation	idx;
	StringInfoData cols,
				idxcols,
				sql;
	char		name[NAMEDATALEN];
	Oid			keys;
	LfSavedUser saved;
	oidvector  *indclass;
	bool		isnull;
	bool		nullable = false;	/* a key column of an input may be NULL */

	idx = index_open(keyidx, AccessShareLock);
	initStringInfo(&cols);
	initStringInfo(&idxcols);
	for (int k = 0; k < m->nkeys; k++)
	{
		AttrNumber	att = m->keys[0][k];
		Oid			type,
					coll;
		int32		typmod;
		HeapTuple	tup;

		done_key_column(m, k, &type, &typmod, &coll);
		appendStringInfo(&cols, "%s%s %s", k ? ", " : "",
						 quote_identifier(get_attname(relid, att, false)),
						 format_type_extended(type, typmod, FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY));
		if (OidIsValid(coll))
		{
			tup = SearchSysCache1(COLLOID, ObjectIdGetDatum(coll));
			if (!HeapTupleIsValid(tup))
				elog(ERROR, "cache lookup failed for collation %u", coll);
			appendStringInfo(&cols, " COLLATE %s",
							 qualified(((Form_pg_collation) GETSTRUCT(tup))->collnamespace,
									   NameStr(((Form_pg_collation) GETSTRUCT(tup))->collname)));
			ReleaseSysCache(tup);
		}
		if (key_may_be_null(m, k))
			nullable = true;
		else
			appendStringInfoString(&cols, " NOT NULL");
	}
	/* the unique index: the key index's operator class, so its equality */
	indclass = (oidvector *) DatumGetPointer(SysCacheGetAttr(INDEXRELID, idx->rd_indextuple,
															 Anum_pg_index_indclass, &isnull));
	for (int k = 0; k < m->nkeys; k++)
	{
		AttrNumber	att = m->keys[0][k];
		int			p;
		HeapTuple	tup;
		Form_pg_opclass opc;
		Oid			opclass;

		for (p = 0; p < idx->rd_index->indnkeyatts; p++)
			if (idx->rd_index->indkey.values[p] == att)
				break;
		if (p == idx->rd_index->indnkeyatts)
			elog(ERROR, "leapfrog: key column %d not in index %u", att, keyidx);
		/* a join's key of the other side's type: that type's default (describe_key_types) */
		opclass = m->keytypes[k] == get_atttype(relid, att) ? indclass->values[p] :
			GetDefaultOpClass(m->keytypes[k], BTREE_AM_OID);
		tup = SearchSysCache1(CLAOID, ObjectIdGetDatum(opclass));
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for operator class %u", opclass);
		opc = (Form_pg_opclass) GETSTRUCT(tup);
		appendStringInfo(&idxcols, "%s%s %s", k ? ", " : "",
						 quote_identifier(get_attname(relid, att, false)),
						 qualified(opc->opcnamespace, NameStr(opc->opcname)));
		ReleaseSysCache(tup);
	}
	index_close(idx, AccessShareLock);

	/* a join's row with a NULL key is its own unit: the row (LF_KEY_ROW) */
	if (m->kind == LF_MAP_JOIN && nullable)
	{
		appendStringInfoString(&cols, ", leapfrog_row_input pg_catalog.int4, leapfrog_row pg_catalog.tid");
		appendStringInfoString(&idxcols, ", leapfrog_row_input pg_catalog.int4_ops, leapfrog_row pg_catalog.tid_ops");
	}

	/* the first free name: a join's is named after input 0, whichever input asks */
	snprintf(name, sizeof(name), "m%d_%u_done_keys", migration_id, relid);
	for (int nth = 2; OidIsValid(get_relname_relid(name, lf_retired_namespace())); nth++)
		snprintf(name, sizeof(name), "m%d_%u_done_keys_%d", migration_id, relid, nth);
	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE TABLE leapfrog_retired.%s (%s)",
					 quote_identifier(name), cols.data);
	saved = lf_become(lf_catalog_owner(), 0);
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "leapfrog: could not create %s", name);
	resetStringInfo(&sql);
	/* NULLs are equal: one unit per key, NULLs or not (LF_KEY_SIZE) */
	appendStringInfo(&sql, "CREATE UNIQUE INDEX ON leapfrog_retired.%s (%s)%s",
					 quote_identifier(name), idxcols.data, nullable ? " NULLS NOT DISTINCT" : "");
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "leapfrog: could not index %s", name);
	lf_unbecome(saved);
	CommandCounterIncrement();
	keys = get_relname_relid(name, lf_retired_namespace());
	if (!OidIsValid(keys))
		elog(ERROR, "leapfrog: %s not created", name);
	lf_retired_join_extension(keys, true);
	return keys;
}

/*
 * Put the trigger on live input relid for its table of done keys `keys`:
 * the table's first one creates it, into *trigger (InvalidOid before); a
 * later one (another mapping of the table, or a join's made for its other
 * input) is recorded as one the trigger goes with.  The trigger is
 * internal, so that pg_dump and \d leave it out and users cannot drop it;
 * it fires after the table's own BEFORE triggers with names sorting before
 * it (lf_live_unsupported refuses the others).  All the tables of done keys
 * are dropped at completion, and the first takes the trigger with it.
 * Takes ShareRowExclusiveLock on relid: writes in flight commit first, or
 * hold the switch back (the caller has lock_timeout and retries).
 */
void
lf_live_watch(Oid relid, Oid keys, Oid *trigger)
{
	CreateTrigStmt *stmt;
	ObjectAddress trig,
				keysaddr;

	lf_switch_lock(relid, ShareRowExclusiveLock);
	ObjectAddressSet(keysaddr, RelationRelationId, keys);
	if (!OidIsValid(*trigger))
	{
		stmt = makeNode(CreateTrigStmt);
		stmt->trigname = "~leapfrog";
		stmt->relation = NULL;
		stmt->funcname = list_make2(makeString("leapfrog"), makeString("live_input_trigger"));
		stmt->row = true;
		stmt->timing = TRIGGER_TYPE_BEFORE;
		stmt->events = TRIGGER_TYPE_INSERT | TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE;
		trig = CreateTriggerFiringOn(stmt, NULL, relid, InvalidOid, InvalidOid, InvalidOid,
									 LookupFuncName(stmt->funcname, 0, NULL, false),
									 InvalidOid, NULL, true, false, TRIGGER_FIRES_ALWAYS);
		*trigger = trig.objectId;
	}
	else
		ObjectAddressSet(trig, TriggerRelationId, *trigger);
	recordDependencyOn(&trig, &keysaddr, DEPENDENCY_AUTO);
	CommandCounterIncrement();
}

/*
 * The tables whose triggers go when table of done keys `keys` is dropped
 * (a join's with both inputs live has two), or NIL.
 */
List *
lf_live_trigger_tables(Oid keys)
{
	Relation	dep = table_open(DependRelationId, AccessShareLock);
	Relation	trel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyData sk[2];
	SysScanDesc scan;
	HeapTuple	tup;
	List	   *result = NIL;

	ScanKeyInit(&sk[0], Anum_pg_depend_refclassid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(RelationRelationId));
	ScanKeyInit(&sk[1], Anum_pg_depend_refobjid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(keys));
	scan = systable_beginscan(dep, DependReferenceIndexId, true, NULL, 2, sk);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend d = (Form_pg_depend) GETSTRUCT(tup);
		ScanKeyData tk;
		SysScanDesc tscan;
		HeapTuple	ttup;

		if (d->classid != TriggerRelationId)
			continue;
		ScanKeyInit(&tk, Anum_pg_trigger_oid, BTEqualStrategyNumber, F_OIDEQ,
					ObjectIdGetDatum(d->objid));
		tscan = systable_beginscan(trel, TriggerOidIndexId, true, NULL, 1, &tk);
		if (HeapTupleIsValid(ttup = systable_getnext(tscan)))
			result = list_append_unique_oid(result, ((Form_pg_trigger) GETSTRUCT(ttup))->tgrelid);
		systable_endscan(tscan);
	}
	systable_endscan(scan);
	table_close(trel, AccessShareLock);
	table_close(dep, AccessShareLock);
	return result;
}

/* ---------------------------------------------------------------------
 * Reads: the mapping restricted to the groups not migrated
 * ---------------------------------------------------------------------
 */

/* arg IS [NOT] NULL */
static Expr *
null_test(Expr *arg, NullTestType type)
{
	NullTest   *t = makeNode(NullTest);

	t->arg = arg;
	t->nulltesttype = type;
	t->argisrow = false;
	t->location = -1;
	return (Expr *) t;
}



/*
 * EXISTS (SELECT FROM done_keys d WHERE d.k1 = rhs1 AND ...): rhs[k] is a
 * value of input i's key column k (the right operand of m->keyinops[i]),
 * at the sublink's level (so an input Var has varlevelsup 1), or NULL for
 * d.k IS NULL.  With row (input i's ctid, at that level), the key is that
 * row's (LF_KEY_ROW): AND d.leapfrog_row_input = i AND d.leapfrog_row = row.
 */
static SubLink *
done_keys_exists(LfMapping *m, int i, Expr **rhs, Expr *row)
{
	Query	   *sub = makeNode(Query);
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	SubLink    *sl = makeNode(SubLink);
	List	   *conds = NIL;
	List	   *colnames = NIL;

	rte->rtekind = RTE_RELATION;
	rte->relid = m->done_keys;
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = AccessShareLock;
	rte->requiredPerms = ACL_SELECT;
	rte->checkAsUser = lf_catalog_owner();
	rte->inFromCl = true;
	for (int k = 0; k < m->nkeys; k++)
	{
		Oid			type,
					coll;
		int32		typmod;
		Oid			op = m->keyinops[i][k];
		OpExpr	   *eq;

		done_key_column(m, k, &type, &typmod, &coll);
		if (rhs[k] == NULL)
			conds = lappend(conds, null_test((Expr *) makeVar(1, k + 1, type, typmod, coll, 0),
											 IS_NULL));
		else
		{
			eq = (OpExpr *) make_opclause(op, BOOLOID, false,
										  (Expr *) makeVar(1, k + 1, type, typmod, coll, 0),
										  rhs[k], InvalidOid, m->collations[k]);
			eq->opfuncid = get_opcode(op);
			conds = lappend(conds, eq);
		}
		rte->selectedCols = bms_add_member(rte->selectedCols,
										   k + 1 - FirstLowInvalidHeapAttributeNumber);
		colnames = lappend(colnames, makeString(psprintf("k%d", k + 1)));
	}
	if (m->null_rows)
	{
		colnames = lappend(lappend(colnames, makeString("leapfrog_row_input")),
						   makeString("leapfrog_row"));
		if (row != NULL)
		{
			OpExpr	   *eq;

			conds = lappend(conds,
							make_opclause(Int4EqualOperator, BOOLOID, false,
										  (Expr *) makeVar(1, m->nkeys + 1, INT4OID, -1, InvalidOid, 0),
										  (Expr *) makeConst(INT4OID, -1, InvalidOid, 4,
															 Int32GetDatum(m->row_sides[i]), false, true),
										  InvalidOid, InvalidOid));
			((OpExpr *) llast(conds))->opfuncid = F_INT4EQ;
			eq = (OpExpr *) make_opclause(TIDEqualOperator, BOOLOID, false,
										  (Expr *) makeVar(1, m->nkeys + 2, TIDOID, -1, InvalidOid, 0),
										  row, InvalidOid, InvalidOid);
			eq->opfuncid = F_TIDEQ;
			conds = lappend(conds, eq);
			for (int c = m->nkeys + 1; c <= m->nkeys + 2; c++)
				rte->selectedCols = bms_add_member(rte->selectedCols,
												   c - FirstLowInvalidHeapAttributeNumber);
		}
	}
	rte->eref = makeAlias("lf_done_keys", colnames);
	sub->commandType = CMD_SELECT;
	sub->querySource = QSRC_ORIGINAL;
	sub->canSetTag = true;
	sub->rtable = list_make1(rte);
	sub->jointree = makeFromExpr(list_make1(makeNode(RangeTblRef)),
								 (Node *) make_ands_explicit(conds));
	((RangeTblRef *) linitial(sub->jointree->fromlist))->rtindex = 1;

	sl->subLinkType = EXISTS_SUBLINK;
	sl->subLinkId = 0;
	sl->subselect = (Node *) sub;
	sl->location = -1;
	return sl;
}

/*
 * m's query AND NOT EXISTS (SELECT FROM done_keys d WHERE d.k1 = input.k1
 * AND ...): what relevance and computing reads see of a mapping tracked by
 * keys.  Of a join, input is its preserved side (either side of an inner
 * join): every row the join gives has its key there.  The steps copy with
 * m's own query, restricted to the rows they claimed.
 *
 * A key with NULLs (LF_KEY_SIZE) passes that test, as equality with NULL
 * is never true; each pattern of NULLs among the key columns that may be
 * NULL then has its own: NOT (k1 IS NULL AND k2 IS NOT NULL) OR NOT EXISTS
 * (SELECT FROM done_keys d WHERE d.k1 IS NULL AND d.k2 = input.k2), which
 * the index of done keys answers (IS NOT DISTINCT FROM would read all of it
 * for every such row).  With one such column its subquery is a constant,
 * run once at most, when a row with a NULL key is met.  A join's key with
 * NULLs is the row (LF_KEY_ROW): its subquery also tests
 * d.leapfrog_row_input and d.leapfrog_row against the input's ctid.
 */
Query *
lf_live_unmigrated_query(LfMapping *m)
{
	Query	   *q = copyObject(m->query);
	Expr	   *rhs[INDEX_MAX_KEYS];
	int			p = lf_unit_input_index(m, m->input);	/* a join's preserved side */
	uint32		nullable = nullable_key_columns(m, p);
	/* a join's row with a NULL key is its own unit: its ctid */
	Expr	   *row = m->null_rows ?
		(Expr *) makeVar(m->rtis[p], SelfItemPointerAttributeNumber, TIDOID, -1, InvalidOid, 1) : NULL;

	for (int k = 0; k < m->nkeys; k++)
	{
		Oid			type,
					coll;
		int32		typmod;

		get_atttypetypmodcoll(m->inputs[p], m->keys[p][k], &type, &typmod, &coll);
		rhs[k] = (Expr *) makeVar(m->rtis[p], m->keys[p][k], type, typmod, coll, 1);
	}
	q->jointree->quals = make_and_qual(q->jointree->quals,
									   (Node *) makeBoolExpr(NOT_EXPR,
															 list_make1(done_keys_exists(m, p, rhs, NULL)),
															 -1));
	/* every non-empty subset s of the nullable columns: those NULL, the others not */
	for (uint32 s = nullable; s != 0; s = (s - 1) & nullable)
	{
		Expr	   *r[INDEX_MAX_KEYS];
		List	   *pattern = NIL;

		for (int k = 0; k < m->nkeys; k++)
		{
			Var		   *v;

			r[k] = (s & (1u << k)) ? NULL : copyObject(rhs[k]);
			if (!(nullable & (1u << k)))
				continue;
			v = copyObject((Var *) rhs[k]);
			v->varlevelsup = 0;
			pattern = lappend(pattern, null_test((Expr *) v, (s & (1u << k)) ? IS_NULL : IS_NOT_NULL));
		}
		q->jointree->quals =
			make_and_qual(q->jointree->quals,
						  (Node *) makeBoolExpr(OR_EXPR,
												list_make2(makeBoolExpr(NOT_EXPR,
																		list_make1(make_ands_explicit(pattern)),
																		-1),
														   makeBoolExpr(NOT_EXPR,
																		list_make1(done_keys_exists(m, p, r, row)),
																		-1)),
												-1));
	}
	q->hasSubLinks = true;
	return q;
}

/*
 * A statement that pins every key column of live mapping m's target to a
 * value (target.k = <expression without Vars>, with the key's own equality
 * and collation) reads one group: NOT leapfrog.group_migrated(m, value1,
 * ...) (or NOT EXISTS (SELECT FROM done_keys WHERE d.k1 = value1 AND ...)
 * without that function), for the branch that computes it from the input
 * (compute.c), or NULL if the conditions do not pin every key column.
 * The planner runs it once, as a one-time filter, before the input's rows
 * are read: a migrated group costs one probe of the done keys, not a read
 * of its rows and the anti-join (lf_live_pin).  conds: the statement's
 * conjuncts on the target, whose Vars (varno) read the target's columns.
 */
static bool pinned_key(LfMapping *m, List *conds, int varno, Expr **rhs);

Node *
lf_live_pinned_gate(LfMapping *m, List *conds, int varno)
{
	Expr	   *rhs[INDEX_MAX_KEYS];
	Oid			argtypes[2] = {INT4OID, ANYOID};
	Oid			fn;
	List	   *args;

	if (!pinned_key(m, conds, varno, rhs))
		return NULL;

	/*
	 * leapfrog.group_migrated(mapping, key...): one probe, no sub-plan to
	 * set up, and the answer the executor start may have found already
	 * (lf_live_done_at).  A database that ran an earlier build of 0.1 may
	 * lack the function: the sub-query then.
	 */
	fn = LookupFuncName(list_make2(makeString("leapfrog"), makeString("group_migrated")), 2,
						argtypes, true);
	for (int k = 0; k < m->nkeys && OidIsValid(fn); k++)
		if (exprType((Node *) rhs[k]) != m->keytypes[k])
			fn = InvalidOid;
	if (!OidIsValid(fn))
		return (Node *) makeBoolExpr(NOT_EXPR, list_make1(done_keys_exists(m, 0, rhs, NULL)), -1);
	args = list_make1(makeConst(INT4OID, -1, InvalidOid, 4, Int32GetDatum(m->id), false, true));
	for (int k = 0; k < m->nkeys; k++)
		args = lappend(args, rhs[k]);
	return (Node *) makeBoolExpr(NOT_EXPR,
								 list_make1(makeFuncExpr(fn, BOOLOID, args, InvalidOid,
														 InvalidOid, COERCE_EXPLICIT_CALL)),
								 -1);
}

/*
 * Does the expression read anything but constants and the statement's
 * parameters: a column, a sub-query, a parameter a plan node sets?
 */
static bool
reads_rows_walker(Node *node, void *cx)
{
	if (node == NULL)
		return false;
	if (IsA(node, Param))
		return ((Param *) node)->paramkind != PARAM_EXTERN;
	if (IsA(node, Var) || IsA(node, PlaceHolderVar) || IsA(node, Aggref) ||
		IsA(node, WindowFunc) || IsA(node, GroupingFunc) || IsA(node, SubLink) ||
		IsA(node, SubPlan) || IsA(node, AlternativeSubPlan))
		return true;
	return expression_tree_walker(node, reads_rows_walker, cx);
}

bool
lf_reads_rows(Node *node)
{
	return reads_rows_walker(node, NULL);
}

/*
 * The values conds pins every key column of live mapping m's target to
 * (as lf_live_pinned_gate), ready for the executor, if each has the key
 * column's type and can be computed before the statement runs (constants,
 * the statement's parameters, functions of them); NIL otherwise.  A
 * relevance plan on one group keeps them (relevance.c), to be skipped when
 * the backend knows the group migrated (lf_live_memo_migrated).
 */
List *
lf_live_pinned_values(LfMapping *m, List *conds, int varno)
{
	Expr	   *rhs[INDEX_MAX_KEYS];
	List	   *values = NIL;

	if (!pinned_key(m, conds, varno, rhs))
		return NIL;
	for (int k = 0; k < m->nkeys; k++)
	{
		Expr	   *e = expression_planner(rhs[k]);

		if (exprType((Node *) e) != m->keytypes[k] ||
			lf_reads_rows((Node *) e) || contain_volatile_functions((Node *) e))
			return NIL;
		values = lappend(values, e);
	}
	return values;
}

static bool
pinned_key(LfMapping *m, List *conds, int varno, Expr **rhs)
{
	if (m->unmigrated == NULL || m->kind == LF_MAP_JOIN)
		return false;			/* not tracked by keys, or a join: no gate */
	for (int k = 0; k < m->nkeys; k++)
	{
		AttrNumber	target_att = 0;
		ListCell   *lc;

		/* the target column that is key column k, unchanged */
		foreach(lc, m->query->targetList)
		{
			TargetEntry *tle = lfirst(lc);
			Var		   *v = (Var *) tle->expr;

			if (tle->resno <= m->natts && IsA(v, Var) && v->varlevelsup == 0 &&
				v->varno == m->rtis[0] && v->varattno == m->keys[0][k])
			{
				target_att = tle->resno;
				break;
			}
		}
		if (target_att == 0)
			return false;
		rhs[k] = NULL;
		foreach(lc, conds)
		{
			OpExpr	   *op = lfirst(lc);
			Node	   *l,
					   *r;

			if (!IsA(op, OpExpr) || op->opno != m->eqops[k] ||
				op->inputcollid != m->collations[k] || list_length(op->args) != 2)
				continue;
			l = linitial(op->args);
			r = lsecond(op->args);
			if (IsA(r, Var))
			{
				Node	   *t = l;

				l = r;
				r = t;
			}
			if (IsA(l, Var) && ((Var *) l)->varno == varno && ((Var *) l)->varlevelsup == 0 &&
				((Var *) l)->varattno == target_att && !contain_vars_of_level(r, 0) &&
				!contain_volatile_functions(r))
			{
				rhs[k] = (Expr *) copyObject(r);
				break;
			}
		}
		if (rhs[k] == NULL)
			return false;
	}
	return true;
}

/*
 * sub, a copy of m->unmigrated, for a statement that pins one group: the
 * gate (lf_live_pinned_gate) in place of the anti-join, which it makes
 * redundant (the statement keeps only the pinned group's rows, and they
 * are all unmigrated or none).  One probe of the done keys instead of two,
 * and one index scan fewer in the executor's state.
 */
void
lf_live_pin(Query *sub, LfMapping *m, Node *gate)
{
	sub->jointree->quals = make_and_qual(copyObject(m->query->jointree->quals), gate);
	sub->hasSubLinks = m->query->hasSubLinks || checkExprHasSubLink(gate);
}

/* ---------------------------------------------------------------------
 * Claims
 * ---------------------------------------------------------------------
 */

/*
 * The table of done keys of a live mapping, open for look-ups and claims:
 * once per step, not per key (a worker's batch claims hundreds; opening it
 * and its index, and CatalogTupleInsert's opening of the index, per key
 * were a third of a worker's claims: perf, bench/idle_completion.py).
 */
struct LfDoneKeys
{
	Relation	rel;
	Relation	idx;			/* its unique index, on the key */
	LOCKMODE	lockmode;		/* held on both */
	IndexInfo  *info;
	TupleTableSlot *slot;		/* the key found */
	/* the scan of the last probe, rescanned by the next one with its snapshot */
	IndexScanDesc scan;
	Snapshot	scan_snap;
	int			scan_nkeys;
};

/* lf_done_keys_open with lockmode: AccessShareLock to probe only */
static LfDoneKeys *
done_keys_open(LfMapping *m, LOCKMODE lockmode)
{
	LfDoneKeys *d = palloc(sizeof(LfDoneKeys));
	List	   *indexes;

	d->rel = table_open(m->done_keys, lockmode);
	indexes = RelationGetIndexList(d->rel);
	if (list_length(indexes) != 1)
		elog(ERROR, "leapfrog: unexpected indexes on %s", RelationGetRelationName(d->rel));
	d->idx = index_open(linitial_oid(indexes), lockmode);
	d->lockmode = lockmode;
	d->info = NULL;				/* built by the first insert */
	d->slot = table_slot_create(d->rel, NULL);
	d->scan = NULL;
	return d;
}

LfDoneKeys *
lf_done_keys_open(LfMapping *m)
{
	return done_keys_open(m, RowExclusiveLock);
}

void
lf_done_keys_close(LfDoneKeys *d)
{
	if (d->scan)
		index_endscan(d->scan);
	ExecDropSingleTupleTableSlot(d->slot);
	index_close(d->idx, d->lockmode);
	table_close(d->rel, d->lockmode);
	pfree(d);
}

/*
 * The key just found in d->slot, migrated by a transaction that committed
 * (a dirty look-up found it, without an xmin in progress) or by this one:
 * may the transaction use it?  Under REPEATABLE READ and SERIALIZABLE, not
 * if another transaction migrated it after snap: the group's new row is
 * invisible to snap, and a statement on the new table, or a write of the
 * group's rows followed by one, would miss it.
 */
static bool
done_visible(LfDoneKeys *d, Snapshot snap)
{
	bool		isnull;
	TransactionId xmin;

	if (!IsolationUsesXactSnapshot())
		return true;
	xmin = DatumGetTransactionId(slot_getsysattr(d->slot, MinTransactionIdAttributeNumber,
												 &isnull));
	return TransactionIdIsCurrentTransactionId(xmin) ||
		table_tuple_satisfies_snapshot(d->rel, d->slot, snap);
}

/*
 * Look for key in d through its unique index with snap; the tuple in
 * d->slot.  A walk probes every row's key: the scan is begun once per
 * snapshot and rescanned (a btree scan's set-up allocates some 27 kB).
 */
static bool
probe(LfDoneKeys *d, LfMapping *m, Datum *key, Snapshot snap)
{
	ScanKeyData sk[INDEX_MAX_KEYS + 2];
	int			nsk = m->nkeys;
	ItemPointerData row;
	MemoryContext old;
	bool		found;

	for (int k = 0; k < m->nkeys; k++)
	{
		if (LF_KEY_ISNULL(m->nkeys, key, k))
			ScanKeyEntryInitialize(&sk[k], SK_ISNULL | SK_SEARCHNULL, k + 1, InvalidStrategy,
								   InvalidOid, InvalidOid, InvalidOid, (Datum) 0);
		else
			ScanKeyEntryInitialize(&sk[k], 0, k + 1, BTEqualStrategyNumber, InvalidOid,
								   d->idx->rd_indcollation[k], get_opcode(m->keyeqops[k]), key[k]);
	}
	if (m->null_rows)
	{
		/* the row of a join's key with NULLs, or none */
		if (LF_KEY_ROW(m->nkeys, key))
		{
			lf_key_get_row(m->nkeys, key, &row);
			ScanKeyInit(&sk[nsk], nsk + 1, BTEqualStrategyNumber, F_INT4EQ,
						Int32GetDatum(LF_KEY_ROW_INPUT(m->nkeys, key)));
			ScanKeyInit(&sk[nsk + 1], nsk + 2, BTEqualStrategyNumber, F_TIDEQ,
						PointerGetDatum(&row));
		}
		else
			for (int c = nsk; c < nsk + 2; c++)
				ScanKeyEntryInitialize(&sk[c], SK_ISNULL | SK_SEARCHNULL, c + 1, InvalidStrategy,
									   InvalidOid, InvalidOid, InvalidOid, (Datum) 0);
		nsk += 2;
	}
	/* in d's memory context: a caller may probe from a shorter-lived one */
	old = MemoryContextSwitchTo(GetMemoryChunkContext(d));
	if (d->scan == NULL || d->scan_snap != snap || d->scan_nkeys != nsk)
	{
		if (d->scan)
			index_endscan(d->scan);
		d->scan = index_beginscan(d->rel, d->idx, snap, nsk, 0);
		d->scan_snap = snap;
		d->scan_nkeys = nsk;
	}
	index_rescan(d->scan, sk, nsk, NULL, 0);
	found = index_getnext_slot(d->scan, ForwardScanDirection, d->slot);
	MemoryContextSwitchTo(old);
	return found;
}

/*
 * Insert key into D, heap and unique index; the index's check is check (no
 * other claimer can insert the key meanwhile: the caller holds the key's
 * claim lock).  Returns index_insert's answer (with UNIQUE_CHECK_PARTIAL,
 * false if an equal key is there, committed or in progress) and the new
 * tuple's tid.
 */
static bool
insert_key(LfDoneKeys *d, LfMapping *m, Datum *key, IndexUniqueCheck check, ItemPointer tid)
{
	Datum		values[INDEX_MAX_KEYS + 2];
	bool		nulls[INDEX_MAX_KEYS + 2];
	int			ncols = m->nkeys + (m->null_rows ? 2 : 0);
	ItemPointerData row;
	HeapTuple	tup;
	bool		result;

	for (int k = 0; k < m->nkeys; k++)
	{
		values[k] = key[k];
		nulls[k] = LF_KEY_ISNULL(m->nkeys, key, k);
	}
	if (m->null_rows)
	{
		bool		is_row = LF_KEY_ROW(m->nkeys, key);

		if (is_row)
			lf_key_get_row(m->nkeys, key, &row);
		values[m->nkeys] = Int32GetDatum(is_row ? LF_KEY_ROW_INPUT(m->nkeys, key) : 0);
		values[m->nkeys + 1] = PointerGetDatum(&row);
		nulls[m->nkeys] = nulls[m->nkeys + 1] = !is_row;
	}
	tup = heap_form_tuple(RelationGetDescr(d->rel), values, nulls);

	if (d->info == NULL)
	{
		d->info = BuildIndexInfo(d->idx);
		/* lf_live_track built it on the columns in order: a key is its values */
		for (int k = 0; k < ncols; k++)
			if (d->info->ii_NumIndexKeyAttrs != ncols ||
				d->info->ii_IndexAttrNumbers[k] != k + 1)
				elog(ERROR, "leapfrog: unexpected index on %s", RelationGetRelationName(d->rel));
	}
	simple_heap_insert(d->rel, tup);
	result = index_insert(d->idx, values, nulls, &tup->t_self, d->rel, check, false, d->info);
	*tid = tup->t_self;
	heap_freetuple(tup);
	return result;
}

/*
 * A hash of key that equal keys share (the hash functions of the key's
 * equality operators), so that claimers of different keys rarely take the
 * same claim lock (one lock per mapping was most of the lock waits of the
 * TPC-C aggregate at saturation); 0 when an equality has no hash function.
 */
static uint32
key_hash(LfMapping *m, Datum *key)
{
	uint32		h = 0;

	for (int k = 0; k < m->nkeys; k++)
	{
		RegProcedure lhs,
					rhs;

		if (LF_KEY_ISNULL(m->nkeys, key, k))
		{
			h = hash_combine(h, 0x4E554C4C);
			continue;
		}
		if (!get_op_hash_functions(m->keyeqops[k], &lhs, &rhs))
			return 0;
		h = hash_combine(h, DatumGetUInt32(OidFunctionCall1Coll(lhs, m->collations[k], key[k])));
	}
	if (LF_KEY_ROW(m->nkeys, key))
		h = hash_combine(hash_combine(h, DatumGetUInt32(key[m->nkeys + 1])),
						 DatumGetUInt32(key[m->nkeys + 2]));
	return h;
}

/* The claim lock of key (the file header's locking rules) */
static void
claim_lock_tag(LOCKTAG *tag, LfMapping *m, Datum *key)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, m->done_keys, key_hash(m, key), LF_LIVE_LOCK_CLASS);
}

/*
 * Claim the group of key (values of the input's key columns, in key order)
 * of live mapping m: LF_CLAIMED if this transaction now migrates it,
 * LF_DONE if it is migrated (committed, or by this transaction).  A
 * claimer in progress is waited for.  With strict (a statement that needs
 * the group's new row, or a write of its rows), a key committed by a
 * transaction that snap cannot see fails with 40001 under REPEATABLE READ
 * and SERIALIZABLE.  The worker claims with lf_live_claim_nowait.
 */
LfLiveClaim
lf_live_claim(LfDoneKeys *d, LfMapping *m, Datum *key, Snapshot snap, bool strict)
{
	LOCKTAG		tag;
	LfLiveClaim result;

	claim_lock_tag(&tag, m, key);
	for (;;)
	{
		SnapshotData dirty;
		TransactionId xwait;

		CHECK_FOR_INTERRUPTS();

		/*
		 * One look-up, alone with the insert that may follow: a key absent
		 * now cannot be inserted by another claimer before ours.  Its holder
		 * waits for nothing while it holds it, so a worker waits for it too
		 * (skipping the group when the lock was busy made two workers skip
		 * each other's groups and pass over the table again).
		 */
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
		InitDirtySnapshot(dirty);
		if (!probe(d, m, key, &dirty))
		{
			ItemPointerData tid;

			(void) insert_key(d, m, key, UNIQUE_CHECK_YES, &tid);
			LockRelease(&tag, ExclusiveLock, false);
			result = LF_CLAIMED;
			break;
		}
		LockRelease(&tag, ExclusiveLock, false);
		xwait = dirty.xmin;
		if (TransactionIdIsValid(xwait))
		{
			/* another transaction is migrating the group: no index pin held while we wait */
			index_endscan(d->scan);
			d->scan = NULL;
			XactLockTableWait(xwait, d->rel, &d->slot->tts_tid, XLTW_None);
			continue;
		}
		if (strict && !done_visible(d, snap))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update"),
					 errdetail("A group the statement needs was migrated by a transaction its snapshot cannot see.")));
		result = LF_DONE;
		break;
	}
	return result;
}

/*
 * The worker's claim: lf_live_claim without wait, for a worker that leaves
 * a group it cannot claim at once.  True if this transaction now migrates
 * the group of key; false if the key is in D already (migrated, being
 * migrated, or claimed earlier in this transaction).  Under the same lock,
 * but it inserts the key first and lets the unique index tell of a key
 * already there (UNIQUE_CHECK_PARTIAL: no wait, no error), which saves the
 * look-up on the groups nobody touched, nearly all a worker meets when a
 * group's rows lie together.  The duplicate it inserted for the others is
 * deleted at once, before the lock is released: no committed duplicate can
 * exist.  When a group's rows are scattered over the table, most keys a
 * worker meets are migrated already, and an insert and a delete cost
 * several look-ups: with look_first, a key the look-up finds (committed,
 * in progress, or ours) is left without the lock, as the insert would
 * leave it.
 */
bool
lf_live_claim_nowait(LfDoneKeys *d, LfMapping *m, Datum *key, bool look_first)
{
	LOCKTAG		tag;
	ItemPointerData tid;
	bool		claimed;

	CHECK_FOR_INTERRUPTS();
	if (look_first)
	{
		SnapshotData dirty;

		InitDirtySnapshot(dirty);
		if (probe(d, m, key, &dirty))
			return false;
	}
	claim_lock_tag(&tag, m, key);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	claimed = insert_key(d, m, key, UNIQUE_CHECK_PARTIAL, &tid);
	if (!claimed)
	{
		CommandCounterIncrement();	/* our insert is visible to the delete */
		simple_heap_delete(d->rel, &tid);
	}
	LockRelease(&tag, ExclusiveLock, false);
	return claimed;
}

/*
 * The gate's answers (leapfrog.group_migrated) for the statements running
 * now: the executor start of a read that pins groups looks them up
 * (compute.c, lf_compute_shortcut), and the gates of its computing plan, on
 * the same snapshot, find the answers here instead of looking again.  A
 * snapshot is told apart by what decides what it sees: the transaction, its
 * xmin, xmax, command and transactions in progress (the executor runs on a
 * copy of the snapshot its start was given).  Forgotten at the end of the
 * transaction, and when a subtransaction aborts (a key it inserted goes
 * with it).
 */
#define LF_GATE_SLOTS 8

typedef struct GateAnswer
{
	Oid			keys;			/* the table of done keys; InvalidOid: free */
	LocalTransactionId lxid;
	TransactionId xmin;
	TransactionId xmax;
	CommandId	curcid;
	uint32		xcnt;
	TransactionId *xip;			/* in TopTransactionContext */
	int32		subxcnt;
	bool		suboverflowed;
	TransactionId *subxip;
	int			nkeys;
	Datum		key[INDEX_MAX_KEYS];	/* in TopTransactionContext */
	bool		byval[INDEX_MAX_KEYS];
	int16		len[INDEX_MAX_KEYS];
	bool		migrated;
} GateAnswer;

static GateAnswer gate_answers[LF_GATE_SLOTS];
static int	gate_next;

static void
gate_forget(void)
{
	for (int i = 0; i < LF_GATE_SLOTS; i++)
		gate_answers[i].keys = InvalidOid;
}

static void forget_when_xact_ends(void);

/* Can a snapshot's answers be kept: an MVCC one, its arrays not too long? */
#define LF_GATE_XIDS 256
static bool
gate_keeps(Snapshot snap)
{
	return snap->snapshot_type == SNAPSHOT_MVCC && snap->xcnt <= LF_GATE_XIDS &&
		snap->subxcnt >= 0 && snap->subxcnt <= LF_GATE_XIDS;
}

/* The subtransactions in snap's array (none copied once it overflowed) */
static int
gate_subxids(Snapshot snap)
{
	return snap->suboverflowed && !snap->takenDuringRecovery ? 0 : snap->subxcnt;
}

static bool
gate_same(GateAnswer *a, LfMapping *m, Datum *key, Snapshot snap)
{
	if (a->keys != m->done_keys || a->lxid != MyProc->lxid || a->xmin != snap->xmin ||
		a->xmax != snap->xmax || a->curcid != snap->curcid || a->xcnt != snap->xcnt ||
		a->subxcnt != snap->subxcnt || a->suboverflowed != snap->suboverflowed ||
		a->nkeys != m->nkeys ||
		(snap->xcnt > 0 && memcmp(a->xip, snap->xip, sizeof(TransactionId) * snap->xcnt) != 0) ||
		(gate_subxids(snap) > 0 &&
		 memcmp(a->subxip, snap->subxip, sizeof(TransactionId) * gate_subxids(snap)) != 0))
		return false;
	for (int k = 0; k < m->nkeys; k++)
		if (!datumIsEqual(a->key[k], key[k], a->byval[k], a->len[k]))
			return false;
	return true;
}

static void
gate_remember(LfMapping *m, Datum *key, Snapshot snap, TupleDesc desc, bool migrated)
{
	GateAnswer *a = &gate_answers[gate_next];
	MemoryContext old;

	forget_when_xact_ends();
	gate_next = (gate_next + 1) % LF_GATE_SLOTS;
	old = MemoryContextSwitchTo(TopTransactionContext);
	for (int k = 0; k < m->nkeys; k++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, k);

		a->byval[k] = att->attbyval;
		a->len[k] = att->attlen;
		a->key[k] = datumCopy(key[k], att->attbyval, att->attlen);
	}
	a->xcnt = snap->xcnt;
	a->xip = palloc(sizeof(TransactionId) * Max(snap->xcnt, 1));
	if (snap->xcnt > 0)
		memcpy(a->xip, snap->xip, sizeof(TransactionId) * snap->xcnt);
	a->subxcnt = snap->subxcnt;
	a->subxip = palloc(sizeof(TransactionId) * Max(gate_subxids(snap), 1));
	if (gate_subxids(snap) > 0)
		memcpy(a->subxip, snap->subxip, sizeof(TransactionId) * gate_subxids(snap));
	MemoryContextSwitchTo(old);
	a->suboverflowed = snap->suboverflowed;
	a->nkeys = m->nkeys;
	a->lxid = MyProc->lxid;
	a->xmin = snap->xmin;
	a->xmax = snap->xmax;
	a->curcid = snap->curcid;
	a->migrated = migrated;
	a->keys = m->done_keys;
}

/*
 * Does snap see key (no NULLs) in m's table of done keys?  Then a statement
 * on snap sees the group's new row and computes no row of it: the answer
 * of its gate (lf_live_pinned_gate), which it may have found before its
 * plan started (compute.c, lf_compute_shortcut).  The table is locked
 * here; the caller's lock on the live input keeps it from being dropped.
 */
bool
lf_live_done_at(LfMapping *m, Datum *key, Snapshot snap)
{
	LfDoneKeys *d;
	bool		found;

	for (int i = 0; gate_keeps(snap) && i < LF_GATE_SLOTS; i++)
		if (gate_same(&gate_answers[i], m, key, snap))
			return gate_answers[i].migrated;
	d = done_keys_open(m, AccessShareLock);
	found = probe(d, m, key, snap);
	if (gate_keeps(snap))
		gate_remember(m, key, snap, RelationGetDescr(d->rel), found);
	lf_done_keys_close(d);
	return found;
}

/*
 * leapfrog.group_migrated(mapping, VARIADIC key "any"): the gate of a
 * statement that pins one group of a mapping tracked by keys, on the
 * statement's snapshot.  Whoever may read the mapping's new table may ask.
 */
PG_FUNCTION_INFO_V1(leapfrog_group_migrated);
Datum
leapfrog_group_migrated(PG_FUNCTION_ARGS)
{
	int			id = PG_GETARG_INT32(0);
	LfMapping  *m = NULL;
	Datum		key[LF_KEY_MAX];
	ListCell   *lc;

	/*
	 * Its migration, or one completed since the statement began (its
	 * snapshot must still find the keys: the statement's lock on the live
	 * input keeps the table of done keys from being dropped).
	 */
	(void) lf_any_active();
	foreach(lc, lf_active)
		if (m == NULL)
			m = lf_mapping_by_id(lfirst(lc), id);
	foreach(lc, lf_recent_done)
		if (m == NULL)
			m = lf_mapping_by_id(lfirst(lc), id);
	if (m == NULL || !OidIsValid(m->done_keys) || PG_NARGS() != m->nkeys + 1)
		elog(ERROR, "leapfrog: no mapping %d tracked by keys with %d key columns", id,
			 PG_NARGS() - 1);
	if (fcinfo->flinfo->fn_extra != (void *) (uintptr_t) GetUserId())
	{
		if (pg_class_aclcheck(m->target, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
			aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(m->target));
		for (int k = 0; k < m->nkeys; k++)
			if (get_fn_expr_argtype(fcinfo->flinfo, k + 1) != m->keytypes[k])
				elog(ERROR, "leapfrog: key column %d of mapping %d has another type", k + 1, id);
		fcinfo->flinfo->fn_extra = (void *) (uintptr_t) GetUserId();
	}
	for (int k = 0; k < m->nkeys; k++)
		key[k] = PG_GETARG_DATUM(k + 1);
	key[m->nkeys] = UInt32GetDatum(0);
	lf_key_set_row(m->nkeys, key, 0, NULL);
	PG_RETURN_BOOL(lf_live_done_at(m, key, GetActiveSnapshot()));
}

/*
 * The values of a statement's pinned key (lf_live_pinned_values), computed
 * with its parameters, into values and nulls (in *estate's memory: the
 * caller frees it, if one was made).  Constants and parameters, what a key
 * is pinned to almost always, are read without setting up an expression.
 */
void
lf_live_eval_pinned(List *pinned, ParamListInfo params, EState **estate, Datum *values,
					bool *nulls)
{
	ListCell   *lc;

	foreach(lc, pinned)
	{
		int			k = foreach_current_index(lc);

		lf_eval_value(lfirst(lc), params, estate, &values[k], &nulls[k]);
	}
}

/*
 * Whether the group of key is migrated, by a committed transaction that
 * snap may use (done_visible) or by this one: the trigger's look before a
 * claim, which a write of a group already migrated needs no more than.
 */
bool
lf_live_done(LfDoneKeys *d, LfMapping *m, Datum *key, Snapshot snap)
{
	SnapshotData dirty;

	InitDirtySnapshot(dirty);
	return probe(d, m, key, &dirty) && !TransactionIdIsValid(dirty.xmin) &&
		done_visible(d, snap);
}

/*
 * The key of mapping m tracked by keys in tuple tup of its input i, as the
 * table of done keys holds it (values not copied, unless converted:
 * keycasts), into key (LF_KEY_SIZE).
 */
void
lf_live_tuple_key(LfMapping *m, int i, HeapTuple tup, TupleDesc desc, Datum *key)
{
	bool		isnull;
	uint32		nulls = 0;

	for (int k = 0; k < m->nkeys; k++)
	{
		key[k] = heap_getattr(tup, m->keys[i][k], desc, &isnull);
		if (isnull)
		{
			key[k] = (Datum) 0;
			nulls |= 1u << k;
		}
		else if (OidIsValid(m->keycasts[i][k]))
			key[k] = OidFunctionCall1(m->keycasts[i][k], key[k]);
	}
	key[m->nkeys] = UInt32GetDatum(nulls);
	lf_key_set_row(m->nkeys, key, m->row_sides[i], nulls && m->null_rows ? &tup->t_self : NULL);
}

/*
 * Does a join keep the rows of its input i that match nothing (the
 * preserved side of an outer join)?
 */
bool
lf_join_preserves(LfMapping *m, int i)
{
	return (m->jointype == JOIN_LEFT && i == 0) || (m->jointype == JOIN_RIGHT && i == 1);
}

/*
 * Is key (lf_live_tuple_key) of a row of input i of m no unit at all: a
 * NULL in a join key, on a side the join does not preserve (either side
 * of an inner join, the nullable side of an outer join), and no row
 * mapping of the input riding on m's units?  Such a row matches nothing
 * and gives no row, at start() or later: a write of it claims nothing, the
 * worker and complete() pass it by, and it is no row left.  (A NULL key on
 * a preserved side, or of a row a row mapping needs, is a unit of its own,
 * the row: LF_KEY_ROW.)
 */
bool
lf_key_joins_nothing(LfMapping *m, int i, Datum *key)
{
	return m->kind == LF_MAP_JOIN && DatumGetUInt32(key[m->nkeys]) != 0 &&
		!lf_join_preserves(m, i) && !m->carries_rows[i];
}

/*
 * Are keys a and b of m (LF_KEY_SIZE, as its table of done keys holds
 * them) the same, NULLs equal?  (Binary equality: what tells the trigger
 * that two writes are of one group, and a worker that two rows are; keys
 * equal only by the equality operator are claimed twice, the second
 * finding the first.)
 */
bool
lf_keys_equal(LfMapping *m, Datum *a, Datum *b)
{
	if (a[m->nkeys] != b[m->nkeys] || a[m->nkeys + 1] != b[m->nkeys + 1] ||
		a[m->nkeys + 2] != b[m->nkeys + 2])
		return false;
	for (int k = 0; k < m->nkeys; k++)
		if (!LF_KEY_ISNULL(m->nkeys, a, k) &&
			!datumIsEqual(a[k], b[k], m->keybyvals[k], m->keylens[k]))
			return false;
	return true;
}

/*
 * The group keys of the rows of blocks [lo, hi) of live input m that snap
 * sees, copied, each once where its rows are adjacent: a worker's batch.  A
 * key met again further on is listed again; its second claim finds it
 * claimed by this transaction (LF_DONE).  With tids, the tid of each key's
 * (first) row goes to *tids, in the same order: of a mapping keyed by the
 * primary key, the key's only row that snap sees.  The caller holds a lock
 * on the input.
 */
List *
lf_live_range_keys(LfMapping *m, int i, Snapshot snap, BlockNumber lo, BlockNumber hi,
				   List **tids)
{
	Relation	rel = table_open(m->inputs[i], NoLock);
	TupleDesc	desc = RelationGetDescr(rel);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ItemPointerData min,
				max;
	TableScanDesc scan;
	List	   *keys = NIL;
	Datum	   *last = NULL;

	ItemPointerSet(&min, lo, FirstOffsetNumber);
	ItemPointerSet(&max, hi - 1, MaxOffsetNumber);
	scan = table_beginscan_tidrange(rel, snap, &min, &max);
	while (table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot))
	{
		Datum		key[LF_KEY_MAX];

		CHECK_FOR_INTERRUPTS();
		lf_live_tuple_key(m, i, ExecFetchSlotHeapTuple(slot, false, NULL), desc, key);
		if (lf_key_joins_nothing(m, i, key) ||
			(last != NULL && lf_keys_equal(m, key, last)))
			continue;
		last = palloc(LF_KEY_SIZE(m->nkeys));
		for (int k = 0; k < m->nkeys; k++)
			last[k] = LF_KEY_ISNULL(m->nkeys, key, k) ? (Datum) 0 :
				datumCopy(key[k], m->keybyvals[k], m->keylens[k]);
		for (int s = m->nkeys; s < m->nkeys + 3; s++)
			last[s] = key[s];	/* the NULLs, the row */
		keys = lappend(keys, last);
		if (tids)
		{
			ItemPointer tid = palloc(sizeof(ItemPointerData));

			*tid = slot->tts_tid;
			*tids = lappend(*tids, tid);
		}
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	return keys;
}

/* ---------------------------------------------------------------------
 * The trigger
 * ---------------------------------------------------------------------
 */

/*
 * The last key the trigger saw migrated, per table of done keys, in this
 * backend: consecutive writes mostly touch one group (TPC-C's NewOrder
 * inserts an order's ten lines, Delivery updates them), and each would open
 * the table of done keys and look the key up again.  Valid until the
 * transaction ends, or a subtransaction aborts (a claim may go with it): a
 * key committed stays migrated, and one the transaction's snapshot may use
 * stays usable.  The values live in TopTransactionContext.  A table read by
 * more GROUP BY mappings than there are slots shares the last one.
 */
#define LF_MEMO_SLOTS 4

typedef struct KeyMemo
{
	Oid			keys;			/* the table of done keys, or none */
	int			nkeys;
	Datum		key[LF_KEY_MAX];
	bool		byref[INDEX_MAX_KEYS];	/* a value copied, to free */
	bool		typbyval[INDEX_MAX_KEYS];	/* of the key column */
	int16		typlen[INDEX_MAX_KEYS];
} KeyMemo;

static KeyMemo memo[LF_MEMO_SLOTS];

static void
memo_forget(void)
{
	for (int i = 0; i < LF_MEMO_SLOTS; i++)
		memo[i].keys = InvalidOid;
}

/*
 * The memo and the gate's answers go at the end of the transaction, and
 * when a subtransaction aborts (a claim, a key, may go with it).
 */
static void
forget_xact(XactEvent event, void *arg)
{
	memo_forget();
	gate_forget();
}

static void
forget_subxact(SubXactEvent event, SubTransactionId mySubid,
			   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		memo_forget();
		gate_forget();
	}
}

static void
forget_when_xact_ends(void)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(forget_xact, NULL);
		RegisterSubXactCallback(forget_subxact, NULL);
		registered = true;
	}
}

/* m's slot: its own, else a free one, else the last */
static KeyMemo *
memo_slot(LfMapping *m)
{
	KeyMemo    *free_slot = NULL;

	for (int i = 0; i < LF_MEMO_SLOTS; i++)
	{
		if (memo[i].keys == m->done_keys)
			return &memo[i];
		if (free_slot == NULL && !OidIsValid(memo[i].keys))
			free_slot = &memo[i];
	}
	return free_slot ? free_slot : &memo[LF_MEMO_SLOTS - 1];
}

static bool
memo_has(LfMapping *m, Datum *key)
{
	KeyMemo    *mm = memo_slot(m);

	return mm->keys == m->done_keys && lf_keys_equal(m, mm->key, key);
}

static void
memo_remember(LfMapping *m, Datum *key)
{
	KeyMemo    *mm = memo_slot(m);
	MemoryContext old;

	forget_when_xact_ends();
	if (OidIsValid(mm->keys))
		for (int k = 0; k < mm->nkeys; k++)
			if (mm->byref[k])
				pfree(DatumGetPointer(mm->key[k]));
	old = MemoryContextSwitchTo(TopTransactionContext);
	for (int k = 0; k < m->nkeys; k++)
	{
		/* of the type the table of done keys holds (a join's may be converted) */
		mm->byref[k] = !m->keybyvals[k] && !LF_KEY_ISNULL(m->nkeys, key, k);
		mm->key[k] = mm->byref[k] ? datumCopy(key[k], false, m->keylens[k]) : key[k];
		mm->typbyval[k] = m->keybyvals[k];
		mm->typlen[k] = m->keylens[k];
	}
	for (int s = m->nkeys; s < m->nkeys + 3; s++)
		mm->key[s] = key[s];	/* the NULLs, the row */
	MemoryContextSwitchTo(old);
	mm->nkeys = m->nkeys;
	mm->keys = m->done_keys;
}

/*
 * Did the trigger see the group of these key values of mapping m migrated,
 * last in this transaction?  The values are computed by the statement
 * (lf_live_pinned_values): where their bytes are not those of the key read
 * from the row (a numeric's other scale, say), the answer is no, and the
 * relevance plan runs as it would have.
 */
bool
lf_live_memo_migrated(LfMapping *m, Datum *values, bool *nulls)
{
	KeyMemo    *mm = memo_slot(m);

	if (mm->keys != m->done_keys || mm->key[m->nkeys] != 0)
		return false;			/* another table's, or a key with NULLs */
	for (int k = 0; k < m->nkeys; k++)
		if (nulls[k] || !datumIsEqual(values[k], mm->key[k], mm->typbyval[k], mm->typlen[k]))
			return false;
	return true;
}

/*
 * The columns of the input a unit's copy reads: in the mapping query q
 * (its input at range table index rti, at any level below), except the
 * lf_ctid column of q itself.
 */
typedef struct UnitCols
{
	List	   *rtable;			/* of q */
	int			rti;
	int			depth;
	Bitmapset  *cols;
	bool		all;			/* a whole row or a system column */
} UnitCols;

static bool
unit_cols_walker(Node *node, UnitCols *uc)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) node;

		/*
		 * A join's column reads its inputs' through the join's alias list,
		 * which the walk skips (it names every column of both): a column
		 * the parser did not resolve to an input's (a FULL join's merged
		 * one) counts as reading anything.
		 */
		if (v->varlevelsup == uc->depth && v->varno != uc->rti &&
			rt_fetch(v->varno, uc->rtable)->rtekind == RTE_JOIN)
			uc->all = true;
		if (v->varno == uc->rti && v->varlevelsup == uc->depth)
		{
			if (v->varattno <= 0)
				uc->all = true;
			else
				uc->cols = bms_add_member(uc->cols, v->varattno);
		}
		return false;
	}
	if (IsA(node, Query))
	{
		bool		r;

		uc->depth++;
		r = query_tree_walker((Query *) node, unit_cols_walker, uc, QTW_IGNORE_JOINALIASES);
		uc->depth--;
		return r;
	}
	return expression_tree_walker(node, unit_cols_walker, uc);
}

static Bitmapset *
bms_copy_in(MemoryContext cxt, Bitmapset *b)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	Bitmapset  *copy = bms_copy(b);

	MemoryContextSwitchTo(old);
	return copy;
}

static void
add_unit_cols(LfMapping *m, int rti, UnitCols *uc)
{
	Query	   *q = copyObject(m->query);
	TargetEntry *lf_ctid = list_nth(q->targetList, m->natts);

	/* (the group's min(ctid), or the row's ctid: what relevance returns) */
	lf_ctid->expr = (Expr *) makeNullConst(TIDOID, -1, InvalidOid);
	uc->rtable = q->rtable;
	uc->rti = rti;
	uc->depth = 0;
	(void) query_tree_walker(q, unit_cols_walker, uc, QTW_IGNORE_JOINALIASES);
}

/*
 * Does the update of old to new, rows of input i of tracker m, change a
 * column that the copy of m's units reads (its own mapping's, and those of
 * the row mappings of that input it carries: lf_keys_carrier)?  If not, the
 * unit computed from the rows as they are is the unit as it was at
 * start(), and the update need not migrate it (TPC-C's Delivery stamps an
 * order's lines with their delivery date, which the order's total does not
 * read; a join's copy of a stock row does not read its quantity, say).  A
 * generated column counts as changed: a BEFORE trigger sees its old value.
 */
static bool
unit_columns_changed(LfMigration *mig, LfMapping *m, int i, TupleDesc desc, HeapTuple old,
					 HeapTuple new)
{
	int			attno = -1;

	if (!m->unit_cols_known[i])
	{
		UnitCols	uc = {0};
		ListCell   *lc;

		add_unit_cols(m, m->rtis[i], &uc);
		foreach(lc, mig->mappings)
		{
			LfMapping  *r = lfirst(lc);

			if (r != m && r->kind == LF_MAP_ROWS && r->inputs[0] == m->inputs[i] &&
				lf_keys_carrier(mig, r) == m)
				add_unit_cols(r, 1, &uc);
		}
		while ((attno = bms_next_member(uc.cols, attno)) >= 0)
			uc.all |= attno > desc->natts || TupleDescAttr(desc, attno - 1)->attgenerated;
		m->unit_cols[i] = bms_copy_in(GetMemoryChunkContext(m), uc.cols);
		m->unit_cols_all[i] = uc.all;
		m->unit_cols_known[i] = true;
	}
	if (m->unit_cols_all[i])
		return true;
	attno = -1;
	while ((attno = bms_next_member(m->unit_cols[i], attno)) >= 0)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attno - 1);
		bool		n1,
					n2;
		Datum		v1 = heap_getattr(old, attno, desc, &n1);
		Datum		v2 = heap_getattr(new, attno, desc, &n2);

		if (n1 != n2 || (!n1 && !datumIsEqual(v1, v2, att->attbyval, att->attlen)))
			return true;
	}
	return false;
}

/*
 * The units of the old and the new row of a write of input i, in mapping
 * m: migrate them first.
 */
static void
migrate_written_groups(LfMigration *mig, LfMapping *m, int i, TriggerData *td, HeapTuple result)
{
	TupleDesc	desc = RelationGetDescr(td->tg_relation);
	Datum		oldkey[LF_KEY_MAX];
	Datum		newkey[LF_KEY_MAX];
	bool		has_old = !TRIGGER_FIRED_BY_INSERT(td->tg_event);
	bool		has_new = !TRIGGER_FIRED_BY_DELETE(td->tg_event);

	if (has_old)
		lf_live_tuple_key(m, i, td->tg_trigtuple, desc, oldkey);
	if (has_new)
	{
		/*
		 * A BEFORE trigger runs before NOT NULL is checked: a NULL in a NOT
		 * NULL key column fails the write as it would, with no key claimed
		 * (the table of done keys has that column NOT NULL too).
		 */
		for (int k = 0; k < m->nkeys; k++)
			if (TupleDescAttr(desc, m->keys[i][k] - 1)->attnotnull &&
				heap_attisnull(result, m->keys[i][k], desc))
				ereport(ERROR,
						(errcode(ERRCODE_NOT_NULL_VIOLATION),
						 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
								NameStr(TupleDescAttr(desc, m->keys[i][k] - 1)->attname),
								RelationGetRelationName(td->tg_relation))));
		lf_live_tuple_key(m, i, result, desc, newkey);
	}
	/* a NULL key of a side the join does not preserve: no unit */
	if (has_old && lf_key_joins_nothing(m, i, oldkey))
		has_old = false;
	if (has_new && lf_key_joins_nothing(m, i, newkey))
		has_new = false;
	if (has_old && has_new)
	{
		has_new = !lf_keys_equal(m, oldkey, newkey);
		if (!has_new && !unit_columns_changed(mig, m, i, desc, td->tg_trigtuple, result))
			return;
	}
	if (has_old && !memo_has(m, oldkey))
	{
		lf_migrate_live_key(mig, m, i, oldkey);
		memo_remember(m, oldkey);
	}
	if (has_new && !memo_has(m, newkey))
	{
		lf_migrate_live_key(mig, m, i, newkey);
		memo_remember(m, newkey);
	}
}

/*
 * BEFORE INSERT OR UPDATE OR DELETE, FOR EACH ROW, on a live input tracked
 * in place: migrate the group of the old row and of the new row first
 * (lf_migrate_live_key), so that no write reaches a group before the
 * mapping has read it as it was at start().  A snapshot older than start()
 * cannot compute the group as it was at start(): 40001.
 */
Datum
leapfrog_live_input_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	Oid			relid;
	LfMigration *mig;
	HeapTuple	result;
	ListCell   *lc;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event))
		elog(ERROR, "leapfrog.live_input_trigger() is a BEFORE ROW trigger");
	result = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple : td->tg_trigtuple;
	relid = RelationGetRelid(td->tg_relation);
	if (!lf_cache_valid)
		lf_cache_load();
	mig = lf_migration_by_input(relid);
	if (mig == NULL || !list_member_oid(mig->live, relid))
		return PointerGetDatum(result);		/* done: the trigger goes soon */

	if (IsolationUsesXactSnapshot() && !lf_xact_visible(&mig->started, GetTransactionSnapshot()))
		lf_snapshot_predates(mig->name,
							 "the transaction's snapshot predates its start, and the statement "
							 "writes a table the migration reads as it was at start().");

	/* each GROUP BY mapping of the table, in the order of the script */
	foreach(lc, mig->mappings)
	{
		LfMapping  *m = lfirst(lc);

		if (lf_tracks_keys(m, relid))
			migrate_written_groups(mig, m, lf_unit_input_index(m, relid), td, result);
	}
	return PointerGetDatum(result);
}

/* ---------------------------------------------------------------------
 * Rows left
 * ---------------------------------------------------------------------
 */

/*
 * NOT EXISTS (SELECT FROM done_keys d WHERE d.k1 = l.c1 AND ...), l a row
 * of input i of m, with d.k IS NULL for the key columns in mask nulls.
 */
static void
append_not_done(StringInfo sql, LfMapping *m, int i, uint32 nulls)
{
	appendStringInfo(sql, "NOT EXISTS (SELECT FROM %s d WHERE ", lf_relation_name(m->done_keys));
	for (int k = 0; k < m->nkeys; k++)
	{
		HeapTuple	tup;
		Form_pg_operator op;

		appendStringInfo(sql, "%sd.%s ", k ? " AND " : "",
						 quote_identifier(get_attname(m->done_keys, k + 1, false)));
		if (nulls & (1u << k))
		{
			appendStringInfoString(sql, "IS NULL");
			continue;
		}
		tup = SearchSysCache1(OPEROID, ObjectIdGetDatum(m->keyinops[i][k]));
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for operator %u", m->keyinops[i][k]);
		op = (Form_pg_operator) GETSTRUCT(tup);
		appendStringInfo(sql, "OPERATOR(%s.%s) l.%s",
						 quote_identifier(get_namespace_name(op->oprnamespace)),
						 NameStr(op->oprname),
						 quote_identifier(get_attname(m->inputs[i], m->keys[i][k], false)));
		ReleaseSysCache(tup);
	}
	/* a join's row with a NULL key is its own unit (LF_KEY_ROW) */
	if (nulls != 0 && m->null_rows)
		appendStringInfo(sql, " AND d.leapfrog_row_input OPERATOR(pg_catalog.=) %d AND d.leapfrog_row OPERATOR(pg_catalog.=) l.ctid",
						 m->row_sides[i]);
	appendStringInfoChar(sql, ')');
}

/*
 * How many rows of input relid, tracked by keys of m, whose unit m has not
 * migrated snap sees (one anti-join, and one test per pattern of NULLs in
 * the key, as lf_live_unmigrated_query).
 */
uint64
lf_live_rows_left(LfMapping *m, Oid relid, Snapshot snap)
{
	int			i = lf_unit_input_index(m, relid);
	StringInfoData sql;
	SPIPlanPtr	plan;
	LfSavedUser saved;
	uint64		n = 0;
	uint32		nullable = nullable_key_columns(m, i);

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT pg_catalog.count(*) FROM ONLY %s l WHERE ", lf_relation_name(relid));
	append_not_done(&sql, m, i, 0);
	/* a NULL key of a side the join does not preserve is no unit (lf_key_joins_nothing) */
	if (m->kind == LF_MAP_JOIN && !lf_join_preserves(m, i) && !m->carries_rows[i])
	{
		for (int k = 0; k < m->nkeys; k++)
			if (nullable & (1u << k))
				appendStringInfo(&sql, " AND l.%s IS NOT NULL",
								 quote_identifier(get_attname(relid, m->keys[i][k], false)));
		nullable = 0;
	}
	/* every non-empty subset of the nullable columns */
	for (uint32 s = nullable; s != 0; s = (s - 1) & nullable)
	{
		appendStringInfoString(&sql, " AND (NOT (");
		for (int k = 0, first = 1; k < m->nkeys; k++)
		{
			if (!(nullable & (1u << k)))
				continue;
			appendStringInfo(&sql, "%sl.%s IS %sNULL", first ? "" : " AND ",
							 quote_identifier(get_attname(relid, m->keys[i][k], false)),
							 (s & (1u << k)) ? "" : "NOT ");
			first = 0;
		}
		appendStringInfoString(&sql, ") OR ");
		append_not_done(&sql, m, i, s);
		appendStringInfoChar(&sql, ')');
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	saved = lf_become(lf_catalog_owner(), SECURITY_RESTRICTED_OPERATION);
	plan = SPI_prepare(sql.data, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "leapfrog: could not prepare %s", sql.data);
	if (SPI_execute_snapshot(plan, NULL, NULL, snap, InvalidSnapshot, true, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "leapfrog: could not count the rows left of %s", get_rel_name(relid));
	lf_unbecome(saved);
	if (SPI_processed == 1)
	{
		bool		isnull;

		n = (uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
												 1, &isnull));
	}
	SPI_finish();
	return n;
}

/*
 * complete()'s walk of a live input tracked by keys: the tids of the rows
 * from block *from on that snap sees whose group a mapping of mig tracking
 * the input has not migrated (its key is not in the mapping's D for snap),
 * at most max; *from becomes the block of the last row looked at.  Rows
 * behind it stay migrated: a row written later is in a group migrated
 * first (the trigger), so the caller walks the table once, not once per
 * step (an anti-join with LIMIT per step read the migrated rows again
 * every time).  The caller holds locks on the input and the tables of
 * done keys.
 */
uint64
lf_live_rows_from(LfMigration *mig, Oid input, Snapshot snap, BlockNumber *from,
				  ItemPointerData *tids, uint64 max)
{
	Relation	rel = table_open(input, NoLock);
	TupleDesc	desc = RelationGetDescr(rel);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	List	   *ms = NIL;
	List	   *ds = NIL;
	ItemPointerData lo,
				hi;
	TableScanDesc scan;
	ListCell   *lc,
			   *lc2;
	uint64		n = 0;

	foreach(lc, mig->mappings)
	{
		if (lf_tracks_keys(lfirst(lc), input))
		{
			ms = lappend(ms, lfirst(lc));
			ds = lappend(ds, lf_done_keys_open(lfirst(lc)));
		}
	}
	ItemPointerSet(&lo, *from, FirstOffsetNumber);
	ItemPointerSet(&hi, MaxBlockNumber, MaxOffsetNumber);
	scan = table_beginscan_tidrange(rel, snap, &lo, &hi);
	while (n < max && table_scan_getnextslot_tidrange(scan, ForwardScanDirection, slot))
	{
		HeapTuple	tup = ExecFetchSlotHeapTuple(slot, false, NULL);

		CHECK_FOR_INTERRUPTS();
		*from = ItemPointerGetBlockNumber(&slot->tts_tid);
		forboth(lc, ms, lc2, ds)
		{
			Datum		key[LF_KEY_MAX];

			int			i = lf_unit_input_index(lfirst(lc), input);

			lf_live_tuple_key(lfirst(lc), i, tup, desc, key);
			if (!lf_key_joins_nothing(lfirst(lc), i, key) &&
				!probe(lfirst(lc2), lfirst(lc), key, snap))
			{
				tids[n++] = slot->tts_tid;
				break;
			}
		}
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	foreach(lc, ds)
		lf_done_keys_close(lfirst(lc));
	table_close(rel, NoLock);
	return n;
}
