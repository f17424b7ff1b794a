/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store — the local NVMe chunk cache (seam; filled in by the cache issue).
 *
 * Will own: 1 MiB chunks in files under cache_dir, keyed by XXH3-128 of
 * (fsid, fileid, size, mtime, ctime) — never by path — each with its
 * XXH3-64, visible only once bytes and checksum are durable; the index,
 * recovery after a crash, eviction under cache_size. Sits between prefetch
 * (which asks it first) and origin (which fills it).
 *
 * Today no store is configured: sfs_store_open() answers -ENOTSUP and
 * prefetch reads straight from the origin.
 */
#ifndef SFS_STORE_H
#define SFS_STORE_H

#include <stdint.h>

struct sfs_store_conf {
	const char *dir;     /* cache_dir */
	uint64_t capacity_bytes; /* cache_size */
};

typedef struct sfs_store sfs_store;

/* Returns 0 with *out set, or -errno (-ENOTSUP until the cache issue lands). */
int sfs_store_open(const struct sfs_store_conf *conf, sfs_store **out);
void sfs_store_close(sfs_store *store);

#endif
