// SPDX-License-Identifier: Apache-2.0
/*
 * store/writer — the write entry and the writer thread: a chunk offered to
 * the cache (sfs_store_write_chunk_hashed: whether it would be taken, policy.c
 * deciding under auto, then its write queued); batches of chunk writes and
 * packed versions, object files created, written and made durable before a
 * chunk becomes visible; control jobs (evictions, purges) run here too. Not
 * here: the rules that admit and evict (index.c, policy.c), reads (read.c).
 *
 * Threading: the write entry runs on any thread and takes s->lock only to
 * decide and queue. The writer thread does its file I/O without s->lock and
 * never calls out with it held; write completions run on it.
 */
#include "store_int.h"

/* --- the write entry: an offer of a chunk, queued for the writer ------------- */

/* Whether write_chunk_hashed refuses: -EAGAIN, -EEXIST, -ENOSPC (pin, auto), or
 * 0. record: a real offer (auto counts and remembers it; see policy_admit).
 * Caller holds lock. */
static int write_refusal(sfs_store *s, sfs_store_obj *o, uint32_t index, uint32_t len, bool record)
{
	uint64_t need = o->packed ? packed_bytes(len) : len;

	if (!s->online || o->evicted)
		return -EAGAIN;
	if (o->state[index] != SFS_CHUNK_ABSENT)
		return -EEXIST;
	if (s->held_bytes + need > s->capacity_bytes)
		return -ENOSPC; /* held versions alone fill it: served uncached */
	if (s->conf.policy == SFS_STORE_PIN && used_total(s) + need > s->capacity_bytes)
		return -ENOSPC;
	if (s->conf.policy == SFS_STORE_AUTO)
		return policy_admit(s, o, index, need, len, record);
	return 0;
}

/* write_refusal of a real offer, counting what was not admitted. Caller
 * holds lock. */
static int write_refused(sfs_store *s, sfs_store_obj *o, uint32_t index, uint32_t len)
{
	int rc = write_refusal(s, o, index, len, true);

	if (rc == -ENOSPC)
		count(&s->stats.not_admitted_bytes, len);
	return rc;
}

bool sfs_store_would_take(sfs_store_obj *o, uint32_t index, uint32_t len)
{
	sfs_store *s = o->store;

	if (index >= o->n_chunks)
		return false;
	pthread_mutex_lock(&s->lock);
	bool take = write_refusal(s, o, index, len, false) == 0;
	pthread_mutex_unlock(&s->lock);
	return take;
}

int sfs_store_write_chunk_hashed(sfs_store_obj *o, uint32_t index, const void *buf, uint32_t len,
				 const uint64_t *sub_xxh64, uint64_t known,
				 void (*done)(void *arg, int err), void *arg)
{
	sfs_store *s = o->store;
	struct write_job *j;

	if (index >= o->n_chunks || len != chunk_len(o, index, s->chunk_shift))
		return -EINVAL;
	if (o->packed && packed_present(s, o))
		return -EEXIST;
	j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	int rc = write_refused(s, o, index, len);
	if (rc) {
		pthread_mutex_unlock(&s->lock);
		free(j);
		return rc;
	}
	o->state[index] = SFS_CHUNK_WRITING;
	o->refs++;
	s->queued_bytes += len;
	*j = (struct write_job){
	    o, index, len, buf, done, arg, NULL, sub_xxh64, sub_xxh64 ? known : 0};
	if (s->jobs_tail)
		s->jobs_tail->next = j;
	else
		s->jobs = j;
	s->jobs_tail = j;
	s->n_jobs++;
	if (!s->gathering || gathered(s)) /* see writer_gather */
		pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* --- the writer ----------------------------------------------------------- */

/* Open an existing object's fds (data buffered and O_DIRECT, records)
 * without the lock; they are installed unless another thread was first,
 * and stay open until the last reference goes. Caller holds a reference,
 * not the lock. Returns 0 or -errno. */
int obj_open_fds(sfs_store *s, sfs_store_obj *o)
{
	char path[4096];

	obj_path(s, o->key, path, sizeof(path), OBJ_SUMS);
	int rfd = open(path, O_RDWR | O_CLOEXEC);
	if (rfd < 0)
		return -errno;
	obj_path(s, o->key, path, sizeof(path), OBJ_DATA);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int e = -errno;
		close(rfd);
		return e;
	}
	/* No readahead on the buffered fd: it would cache pages of a
	 * neighbouring chunk that an O_DIRECT write may be filling (stale). */
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	/* Chunk bytes move with O_DIRECT, both ways: no copy through the
	 * page cache (the buffered copy was most of the daemon's CPU while the
	 * cache filled, and buffered verification reads lagged far behind the
	 * disk), no writeback, no second cached copy of data the FUSE page
	 * cache holds anyway. Filesystems without O_DIRECT (tmpfs) use the
	 * buffered fd. */
	int dfd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	pthread_mutex_lock(&s->lock);
	if (o->fd < 0) {
		o->fd = fd;
		o->dfd = dfd;
		o->rfd = rfd;
		fd = dfd = rfd = -1;
	}
	pthread_mutex_unlock(&s->lock);
	if (dfd >= 0)
		close(dfd);
	if (fd >= 0)
		close(fd);
	if (rfd >= 0)
		close(rfd);
	return 0;
}

/* Create (truncated: nothing of a file left behind survives) one of a new
 * object's files with `bytes` at its start. Returns 0 or -errno (the file
 * removed). */
static int obj_create_one(const char *path, const void *bytes, size_t len, uint64_t size)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, 0) != 0 || (len && pwrite(fd, bytes, len, 0) != (ssize_t)len) ||
	    ftruncate(fd, (off_t)size) != 0) {
		int e = errno ? -errno : -EIO;
		close(fd);
		unlink(path);
		return e;
	}
	close(fd);
	return 0;
}

/* Create a new object's files (an empty data file; the .sums with its
 * header and empty records), then open its fds. Writer thread (the only
 * creator), no lock, o not on disk. Returns 0 or -errno. */
static int obj_create_file(sfs_store *s, sfs_store_obj *o)
{
	char path[4096];
	struct obj_header h = {.magic = OBJ_MAGIC,
			       .size = o->size,
			       .n_chunks = o->n_chunks,
			       .chunk_shift = s->chunk_shift,
			       .data_off = 0,
			       .dataset = o->dataset};

	memcpy(h.key, o->key, 16);
	obj_path(s, o->key, path, sizeof(path), OBJ_DIR);
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return -errno;
	obj_path(s, o->key, path, sizeof(path), OBJ_DATA);
	int rc = obj_create_one(path, NULL, 0, 0);
	if (rc < 0)
		return rc;
	obj_path(s, o->key, path, sizeof(path), OBJ_SUMS);
	rc = obj_create_one(path, &h, sizeof(h), sums_bytes(o->n_chunks));
	if (rc < 0) {
		obj_unlink(s, o->key);
		return rc;
	}
	pthread_mutex_lock(&s->lock);
	o->on_disk = true;
	pthread_mutex_unlock(&s->lock);
	return obj_open_fds(s, o);
}

/* Caller holds lock. */
static void go_offline(sfs_store *s, int err, const char *what)
{
	count(&s->stats.errors, 1);
	if (sfs_log_ratelimit(&s->err_rl, 60000))
		sfs_log(SFS_LOG_WARN, "store",
			"cache %s: %s failed: %s; reading from NFS, retrying", s->conf.dir, what,
			strerror(-err));
	s->online = false;
	s->retry_at_ms = sfs_now_ms() + RETRY_OFFLINE_MS;
}

/* A batch of write jobs, through its steps (write_batch). */
struct batch {
	struct write_job **jobs;
	size_t n;
	int err[WRITE_BATCH];			  /* the outcome each job's done gets */
	uint64_t reserved[WRITE_BATCH];		  /* bytes admitted (0: not admitted) */
	bool io_failed[WRITE_BATCH];		  /* err came from I/O, not admission */
	bool in_flush[WRITE_BATCH];		  /* packed: appended, awaiting a flush */
	struct chunk_rec recs[WRITE_BATCH];	  /* per-file jobs: their records */
	size_t op[WRITE_BATCH];			  /* per-file jobs: their run's data op */
	struct iovec iov[WRITE_BATCH];		  /* per-file jobs: their run's pieces */
	struct sfs_uring_op ops[WRITE_BATCH * 4]; /* per run: 2 writes, <= 2 fdatasyncs */
	size_t n_ops, n_writes;
	sfs_store_obj *victims; /* evicted to make room */
};

static void full_log(sfs_store *s)
{
	if (s->full_logged)
		return;
	s->full_logged = true;
	static const char *const what[] = {
	    [SFS_STORE_LRU] = "lru policy: every cached file is in use",
	    [SFS_STORE_PIN] = "pin policy: keeping what it has, admitting nothing new",
	    [SFS_STORE_AUTO] = "auto policy: each dataset keeps what it holds; "
			       "see refused_bytes in the stats"};
	sfs_log(SFS_LOG_INFO, "store", "cache %s is full (%s)", s->conf.dir, what[s->conf.policy]);
}

/* Step 1, under the lock: online? room (evicting)? Reserve the bytes so
 * that concurrent writers and pin checks see them. */
static void batch_admit(sfs_store *s, struct batch *b)
{
	struct statvfs sv;
	uint64_t fs_avail = UINT64_MAX, in_batch = 0;

	if (statvfs(s->conf.dir, &sv) == 0)
		fs_avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < b->n; i++) {
		struct write_job *j = b->jobs[i];
		uint64_t need = j->obj->packed ? packed_bytes(j->len) : j->len;
		if (!s->online || j->obj->evicted) {
			b->err[i] = -EAGAIN;
			continue;
		}
		if (!make_room(s, j->obj, need, in_batch, &fs_avail, &b->victims)) {
			b->err[i] = -ENOSPC;
			count(&s->stats.not_admitted_bytes, j->len);
			full_log(s);
			continue;
		}
		in_batch += need;
		b->reserved[i] = need;
		policy_admitted(s, j->obj, j->len);
		if (j->obj->packed)
			s->seg_reserved += need;
		else
			obj_bytes_add(s, j->obj, (int64_t)need);
	}
	pthread_mutex_unlock(&s->lock);
}

/* Step 2, no lock: evicted objects' files go; admitted per-file jobs get
 * their object's file (created, or opened if it has no fds). */
static void batch_files(sfs_store *s, struct batch *b)
{
	victims_free(s, b->victims);
	b->victims = NULL;
	for (size_t i = 0; i < b->n; i++) {
		sfs_store_obj *o = b->jobs[i]->obj;
		if (!b->reserved[i] || o->packed)
			continue;
		pthread_mutex_lock(&s->lock);
		bool open = o->fd >= 0, on_disk = o->on_disk;
		pthread_mutex_unlock(&s->lock);
		int rc = open ? 0 : on_disk ? obj_open_fds(s, o) : obj_create_file(s, o);
		if (rc < 0) {
			b->err[i] = rc;
			b->io_failed[i] = true;
		}
	}
}

/* The flush of the packed jobs appended so far: its result is theirs. */
static void batch_flush(sfs_seg *sg, struct batch *b)
{
	int rc = sfs_seg_flush(sg);

	for (size_t i = 0; i < b->n; i++)
		if (b->in_flush[i]) {
			b->in_flush[i] = false;
			b->err[i] = rc;
			b->io_failed[i] = rc != 0;
		}
}

/* Step 3, no lock: packed jobs appended to the segment write buffer, then
 * one flush (one write + one fdatasync) for all of them; a full buffer is
 * flushed on the way. */
static void batch_packed(sfs_store *s, struct batch *b)
{
	sfs_seg *sg = seg_of(s);
	bool any = false;

	for (size_t i = 0; i < b->n; i++) {
		struct write_job *j = b->jobs[i];
		if (!b->reserved[i] || !j->obj->packed || b->err[i])
			continue;
		int rc = sfs_seg_append(sg, j->obj->key, j->buf, j->len, j->obj->dataset);
		if (rc == -ENOBUFS) {
			batch_flush(sg, b);
			rc = sfs_seg_append(sg, j->obj->key, j->buf, j->len, j->obj->dataset);
		}
		if (rc == -EEXIST) /* durable already: a lookup raced its queueing */
			continue;
		if (rc < 0) {
			b->err[i] = rc;
			b->io_failed[i] = rc != -EMLINK; /* the index names no more datasets */
			continue;
		}
		b->in_flush[i] = any = true;
	}
	if (any)
		batch_flush(sg, b);
}

/* Whether job i is written by batch_per_file. */
static bool per_file_job(const struct batch *b, size_t i)
{
	return b->reserved[i] && !b->jobs[i]->obj->packed && !b->err[i];
}

/* Whether job j's data goes through the object's O_DIRECT fd. */
static bool job_direct(const struct write_job *j)
{
	return j->obj->dfd >= 0 && j->len % 4096 == 0 && ((uintptr_t)j->buf & 4095) == 0;
}

/* The jobs from i that one run writes: per-file jobs of one object, chunk
 * after chunk, all direct or none (write_batch sorted them by object and
 * chunk). Returns the count. Caller holds lock. */
static size_t run_length(const struct batch *b, size_t i)
{
	const struct write_job *j = b->jobs[i];
	size_t k = 1;

	while (i + k < b->n && per_file_job(b, i + k)) {
		const struct write_job *n = b->jobs[i + k];
		if (n->obj != j->obj || n->index != j->index + k || job_direct(n) != job_direct(j))
			break;
		k++;
	}
	return k;
}

/* Step 4: per-file jobs as io_uring ops (fds read under the lock): each run
 * of consecutive chunks of one object is one gathered data write and one
 * write of their records (adjacent in the .sums), then one fdatasync per
 * file written (syncing any fd of a file syncs the file's data, O_DIRECT
 * writes included); run without the lock. A run, not a chunk, per
 * write: extending O_DIRECT writes take the inode's lock exclusively and
 * go through io_uring's worker threads, one punt and one lock round each.
 * Sets b->n_writes and b->op[] of every per-file job. */
static void batch_per_file(sfs_store *s, struct batch *b)
{
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < b->n;) {
		if (!per_file_job(b, i)) {
			i++;
			continue;
		}
		size_t k = run_length(b, i);
		struct write_job *j = b->jobs[i];
		sfs_store_obj *o = j->obj;
		bool direct = job_direct(j);
		size_t bytes = 0;
		for (size_t m = 0; m < k; m++) {
			b->iov[i + m] =
			    (struct iovec){(void *)b->jobs[i + m]->buf, b->jobs[i + m]->len};
			bytes += b->jobs[i + m]->len;
			b->op[i + m] = b->n_ops;
		}
		off_t at = (off_t)((uint64_t)j->index << s->chunk_shift);
		b->ops[b->n_ops++] = (struct sfs_uring_op){.kind = SFS_URING_WRITE,
							   .fd = direct ? o->dfd : o->fd,
							   .buf = (void *)j->buf,
							   .len = bytes,
							   .off = at,
							   .iov = k > 1 ? &b->iov[i] : NULL,
							   .n_iov = k > 1 ? (int)k : 0};
		b->ops[b->n_ops++] = (struct sfs_uring_op){.kind = SFS_URING_WRITE,
							   .fd = o->rfd,
							   .buf = &b->recs[i],
							   .len = k * sizeof(b->recs[i]),
							   .off = rec_off(j->index)};
		i += k;
	}
	b->n_writes = b->n_ops;
	for (size_t i = 0; i < b->n_writes; i++) { /* each file written, once */
		bool seen = false;
		for (size_t k = b->n_writes; k < b->n_ops; k++)
			seen |= b->ops[k].fd == b->ops[i].fd;
		if (!seen)
			b->ops[b->n_ops++] =
			    (struct sfs_uring_op){.kind = SFS_URING_FDATASYNC, .fd = b->ops[i].fd};
	}
	pthread_mutex_unlock(&s->lock);
	if (b->n_ops)
		sfs_uring_run(s->ring, b->ops, b->n_ops);
	for (size_t i = 0; i < b->n; i++) {
		if (!per_file_job(b, i))
			continue;
		/* A short or failed write fails every chunk of its run. */
		struct sfs_uring_op *d = &b->ops[b->op[i]], *r = d + 1;
		int rc = d->result != (int)d->len   ? (d->result < 0 ? d->result : -EIO)
			 : r->result != (int)r->len ? (r->result < 0 ? r->result : -EIO)
						    : 0;
		for (size_t k = b->n_writes; k < b->n_ops && !rc; k++)
			if ((b->ops[k].fd == r->fd || b->ops[k].fd == d->fd) &&
			    b->ops[k].result < 0)
				rc = b->ops[k].result;
		b->err[i] = rc;
		b->io_failed[i] = rc != 0;
	}
}

/* Step 5, under the lock: a chunk becomes visible only if its writes and
 * its fsync (flush) succeeded; failed ones give their bytes back. */
static void batch_outcomes(sfs_store *s, struct batch *b)
{
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < b->n; i++) {
		struct write_job *j = b->jobs[i];
		sfs_store_obj *o = j->obj;
		if (o->packed)
			s->seg_reserved -= b->reserved[i];
		if (b->err[i] == 0) {
			if (o->packed) {
				o->state[0] = SFS_CHUNK_ABSENT; /* the segment has it now */
			} else {
				if (o->recs)
					o->recs[j->index] = b->recs[i];
				o->state[j->index] = SFS_CHUNK_VERIFIED;
			}
			count(&s->stats.write_bytes, j->len);
			sfs_dsets_touch(s->dsets, o->dataset);
		} else if (b->reserved[i] && !o->packed) {
			obj_bytes_add(s, o, -(int64_t)j->len);
		}
		if (b->err[i] == -EMLINK)
			count(&s->stats.not_admitted_bytes, j->len);
		if (b->io_failed[i] && b->err[i] == -ENOSPC) {
			count(&s->stats.not_admitted_bytes, j->len);
			if (sfs_log_ratelimit(&s->err_rl, 60000))
				sfs_log(SFS_LOG_WARN, "store",
					"cache filesystem of %s is full: evicting", s->conf.dir);
			/* Shrink the target below what the filesystem holds. */
			if (used_total(s) < s->capacity_bytes)
				s->capacity_bytes = used_total(s);
		} else if (b->io_failed[i] && s->online) {
			go_offline(s, b->err[i], "writing to the cache");
		}
		if (b->err[i] != 0 && o->state[j->index] == SFS_CHUNK_WRITING)
			o->state[j->index] = SFS_CHUNK_ABSENT;
		s->queued_bytes -= j->len;
	}
	seg_refresh(s);
	pthread_mutex_unlock(&s->lock);
}

/* qsort order of a batch: by object, then chunk (batch_per_file's runs). */
static int job_order(const void *pa, const void *pb)
{
	const struct write_job *a = *(const struct write_job *const *)pa,
			       *b = *(const struct write_job *const *)pb;
	uintptr_t oa = (uintptr_t)a->obj, ob = (uintptr_t)b->obj;

	if (oa != ob)
		return oa < ob ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

/* Write one batch: records hashed, admission, files, packed versions (one
 * segment flush), per-file chunks (one fdatasync per object), outcomes,
 * then the done callbacks without the lock. */
static void write_batch(sfs_store *s, struct write_job **jobs, size_t n)
{
	struct batch *b = calloc(1, sizeof(*b));

	if (!b) {
		for (size_t i = 0; i < n; i++) {
			struct write_job *j = jobs[i];
			pthread_mutex_lock(&s->lock);
			j->obj->state[j->index] = SFS_CHUNK_ABSENT;
			s->queued_bytes -= j->len;
			pthread_mutex_unlock(&s->lock);
			j->done(j->arg, -ENOMEM);
			sfs_store_obj_put(j->obj);
			free(j);
		}
		return;
	}
	/* By object and chunk: batch_per_file writes runs of consecutive chunks. */
	qsort(jobs, n, sizeof(*jobs), job_order);
	b->jobs = jobs;
	b->n = n;
	for (size_t i = 0; i < n; i++)
		if (!jobs[i]->obj->packed)
			rec_fill(&b->recs[i], jobs[i]->buf, jobs[i]->len, jobs[i]->sub_xxh64,
				 jobs[i]->known);
	batch_admit(s, b);
	batch_files(s, b);
	batch_packed(s, b);
	batch_per_file(s, b);
	batch_outcomes(s, b);
	for (size_t i = 0; i < n; i++) {
		jobs[i]->done(jobs[i]->arg, b->err[i]);
		sfs_store_obj_put(jobs[i]->obj);
		free(jobs[i]);
	}
	free(b);
}

/* Offline: the directory may be back (created, remounted, space freed).
 * Writer thread; caller holds lock (dropped around the attach). */
static void writer_retry(sfs_store *s)
{
	char err[256];

	pthread_mutex_unlock(&s->lock);
	int rc = s->lock_fd < 0 ? store_attach(s, err, sizeof(err)) : 0;
	pthread_mutex_lock(&s->lock);
	if (rc == 0) {
		s->online = true;
		sfs_dsets_load(s->dsets); /* names saved before it went away */
		sfs_log(SFS_LOG_INFO, "store", "cache %s is usable again", s->conf.dir);
	} else {
		s->retry_at_ms = sfs_now_ms() + RETRY_OFFLINE_MS;
	}
}

/* Whether a gathering writer has enough to write (or must stop waiting).
 * Caller holds lock. */
bool gathered(const sfs_store *s)
{
	return s->n_jobs >= GATHER_JOBS || s->queued_bytes >= GATHER_BYTES || s->stopping || s->ctl;
}

/*
 * Take up to WRITE_BATCH jobs. Packed ones wait for company first, up to
 * GATHER_MS or until a batch's worth is queued (gathered()): one segment
 * flush (one write, one fdatasync) then serves them all. Jobs queued
 * meanwhile do not wake the writer (s->gathering) until there are enough:
 * a wake-up per job costs more than the flush it saves, and gathering this
 * way makes one fdatasync and one wake-up serve many files. A deep queue
 * never waits; prefetch
 * keeps serving the bytes from memory meanwhile. Caller holds lock.
 */
void writer_gather(sfs_store *s)
{
	struct timespec end = sfs_deadline(CLOCK_REALTIME, GATHER_MS * 1000u);
	int rc = 0;

	s->gathering = true;
	while (!gathered(s) && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&s->work, &s->lock, &end);
	s->gathering = false;
}

static size_t writer_take(sfs_store *s, struct write_job **batch)
{
	size_t n = 0;

	if (!gathered(s) && s->jobs->obj->packed)
		writer_gather(s);
	while (s->jobs && n < WRITE_BATCH) {
		batch[n++] = s->jobs;
		s->jobs = s->jobs->next;
		s->n_jobs--;
	}
	if (!s->jobs)
		s->jobs_tail = NULL;
	return n;
}

/* Run the queued evictions, one at a time, and wake their callers. Writer
 * thread; caller holds lock (dropped around each). */
static void writer_ctl(sfs_store *s)
{
	while (s->ctl) {
		struct ctl_job *c = s->ctl;
		s->ctl = c->next;
		pthread_mutex_unlock(&s->lock);
		run_ctl(s, c);
		pthread_mutex_lock(&s->lock);
		c->done = true;
		pthread_cond_broadcast(&s->ctl_done);
	}
}

/* Dataset names reach the disk before objects that carry their ids (a
 * crash in between would leave ids without names); counters every
 * DSETS_SAVE_MS. Writer thread; caller holds lock (dropped). */
static void writer_save_dsets(sfs_store *s, bool names_only, uint64_t *saved_ms)
{
	uint64_t now = sfs_now_ms();

	if (!s->online || (!names_only && now - *saved_ms < DSETS_SAVE_MS))
		return;
	pthread_mutex_unlock(&s->lock);
	sfs_dsets_save(s->dsets, names_only);
	pthread_mutex_lock(&s->lock);
	if (!names_only)
		*saved_ms = now;
}

void *writer_main(void *arg)
{
	sfs_store *s = arg;
	pthread_setname_np(pthread_self(), "sfs-write"); /* top -H, perf --sort comm */
	struct write_job *batch[WRITE_BATCH];
	uint64_t saved_ms = sfs_now_ms();

	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->jobs && !s->ctl && !s->stopping) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&s->work, &s->lock, &ts);
			if (!s->online && sfs_now_ms() >= s->retry_at_ms)
				writer_retry(s);
			writer_save_dsets(s, false, &saved_ms);
		}
		writer_ctl(s);
		if (!s->jobs && s->stopping)
			break;
		if (!s->jobs)
			continue;
		writer_save_dsets(s, true, &saved_ms);
		size_t n = writer_take(s, batch);
		pthread_mutex_unlock(&s->lock);
		write_batch(s, batch, n);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}
