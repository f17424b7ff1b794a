/* SPDX-License-Identifier: Apache-2.0 */
/*
 * workers — the FUSE worker threads: libfuse's session loop, run by a pool
 * that keeps `active` workers taking requests and parks the rest.
 *
 * libfuse's own loop (fuse_session_loop_mt) starts a worker whenever none
 * is free and keeps every one it started reading /dev/fuse; the kernel then
 * wakes a sleeping worker for nearly every request (a context switch each,
 * on a request that the cache answers at once). Here at most `active`
 * workers that are not waiting take requests; a worker about to wait for
 * NFS or for a chunk (sfs_blocking_begin, cache/common/blocking.h) wakes a parked
 * worker, or starts one, up to max_threads, when no other worker is free to
 * read the next request; once it stops waiting and the pool has more than
 * `active` working, a worker parks after its request while another reads.
 * So waits for NFS may be as many as max_threads, while requests that need
 * none are served by few threads. Reads of the cache disk are not handed
 * off: they are short, and a hand-off costs a wake-up and a park.
 *
 * Owns: the worker threads and the counts of working, parked and waiting
 * ones. Does not own the requests (libfuse reads them, the ops answer them).
 * Threading: sfs_workers_run runs on the caller's thread until the session
 * ends (unmounted, aborted, or fuse_session_exit from a signal); the hooks
 * run on any thread.
 */
#ifndef SFS_WORKERS_H
#define SFS_WORKERS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif
#include <fuse_lowlevel.h>
#include <stdint.h>

/* Serve se with at most max_threads workers, `active` of them taking
 * requests while none waits (1 <= active <= max_threads). Installs the
 * blocking hooks while it runs. Returns 0 when the session ended normally,
 * or -errno (a worker could not be started, or /dev/fuse failed). */
int sfs_workers_run(struct fuse_session *se, unsigned max_threads, unsigned active);

struct sfs_workers_stats {
	unsigned working, parked, waiting; /* now */
	uint64_t handoffs;		   /* waits that woke or started a spare */
	uint64_t at_limit;		   /* waits that wanted a spare at max_threads */
};

/* The running pool's figures (all 0 when none runs). Called from a worker
 * (the stats file), or any thread while sfs_workers_run runs. */
void sfs_workers_get_stats(struct sfs_workers_stats *out);

/* The watchdog (watchdog.h): how long the worker that has been longest in
 * one request, outside a declared wait (cache/common/blocking.h), has been
 * in it, as seen by the calls so far (call every few hundred ms from one
 * thread; a stretch counts from the first call that saw it). 0 when none
 * is, or no pool runs. */
#define SFS_WORKERS_WATCH_MAX 1024 /* max_threads' own limit */
uint64_t sfs_workers_stuck_ms(uint64_t now_ms);

#endif
