// SPDX-License-Identifier: Apache-2.0
/*
 * test_ioctl — fs/ops/ioctl.c alone: every ioctl's argument validation
 * (size fields, buffers, reserved words, kinds, bounds, who may call), its
 * reply (exactly one per request), and the staging counters by target and
 * by refusal reason (fs/counters.c, the table the stats file labels them
 * with, is linked as it is).
 *
 * Its neighbours are faked here: libfuse's request and reply calls (a
 * request is this file's struct fuse_req), the open-file lookup
 * (sfs_open_file_of), the inode table, cache/staging's regions (a region
 * is a buffer here), cache/prefetch's reads (a file of a known pattern),
 * cache/store's listing and eviction, the hint lists and the job table.
 * Owns: nothing. Single-threaded.
 */
#include "tap.h"
#include "../../fs/ops/ops.h"
#include "../../fs/hints/hints.h"
#include "../../cache/common/blocking.h"
#include <shardfs/shardfs_ioctl.h>

#include <errno.h>
#include <unistd.h>

/* --- fake libfuse: one request, its replies counted ------------------------ */

struct fuse_req {
	struct sfs_fs *fs;
	struct fuse_ctx ctx;
	int replies; /* must end at 1 */
	int err;     /* the errno replied, 0 for an ioctl reply */
	size_t out_len;
	union {
		struct shardfs_query q;
		struct shardfs_region r;
		struct shardfs_stage s;
		struct shardfs_warm w;
		struct shardfs_hint_begin b;
		struct shardfs_cache_evict e;
		char bytes[32768];
	} out;
};

void *fuse_req_userdata(fuse_req_t req) { return req->fs; }

const struct fuse_ctx *fuse_req_ctx(fuse_req_t req) { return &req->ctx; }

int fuse_req_getgroups(fuse_req_t req, int size, gid_t list[])
{
	(void)req;
	(void)size;
	(void)list;
	return 0;
}

int fuse_reply_err(fuse_req_t req, int err)
{
	req->replies++;
	req->err = err;
	return 0;
}

int fuse_reply_ioctl(fuse_req_t req, int result, const void *buf, size_t size)
{
	req->replies++;
	req->err = 0;
	req->out_len = size;
	if (size && size <= sizeof(req->out)) /* an empty reply may have no buffer */
		memcpy(&req->out, buf, size);
	(void)result;
	return 0;
}

/* --- fake fs/inode and the open-file lookup -------------------------------- */

#define FILE_INO  100
#define FILE_SIZE 20000
static struct sfs_inode *file_inode, *root_inode;
static struct sfs_open_file *the_of;

struct sfs_inode *sfs_inode_root(sfs_inode_table *t)
{
	(void)t;
	return root_inode;
}

struct sfs_inode *sfs_inode_by_id(const sfs_inode_table *t, uint64_t id)
{
	(void)t;
	return id == FILE_INO ? file_inode : NULL;
}

void sfs_inode_lock(const struct sfs_inode *ino) { (void)ino; }
void sfs_inode_unlock(const struct sfs_inode *ino) { (void)ino; }

struct sfs_open_file *sfs_open_file_of(sfs_prefetch *p, struct sfs_inode *i, uint64_t fh,
				       uint64_t first_region_id)
{
	(void)p;
	(void)first_region_id;
	return i == file_inode && fh == 1 ? the_of : NULL;
}

/* --- fake cache/prefetch: the file's byte k is (k * 7) & 0xff -------------- */

static char file_bytes[FILE_SIZE];

ssize_t sfs_pf_read(sfs_pf_file *f, uint64_t off, size_t len, struct sfs_pf_view *v)
{
	(void)f;
	memset(v, 0, sizeof(*v));
	if (off >= FILE_SIZE)
		return 0;
	size_t n = FILE_SIZE - off < len ? FILE_SIZE - off : len;
	v->iov[0] = (struct iovec){file_bytes + off, n};
	v->n_iov = 1;
	v->bytes = n;
	v->cache_bytes = off < FILE_SIZE / 2 ? n : 0; /* the first half is "cached" */
	return (ssize_t)n;
}

ssize_t sfs_pf_read_into(sfs_pf_file *f, uint64_t off, size_t len, void *buf, size_t buf_len,
			 const char **data, size_t *cache_bytes)
{
	(void)f, (void)off, (void)len, (void)buf, (void)buf_len, (void)data, (void)cache_bytes;
	return -EIO; /* only the CUDA target reads this way */
}

void sfs_pf_view_release(sfs_pf_file *f, struct sfs_pf_view *v) { (void)f, (void)v; }

int sfs_pf_file_warm(sfs_pf_file *f, bool *active)
{
	(void)f;
	*active = true;
	return 0;
}

uint64_t sfs_pf_file_cached_bytes(sfs_pf_file *f)
{
	(void)f;
	return 4096;
}

/* --- fake cache/staging: a region is a buffer -------------------------------- */

#define REGION_BUF 65536
struct sfs_stage_region {
	uint64_t length; /* may be larger than buf: then nothing is put there */
	uid_t uid;
	int puts;
	char buf[REGION_BUF];
};
static int n_regions_live;
static uid_t shm_uid_asked;

unsigned sfs_staging_gpu_count(sfs_staging *st)
{
	(void)st;
	return 0;
}

int sfs_staging_gpu_uuid(sfs_staging *st, unsigned index, uint8_t uuid[16])
{
	(void)st, (void)index, (void)uuid;
	return -ENODEV;
}

int sfs_stage_region_shm(sfs_staging *st, const char *name, uint64_t offset, uint64_t length,
			 uid_t uid, sfs_stage_region **out)
{
	(void)st, (void)offset;
	shm_uid_asked = uid;
	if (!strcmp(name, "/missing"))
		return -ENOENT;
	sfs_stage_region *r = calloc(1, sizeof(*r));
	r->length = length;
	r->uid = uid;
	n_regions_live++;
	*out = r;
	return 0;
}

int sfs_stage_region_cuda(sfs_staging *st, const uint8_t handle[64], const uint8_t uuid[16],
			  uint64_t offset, uint64_t length, uint64_t alloc_size,
			  sfs_stage_region **out)
{
	(void)st, (void)handle, (void)uuid, (void)offset, (void)length, (void)alloc_size, (void)out;
	return -EOPNOTSUPP;
}

void sfs_stage_region_free(sfs_stage_region *r)
{
	n_regions_live--;
	free(r);
}

uint64_t sfs_stage_region_length(const sfs_stage_region *r) { return r->length; }

enum sfs_stage_kind sfs_stage_region_kind(const sfs_stage_region *r)
{
	(void)r;
	return SFS_STAGE_SHM;
}

int sfs_stage_region_put(sfs_stage_region *r, uint64_t off, const struct iovec *iov, int n_iov)
{
	r->puts++;
	for (int k = 0; k < n_iov; k++) {
		if (off + iov[k].iov_len > REGION_BUF)
			return -ERANGE;
		memcpy(r->buf + off, iov[k].iov_base, iov[k].iov_len);
		off += iov[k].iov_len;
	}
	return 0;
}

int sfs_stage_region_fill(sfs_stage_region *r, struct sfs_stage_span *spans, unsigned n,
			  const struct sfs_stage_source *src, uint64_t *cache_bytes)
{
	(void)r, (void)spans, (void)n, (void)src, (void)cache_bytes;
	return -EIO; /* the shm target is not pipelined */
}

/* --- fake cache/store, hints, jobs, options, blocking -------------------------- */

static char evicted_prefix[8192];
static int n_evicts, n_evict_keys;

int sfs_store_list(sfs_store *store, struct sfs_store_dataset **out, size_t *n_out)
{
	(void)store;
	*out = NULL;
	*n_out = 0;
	return 0;
}

void sfs_store_get_stats(sfs_store *store, struct sfs_store_stats *out)
{
	(void)store;
	memset(out, 0, sizeof(*out));
	out->capacity_bytes = 1 << 30;
}

int sfs_store_evict(sfs_store *store, const char *prefix, struct sfs_store_evicted *out)
{
	(void)store;
	n_evicts++;
	snprintf(evicted_prefix, sizeof(evicted_prefix), "%s", prefix ? prefix : "(all)");
	memset(out, 0, sizeof(*out));
	return 0;
}

int sfs_store_evict_keys(sfs_store *store, const uint8_t (*keys)[16], size_t n,
			 struct sfs_store_evicted *out)
{
	(void)store, (void)keys, (void)n;
	n_evict_keys++;
	memset(out, 0, sizeof(*out));
	return 0;
}

void sfs_store_dataset_read(sfs_store *store, uint32_t id, uint64_t hit_bytes, uint64_t miss_bytes)
{
	(void)store, (void)id, (void)hit_bytes, (void)miss_bytes;
}

static int n_hint_calls;

int sfs_hints_begin(sfs_hints *h, uint64_t owner, const struct sfs_hint_sender *s)
{
	(void)h, (void)owner, (void)s;
	n_hint_calls++;
	return 0;
}

int sfs_hints_append(sfs_hints *h, uint64_t owner, const struct shardfs_hint_append *a)
{
	(void)h, (void)owner, (void)a;
	n_hint_calls++;
	return 0;
}

int sfs_hints_commit(sfs_hints *h, uint64_t owner, uint64_t *n_items)
{
	(void)h, (void)owner;
	*n_items = 0;
	n_hint_calls++;
	return 0;
}

int sfs_hints_cancel(sfs_hints *h, uint64_t owner)
{
	(void)h, (void)owner;
	n_hint_calls++;
	return 0;
}

void sfs_hints_status(sfs_hints *h, uint64_t owner, struct shardfs_hint_status *out)
{
	(void)h, (void)owner;
	memset(out, 0, sizeof(*out));
	n_hint_calls++;
}

struct sfs_job_read sfs_jobs_read_begin(sfs_jobs *j, pid_t pid, uid_t uid)
{
	(void)j, (void)pid, (void)uid;
	return (struct sfs_job_read){0};
}

void sfs_jobs_read_end(sfs_jobs *j, const struct sfs_job_read *r, ssize_t n, uint64_t cache_bytes)
{
	(void)j, (void)r, (void)n, (void)cache_bytes;
}

void sfs_jobs_label(sfs_jobs *j, pid_t pid, uid_t uid, char *label)
{
	(void)j, (void)pid, (void)uid;
	label[0] = 0;
}

int sfs_export_join(const struct sfs_options *o, const char *rel, size_t rel_len, char *buf,
		    size_t size)
{
	(void)o;
	return snprintf(buf, size, "/export%s%.*s", rel_len ? "/" : "", (int)rel_len, rel);
}

void sfs_blocking_begin(void) {}
void sfs_blocking_end(void) {}

/* --- the calls -------------------------------------------------------------------- */

static struct sfs_fs fs;
static struct sfs_options opts;
static struct fuse_req R;
static uid_t caller = 1000;

/* One ioctl from `caller` on inode ino (open file fh 1): the errno it
 * answered, 0 for an ioctl reply. Checks that it replied exactly once. */
static int call_on(uint64_t ino, unsigned flags, unsigned cmd, const void *in, size_t in_bufsz,
		   size_t out_bufsz)
{
	struct fuse_file_info fi = {.fh = 1};

	memset(&R, 0, sizeof(R));
	R.fs = &fs;
	R.ctx.uid = caller;
	R.ctx.pid = 4242;
	sfs_op_ioctl(&R, ino, cmd, NULL, &fi, flags, in, in_bufsz, out_bufsz);
	if (R.replies != 1)
		ok(0, "cmd %#x replied %d times", cmd, R.replies);
	return R.err;
}

/* The common case: the struct in, the same size out, on the open file. */
#define CALL(cmd, p) call_on(FILE_INO, 0, (cmd), (p), sizeof(*(p)), sizeof(*(p)))

static uint64_t errors(enum sfs_stage_reason r) { return fs.stage_errors[r]; }

static void test_query(void)
{
	struct shardfs_query q = {.size = sizeof(q)};

	ok(CALL(SHARDFS_IOC_QUERY, &q) == 0, "QUERY answers");
	ok(R.out_len == sizeof(q) && R.out.q.abi_version == SHARDFS_ABI_VERSION,
	   "with the ABI version");
	ok(R.out.q.caps == SHARDFS_CAP_SHM,
	   "caps: shm, no CUDA without a GPU, no warm without a cache");
	ok(R.out.q.max_regions == SFS_MAX_REGIONS &&
	       R.out.q.max_ranges == SHARDFS_STAGE_MAX_RANGES &&
	       R.out.q.max_stage_bytes == 1ull << 30,
	   "its limits: regions, ranges, bytes per STAGE");
	q.size = sizeof(q) - 8;
	ok(CALL(SHARDFS_IOC_QUERY, &q) == EINVAL, "a wrong size field: EINVAL");
	q.size = sizeof(q);
	q.reserved[7] = 1;
	ok(CALL(SHARDFS_IOC_QUERY, &q) == EINVAL, "a reserved word set: EINVAL");
	q.reserved[7] = 0;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_QUERY, &q, sizeof(q) - 1, sizeof(q)) == EINVAL,
	   "an input buffer shorter than the struct: EINVAL");
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_QUERY, &q, sizeof(q), sizeof(q) - 1) == EINVAL,
	   "an output buffer shorter than the struct: EINVAL");
	ok(call_on(FILE_INO, FUSE_IOCTL_DIR, SHARDFS_IOC_QUERY, &q, sizeof(q), sizeof(q)) == ENOTTY,
	   "on a directory: ENOTTY");
	ok(call_on(FUSE_ROOT_ID, 0, SHARDFS_IOC_QUERY, &q, sizeof(q), sizeof(q)) == ENOTTY,
	   "on a file that is not open here: ENOTTY");
	ok(CALL(_IOWR('S', 0x7f, struct shardfs_query), &q) == ENOTTY,
	   "a command not ours: ENOTTY");
	fs.store = (sfs_store *)&fs;
	CALL(SHARDFS_IOC_QUERY, &q);
	ok(R.out.q.caps == (SHARDFS_CAP_SHM | SHARDFS_CAP_WARM), "with a cache: warm too");
	fs.store = NULL;
}

/* REGISTER a shm region of `length` bytes; the errno, *id the region's. */
static int reg(uint64_t length, uint64_t *id)
{
	struct shardfs_region r = {.size = sizeof(r), .kind = SHARDFS_REGION_SHM, .length = length};
	strcpy(r.shm_name, "/buf");
	int err = CALL(SHARDFS_IOC_REGISTER, &r);
	if (!err && id)
		*id = R.out.r.region_id;
	return err;
}

static void test_register(void)
{
	struct shardfs_region r = {.size = sizeof(r), .kind = SHARDFS_REGION_SHM, .length = 100};
	uint64_t id, inval = errors(SFS_STAGE_E_INVALID);

	strcpy(r.shm_name, "/buf");
	r.reserved[3] = 1;
	ok(CALL(SHARDFS_IOC_REGISTER, &r) == EINVAL, "REGISTER with a reserved word set: EINVAL");
	r.reserved[3] = 0;
	r.kind = 9;
	ok(CALL(SHARDFS_IOC_REGISTER, &r) == EINVAL, "an unknown kind: EINVAL");
	r.kind = SHARDFS_REGION_SHM;
	memset(r.shm_name, 'x', sizeof(r.shm_name));
	ok(CALL(SHARDFS_IOC_REGISTER, &r) == EINVAL, "a shm name without its NUL: EINVAL");
	ok(errors(SFS_STAGE_E_INVALID) == inval + 3, "three refusals counted as invalid");
	strcpy(r.shm_name, "/missing");
	ok(CALL(SHARDFS_IOC_REGISTER, &r) == ENOENT, "no such shm object: ENOENT");
	r.kind = SHARDFS_REGION_CUDA;
	ok(CALL(SHARDFS_IOC_REGISTER, &r) == EOPNOTSUPP, "CUDA without a GPU: EOPNOTSUPP");
	ok(errors(SFS_STAGE_E_NOREGION) == 1 && errors(SFS_STAGE_E_UNSUPPORTED) == 1,
	   "counted under no_region and unsupported");

	ok(reg(65536, &id) == 0, "a shm region registers");
	ok(id == ((5ull << 32) | 1), "its id: this process's epoch, then the first (%#llx)",
	   (unsigned long long)id);
	ok(shm_uid_asked == caller, "the shm object is checked against the caller's uid");
	int n = 1, err = 0;
	while (!(err = reg(16, NULL)))
		n++;
	ok(n == SFS_MAX_REGIONS && err == ENOSPC, "%d regions, then ENOSPC", n);
	ok(n_regions_live == SFS_MAX_REGIONS, "each refused one made no region");
}

static struct shardfs_stage *stage_of(uint64_t id, uint32_t n_ranges)
{
	static struct shardfs_stage s;

	memset(&s, 0, sizeof(s));
	s.size = sizeof(s);
	s.region_id = id;
	s.n_ranges = n_ranges;
	return &s;
}

static void test_stage(void)
{
	uint64_t id = (5ull << 32) | 1; /* test_register's first */
	sfs_stage_region *region = the_of->regions[0].region;
	struct shardfs_stage *s;

	s = stage_of(id, 0);
	ok(CALL(SHARDFS_IOC_STAGE, s) == EINVAL, "STAGE of no range: EINVAL");
	s = stage_of(id, SHARDFS_STAGE_MAX_RANGES + 1);
	ok(CALL(SHARDFS_IOC_STAGE, s) == EINVAL, "more ranges than the ABI allows: EINVAL");
	s = stage_of(id, 1);
	s->reserved0 = 1;
	ok(CALL(SHARDFS_IOC_STAGE, s) == EINVAL, "reserved0 set: EINVAL");
	s = stage_of(999, 1);
	ok(CALL(SHARDFS_IOC_STAGE, s) == ENOENT, "an unknown region: ENOENT");
	s = stage_of((4ull << 32) | 1, 1);
	ok(CALL(SHARDFS_IOC_STAGE, s) == EOWNERDEAD, "a region of an earlier server: EOWNERDEAD");
	s = stage_of(id, 1);
	caller = 1001;
	ok(CALL(SHARDFS_IOC_STAGE, s) == EPERM, "another uid's region: EPERM");
	caller = 1000;
	s = stage_of(id, 2);
	s->ranges[0] = (struct shardfs_range){.region_offset = 0, .file_offset = 0, .length = 100};
	s->ranges[1] =
	    (struct shardfs_range){.region_offset = 65536 - 10, .file_offset = 0, .length = 11};
	ok(CALL(SHARDFS_IOC_STAGE, s) == ERANGE, "a range past its region's end: ERANGE");
	ok(region->puts == 0, "and nothing was placed, not even the good range");
	s->ranges[1] = (struct shardfs_range){.region_offset = 65537, .length = 0};
	ok(CALL(SHARDFS_IOC_STAGE, s) == ERANGE, "a range starting past the region: ERANGE");
	ok(errors(SFS_STAGE_E_RANGE) == 2 && errors(SFS_STAGE_E_PERM) == 1 &&
	       errors(SFS_STAGE_E_NOREGION) == 3,
	   "refusals counted: out_of_range 2, permission 1, no_region 3");

	/* Three ranges: across the cached half, past the end of the file. */
	s = stage_of(id, 3);
	s->ranges[0] = (struct shardfs_range){.region_offset = 0, .file_offset = 0, .length = 5000};
	s->ranges[1] =
	    (struct shardfs_range){.region_offset = 5000, .file_offset = 15000, .length = 4000};
	s->ranges[2] =
	    (struct shardfs_range){.region_offset = 9000, .file_offset = 18000, .length = 8000};
	ok(CALL(SHARDFS_IOC_STAGE, s) == 0, "STAGE of three ranges");
	ok(R.out.s.ranges[0].placed == 5000 && R.out.s.ranges[1].placed == 4000 &&
	       R.out.s.ranges[2].placed == 2000,
	   "each placed in full, the last short at the end of the file");
	ok(R.out.s.bytes_placed == 11000, "bytes_placed is their sum (%llu)",
	   (unsigned long long)R.out.s.bytes_placed);
	ok(!memcmp(region->buf, file_bytes, 5000) &&
	       !memcmp(region->buf + 5000, file_bytes + 15000, 4000) &&
	       !memcmp(region->buf + 9000, file_bytes + 18000, 2000),
	   "the region holds the file's bytes where the ranges said");
	ok(R.out.s.path == (SHARDFS_PATH_SHM_COPY | SHARDFS_PATH_CACHE | SHARDFS_PATH_NFS),
	   "path: a shm copy, from the cache and from NFS");
	ok(fs.stage_bytes[SFS_STAGE_SHM] == 11000 && fs.stage_requests[SFS_STAGE_SHM] == 1,
	   "counted under the shm target");

	ok(call_on(FILE_INO, FUSE_IOCTL_COMPAT, SHARDFS_IOC_STAGE, s, sizeof(*s), sizeof(*s)) ==
		   EOPNOTSUPP &&
	       errors(SFS_STAGE_E_UNSUPPORTED) == 2,
	   "a 32-bit caller: EOPNOTSUPP, counted as unsupported");
}

static void test_unregister(void)
{
	struct shardfs_unregister u = {.size = sizeof(u), .region_id = (5ull << 32) | 1};
	int live = n_regions_live;

	u.reserved0 = 1;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_UNREGISTER, &u, sizeof(u), 0) == EINVAL,
	   "UNREGISTER with reserved0 set: EINVAL");
	u.reserved0 = 0;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_UNREGISTER, &u, sizeof(u) - 1, 0) == EINVAL,
	   "a short input: EINVAL");
	caller = 1001;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_UNREGISTER, &u, sizeof(u), 0) == EPERM,
	   "another uid's region: EPERM");
	caller = 1000;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_UNREGISTER, &u, sizeof(u), 0) == 0 && R.out_len == 0,
	   "the owner's: done, nothing to copy out");
	ok(n_regions_live == live - 1 && the_of->regions[0].id == 0, "the region is freed");
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_UNREGISTER, &u, sizeof(u), 0) == ENOENT,
	   "again: ENOENT");
	uint64_t big;
	ok(reg(1ull << 31, &big) == 0, "its slot takes a new region");
	struct shardfs_stage *s = stage_of(big, 2);
	s->ranges[0] = (struct shardfs_range){.length = 1ull << 29};
	s->ranges[1] =
	    (struct shardfs_range){.region_offset = 1ull << 29, .length = (1ull << 29) + 1};
	uint64_t inval = errors(SFS_STAGE_E_INVALID);
	ok(CALL(SHARDFS_IOC_STAGE, s) == EINVAL, "more than 1 GiB in one call: EINVAL");
	ok(errors(SFS_STAGE_E_INVALID) == inval + 1, "counted as invalid");
	ok(((sfs_stage_region *)the_of->regions[0].region)->puts == 0, "and nothing was placed");
}

static void test_warm(void)
{
	struct shardfs_warm w = {.size = sizeof(w)};

	w.reserved[0] = 1;
	ok(CALL(SHARDFS_IOC_WARM, &w) == EINVAL, "WARM with a reserved word set: EINVAL");
	w.reserved[0] = 0;
	file_inode->pf = the_of->pf;
	file_inode->opened.size = FILE_SIZE;
	ok(CALL(SHARDFS_IOC_WARM, &w) == 0, "WARM answers");
	ok(R.out.w.file_bytes == FILE_SIZE && R.out.w.cached_bytes == 4096 &&
	       R.out.w.flags == SHARDFS_WARM_ACTIVE,
	   "with the version's size, its bytes cached and whether it is still fetching");
	file_inode->pf = NULL;
	CALL(SHARDFS_IOC_WARM, &w);
	ok(R.out.w.file_bytes == 4096, "an open of an older version reports what it has");
}

static void test_cache(void)
{
	struct shardfs_cache_evict *e = calloc(1, sizeof(*e));
	struct shardfs_cache_evict_keys *k = calloc(1, sizeof(*k));
	struct shardfs_cache_list *l = calloc(1, sizeof(*l));

	e->size = sizeof(*e);
	strcpy(e->prefix, "/export/ds");
	k->size = sizeof(*k);
	l->size = sizeof(*l);
	caller = 1000;
	if (geteuid() == 1000)
		caller = 1001;
	fs.store = (sfs_store *)&fs;
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == EPERM, "CACHE_EVICT by another user: EPERM");
	caller = 0;
	fs.store = NULL;
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == ENOTSUP,
	   "by root on a mount without a cache: ENOTSUP");
	fs.store = (sfs_store *)&fs;
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == 0 && !strcmp(evicted_prefix, "/export/ds"),
	   "by root: the dataset prefix goes to the store");
	ok(call_on(FUSE_ROOT_ID, FUSE_IOCTL_DIR, SHARDFS_IOC_CACHE_EVICT, e, sizeof(*e),
		   sizeof(*e)) == 0,
	   "on any inode of the mount, a directory too");
	strcpy(e->prefix, "relative");
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == EINVAL, "a prefix that is no absolute path: EINVAL");
	e->flags = SHARDFS_EVICT_MOUNT_PATH;
	strcpy(e->prefix, "//ds/sub//");
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == 0 && !strcmp(evicted_prefix, "/export/ds/sub"),
	   "a mount path: joined to the export, slashes trimmed (%s)", evicted_prefix);
	e->flags = 0x80;
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == EINVAL, "an unknown flag: EINVAL");
	e->flags = SHARDFS_EVICT_ALL;
	e->reserved0 = 1;
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == EINVAL, "reserved0 set: EINVAL");
	e->reserved0 = 0;
	memset(e->prefix, 'a', sizeof(e->prefix));
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == EINVAL, "a prefix without its NUL: EINVAL");
	e->prefix[0] = 0;
	ok(CALL(SHARDFS_IOC_CACHE_EVICT, e) == 0 && !strcmp(evicted_prefix, "(all)"),
	   "EVICT_ALL: everything");
	int evicts = n_evicts;
	ok(n_evicts == evicts && CALL(SHARDFS_IOC_CACHE_EVICT_KEYS, k) == EINVAL,
	   "CACHE_EVICT_KEYS of no key: EINVAL");
	k->n_keys = SHARDFS_CACHE_EVICT_KEYS_MAX + 1;
	ok(CALL(SHARDFS_IOC_CACHE_EVICT_KEYS, k) == EINVAL, "of too many keys: EINVAL");
	k->n_keys = 3;
	ok(CALL(SHARDFS_IOC_CACHE_EVICT_KEYS, k) == 0 && n_evict_keys == 1, "of three keys: done");
	l->reserved[0] = 1;
	ok(CALL(SHARDFS_IOC_CACHE_LIST, l) == EINVAL,
	   "CACHE_LIST with a reserved word set: EINVAL");
	l->reserved[0] = 0;
	ok(CALL(SHARDFS_IOC_CACHE_LIST, l) == 0 && R.out_len == sizeof(*l),
	   "CACHE_LIST answers the whole struct");
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_CACHE_LIST, l, sizeof(*l), sizeof(*l) - 8) == EINVAL,
	   "into a short output buffer: EINVAL");
	fs.store = NULL;
	caller = 1000;
	free(e);
	free(k);
	free(l);
}

static void test_hints(void)
{
	struct shardfs_hint_begin b = {.size = sizeof(b)};
	struct shardfs_hint_cancel x = {.size = sizeof(x)};
	struct shardfs_hint_append *a = calloc(1, sizeof(*a));

	a->size = sizeof(*a);
	ok(CALL(SHARDFS_IOC_HINT_BEGIN, &b) == ENOTTY, "hints without hint lists: ENOTTY");
	fs.hints = (struct sfs_hints *)&fs;
	opts.hint_window = 77;
	ok(CALL(SHARDFS_IOC_HINT_BEGIN, &b) == 0 && R.out.b.window == 77 &&
	       R.out.b.max_items == SHARDFS_HINT_MAX_ITEMS,
	   "HINT_BEGIN: the window and the most items a list takes");
	ok(call_on(SFS_STATS_ID, 0, SHARDFS_IOC_HINT_BEGIN, &b, sizeof(b), sizeof(b)) == ENOTTY,
	   "on the stats file: ENOTTY");
	int calls = n_hint_calls;
	a->reserved0 = 1;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_HINT_APPEND, a, sizeof(*a), 0) == EINVAL &&
	       n_hint_calls == calls,
	   "HINT_APPEND with reserved0 set: EINVAL, not passed on");
	a->reserved0 = 0;
	a->reserved[1] = 1;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_HINT_APPEND, a, sizeof(*a), 0) == EINVAL,
	   "with a reserved word set: EINVAL");
	a->reserved[1] = 0;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_HINT_APPEND, a, sizeof(*a), 0) == 0 &&
	       n_hint_calls == calls + 1,
	   "a valid one is passed on");
	x.reserved[0] = 1;
	ok(call_on(FILE_INO, 0, SHARDFS_IOC_HINT_CANCEL, &x, sizeof(x), 0) == EINVAL,
	   "HINT_CANCEL with a reserved word set: EINVAL");
	x.reserved[0] = 0;
	ok(call_on(FUSE_ROOT_ID, FUSE_IOCTL_DIR, SHARDFS_IOC_HINT_CANCEL, &x, sizeof(x), 0) == 0,
	   "on a directory: done (a list belongs to an open file or directory)");
	fs.hints = NULL;
	free(a);
}

int main(void)
{
	for (int k = 0; k < FILE_SIZE; k++)
		file_bytes[k] = (char)((k * 7) & 0xff);
	file_inode = calloc(1, sizeof(*file_inode) + 8);
	file_inode->fileid = 555;
	file_inode->fh_len = 8;
	root_inode = calloc(1, sizeof(*root_inode) + 8);
	root_inode->fh_len = 8;
	fs.ctl_dir = calloc(1, sizeof(*fs.ctl_dir));
	fs.ctl_dir->fileid = SFS_INODE_CTL_DIR_FILEID;
	fs.stats_file = calloc(1, sizeof(*fs.stats_file));
	fs.stats_file->fileid = SFS_INODE_STATS_FILEID;
	fs.opts = &opts;
	fs.staging = (sfs_staging *)&fs;
	static struct sfs_keeper_state keeper;
	keeper.epoch = 5;
	fs.keeper = &keeper;
	the_of = calloc(1, sizeof(*the_of));
	the_of->pf = (sfs_pf_file *)&fs;
	the_of->uid = 1000;
	the_of->next_region_id = sfs_fs_first_region_id(&fs);
	pthread_mutex_init(&the_of->lock, NULL);

	test_query();
	test_register();
	test_stage();
	test_unregister();
	test_warm();
	test_cache();
	test_hints();
	ok(fs.op_count[SFS_OP_IOCTL] > 60, "every call counted as an ioctl (%llu)",
	   (unsigned long long)fs.op_count[SFS_OP_IOCTL]);
	return tap_done();
}
