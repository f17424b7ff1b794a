/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hint_list — one hint list's items as the trainer sent them
 * (shardfs_ioctl.h, SHARDFS_IOC_HINT_APPEND), checked and stored compactly:
 * 24 bytes per item plus its path, a path equal to the previous item's
 * (records of one file) stored once.
 *
 * Owns: validating a batch (every rule of the ABI; a batch with one bad item
 * is refused whole), the item array and the path arena, the limit
 * SHARDFS_HINT_MAX_ITEMS. Does not own: resolving paths, fetching, the
 * ioctl plumbing (fs/hints/hints.c, fs/ops/ioctl.c).
 *
 * Threading: none of its own; the caller serialises calls on one list.
 */
#ifndef SFS_HINT_LIST_H
#define SFS_HINT_LIST_H

#include <stddef.h>
#include <stdint.h>

struct sfs_hint_item {
	uint64_t offset, length; /* length 0: the whole file */
	uint32_t path_off;	 /* in the list's arena */
	uint16_t path_len;
	uint16_t kind; /* SHARDFS_HINT_* */
};

struct sfs_hint_items {
	struct sfs_hint_item *items;
	size_t n, cap;
	char *arena; /* paths, not NUL-terminated */
	size_t arena_len, arena_cap;
};

/*
 * Append the n_items items packed in buf[0, used) to l. Returns 0, -EINVAL
 * (a malformed batch: nothing of it is kept), -E2BIG (l would pass
 * SHARDFS_HINT_MAX_ITEMS) or -ENOMEM.
 */
int sfs_hint_items_append(struct sfs_hint_items *l, const uint8_t *buf, size_t used,
			  uint32_t n_items);

/* Whether path[0, len) is a path the ABI allows: relative, no empty, "."
 * or ".." component, no NUL. */
int sfs_hint_path_ok(const char *path, size_t len);

/* Give back what the arrays hold past their use (a list that is complete). */
void sfs_hint_items_shrink(struct sfs_hint_items *l);

/* Memory held by l's items and paths. */
size_t sfs_hint_items_bytes(const struct sfs_hint_items *l);

void sfs_hint_items_free(struct sfs_hint_items *l);

#endif
