/* SPDX-License-Identifier: Apache-2.0 */
/*
 * blocking — a thread of the daemon says that it is about to wait (for the
 * disk, for NFS, for another thread) and when it has stopped waiting.
 *
 * The FUSE worker pool (fs/kernel/workers.c) keeps only a few workers taking
 * requests and installs hooks here, so that a worker about to wait hands
 * its place to a spare one: requests keep being served while it waits, and
 * no more workers than that compete for the next request (each idle one
 * the kernel wakes is a context switch). Modules call sfs_blocking_begin()
 * and sfs_blocking_end() around their long waits (an NFS call, a chunk
 * being fetched, a staging copy), on any thread; the hooks ignore threads
 * that are not the pool's. Pairs may nest on one thread. Short waits (a
 * read of the local cache disk) are left out: a hand-off costs more.
 * Without hooks (unit tests, tools) each call is a load and a branch.
 *
 * Owns: the pointer to the installed hooks. Does not own the pool behind
 * them (fs/kernel/workers.c) nor the waits.
 * Threading: begin and end from any thread; hooks are installed and removed
 * only while no thread calls them (sfs_blocking_set_hooks).
 */
#ifndef SFS_BLOCKING_H
#define SFS_BLOCKING_H

struct sfs_blocking_hooks {
	void (*begin)(void);
	void (*end)(void);
};

/* Install (or with NULL remove) the hooks; before the threads that call
 * them start, or after they have stopped. */
void sfs_blocking_set_hooks(const struct sfs_blocking_hooks *hooks);

void sfs_blocking_begin(void);
void sfs_blocking_end(void);

#endif
