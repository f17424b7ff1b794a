// SPDX-License-Identifier: Apache-2.0
/*
 * store/read — reads: a chunk or a range of a version read from its object file
 * or its packed record, every 16 KiB sub-block checked against its XXH3-64 (a
 * mismatch is a miss); the read of a packed version started ahead (preload);
 * the backing fd of a passthrough open. A range read's bytes are a
 * reader's: counted for the version's dataset where they are found
 * (served). Not here: the offer of a chunk and its write (writer.c),
 * making room for it (index.c, policy.c), the dataset counters
 * (policy.c, datasets.c).
 *
 * Threading: any thread. s->lock is taken only to plan and to record the
 * outcome, never across I/O.
 */
#include "store_int.h"

/* --- reads ------------------------------------------------------------------ */

/*
 * A chunk did not check, or its file is gone: unless it was dropped since
 * *gen was sampled, make it ABSENT and clear its record on disk so that a
 * restart does not trust it. While the record is cleared, without the lock,
 * the chunk is WRITING (taken: not read, not rewritten). Counts a checksum
 * failure. Caller holds a reference, not the lock.
 */
static void chunk_fail(sfs_store *s, sfs_store_obj *o, uint32_t index, const uint32_t *gen)
{
	struct chunk_rec zero;
	int fd = -1;

	memset(&zero, 0, sizeof(zero));

	pthread_mutex_lock(&s->lock);
	bool live = index < o->n_chunks && chunk_cached(o, index) && *gen == o->gen;
	if (live) {
		uint32_t len = chunk_len(o, index, s->chunk_shift);
		obj_bytes_add(s, o, -(int64_t)len);
		o->state[index] = SFS_CHUNK_WRITING;
		o->gen++;
		if (o->recs)
			o->recs[index] = zero;
		fd = o->rfd;
	}
	pthread_mutex_unlock(&s->lock);
	count(&s->stats.checksum_failures, 1);
	if (fd >= 0 && pwrite(fd, &zero, sizeof(zero), rec_off(index)) != (ssize_t)sizeof(zero))
		count(&s->stats.errors, 1);
	if (live) {
		pthread_mutex_lock(&s->lock);
		o->state[index] = SFS_CHUNK_ABSENT;
		pthread_mutex_unlock(&s->lock);
		char name[33];
		key_hex(o->key, name);
		if (sfs_log_ratelimit(&s->err_rl, 60000))
			sfs_log(SFS_LOG_WARN, "store",
				"cache object %s chunk %u failed its checksum: refetching", name,
				index);
	}
}

/*
 * One verified read of the version's bytes [start, end): start on a
 * sub-block boundary, end on one or at the version's end, in one or two
 * chunks. Byte x of the version is at x in its data file, so the span is
 * one contiguous pread whichever chunks it crosses.
 *
 * Where the sub-block hashes come from: the object's recs while it is
 * referenced (read from the file once per chunk, then from memory), not a
 * pread of the record at every read. The record's pread comes from the page
 * cache and is cheap beside the data's O_DIRECT pread and its XXH3, so the
 * table saves little per read and costs a record per chunk read while the
 * object is held; it goes with the last reference, and objects whose table
 * would pass RECS_TABLE_MAX read their records every time. A range read
 * reads and hashes only the sub-blocks its bytes lie in; read_chunk would
 * read and hash the whole chunk.
 *
 * Why sub-blocks of SUB_BYTES (16 KiB): the span rounds a read out to whole
 * sub-blocks, so the smaller they are, the fewer disk bytes a record read
 * at random costs per byte served, warm and cold. The price is in the
 * records: one XXH3-64 per sub-block (520 B per 1 MiB chunk), and more
 * XXH3 calls for the same bytes. tools/bench/benchmarks.md has the figures.
 */
struct span {
	uint64_t start, end;
	bool whole;		 /* a whole chunk: VERIFIED if it checks */
	uint32_t c0, n;		 /* chunks c0 .. c0 + n - 1 (n is 1 or 2) */
	struct chunk_rec rec[2]; /* their records, where have[k] */
	bool have[2];
	bool need_table; /* o->recs was NULL: allocate it */
	uint32_t gen;	 /* o->gen when planned */
	int fd, rec_fd;	 /* chunk bytes (O_DIRECT or buffered), records */
	bool direct;
	bool scrub;   /* the scrubber's: not a use (no LRU touch) */
	bool trusted; /* every chunk VERIFIED and conf.trust_verified: not checked */
	uint32_t bad; /* the chunk that failed, for -EBADMSG */
};

/* Under the lock: check that every chunk of the span is cached, get the fds
 * (opened without the lock if the object has none yet) and the records the
 * object holds in memory. Returns 0, -ENOENT (not cached), or -EBADMSG
 * (the file cannot be opened; sp->bad set). Caller holds a reference. */
static int span_plan(sfs_store *s, sfs_store_obj *o, struct span *sp, const void *buf)
{
	sp->c0 = (uint32_t)(sp->start >> s->chunk_shift);
	sp->n = (uint32_t)((sp->end - 1) >> s->chunk_shift) - sp->c0 + 1;
	assert(sp->n == 1 || sp->n == 2);
	for (;;) {
		pthread_mutex_lock(&s->lock);
		for (uint32_t k = 0; k < sp->n; k++)
			if (!chunk_cached(o, sp->c0 + k)) {
				pthread_mutex_unlock(&s->lock);
				return -ENOENT;
			}
		sp->gen = o->gen;
		if (o->fd >= 0)
			break;
		pthread_mutex_unlock(&s->lock);
		if (obj_open_fds(s, o) < 0) {
			sp->bad = sp->c0;
			return -EBADMSG;
		}
	}
	sp->trusted = s->conf.trust_verified && !sp->scrub;
	for (uint32_t k = 0; k < sp->n; k++)
		sp->trusted &= o->state[sp->c0 + k] == SFS_CHUNK_VERIFIED;
	for (uint32_t k = 0; k < sp->n; k++) {
		sp->have[k] = o->recs && o->recs[sp->c0 + k].valid == REC_VALID;
		if (sp->have[k])
			sp->rec[k] = o->recs[sp->c0 + k];
	}
	sp->need_table =
	    !o->recs && (uint64_t)o->n_chunks * sizeof(struct chunk_rec) <= RECS_TABLE_MAX;
	sp->direct = o->dfd >= 0 && ((uintptr_t)buf & 4095) == 0;
	sp->fd = sp->direct ? o->dfd : o->fd;
	sp->rec_fd = o->rfd;
	if (!sp->scrub)
		lru_touch(s, o);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Without the lock: read the records the object did not hold (one buffered
 * pread; the record pages stay in the page cache). Returns 0, -EBADMSG (a
 * record is not valid: sp->bad set) or -errno. */
static int span_recs(sfs_store *s, sfs_store_obj *o, struct span *sp)
{
	struct chunk_rec disk[2];
	uint32_t k0 = sp->have[0] ? 1 : 0, k1 = sp->have[sp->n - 1] ? sp->n - 1 : sp->n;

	if (k0 >= k1 || sp->trusted)
		return 0;
	size_t bytes = (k1 - k0) * sizeof(disk[0]);
	ssize_t got = pread(sp->rec_fd, disk, bytes, rec_off(sp->c0 + k0));
	if (got < 0) {
		int rc = -errno;
		count(&s->stats.errors, 1);
		return rc;
	}
	for (uint32_t k = k0; k < k1; k++) {
		const struct chunk_rec *r = &disk[k - k0];
		if ((size_t)got < (k - k0 + 1) * sizeof(*r) || r->valid != REC_VALID ||
		    r->len != chunk_len(o, sp->c0 + k, s->chunk_shift)) {
			sp->bad = sp->c0 + k;
			return -EBADMSG;
		}
		sp->rec[k] = *r;
	}
	return 0;
}

/* Without the lock: one pread of the span into buf, and every sub-block
 * checked against its record. Returns 0, -EBADMSG (sp->bad set) or -errno. */
static int span_pread(sfs_store *s, sfs_store_obj *o, struct span *sp, void *buf)
{
	size_t want = sp->end - sp->start;
	size_t len = sp->direct ? (want + 4095) & ~(size_t)4095 : want;
	ssize_t n = pread(sp->fd, buf, len, (off_t)sp->start);

	if (n < 0) {
		int rc = -errno;
		count(&s->stats.errors, 1);
		return rc;
	}
	count(&s->stats.read_bytes, (uint64_t)n);
	if (sp->trusted && (size_t)n >= want)
		return 0;
	if (sp->trusted) { /* the file is shorter than its records say */
		sp->bad = (uint32_t)((sp->start + (uint64_t)n) >> s->chunk_shift);
		return -EBADMSG;
	}
	for (uint64_t at = sp->start; at < sp->end; at += SUB_BYTES) {
		uint32_t c = (uint32_t)(at >> s->chunk_shift);
		uint32_t sub = (uint32_t)(at - ((uint64_t)c << s->chunk_shift)) >> SUB_SHIFT;
		size_t sub_len = sp->end - at < SUB_BYTES ? sp->end - at : SUB_BYTES;
		const char *p = (const char *)buf + (at - sp->start);
		if (at + sub_len > sp->start + (uint64_t)n ||
		    sfs_xxh3_64(p, sub_len) != sp->rec[c - sp->c0].sub_xxh64[sub]) {
			sp->bad = c;
			return -EBADMSG;
		}
	}
	return 0;
}

/* Under the lock: keep the records read from disk while the object is
 * referenced, and mark a whole chunk that checked VERIFIED, unless a chunk
 * was dropped meanwhile. Caller holds a reference. */
static void span_done(sfs_store *s, sfs_store_obj *o, struct span *sp)
{
	struct chunk_rec *table = NULL;

	if (sp->need_table && !sp->trusted && !(sp->have[0] && sp->have[sp->n - 1]))
		table = calloc(o->n_chunks, sizeof(*table));
	pthread_mutex_lock(&s->lock);
	if (!o->recs && table) {
		o->recs = table;
		s->mem_bytes += (uint64_t)o->n_chunks * sizeof(*table);
		table = NULL;
	}
	if (sp->gen == o->gen && !sp->trusted) {
		for (uint32_t k = 0; k < sp->n && o->recs; k++)
			o->recs[sp->c0 + k] = sp->rec[k];
		if (sp->whole && o->state[sp->c0] == SFS_CHUNK_PRESENT)
			o->state[sp->c0] = SFS_CHUNK_VERIFIED;
	}
	pthread_mutex_unlock(&s->lock);
	free(table);
}

/* Plan, read and check a span (see struct span). Returns its length, or
 * -ENOENT, -EBADMSG (the failed chunk is ABSENT now), -errno. */
static ssize_t span_run(sfs_store *s, sfs_store_obj *o, struct span *sp, void *buf)
{
	int rc = span_plan(s, o, sp, buf);

	if (rc == 0)
		rc = span_recs(s, o, sp);
	if (rc == 0)
		rc = span_pread(s, o, sp, buf);
	if (rc == -EBADMSG)
		chunk_fail(s, o, sp->bad, &sp->gen);
	else if (rc == 0)
		span_done(s, o, sp);
	return rc < 0 ? rc : (ssize_t)(sp->end - sp->start);
}

/* --- packed versions ------------------------------------------------------------ */

/* Per-thread scratch for reading a packed version whose record does not fit
 * the caller's buffer: sfs_seg_read_buf_bytes(SFS_SEG_MAX_OBJECT) bytes,
 * 4096-aligned, freed when its thread exits. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_init(void)
{
	if (pthread_key_create(&scratch_key, free) != 0)
		abort(); /* only when the process is out of keys: at startup */
}

static void *thread_scratch(void)
{
	pthread_once(&scratch_once, scratch_init);
	void *p = pthread_getspecific(scratch_key);
	if (!p) {
		p = aligned_alloc(4096, sfs_seg_read_buf_bytes(SFS_SEG_MAX_OBJECT));
		if (p && pthread_setspecific(scratch_key, p) != 0) {
			free(p);
			p = NULL;
		}
	}
	return p;
}

/* Account a packed version's read that returned n (its length or -errno):
 * bytes read, a length other than the key's (-EBADMSG: not ours), checksum
 * failures, errors. Returns n, or -EBADMSG for a wrong length. */
static ssize_t packed_outcome(sfs_store *s, const sfs_store_obj *o, ssize_t n)
{
	if (n >= 0)
		count(&s->stats.read_bytes, packed_bytes((uint32_t)n));
	if (n >= 0 && (uint64_t)n != o->size)
		n = -EBADMSG; /* the key holds the size: not ours */
	if (n == -EBADMSG)
		count(&s->stats.checksum_failures, 1);
	else if (n < 0 && n != -ENOENT && n != -EINVAL)
		count(&s->stats.errors, 1);
	return n;
}

/* Read and verify a packed version into buf (4096-aligned, buf_len bytes).
 * Returns its length with *data set, -ENOENT (not in the segments),
 * -EBADMSG (did not check: its entry is gone, a miss), -EINVAL (buf too
 * small) or another -errno. Any thread, no lock. */
static ssize_t packed_read(sfs_store *s, sfs_store_obj *o, void *buf, size_t buf_len,
			   const char **data)
{
	sfs_seg *sg = seg_of(s);

	if (!sg)
		return -ENOENT;
	ssize_t n = sfs_seg_read(sg, o->key, buf, buf_len, data);
	n = packed_outcome(s, o, n);
	return n;
}

/* read_chunk of a packed version: straight into buf when its record fits
 * (then moved down over the record header), else through the scratch. */
static ssize_t packed_read_chunk(sfs_store *s, sfs_store_obj *o, void *buf)
{
	size_t chunk = (size_t)1 << s->chunk_shift;
	bool direct =
	    sfs_seg_read_buf_bytes((uint32_t)o->size) <= chunk && ((uintptr_t)buf & 4095) == 0;
	void *rbuf = direct ? buf : thread_scratch();
	const char *data;

	if (!rbuf)
		return -ENOMEM;
	ssize_t n = packed_read(s, o, rbuf,
				direct ? chunk : sfs_seg_read_buf_bytes(SFS_SEG_MAX_OBJECT), &data);
	if (n > 0)
		memmove(buf, data, (size_t)n);
	return n;
}

/* --- the read entry points ----------------------------------------------------- */

ssize_t sfs_store_read_chunk(sfs_store_obj *o, uint32_t index, void *buf)
{
	sfs_store *s = o->store;

	if (index >= o->n_chunks)
		return -ENOENT;
	if (o->packed)
		return packed_read_chunk(s, o, buf);
	/* On the reader's thread, a plain pread: the reader waits for exactly
	 * this chunk (the kernel's FUSE readahead keeps several in flight).
	 * O_DIRECT rounds the length up to whole blocks: buf holds a chunk. */
	struct span sp = {.start = (uint64_t)index << s->chunk_shift, .whole = true};
	sp.end = sp.start + chunk_len(o, index, s->chunk_shift);
	return span_run(s, o, &sp, buf);
}

ssize_t read_chunk_scrub(sfs_store_obj *o, uint32_t index, void *buf)
{
	sfs_store *s = o->store;

	if (o->packed || index >= o->n_chunks)
		return -ENOENT;
	struct span sp = {.start = (uint64_t)index << s->chunk_shift, .whole = true, .scrub = true};
	sp.end = sp.start + chunk_len(o, index, s->chunk_shift);
	return span_run(s, o, &sp, buf);
}

int sfs_store_obj_backing_check(sfs_store_obj *o)
{
	sfs_store *s = o->store;
	bool complete = true, verified = true;

	if (o->packed)
		return -ENOENT;
	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < o->n_chunks && complete; i++) {
		complete = chunk_cached(o, i);
		verified &= o->state[i] == SFS_CHUNK_VERIFIED;
	}
	complete &= o->on_disk && !o->evicted && s->online && o->n_chunks > 0;
	if (complete && !verified)
		scrub_queue(s, o->key);
	if (complete && verified)
		lru_touch(s, o);
	pthread_mutex_unlock(&s->lock);
	return !complete ? -ENOENT : !verified ? -EAGAIN : 0;
}

int sfs_store_obj_backing_fd(sfs_store_obj *o)
{
	char path[4096];
	int rc = sfs_store_obj_backing_check(o);

	if (rc < 0)
		return rc;
	obj_path(o->store, o->key, path, sizeof(path), OBJ_DATA);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd >= 0 ? fd : -errno;
}

/* A reader got n bytes of o (n <= 0: none) from the cache: counted for o's
 * dataset (sfs_store_dataset_read) here, where they were found. Returns n. */
static ssize_t served(sfs_store *s, const sfs_store_obj *o, ssize_t n)
{
	if (n > 0) /* o->dataset is set at creation: no lock */
		sfs_store_dataset_read(s, o->dataset, (uint64_t)n, 0);
	return n;
}

/* The sub-blocks [*start, *end) that a range read of [off, off + len)
 * (off < size, len > 0) reads and verifies, cut at the version's end. */
static void range_blocks(const sfs_store_obj *o, uint64_t off, size_t len, uint64_t *start,
			 uint64_t *end)
{
	*start = off & ~(uint64_t)(SUB_BYTES - 1);
	*end = ((off + len - 1) | (SUB_BYTES - 1)) + 1;
	if (*end > o->size)
		*end = o->size;
}

ssize_t sfs_store_read_range(sfs_store_obj *o, uint64_t off, size_t len, void *buf, size_t buf_len,
			     const char **data)
{
	sfs_store *s = o->store;

	*data = buf;
	if (len > (1ull << s->chunk_shift))
		return -EINVAL;
	if (off >= o->size || len == 0)
		return 0;
	if (len > o->size - off)
		len = (size_t)(o->size - off);
	if (o->packed) {
		const char *d;
		ssize_t n = packed_read(s, o, buf, buf_len, &d);
		if (n < 0)
			return n;
		*data = d + off;
		return served(s, o, (ssize_t)len);
	}
	struct span sp = {0};
	range_blocks(o, off, len, &sp.start, &sp.end);
	if (((sp.end - sp.start + 4095) & ~4095ull) > buf_len)
		return -EINVAL;
	ssize_t n = span_run(s, o, &sp, buf);
	if (n < 0)
		return n;
	*data = (const char *)buf + (off - sp.start);
	return served(s, o, (ssize_t)len);
}

int sfs_store_read_start(sfs_store_obj *o, void *buf, size_t buf_len, struct sfs_seg_aio **out)
{
	sfs_seg *sg;

	if (!o->packed)
		return -ENOTSUP;
	if (!(sg = seg_of(o->store)))
		return -ENOENT;
	return sfs_seg_read_start(sg, o->key, buf, buf_len, out);
}

ssize_t sfs_store_read_finish(sfs_store_obj *o, struct sfs_seg_aio *a, uint64_t off, size_t len,
			      const char **data)
{
	sfs_store *s = o->store;
	const char *d;
	/* A started read holds its segment: seg_of found it then. */
	ssize_t n = sfs_seg_read_finish(seg_of(s), a, &d);

	n = packed_outcome(s, o, n);
	if (n < 0)
		return n;
	if (off >= o->size || len == 0)
		return 0;
	*data = d + off;
	return served(s, o, (ssize_t)(len < o->size - off ? len : o->size - off));
}

size_t sfs_store_range_bytes(const sfs_store_obj *o, uint64_t off, size_t len)
{
	/* size and packed are set at creation: no lock. */
	if (o->packed)
		return packed_bytes((uint32_t)o->size);
	if (off >= o->size || len == 0)
		return 0;
	uint64_t start, end;
	range_blocks(o, off, len, &start, &end);
	return (size_t)((end - start + 4095) & ~4095ull);
}
