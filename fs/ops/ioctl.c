// SPDX-License-Identifier: Apache-2.0
/*
 * ioctl — the ioctl ABI of include/shardfs/shardfs_ioctl.h: query, staging regions,
 * staging ranges of the open file into them, warm-up, and the cache's
 * per-dataset listing and eviction.
 *
 * Owns: validating every struct that comes in (size field, reserved words,
 * bounds), the per-open-file region table and its uid rule, and counting
 * bytes, requests and refusals (STAGE also per job, fs/observe/jobs.h).
 * Who may call: anyone holding an open file of the mount. With allow_other
 * that open was checked by the kernel against the file's mode
 * (default_permissions is implied unless allow_other_unchecked), so an ioctl
 * reaches only bytes its caller may read; a region is usable only by the
 * uid that registered it, and a shm object must belong to that uid. The
 * cache commands act on the whole cache: only root and the daemon's own
 * user may call them, on any file or directory of the mount.
 * Bytes come from cache/prefetch (verified, fetched first when missing);
 * cache/staging moves them into the target.
 * Threading: runs on FUSE workers; ioctls on one open file are serialised
 * by its lock (regions are used by one thread at a time). Never replies
 * with a lock held.
 */
#include "ops.h"
#include "../hints/hints.h"
#include "../kernel/kernel_order.h"
#include <shardfs/shardfs_ioctl.h>
#include "../../cache/common/blocking.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(struct shardfs_query) % 8 == 0, "ABI: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_region) % 8 == 0, "ABI: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_stage) % 8 == 0, "ABI: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_stage) <= 16383, "ABI: FUSE restricted ioctl limit");
_Static_assert(sizeof(struct shardfs_region) <= 16383, "ABI: FUSE restricted ioctl limit");
_Static_assert(sizeof(struct shardfs_cache_list) % 8 == 0, "ABI: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_cache_list) <= 16383, "ABI: FUSE restricted ioctl limit");
_Static_assert(sizeof(struct shardfs_cache_evict) % 8 == 0, "ABI: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_cache_evict) <= 16383, "ABI: FUSE restricted ioctl limit");
_Static_assert(sizeof(struct shardfs_cache_entry) % 8 == 0, "ABI: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_cache_evict_keys) % 8 == 0, "ABI: 8-byte multiple");
_Static_assert(sizeof(struct shardfs_cache_evict_keys) <= 16383,
	       "ABI: FUSE restricted ioctl limit");

/* The most one STAGE call may move: it runs on one FUSE worker, so bound
 * how long it holds it. */
#define SFS_MAX_STAGE_BYTES (1ull << 30)

/* Count the refusal err (-errno) under its reason, then reply it. The one
 * error reply of the staging ioctls (REGISTER, STAGE, UNREGISTER). FUSE
 * worker, no lock held. */
static void stage_reply_err(fuse_req_t req, struct sfs_fs *fs, int err)
{
	__atomic_fetch_add(&fs->stage_errors[sfs_stage_reason_of(err)], 1, __ATOMIC_RELAXED);
	fuse_reply_err(req, -err);
}

/* SHARDFS_REGION_SHM: a shm object of the caller's (a NUL-terminated name). */
static int shm_region(struct sfs_fs *fs, uid_t uid, const struct shardfs_region *r,
		      sfs_stage_region **out)
{
	if (!memchr(r->shm_name, 0, sizeof(r->shm_name)))
		return -EINVAL;
	return sfs_stage_region_shm(fs->staging, r->shm_name, r->offset, r->length, uid, out);
}

/* SHARDFS_REGION_CUDA: a CUDA IPC handle on one of our GPUs. */
static int cuda_region(struct sfs_fs *fs, uid_t uid, const struct shardfs_region *r,
		       sfs_stage_region **out)
{
	(void)uid;
	return sfs_stage_region_cuda(fs->staging, r->cuda_ipc_handle, r->gpu_uuid, r->offset,
				     r->length, r->alloc_size, out);
}

static bool shm_usable(struct sfs_fs *fs)
{
	(void)fs;
	return true;
}

static bool cuda_usable(struct sfs_fs *fs)
{
	return fs->staging && sfs_staging_gpu_count(fs->staging) > 0;
}

/*
 * The staging targets, indexed by enum sfs_stage_kind (cache/staging/staging.h):
 * a new target is a row here (with its SHARDFS_REGION_, _CAP_ and _PATH_
 * bits in shardfs_ioctl.h) and its constructor and copy in cache/staging/staging.c.
 */
static const struct stage_target {
	uint32_t region_kind; /* SHARDFS_REGION_* that registers one */
	uint32_t cap;	      /* SHARDFS_CAP_* that QUERY reports while usable */
	uint32_t path;	      /* SHARDFS_PATH_* of how STAGE moves bytes into it */
	bool pipelined;	      /* STAGE through sfs_stage_region_fill, else _put */
	bool (*usable)(struct sfs_fs *fs);
	/* The region r describes, for uid; 0 or -errno. FUSE worker. */
	int (*region)(struct sfs_fs *fs, uid_t uid, const struct shardfs_region *r,
		      sfs_stage_region **out);
} stage_targets[] = {
    [SFS_STAGE_SHM] = {SHARDFS_REGION_SHM, SHARDFS_CAP_SHM, SHARDFS_PATH_SHM_COPY, false,
		       shm_usable, shm_region},
    [SFS_STAGE_CUDA] = {SHARDFS_REGION_CUDA, SHARDFS_CAP_CUDA_IPC, SHARDFS_PATH_CUDA_PINNED, true,
			cuda_usable, cuda_region},
};
_Static_assert(sizeof(stage_targets) / sizeof(stage_targets[0]) == SFS_STAGE_KIND_COUNT,
	       "one row per staging target");

static bool all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* Copy the request struct in and check its size field. */
static int take_in(void *dst, size_t want, const void *in_buf, size_t in_bufsz, size_t out_bufsz,
		   bool out_too)
{
	if (in_bufsz < want || (out_too && out_bufsz < want))
		return -EINVAL;
	memcpy(dst, in_buf, want);
	if (*(const uint32_t *)dst != want)
		return -EINVAL;
	return 0;
}

static int do_query(struct sfs_fs *fs, struct shardfs_query *q)
{
	if (!all_zero(q->reserved, sizeof(q->reserved)))
		return -EINVAL;
	unsigned n = fs->staging ? sfs_staging_gpu_count(fs->staging) : 0;
	memset((char *)q + sizeof(q->size), 0, sizeof(*q) - sizeof(q->size));
	q->abi_version = SHARDFS_ABI_VERSION;
	q->caps = fs->store ? SHARDFS_CAP_WARM : 0;
	for (int t = 0; t < SFS_STAGE_KIND_COUNT; t++)
		if (stage_targets[t].usable(fs))
			q->caps |= stage_targets[t].cap;
	q->n_gpus = n;
	q->max_ranges = SHARDFS_STAGE_MAX_RANGES;
	q->max_regions = SFS_MAX_REGIONS;
	q->max_stage_bytes = SFS_MAX_STAGE_BYTES;
	for (unsigned i = 0; i < n && i < SHARDFS_MAX_GPUS; i++)
		sfs_staging_gpu_uuid(fs->staging, i, q->gpu_uuid[i]);
	return 0;
}

/* Caller holds of->lock. */
static int do_register(struct sfs_fs *fs, struct sfs_open_file *of, uid_t uid,
		       struct shardfs_region *r)
{
	sfs_stage_region *region = NULL;
	int slot = -1, rc;

	if (!all_zero(r->reserved, sizeof(r->reserved)))
		return -EINVAL;
	for (int i = 0; i < SFS_MAX_REGIONS && slot < 0; i++)
		if (!of->regions[i].id)
			slot = i;
	if (slot < 0)
		return -ENOSPC;
	rc = -EINVAL; /* a kind no target registers */
	for (int t = 0; t < SFS_STAGE_KIND_COUNT; t++)
		if (stage_targets[t].region_kind == r->kind)
			rc = stage_targets[t].region(fs, uid, r, &region);
	if (rc < 0)
		return rc;
	of->regions[slot].id = of->next_region_id++;
	of->regions[slot].uid = uid;
	of->regions[slot].region = region;
	r->region_id = of->regions[slot].id;
	return 0;
}

/* The region `id` of this open file, if `uid` may use it. Caller holds
 * of->lock. A region id carries the epoch of the serving process that gave
 * it (keeper.h) in its top 32 bits: an id of another epoch was registered
 * with a process that died if its epoch is an earlier one, and answers
 * -EOWNERDEAD (register again: the helpers do); any other unknown id
 * (999, say) -ENOENT. */
static int find_region(struct sfs_open_file *of, uint64_t id, uid_t uid, int *slot)
{
	for (int i = 0; i < SFS_MAX_REGIONS; i++)
		if (id && of->regions[i].id == id) {
			if (of->regions[i].uid != uid)
				return -EPERM;
			*slot = i;
			return 0;
		}
	uint64_t epoch = id >> 32, now = of->next_region_id >> 32;
	return epoch && epoch < now ? -EOWNERDEAD : -ENOENT; /* an earlier server's, or none */
}

/* Place one range into region (its bounds checked): g->placed counts what
 * landed, short only at the end of the file; *cache_bytes adds what came
 * from the local cache. Returns 0 or -errno. Caller holds of->lock. */
static int place_range(struct sfs_open_file *of, sfs_stage_region *region, struct shardfs_range *g,
		       uint64_t *cache_bytes)
{
	while (g->placed < g->length) {
		/* One view covers at most the rest of the current chunk and
		 * the next one: 1 MiB pieces keep pins short. */
		uint64_t off = g->file_offset + g->placed;
		size_t want = g->length - g->placed;
		if (want > SFS_CHUNK_BYTES)
			want = SFS_CHUNK_BYTES;
		struct sfs_pf_view v;
		ssize_t n = sfs_pf_read(of->pf, off, want, &v);
		if (n < 0)
			return (int)n;
		if (n == 0)
			break; /* end of file */
		*cache_bytes += v.cache_bytes;
		int rc = sfs_stage_region_put(region, g->region_offset + g->placed, v.iov, v.n_iov);
		sfs_pf_view_release(of->pf, &v);
		if (rc < 0)
			return rc;
		g->placed += (uint64_t)n;
	}
	return 0;
}

/*
 * The source of a pipelined STAGE (staging.h): [pos, pos + len) of the open
 * file into buf, through prefetch, read and verified straight into buf where
 * the store has the bytes. Reads are cut at chunk boundaries; each after the
 * first starts on one, so its bytes land right after the last one's
 * (prefetch.h: at (off % 16 KiB) of the buffer it is given, 4096-aligned
 * there). Runs on the stager's thread and the staging workers at once, for
 * disjoint ranges, while the stager holds of->lock (of and its pf stay).
 */
static ssize_t stage_source_read(void *arg, uint64_t pos, size_t len, void *buf, size_t buf_len,
				 const char **data, size_t *cache_bytes)
{
	struct sfs_open_file *of = arg;
	char *base = NULL, *end = (char *)buf + buf_len;
	size_t done = 0;

	*cache_bytes = 0;
	*data = buf;
	while (done < len) {
		uint64_t off = pos + done;
		size_t want = SFS_CHUNK_BYTES - (size_t)(off & (SFS_CHUNK_BYTES - 1)), cb = 0;
		if (want > len - done)
			want = len - done;
		char *at = base ? base + done : buf;
		const char *d;
		ssize_t n = sfs_pf_read_into(of->pf, off, want, at, (size_t)(end - at), &d, &cb);
		if (n < 0)
			return n;
		if (!base)
			base = (char *)d;
		else if (d != at) { /* a packed record: only ever a first read */
			if ((size_t)(end - at) < (size_t)n)
				return -EIO;
			memmove(at, d, (size_t)n);
		}
		*cache_bytes += cb;
		done += (size_t)n;
		if ((size_t)n < want)
			break; /* end of file */
	}
	*data = base ? base : buf;
	return (ssize_t)done;
}

/* Place every range through the region's pipeline (reads overlap copies,
 * on several threads); *cache_bytes: how many came from the local cache.
 * Returns 0 or -errno. Caller holds of->lock. */
static int place_pipelined(struct sfs_open_file *of, sfs_stage_region *region,
			   struct shardfs_stage *s, uint64_t *cache_bytes)
{
	struct sfs_stage_span spans[SHARDFS_STAGE_MAX_RANGES];
	const struct sfs_stage_source src = {stage_source_read, of};

	for (uint32_t i = 0; i < s->n_ranges; i++) {
		const struct shardfs_range *g = &s->ranges[i];
		/* Bytes past 2^64 do not exist: end of file. */
		uint64_t len = g->length < UINT64_MAX - g->file_offset
				   ? g->length
				   : UINT64_MAX - g->file_offset;
		spans[i] = (struct sfs_stage_span){g->file_offset, g->region_offset, len, 0};
	}
	int rc = sfs_stage_region_fill(region, spans, s->n_ranges, &src, cache_bytes);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < s->n_ranges; i++) {
		s->ranges[i].placed = spans[i].placed;
		s->bytes_placed += spans[i].placed;
	}
	return 0;
}

/* Place the ranges; *cache_bytes: how many came from the local cache.
 * Returns 0 or -errno. Caller holds of->lock. */
static int do_stage(struct sfs_fs *fs, struct sfs_open_file *of, uid_t uid, struct shardfs_stage *s,
		    uint64_t *cache_bytes)
{
	int slot, rc;
	uint64_t total = 0;

	if (s->n_ranges == 0 || s->n_ranges > SHARDFS_STAGE_MAX_RANGES || s->reserved0 ||
	    !all_zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if ((rc = find_region(of, s->region_id, uid, &slot)) < 0)
		return rc;
	sfs_stage_region *region = of->regions[slot].region;
	uint64_t rlen = sfs_stage_region_length(region);
	/* Check everything before moving anything. */
	for (uint32_t i = 0; i < s->n_ranges; i++) {
		struct shardfs_range *g = &s->ranges[i];
		if (g->region_offset > rlen || g->length > rlen - g->region_offset)
			return -ERANGE;
		if (g->length > SFS_MAX_STAGE_BYTES - total)
			return -EINVAL;
		total += g->length;
		g->placed = 0;
	}
	enum sfs_stage_kind t = sfs_stage_region_kind(region);
	s->bytes_placed = 0;
	s->path = stage_targets[t].path;
	uint64_t from_cache = *cache_bytes;
	if (stage_targets[t].pipelined && (rc = place_pipelined(of, region, s, cache_bytes)) < 0)
		return rc;
	for (uint32_t i = 0; !stage_targets[t].pipelined && i < s->n_ranges; i++) {
		if ((rc = place_range(of, region, &s->ranges[i], cache_bytes)) < 0)
			return rc;
		s->bytes_placed += s->ranges[i].placed;
	}
	/* From this call's views (a byte is from the cache or was fetched from
	 * NFS), not from mount-wide counters that other readers move too. */
	from_cache = *cache_bytes - from_cache;
	if (from_cache)
		s->path |= SHARDFS_PATH_CACHE;
	if (s->bytes_placed > from_cache)
		s->path |= SHARDFS_PATH_NFS;
	__atomic_fetch_add(&fs->stage_bytes[t], s->bytes_placed, __ATOMIC_RELAXED);
	__atomic_fetch_add(&fs->stage_requests[t], 1, __ATOMIC_RELAXED);
	return 0;
}

static int do_warm(struct sfs_fs *fs, struct sfs_inode *i, struct sfs_open_file *of,
		   struct shardfs_warm *w)
{
	bool active = false;
	int rc;

	if (!all_zero(w->reserved, sizeof(w->reserved)))
		return -EINVAL;
	if ((rc = sfs_pf_file_warm(of->pf, &active)) < 0)
		return rc;
	sfs_inode_lock(i);
	bool current = i->pf == of->pf;
	w->file_bytes = i->opened.size;
	sfs_inode_unlock(i);
	w->cached_bytes = sfs_pf_file_cached_bytes(of->pf);
	if (!current)
		w->file_bytes = w->cached_bytes; /* an older version: report what it has */
	w->flags = active ? SHARDFS_WARM_ACTIVE : 0;
	(void)fs;
	return 0;
}

/* Pack the store's listing from l->start on into l->buf. Returns 0 or
 * -errno. */
static int do_cache_list(struct sfs_fs *fs, struct shardfs_cache_list *l)
{
	struct sfs_store_dataset *d;
	struct sfs_store_stats st;
	size_t n, used = 0;

	if (!all_zero(l->reserved, sizeof(l->reserved)))
		return -EINVAL;
	int rc = sfs_store_list(fs->store, &d, &n);
	if (rc < 0)
		return rc;
	sfs_store_get_stats(fs->store, &st);
	l->capacity_bytes = st.capacity_bytes;
	l->used_bytes = st.used_bytes;
	l->total = (uint32_t)n;
	l->n_entries = 0;
	memset(l->buf, 0, sizeof(l->buf));
	for (size_t k = l->start; k < n; k++) {
		size_t name_len = d[k].name ? strlen(d[k].name) : 0;
		size_t bytes = (sizeof(struct shardfs_cache_entry) + name_len + 1 + 7) & ~(size_t)7;
		if (used + bytes > sizeof(l->buf))
			break;
		struct shardfs_cache_entry e = {.entry_bytes = (uint16_t)bytes,
						.name_len = (uint16_t)name_len,
						.id = d[k].id,
						.bytes = d[k].bytes,
						.objects = d[k].objects,
						.packed_objects = d[k].packed_objects,
						.hit_bytes = d[k].hit_bytes,
						.miss_bytes = d[k].miss_bytes,
						.last_use_s = d[k].last_use_s};
		memcpy(l->buf + used, &e, sizeof(e));
		memcpy(l->buf + used + sizeof(e), d[k].name ? d[k].name : "", name_len);
		used += bytes;
		l->n_entries++;
	}
	free(d);
	return 0;
}

/* Evict what e names (a dataset prefix, a path of the mount, or all).
 * Returns 0 or -errno. Blocks while the store's writer evicts. */
static int do_cache_evict(struct sfs_fs *fs, uid_t uid, struct shardfs_cache_evict *e)
{
	struct sfs_store_evicted r;
	char prefix[sizeof(e->prefix) + 1100];

	if (e->reserved0 || !all_zero(e->reserved, sizeof(e->reserved)) ||
	    e->flags & ~(SHARDFS_EVICT_ALL | SHARDFS_EVICT_MOUNT_PATH) ||
	    !memchr(e->prefix, 0, sizeof(e->prefix)))
		return -EINVAL;
	if (e->flags & SHARDFS_EVICT_MOUNT_PATH) {
		const char *rel = e->prefix;
		size_t k;
		while (*rel == '/')
			rel++;
		for (k = strlen(rel); k > 0 && rel[k - 1] == '/';)
			k--;
		sfs_export_join(fs->opts, rel, k, prefix, sizeof(prefix));
	} else if (!(e->flags & SHARDFS_EVICT_ALL) && e->prefix[0] != '/') {
		return -EINVAL;
	} else {
		snprintf(prefix, sizeof(prefix), "%s", e->prefix);
	}
	bool all = e->flags & SHARDFS_EVICT_ALL;
	int rc = sfs_store_evict(fs->store, all ? NULL : prefix, &r);
	e->datasets = r.datasets;
	e->objects = r.objects;
	e->bytes = r.bytes;
	e->disk_bytes = r.disk_bytes;
	if (rc == 0)
		sfs_log(SFS_LOG_INFO, "cache",
			"evicted %s%s%s for uid %u: %u datasets, %llu files, %llu bytes",
			all ? "everything" : "'", all ? "" : prefix, all ? "" : "'", (unsigned)uid,
			r.datasets, (unsigned long long)r.objects, (unsigned long long)r.bytes);
	return rc;
}

/* Evict the versions k names. Returns 0 or -errno. Blocks while the
 * store's writer evicts. */
static int do_cache_evict_keys(struct sfs_fs *fs, struct shardfs_cache_evict_keys *k)
{
	struct sfs_store_evicted r;

	if (!all_zero(k->reserved, sizeof(k->reserved)) || !k->n_keys ||
	    k->n_keys > SHARDFS_CACHE_EVICT_KEYS_MAX)
		return -EINVAL;
	int rc = sfs_store_evict_keys(fs->store, (const uint8_t(*)[16])k->keys, k->n_keys, &r);
	k->objects = r.objects;
	k->bytes = r.bytes;
	k->disk_bytes = r.disk_bytes;
	return rc;
}

/* SHARDFS_IOC_CACHE_*: on any inode of the mount, root and the daemon's
 * user only. Replies itself. FUSE worker. */
static void cache_ioctl(fuse_req_t req, struct sfs_fs *fs, unsigned int cmd, const void *in_buf,
			size_t in_bufsz, size_t out_bufsz)
{
	uid_t uid = fuse_req_ctx(req)->uid;
	union {
		struct shardfs_cache_list l;
		struct shardfs_cache_evict e;
		struct shardfs_cache_evict_keys k;
	} *buf = malloc(sizeof(*buf)); /* 16 KiB: not on a worker's stack */
	size_t out_len = cmd == SHARDFS_IOC_CACHE_LIST	       ? sizeof(buf->l)
			 : cmd == SHARDFS_IOC_CACHE_EVICT_KEYS ? sizeof(buf->k)
							       : sizeof(buf->e);
	int rc;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (uid != 0 && uid != geteuid())
		rc = -EPERM;
	else if ((rc = take_in(buf, out_len, in_buf, in_bufsz, out_bufsz, true)) < 0)
		; /* -EINVAL */
	else if (!fs->store)
		rc = -ENOTSUP;
	else if (cmd == SHARDFS_IOC_CACHE_LIST)
		rc = do_cache_list(fs, &buf->l);
	else if (cmd == SHARDFS_IOC_CACHE_EVICT_KEYS)
		rc = do_cache_evict_keys(fs, &buf->k);
	else
		rc = do_cache_evict(fs, uid, &buf->e);
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_ioctl(req, 0, buf, out_len);
	free(buf);
}

/* SHARDFS_IOC_STAGE on of, accounted to req's job (its dataset's counters
 * are kept where the bytes are found: prefetch and the store). Returns 0
 * or -errno. FUSE worker, takes of->lock. */
static int stage_call(fuse_req_t req, struct sfs_fs *fs, struct sfs_open_file *of,
		      struct shardfs_stage *s)
{
	uint64_t cache_bytes = 0;
	struct sfs_job_read jr = sfs_fs_job_begin(fs, req);

	pthread_mutex_lock(&of->lock);
	sfs_blocking_begin(); /* reads and GPU copies: another worker serves meanwhile */
	int rc = do_stage(fs, of, fuse_req_ctx(req)->uid, s, &cache_bytes);
	sfs_blocking_end();
	pthread_mutex_unlock(&of->lock);
	sfs_jobs_read_end(fs->jobs, &jr, rc < 0 ? rc : (ssize_t)s->bytes_placed, cache_bytes);
	return rc;
}

/* SHARDFS_IOC_UNREGISTER of uid's region. Returns 0 or -errno. Takes
 * of->lock. */
static int unregister_call(struct sfs_open_file *of, uid_t uid, const struct shardfs_unregister *u)
{
	int slot, rc;

	if (u->reserved0 || !all_zero(u->reserved, sizeof(u->reserved)))
		return -EINVAL;
	pthread_mutex_lock(&of->lock);
	if (!(rc = find_region(of, u->region_id, uid, &slot))) {
		sfs_stage_region_free(of->regions[slot].region);
		of->regions[slot].id = 0;
		of->regions[slot].region = NULL;
	}
	pthread_mutex_unlock(&of->lock);
	return rc;
}

/* The scratch of the ioctls on an open file: 2 KiB, not on a worker's stack. */
union file_ioctl_buf {
	struct shardfs_query q;
	struct shardfs_region r;
	struct shardfs_stage s;
	struct shardfs_unregister u;
	struct shardfs_warm w;
};

/* Copy in and run an ioctl on an open file; *out_len: bytes of buf to
 * reply. Returns 0, -ENOTTY for a command not ours, or -errno. */
static int file_ioctl(fuse_req_t req, struct sfs_fs *fs, struct sfs_inode *i,
		      struct sfs_open_file *of, unsigned int cmd, union file_ioctl_buf *buf,
		      const void *in_buf, size_t in_bufsz, size_t out_bufsz, size_t *out_len)
{
	uid_t uid = fuse_req_ctx(req)->uid;
	int rc;

	*out_len = 0;
	switch (cmd) {
	case SHARDFS_IOC_QUERY:
		if (!(rc = take_in(&buf->q, sizeof(buf->q), in_buf, in_bufsz, out_bufsz, true)))
			rc = do_query(fs, &buf->q);
		*out_len = sizeof(buf->q);
		return rc;
	case SHARDFS_IOC_REGISTER:
		if (!(rc = take_in(&buf->r, sizeof(buf->r), in_buf, in_bufsz, out_bufsz, true))) {
			pthread_mutex_lock(&of->lock);
			rc = do_register(fs, of, uid, &buf->r);
			pthread_mutex_unlock(&of->lock);
		}
		*out_len = sizeof(buf->r);
		return rc;
	case SHARDFS_IOC_STAGE:
		if (!(rc = take_in(&buf->s, sizeof(buf->s), in_buf, in_bufsz, out_bufsz, true)))
			rc = stage_call(req, fs, of, &buf->s);
		*out_len = sizeof(buf->s);
		return rc;
	case SHARDFS_IOC_UNREGISTER:
		if (!(rc = take_in(&buf->u, sizeof(buf->u), in_buf, in_bufsz, 0, false)))
			rc = unregister_call(of, uid, &buf->u);
		return rc;
	case SHARDFS_IOC_WARM:
		if (!(rc = take_in(&buf->w, sizeof(buf->w), in_buf, in_bufsz, out_bufsz, true)))
			rc = do_warm(fs, i, of, &buf->w);
		*out_len = sizeof(buf->w);
		return rc;
	}
	return -ENOTTY;
}

/* --- SHARDFS_IOC_HINT_*: on any open file or directory of the mount ------ */

static bool is_hint_cmd(unsigned int cmd)
{
	return cmd == SHARDFS_IOC_HINT_BEGIN || cmd == SHARDFS_IOC_HINT_APPEND ||
	       cmd == SHARDFS_IOC_HINT_COMMIT || cmd == SHARDFS_IOC_HINT_CANCEL ||
	       cmd == SHARDFS_IOC_HINT_STATUS;
}

/* Who sends a list: uid, groups and job of req's caller. */
static void hint_sender(fuse_req_t req, struct sfs_fs *fs, struct sfs_hint_sender *s)
{
	const struct fuse_ctx *c = fuse_req_ctx(req);

	s->uid = c->uid;
	s->gid = c->gid;
	int n = fuse_req_getgroups(req, SFS_HINT_GROUPS_MAX, s->groups);
	s->n_groups = n < 0 ? 0 : n < SFS_HINT_GROUPS_MAX ? n : SFS_HINT_GROUPS_MAX;
	sfs_jobs_label(fs->jobs, c->pid, c->uid, s->job);
}

/* The scratch of the hint ioctls: 16 KiB, not on a worker's stack. */
union hint_ioctl_buf {
	struct shardfs_hint_begin b;
	struct shardfs_hint_append a;
	struct shardfs_hint_commit c;
	struct shardfs_hint_cancel x;
	struct shardfs_hint_status s;
	struct sfs_hint_sender sender;
};

/* Run a hint ioctl for the open file or directory fh; *out_len: bytes of
 * buf to reply. Returns 0 or -errno. */
static int hint_ioctl(fuse_req_t req, struct sfs_fs *fs, uint64_t fh, unsigned int cmd,
		      union hint_ioctl_buf *buf, const void *in_buf, size_t in_bufsz,
		      size_t out_bufsz, size_t *out_len)
{
	int rc;

	*out_len = 0;
	switch (cmd) {
	case SHARDFS_IOC_HINT_BEGIN:
		if ((rc = take_in(&buf->b, sizeof(buf->b), in_buf, in_bufsz, out_bufsz, true)))
			return rc;
		buf->b.max_items = SHARDFS_HINT_MAX_ITEMS;
		buf->b.window = fs->opts->hint_window;
		*out_len = sizeof(buf->b);
		struct shardfs_hint_begin b = buf->b;
		hint_sender(req, fs, &buf->sender);
		rc = sfs_hints_begin(fs->hints, fh, &buf->sender);
		buf->b = b;
		return rc;
	case SHARDFS_IOC_HINT_APPEND:
		if ((rc = take_in(&buf->a, sizeof(buf->a), in_buf, in_bufsz, 0, false)))
			return rc;
		if (buf->a.reserved0 || !all_zero(buf->a.reserved, sizeof(buf->a.reserved)))
			return -EINVAL;
		return sfs_hints_append(fs->hints, fh, &buf->a);
	case SHARDFS_IOC_HINT_COMMIT:
		if ((rc = take_in(&buf->c, sizeof(buf->c), in_buf, in_bufsz, out_bufsz, true)))
			return rc;
		*out_len = sizeof(buf->c);
		return sfs_hints_commit(fs->hints, fh, &buf->c.n_items);
	case SHARDFS_IOC_HINT_CANCEL:
		if ((rc = take_in(&buf->x, sizeof(buf->x), in_buf, in_bufsz, 0, false)))
			return rc;
		if (buf->x.reserved0 || !all_zero(buf->x.reserved, sizeof(buf->x.reserved)))
			return -EINVAL;
		return sfs_hints_cancel(fs->hints, fh);
	default: /* SHARDFS_IOC_HINT_STATUS */
		if ((rc = take_in(&buf->s, sizeof(buf->s), in_buf, in_bufsz, out_bufsz, true)))
			return rc;
		sfs_hints_status(fs->hints, fh, &buf->s);
		*out_len = sizeof(buf->s);
		return 0;
	}
}

static void hint_ioctl_reply(fuse_req_t req, struct sfs_fs *fs, struct sfs_inode *i, uint64_t fh,
			     unsigned int cmd, const void *in_buf, size_t in_bufsz,
			     size_t out_bufsz)
{
	union hint_ioctl_buf *buf = malloc(sizeof(*buf));
	size_t out_len;
	int rc = !buf				      ? -ENOMEM
		 : sfs_inode_kind(i) != SFS_INODE_NFS ? -ENOTTY
		 : !fs->hints
		     ? -ENOTTY
		     : hint_ioctl(req, fs, fh, cmd, buf, in_buf, in_bufsz, out_bufsz, &out_len);
	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_ioctl(req, 0, out_len ? (void *)buf : NULL, out_len);
	free(buf);
}

void sfs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		  struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		  size_t out_bufsz)
{
	struct sfs_fs *fs = fuse_req_userdata(req);
	struct sfs_inode *i = sfs_fs_inode(fs, ino);
	size_t out_len;

	(void)arg;
	__atomic_fetch_add(&fs->op_count[SFS_OP_IOCTL], 1, __ATOMIC_RELAXED);
	if (flags & FUSE_IOCTL_COMPAT) {
		stage_reply_err(req, fs, -EOPNOTSUPP); /* 32-bit callers: refused cleanly */
		return;
	}
	if (is_hint_cmd(cmd)) { /* a list belongs to the open file or directory fh */
		hint_ioctl_reply(req, fs, i, fi->fh, cmd, in_buf, in_bufsz, out_bufsz);
		return;
	}
	if (cmd == SHARDFS_IOC_CACHE_LIST || cmd == SHARDFS_IOC_CACHE_EVICT ||
	    cmd == SHARDFS_IOC_CACHE_EVICT_KEYS) {
		cache_ioctl(req, fs, cmd, in_buf, in_bufsz, out_bufsz);
		return;
	}
	struct sfs_open_file *of = flags & FUSE_IOCTL_DIR ? NULL : sfs_fs_open_file(fs, i, fi->fh);
	if (sfs_inode_kind(i) != SFS_INODE_NFS || !of || flags & FUSE_IOCTL_DIR) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	sfs_kernel_after(of);
	union file_ioctl_buf *buf = malloc(sizeof(*buf));
	if (!buf) {
		sfs_kernel_before(of);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	int rc = file_ioctl(req, fs, i, of, cmd, buf, in_buf, in_bufsz, out_bufsz, &out_len);
	sfs_kernel_before(of);
	if (rc >= 0)
		fuse_reply_ioctl(req, 0, out_len ? (void *)buf : NULL, out_len);
	else if (cmd == SHARDFS_IOC_REGISTER || cmd == SHARDFS_IOC_STAGE ||
		 cmd == SHARDFS_IOC_UNREGISTER)
		stage_reply_err(req, fs, rc); /* counted by reason */
	else
		fuse_reply_err(req, -rc); /* QUERY, WARM, a command not ours */
	free(buf);
}
