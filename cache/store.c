// SPDX-License-Identifier: Apache-2.0
/*
 * store — chunks of cached file versions on local disk. See store.h.
 *
 * On disk, cache_dir/:
 *   LOCK                       flock()ed by the daemon that owns the cache
 *   objects/KK/KEY             one object per file version (KEY = 32 hex digits
 *                              of XXH3-128, KK its first two)
 * An object file:
 *   [0, 64)                    struct obj_header
 *   [64, 64 + 16 n_chunks)     struct chunk_rec, one per chunk
 *   [data_off + i MiB, ...)    chunk i's bytes (data_off 4096-aligned)
 * A chunk counts only if its record is valid, its length matches what the
 * file size implies, the file is long enough, and (when first read in this
 * run) its XXH3-64 matches. Records are written with the data and made
 * durable by one fdatasync per object per batch before the chunk becomes
 * visible in memory; a crash can leave a record without its data, which
 * the checksum turns into a miss.
 *
 * In memory: a hash of objects by key and an LRU list of objects (least
 * recently used first), both protected by store->lock, which also protects
 * every object's state[] / recs[] / used_bytes / refs / fd. Lock order:
 * callers may hold their own locks (prefetch file locks) when calling in;
 * store->lock is a leaf. The writer thread never calls out with it held.
 */
#include "store.h"
#include "log.h"
#include "uring.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#define OBJ_MAGIC	 0x31534a424f534653ull /* "SFSOBJS1" */
#define REC_VALID	 0x4b4f4843u	       /* "CHOK" */
#define WRITE_BATCH	 64
#define RETRY_OFFLINE_MS 5000

struct obj_header {
	uint64_t magic;
	uint8_t key[16];
	uint64_t size;
	uint32_t n_chunks;
	uint32_t chunk_shift;
	uint64_t data_off;
	uint8_t reserved[16];
};
_Static_assert(sizeof(struct obj_header) == 64, "header layout");

struct chunk_rec {
	uint64_t xxh64;
	uint32_t len;
	uint32_t valid;
};
_Static_assert(sizeof(struct chunk_rec) == 16, "record layout");

struct sfs_store_obj {
	sfs_store *store;  /* set at creation */
	uint8_t key[16];   /* set at creation */
	char name[33];	   /* set at creation: hex key */
	uint64_t size;	   /* set at creation */
	uint32_t n_chunks; /* set at creation */
	uint64_t data_off; /* set at creation */
	/* protected by store->lock */
	uint8_t *state; /* enum sfs_chunk_state per chunk */
	struct chunk_rec *recs;
	uint64_t used_bytes;
	unsigned refs;
	int fd;	 /* -1 until needed; closed when refs drops to 0 */
	int dfd; /* O_DIRECT twin of fd for chunk bytes, or -1 */
	bool on_disk, in_index;
	struct sfs_store_obj *hnext, *lru_prev, *lru_next;
};

struct write_job {
	sfs_store_obj *obj; /* referenced */
	uint32_t index, len;
	const void *buf;
	void (*done)(void *arg, int err);
	void *arg;
	struct write_job *next;
};

struct sfs_store {
	struct sfs_store_conf conf; /* set at open; dir owned */
	unsigned chunk_shift;	    /* set at open */
	int lock_fd;		    /* set at open */
	uint64_t min_free_bytes;    /* set at open: leave the filesystem this much */

	pthread_mutex_t lock;
	pthread_cond_t work;	 /* jobs queued or stopping */
	sfs_store_obj **buckets; /* protected by lock */
	size_t n_buckets, n_objects;
	sfs_store_obj *lru_head, *lru_tail; /* protected by lock; head = coldest */
	uint64_t used_bytes;		    /* protected by lock */
	uint64_t capacity_bytes;	    /* protected by lock */
	bool online;			    /* protected by lock */
	uint64_t retry_at_ms;		    /* protected by lock */
	bool full_logged;		    /* protected by lock */
	struct write_job *jobs, *jobs_tail; /* protected by lock */
	uint64_t queued_bytes;		    /* protected by lock: chunk bytes not yet written */
	bool stopping;			    /* protected by lock */

	pthread_t writer;
	bool writer_started;
	sfs_uring *ring; /* writer thread only */
	struct sfs_log_ratelimit err_rl;
	struct sfs_store_stats stats; /* atomic counters (used/capacity/online from fields) */
};

static void count(uint64_t *c, uint64_t n) { __atomic_fetch_add(c, n, __ATOMIC_RELAXED); }

static void key_for(const struct sfs_file_version *v, uint8_t key[16])
{
	/* Packed explicitly: padding must not reach the hash. */
	uint8_t raw[8 * 5 + 4 * 2];
	size_t o = 0;
#define PUT(x) (memcpy(raw + o, &(x), sizeof(x)), o += sizeof(x))
	PUT(v->fsid);
	PUT(v->fileid);
	PUT(v->size);
	PUT(v->mtime_s);
	PUT(v->ctime_s);
	PUT(v->mtime_ns);
	PUT(v->ctime_ns);
#undef PUT
	XXH128_hash_t h = XXH3_128bits(raw, o);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	memcpy(key, c.digest, 16);
}

static void key_hex(const uint8_t key[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", key[i]);
}

static size_t bucket_of(const sfs_store *s, const uint8_t key[16])
{
	uint64_t h;
	memcpy(&h, key, sizeof(h));
	return (size_t)h & (s->n_buckets - 1);
}

static uint64_t header_bytes(uint32_t n_chunks)
{
	uint64_t n = sizeof(struct obj_header) + (uint64_t)n_chunks * sizeof(struct chunk_rec);
	return (n + 4095) & ~4095ull;
}

static uint32_t chunk_len(const sfs_store_obj *o, uint32_t index, unsigned shift)
{
	uint64_t start = (uint64_t)index << shift;
	uint64_t left = o->size - start;
	return (uint32_t)(left < (1ull << shift) ? left : (1ull << shift));
}

/* --- index (caller holds s->lock) ----------------------------------------- */

static void lru_unlink(sfs_store *s, sfs_store_obj *o)
{
	if (o->lru_prev)
		o->lru_prev->lru_next = o->lru_next;
	else if (s->lru_head == o)
		s->lru_head = o->lru_next;
	if (o->lru_next)
		o->lru_next->lru_prev = o->lru_prev;
	else if (s->lru_tail == o)
		s->lru_tail = o->lru_prev;
	o->lru_prev = o->lru_next = NULL;
}

static void lru_touch(sfs_store *s, sfs_store_obj *o)
{
	lru_unlink(s, o);
	o->lru_prev = s->lru_tail;
	if (s->lru_tail)
		s->lru_tail->lru_next = o;
	else
		s->lru_head = o;
	s->lru_tail = o;
}

static sfs_store_obj *index_find(sfs_store *s, const uint8_t key[16])
{
	for (sfs_store_obj *o = s->buckets[bucket_of(s, key)]; o; o = o->hnext)
		if (!memcmp(o->key, key, 16))
			return o;
	return NULL;
}

static void index_add(sfs_store *s, sfs_store_obj *o)
{
	size_t b = bucket_of(s, o->key);
	o->hnext = s->buckets[b];
	s->buckets[b] = o;
	o->in_index = true;
	s->n_objects++;
	lru_touch(s, o);
	if (s->n_objects > s->n_buckets * 2) {
		size_t n = s->n_buckets * 2;
		sfs_store_obj **nb = calloc(n, sizeof(*nb));
		if (!nb)
			return;
		for (size_t i = 0; i < s->n_buckets; i++)
			for (sfs_store_obj *x = s->buckets[i], *next; x; x = next) {
				next = x->hnext;
				uint64_t h;
				memcpy(&h, x->key, sizeof(h));
				x->hnext = nb[h & (n - 1)];
				nb[h & (n - 1)] = x;
			}
		free(s->buckets);
		s->buckets = nb;
		s->n_buckets = n;
	}
}

static void index_remove(sfs_store *s, sfs_store_obj *o)
{
	for (sfs_store_obj **p = &s->buckets[bucket_of(s, o->key)]; *p; p = &(*p)->hnext)
		if (*p == o) {
			*p = o->hnext;
			break;
		}
	o->hnext = NULL;
	o->in_index = false;
	s->n_objects--;
	lru_unlink(s, o);
}

static sfs_store_obj *obj_new(sfs_store *s, const uint8_t key[16], uint64_t size)
{
	sfs_store_obj *o = calloc(1, sizeof(*o));
	uint64_t n = (size + (1ull << s->chunk_shift) - 1) >> s->chunk_shift;

	if (!o || n > UINT32_MAX)
		goto err;
	o->store = s;
	memcpy(o->key, key, 16);
	key_hex(key, o->name);
	o->size = size;
	o->n_chunks = (uint32_t)n;
	o->data_off = header_bytes(o->n_chunks);
	o->fd = -1;
	o->dfd = -1;
	o->state = calloc(n ? n : 1, 1);
	o->recs = calloc(n ? n : 1, sizeof(*o->recs));
	if (!o->state || !o->recs)
		goto err;
	return o;
err:
	if (o) {
		free(o->state);
		free(o->recs);
	}
	free(o);
	return NULL;
}

static void obj_free(sfs_store_obj *o)
{
	if (o->dfd >= 0)
		close(o->dfd);
	if (o->fd >= 0)
		close(o->fd);
	free(o->state);
	free(o->recs);
	free(o);
}

static void obj_path(const sfs_store *s, const sfs_store_obj *o, char *buf, size_t len,
		     bool dir_only)
{
	if (dir_only)
		snprintf(buf, len, "%s/objects/%.2s", s->conf.dir, o->name);
	else
		snprintf(buf, len, "%s/objects/%.2s/%s", s->conf.dir, o->name, o->name);
}

/* Drop an object from disk and the index (caller holds lock, refs == 0). */
static void obj_evict(sfs_store *s, sfs_store_obj *o)
{
	char path[4096];

	obj_path(s, o, path, sizeof(path), false);
	unlink(path);
	count(&s->stats.evicted_bytes, o->used_bytes);
	s->used_bytes -= o->used_bytes;
	index_remove(s, o);
	obj_free(o);
}

/* Make room for `need` more bytes under capacity and the free-space floor.
 * lru: evict cold objects nobody holds. Returns true if there is room.
 * Caller holds lock. */
static bool make_room(sfs_store *s, uint64_t need, uint64_t in_batch)
{
	struct statvfs sv;
	uint64_t fs_avail = UINT64_MAX;

	if (statvfs(s->conf.dir, &sv) == 0)
		fs_avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	for (;;) {
		/* in_batch: bytes admitted earlier in this batch, not yet
		 * written, so statvfs does not see them yet. */
		bool fits = s->used_bytes + need <= s->capacity_bytes &&
			    fs_avail >= need + in_batch + s->min_free_bytes;
		if (fits)
			return true;
		if (s->conf.policy == SFS_STORE_PIN)
			return false;
		sfs_store_obj *victim = NULL;
		for (sfs_store_obj *o = s->lru_head; o; o = o->lru_next)
			if (o->refs == 0 && o->used_bytes) {
				victim = o;
				break;
			}
		if (!victim)
			return false;
		uint64_t freed = victim->used_bytes;
		obj_evict(s, victim);
		if (fs_avail != UINT64_MAX)
			fs_avail += freed;
	}
}

/* --- loading -------------------------------------------------------------- */

/* Load one object file into the index; delete it if it is not ours or is
 * unusable. Caller holds lock. A key already indexed (an object created in
 * memory before the directory came back) keeps the in-memory one. */
static void load_object(sfs_store *s, const char *path, const char *name)
{
	struct obj_header h;
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (fstat(fd, &st) != 0 || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.magic != OBJ_MAGIC || h.chunk_shift != s->chunk_shift)
		goto discard;
	char hex[33];
	key_hex(h.key, hex);
	if (strcmp(hex, name) != 0 || h.data_off != header_bytes(h.n_chunks))
		goto discard;
	if (index_find(s, h.key)) {
		close(fd);
		return;
	}
	sfs_store_obj *o = obj_new(s, h.key, h.size);
	if (!o || o->n_chunks != h.n_chunks) {
		if (o)
			obj_free(o);
		goto discard;
	}
	size_t rec_bytes = (size_t)o->n_chunks * sizeof(struct chunk_rec);
	if (pread(fd, o->recs, rec_bytes, sizeof(h)) != (ssize_t)rec_bytes) {
		obj_free(o);
		goto discard;
	}
	for (uint32_t i = 0; i < o->n_chunks; i++) {
		struct chunk_rec *r = &o->recs[i];
		uint32_t want = chunk_len(o, i, s->chunk_shift);
		uint64_t end = o->data_off + ((uint64_t)i << s->chunk_shift) + want;
		if (r->valid == REC_VALID && r->len == want && (uint64_t)st.st_size >= end) {
			o->state[i] = SFS_CHUNK_PRESENT;
			o->used_bytes += want;
		} else {
			memset(r, 0, sizeof(*r));
		}
	}
	close(fd);
	o->on_disk = true;
	s->used_bytes += o->used_bytes;
	index_add(s, o);
	return;
discard:
	close(fd);
	unlink(path);
}

static void load_index(sfs_store *s)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/objects", s->conf.dir);
	DIR *top = opendir(path);
	struct dirent *d, *e;

	if (!top)
		return;
	while ((d = readdir(top))) {
		if (strlen(d->d_name) != 2 || !isxdigit((unsigned char)d->d_name[0]) ||
		    !isxdigit((unsigned char)d->d_name[1]))
			continue; /* not one of our KK directories */
		char sub[4096];
		snprintf(sub, sizeof(sub), "%s/objects/%.2s", s->conf.dir, d->d_name);
		DIR *dd = opendir(sub);
		if (!dd)
			continue;
		while ((e = readdir(dd))) {
			if (e->d_name[0] == '.')
				continue;
			char file[4096 + 300];
			snprintf(file, sizeof(file), "%s/%s", sub, e->d_name);
			if (strlen(e->d_name) == 32)
				load_object(s, file, e->d_name);
			else
				unlink(file); /* not ours: leftovers of an older layout */
		}
		closedir(dd);
	}
	closedir(top);
}

/* Create the directory tree and take the lock. Returns 0, -EBUSY (owned by
 * another daemon; err names it) or another -errno (directory unusable). */
static int store_attach(sfs_store *s, char *err, size_t err_len)
{
	char path[4096];
	int fd;

	if (mkdir(s->conf.dir, 0700) != 0 && errno != EEXIST)
		return -errno;
	chmod(s->conf.dir, 0700); /* cached bytes are readable by the mounter only */
	snprintf(path, sizeof(path), "%s/objects", s->conf.dir);
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return -errno;
	snprintf(path, sizeof(path), "%s/LOCK", s->conf.dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno == EWOULDBLOCK ? -EBUSY : -errno;
		char pid[32] = "";
		ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		snprintf(err, err_len, "cache_dir %s is in use by another shardfs (pid %s)",
			 s->conf.dir, pid[0] ? pid : "?");
		close(fd);
		return e;
	}
	char pid[32];
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
		/* The lock is what matters; the pid is a courtesy. */
	}
	pthread_mutex_lock(&s->lock);
	s->lock_fd = fd;
	if (s->conf.capacity_bytes == 0) {
		struct statvfs sv;
		if (statvfs(s->conf.dir, &sv) == 0)
			s->capacity_bytes = (uint64_t)sv.f_blocks * sv.f_frsize / 10 * 9;
	}
	struct statvfs sv;
	if (statvfs(s->conf.dir, &sv) == 0) {
		uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
		s->min_free_bytes = total / 20 < (4ull << 30) ? total / 20 : (4ull << 30);
	}
	load_index(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* --- the writer ----------------------------------------------------------- */

/* Open (creating if needed) an object's file and write its header. Caller
 * holds lock. Returns 0 or -errno. */
static int obj_open_file(sfs_store *s, sfs_store_obj *o, bool create)
{
	char path[4096];

	if (o->fd >= 0)
		return 0;
	if (create && !o->on_disk) {
		obj_path(s, o, path, sizeof(path), true);
		if (mkdir(path, 0700) != 0 && errno != EEXIST)
			return -errno;
	}
	obj_path(s, o, path, sizeof(path), false);
	int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
	if (fd < 0)
		return -errno;
	if (create && !o->on_disk) {
		struct obj_header h = {.magic = OBJ_MAGIC,
				       .size = o->size,
				       .n_chunks = o->n_chunks,
				       .chunk_shift = s->chunk_shift,
				       .data_off = o->data_off};
		memcpy(h.key, o->key, 16);
		if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
		    ftruncate(fd, (off_t)o->data_off) != 0) {
			int e = -errno;
			close(fd);
			unlink(path);
			return e ? e : -EIO;
		}
		o->on_disk = true;
	}
	o->fd = fd;
	/* No readahead on the buffered fd: it would cache pages of a
	 * neighbouring chunk that an O_DIRECT write may be filling (stale). */
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	if (o->dfd < 0) {
		/* Chunk bytes move with O_DIRECT, both ways: no copy through the
		 * page cache, no writeback, no second cached copy of data the
		 * FUSE page cache holds anyway (measured: the buffered copy was
		 * 62% of the daemon's CPU while filling the cache, and buffered
		 * verification reads ran at 0.3 x local disk). Filesystems
		 * without O_DIRECT (tmpfs) use the buffered fd. */
		o->dfd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	}
	return 0;
}

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

/* Write one batch: data and records, then one fdatasync per object. */
static void write_batch(sfs_store *s, struct write_job **jobs, size_t n)
{
	struct sfs_uring_op ops[WRITE_BATCH * 3];
	struct chunk_rec recs[WRITE_BATCH];
	int err[WRITE_BATCH];
	size_t n_ops = 0;

	for (size_t i = 0; i < n; i++) {
		recs[i] = (struct chunk_rec){XXH3_64bits(jobs[i]->buf, jobs[i]->len), jobs[i]->len,
					     REC_VALID};
		err[i] = 0;
	}
	/* Admission and files, under the lock. */
	uint64_t in_batch = 0;
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		struct write_job *j = jobs[i];
		sfs_store_obj *o = j->obj;
		if (!s->online) {
			err[i] = -EAGAIN;
			continue;
		}
		if (!make_room(s, j->len, in_batch)) {
			err[i] = -ENOSPC;
			count(&s->stats.not_admitted_bytes, j->len);
			if (!s->full_logged) {
				s->full_logged = true;
				sfs_log(SFS_LOG_INFO, "store", "cache %s is full (%s policy): %s",
					s->conf.dir,
					s->conf.policy == SFS_STORE_PIN ? "pin" : "lru",
					s->conf.policy == SFS_STORE_PIN
					    ? "keeping what it has, admitting nothing new"
					    : "every cached file is in use");
			}
			continue;
		}
		int rc = obj_open_file(s, o, true);
		if (rc < 0) {
			err[i] = rc;
			go_offline(s, rc, "creating a cache file");
			continue;
		}
		/* Reserve the space now so concurrent batches see it. */
		in_batch += j->len;
		s->used_bytes += j->len;
		o->used_bytes += j->len;
		bool direct = o->dfd >= 0 && j->len % 4096 == 0 && ((uintptr_t)j->buf & 4095) == 0;
		ops[n_ops++] = (struct sfs_uring_op){
		    SFS_URING_WRITE,
		    direct ? o->dfd : o->fd,
		    (void *)j->buf,
		    j->len,
		    (off_t)(o->data_off + ((uint64_t)j->index << s->chunk_shift)),
		    0};
		ops[n_ops++] =
		    (struct sfs_uring_op){SFS_URING_WRITE,
					  o->fd,
					  &recs[i],
					  sizeof(recs[i]),
					  (off_t)(sizeof(struct obj_header) +
						  (uint64_t)j->index * sizeof(struct chunk_rec)),
					  0};
	}
	/* One fdatasync per object (its record fd: syncing any fd of a file
	 * syncs the file's data, O_DIRECT writes included). */
	size_t n_writes = n_ops;
	for (size_t i = 1; i < n_writes; i += 2) {
		bool seen = false;
		for (size_t k = n_writes; k < n_ops; k++)
			if (ops[k].fd == ops[i].fd)
				seen = true;
		if (!seen)
			ops[n_ops++] =
			    (struct sfs_uring_op){SFS_URING_FDATASYNC, ops[i].fd, NULL, 0, 0, 0};
	}
	pthread_mutex_unlock(&s->lock);

	sfs_uring_run(s->ring, ops, n_ops);

	/* Outcomes: a chunk is visible only if its writes and its fsync succeeded. */
	pthread_mutex_lock(&s->lock);
	size_t op = 0;
	for (size_t i = 0; i < n; i++) {
		struct write_job *j = jobs[i];
		sfs_store_obj *o = j->obj;
		if (err[i] == 0) {
			int rc = ops[op].result != (int)j->len
				     ? (ops[op].result < 0 ? ops[op].result : -EIO)
				 : ops[op + 1].result != (int)sizeof(struct chunk_rec) ? -EIO
										       : 0;
			for (size_t k = n_writes; k < n_ops && !rc; k++)
				if (ops[k].fd == ops[op + 1].fd && ops[k].result < 0)
					rc = ops[k].result;
			op += 2;
			if (rc == 0) {
				o->recs[j->index] = recs[i];
				o->state[j->index] = SFS_CHUNK_VERIFIED;
				count(&s->stats.write_bytes, j->len);
			} else {
				s->used_bytes -= j->len;
				o->used_bytes -= j->len;
				if (rc == -ENOSPC) {
					count(&s->stats.not_admitted_bytes, j->len);
					if (sfs_log_ratelimit(&s->err_rl, 60000))
						sfs_log(SFS_LOG_WARN, "store",
							"cache filesystem of %s is full: evicting",
							s->conf.dir);
					/* Shrink the target below what the filesystem holds. */
					if (s->used_bytes < s->capacity_bytes)
						s->capacity_bytes = s->used_bytes;
				} else {
					go_offline(s, rc, "writing a chunk");
				}
			}
			err[i] = rc;
		}
		if (err[i] != 0 && o->state[j->index] == SFS_CHUNK_WRITING)
			o->state[j->index] = SFS_CHUNK_ABSENT;
	}
	for (size_t i = 0; i < n; i++)
		s->queued_bytes -= jobs[i]->len;
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		jobs[i]->done(jobs[i]->arg, err[i]);
		sfs_store_obj_put(jobs[i]->obj);
		free(jobs[i]);
	}
}

static void *writer_main(void *arg)
{
	sfs_store *s = arg;
	struct write_job *batch[WRITE_BATCH];

	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->jobs && !s->stopping) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&s->work, &s->lock, &ts);
			if (!s->online && sfs_now_ms() >= s->retry_at_ms) {
				/* The directory may be back (created, remounted, space freed). */
				char err[256];
				pthread_mutex_unlock(&s->lock);
				int rc = s->lock_fd < 0 ? store_attach(s, err, sizeof(err)) : 0;
				pthread_mutex_lock(&s->lock);
				if (rc == 0) {
					s->online = true;
					sfs_log(SFS_LOG_INFO, "store", "cache %s is usable again",
						s->conf.dir);
				} else {
					s->retry_at_ms = sfs_now_ms() + RETRY_OFFLINE_MS;
				}
			}
		}
		if (!s->jobs && s->stopping)
			break;
		size_t n = 0;
		while (s->jobs && n < WRITE_BATCH) {
			batch[n++] = s->jobs;
			s->jobs = s->jobs->next;
		}
		if (!s->jobs)
			s->jobs_tail = NULL;
		pthread_mutex_unlock(&s->lock);
		write_batch(s, batch, n);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* --- public API ----------------------------------------------------------- */

int sfs_store_open(const struct sfs_store_conf *conf, sfs_store **out, char *err, size_t err_len)
{
	sfs_store *s;
	int rc;

	if (!conf->dir || conf->dir[0] != '/') {
		snprintf(err, err_len, "cache_dir must be an absolute path");
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->conf = *conf;
	s->conf.dir = strdup(conf->dir);
	s->chunk_shift = (unsigned)__builtin_ctzll(conf->chunk_bytes);
	s->capacity_bytes = conf->capacity_bytes;
	s->lock_fd = -1;
	s->n_buckets = 1024;
	s->buckets = calloc(s->n_buckets, sizeof(*s->buckets));
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	if (!s->conf.dir || !s->buckets) {
		rc = -ENOMEM;
		goto err_free;
	}
	rc = store_attach(s, err, err_len);
	if (rc == -EBUSY)
		goto err_free;
	s->online = rc == 0;
	if (rc < 0) {
		sfs_log(SFS_LOG_WARN, "store", "cache %s unusable (%s): reading from NFS, retrying",
			s->conf.dir, strerror(-rc));
		count(&s->stats.errors, 1);
		s->retry_at_ms = sfs_now_ms() + RETRY_OFFLINE_MS;
	}
	if ((rc = sfs_uring_open(WRITE_BATCH * 3, &s->ring)) < 0)
		goto err_free;
	*out = s;
	return 0;

err_free:
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	for (size_t b = 0; s->buckets && b < s->n_buckets; b++)
		for (sfs_store_obj *o = s->buckets[b], *next; o; o = next) {
			next = o->hnext;
			obj_free(o);
		}
	free(s->buckets);
	free((char *)s->conf.dir);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->work);
	free(s);
	return rc;
}

int sfs_store_start(sfs_store *s)
{
	int rc = -pthread_create(&s->writer, NULL, writer_main, s);

	if (rc == 0)
		s->writer_started = true;
	return rc;
}

void sfs_store_close(sfs_store *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	if (s->writer_started)
		pthread_join(s->writer, NULL);
	sfs_uring_close(s->ring);
	for (size_t b = 0; b < s->n_buckets; b++)
		for (sfs_store_obj *o = s->buckets[b], *next; o; o = next) {
			next = o->hnext;
			obj_free(o); /* objects still referenced leak their holders' view */
		}
	free(s->buckets);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free((char *)s->conf.dir);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->work);
	free(s);
}

void sfs_store_get_stats(sfs_store *s, struct sfs_store_stats *out)
{
#define LOAD(x) out->x = __atomic_load_n(&s->stats.x, __ATOMIC_RELAXED)
	LOAD(write_bytes);
	LOAD(evicted_bytes);
	LOAD(checksum_failures);
	LOAD(errors);
	LOAD(not_admitted_bytes);
#undef LOAD
	pthread_mutex_lock(&s->lock);
	out->used_bytes = s->used_bytes;
	out->capacity_bytes = s->capacity_bytes;
	out->objects = s->n_objects;
	out->queued_bytes = s->queued_bytes;
	out->online = s->online;
	pthread_mutex_unlock(&s->lock);
}

sfs_store_obj *sfs_store_obj_get(sfs_store *s, const struct sfs_file_version *v)
{
	uint8_t key[16];

	key_for(v, key);
	pthread_mutex_lock(&s->lock);
	sfs_store_obj *o = index_find(s, key);
	if (!o) {
		o = obj_new(s, key, v->size);
		if (!o) {
			pthread_mutex_unlock(&s->lock);
			return NULL;
		}
		/* Indexed at once, so that every holder of this version shares
		 * one object; it gets a file with its first chunk, and leaves
		 * the index again if its last holder goes before that. */
		index_add(s, o);
	} else {
		lru_touch(s, o);
	}
	o->refs++;
	pthread_mutex_unlock(&s->lock);
	return o;
}

void sfs_store_obj_ref(sfs_store_obj *o)
{
	pthread_mutex_lock(&o->store->lock);
	o->refs++;
	pthread_mutex_unlock(&o->store->lock);
}

void sfs_store_obj_put(sfs_store_obj *o)
{
	sfs_store *s = o->store;

	pthread_mutex_lock(&s->lock);
	if (--o->refs == 0) {
		if (!o->on_disk) {
			if (o->in_index)
				index_remove(s, o);
			pthread_mutex_unlock(&s->lock);
			obj_free(o);
			return;
		}
		if (o->fd >= 0) {
			close(o->fd); /* bound open files by open shards, not cache size */
			o->fd = -1;
		}
		if (o->dfd >= 0) {
			close(o->dfd);
			o->dfd = -1;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

enum sfs_chunk_state sfs_store_chunk_state(sfs_store_obj *o, uint32_t index)
{
	pthread_mutex_lock(&o->store->lock);
	enum sfs_chunk_state st =
	    index < o->n_chunks ? (enum sfs_chunk_state)o->state[index] : SFS_CHUNK_ABSENT;
	pthread_mutex_unlock(&o->store->lock);
	return st;
}

uint64_t sfs_store_obj_cached_bytes(sfs_store_obj *o)
{
	uint64_t n = 0;

	pthread_mutex_lock(&o->store->lock);
	for (uint32_t i = 0; i < o->n_chunks; i++)
		if (o->state[i] == SFS_CHUNK_PRESENT || o->state[i] == SFS_CHUNK_VERIFIED)
			n += o->recs[i].len;
	pthread_mutex_unlock(&o->store->lock);
	return n;
}

uint64_t sfs_store_cached_bytes(sfs_store *s, const struct sfs_file_version *v)
{
	uint8_t key[16];

	key_for(v, key);
	pthread_mutex_lock(&s->lock);
	sfs_store_obj *o = index_find(s, key);
	if (o)
		o->refs++;
	pthread_mutex_unlock(&s->lock);
	if (!o)
		return 0;
	uint64_t n = sfs_store_obj_cached_bytes(o);
	sfs_store_obj_put(o);
	return n;
}

static void chunk_invalidate(sfs_store *s, sfs_store_obj *o, uint32_t index)
{
	if (o->state[index] == SFS_CHUNK_PRESENT || o->state[index] == SFS_CHUNK_VERIFIED) {
		o->used_bytes -= o->recs[index].len;
		s->used_bytes -= o->recs[index].len;
	}
	o->state[index] = SFS_CHUNK_ABSENT;
	memset(&o->recs[index], 0, sizeof(o->recs[index]));
	if (o->fd >= 0) {
		/* Clear the record on disk too, so a restart does not trust it. */
		struct chunk_rec zero = {0};
		if (pwrite(o->fd, &zero, sizeof(zero),
			   (off_t)(sizeof(struct obj_header) + (uint64_t)index * sizeof(zero))) < 0)
			count(&s->stats.errors, 1);
	}
}

ssize_t sfs_store_read_chunk(sfs_store_obj *o, uint32_t index, void *buf)
{
	sfs_store *s = o->store;
	struct chunk_rec rec;
	int rc;

	pthread_mutex_lock(&s->lock);
	if (index >= o->n_chunks ||
	    (o->state[index] != SFS_CHUNK_PRESENT && o->state[index] != SFS_CHUNK_VERIFIED)) {
		pthread_mutex_unlock(&s->lock);
		return -ENOENT;
	}
	if ((rc = obj_open_file(s, o, false)) < 0) {
		chunk_invalidate(s, o, index);
		pthread_mutex_unlock(&s->lock);
		count(&s->stats.checksum_failures, 1);
		return -EBADMSG;
	}
	rec = o->recs[index];
	/* Both fds stay open: the caller holds a reference. */
	bool direct = o->dfd >= 0 && ((uintptr_t)buf & 4095) == 0;
	int fd = direct ? o->dfd : o->fd;
	lru_touch(s, o);
	pthread_mutex_unlock(&s->lock);

	/* On the reader's thread, a plain pread: the reader waits for exactly
	 * this chunk (the kernel's FUSE readahead keeps several in flight).
	 * O_DIRECT wants whole blocks: round the length up (buf holds a chunk). */
	size_t want = direct ? ((size_t)rec.len + 4095) & ~(size_t)4095 : rec.len;
	ssize_t n =
	    pread(fd, buf, want, (off_t)(o->data_off + ((uint64_t)index << s->chunk_shift)));
	if (n > (ssize_t)rec.len)
		n = (ssize_t)rec.len;
	if (n < 0) {
		rc = -errno;
		count(&s->stats.errors, 1);
		return rc;
	}
	bool good = (uint32_t)n == rec.len && XXH3_64bits(buf, rec.len) == rec.xxh64;
	pthread_mutex_lock(&s->lock);
	/* Act only if the chunk is still the one we read (not dropped and
	 * rewritten meanwhile). */
	bool same = o->recs[index].xxh64 == rec.xxh64 && o->recs[index].valid == REC_VALID &&
		    (o->state[index] == SFS_CHUNK_PRESENT || o->state[index] == SFS_CHUNK_VERIFIED);
	if (same && good)
		o->state[index] = SFS_CHUNK_VERIFIED;
	else if (same)
		chunk_invalidate(s, o, index);
	pthread_mutex_unlock(&s->lock);
	if (!good) {
		count(&s->stats.checksum_failures, 1);
		if (sfs_log_ratelimit(&s->err_rl, 60000))
			sfs_log(SFS_LOG_WARN, "store",
				"cache object %s chunk %u failed its checksum: refetching", o->name,
				index);
		return -EBADMSG;
	}
	return (ssize_t)rec.len;
}

int sfs_store_chunk_fd(sfs_store_obj *o, uint32_t index, off_t *off, uint32_t *len)
{
	sfs_store *s = o->store;
	int fd = -ENOENT;

	pthread_mutex_lock(&s->lock);
	if (index < o->n_chunks && o->state[index] == SFS_CHUNK_VERIFIED &&
	    obj_open_file(s, o, false) == 0) {
		fd = o->fd;
		*off = (off_t)(o->data_off + ((uint64_t)index << s->chunk_shift));
		*len = o->recs[index].len;
		lru_touch(s, o);
	}
	pthread_mutex_unlock(&s->lock);
	return fd;
}

int sfs_store_write_chunk(sfs_store_obj *o, uint32_t index, const void *buf, uint32_t len,
			  void (*done)(void *arg, int err), void *arg)
{
	sfs_store *s = o->store;
	struct write_job *j;

	if (index >= o->n_chunks || len != chunk_len(o, index, s->chunk_shift))
		return -EINVAL;
	j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	int rc = 0;
	if (!s->online)
		rc = -EAGAIN;
	else if (o->state[index] != SFS_CHUNK_ABSENT)
		rc = -EEXIST;
	else if (s->conf.policy == SFS_STORE_PIN && s->used_bytes + len > s->capacity_bytes)
		rc = -ENOSPC;
	if (rc) {
		if (rc == -ENOSPC)
			count(&s->stats.not_admitted_bytes, len);
		pthread_mutex_unlock(&s->lock);
		free(j);
		return rc;
	}
	o->state[index] = SFS_CHUNK_WRITING;
	o->refs++;
	s->queued_bytes += len;
	*j = (struct write_job){o, index, len, buf, done, arg, NULL};
	if (s->jobs_tail)
		s->jobs_tail->next = j;
	else
		s->jobs = j;
	s->jobs_tail = j;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

void sfs_store_drop_chunk(sfs_store_obj *o, uint32_t index)
{
	pthread_mutex_lock(&o->store->lock);
	if (index < o->n_chunks)
		chunk_invalidate(o->store, o, index);
	pthread_mutex_unlock(&o->store->lock);
	count(&o->store->stats.checksum_failures, 1);
}
