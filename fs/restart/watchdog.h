/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watchdog — the serving process's heartbeat, for its keeper (keeper.h).
 *
 * A thread that, every SFS_WATCHDOG_TICK_MS, checks that the process is
 * live and then ticks the keeper state's heartbeat: no origin I/O thread
 * has gone wedge_ms without a turn of its loop (sfs_origin_stuck_ms), and
 * no FUSE worker has been wedge_ms inside one request outside a declared
 * wait (sfs_workers_stuck_ms; a wait for NFS or a chunk, however long, as
 * on a hard mount with every node down, is declared). A stopped or
 * deadlocked process stops ticking; the keeper kills and replaces one whose
 * heartbeat stopped for wedge_ms.
 *
 * Owns: the thread and the decision "live or wedged". Does not own the
 * stuck times (the origin and the workers keep their own), nor the kill
 * (the keeper's). It is handed the origin and the keeper state it watches
 * and ticks (main wires them), and a clock that tests may replace.
 *
 * Threading: open, start and close from the main thread; the thread only
 * asks for the stuck times and writes the heartbeat (an atomic of the
 * state page). sfs_watchdog_check runs on the thread once started (or on
 * the caller's, for a watchdog never started).
 */
#ifndef SFS_WATCHDOG_H
#define SFS_WATCHDOG_H

#include "../../cache/nfs/origin.h"
#include "keeper.h"

#include <stdbool.h>
#include <stdint.h>

#define SFS_WATCHDOG_TICK_MS 250

typedef struct sfs_watchdog sfs_watchdog;

struct sfs_watchdog_conf {
	const sfs_origin *origin;	 /* whose I/O threads must turn */
	struct sfs_keeper_state *keeper; /* whose heartbeat is ticked */
	uint64_t wedge_ms;		 /* stuck this long: wedged */
	uint64_t (*now_ms)(void);	 /* the clock; NULL: sfs_now_ms */
};

/* A watchdog for c (copied), not started. Returns 0 and *out, or -ENOMEM. */
int sfs_watchdog_open(const struct sfs_watchdog_conf *c, sfs_watchdog **out);

/* Start the thread (after the origin's threads) and tell the keeper the
 * wedge time. Returns 0 or -errno. */
int sfs_watchdog_start(sfs_watchdog *w);

/* One look, at the conf's clock: when the process is live, tick the
 * heartbeat and return true; when wedged, leave it (logged once per
 * stretch) and return false. */
bool sfs_watchdog_check(sfs_watchdog *w);

/* Stop and join the thread (before the origin closes), free w. NULL is
 * fine. */
void sfs_watchdog_close(sfs_watchdog *w);

#endif
