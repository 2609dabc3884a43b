/*-------------------------------------------------------------------------
 * alter.c
 *	  ALTER TABLE in a script: which commands PostgreSQL carries out as a
 *	  catalog change, without reading the table.
 *
 * start() returns in milliseconds whatever the table sizes, so on a table
 * that holds rows a script may run an ALTER TABLE as written only if
 * PostgreSQL neither rewrites the table nor scans it to check its rows
 * (ATRewriteTables, phase 3 of ALTER TABLE) nor builds an index on it.
 * Those commands run inside the switch, and the result is eager's by
 * construction: it is the same DDL.  For the others, start.c replaces the
 * table lazily (replace.c); a subcommand this file does not know is refused
 * with 0A000.
 *
 * The rules follow PostgreSQL 15's ALTER TABLE (tablecmds.c) and are pinned,
 * command by command, by the regression test alter_table, which checks that
 * a command run as written leaves the table's relfilenode and its scan
 * count unchanged.
 *
 * A table the same script created is empty until its mapping fills it:
 * any ALTER TABLE on it is instant, and start.c does not ask.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/genam.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_index.h"
#include "catalog/pg_opclass.h"
#include "commands/defrem.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_type.h"
#include "parser/parse_utilcmd.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

/* Why a command is not instant: the table pass PostgreSQL would make */
static const char PASS_REWRITE[] = "PostgreSQL would rewrite the table";
static const char PASS_CHECK[] = "PostgreSQL would read every row to check it";
static const char PASS_INDEX[] = "PostgreSQL would build an index";
static const char PASS_UNKNOWN[] = "no table pass Leapfrog knows";

/* serial, bigserial, ...: transformColumnDefinition turns them into nextval() */
bool
lf_is_serial_type(TypeName *tn)
{
	static const char *const names[] = {"smallserial", "serial2", "serial", "serial4",
	"bigserial", "serial8"};
	char	   *name;

	if (tn == NULL || tn->names == NIL || tn->arrayBounds != NIL)
		return false;
	if (list_length(tn->names) == 2 &&
		strcmp(strVal(linitial(tn->names)), "pg_catalog") != 0)
		return false;
	if (list_length(tn->names) > 2)
		return false;
	name = strVal(llast(tn->names));
	for (int i = 0; i < lengthof(names); i++)
		if (strcmp(name, names[i]) == 0)
			return true;
	return false;
}

/* The default as ALTER TABLE would compute it, volatile or not. */
static bool
default_is_volatile(Node *raw, Oid typid, int32 typmod)
{
	ParseState *pstate = make_parsestate(NULL);
	Node	   *expr;

	expr = transformExpr(pstate, raw, EXPR_KIND_COLUMN_DEFAULT);
	expr = coerce_to_target_type(pstate, expr, exprType(expr), typid, typmod,
								 COERCION_ASSIGNMENT, COERCE_IMPLICIT_CAST, -1);
	/* a default that cannot be coerced: ALTER TABLE reports it itself */
	return expr != NULL && contain_volatile_functions(expr);
}

/*
 * ADD COLUMN is a catalog change when the existing rows can all take the
 * same stored value (PostgreSQL 11's "missing value"): no default, or a
 * default without volatile functions, evaluated once.  A constrained domain,
 * a CHECK, UNIQUE or PRIMARY KEY, or a foreign key with a default makes
 * PostgreSQL look at every row.
 */
static const char *
add_column_pass(Relation rel, ColumnDef *col)
{
	Node	   *raw_default = col->raw_default;
	bool		has_fkey = false;
	Oid			typid;
	int32		typmod;
	ListCell   *lc;

	if (col->identity || col->generated || lf_is_serial_type(col->typeName))
		return PASS_REWRITE;
	foreach(lc, col->constraints)
	{
		Constraint *con = lfirst(lc);

		switch (con->contype)
		{
			case CONSTR_NULL:
			case CONSTR_NOTNULL:
			case CONSTR_ATTR_DEFERRABLE:
			case CONSTR_ATTR_NOT_DEFERRABLE:
			case CONSTR_ATTR_DEFERRED:
			case CONSTR_ATTR_IMMEDIATE:
				break;
			case CONSTR_DEFAULT:
				raw_default = con->raw_expr;
				break;
			case CONSTR_FOREIGN:
				has_fkey = true;
				break;
			case CONSTR_IDENTITY:
			case CONSTR_GENERATED:
				return PASS_REWRITE;
			case CONSTR_CHECK:
				return PASS_CHECK;
			default:
				return PASS_INDEX;
		}
	}
	typenameTypeIdAndMod(NULL, col->typeName, &typid, &typmod);
	if (get_typtype(typid) == TYPTYPE_DOMAIN && DomainHasConstraints(typid))
		return PASS_REWRITE;
	if (raw_default && default_is_volatile(raw_default, typid, typmod))
		return PASS_REWRITE;
	if (raw_default && has_fkey)
	{
		return PASS_CHECK;
	}
	return NULL;
}

/*
 * Whether the table's constraints other than indexes read column attnum:
 * ALTER COLUMN TYPE re-adds them, and a re-added CHECK or foreign key is
 * checked again.
 */
static bool
column_in_constraint(Relation rel, AttrNumber attnum)
{
	Relation	conrel = table_open(ConstraintRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	/* this table's CHECK and foreign keys, and foreign keys that reference it */
	for (int pass = 0; pass < 2 && !found; pass++)
	{
		ScanKeyInit(&key, pass == 0 ? Anum_pg_constraint_conrelid : Anum_pg_constraint_confrelid,
					BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(RelationGetRelid(rel)));
		scan = systable_beginscan(conrel, InvalidOid, false, NULL, 1, &key);
		while (!found && HeapTupleIsValid(tup = systable_getnext(scan)))
		{
			Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(tup);
			bool		isnull;
			Datum		d;
			ArrayType  *arr;
			int16	   *cols;
			int			n;

			if (con->contype != CONSTRAINT_CHECK && con->contype != CONSTRAINT_FOREIGN)
				continue;
			if (pass == 1 && con->contype != CONSTRAINT_FOREIGN)
				continue;
			d = heap_getattr(tup, pass == 0 ? Anum_pg_constraint_conkey : Anum_pg_constraint_confkey,
							 RelationGetDescr(conrel), &isnull);
			if (isnull)
				continue;
			arr = DatumGetArrayTypeP(d);
			cols = (int16 *) ARR_DATA_PTR(arr);
			n = ARR_DIMS(arr)[0];
			for (int i = 0; i < n; i++)
				if (cols[i] == attnum)
					found = true;
		}
		systable_endscan(scan);
	}
	table_close(conrel, AccessShareLock);
	return found;
}

/*
 * Whether the indexes on column attnum stay as they are when it becomes
 * newtype with collation newcoll: PostgreSQL reuses an index whose operator
 * family the new type's default operator class shares and whose collation
 * does not change (CheckIndexCompatible); it rebuilds the others, and every
 * index with an expression or predicate on the column, reading the table.
 */
static bool
indexes_reusable(Relation rel, AttrNumber attnum, Oid newtype, Oid newcoll)
{
	Oid			oldcoll = TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attcollation;
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	bool		ok = true;

	foreach(lc, indexes)
	{
		Relation	irel = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index index = irel->rd_index;
		Bitmapset  *attrs = NULL;

		/* expressions and predicates are recomputed: a full build */
		pull_varattnos((Node *) RelationGetIndexExpressions(irel), 1, &attrs);
		pull_varattnos((Node *) RelationGetIndexPredicate(irel), 1, &attrs);
		if (bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber, attrs))
			ok = false;
		for (int i = 0; ok && i < index->indnkeyatts; i++)
		{
			Oid			newclass;

			if (index->indkey.values[i] != attnum)
				continue;
			newclass = GetDefaultOpClass(newtype, irel->rd_rel->relam);
			if (!OidIsValid(newclass) ||
				get_opclass_family(newclass) != irel->rd_opfamily[i])
				ok = false;
			/* an index column that took the column's collation takes the new one */
			if (irel->rd_indcollation[i] == oldcoll && newcoll != oldcoll)
				ok = false;
		}
		/* an INCLUDE column is stored as is: any change of type rebuilds */
		for (int i = index->indnkeyatts; ok && i < index->indnatts; i++)
			if (index->indkey.values[i] == attnum &&
				newtype != TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid)
				ok = false;
		index_close(irel, AccessShareLock);
		if (!ok)
			break;
	}
	list_free(indexes);
	return ok;
}

/*
 * ALTER COLUMN TYPE is a catalog change when the old values are already
 * valid values of the new type (ATColumnChangeRequiresRewrite: the planned
 * coercion reduces to the column itself, a relabelling or an unconstrained
 * domain, as varchar(10) to varchar(20) or text does), no index must be
 * rebuilt, and no CHECK or foreign key must be checked again.
 */
static const char *
alter_type_pass(Relation rel, AlterTableCmd *cmd)
{
	ColumnDef  *def = (ColumnDef *) cmd->def;
	HeapTuple	tup = SearchSysCacheAttName(RelationGetRelid(rel), cmd->name);
	Form_pg_attribute att;
	Oid			newtype;
	int32		newtypmod;
	Oid			newcoll;
	Node	   *expr;
	const char *pass = NULL;

	if (!HeapTupleIsValid(tup))
		return NULL;			/* ALTER TABLE reports the missing column itself */
	att = (Form_pg_attribute) GETSTRUCT(tup);
	if (def->raw_default)
		pass = PASS_REWRITE;	/* USING computes a new value for every row */
	else
	{
		typenameTypeIdAndMod(NULL, def->typeName, &newtype, &newtypmod);
		newcoll = GetColumnDefCollation(NULL, def, newtype);
		expr = (Node *) makeVar(1, att->attnum, att->atttypid, att->atttypmod,
								att->attcollation, 0);
		expr = coerce_to_target_type(NULL, expr, att->atttypid, newtype, newtypmod,
									 COERCION_ASSIGNMENT, COERCE_IMPLICIT_CAST, -1);
		if (expr != NULL)		/* else ALTER TABLE reports the type mismatch */
		{
			expr = (Node *) expression_planner((Expr *) expr);
			for (;;)
			{
				if (IsA(expr, Var))
					break;
				else if (IsA(expr, RelabelType))
					expr = (Node *) ((RelabelType *) expr)->arg;
				else if (IsA(expr, CoerceToDomain) &&
						 !DomainHasConstraints(((CoerceToDomain *) expr)->resulttype))
					expr = (Node *) ((CoerceToDomain *) expr)->arg;
				else
				{
					pass = PASS_REWRITE;
					break;
				}
			}
			if (pass == NULL && !indexes_reusable(rel, att->attnum, newtype, newcoll))
				pass = PASS_INDEX;
			if (pass == NULL && column_in_constraint(rel, att->attnum))
				pass = PASS_CHECK;
		}
	}
	ReleaseSysCache(tup);
	return pass;
}

/*
 * ADD CONSTRAINT: NOT VALID CHECK and foreign keys are enforced on new
 * writes at once and check nothing; UNIQUE and PRIMARY KEY USING INDEX adopt
 * an index already built (a primary key also needs its columns NOT NULL
 * already, or PostgreSQL checks them).
 */
static const char *
add_constraint_pass(Relation rel, Constraint *con)
{
	switch (con->contype)
	{
		case CONSTR_CHECK:
		case CONSTR_FOREIGN:
			return con->skip_validation ? NULL : PASS_CHECK;
		case CONSTR_PRIMARY:
		case CONSTR_UNIQUE:
			if (con->indexname == NULL)
				return PASS_INDEX;
			if (con->contype == CONSTR_PRIMARY)
			{
				Oid			indexoid = get_relname_relid(con->indexname,
														 RelationGetNamespace(rel));
				HeapTuple	tup;

				if (!OidIsValid(indexoid))
					return NULL;	/* ALTER TABLE reports it */
				tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(indexoid));
				if (HeapTupleIsValid(tup))
				{
					Form_pg_index index = (Form_pg_index) GETSTRUCT(tup);
					const char *pass = NULL;

					for (int i = 0; i < index->indnkeyatts; i++)
					{
						AttrNumber	a = index->indkey.values[i];

						if (a > 0 && !TupleDescAttr(RelationGetDescr(rel), a - 1)->attnotnull)
							pass = PASS_CHECK;
					}
					ReleaseSysCache(tup);
					if (pass)
					return pass;
				}
			}
			return NULL;
		default:
			return PASS_INDEX;	/* EXCLUDE */
	}
}

/*
 * What table pass one subcommand needs: NULL for none, or the reason.  An
 * unknown subcommand counts as a pass, so a new kind is refused until it is
 * examined.
 */
static const char *
subcommand_pass(Relation rel, AlterTableCmd *cmd)
{
	switch (cmd->subtype)
	{
		case AT_AddColumn:
			return add_column_pass(rel, (ColumnDef *) cmd->def);
		case AT_AlterColumnType:
			return alter_type_pass(rel, cmd);
		case AT_AddConstraint:
			return add_constraint_pass(rel, (Constraint *) cmd->def);
		case AT_SetNotNull:
			return PASS_CHECK;
		case AT_ValidateConstraint:
			return PASS_CHECK;
		case AT_ColumnDefault:
		case AT_DropNotNull:
		case AT_DropColumn:
		case AT_DropConstraint:
		case AT_AlterConstraint:
		case AT_SetStatistics:
		case AT_SetOptions:
		case AT_ResetOptions:
		case AT_SetStorage:
		case AT_SetCompression:
		case AT_SetRelOptions:
		case AT_ResetRelOptions:
		case AT_ReplaceRelOptions:
		case AT_ClusterOn:
		case AT_DropCluster:
		case AT_ReplicaIdentity:
		case AT_ChangeOwner:
			return NULL;
		default:
			return PASS_UNKNOWN;
	}
}

/* The SQL keywords of a subcommand, for the error message. */
static const char *
subcommand_name(AlterTableCmd *cmd)
{
	switch (cmd->subtype)
	{
		case AT_AddColumn:
			return "ADD COLUMN";
		case AT_AlterColumnType:
			return "ALTER COLUMN ... TYPE";
		case AT_AddConstraint:
			return "ADD CONSTRAINT";
		case AT_SetNotNull:
			return "ALTER COLUMN ... SET NOT NULL";
		case AT_ValidateConstraint:
			return "VALIDATE CONSTRAINT";
		case AT_SetTableSpace:
			return "SET TABLESPACE";
		case AT_SetLogged:
		case AT_SetUnLogged:
			return "SET LOGGED/UNLOGGED";
		case AT_SetAccessMethod:
			return "SET ACCESS METHOD";
		case AT_AttachPartition:
			return "ATTACH PARTITION";
		case AT_AddInherit:
			return "INHERIT";
		default:
			return "this ALTER TABLE subcommand";
	}
}

/*
 * Whether PostgreSQL carries out an ALTER TABLE on table relid (which holds
 * rows) as a catalog change.  If not, start.c replaces the table lazily
 * (replace.c), unless no table pass explains the command: that is refused
 * with 0A000.
 */
bool
lf_alter_is_instant(AlterTableStmt *stmt, Oid relid, const char *text, char **why)
{
	Relation	rel = table_open(relid, AccessShareLock);
	bool		instant = true;
	ListCell   *lc;

	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *cmd = lfirst(lc);
		const char *pass = subcommand_pass(rel, cmd);

		if (pass == PASS_UNKNOWN)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("%s on table \"%s\" is not supported in a leapfrog script",
							subcommand_name(cmd), RelationGetRelationName(rel)),
					 errdetail("It is neither a catalog change nor a change Leapfrog can make by replacing the table lazily. Statement: %s",
							   text),
					 errhint("Run it before start(), or after the migration is complete.")));
		if (pass && instant)
		{
			instant = false;
			*why = psprintf("%s: %s", subcommand_name(cmd), pass);
		}
	}
	table_close(rel, AccessShareLock);
	return instant;
}

/*
 * Whether PostgreSQL rewrites table relid for this ALTER TABLE.  A snapshot
 * taken before a rewrite sees the table empty afterwards (the rewrite is
 * not MVCC-safe); before a change in place, it sees the rows.  Unknown
 * subcommands count as in place: the answer then is 40001, never rows.
 */
bool
lf_alter_rewrites(AlterTableStmt *stmt, Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	bool		rewrites = false;
	ListCell   *lc;

	foreach(lc, stmt->cmds)
		if (subcommand_pass(rel, lfirst(lc)) == PASS_REWRITE)
			rewrites = true;
	table_close(rel, AccessShareLock);
	return rewrites;
}
