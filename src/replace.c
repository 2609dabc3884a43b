/*-------------------------------------------------------------------------
 * replace.c
 *	  A table that a script alters the slow way is replaced lazily.
 *
 * ALTER TABLE that PostgreSQL carries out by rewriting or scanning a table
 * (ALTER COLUMN TYPE, SET NOT NULL, ADD CONSTRAINT, ...) and CREATE INDEX
 * on an existing table become a same-name replacement (start.c):
 *
 *	1. lf_replace_begin: an empty clone of the table, CREATE TABLE ... (LIKE
 *	   t INCLUDING ALL), under a temporary name in the table's schema; what
 *	   LIKE does not copy and the retirement would take away is read now:
 *	   outgoing foreign keys, index names, identity sequences' positions,
 *	   serial sequences (handed over to the clone), owner, privileges,
 *	   storage parameters, replica identity, the table's comment, the
 *	   columns' statistics targets and options (n_distinct), the index it
 *	   is clustered on, the names of its extended statistics;
 *	2. start.c retires the table (as DROP TABLE does for a mapping input);
 *	3. lf_replace_switch: the clone takes the table's name, its indexes and
 *	   extended statistics the old ones' names, and the rest of what was
 *	   read in 1;
 *	4. the script's statement then runs as written: on the clone, which is
 *	   empty, so it is instant whatever it is; later statements of the
 *	   script on the table run on the clone too (lf_replace_note records the
 *	   USING expressions of type changes);
 *	5. at the end of the script, start.c builds the mapping: each column
 *	   copied by LIKE takes the old column's value, coerced to its final type
 *	   as ALTER COLUMN TYPE coerces (or its USING expression), and each
 *	   column added by the script the value ADD COLUMN gave the existing
 *	   rows: its default as it was then, evaluated once (lf_replace_note).
 *
 * Rows then move lazily and in the background like those of any mapping;
 * a row that violates a new constraint fails the migration with the row
 * named, as for any mapping.  Foreign keys of other tables that reference
 * the table move to the clone, in the catalog, valid.  What a clone cannot carry yet is refused
 * (0A000) before anything changes: views and rules on it, user triggers, row security, publications,
 * inheritance and partitioning, generated columns; and, at the end of the
 * script, NOT VALID constraints on the copy (the rows would be checked
 * against them as they move; a script that VALIDATEs them is fine).
 *
 * Internal SQL runs with search_path = pg_catalog, so the definitions read
 * in step 1 come out schema-qualified and mean the same thing in step 3.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_statistic_ext.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_publication_rel.h"
#include "catalog/pg_rewrite.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_trigger.h"
#include "commands/tablecmds.h"
#include "commands/tablespace.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "parser/parse_type.h"
#include "parser/parse_expr.h"
#include "parser/parse_collate.h"
#include "parser/parse_coerce.h"
#include "optimizer/optimizer.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#define refuse(...) \
	ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), __VA_ARGS__))

/* Internal SQL; its output qualifies every name outside pg_catalog. */
static void
exec_sql(const char *sql, int expected)
{
	int			level = NewGUCNestLevel();
	int			rc;

	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	rc = SPI_execute(sql, false, 0);
	AtEOXact_GUC(true, level);
	if (rc != expected)
		elog(ERROR, "leapfrog: internal statement failed (%d): %s", rc, sql);
}

/* The first column of the rows of a query, as strings (NULLs skipped). */
static List *
sql_strings(const char *sql)
{
	List	   *out = NIL;

	exec_sql(sql, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *v = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

		if (v)
			out = lappend(out, v);
	}
	return out;
}

static bool
exists_sql(const char *fmt, Oid relid)
{
	exec_sql(psprintf(fmt, relid), SPI_OK_SELECT);
	return SPI_processed > 0;
}

/*
 * What a clone cannot carry: refuse before anything changes.  The
 * retirement's DROP check (start.c) still catches any other dependent.
 */
static void
check_replaceable(Relation rel, const char *why)
{
	Oid			relid = RelationGetRelid(rel);
	const char *name = RelationGetRelationName(rel);
	char	   *detail = psprintf("Table \"%s\" would be replaced lazily (%s)", name, why);

	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relispartition ||
		has_subclass(relid) || has_superclass(relid))
		refuse(errmsg("table \"%s\" takes part in inheritance or partitioning", name),
			   errdetail("%s, which is not supported for it.", detail),
			   errhint("Run the statement eagerly, outside leapfrog."));
	if (rel->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
		refuse(errmsg("table \"%s\" is a temporary table", name),
			   errdetail("%s, which is not supported for it.", detail));
	if (exists_sql("SELECT 1 FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid"
				   " WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass"
				   "   AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass"
				   "   AND d.refobjid = %u AND r.ev_class <> d.refobjid", relid))
		refuse(errmsg("table \"%s\" is used by a view or a rule", name),
			   errdetail("%s, and a replacement cannot carry the views that use it yet.", detail));
	if (exists_sql("SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = %u AND NOT tgisinternal", relid))
		refuse(errmsg("table \"%s\" has triggers", name),
			   errdetail("%s, and a trigger would fire on the rows the migration moves.", detail));
	if (rel->rd_rel->relrowsecurity ||
		exists_sql("SELECT 1 FROM pg_catalog.pg_policy WHERE polrelid = %u", relid))
		refuse(errmsg("table \"%s\" has row-level security", name),
			   errdetail("%s, which cannot carry its policies yet.", detail));
	if (exists_sql("SELECT 1 FROM pg_catalog.pg_publication_rel WHERE prrelid = %u", relid))
		refuse(errmsg("table \"%s\" is in a publication", name),
			   errdetail("%s, which cannot carry publication membership yet.", detail));
	if (exists_sql("SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = %u AND attgenerated <> ''"
				   " AND NOT attisdropped", relid))
		refuse(errmsg("table \"%s\" has generated columns", name),
			   errdetail("%s, and generated columns are not supported in a mapping target.", detail));
}

/*
 * The ACL of relation "from", exactly, onto relation "to": a NULL one too
 * (the owner's default rights), where CREATE gave "to" the owner's default
 * privileges (ALTER DEFAULT PRIVILEGES), which an ALTER TABLE never grants.
 */
static void
copy_relacl(Relation classrel, Oid from, Oid to)
{
	HeapTuple	oldtup = SearchSysCache1(RELOID, ObjectIdGetDatum(from));
	HeapTuple	newtup = SearchSysCacheCopy1(RELOID, ObjectIdGetDatum(to));
	Oid			owner = ((Form_pg_class) GETSTRUCT(newtup))->relowner;
	bool		isnull;
	bool		newnull;
	Datum		acl = SysCacheGetAttr(RELOID, oldtup, Anum_pg_class_relacl, &isnull);
	Datum		newacl = SysCacheGetAttr(RELOID, newtup, Anum_pg_class_relacl, &newnull);

	if (!isnull || !newnull)
	{
		Datum		values[Natts_pg_class] = {0};
		bool		nulls[Natts_pg_class] = {0};
		bool		repl[Natts_pg_class] = {0};
		Oid		   *members = NULL;
		Oid		   *had = NULL;
		int			n = isnull ? 0 : aclmembers(DatumGetAclP(acl), &members);
		int			nhad = newnull ? 0 : aclmembers(DatumGetAclP(newacl), &had);
		HeapTuple	t;

		values[Anum_pg_class_relacl - 1] = acl;
		nulls[Anum_pg_class_relacl - 1] = isnull;
		repl[Anum_pg_class_relacl - 1] = true;
		t = heap_modify_tuple(newtup, RelationGetDescr(classrel), values, nulls, repl);
		CatalogTupleUpdate(classrel, &t->t_self, t);
		updateAclDependencies(RelationRelationId, to, 0, owner, nhad, had, n, members);
	}
	ReleaseSysCache(oldtup);
}

/*
 * Grants of the old table, of its columns and of its identity sequences,
 * as they are, onto the clone.
 */
static void
copy_privileges(LfReplacement *r)
{
	Relation	classrel = table_open(RelationRelationId, RowExclusiveLock);
	Relation	attrel = table_open(AttributeRelationId, RowExclusiveLock);
	HeapTuple	ct = SearchSysCache1(RELOID, ObjectIdGetDatum(r->clone));
	Oid			owner = ((Form_pg_class) GETSTRUCT(ct))->relowner;
	bool		isnull;
	ListCell   *lc;

	ReleaseSysCache(ct);

	copy_relacl(classrel, r->old, r->clone);
	foreach(lc, r->identity)
	{
		int			col = intVal(linitial((List *) lfirst(lc)));

		copy_relacl(classrel, getIdentitySequence(r->old, r->source[col - 1], false),
					getIdentitySequence(r->clone, col, false));
	}
	for (int i = 0; i < r->nsource; i++)
	{
		HeapTuple	oa = SearchSysCache2(ATTNUM, ObjectIdGetDatum(r->old),
										 Int16GetDatum(r->source[i]));
		Datum		attacl;

		if (!HeapTupleIsValid(oa))
			continue;
		attacl = SysCacheGetAttr(ATTNUM, oa, Anum_pg_attribute_attacl, &isnull);
		if (!isnull)
		{
			HeapTuple	na = SearchSysCacheCopy2(ATTNUM, ObjectIdGetDatum(r->clone),
												 Int16GetDatum(i + 1));
			Datum		values[Natts_pg_attribute] = {0};
			bool		nulls[Natts_pg_attribute] = {0};
			bool		repl[Natts_pg_attribute] = {0};
			Oid		   *members;
			int			n = aclmembers(DatumGetAclP(attacl), &members);
			HeapTuple	t;

			values[Anum_pg_attribute_attacl - 1] = attacl;
			repl[Anum_pg_attribute_attacl - 1] = true;
			t = heap_modify_tuple(na, RelationGetDescr(attrel), values, nulls, repl);
			CatalogTupleUpdate(attrel, &t->t_self, t);
			updateAclDependencies(RelationRelationId, r->clone, i + 1, owner, 0, NULL, n, members);
		}
		ReleaseSysCache(oa);
	}
	table_close(attrel, RowExclusiveLock);
	table_close(classrel, RowExclusiveLock);
	CommandCounterIncrement();
}

/*
 * LIKE copies a NOT VALID check constraint as valid (the copy is empty): it
 * is marked NOT VALID again, so that the script's VALIDATE CONSTRAINT finds
 * it as eager does, and lf_replace_check_valid refuses one left unvalidated.
 */
static void
set_convalidated(Oid relid, const char *conname, bool valid)
{
	Relation	conrel = table_open(ConstraintRelationId, RowExclusiveLock);
	Oid			conoid = get_relation_constraint_oid(relid, conname, false);
	HeapTuple	tup = SearchSysCacheCopy1(CONSTROID, ObjectIdGetDatum(conoid));

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for constraint %u", conoid);
	((Form_pg_constraint) GETSTRUCT(tup))->convalidated = valid;
	CatalogTupleUpdate(conrel, &tup->t_self, tup);
	heap_freetuple(tup);
	table_close(conrel, RowExclusiveLock);
	CommandCounterIncrement();
}

/*
 * At the end of the script: rows are inserted into the copy as they move,
 * and an insert is checked against every constraint, NOT VALID or not;
 * eagerly, the existing rows are not checked against a NOT VALID one.
 */
void
lf_replace_check_valid(LfReplacement *r)
{
	List	   *names = sql_strings(psprintf(
		"SELECT conname FROM pg_catalog.pg_constraint WHERE conrelid = %u AND NOT convalidated"
		" ORDER BY conname", r->clone));

	if (names != NIL)
		refuse(errmsg("table \"%s\", replaced lazily, has NOT VALID constraint \"%s\"",
					  r->relname, (char *) linitial(names)),
			   errdetail("Its rows move into the new table as inserts, which are checked against every constraint; "
						 "eagerly, the rows already there are not checked against a NOT VALID one."),
			   errhint("VALIDATE the constraint in the script, or add it NOT VALID after start()."));
}

/*
 * Foreign keys of other tables that reference the replaced table move to
 * the clone, valid: the clone receives exactly the old rows, which satisfied
 * them.  The referencing table's checks then read the clone, whose
 * statements migrate the rows they need like any other statement's, and
 * the clone's deletes and key updates fire the keys' actions.  They are
 * moved in the catalog, as PostgreSQL's own DDL keeps them: the constraint
 * (referenced table, index and columns), its triggers (the action triggers
 * live on the referenced table, the check triggers name it) and their
 * dependencies.  Dropping and adding them again would need an
 * AccessExclusiveLock on every referencing table, so a long reader of one
 * would hold the switch back; ShareRowExclusiveLock, what ADD FOREIGN KEY
 * takes, keeps the referencing tables' writers out meanwhile, as eagerly
 * the rewrite of the referenced table does.  The moves happen before the
 * old table is retired: the retirement's DROP check would see the keys.
 */
typedef struct Repoint
{
	LfReplacement *r;
	List	   *old_indexes;	/* the old table's indexes ... */
	List	   *new_indexes;	/* ... and the clone's, in the same order */
} Repoint;

/* The clone's attribute number of the old table's attribute attnum. */
static AttrNumber
clone_attnum(LfReplacement *r, AttrNumber attnum)
{
	for (int i = 0; i < r->nsource; i++)
		if (r->source[i] == attnum)
			return i + 1;
	elog(ERROR, "leapfrog: column %d of table \"%s\" has no copy", attnum, r->relname);
	return InvalidAttrNumber;	/* not reached */
}

static Oid
clone_index(Repoint *rp, Oid index)
{
	ListCell   *lc,
			   *lc2;

	forboth(lc, rp->old_indexes, lc2, rp->new_indexes)
		if (lfirst_oid(lc) == index)
			return lfirst_oid(lc2);
	return InvalidOid;
}

/* The dependencies of one object on the old table or its indexes. */
static void
repoint_depends(Repoint *rp, Oid classid, Oid objid)
{
	Relation	deprel = table_open(DependRelationId, RowExclusiveLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(classid));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(objid));
	scan = systable_beginscan(deprel, DependDependerIndexId, true, NULL, 2, key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tup);
		Oid			index = clone_index(rp, dep->refobjid);
		HeapTuple	copy;

		if (dep->refclassid != RelationRelationId ||
			(dep->refobjid != rp->r->old && !OidIsValid(index)))
			continue;
		copy = heap_copytuple(tup);
		dep = (Form_pg_depend) GETSTRUCT(copy);
		if (dep->refobjid == rp->r->old)
		{
			dep->refobjid = rp->r->clone;
			if (dep->refobjsubid > 0)
				dep->refobjsubid = clone_attnum(rp->r, dep->refobjsubid);
		}
		else
			dep->refobjid = index;
		CatalogTupleUpdate(deprel, &copy->t_self, copy);
		heap_freetuple(copy);
	}
	systable_endscan(scan);
	table_close(deprel, RowExclusiveLock);
}

/* The triggers of foreign key conoid: on the clone, or naming it. */
static void
repoint_triggers(Repoint *rp, Oid conoid)
{
	Relation	trigrel = table_open(TriggerRelationId, RowExclusiveLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;

	ScanKeyInit(&key, Anum_pg_trigger_tgconstraint, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(conoid));
	scan = systable_beginscan(trigrel, TriggerConstraintIndexId, true, NULL, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		HeapTuple	copy = heap_copytuple(tup);
		Form_pg_trigger trig = (Form_pg_trigger) GETSTRUCT(copy);

		if (trig->tgrelid == rp->r->old)
			trig->tgrelid = rp->r->clone;
		if (trig->tgconstrrelid == rp->r->old)
			trig->tgconstrrelid = rp->r->clone;
		if (OidIsValid(clone_index(rp, trig->tgconstrindid)))
			trig->tgconstrindid = clone_index(rp, trig->tgconstrindid);
		CatalogTupleUpdate(trigrel, &copy->t_self, copy);
		repoint_depends(rp, TriggerRelationId, trig->oid);
		heap_freetuple(copy);
	}
	systable_endscan(scan);
	table_close(trigrel, RowExclusiveLock);
}

/* A PostgreSQL int2[] of attribute numbers, each mapped to the clone's. */
static Datum
clone_attnums(LfReplacement *r, Datum d, List **referenced)
{
	ArrayType  *arr = DatumGetArrayTypePCopy(d);
	int16	   *att = (int16 *) ARR_DATA_PTR(arr);

	for (int i = 0; i < ARR_DIMS(arr)[0]; i++)
	{
		att[i] = clone_attnum(r, att[i]);
		*referenced = list_append_unique_int(*referenced, att[i]);
	}
	return PointerGetDatum(arr);
}

static void
repoint_incoming_keys(LfReplacement *r, List *old_indexes)
{
	Repoint		rp = {r, old_indexes, NIL};
	Relation	clone = table_open(r->clone, AccessExclusiveLock);
	Relation	conrel;
	SysScanDesc scan;
	HeapTuple	tup;
	List	   *keys = NIL;
	ListCell   *lc;

	rp.new_indexes = RelationGetIndexList(clone);
	table_close(clone, NoLock);
	if (list_length(rp.new_indexes) != list_length(old_indexes))
		elog(ERROR, "leapfrog: the copy of table \"%s\" has %d indexes, not %d",
			 r->relname, list_length(rp.new_indexes), list_length(old_indexes));

	/* pg_constraint has no index on confrelid (PostgreSQL scans it too) */
	conrel = table_open(ConstraintRelationId, RowExclusiveLock);
	scan = systable_beginscan(conrel, InvalidOid, false, NULL, 0, NULL);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(tup);

		if (con->contype == CONSTRAINT_FOREIGN && con->confrelid == r->old &&
			con->conrelid != r->old)
			keys = lappend(keys, heap_copytuple(tup));
	}
	systable_endscan(scan);
	foreach(lc, keys)
	{
		HeapTuple	copy = lfirst(lc);
		Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(copy);
		Datum		values[Natts_pg_constraint] = {0};
		bool		nulls[Natts_pg_constraint] = {0};
		bool		repl[Natts_pg_constraint] = {0};
		bool		isnull;
		HeapTuple	updated;

		LockRelationOid(con->conrelid, ShareRowExclusiveLock);
		values[Anum_pg_constraint_confrelid - 1] = ObjectIdGetDatum(r->clone);
		repl[Anum_pg_constraint_confrelid - 1] = true;
		values[Anum_pg_constraint_conindid - 1] = ObjectIdGetDatum(clone_index(&rp, con->conindid));
		repl[Anum_pg_constraint_conindid - 1] = true;
		values[Anum_pg_constraint_confkey - 1] =
			clone_attnums(r, heap_getattr(copy, Anum_pg_constraint_confkey,
										  RelationGetDescr(conrel), &isnull), &r->referenced);
		repl[Anum_pg_constraint_confkey - 1] = true;
		updated = heap_modify_tuple(copy, RelationGetDescr(conrel), values, nulls, repl);
		CatalogTupleUpdate(conrel, &updated->t_self, updated);
		repoint_depends(&rp, ConstraintRelationId, con->oid);
		repoint_triggers(&rp, con->oid);
		CacheInvalidateRelcacheByRelid(con->conrelid);
	}
	table_close(conrel, RowExclusiveLock);
	if (keys != NIL)
	{
		/* the action triggers moved to the clone */
		Relation	classrel = table_open(RelationRelationId, RowExclusiveLock);
		HeapTuple	ct = SearchSysCacheCopy1(RELOID, ObjectIdGetDatum(r->clone));

		((Form_pg_class) GETSTRUCT(ct))->relhastriggers = true;
		CatalogTupleUpdate(classrel, &ct->t_self, ct);
		table_close(classrel, RowExclusiveLock);
		CacheInvalidateRelcacheByRelid(r->old);
	}
	CommandCounterIncrement();
}

/* What a referencing table must be for its key to move: refuse the rest. */
static void
check_incoming_keys(Relation rel, const char *detail)
{
	Oid			relid = RelationGetRelid(rel);

	exec_sql(psprintf("SELECT c.conrelid, k.relkind = 'p' OR k.relispartition OR c.conparentid <> 0"
					  "  FROM pg_catalog.pg_constraint c JOIN pg_catalog.pg_class k ON k.oid = c.conrelid"
					  " WHERE c.confrelid = %u AND c.contype = 'f' AND c.conrelid <> %u"
					  " ORDER BY c.oid", relid, relid), SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Oid			child = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));

		if (DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull)))
			refuse(errmsg("table \"%s\" is referenced by a foreign key of partitioned table \"%s\"",
						  RelationGetRelationName(rel), get_rel_name(child)),
				   errdetail("%s, and a replacement cannot carry such a foreign key yet.", detail));
		if (lf_is_target(child) || lf_is_input(child))
			refuse(errmsg("table \"%s\" is referenced by table \"%s\", which is under migration",
						  RelationGetRelationName(rel), get_rel_name(child)),
				   errdetail("%s.", detail),
				   errhint("Wait for the running migration with leapfrog.wait()."));
	}
}

/* The name of extended statistics object stat (and its schema, if asked) */
static char *
statistics_name(Oid stat, Oid *nsp)
{
	HeapTuple	tup = SearchSysCache1(STATEXTOID, ObjectIdGetDatum(stat));
	char	   *name;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for statistics object %u", stat);
	name = pstrdup(NameStr(((Form_pg_statistic_ext) GETSTRUCT(tup))->stxname));
	if (nsp)
		*nsp = ((Form_pg_statistic_ext) GETSTRUCT(tup))->stxnamespace;
	ReleaseSysCache(tup);
	return name;
}

/*
 * Step 1.  The caller (start.c) has checked that the table is not under
 * migration and holds AccessExclusiveLock on it.  `why` names the statement
 * for the refusals.
 */
LfReplacement *
lf_replace_begin(Oid relid, const char *why)
{
	LfReplacement *r = palloc0(sizeof(LfReplacement));
	Relation	rel;
	TupleDesc	desc;
	char	   *qname;
	char	   *tmpname;
	StringInfoData sql;
	List	   *indexes;
	List	   *unvalidated;
	ListCell   *lc;

	/* before the lock, as ALTER TABLE checks: a table not ours stays unlocked */
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, get_rel_name(relid));
	rel = table_open(relid, AccessExclusiveLock);
	desc = RelationGetDescr(rel);
	check_replaceable(rel, why);

	r->old = relid;
	r->nspname = get_namespace_name(RelationGetNamespace(rel));
	r->relname = pstrdup(RelationGetRelationName(rel));
	qname = quote_qualified_identifier(r->nspname, r->relname);
	r->source = palloc0(sizeof(AttrNumber) * desc->natts);
	r->using_expr = palloc0(sizeof(Node *) * desc->natts);
	r->retyped = palloc0(sizeof(bool) * desc->natts);
	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped)
			r->source[r->nsource++] = i + 1;

	/* What LIKE leaves out, read while the old table has its name. */
	r->fkeys = sql_strings(psprintf(
		"SELECT pg_catalog.format('ADD CONSTRAINT %%I %%s', conname, pg_catalog.pg_get_constraintdef(oid))"
		"  FROM pg_catalog.pg_constraint WHERE conrelid = %u AND contype = 'f' ORDER BY oid", relid));
	r->settings = sql_strings(psprintf(
		"SELECT pg_catalog.format('SET (%%s)', pg_catalog.string_agg(pg_catalog.format('%%I = %%L',"
		"       pg_catalog.split_part(o, '=', 1), pg_catalog.substr(o, pg_catalog.strpos(o, '=') + 1)), ', '))"
		"  FROM pg_catalog.pg_class c, pg_catalog.unnest(c.reloptions) o WHERE c.oid = %u"
		" HAVING pg_catalog.count(*) > 0"
		" UNION ALL "
		"SELECT pg_catalog.format('ALTER COLUMN %%I SET STATISTICS %%s', attname, attstattarget)"
		"  FROM pg_catalog.pg_attribute WHERE attrelid = %u AND attnum > 0 AND NOT attisdropped"
		"   AND attstattarget >= 0"
		" UNION ALL "
		"SELECT pg_catalog.format('ALTER COLUMN %%I SET (%%s)', attname, pg_catalog.string_agg(o, ', '))"
		"  FROM pg_catalog.pg_attribute, pg_catalog.unnest(attoptions) o"
		" WHERE attrelid = %u AND attnum > 0 AND NOT attisdropped AND o LIKE 'n\\_distinct%%'"
		" GROUP BY attname"
		" UNION ALL "
		"SELECT pg_catalog.format('CLUSTER ON %%I', c.relname)"
		"  FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid"
		" WHERE i.indrelid = %u AND i.indisclustered", relid, relid, relid, relid));
	r->comment = sql_strings(psprintf("SELECT pg_catalog.obj_description(%u, 'pg_class')", relid));
	check_incoming_keys(rel, psprintf("Table \"%s\" would be replaced lazily (%s)",
									  RelationGetRelationName(rel), why));
	unvalidated = sql_strings(psprintf(
		"SELECT conname FROM pg_catalog.pg_constraint WHERE conrelid = %u AND contype = 'c'"
		"   AND NOT convalidated", relid));
	r->owner = rel->rd_rel->relowner;
	r->replident = rel->rd_rel->relreplident;
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		r->index_names = lappend(r->index_names, get_rel_name(lfirst_oid(lc)));
		if (rel->rd_rel->relreplident == REPLICA_IDENTITY_INDEX &&
			lfirst_oid(lc) == RelationGetReplicaIndex(rel))
			r->replident_index = get_rel_name(lfirst_oid(lc));
	}
	foreach(lc, RelationGetStatExtList(rel))
	{
		Oid			nsp;
		char	   *name = statistics_name(lfirst_oid(lc), &nsp);

		r->stat_names = lappend(r->stat_names,
								list_make2(makeString(get_namespace_name(nsp)), makeString(name)));
	}
	for (int i = 0; i < r->nsource; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, r->source[i] - 1);

		if (att->attidentity)
		{
			Oid			seq = getIdentitySequence(relid, att->attnum, false);
			char	   *q = lf_relation_name(seq);

			HeapTuple	st = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seq));

			if (!HeapTupleIsValid(st))
				elog(ERROR, "cache lookup failed for sequence %u", seq);
			exec_sql(psprintf("SELECT last_value, is_called FROM %s", q), SPI_OK_SELECT);
			r->identity = lappend(r->identity,
								  list_make5(makeInteger(i + 1), makeString(get_rel_name(seq)),
											 makeString(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
											 makeString(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2)),
											 makeString(format_type_be_qualified(((Form_pg_sequence) GETSTRUCT(st))->seqtypid))));
			ReleaseSysCache(st);
		}
	}

	/* The clone, under a temporary name. */
	tmpname = psprintf("lf_new_%u", relid);
	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE %sTABLE %s (LIKE %s INCLUDING ALL)",
					 rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED ? "UNLOGGED " : "",
					 quote_qualified_identifier(r->nspname, tmpname), qname);
	if (OidIsValid(rel->rd_rel->reltablespace))
		appendStringInfo(&sql, " TABLESPACE %s",
						 quote_identifier(get_tablespace_name(rel->rd_rel->reltablespace)));
	/* ALTER TABLE refuses a table this backend has open: keep the lock only */
	table_close(rel, NoLock);
	exec_sql(sql.data, SPI_OK_UTILITY);
	CommandCounterIncrement();
	r->clone = get_relname_relid(tmpname, get_rel_namespace(relid));

	/*
	 * LIKE gives an identity column a bigint sequence whatever its type
	 * (PostgreSQL 15), with the old one's bounds: the old one's type, as
	 * an ALTER TABLE keeps it (and changes it with the column's own type,
	 * which the script's statement then does on the clone alike).
	 */
	foreach(lc, r->identity)
	{
		List	   *id = lfirst(lc);

		exec_sql(psprintf("ALTER SEQUENCE %s AS %s",
						  lf_relation_name(getIdentitySequence(r->clone, intVal(linitial(id)), false)),
						  strVal(list_nth(id, 4))), SPI_OK_UTILITY);
	}
	CommandCounterIncrement();
	foreach(lc, unvalidated)
		set_convalidated(r->clone, lfirst(lc), false);

	/* serial columns: their sequences now belong to the clone's columns */
	foreach(lc, getOwnedSequences(relid))
	{
		Oid			seq = lfirst_oid(lc);
		int32		col;
		Oid			owner_rel;

		if (!sequenceIsOwned(seq, DEPENDENCY_AUTO, &owner_rel, &col))
			continue;			/* an identity sequence: the clone has its own */
		exec_sql(psprintf("ALTER SEQUENCE %s OWNED BY %s.%s", lf_relation_name(seq),
						  quote_qualified_identifier(r->nspname, tmpname),
						  quote_identifier(get_attname(relid, col, false))),
				 SPI_OK_UTILITY);
		/* the old table's default would tie the sequence to it */
		exec_sql(psprintf("ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT", qname,
						  quote_identifier(get_attname(relid, col, false))),
				 SPI_OK_UTILITY);
	}
	CommandCounterIncrement();
	repoint_incoming_keys(r, indexes);
	return r;
}

/* Step 3: the clone takes the old table's place. */
void
lf_replace_switch(LfReplacement *r)
{
	Relation	rel;
	List	   *indexes;
	List	   *stats;
	ListCell   *lc,
			   *lc2;
	char	   *qname = quote_qualified_identifier(r->nspname, r->relname);

	RenameRelationInternal(r->clone, r->relname, false, false);
	CommandCounterIncrement();

	/* LIKE creates the indexes in the old table's order (its index list) */
	rel = table_open(r->clone, AccessExclusiveLock);
	indexes = RelationGetIndexList(rel);
	table_close(rel, NoLock);
	if (list_length(indexes) != list_length(r->index_names))
		elog(ERROR, "leapfrog: the copy of table \"%s\" has %d indexes, not %d",
			 r->relname, list_length(indexes), list_length(r->index_names));
	forboth(lc, indexes, lc2, r->index_names)
		RenameRelationInternal(lfirst_oid(lc), (char *) lfirst(lc2), false, true);

	/*
	 * LIKE names the copy's extended statistics after the copy's temporary
	 * name, in the table's schema; they take the old ones' schemas, then
	 * names, as the indexes (retire() drops the old table's, as eager DROP
	 * would, so the names are free).
	 */
	rel = table_open(r->clone, AccessExclusiveLock);
	stats = RelationGetStatExtList(rel);
	table_close(rel, NoLock);
	if (list_length(stats) == list_length(r->stat_names))
		forboth(lc, stats, lc2, r->stat_names)
		{
			Oid			nsp;
			char	   *name = statistics_name(lfirst_oid(lc), &nsp);
			char	   *oldnsp = strVal(linitial((List *) lfirst(lc2)));
			char	   *oldname = strVal(lsecond((List *) lfirst(lc2)));

			if (strcmp(get_namespace_name(nsp), oldnsp) != 0)
				exec_sql(psprintf("ALTER STATISTICS %s SET SCHEMA %s",
								  quote_qualified_identifier(get_namespace_name(nsp), name),
								  quote_identifier(oldnsp)), SPI_OK_UTILITY);
			if (strcmp(name, oldname) != 0)
				exec_sql(psprintf("ALTER STATISTICS %s RENAME TO %s",
								  quote_qualified_identifier(oldnsp, name),
								  quote_identifier(oldname)), SPI_OK_UTILITY);
		}
	foreach(lc, r->identity)
	{
		List	   *id = lfirst(lc);
		Oid			seq = getIdentitySequence(r->clone, intVal(linitial(id)), false);

		RenameRelationInternal(seq, strVal(lsecond(id)), false, false);
		CommandCounterIncrement();
		exec_sql(psprintf("SELECT pg_catalog.setval(%u, %s, '%s'::boolean)", seq,
						  strVal(lthird(id)), strVal(lfourth(id))), SPI_OK_SELECT);
	}
	CommandCounterIncrement();

	if (r->owner != GetUserId())
		exec_sql(psprintf("ALTER TABLE %s OWNER TO %s", qname,
						  quote_identifier(GetUserNameFromId(r->owner, false))), SPI_OK_UTILITY);
	CommandCounterIncrement();
	copy_privileges(r);
	foreach(lc, r->settings)
		exec_sql(psprintf("ALTER TABLE %s %s", qname, (char *) lfirst(lc)), SPI_OK_UTILITY);
	if (r->replident == REPLICA_IDENTITY_FULL)
		exec_sql(psprintf("ALTER TABLE %s REPLICA IDENTITY FULL", qname), SPI_OK_UTILITY);
	else if (r->replident == REPLICA_IDENTITY_NOTHING)
		exec_sql(psprintf("ALTER TABLE %s REPLICA IDENTITY NOTHING", qname), SPI_OK_UTILITY);
	else if (r->replident == REPLICA_IDENTITY_INDEX && r->replident_index)
		exec_sql(psprintf("ALTER TABLE %s REPLICA IDENTITY USING INDEX %s", qname,
						  quote_identifier(r->replident_index)), SPI_OK_UTILITY);
	foreach(lc, r->comment)
		exec_sql(psprintf("COMMENT ON TABLE %s IS %s", qname, quote_literal_cstr(lfirst(lc))),
				 SPI_OK_UTILITY);
	/* on an empty table, a foreign key is valid at once */
	foreach(lc, r->fkeys)
		exec_sql(psprintf("ALTER TABLE %s %s", qname, (char *) lfirst(lc)), SPI_OK_UTILITY);
	CommandCounterIncrement();
}

/*
 * The value ADD COLUMN gives the existing rows: its default, evaluated
 * once, now, as ALTER TABLE evaluates it (a later SET or DROP DEFAULT does
 * not change them).  A volatile one would differ row by row: refused.
 */
static Node *
added_value(LfReplacement *r, ColumnDef *col)
{
	Node	   *raw = col->raw_default;
	bool		volatile_default = col->identity || col->generated || lf_is_serial_type(col->typeName);
	ParseState *pstate = make_parsestate(NULL);
	Oid			typid;
	int32		typmod;
	Oid			collid;
	Node	   *expr;
	ListCell   *lc;

	foreach(lc, col->constraints)
	{
		Constraint *con = lfirst(lc);

		if (con->contype == CONSTR_DEFAULT)
			raw = con->raw_expr;
		else if (con->contype == CONSTR_IDENTITY || con->contype == CONSTR_GENERATED)
			volatile_default = true;
	}
	if (!volatile_default)
	{
		typenameTypeIdAndMod(NULL, col->typeName, &typid, &typmod);
		collid = GetColumnDefCollation(NULL, col, typid);
		if (raw == NULL)
			return (Node *) makeNullConst(typid, typmod, collid);
		expr = transformExpr(pstate, copyObject(raw), EXPR_KIND_COLUMN_DEFAULT);
		expr = coerce_to_target_type(pstate, expr, exprType(expr), typid, typmod,
									 COERCION_ASSIGNMENT, COERCE_IMPLICIT_CAST, -1);
		if (expr == NULL)
			return NULL;		/* ALTER TABLE reports the mismatch */
		assign_expr_collations(pstate, expr);
		if (!contain_volatile_functions(expr))
			return (Node *) evaluate_expr((Expr *) expression_planner((Expr *) expr),
										  typid, typmod, collid);
	}
	refuse(errmsg("column \"%s\" added to table \"%s\" takes a different value in every row",
				  col->colname, r->relname),
		   errdetail("Its default is volatile (a sequence, an identity, random(), clock_timestamp(), ...). "
					 "Leapfrog replaces the table lazily, and rows are migrated later than start()."),
		   errhint("Add the column with a constant or STABLE default, or without one and fill it after start()."));
	return NULL;				/* not reached */
}

/*
 * Whether a raw USING expression reads a column retyped by an earlier
 * statement (retyped_before): eagerly it sees that column's new value, the
 * mapping its old one.  A name that is no column (a whole-row reference)
 * reads every column.
 */
typedef struct UsingReads
{
	LfReplacement *r;
	bool	   *retyped_before;
} UsingReads;

static bool
using_reads_walker(Node *node, UsingReads *ctx)
{
	if (node == NULL)
		return false;
	if (IsA(node, ColumnRef))
	{
		ColumnRef  *cref = (ColumnRef *) node;
		Node	   *last = llast(cref->fields);
		AttrNumber	attnum = InvalidAttrNumber;

		if (IsA(last, String))
			attnum = get_attnum(ctx->r->clone, strVal(last));
		if (attnum == InvalidAttrNumber)
		{
			for (int i = 0; i < ctx->r->nsource; i++)
				if (ctx->retyped_before[i])
					return true;
			return false;
		}
		return attnum <= ctx->r->nsource && ctx->retyped_before[attnum - 1];
	}
	return raw_expression_tree_walker(node, using_reads_walker, (void *) ctx);
}

static bool
using_reads_retyped(LfReplacement *r, Node *raw, bool *retyped_before)
{
	UsingReads	ctx = {r, retyped_before};

	return using_reads_walker(raw, &ctx);
}

/*
 * Step 4: an ALTER TABLE about to run on the clone.  A type change records
 * its USING expression for the mapping, which reads the old table: its
 * column names must still be the clone's (no column added, dropped or
 * renamed before it), and a column takes one type change per script (eager
 * would apply both casts in turn).
 */
/* Whether stmt adds a column named name. */
static bool
added_here(AlterTableStmt *stmt, const char *name)
{
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst(lc);

		if (cmd->subtype == AT_AddColumn &&
			strcmp(((ColumnDef *) cmd->def)->colname, name) == 0)
			return true;
	}
	return false;
}

void
lf_replace_note(LfReplacement *r, AlterTableStmt *stmt)
{
	bool	   *retyped_before = palloc(sizeof(bool) * Max(r->nsource, 1));
	bool		columns_changed_before = r->columns_changed;
	ListCell   *lc;

	memcpy(retyped_before, r->retyped, sizeof(bool) * r->nsource);
	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst(lc);
		AttrNumber	attnum;

		if (cmd->subtype == AT_AddColumn)
		{
			ColumnDef  *col = (ColumnDef *) cmd->def;
			Node	   *value = added_value(r, col);

			if (value)
				r->pending_added = lappend(r->pending_added,
										   list_make2(makeString(col->colname), value));
		}
		if (cmd->subtype == AT_AddColumn || cmd->subtype == AT_DropColumn)
			r->columns_changed = true;
		if (cmd->subtype != AT_AlterColumnType)
			continue;
		attnum = get_attnum(r->clone, cmd->name);
		if (((ColumnDef *) cmd->def)->raw_default &&
			(attnum > r->nsource || added_here(stmt, cmd->name)))
			refuse(errmsg("ALTER COLUMN ... TYPE ... USING on column \"%s\" that the script added to table \"%s\"",
						  cmd->name, r->relname),
				   errdetail("The mapping gives the existing rows the value ADD COLUMN gave them, converted to the column's type; eagerly the USING expression computes it."),
				   errhint("Add the column with its final type and default."));
		if (attnum == InvalidAttrNumber || attnum > r->nsource)
			continue;			/* PostgreSQL reports it, or a column the script added */
		if (r->retyped[attnum - 1])
			refuse(errmsg("column \"%s\" of table \"%s\" changes type twice in the script",
						  cmd->name, r->relname));
		if (list_member_int(r->referenced, attnum))
			refuse(errmsg("column \"%s\" of table \"%s\", replaced lazily, is referenced by a foreign key of another table",
						  cmd->name, r->relname),
				   errdetail("PostgreSQL would check every referencing row against the new type."),
				   errhint("Drop the foreign key in the script and add it back NOT VALID after the type change, then VALIDATE it after start()."));
		r->retyped[attnum - 1] = true;
		if (((ColumnDef *) cmd->def)->raw_default)
		{
			if (columns_changed_before)
				refuse(errmsg("ALTER COLUMN ... TYPE ... USING on table \"%s\" after columns were added, dropped or renamed in the script",
							  r->relname),
					   errhint("Put the type change first."));
			if (using_reads_retyped(r, ((ColumnDef *) cmd->def)->raw_default, retyped_before))
				refuse(errmsg("ALTER COLUMN ... TYPE ... USING on table \"%s\" reads a column whose type an earlier statement of the script changed",
							  r->relname),
					   errdetail("The mapping computes the USING expression from the old row, where that column still has its old type and value."),
					   errhint("Make the type changes in one ALTER TABLE statement: its USING expressions all read the old row."));
			r->using_expr[attnum - 1] = copyObject(((ColumnDef *) cmd->def)->raw_default);
		}
	}
}

/* Step 4, after the statement ran: the columns it added, by attribute number. */
void
lf_replace_noted(LfReplacement *r)
{
	ListCell   *lc;

	foreach(lc, r->pending_added)
	{
		List	   *p = lfirst(lc);
		AttrNumber	attnum = get_attnum(r->clone, strVal(linitial(p)));

		if (attnum != InvalidAttrNumber)
			r->added = lappend(r->added, list_make2(makeInteger(attnum), lsecond(p)));
	}
	r->pending_added = NIL;
}

/* The value the rows take in a column the script added (step 5). */
Node *
lf_replace_added_value(LfReplacement *r, AttrNumber attnum)
{
	ListCell   *lc;

	foreach(lc, r->added)
		if (intVal(linitial((List *) lfirst(lc))) == attnum)
			return copyObject(lsecond((List *) lfirst(lc)));
	return NULL;
}
