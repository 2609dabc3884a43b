/*-------------------------------------------------------------------------
 * guc.c
 *	  The extension's settings (leapfrog.*), and whether it was preloaded.
 *
 * Leapfrog must be loaded through shared_preload_libraries: it needs shared
 * memory for its worker slots and a static launcher worker, and every
 * backend must run its hooks from the first statement on.  Loading it any
 * other way leaves the hooks uninstalled, and the SQL functions refuse to
 * work (lf_require_preload).  What each setting does: README.md.
 *-------------------------------------------------------------------------
 */
#include "leapfrog.h"

#include "utils/guc.h"

bool		lf_background = true;
bool		lf_track_live_inputs = true;
int			lf_background_delay = 1000;
int			lf_batch_size = 5000;
int			lf_background_naptime = 0;
double		lf_background_headroom = 0.25;
double		lf_background_min_share = 0.1;
int			lf_background_workers = 2;
int			lf_lock_timeout = 50;
int			lf_lock_retries = 40;
int			lf_read_mode = LF_READ_COMPUTE;

static const struct config_enum_entry read_mode_options[] = {
	{"migrate", LF_READ_MIGRATE, false},
	{"compute", LF_READ_COMPUTE, false},
	{NULL, 0, false}
};

bool		lf_loaded = false;

void
lf_require_preload(void)
{
	if (!lf_loaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("leapfrog must be loaded via shared_preload_libraries"),
				 errhint("Add leapfrog to shared_preload_libraries and restart the server.")));
}

/* Called once, by _PG_init at preload. */
void
lf_define_gucs(void)
{
	DefineCustomBoolVariable("leapfrog.track_live_inputs",
							 "Track a live input of a GROUP BY mapping in place rather than replace it lazily.",
							 "Tracked in place, the table stays where it is and no row is copied; "
							 "until the migration is done, no later migration may alter or drop it.",
							 &lf_track_live_inputs, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
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
	DefineCustomRealVariable("leapfrog.background_headroom",
							 "CPU the background workers leave idle, as a fraction of what the rest of the server uses.",
							 "The workers take the cores the sessions leave, less this headroom, so "
							 "requests do not queue behind the migration.",
							 &lf_background_headroom, 0.25, 0.0, 10.0,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("leapfrog.background_min_share",
							 "Fraction of a core the background workers take at least together, whatever the load.",
							 "The floor on the migrations' progress at saturation, shared evenly by the "
							 "running workers.  1 turns pacing off.",
							 &lf_background_min_share, 0.1, 0.01, 1.0,
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
	DefineCustomEnumVariable("leapfrog.read_mode",
							 "How a plain read of a table under migration gets the rows not yet migrated.",
							 "compute: it computes them from the retired rows and writes nothing; "
							 "migrate: it migrates them, as a write does.  Standbys and read-only "
							 "transactions always compute.",
							 &lf_read_mode, LF_READ_COMPUTE, read_mode_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("leapfrog");
	lf_loaded = true;
}
