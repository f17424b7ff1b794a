/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shardfs.c — libshardfs: the ioctls of a shardfs mount for trainers, and
 * shared-memory staging buffers. Contracts in shardfs.h. No state, no
 * threads, no allocation; only libc.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fallocate */
#endif
#include "shardfs.h"

#include "shardfs_testing.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The ABI promises these; a header edit that breaks them fails the build. */
_Static_assert(sizeof(struct shardfs_query) % 8 == 0, "query: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_region) % 8 == 0, "region: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_stage) % 8 == 0, "stage: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_stage) <= 16383, "stage: FUSE ioctl limit");
_Static_assert(sizeof(struct shardfs_region) <= 16383, "region: FUSE ioctl limit");
_Static_assert(sizeof(struct shardfs_hint_append) <= 16383, "hint append: FUSE ioctl limit");
_Static_assert(sizeof(struct shardfs_hint_item) % 8 == 0, "hint item: 8-byte multiple");

/* "/name" of at most 255 bytes in out[256] from name with or without the
 * leading slash. Returns 0, -EINVAL (NULL, empty) or -ENAMETOOLONG. */
static int shm_name_norm(const char *name, char out[256])
{
	size_t len;

	if (!name)
		return -EINVAL;
	if (name[0] == '/')
		name++;
	len = strlen(name);
	if (len == 0)
		return -EINVAL;
	if (len + 1 > 255)
		return -ENAMETOOLONG;
	out[0] = '/';
	memcpy(out + 1, name, len + 1);
	return 0;
}

static int sfs_ioctl(int fd, unsigned long cmd, void *arg)
{
	if (ioctl(fd, cmd, arg) < 0)
		return -errno;
	return 0;
}

int shardfs_query(int fd, struct shardfs_query *out)
{
	memset(out, 0, sizeof(*out));
	out->size = sizeof(*out);
	return sfs_ioctl(fd, SHARDFS_IOC_QUERY, out);
}

static int do_register(int fd, struct shardfs_region *r, uint64_t *region_id)
{
	int err;

	r->size = sizeof(*r);
	err = sfs_ioctl(fd, SHARDFS_IOC_REGISTER, r);
	if (err == 0 && region_id)
		*region_id = r->region_id;
	return err;
}

/* REGISTER arguments of a shm region in r. Returns 0 or -errno. */
static int shm_region(struct shardfs_region *r, const char *shm_name, uint64_t offset,
		      uint64_t length)
{
	memset(r, 0, sizeof(*r));
	r->kind = SHARDFS_REGION_SHM;
	r->offset = offset;
	r->length = length;
	return shm_name_norm(shm_name, r->shm_name);
}

int shardfs_register_shm(int fd, const char *shm_name, uint64_t offset, uint64_t length,
			 uint64_t *region_id)
{
	struct shardfs_region r;
	int err = shm_region(&r, shm_name, offset, length);

	return err ? err : do_register(fd, &r, region_id);
}

/* REGISTER arguments of a CUDA region in r. Returns 0 or -EINVAL. */
static int cuda_region(struct shardfs_region *r, const void *ipc_handle64, const uint8_t uuid[16],
		       uint64_t offset, uint64_t length, uint64_t alloc_size)
{
	if (!ipc_handle64 || !uuid)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->kind = SHARDFS_REGION_CUDA;
	r->offset = offset;
	r->length = length;
	r->alloc_size = alloc_size;
	memcpy(r->cuda_ipc_handle, ipc_handle64, sizeof(r->cuda_ipc_handle));
	memcpy(r->gpu_uuid, uuid, sizeof(r->gpu_uuid));
	return 0;
}

int shardfs_register_cuda(int fd, const void *ipc_handle64, const uint8_t uuid[16], uint64_t offset,
			  uint64_t length, uint64_t alloc_size, uint64_t *region_id)
{
	struct shardfs_region r;
	int err = cuda_region(&r, ipc_handle64, uuid, offset, length, alloc_size);

	return err ? err : do_register(fd, &r, region_id);
}

int shardfs_target_shm(int fd, const char *shm_name, uint64_t offset, uint64_t length,
		       struct shardfs_target *t)
{
	int err = shm_region(&t->region, shm_name, offset, length);

	return err ? err : do_register(fd, &t->region, NULL);
}

int shardfs_target_cuda(int fd, const void *ipc_handle64, const uint8_t uuid[16], uint64_t offset,
			uint64_t length, uint64_t alloc_size, struct shardfs_target *t)
{
	int err = cuda_region(&t->region, ipc_handle64, uuid, offset, length, alloc_size);

	return err ? err : do_register(fd, &t->region, NULL);
}

/*
 * Batches: the next piece to send is ranges[i] from byte `done` of it. A
 * batch takes pieces until it holds max_ranges of them or max_bytes bytes
 * (0: no byte limit); only a byte limit cuts a range into pieces. idx[]
 * maps each piece back to its range so that placed adds up per range.
 */
int shardfs_stage(int fd, uint64_t region_id, struct shardfs_range *ranges, unsigned n,
		  uint64_t *bytes_placed, uint32_t *path)
{
	struct shardfs_stage st;
	unsigned idx[SHARDFS_STAGE_MAX_RANGES];
	unsigned max_ranges = SHARDFS_STAGE_MAX_RANGES;
	uint64_t max_bytes = 0, total = 0, done = 0;
	uint32_t bits = 0;
	bool asked = false;
	unsigned i = 0;
	int err = 0;

	for (unsigned k = 0; k < n; k++)
		ranges[k].placed = 0;
	while (i < n) {
		unsigned first_i = i, m = 0;
		uint64_t first_done = done, batch_bytes = 0;

		memset(&st, 0, sizeof(st));
		while (i < n && m < max_ranges && !(max_bytes && batch_bytes >= max_bytes)) {
			uint64_t take = ranges[i].length - done;

			if (max_bytes && take > max_bytes - batch_bytes)
				take = max_bytes - batch_bytes;
			st.ranges[m].region_offset = ranges[i].region_offset + done;
			st.ranges[m].file_offset = ranges[i].file_offset + done;
			st.ranges[m].length = take;
			idx[m++] = i;
			batch_bytes += take;
			done += take;
			if (done == ranges[i].length) {
				i++;
				done = 0;
			}
		}
		st.size = sizeof(st);
		st.n_ranges = m;
		st.region_id = region_id;
		err = sfs_ioctl(fd, SHARDFS_IOC_STAGE, &st);
		if (err) {
			struct shardfs_query q;

			/* Refused: if the batch broke the mount's limits, learn
			 * them once and send this batch again, split to fit. */
			if (!asked && shardfs_query(fd, &q) == 0 &&
			    ((q.max_ranges && m > q.max_ranges) ||
			     (q.max_stage_bytes && batch_bytes > q.max_stage_bytes))) {
				if (q.max_ranges && q.max_ranges < max_ranges)
					max_ranges = q.max_ranges;
				max_bytes = q.max_stage_bytes;
				i = first_i;
				done = first_done;
				asked = true;
				err = 0;
				continue;
			}
			break;
		}
		for (unsigned k = 0; k < m; k++) {
			ranges[idx[k]].placed += st.ranges[k].placed;
			total += st.ranges[k].placed;
		}
		bits |= st.path;
	}
	if (bytes_placed)
		*bytes_placed = total;
	if (path)
		*path = bits;
	return err;
}

int shardfs_target_stage(int fd, struct shardfs_target *t, struct shardfs_range *ranges, unsigned n,
			 uint64_t *bytes_placed, uint32_t *path)
{
	int err = shardfs_stage(fd, t->region.region_id, ranges, n, bytes_placed, path);

	if (err != -EOWNERDEAD)
		return err;
	/* The serving process that held the registration died and its keeper
	 * started another: register again (a new id) and send it all again. */
	err = do_register(fd, &t->region, NULL);
	return err ? err : shardfs_stage(fd, t->region.region_id, ranges, n, bytes_placed, path);
}

int shardfs_unregister(int fd, uint64_t region_id)
{
	struct shardfs_unregister u;

	memset(&u, 0, sizeof(u));
	u.size = sizeof(u);
	u.region_id = region_id;
	return sfs_ioctl(fd, SHARDFS_IOC_UNREGISTER, &u);
}

int shardfs_warm(int fd, struct shardfs_warm *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	return sfs_ioctl(fd, SHARDFS_IOC_WARM, st);
}

#define HINT_PATH_MAX 4095 /* shardfs_hint_item.path_len */

/* The length of a path the hint ABI accepts (every component non-empty,
 * none "." or ".."), or 0 for one it refuses. */
static size_t hint_path_len(const char *path)
{
	size_t len, n;
	const char *c, *end, *slash;

	if (!path)
		return 0;
	len = strnlen(path, HINT_PATH_MAX + 1);
	if (len == 0 || len > HINT_PATH_MAX)
		return 0;
	end = path + len;
	for (c = path;; c = slash + 1) {
		slash = memchr(c, '/', (size_t)(end - c));
		n = (size_t)((slash ? slash : end) - c);
		if (n == 0 || (c[0] == '.' && (n == 1 || (n == 2 && c[1] == '.'))))
			return 0;
		if (!slash)
			return len;
	}
}

int shardfs_hint_item_bytes(const struct shardfs_hint_spec *it)
{
	size_t len = hint_path_len(it->path);

	if (len == 0)
		return -EINVAL;
	if (it->length == 0 ? it->offset != 0 : it->offset > UINT64_MAX - it->length)
		return -EINVAL;
	return (int)((sizeof(struct shardfs_hint_item) + len + 7) & ~(size_t)7);
}

size_t shardfs_hint_pack(const struct shardfs_hint_spec *items, size_t n, uint8_t *buf,
			 size_t buf_bytes, uint32_t *used)
{
	size_t at = 0, k;

	for (k = 0; k < n; k++) {
		struct shardfs_hint_item h;
		int bytes = shardfs_hint_item_bytes(&items[k]);

		assert(bytes > 0);
		if (at + (size_t)bytes > buf_bytes)
			break;
		memset(&h, 0, sizeof(h));
		h.item_bytes = (uint16_t)bytes;
		h.path_len = (uint16_t)strlen(items[k].path);
		h.kind = items[k].length ? SHARDFS_HINT_RANGE : SHARDFS_HINT_FILE;
		h.offset = items[k].offset;
		h.length = items[k].length;
		memcpy(buf + at, &h, sizeof(h));
		memcpy(buf + at + sizeof(h), items[k].path, h.path_len);
		memset(buf + at + sizeof(h) + h.path_len, 0,
		       (size_t)bytes - sizeof(h) - h.path_len);
		at += (size_t)bytes;
	}
	memset(buf + at, 0, buf_bytes - at);
	*used = (uint32_t)at;
	return k;
}

int shardfs_hint_cancel(int fd)
{
	struct shardfs_hint_cancel c;

	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	return sfs_ioctl(fd, SHARDFS_IOC_HINT_CANCEL, &c);
}

int shardfs_hint(int fd, const struct shardfs_hint_spec *items, size_t n, uint64_t *n_committed)
{
	struct shardfs_hint_begin b;
	struct shardfs_hint_append a;
	struct shardfs_hint_commit c;
	size_t i;
	int err;

	if (n_committed)
		*n_committed = 0;
	if (n && !items)
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (shardfs_hint_item_bytes(&items[i]) < 0)
			return -EINVAL;
	if (n == 0)
		return shardfs_hint_cancel(fd);

	memset(&b, 0, sizeof(b));
	b.size = sizeof(b);
	err = sfs_ioctl(fd, SHARDFS_IOC_HINT_BEGIN, &b);
	if (err)
		return err;
	if (b.max_items && n > b.max_items) {
		err = -E2BIG;
		goto err_cancel;
	}
	memset(&a, 0, sizeof(a));
	for (i = 0; i < n;) {
		uint32_t used;
		size_t k = shardfs_hint_pack(items + i, n - i, a.buf, sizeof(a.buf), &used);

		assert(k > 0); /* one item takes at most 24 + 4095 + 7 bytes */
		a.size = sizeof(a);
		a.n_items = (uint32_t)k;
		a.used = used;
		err = sfs_ioctl(fd, SHARDFS_IOC_HINT_APPEND, &a);
		if (err)
			goto err_cancel;
		i += k;
	}
	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	err = sfs_ioctl(fd, SHARDFS_IOC_HINT_COMMIT, &c);
	if (err)
		goto err_cancel;
	if (n_committed)
		*n_committed = c.n_items;
	return 0;

err_cancel:
	/* The active list, if any, was the order of another epoch: drop both. */
	shardfs_hint_cancel(fd);
	return err;
}

int shardfs_hint_status(int fd, struct shardfs_hint_status *out)
{
	memset(out, 0, sizeof(*out));
	out->size = sizeof(*out);
	return sfs_ioctl(fd, SHARDFS_IOC_HINT_STATUS, out);
}

int shardfs_shm_create(const char *name, size_t bytes, void **map)
{
	char norm[256];
	void *p;
	int fd, err;

	err = shm_name_norm(name, norm);
	if (err)
		return err;
	if (bytes == 0)
		return -EINVAL;
	if ((off_t)bytes < 0)
		return -EFBIG;
	fd = shm_open(norm, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)bytes) < 0) {
		err = -errno;
		goto err_unlink;
	}
	/* Reserve the pages now: a full /dev/shm then fails here with ENOSPC
	 * instead of SIGBUS in whoever first writes to the mapping. */
	if (fallocate(fd, 0, 0, (off_t)bytes) < 0 && errno != EOPNOTSUPP) {
		err = -errno;
		goto err_unlink;
	}
	if (map) {
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			err = -errno;
			goto err_unlink;
		}
		*map = p;
	}
	close(fd);
	return 0;

err_unlink:
	close(fd);
	shm_unlink(norm);
	return err;
}

int shardfs_shm_destroy(const char *name, void *map, size_t bytes)
{
	char norm[256];
	int err;

	if (map)
		munmap(map, bytes);
	err = shm_name_norm(name, norm);
	if (err)
		return err;
	if (shm_unlink(norm) < 0)
		return -errno;
	return 0;
}
