/* SPDX-License-Identifier: Apache-2.0 */
/*
 * datasets — the names of the datasets a cache holds, and their read
 * counters. Private to cache/store/: the store's files are its only users
 * (through store_int.h).
 *
 * A dataset is what an operator sizes, lists and evicts: an export and its
 * top-level directory ("/ifs/data/imagenet"), or the export itself for the
 * files at its root. Every cached object records the 32-bit id of its
 * dataset (the object's header, store_int.h; its record, segment.h); this
 * table maps ids to names and keeps, per dataset, the bytes readers got
 * from the cache and from NFS and the time of the last read. An id is
 * derived from the name (XXH3-64, low 32 bits, never 0; the next id on a
 * collision), so a lost table costs the names, never a wrong attribution.
 * Id 0 means "unknown".
 *
 * Owns: cache_dir/datasets, a text file rewritten whole (temporary name,
 * fdatasync, rename):
 *   shardfs-datasets 1
 *   ID(8 hex) HIT_BYTES MISS_BYTES LAST_USE_S NAME(bytes <= ' ', '%' and
 *   0x7f as %XX)
 * Does not own the objects or their bytes (the store counts those).
 *
 * Memory: a fixed table of SFS_DSETS_MAX slots (40 bytes each) and the
 * names. Names are never removed while the table is open, so a name pointer
 * stays valid until sfs_dsets_close().
 *
 * Threading: sfs_dsets_find, sfs_dsets_get, sfs_dsets_count_read,
 * sfs_dsets_touch and sfs_dsets_reset are lock-free and may run on any
 * thread; sfs_dsets_intern (to add a name), sfs_dsets_load and
 * sfs_dsets_save take the table's mutex (a leaf).
 */
#ifndef SFS_DATASETS_H
#define SFS_DATASETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SFS_DSETS_MAX	   4096 /* datasets per cache directory */
#define SFS_DSETS_NAME_MAX 4095 /* bytes of a name, without its NUL */

typedef struct sfs_dsets sfs_dsets;

struct sfs_dset_info {
	uint32_t id;
	const char *name; /* valid until sfs_dsets_close */
	uint64_t hit_bytes, miss_bytes;
	int64_t last_use_s; /* CLOCK_REALTIME seconds; 0: never */
};

/* Load PATH if it exists (a damaged or foreign file is ignored: the names
 * are lost, nothing else). Returns 0 or -ENOMEM. */
int sfs_dsets_open(const char *path, sfs_dsets **out);
void sfs_dsets_close(sfs_dsets *d);

/* Read the file again, adding the names it has that the table lacks (the
 * directory came back after an open that could not read it). */
void sfs_dsets_load(sfs_dsets *d);

/* The id of NAME, added if new. Returns 0 when the table is full or NAME is
 * empty or longer than SFS_DSETS_NAME_MAX. */
uint32_t sfs_dsets_intern(sfs_dsets *d, const char *name);

/* The slot of id, or -1. */
long sfs_dsets_find(sfs_dsets *d, uint32_t id);

/* Slot `slot` (0 .. SFS_DSETS_MAX - 1): false if empty. */
bool sfs_dsets_get(sfs_dsets *d, size_t slot, struct sfs_dset_info *out);

/* Count a reader's bytes (from the cache, from NFS) and note the time. */
void sfs_dsets_count_read(sfs_dsets *d, uint32_t id, uint64_t hit_bytes, uint64_t miss_bytes);

/* Note a use other than a read (a write into the cache). */
void sfs_dsets_touch(sfs_dsets *d, uint32_t id);

/* Zero the read counters of a dataset (evicted) or of all (id 0). */
void sfs_dsets_reset(sfs_dsets *d, uint32_t id);

/* Write the file if anything changed since the last save (names_only: only
 * if a name was added). Returns 0 or -errno. */
int sfs_dsets_save(sfs_dsets *d, bool names_only);

#endif
