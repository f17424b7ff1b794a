/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handles — the fh values of open files and directories (fi->fh).
 *
 * An fh is the address of the open's state tagged with the serving
 * process's epoch (keeper.h: 1 for the first server of a mount, +1 per
 * restart; 0 without a keeper) in its top 16 bits, so that a resumed
 * server tells a handle of a dead process (whose address means nothing
 * here) from its own with one compare. fs/ops (open_file.c, dir.c)
 * rebuilds the state of such a stale handle on its first use (a READ, a
 * READDIR after a restart) and keeps it here, adopted, under the old fh
 * until the kernel releases it.
 *
 * Owns: the fh encoding (address, flag bits, epoch tag) and the table of
 * adopted handles. Does not own: the states the handles point to (fs/ops),
 * the epoch (the keeper's state page, set here once at start).
 * Threading: make and get are pure; the adopted handles are under one
 * lock, taken only for handles of a dead process.
 */
#ifndef SFS_HANDLES_H
#define SFS_HANDLES_H

#include <stdint.h>

/* Set once at start, before any request: the tag of this process's fh. */
void sfs_handles_set_epoch(uint32_t epoch);

uint64_t sfs_handle_make(const void *state);

/* Low bits of an fh that say something about the open itself, kept across
 * restarts with the fh (states are 16-byte aligned, so an address never
 * has them): SFS_HANDLE_PASSTHROUGH, the kernel reads this open from its
 * backing file (fs/kernel/passthrough.h). The functions below ignore them. */
#define SFS_HANDLE_PASSTHROUGH 0x1u
#define SFS_HANDLE_FLAGS       0x7u
uint64_t sfs_handle_make_flagged(const void *state, uint64_t flags);

/* This process's state of fh, or NULL for a handle of another process
 * (or 0). */
void *sfs_handle_get(uint64_t fh);

/* The state adopted for a stale fh, or NULL. */
void *sfs_handle_adopted(uint64_t fh);

/* Keep state as the adopted one of stale fh, unless another thread did
 * first: returns the state kept (state, or the other one: the caller then
 * frees its own), or NULL on ENOMEM. */
void *sfs_handle_adopt(uint64_t fh, void *state);

/* Release of a stale fh: its adopted state, removed, or NULL. */
void *sfs_handle_drop(uint64_t fh);

#endif
