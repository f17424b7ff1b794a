/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libshardfs — tools/client/libshardfs against a fake mount: ioctl(2) is
 * replaced (-Wl,--wrap=ioctl) by an in-memory daemon with a file, one shm
 * region and configurable limits. Checks batching, re-splitting to the
 * limits QUERY reports, placed per range, end of file, refusals, shm; and
 * the hint packer (shardfs_testing.h) alone, then shardfs_hint against a
 * fake daemon that reads every APPEND back as the ABI lays it out.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shardfs.h"
#include "shardfs_testing.h"
#include "tap.h"

#define FILE_BYTES   100000
#define REGION_BYTES 200000
static uint8_t file[FILE_BYTES], region[REGION_BYTES];
static unsigned lim_ranges = 64, n_stage_calls, n_query_calls;
static uint64_t lim_bytes;
static int fail_with; /* refuse every STAGE with this errno */
/* The region id the fake daemon knows; a lower one was registered with a
 * serving process that died (EOWNERDEAD), as after a keeper's restart. */
static uint64_t live_id = 7;

/* The fake daemon's hint lists: items as it read them back from APPEND
 * batches. hint_bad names the first rule a batch broke (NULL: none). */
#define HINT_MAX 30000
struct fake_item {
	uint16_t kind;
	uint64_t offset, length;
	char path[4096];
};
static struct fake_item *pending, *active;
static size_t n_pending, n_active;
static int have_pending;
static unsigned n_begin, n_append, n_commit, n_cancel, fail_append_at;
static uint64_t hint_max_items = SHARDFS_HINT_MAX_ITEMS;
static const char *hint_bad;

static int all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

static int fake_append(const struct shardfs_hint_append *a)
{
	size_t at = 0;

	if (a->size != sizeof(*a) || a->reserved0 || !all_zero(a->reserved, sizeof(a->reserved)))
		return hint_bad = "append: size or reserved", errno = EINVAL, -1;
	if (!have_pending)
		return hint_bad = "append without begin", errno = EINVAL, -1;
	if (a->used > SHARDFS_HINT_BUF || a->used % 8 || a->n_items == 0)
		return hint_bad = "append: used or n_items", errno = EINVAL, -1;
	for (uint32_t k = 0; k < a->n_items; k++) {
		struct shardfs_hint_item h;
		struct fake_item *it;

		if (at + sizeof(h) > a->used)
			return hint_bad = "item overruns used", errno = EINVAL, -1;
		memcpy(&h, a->buf + at, sizeof(h));
		if (h.item_bytes % 8 || h.item_bytes != ((sizeof(h) + h.path_len + 7) & ~7u) ||
		    at + h.item_bytes > a->used || h.reserved0 || h.path_len == 0 ||
		    h.path_len > 4095 ||
		    !all_zero(a->buf + at + sizeof(h) + h.path_len,
			      h.item_bytes - sizeof(h) - h.path_len))
			return hint_bad = "item bytes, path_len, reserved or padding",
			       errno = EINVAL, -1;
		if (h.kind == SHARDFS_HINT_FILE ? (h.offset || h.length)
						: (h.kind != SHARDFS_HINT_RANGE || !h.length))
			return hint_bad = "kind, offset, length", errno = EINVAL, -1;
		if (n_pending == HINT_MAX)
			return errno = E2BIG, -1;
		it = &pending[n_pending++];
		it->kind = h.kind;
		it->offset = h.offset;
		it->length = h.length;
		memcpy(it->path, a->buf + at + sizeof(h), h.path_len);
		it->path[h.path_len] = 0;
		at += h.item_bytes;
	}
	if (at != a->used || !all_zero(a->buf + at, SHARDFS_HINT_BUF - at))
		return hint_bad = "used does not end the items, or stale bytes after",
		       errno = EINVAL, -1;
	return 0;
}

static int fake_hint(unsigned long cmd, void *arg)
{
	if (cmd == SHARDFS_IOC_HINT_BEGIN) {
		struct shardfs_hint_begin *b = arg;
		n_begin++;
		if (b->size != sizeof(*b) || b->reserved0 ||
		    !all_zero(b->reserved, sizeof(b->reserved)))
			return hint_bad = "begin", errno = EINVAL, -1;
		have_pending = 1;
		n_pending = 0;
		b->max_items = hint_max_items;
		b->window = 1024;
		return 0;
	}
	if (cmd == SHARDFS_IOC_HINT_APPEND) {
		if (++n_append == fail_append_at)
			return errno = ENOMEM, -1;
		return fake_append(arg);
	}
	if (cmd == SHARDFS_IOC_HINT_COMMIT) {
		struct shardfs_hint_commit *c = arg;
		struct fake_item *t;
		n_commit++;
		if (c->size != sizeof(*c) || c->reserved0 ||
		    !all_zero(c->reserved, sizeof(c->reserved)))
			return hint_bad = "commit", errno = EINVAL, -1;
		if (!have_pending)
			return errno = EINVAL, -1;
		t = active;
		active = pending;
		pending = t;
		n_active = n_pending;
		n_pending = 0;
		have_pending = 0;
		c->n_items = n_active;
		return 0;
	}
	if (cmd == SHARDFS_IOC_HINT_CANCEL) {
		struct shardfs_hint_cancel *c = arg;
		n_cancel++;
		if (c->size != sizeof(*c) || c->reserved0 ||
		    !all_zero(c->reserved, sizeof(c->reserved)))
			return hint_bad = "cancel", errno = EINVAL, -1;
		n_active = n_pending = 0;
		have_pending = 0;
		return 0;
	}
	if (cmd == SHARDFS_IOC_HINT_STATUS) {
		struct shardfs_hint_status *st = arg;
		if (st->size != sizeof(*st) || !all_zero(st->reserved, sizeof(st->reserved)))
			return errno = EINVAL, -1;
		st->active = n_active > 0;
		st->n_items = n_active;
		st->position = 3;
		st->unknown_items = 1;
		return 0;
	}
	return errno = ENOTTY, -1;
}

int __real_ioctl(int fd, unsigned long cmd, ...);
int __wrap_ioctl(int fd, unsigned long cmd, ...);
int __wrap_ioctl(int fd, unsigned long cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (fd != 1000)
		return __real_ioctl(fd, cmd, arg);
	if (_IOC_NR(cmd) >= 0x30 && _IOC_NR(cmd) <= 0x34 && _IOC_TYPE(cmd) == SHARDFS_IOC_MAGIC)
		return fake_hint(cmd, arg);
	if (cmd == SHARDFS_IOC_QUERY) {
		struct shardfs_query *q = arg;
		n_query_calls++;
		if (q->size != sizeof(*q))
			return errno = EINVAL, -1;
		q->abi_version = 1;
		q->caps = SHARDFS_CAP_SHM;
		q->max_ranges = lim_ranges;
		q->max_stage_bytes = lim_bytes;
		return 0;
	}
	if (cmd == SHARDFS_IOC_STAGE) {
		struct shardfs_stage *st = arg;
		uint64_t sum = 0;
		n_stage_calls++;
		if (fail_with)
			return errno = fail_with, -1;
		if (st->region_id < live_id)
			return errno = EOWNERDEAD, -1;
		if (st->size != sizeof(*st) || st->n_ranges == 0 || st->n_ranges > lim_ranges ||
		    st->region_id != live_id || st->reserved0 || st->reserved[0] || st->reserved[3])
			return errno = EINVAL, -1;
		for (unsigned k = 0; k < st->n_ranges; k++)
			sum += st->ranges[k].length;
		if (lim_bytes && sum > lim_bytes)
			return errno = EINVAL, -1;
		st->bytes_placed = 0;
		for (unsigned k = 0; k < st->n_ranges; k++) {
			struct shardfs_range *r = &st->ranges[k];
			uint64_t n = r->file_offset >= FILE_BYTES ? 0 : FILE_BYTES - r->file_offset;
			if (r->region_offset + r->length > REGION_BYTES)
				return errno = ERANGE, -1;
			if (n > r->length)
				n = r->length;
			memcpy(region + r->region_offset, file + r->file_offset, n);
			r->placed = n;
			st->bytes_placed += n;
		}
		st->path = SHARDFS_PATH_CACHE | SHARDFS_PATH_SHM_COPY;
		return 0;
	}
	if (cmd == SHARDFS_IOC_REGISTER) {
		struct shardfs_region *r = arg;
		if (r->size != sizeof(*r) || r->kind != SHARDFS_REGION_SHM ||
		    strcmp(r->shm_name, "/abc") != 0)
			return errno = EINVAL, -1;
		r->region_id = live_id;
		return 0;
	}
	return errno = ENOTTY, -1;
}

static int check_ranges(struct shardfs_range *r, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t want = r[i].file_offset >= FILE_BYTES ? 0 : FILE_BYTES - r[i].file_offset;
		if (want > r[i].length)
			want = r[i].length;
		if (r[i].placed != want ||
		    memcmp(region + r[i].region_offset, file + r[i].file_offset, want) != 0)
			return 0;
	}
	return 1;
}

static struct shardfs_range rs[1000];

/* Hint items that the ABI refuses, each as the second of two items. */
static const struct shardfs_hint_spec bad_hints[] = {
    {"/abs/a.jpg", 0, 0}, {"a/../b", 0, 0}, {"../a", 0, 0},	  {"a/..", 0, 0}, {"./a", 0, 0},
    {"a/./b", 0, 0},	  {".", 0, 0},	    {"", 0, 0},		  {"a//b", 0, 0}, {"a/", 0, 0},
    {NULL, 0, 0},	  {"a", 5, 0},	    {"a", UINT64_MAX, 2},
};

/* Items i of the list the hint tests send: varied path lengths (so batches
 * end at different places), every seventh a range. */
#define N_HINTS 20000
static struct shardfs_hint_spec hints[N_HINTS];
static char hint_paths[N_HINTS][256];

static void test_hint_pack(void)
{
	uint8_t buf[SHARDFS_HINT_BUF];
	struct shardfs_hint_spec two[2] = {{"train/n01/a.JPEG", 0, 0}, {"..a/b..", 1u << 20, 4096}};
	struct shardfs_hint_item h;
	char longp[4097];
	uint32_t used;
	size_t k, bad = 0;

	k = shardfs_hint_pack(two, 2, buf, sizeof(buf), &used);
	memcpy(&h, buf, sizeof(h));
	ok(k == 2 && used == 40 + 32 && h.item_bytes == 40 && h.path_len == 16 &&
	       h.kind == SHARDFS_HINT_FILE && h.offset == 0 && h.length == 0 &&
	       memcmp(buf + 24, "train/n01/a.JPEG", 16) == 0,
	   "pack: a whole file: 24-byte fixed part, path, no padding at a multiple of 8");
	memcpy(&h, buf + 40, sizeof(h));
	ok(h.item_bytes == 32 && h.path_len == 7 && h.kind == SHARDFS_HINT_RANGE &&
	       h.offset == 1u << 20 && h.length == 4096 && memcmp(buf + 64, "..a/b..", 7) == 0 &&
	       buf[71] == 0 && all_zero(buf + used, sizeof(buf) - used),
	   "pack: a range after it, padded with zeros; the rest of buf zero");

	/* Paths of 100 bytes take 128; 16320 / 128 = 127 and a half. */
	memset(longp, 'p', 100);
	longp[100] = 0;
	for (unsigned i = 0; i < 200; i++)
		hints[i] = (struct shardfs_hint_spec){longp, 0, 0};
	k = shardfs_hint_pack(hints, 200, buf, sizeof(buf), &used);
	ok(k == 127 && used == 127 * 128, "pack: stops at the item that does not fit (%zu)", k);
	k = shardfs_hint_pack(hints, 0, buf, sizeof(buf), &used);
	ok(k == 0 && used == 0, "pack: no items, nothing");

	memset(longp, 'x', 4095);
	longp[4095] = 0;
	ok(shardfs_hint_item_bytes(&(struct shardfs_hint_spec){longp, 0, 0}) == 24 + 4095 + 1,
	   "item of a 4095-byte path: 4120 bytes");
	longp[4095] = 'x';
	longp[4096] = 0;
	ok(shardfs_hint_item_bytes(&(struct shardfs_hint_spec){longp, 0, 0}) == -EINVAL,
	   "item of a 4096-byte path: -EINVAL");
	for (size_t i = 0; i < sizeof(bad_hints) / sizeof(bad_hints[0]); i++)
		bad += shardfs_hint_item_bytes(&bad_hints[i]) == -EINVAL;
	ok(bad == sizeof(bad_hints) / sizeof(bad_hints[0]),
	   "item: absolute, '.', '..', empty, '//', trailing '/', NULL, offset without length, "
	   "past 2^64: -EINVAL (%zu)",
	   bad);
	ok(shardfs_hint_item_bytes(&(struct shardfs_hint_spec){".x/y./..z", UINT64_MAX - 1, 1}) ==
	       40,
	   "item: dots inside names and a range ending at 2^64 are fine");
}

static void test_hint_send(void)
{
	uint64_t got;
	size_t same = 0, bad = 0;
	unsigned expect = 1, fill = 0;
	struct shardfs_hint_status st;
	int err;

	pending = calloc(HINT_MAX, sizeof(*pending));
	active = calloc(HINT_MAX, sizeof(*active));
	if (!pending || !active) {
		ok(0, "hint: memory for the fake daemon");
		return;
	}
	for (unsigned i = 0; i < N_HINTS; i++) {
		unsigned len;

		snprintf(hint_paths[i], sizeof(hint_paths[i]), "d%u/%0*u.jpg", i % 1000,
			 (int)(i * 7919 % 200), i);
		hints[i] = (struct shardfs_hint_spec){hint_paths[i], 0, 0};
		if (i % 7 == 5)
			hints[i] = (struct shardfs_hint_spec){hint_paths[i], i * 4096ull, i + 1};
		len = (unsigned)shardfs_hint_item_bytes(&hints[i]);
		if (fill + len > SHARDFS_HINT_BUF) {
			expect++;
			fill = 0;
		}
		fill += len;
	}
	err = shardfs_hint(1000, hints, N_HINTS, &got);
	for (unsigned i = 0; i < n_active && i < N_HINTS; i++)
		same +=
		    strcmp(active[i].path, hints[i].path) == 0 &&
		    active[i].offset == hints[i].offset && active[i].length == hints[i].length &&
		    active[i].kind == (hints[i].length ? SHARDFS_HINT_RANGE : SHARDFS_HINT_FILE);
	ok(err == 0 && got == N_HINTS && n_active == N_HINTS && same == N_HINTS && !hint_bad,
	   "hint: %u items back in order, files and ranges (err %d, %s)", N_HINTS, err,
	   hint_bad ? hint_bad : "batches well formed");
	ok(n_begin == 1 && n_append == expect && n_commit == 1 && n_cancel == 0,
	   "hint: BEGIN, %u APPENDs filled greedily, COMMIT (%u APPENDs)", expect, n_append);

	for (size_t i = 0; i < sizeof(bad_hints) / sizeof(bad_hints[0]); i++) {
		struct shardfs_hint_spec two[2] = {{"ok/first.jpg", 0, 0}, bad_hints[i]};

		n_begin = n_append = n_commit = n_cancel = 0;
		bad += shardfs_hint(1000, two, 2, &got) == -EINVAL && got == 0 &&
		       n_begin + n_append + n_commit + n_cancel == 0;
	}
	ok(bad == sizeof(bad_hints) / sizeof(bad_hints[0]) && n_active == N_HINTS,
	   "hint: a malformed item: -EINVAL before any ioctl, the active list kept (%zu)", bad);

	n_begin = n_append = n_commit = n_cancel = 0;
	fail_append_at = 2;
	err = shardfs_hint(1000, hints, N_HINTS, &got);
	ok(err == -ENOMEM && got == 0 && n_append == 2 && n_commit == 0 && n_cancel == 1 &&
	       n_active == 0 && !have_pending,
	   "hint: the second APPEND refused: CANCEL, -ENOMEM, no list (%d)", err);
	fail_append_at = 0;

	n_begin = n_append = n_commit = n_cancel = 0;
	hint_max_items = 100;
	err = shardfs_hint(1000, hints, 101, &got);
	ok(err == -E2BIG && n_begin == 1 && n_append == 0 && n_cancel == 1,
	   "hint: more items than BEGIN's max_items: -E2BIG, CANCEL, no APPEND (%d)", err);
	hint_max_items = SHARDFS_HINT_MAX_ITEMS;

	err = shardfs_hint(1000, hints, 100, NULL);
	ok(err == 0 && n_active == 100, "hint: n_committed may be NULL (%d)", err);
	err = shardfs_hint_status(1000, &st);
	ok(err == 0 && st.size == sizeof(st) && st.active == 1 && st.n_items == 100 &&
	       st.position == 3 && st.unknown_items == 1,
	   "hint_status: the daemon's answer (%d)", err);
	n_cancel = 0;
	err = shardfs_hint(1000, hints, 0, &got);
	ok(err == 0 && got == 0 && n_cancel == 1 && n_active == 0, "hint of no items: CANCEL");
	ok(shardfs_hint_cancel(1000) == 0 && n_cancel == 2, "hint_cancel");
	ok(shardfs_hint(-1, hints, 3, &got) == -EBADF, "hint on a bad fd: -EBADF");
	free(pending);
	free(active);
}

int main(void)
{
	uint64_t placed, rid;
	uint32_t path;
	int err;

	for (unsigned i = 0; i < FILE_BYTES; i++)
		file[i] = (uint8_t)(i * 2654435761u >> 13);

	err = shardfs_register_shm(1000, "abc", 0, REGION_BYTES, &rid);
	ok(err == 0 && rid == 7, "register: name gets its leading slash, id back (%d)", err);

	/* A target across a restart: the old id answers EOWNERDEAD, the target
	 * registers again and stages; a bare region id just fails. */
	struct shardfs_target tg;
	struct shardfs_range one = {0, 500, 1000, 0};
	err = shardfs_target_shm(1000, "/abc", 0, REGION_BYTES, &tg);
	ok(err == 0 && tg.region.region_id == 7, "target: registered (%d)", err);
	live_id = 9; /* the serving process died; its keeper started another */
	err = shardfs_stage(1000, 7, &one, 1, &placed, NULL);
	ok(err == -EOWNERDEAD, "after a restart a bare id fails with EOWNERDEAD (%d)", err);
	memset(region, 0, sizeof(region));
	err = shardfs_target_stage(1000, &tg, &one, 1, &placed, &path);
	ok(err == 0 && tg.region.region_id == 9 && placed == 1000 && check_ranges(&one, 1),
	   "target: registered again (id 9) and staged, bytes exact (%d)", err);
	live_id = 7;

	/* 200 ranges of 997 bytes: 64 + 64 + 64 + 8 */
	for (unsigned i = 0; i < 200; i++)
		rs[i] = (struct shardfs_range){i * 997, (i * 331) % 90000, 997, 12345};
	n_stage_calls = n_query_calls = 0;
	err = shardfs_stage(1000, 7, rs, 200, &placed, &path);
	ok(err == 0 && n_stage_calls == 4 && n_query_calls == 0,
	   "200 ranges: 4 ioctls, no query (err %d, %u calls)", err, n_stage_calls);
	ok(placed == 200 * 997 && check_ranges(rs, 200), "200 ranges: placed and bytes exact");
	ok(path == (SHARDFS_PATH_CACHE | SHARDFS_PATH_SHM_COPY), "path bits ORed");

	/* a mount that takes 16 ranges and 10000 bytes per call */
	lim_ranges = 16;
	lim_bytes = 10000;
	memset(region, 0, sizeof(region));
	for (unsigned i = 0; i < 40; i++)
		rs[i] = (struct shardfs_range){i * 3001, i * 2000 + 7, 3001, 0};
	rs[40] = (struct shardfs_range){150000, 70000, 25000, 0}; /* one range: 3 pieces */
	rs[41] = (struct shardfs_range){180000, FILE_BYTES - 10, 15000, 0}; /* EOF, in pieces */
	n_stage_calls = n_query_calls = 0;
	err = shardfs_stage(1000, 7, rs, 42, &placed, &path);
	ok(err == 0 && n_query_calls == 1, "over the limits: one query, then fits (err %d)", err);
	ok(check_ranges(rs, 42), "re-split: placed per range and bytes exact");
	ok(placed == 40 * 3001 + 25000 + 10, "re-split: total %llu", (unsigned long long)placed);
	diag("%u STAGE calls", n_stage_calls);
	ok(n_stage_calls <= 1 + (40 * 3001 + 25000 + 15000) / 10000 + 3, "re-split: few calls");

	/* a genuine refusal: -ERANGE back, one query, nothing retried forever */
	lim_ranges = 64;
	lim_bytes = 0;
	rs[0] = (struct shardfs_range){REGION_BYTES - 10, 0, 100, 0};
	n_stage_calls = n_query_calls = 0;
	err = shardfs_stage(1000, 7, rs, 1, &placed, NULL);
	ok(err == -ERANGE && n_stage_calls == 1 && n_query_calls == 1 && placed == 0,
	   "out of region: -ERANGE (%d), %u calls", err, n_stage_calls);
	/* a failure after a batch: earlier placed kept */
	for (unsigned i = 0; i < 100; i++)
		rs[i] = (struct shardfs_range){i * 100, i * 100, 100, 0};
	rs[99].region_offset = REGION_BYTES;
	err = shardfs_stage(1000, 7, rs, 100, &placed, NULL);
	ok(err == -ERANGE && placed == 6400 && rs[0].placed == 100 && rs[70].placed == 0,
	   "failure in batch 2: batch 1 placed kept (%llu)", (unsigned long long)placed);
	fail_with = ENOENT;
	err = shardfs_stage(1000, 7, rs, 3, &placed, NULL);
	ok(err == -ENOENT, "refusal errno passed through (%d)", err);
	fail_with = 0;
	err = shardfs_stage(1000, 7, rs, 0, &placed, &path);
	ok(err == 0 && placed == 0 && path == 0, "n == 0: nothing, 0");
	err = shardfs_stage(-1, 7, rs, 1, &placed, NULL);
	ok(err == -EBADF, "bad fd: -EBADF (%d)", err);
	struct shardfs_query q;
	ok(shardfs_query(1000, &q) == 0 && q.size == sizeof(q) && q.abi_version == 1, "query");
	struct shardfs_warm w;
	ok(shardfs_warm(1000, &w) == -ENOTTY, "warm: daemon's ENOTTY passed through");

	/* shm helpers */
	char name[64], big[300];
	void *map = NULL;
	snprintf(name, sizeof(name), "shardfs-test-%d", (int)getpid());
	err = shardfs_shm_create(name, 1 << 20, &map);
	ok(err == 0 && map, "shm_create (%d)", err);
	if (map)
		memset(map, 1, 1 << 20);
	ok(shardfs_shm_create(name, 4096, NULL) == -EEXIST, "shm_create: -EEXIST");
	ok(shardfs_shm_destroy(name, map, 1 << 20) == 0, "shm_destroy");
	ok(shardfs_shm_destroy(name, NULL, 0) == -ENOENT, "shm_destroy again: -ENOENT");
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	ok(shardfs_shm_create(big, 4096, NULL) == -ENAMETOOLONG, "long name: -ENAMETOOLONG");
	ok(shardfs_register_shm(1000, big, 0, 1, &rid) == -ENAMETOOLONG, "register: -ENAMETOOLONG");
	ok(shardfs_shm_create("", 4096, NULL) == -EINVAL, "empty name: -EINVAL");
	ok(shardfs_shm_create(name, 0, NULL) == -EINVAL, "0 bytes: -EINVAL");

	test_hint_pack();
	test_hint_send();
	return tap_done();
}
