// SPDX-License-Identifier: Apache-2.0
/*
 * hint_list — checking and storing the items of a hint list (hint_list.h).
 */
#include "hint_list.h"
#include <shardfs/shardfs_ioctl.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(struct shardfs_hint_item) == 24, "ABI: the item's fixed part");
_Static_assert(sizeof(struct shardfs_hint_append) <= 16383, "ABI: FUSE restricted ioctl limit");
_Static_assert(sizeof(struct shardfs_hint_append) % 8 == 0, "ABI: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_hint_status) % 8 == 0, "ABI: 8-byte multiple");

#define HINT_PATH_MAX 4095

int sfs_hint_path_ok(const char *path, size_t len)
{
	if (len == 0 || len > HINT_PATH_MAX || memchr(path, 0, len))
		return 0;
	for (size_t at = 0; at <= len;) {
		const char *slash = memchr(path + at, '/', len - at);
		size_t end = slash ? (size_t)(slash - path) : len;
		size_t n = end - at;
		if (n == 0 || (n == 1 && path[at] == '.') ||
		    (n == 2 && path[at] == '.' && path[at + 1] == '.'))
			return 0;
		at = end + 1;
	}
	return 1;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return true;
	size_t cap2 = *cap ? *cap : 1024;
	while (cap2 < need)
		cap2 *= 2;
	void *n = realloc(*p, cap2 * elem);
	if (!n)
		return false;
	*p = n;
	*cap = cap2;
	return true;
}

/* The checks of one packed item at buf[at, used): its size and padding,
 * its kind and range, its path. Returns its item_bytes, or 0 if malformed. */
static size_t item_check(const uint8_t *buf, size_t at, size_t used, struct shardfs_hint_item *out)
{
	if (used - at < sizeof(*out))
		return 0;
	memcpy(out, buf + at, sizeof(*out));
	size_t bytes = out->item_bytes;
	if (bytes % 8 || bytes < sizeof(*out) + out->path_len || bytes > used - at ||
	    out->reserved0 ||
	    !sfs_hint_path_ok((const char *)buf + at + sizeof(*out), out->path_len))
		return 0;
	for (size_t k = sizeof(*out) + out->path_len; k < bytes; k++)
		if (buf[at + k])
			return 0; /* the padding is zeros */
	if (out->kind == SHARDFS_HINT_FILE)
		return out->offset || out->length ? 0 : bytes;
	if (out->kind != SHARDFS_HINT_RANGE || !out->length ||
	    out->offset + out->length < out->offset)
		return 0;
	return bytes;
}

int sfs_hint_items_append(struct sfs_hint_items *l, const uint8_t *buf, size_t used,
			  uint32_t n_items)
{
	struct shardfs_hint_item it;
	size_t at = 0, path_bytes = 0;

	/* First the whole batch is checked: a refused one leaves l as it was. */
	for (uint32_t k = 0; k < n_items; k++) {
		size_t bytes = item_check(buf, at, used, &it);
		if (!bytes)
			return -EINVAL;
		path_bytes += it.path_len;
		at += bytes;
	}
	if (at != used)
		return -EINVAL; /* bytes past the last item */
	if (l->n + n_items > SHARDFS_HINT_MAX_ITEMS)
		return -E2BIG;
	if (l->arena_len + path_bytes > UINT32_MAX)
		return -E2BIG; /* path offsets are 32-bit: ~4 GiB of paths */
	if (!grow((void **)&l->items, &l->cap, l->n + n_items, sizeof(*l->items)) ||
	    !grow((void **)&l->arena, &l->arena_cap, l->arena_len + path_bytes, 1))
		return -ENOMEM;
	at = 0;
	for (uint32_t k = 0; k < n_items; k++) {
		memcpy(&it, buf + at, sizeof(it));
		const char *path = (const char *)buf + at + sizeof(it);
		struct sfs_hint_item *prev = l->n ? &l->items[l->n - 1] : NULL;
		struct sfs_hint_item *dst = &l->items[l->n++];
		*dst = (struct sfs_hint_item){.offset = it.offset,
					      .length = it.length,
					      .path_len = it.path_len,
					      .kind = it.kind};
		if (prev && prev->path_len == it.path_len &&
		    !memcmp(l->arena + prev->path_off, path, it.path_len)) {
			dst->path_off = prev->path_off; /* records of one file: one path */
		} else {
			dst->path_off = (uint32_t)l->arena_len;
			memcpy(l->arena + l->arena_len, path, it.path_len);
			l->arena_len += it.path_len;
		}
		at += it.item_bytes;
	}
	return 0;
}

void sfs_hint_items_shrink(struct sfs_hint_items *l)
{
	struct sfs_hint_item *items = l->n ? realloc(l->items, l->n * sizeof(*items)) : NULL;
	char *arena = l->arena_len ? realloc(l->arena, l->arena_len) : NULL;

	if (items || !l->n) {
		if (!l->n)
			free(l->items);
		l->items = items;
		l->cap = l->n;
	}
	if (arena || !l->arena_len) {
		if (!l->arena_len)
			free(l->arena);
		l->arena = arena;
		l->arena_cap = l->arena_len;
	}
}

size_t sfs_hint_items_bytes(const struct sfs_hint_items *l)
{
	return l->cap * sizeof(*l->items) + l->arena_cap;
}

void sfs_hint_items_free(struct sfs_hint_items *l)
{
	free(l->items);
	free(l->arena);
	*l = (struct sfs_hint_items){0};
}
