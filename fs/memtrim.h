/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memtrim — give memory freed in bulk back to the system.
 *
 * When the kernel forgets inodes in bulk (memory pressure, drop_caches), the
 * daemon frees small blocks spread over every worker thread's malloc arena,
 * which glibc keeps until malloc_trim(). Trimming on the FORGET path, rate
 * limited, missed the tail of a burst: most of what the forgotten inodes
 * had held stayed resident until one malloc_trim(0) afterwards. So the
 * FORGET path only counts, and a thread trims once a second while at least
 * SFS_MEMTRIM_MIN blocks were freed since the last trim: within a second
 * of a burst's end, off every request's path. Each second (or at once,
 * sfs_memtrim_kick) it also calls the owner's release hook (idle buffer
 * pools, inodes past inode_max), and trims after it freed. It owns the
 * thread and the malloc settings, not the memory it gives back (the hook's
 * owners free it).
 *
 * Threading: sfs_memtrim_freed() from any thread; start/stop from main.
 */
#ifndef SFS_MEMTRIM_H
#define SFS_MEMTRIM_H

#include <stddef.h>
#include <stdint.h>

#define SFS_MEMTRIM_MIN 4096 /* freed blocks worth a trim */

/* Fixed malloc thresholds instead of glibc's moving ones, before any
 * thread starts (main): blocks up to SFS_MEMTRIM_MMAP_MAX come from the
 * arenas, and an arena's free top is kept up to SFS_MEMTRIM_KEEP_TOP, so
 * that a buffer freed and allocated again is not unmapped and faulted in
 * again (each fault a VM exit on a paravirtualised guest); this thread's
 * trims give the memory back once reads stop. What it saves and costs is
 * in tools/bench/benchmarks.md. */
#define SFS_MEMTRIM_MMAP_MAX (4u << 20)
#define SFS_MEMTRIM_KEEP_TOP (16u << 20)
/* Under a small memory budget (mem_max) what the arenas keep is a share of
 * it: each arena's free top at most mem_max / 64, and at most mem_max / 32
 * MiB arenas (at least 4; glibc's default, 8 per CPU, when that is fewer).
 * The trimming thread also trims once a second while the RSS is over
 * three quarters of the budget. */
void sfs_memtrim_tune(uint64_t mem_max);

/* Start the trimming thread; release(arg), if set, runs on it once a second
 * and returns the bytes it freed. Returns 0 or -errno (then nothing is
 * trimmed). */
int sfs_memtrim_start(uint64_t (*release)(void *arg), void *arg);
/* Run the thread's pass (the release hook, then a trim if due) now instead
 * of at the next second. Any thread; no-op if not started. */
void sfs_memtrim_kick(void);
/* Stop and join it (no-op if not started). */
void sfs_memtrim_stop(void);
/* n blocks were freed (inodes forgotten). */
void sfs_memtrim_freed(size_t n);
/* Trims done so far (stats). */
unsigned long long sfs_memtrim_count(void);

#endif
