/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libshardfs — tools/libshardfs against a fake mount: ioctl(2) is
 * replaced (-Wl,--wrap=ioctl) by an in-memory daemon with a file, one shm
 * region and configurable limits. Checks batching, re-splitting to the
 * limits QUERY reports, placed per range, end of file, refusals, shm.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shardfs.h"
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
	return tap_done();
}
