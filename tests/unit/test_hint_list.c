// SPDX-License-Identifier: Apache-2.0
/*
 * test_hint_list — fs/hints/hint_list.c alone: batches of hint items as the ABI
 * packs them (shardfs_ioctl.h), every refusal, the limit, paths shared by
 * the records of one file.
 */
#include "../../fs/hints/hint_list.h"
#include <shardfs/shardfs_ioctl.h>
#include "tap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct batch {
	uint8_t buf[SHARDFS_HINT_BUF];
	size_t used;
	uint32_t n;
};

/* Pack one item as a trainer would; returns its offset in the batch. */
static size_t put(struct batch *b, const char *path, uint16_t kind, uint64_t off, uint64_t len)
{
	struct shardfs_hint_item it = {
	    .path_len = (uint16_t)strlen(path), .kind = kind, .offset = off, .length = len};
	size_t at = b->used;
	it.item_bytes = (uint16_t)((sizeof(it) + it.path_len + 7) & ~7u);
	memset(b->buf + at, 0, it.item_bytes);
	memcpy(b->buf + at, &it, sizeof(it));
	memcpy(b->buf + at + sizeof(it), path, it.path_len);
	b->used += it.item_bytes;
	b->n++;
	return at;
}

static int append(struct sfs_hint_items *l, struct batch *b)
{
	return sfs_hint_items_append(l, b->buf, b->used, b->n);
}

static const char *path_of(const struct sfs_hint_items *l, size_t i, char *out)
{
	memcpy(out, l->arena + l->items[i].path_off, l->items[i].path_len);
	out[l->items[i].path_len] = 0;
	return out;
}

static void test_good_batches(void)
{
	struct sfs_hint_items l = {0};
	struct batch b = {0};
	char p[4096];

	put(&b, "train/n01/a.JPEG", SHARDFS_HINT_FILE, 0, 0);
	put(&b, "train.rec", SHARDFS_HINT_RANGE, 4096, 110000);
	put(&b, "train.rec", SHARDFS_HINT_RANGE, 0, 4096);
	put(&b, "x", SHARDFS_HINT_FILE, 0, 0);
	ok(append(&l, &b) == 0, "a batch of files and ranges is taken");
	ok(l.n == 4, "four items");
	ok(!strcmp(path_of(&l, 0, p), "train/n01/a.JPEG") && !strcmp(path_of(&l, 3, p), "x"),
	   "paths as sent");
	ok(l.items[1].offset == 4096 && l.items[1].length == 110000 &&
	       l.items[1].kind == SHARDFS_HINT_RANGE,
	   "a range's offset and length");
	ok(l.items[1].path_off == l.items[2].path_off, "records of one file share their path");
	ok(l.arena_len == strlen("train/n01/a.JPEG") + strlen("train.rec") + 1,
	   "the arena holds each path once");
	struct batch b2 = {0};
	put(&b2, "x", SHARDFS_HINT_RANGE, 1, 1);
	ok(append(&l, &b2) == 0 && l.n == 5, "a second batch appends");
	ok(l.items[4].path_off == l.items[3].path_off, "a path shared across batches");
	struct batch empty = {0};
	ok(append(&l, &empty) == 0 && l.n == 5, "an empty batch is no error");
	sfs_hint_items_free(&l);
}

/* One malformed batch: refused with EINVAL, and l as it was. */
static void refused(struct sfs_hint_items *l, struct batch *b, const char *what)
{
	size_t n = l->n, arena = l->arena_len;
	int rc = append(l, b);
	ok(rc == -EINVAL && l->n == n && l->arena_len == arena, "refused: %s (rc %d)", what, rc);
}

static void test_malformed(void)
{
	struct sfs_hint_items l = {0};
	struct batch b;
	const char *bad_paths[] = {"/abs", "a//b", "a/", "./a", "a/./b", "a/..", "..", "."};

	for (size_t k = 0; k < sizeof(bad_paths) / sizeof(bad_paths[0]); k++) {
		memset(&b, 0, sizeof(b));
		put(&b, "good", SHARDFS_HINT_FILE, 0, 0);
		put(&b, bad_paths[k], SHARDFS_HINT_FILE, 0, 0);
		refused(&l, &b, bad_paths[k]);
	}
	memset(&b, 0, sizeof(b));
	put(&b, "f", 7, 0, 0);
	refused(&l, &b, "an unknown kind");
	memset(&b, 0, sizeof(b));
	put(&b, "f", SHARDFS_HINT_FILE, 5, 0);
	refused(&l, &b, "a whole-file item with an offset");
	memset(&b, 0, sizeof(b));
	put(&b, "f", SHARDFS_HINT_RANGE, 5, 0);
	refused(&l, &b, "a range of no bytes");
	memset(&b, 0, sizeof(b));
	put(&b, "f", SHARDFS_HINT_RANGE, UINT64_MAX - 1, 5);
	refused(&l, &b, "a range that wraps");
	memset(&b, 0, sizeof(b));
	size_t at = put(&b, "f", SHARDFS_HINT_FILE, 0, 0);
	b.buf[at + 6] = 1; /* reserved0 */
	refused(&l, &b, "reserved0 set");
	memset(&b, 0, sizeof(b));
	at = put(&b, "f", SHARDFS_HINT_FILE, 0, 0);
	b.buf[at + 25] = 'x'; /* the padding after the path */
	refused(&l, &b, "padding not zero");
	memset(&b, 0, sizeof(b));
	at = put(&b, "f", SHARDFS_HINT_FILE, 0, 0);
	b.buf[at] = 20; /* item_bytes not a multiple of 8 */
	refused(&l, &b, "item_bytes not a multiple of 8");
	memset(&b, 0, sizeof(b));
	at = put(&b, "ff", SHARDFS_HINT_FILE, 0, 0);
	b.buf[at + 2] = 200; /* path_len past item_bytes */
	refused(&l, &b, "a path past its item");
	memset(&b, 0, sizeof(b));
	put(&b, "f", SHARDFS_HINT_FILE, 0, 0);
	b.n = 2;
	refused(&l, &b, "more items counted than packed");
	memset(&b, 0, sizeof(b));
	put(&b, "f", SHARDFS_HINT_FILE, 0, 0);
	put(&b, "g", SHARDFS_HINT_FILE, 0, 0);
	b.n = 1;
	refused(&l, &b, "bytes past the last item");
	memset(&b, 0, sizeof(b));
	at = put(&b, "fg", SHARDFS_HINT_FILE, 0, 0);
	b.buf[at + sizeof(struct shardfs_hint_item) + 1] = 0; /* a NUL inside the path */
	refused(&l, &b, "a NUL in the path");
	ok(l.n == 0 && l.arena_len == 0, "nothing kept from refused batches");
	sfs_hint_items_free(&l);
}

static void test_limit(void)
{
	struct sfs_hint_items l = {0};
	struct batch *b = calloc(1, sizeof(*b));
	int rc = 0;

	/* 2^21 items of one 2-byte path: 680 per batch of 24-byte items... the
	 * path is shared, so the list stays ~50 MiB. */
	while (b->used + 32 <= sizeof(b->buf))
		put(b, "ab", SHARDFS_HINT_RANGE, 0, 1);
	uint32_t per = b->n;
	size_t batches = 0;
	while (l.n + per <= SHARDFS_HINT_MAX_ITEMS && (rc = append(&l, b)) == 0)
		batches++;
	ok(rc == 0, "%zu batches of %u items taken (%zu items)", batches, per, l.n);
	size_t before = l.n;
	rc = append(&l, b);
	ok(rc == -E2BIG && l.n == before, "past SHARDFS_HINT_MAX_ITEMS: E2BIG, nothing added");
	ok(l.arena_len == 2, "one path kept for every record");
	sfs_hint_items_shrink(&l);
	ok(sfs_hint_items_bytes(&l) == l.n * sizeof(struct sfs_hint_item) + 2 &&
	       l.items[l.n - 1].path_len == 2,
	   "shrunk to its use, items intact");
	diag("list memory: %zu bytes for %zu items", sfs_hint_items_bytes(&l), l.n);
	free(b);
	sfs_hint_items_free(&l);
}

int main(void)
{
	test_good_batches();
	test_malformed();
	test_limit();
	return tap_done();
}
