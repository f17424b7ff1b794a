/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watchdog — the serving process's heartbeat, for its keeper (keeper.h).
 *
 * A thread that, every SFS_WATCHDOG_TICK_MS, ticks the keeper state's
 * heartbeat if the process is live: no origin I/O thread has gone
 * wedge_ms without a turn of its loop (sfs_origin_stuck_ms), and no FUSE
 * worker has been wedge_ms inside one request outside a declared wait
 * (sfs_workers_stuck_ms; a wait for NFS or a chunk, however long, as on a
 * hard mount with every node down, is declared). A stopped or deadlocked
 * process stops ticking; the keeper kills and replaces one whose heartbeat
 * stopped for wedge_ms. It owns the thread; it reads the origin's and the
 * workers' own stuck times and decides nothing else (the keeper kills).
 *
 * Threading: start and stop from the main thread; the thread only asks for
 * the stuck times and writes the heartbeat (an atomic of the state page).
 */
#ifndef SFS_WATCHDOG_H
#define SFS_WATCHDOG_H

#include "../fs.h"

#define SFS_WATCHDOG_TICK_MS 250

/* Start the thread (after the origin's threads). Returns 0 or -errno. */
int sfs_watchdog_start(struct sfs_fs *fs, uint64_t wedge_ms);

/* Stop and join it (before the origin closes). */
void sfs_watchdog_stop(void);

#endif
