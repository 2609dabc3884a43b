/*-------------------------------------------------------------------------
 * leapfrog.c
 *	  Module load: GUCs, hooks, shared memory and the background launcher;
 *	  and the error helper every file's PG_CATCH blocks share.
 *
 * Leapfrog must be loaded through shared_preload_libraries: it needs shared
 * memory for its worker slots and a static launcher worker, and every
 * backend must run its hooks from the first statement on.  Loading it any
 * other way leaves the hooks uninstalled, and the SQL functions refuse to
 * work (lf_require_preload).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/resowner.h"

PG_MODULE_MAGIC;

bool		lf_background = true;
int			lf_background_delay = 1000;
int			lf_batch_size = 5000;
int			lf_background_naptime = 0;
double		lf_background_yield = 0.0;
int			lf_background_workers = 2;
int			lf_lock_timeout = 50;
int			lf_lock_retries = 40;

bool		lf_loaded = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
lf_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	lf_shmem_request();
}

static void
lf_shmem_startup_hook(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	lf_shmem_startup();
}

void
lf_require_preload(void)
{
	if (!lf_loaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("leapfrog must be loaded via shared_preload_libraries"),
				 errhint("Add leapfrog to shared_preload_libraries and restart the server.")));
}

/*
 * In a PG_CATCH block: the error, copied into cxt, and what failed rolled
 * back: the internal subtransaction the caller began (subxact; then cxt and
 * owner are made current again, as they were before it began), or the
 * transaction (a background worker's own).
 */
ErrorData *
lf_abort_with_error(MemoryContext cxt, bool subxact, ResourceOwner owner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	if (subxact)
	{
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	else
		AbortCurrentTransaction();
	return edata;
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomBoolVariable("leapfrog.background",
							 "Migrate the remaining rows in the background.",
							 NULL, &lf_background, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("leapfrog.background_delay",
							"Time after start() before the background worker begins.",
							NULL, &lf_background_delay, 1000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("leapfrog.batch_size",
							"Input rows migrated per background transaction.",
							NULL, &lf_batch_size, 5000, 1, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("leapfrog.background_naptime",
							"Pause between two background batches.",
							NULL, &lf_background_naptime, 0, 0, 3600000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomRealVariable("leapfrog.background_yield",
							 "Pause after a background batch that got less than half a core, as a multiple of its time beyond twice its CPU time.",
							 "Workers back off when sessions want the cores, and run flat out when the "
							 "server is idle or lightly loaded.  0 disables.",
							 &lf_background_yield, 0.0, 0.0, 100.0,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("leapfrog.background_workers",
							"Background workers per database with a running migration.",
							NULL, &lf_background_workers, 2, 1, LF_MAX_WORKERS,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("leapfrog.lock_timeout",
							"Lock timeout of one attempt to take the locks of a switch.",
							NULL, &lf_lock_timeout, 50, 1, 60000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("leapfrog.lock_retries",
							"Attempts to take the locks of a switch before giving up.",
							NULL, &lf_lock_retries, 40, 1, 100000,
							PGC_USERSET, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("leapfrog");

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = lf_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = lf_shmem_startup_hook;

	lf_cache_init();
	lf_register_scan_methods();
	lf_install_planner_hook();
	lf_install_estimate_hook();
	lf_install_executor_hook();
	lf_install_utility_hook();
	lf_register_launcher();

	lf_loaded = true;
}
