/*-------------------------------------------------------------------------
 * utility.c
 *	  ProcessUtility hook: keep DDL and bulk paths off tables under migration.
 *
 * Some commands bypass the executor or would break the mapping: COPY FROM
 * writes the table directly (creating key conflicts with unmigrated rows),
 * TRUNCATE would let the unmigrated rows come back,
 * ALTER TABLE changes the columns the stored mappings rely on, DROP would
 * lose the data, CLUSTER and VACUUM FULL renumber the retired rows (their
 * ctids are the to-do list; the forms without a table list too); a trigger
 * or rule would act on rows migrated later, which eager would never have
 * shown it.  They are refused, with every other DDL
 * on the new tables and on the retired ones (RENAME, CREATE INDEX, CREATE
 * POLICY), until the migration is done.
 *
 * COPY new_table TO (pg_dump's way to read a table) would read the table
 * directly and miss the unmigrated rows: it becomes COPY (SELECT columns
 * FROM ONLY new_table) TO, whose query computes them (compute.c).
 *
 * The object access hook catches what reaches those tables through other
 * objects: a drop by CASCADE (of a table, or of an input's column), and
 * the drop or replacement of a function or operator a mapping calls.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/xact.h"
#include "catalog/heap.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "parser/parse_type.h"
#include "utils/builtins.h"
#include "catalog/objectaddress.h"
#include "nodes/nodeFuncs.h"
#include "utils/syscache.h"
#include "access/table.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/rel.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "tcop/utility.h"
#include "utils/lsyscache.h"

static ProcessUtility_hook_type prev_ProcessUtility = NULL;
static object_access_hook_type prev_object_access = NULL;

/* Set while the extension drops a table of done keys itself (complete.c). */
bool		lf_dropping_own = false;

/*
 * Set by start() while it runs a script: a table an earlier migration is
 * still filling may then be retired, replaced or renamed (chained
 * migrations; start.c says which statements may touch it).
 */
bool		lf_chaining = false;

/*
 * Refuse to `what` table relid (named relname) while a migration reads or
 * fills it; start.c asks too, before it replaces a table.
 */
void
lf_refuse_if_migrating(Oid relid, const char *relname, const char *what)
{
	LfMigration *mig = lf_migration_by_target(relid);

	if (mig && lf_chaining)
		return;
	if (mig == NULL)
		mig = lf_migration_by_input(relid);
	if (mig)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot %s table \"%s\" while leapfrog migration \"%s\" is running",
						what, relname, mig->name),
				 errdetail("Its rows are still being migrated."),
				 errhint("Wait with SELECT leapfrog.wait('%s'), or finish now with SELECT leapfrog.complete('%s').",
						 mig->name, mig->name)));
}

/*
 * Refuse to `what` table rv while a migration reads or fills it.  With
 * live_ok, not a live input tracked in place (live.c): what leaves its
 * tracking whole, COPY (its FROM fires the trigger), CREATE INDEX, CLUSTER
 * and VACUUM FULL (groups are tracked by key, not by ctid).
 */
static void
check_one_table(Oid relid, const char *relname, const char *what, bool live_ok)
{
	LfMigration *mig;

	if (live_ok && (mig = lf_migration_by_input(relid)) != NULL &&
		list_member_oid(mig->live, relid))
		return;
	lf_refuse_if_migrating(relid, relname, what);
}

/*
 * Refuse to `what` table rv while a migration reads or fills it.  With
 * live_ok, not a live input tracked in place (live.c): what leaves its
 * tracking whole, COPY (its FROM fires the trigger), CREATE INDEX, CLUSTER
 * and VACUUM FULL (groups are tracked by key, not by ctid).
 */
static void
check_table(RangeVar *rv, const char *what, bool live_ok)
{
	Oid			relid;

	if (rv == NULL)
		return;
	relid = RangeVarGetRelid(rv, NoLock, true);
	if (OidIsValid(relid))
		check_one_table(relid, rv->relname, what, live_ok);
}

/*
 * The same for a command that also reaches the tables inheriting from rv
 * unless ONLY is given (TRUNCATE, ALTER TABLE ... ALTER COLUMN TYPE, ADD
 * CONSTRAINT, RENAME COLUMN): a new table declared INHERITS (p) was emptied
 * by TRUNCATE p, and its rows not migrated came back; ALTER TABLE p ALTER
 * COLUMN TYPE changed the column under the mapping.  (COPY, CREATE INDEX,
 * CLUSTER and VACUUM of a parent stay its own: pg_dump copies a parent.)
 */
static void
check_table_and_heirs(RangeVar *rv, const char *what)
{
	Oid			relid;
	ListCell   *lc;

	if (rv == NULL)
		return;
	relid = RangeVarGetRelid(rv, NoLock, true);
	if (!OidIsValid(relid))
		return;
	check_one_table(relid, rv->relname, what, false);
	if (!rv->inh || !has_subclass(relid))
		return;
	foreach(lc, find_all_inheritors(relid, NoLock, NULL))
		if (lfirst_oid(lc) != relid)
			check_one_table(lfirst_oid(lc), get_rel_name(lfirst_oid(lc)),
							psprintf("%s, through its parent \"%s\",", what, rv->relname),
							false);
}

/* Does an ALTER TABLE subcommand of this kind reach the inheriting tables? */
static bool
recurses_to_heirs(AlterTableType subtype)
{
	switch (subtype)
	{
		case AT_ChangeOwner:
		case AT_SetRelOptions:
		case AT_ResetRelOptions:
		case AT_ReplaceRelOptions:
		case AT_SetTableSpace:
		case AT_ClusterOn:
		case AT_DropCluster:
		case AT_SetLogged:
		case AT_SetUnLogged:
		case AT_EnableTrig:
		case AT_EnableAlwaysTrig:
		case AT_EnableReplicaTrig:
		case AT_DisableTrig:
		case AT_EnableTrigAll:
		case AT_DisableTrigAll:
		case AT_EnableTrigUser:
		case AT_DisableTrigUser:
		case AT_EnableRule:
		case AT_EnableAlwaysRule:
		case AT_EnableReplicaRule:
		case AT_DisableRule:
		case AT_ReplicaIdentity:
		case AT_EnableRowSecurity:
		case AT_DisableRowSecurity:
		case AT_ForceRowSecurity:
		case AT_NoForceRowSecurity:
		case AT_GenericOptions:
		case AT_AddInherit:
		case AT_DropInherit:
		case AT_AddOf:
		case AT_DropOf:
			return false;
		default:
			return true;		/* (or unknown: as if it did) */
	}
}

/* The inputs and new tables of every running migration */
static List *
migrating_tables(void)
{
	List	   *tables = NIL;
	ListCell   *lm;

	foreach(lm, lf_active)
	{
		LfMigration *mig = lfirst(lm);

		tables = list_concat(list_concat(tables, mig->inputs), mig->targets);
	}
	return tables;
}

/* Is type typid domain domid, or a domain over it? */
static bool
is_domain_over(Oid typid, Oid domid)
{
	while (OidIsValid(typid))
	{
		HeapTuple	tup;
		Form_pg_type t;
		Oid			base = InvalidOid;

		if (typid == domid)
			return true;
		tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
		if (!HeapTupleIsValid(tup))
			return false;
		t = (Form_pg_type) GETSTRUCT(tup);
		if (t->typtype == TYPTYPE_DOMAIN)
			base = t->typbasetype;
		ReleaseSysCache(tup);
		typid = base;
	}
	return false;
}

/*
 * ALTER DOMAIN d ADD CONSTRAINT, SET NOT NULL or VALIDATE CONSTRAINT checks
 * every row of every column of type d: of a new table, it would check the
 * rows migrated so far only (and the rows migrated later would fail, stuck
 * in the migration); of a retired input, rows eagerly gone.  Refused while
 * a migration reads or fills such a column.
 */
static void
check_domain(AlterDomainStmt *stmt)
{
	Oid			domid;
	ListCell   *lc;

	if (stmt->subtype != 'C' && stmt->subtype != 'O' && stmt->subtype != 'V')
		return;
	domid = typenameTypeId(NULL, makeTypeNameFromNameList(stmt->typeName));
	foreach(lc, migrating_tables())
	{
		Relation	rel = table_open(lfirst_oid(lc), AccessShareLock);
		TupleDesc	desc = RelationGetDescr(rel);
		bool		uses = false;

		for (int i = 0; i < desc->natts && !uses; i++)
			uses = !TupleDescAttr(desc, i)->attisdropped &&
				is_domain_over(TupleDescAttr(desc, i)->atttypid, domid);
		table_close(rel, AccessShareLock);
		if (uses)
			lf_refuse_if_migrating(lfirst_oid(lc), get_rel_name(lfirst_oid(lc)),
								   psprintf("alter, through its domain \"%s\",",
										   format_type_be(domid)));
	}
}

/*
 * ALTER TYPE t ... CASCADE reaches the tables of type t (CREATE TABLE ...
 * OF t): refused while a migration reads or fills one (the stored mapping
 * would put the old type's values into the changed column).
 */
static void
check_typed_tables(RangeVar *rv)
{
	Oid			relid = RangeVarGetRelid(rv, NoLock, true);
	Oid			typid = OidIsValid(relid) ? get_rel_type_id(relid) : InvalidOid;
	ListCell   *lc;

	if (!OidIsValid(typid))
		return;
	foreach(lc, migrating_tables())
	{
		HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(lfirst_oid(lc)));

		if (!HeapTupleIsValid(tup))
			continue;
		if (((Form_pg_class) GETSTRUCT(tup))->reloftype == typid)
			lf_refuse_if_migrating(lfirst_oid(lc), NameStr(((Form_pg_class) GETSTRUCT(tup))->relname),
								   psprintf("alter, through its type \"%s\",", rv->relname));
		ReleaseSysCache(tup);
	}
}

/*
 * The forms without a table list (VACUUM FULL, CLUSTER) would rewrite the
 * retired tables, whose ctids are the migration's to-do list, and the new
 * tables: refused while a migration runs in this database.
 */
static void
refuse_every_table(const char *what)
{
	LfMigration *mig;

	if (!lf_any_active())
		return;
	mig = linitial(lf_active);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_IN_USE),
			 errmsg("cannot run %s on every table while leapfrog migration \"%s\" is running",
					what, mig->name),
			 errdetail("It would rewrite the tables the migration reads and fills."),
			 errhint("Name the tables to process, or wait with SELECT leapfrog.wait('%s').",
					 mig->name)));
}

/*
 * TRUNCATE ... CASCADE also empties the tables whose foreign keys reference
 * the ones named, and theirs in turn (as ExecuteTruncate finds them): a new
 * table among them is refused as if named.
 */
static void
check_truncate_cascade(TruncateStmt *stmt)
{
	List	   *relids = NIL;
	List	   *found;
	ListCell   *lc;

	if (!lf_any_active())
		return;
	foreach(lc, stmt->relations)
	{
		Oid			relid = RangeVarGetRelid(lfirst(lc), NoLock, true);

		if (OidIsValid(relid))
			relids = lappend_oid(relids, relid);
	}
	while (relids != NIL && (found = heap_truncate_find_FKs(relids)) != NIL)
	{
		List	   *added = NIL;

		foreach(lc, found)
			if (!list_member_oid(relids, lfirst_oid(lc)))
			{
				lf_refuse_if_migrating(lfirst_oid(lc), get_rel_name(lfirst_oid(lc)),
									   "truncate (by CASCADE)");
				added = lappend_oid(added, lfirst_oid(lc));
			}
		if (added == NIL)
			break;
		relids = list_concat(relids, added);
	}
}

static void
check_utility(Node *stmt)
{
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_AlterTableStmt:
			if (((AlterTableStmt *) stmt)->objtype == OBJECT_TYPE)
			{
				check_typed_tables(((AlterTableStmt *) stmt)->relation);
				break;
			}
			{
				bool		recurses = false;

				foreach(lc, ((AlterTableStmt *) stmt)->cmds)
					recurses |= recurses_to_heirs(((AlterTableCmd *) lfirst(lc))->subtype);
				if (recurses)
					check_table_and_heirs(((AlterTableStmt *) stmt)->relation, "alter");
				else
					check_table(((AlterTableStmt *) stmt)->relation, "alter", false);
			}
			/* a new table made a partition: its parent would route rows in */
			foreach(lc, ((AlterTableStmt *) stmt)->cmds)
			{
				AlterTableCmd *cmd = lfirst(lc);

				if (cmd->subtype == AT_AttachPartition || cmd->subtype == AT_DetachPartition)
					check_table(((PartitionCmd *) cmd->def)->name, "attach or detach", false);
			}
			break;
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType == OBJECT_COLUMN ||
				((RenameStmt *) stmt)->renameType == OBJECT_TABCONSTRAINT)
				check_table_and_heirs(((RenameStmt *) stmt)->relation, "rename");
			else
				check_table(((RenameStmt *) stmt)->relation, "rename", false);
			break;
		case T_IndexStmt:
			check_table(((IndexStmt *) stmt)->relation, "index", true);
			break;
		case T_CreateTrigStmt:
			/* a trigger would fire on rows migrated later: eager never would */
			check_table(((CreateTrigStmt *) stmt)->relation, "create a trigger on", false);
			break;
		case T_RuleStmt:
			check_table(((RuleStmt *) stmt)->relation, "create a rule on", false);
			break;
		case T_CreatePolicyStmt:
			check_table(((CreatePolicyStmt *) stmt)->table, "create a policy on", false);
			break;
		case T_TruncateStmt:
			foreach(lc, ((TruncateStmt *) stmt)->relations)
				check_table_and_heirs(lfirst(lc), "truncate");
			if (((TruncateStmt *) stmt)->behavior == DROP_CASCADE)
				check_truncate_cascade((TruncateStmt *) stmt);
			break;
		case T_CopyStmt:
			check_table(((CopyStmt *) stmt)->relation, "COPY", true);
			break;
		case T_ClusterStmt:
			if (((ClusterStmt *) stmt)->relation == NULL)
				refuse_every_table("CLUSTER");
			check_table(((ClusterStmt *) stmt)->relation, "cluster", true);
			break;
		case T_VacuumStmt:
			{
				VacuumStmt *v = (VacuumStmt *) stmt;
				bool		full = false;

				foreach(lc, v->options)
					if (strcmp(((DefElem *) lfirst(lc))->defname, "full") == 0)
						full = defGetBoolean(lfirst(lc));
				if (full && v->rels == NIL)
					refuse_every_table("VACUUM FULL");
				if (full)
					foreach(lc, v->rels)
						check_table(((VacuumRelation *) lfirst(lc))->relation, "VACUUM FULL", true);
				break;
			}
		case T_DropStmt:
			{
				DropStmt   *d = (DropStmt *) stmt;

				if (d->removeType == OBJECT_TABLE)
					foreach(lc, d->objects)
						check_table(makeRangeVarFromNameList(lfirst(lc)), "drop", false);
				/* a live input's groups are found through its indexes */
				if (d->removeType == OBJECT_INDEX)
					foreach(lc, d->objects)
					{
						Oid			idx = RangeVarGetRelid(makeRangeVarFromNameList(lfirst(lc)),
														   NoLock, true);
						Oid			rel = OidIsValid(idx) ? IndexGetRelation(idx, true) : InvalidOid;

						if (OidIsValid(rel))
							lf_refuse_if_migrating(rel, get_rel_name(rel), "drop an index of");
					}
				if (d->removeType == OBJECT_EXTENSION && lf_active != NIL)
					foreach(lc, d->objects)
						if (strcmp(strVal(lfirst(lc)), "leapfrog") == 0)
							ereport(ERROR,
									(errcode(ERRCODE_OBJECT_IN_USE),
									 errmsg("cannot drop extension leapfrog while migrations are running"),
									 errhint("Finish them with leapfrog.complete() first.")));
				break;
			}
		case T_AlterDomainStmt:
			check_domain((AlterDomainStmt *) stmt);
			break;
		case T_ReassignOwnedStmt:
			/* the migration's owner runs its steps and owns its tables */
			foreach(lc, ((ReassignOwnedStmt *) stmt)->roles)
			{
				Oid			role = get_rolespec_oid(lfirst(lc), false);
				ListCell   *lm;

				foreach(lm, lf_active)
					if (((LfMigration *) lfirst(lm))->owner == role)
						ereport(ERROR,
								(errcode(ERRCODE_OBJECT_IN_USE),
								 errmsg("cannot reassign the objects of role \"%s\" while its migration \"%s\" is running",
										GetUserNameFromId(role, false), ((LfMigration *) lfirst(lm))->name),
								 errhint("Finish it with leapfrog.complete() first.")));
			}
			break;
		default:
			break;
	}
}

/* Is relid a new table of a migration completed lately (lf_recent_done)? */
static bool
recently_filled(Oid relid)
{
	ListCell   *lc;

	foreach(lc, lf_recent_done)
		if (list_member_oid(((LfMigration *) lfirst(lc))->targets, relid))
			return true;
	return false;
}

/*
 * COPY new_table [(columns)] TO ... as COPY (SELECT columns FROM ONLY
 * new_table) TO ...: the same rows and columns, the same privileges checked
 * (COPY of a table with row security does the same), computed.  NULL if
 * the statement is not a COPY TO of a new table.  Also of a migration
 * completed lately: a snapshot older than the completion cannot see the
 * rows it moved, and a table COPY, which bypasses the executor, read the
 * new table without them (pg_dump -j, a logical replica's first sync: a
 * dump without its rows, and no error); the executor's check fails such a
 * snapshot with 40001, as a SELECT (migrate.c, check_completions).
 */
static PlannedStmt *
copy_to_as_query(PlannedStmt *pstmt)
{
	CopyStmt   *cs = (CopyStmt *) pstmt->utilityStmt;
	CopyStmt   *n;
	SelectStmt *sel;
	RangeVar   *rv;
	List	   *cols = cs->attlist;
	PlannedStmt *result;
	ListCell   *lc;
	Oid			relid;

	if (cs->is_from || cs->relation == NULL)
		return NULL;
	relid = RangeVarGetRelid(cs->relation, AccessShareLock, true);
	if (!OidIsValid(relid) || !(lf_is_target(relid) || recently_filled(relid)))
		return NULL;
	if (cols == NIL)
	{
		Relation	rel = table_open(relid, NoLock);
		TupleDesc	desc = RelationGetDescr(rel);

		for (int i = 0; i < desc->natts; i++)
			if (!TupleDescAttr(desc, i)->attisdropped)
				cols = lappend(cols, makeString(pstrdup(NameStr(TupleDescAttr(desc, i)->attname))));
		table_close(rel, NoLock);
	}
	sel = makeNode(SelectStmt);
	foreach(lc, cols)
	{
		ResTarget  *rt = makeNode(ResTarget);
		ColumnRef  *cr = makeNode(ColumnRef);

		cr->fields = list_make1(makeString(pstrdup(strVal(lfirst(lc)))));
		cr->location = -1;
		rt->val = (Node *) cr;
		rt->location = -1;
		sel->targetList = lappend(sel->targetList, rt);
	}
	rv = copyObject(cs->relation);
	rv->inh = false;
	sel->fromClause = list_make1(rv);
	n = copyObject(cs);
	n->relation = NULL;
	n->attlist = NIL;
	n->query = (Node *) sel;
	result = copyObject(pstmt);
	result->utilityStmt = (Node *) n;
	return result;
}

static void
run_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			ProcessUtilityContext context, ParamListInfo params,
			QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_ProcessUtility)
		prev_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
							queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
}

static void
lf_ProcessUtility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				  ProcessUtilityContext context, ParamListInfo params,
				  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	PlannedStmt *copy_to = NULL;

	switch (nodeTag(pstmt->utilityStmt))
	{
		case T_AlterTableStmt:
		case T_RenameStmt:
		case T_IndexStmt:
		case T_CreateTrigStmt:
		case T_RuleStmt:
		case T_CreatePolicyStmt:
		case T_TruncateStmt:
		case T_CopyStmt:
		case T_ClusterStmt:
		case T_VacuumStmt:
		case T_DropStmt:
		case T_ReassignOwnedStmt:
		case T_AlterDomainStmt:
			if (!IsTransactionState())
				break;
			if (IsA(pstmt->utilityStmt, CopyStmt) && (lf_any_active() || lf_recent_done != NIL))
				copy_to = copy_to_as_query(pstmt);
			if (copy_to == NULL && lf_any_active())
				check_utility(pstmt->utilityStmt);
			break;
		default:
			break;
	}
	if (copy_to == NULL)
		run_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
	{
		bool		forced = lf_compute_forced;

		lf_compute_forced = true;
		PG_TRY();
		{
			run_utility(copy_to, queryString, false, context, params, queryEnv, dest, qc);
		}
		PG_FINALLY();
		{
			lf_compute_forced = forced;
		}
		PG_END_TRY();
	}
}

/*
 * Does tree (an expression, or a Query and its sub-queries) call a function
 * for which fn(funcid, cx) is true?  (check_functions_in_node's node kinds:
 * functions, operators' functions, aggregates, casts through I/O.)
 */
typedef struct CallsCx
{
	check_function_callback fn;
	void	   *cx;
} CallsCx;

static bool
calls_walker(Node *node, CallsCx *c)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, c->fn, c->cx))
		return true;
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, calls_walker, c, 0);
	return expression_tree_walker(node, calls_walker, c);
}

bool
lf_calls_function(Node *tree, check_function_callback fn, void *cx)
{
	CallsCx		c = {fn, cx};

	return calls_walker(tree, &c);
}

static bool
is_function(Oid funcid, void *objid)
{
	return funcid == *(Oid *) objid;
}

static bool
uses_operator(Node *node, Oid *opno)
{
	if (node == NULL)
		return false;
	if (((IsA(node, OpExpr) || IsA(node, DistinctExpr) || IsA(node, NullIfExpr)) &&
		 ((OpExpr *) node)->opno == *opno) ||
		(IsA(node, ScalarArrayOpExpr) && ((ScalarArrayOpExpr *) node)->opno == *opno))
		return true;
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, uses_operator, opno, 0);
	return expression_tree_walker(node, uses_operator, opno);
}

/* Does tree call function objid (classId ProcedureRelationId) or operator objid? */
bool
lf_tree_uses(Node *tree, Oid classId, Oid objid)
{
	if (classId == ProcedureRelationId)
		return lf_calls_function(tree, is_function, &objid);
	return classId == OperatorRelationId && uses_operator(tree, &objid);
}

/*
 * A function or operator that a mapping calls, dropped or replaced (CREATE
 * OR REPLACE) while its migration runs, or by the script after the
 * mapping's INSERT: eagerly the INSERT ran with it as it was; lazily the
 * rows not migrated yet would need it as it is no more (every read and
 * complete() failed with "cache lookup failed", or the rows got the new
 * body's values).  The stored mappings hold no dependencies of their own.
 */
static void
refuse_if_mapping_calls(Oid classId, Oid objid, const char *verb)
{
	ListCell   *lm;
	const char *target;

	if ((target = lf_script_mapping_calling(classId, objid)) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot %s %s after the script's INSERT into \"%s\", which calls it",
						verb, getObjectDescriptionOids(classId, objid), target),
				 errdetail("Eagerly that INSERT ran with it as it was; its rows migrate after start()."),
				 errhint("Put the statement before the INSERT ... SELECT.")));
	if (!lf_any_active())
		return;
	foreach(lm, lf_active)
	{
		LfMigration *mig = lfirst(lm);
		ListCell   *lc;

		foreach(lc, mig->mappings)
		{
			LfMapping  *m = lfirst(lc);

			if (lf_tree_uses((Node *) m->query, classId, objid))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_IN_USE),
						 errmsg("cannot %s %s while leapfrog migration \"%s\" is running",
								verb, getObjectDescriptionOids(classId, objid), mig->name),
						 errdetail("The mapping into \"%s\" calls it for the rows not migrated yet.",
								   get_rel_name(m->target)),
						 errhint("Wait with SELECT leapfrog.wait('%s'), or finish now with SELECT leapfrog.complete('%s').",
								 mig->name, mig->name)));
		}
	}
}

/*
 * A table of a running migration dropped by anything but the extension: an
 * input (retired, or live and tracked in place), a table of done keys or a
 * new table.  DROP SCHEMA ... CASCADE and DROP OWNED reach a table without
 * naming it, past the checks above; the migration would lose the rows it
 * has still to read, or never complete.
 */
static void
lf_object_access(ObjectAccessType access, Oid classId, Oid objectId, int subId, void *arg)
{
	ListCell   *lc;

	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);
	if (!IsTransactionState())
		return;
	if ((access == OAT_DROP && (classId == ProcedureRelationId || classId == OperatorRelationId)) ||
		(access == OAT_POST_CREATE && classId == ProcedureRelationId))
	{
		/* (a function just created is called by no mapping: one replaced may be) */
		refuse_if_mapping_calls(classId, objectId, access == OAT_DROP ? "drop" : "replace");
		return;
	}
	/* start() itself retires and replaces the tables of earlier migrations */
	if (access != OAT_DROP || classId != RelationRelationId ||
		lf_dropping_own || lf_chaining || !IsTransactionState() || !lf_any_active())
		return;
	foreach(lc, lf_active)
	{
		LfMigration *mig = lfirst(lc);

		/*
		 * A column of an input, dropped by a DROP DOMAIN, DROP TYPE or DROP
		 * COLLATION ... CASCADE (ALTER TABLE is checked before it runs): the
		 * rows not migrated yet would lose it, and the stored mappings read
		 * it by number.  Eagerly the input is gone, or keeps its column.
		 */
		if (subId != 0)
		{
			if (list_member_oid(mig->inputs, objectId))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_IN_USE),
						 errmsg("cannot drop column \"%s\" of table \"%s\" while leapfrog migration \"%s\" is running",
								get_attname(objectId, subId, false), get_rel_name(objectId),
								mig->name),
						 errdetail("The migration reads the column from the rows it has not migrated yet."),
						 errhint("Wait with SELECT leapfrog.wait('%s'), or finish now with SELECT leapfrog.complete('%s').",
								 mig->name, mig->name)));
			continue;
		}
		if (list_member_oid(mig->inputs, objectId) || list_member_oid(mig->live_keys, objectId) ||
			list_member_oid(mig->targets, objectId))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot drop table \"%s\" while leapfrog migration \"%s\" is running",
							get_rel_name(objectId), mig->name),
					 errdetail("The migration reads or fills it."),
					 errhint("Wait with SELECT leapfrog.wait('%s'), or finish now with SELECT leapfrog.complete('%s').",
							 mig->name, mig->name)));
	}
}

void
lf_install_utility_hook(void)
{
	prev_object_access = object_access_hook;
	object_access_hook = lf_object_access;
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = lf_ProcessUtility;
}
