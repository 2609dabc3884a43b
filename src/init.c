/*-------------------------------------------------------------------------
 * init.c
 *	  Module load (_PG_init): the settings, the hooks, shared memory and the
 *	  background launcher.  Nothing happens unless the module is preloaded
 *	  (guc.c says why).
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"

PG_MODULE_MAGIC;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
lf_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	lf_shmem_request();
	lf_pacing_shmem_request();
}

static void
lf_shmem_startup_hook(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	lf_shmem_startup();
	lf_pacing_shmem_startup();
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	lf_define_gucs();

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
}
