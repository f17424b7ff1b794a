// SPDX-License-Identifier: Apache-2.0
/*
 * store/load — opening a cache directory: its lock, the object files and
 * segments found there, and the index rebuilt from them. Not here: the
 * migration of the previous layout (migrate.c), the segments' own recovery
 * (segment.c). Runs at open, and on the writer thread when a cache
 * directory that was offline comes back (writer_retry); its file I/O
 * without s->lock.
 */
#include "store_int.h"

/* --- loading -------------------------------------------------------------- */

/* Set an object's chunk states from its records on disk, read through a
 * bounded buffer (records are not kept in memory). Returns 0, or -EIO when
 * the record table cannot be read. */
static int load_states(sfs_store *s, sfs_store_obj *o, int fd, uint64_t file_bytes)
{
	struct chunk_rec recs[64];

	for (uint32_t i = 0; i < o->n_chunks; i += 64) {
		uint32_t n = o->n_chunks - i < 64 ? o->n_chunks - i : 64;
		size_t bytes = (size_t)n * sizeof(struct chunk_rec);
		off_t at = rec_off(i);
		if (pread(fd, recs, bytes, at) != (ssize_t)bytes)
			return -EIO;
		for (uint32_t k = 0; k < n; k++) {
			uint32_t want = chunk_len(o, i + k, s->chunk_shift);
			uint64_t end = ((uint64_t)(i + k) << s->chunk_shift) + want;
			if (recs[k].valid == REC_VALID && recs[k].len == want &&
			    file_bytes >= end) {
				o->state[i + k] = SFS_CHUNK_PRESENT;
				o->used_bytes += want;
			}
		}
	}
	return 0;
}

/* Read one object (KEY and KEY.sums) into a new object (not indexed);
 * delete its files if they are not ours, are unusable, or hold a version
 * that belongs in the segments. Returns the object or NULL. No lock (file
 * I/O). */
static sfs_store_obj *load_object(sfs_store *s, const char *path, const char *name)
{
	struct obj_header h;
	struct stat st;
	sfs_store_obj *o = NULL;
	char hex[33], sums[4096 + 8];
	int dfd = open(path, O_RDONLY | O_CLOEXEC), fd = -1;

	if (dfd < 0)
		return NULL;
	snprintf(sums, sizeof(sums), "%s.sums", path);
	fd = open(sums, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && migrate_v4(s, path, sums) == 0)
		fd = open(sums, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(dfd, &st) != 0 || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.magic != OBJ_MAGIC || h.chunk_shift != s->chunk_shift)
		goto discard;
	key_hex(h.key, hex);
	if (strcmp(hex, name) != 0 || h.data_off != 0 || size_packed(s, h.size))
		goto discard;
	o = obj_new(s, h.key, h.size);
	if (!o || o->n_chunks != h.n_chunks || load_states(s, o, fd, (uint64_t)st.st_size) < 0)
		goto discard;
	o->dataset = h.dataset;
	close(fd);
	close(dfd);
	o->on_disk = true;
	return o;
discard:
	if (o)
		obj_free(o);
	if (fd >= 0)
		close(fd);
	close(dfd);
	unlink(sums);
	unlink(path);
	return NULL;
}

/* Whether the data file of this .sums path is there. */
static bool sums_has_data(const char *sums)
{
	char data[4096 + 300];
	size_t n = strlen(sums) - strlen(".sums");

	snprintf(data, sizeof(data), "%.*s", (int)n, sums);
	return access(data, F_OK) == 0;
}

/* Whether name is an object's .sums file: its data file's fate decides
 * its own (load_object). */
static bool is_sums_name(const char *name)
{
	return strlen(name) == 37 && !strcmp(name + 32, ".sums");
}

/* Scan objects/ (no lock) and return the objects found, chained through
 * hnext. */
static sfs_store_obj *load_objects(sfs_store *s)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/objects", s->conf.dir);
	DIR *top = opendir(path);
	struct dirent *d, *e;
	sfs_store_obj *list = NULL;

	if (!top)
		return NULL;
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
			sfs_store_obj *o = NULL;
			if (strlen(e->d_name) == 32)
				o = load_object(s, file, e->d_name);
			else if (!is_sums_name(e->d_name))
				unlink(file); /* not ours: leftovers of an older layout */
			else if (!sums_has_data(file))
				unlink(file);
			if (o) {
				o->hnext = list;
				list = o;
			}
		}
		closedir(dd);
	}
	closedir(top);
	return list;
}

/* Index what load_objects found. A key already indexed (an object created
 * in memory before the directory came back) keeps the in-memory one.
 * Caller holds lock. */
static void index_loaded(sfs_store *s, sfs_store_obj *list)
{
	for (sfs_store_obj *o = list, *next; o; o = next) {
		next = o->hnext;
		o->hnext = NULL;
		if (index_find(s, o->key)) {
			obj_free(o);
			continue;
		}
		s->used_bytes += o->used_bytes;
		policy_loaded(s, o);
		index_add(s, o);
	}
}

/* Take cache_dir/LOCK. Returns its fd, -EBUSY (err names the owner) or
 * another -errno. */
static int take_lock(sfs_store *s, char *err, size_t err_len)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/LOCK", s->conf.dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
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
	return fd;
}

/* Open cache_dir/segments; segments of about 1/16 of the capacity (a
 * segment is the unit of eviction), 4 to 256 MiB, unless configured; past
 * 32 TiB larger, so that the segments stay within half of the 2^18 an
 * index entry can name (segment.c). */
static int open_segments(sfs_store *s, uint64_t capacity, sfs_seg **out)
{
	char path[4096];
	uint64_t seg_bytes = s->conf.segment_bytes;

	if (!seg_bytes) {
		seg_bytes = capacity / 16;
		seg_bytes = seg_bytes < SEG_MIN_BYTES	? SEG_MIN_BYTES
			    : seg_bytes > SEG_MAX_BYTES ? SEG_MAX_BYTES
							: seg_bytes;
		if (seg_bytes < capacity >> 17)
			seg_bytes = capacity >> 17;
	}
	snprintf(path, sizeof(path), "%s/segments", s->conf.dir);
	return sfs_seg_open(&(struct sfs_seg_conf){.dir = path, .segment_bytes = seg_bytes}, out);
}

/* Create the directory tree, take the lock, open the segments and load the
 * index; the file I/O without store->lock. Returns 0, -EBUSY (owned by
 * another daemon; err names it) or another -errno (directory unusable). */
int store_attach(sfs_store *s, char *err, size_t err_len)
{
	char path[4096];
	struct statvfs sv;
	uint64_t capacity = s->conf.capacity_bytes, min_free = 0;
	sfs_seg *sg = NULL;

	if (mkdir(s->conf.dir, 0700) != 0 && errno != EEXIST)
		return -errno;
	chmod(s->conf.dir, 0700); /* cached bytes are readable by the mounter only */
	snprintf(path, sizeof(path), "%s/objects", s->conf.dir);
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return -errno;
	int fd = take_lock(s, err, err_len);
	if (fd < 0)
		return fd;
	if (statvfs(s->conf.dir, &sv) == 0) {
		uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
		if (capacity == 0)
			capacity = total / 10 * 9;
		min_free = total / 20 < (4ull << 30) ? total / 20 : (4ull << 30);
	}
	int rc = open_segments(s, capacity, &sg);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	sfs_store_obj *loaded = load_objects(s);
	if (s->migrated || s->migrate_failed)
		sfs_log(SFS_LOG_INFO, "store",
			"cache %s: %llu cached files moved to this version's layout, %llu "
			"discarded (their filesystem cannot cut a file's front: they are "
			"fetched again)",
			s->conf.dir, (unsigned long long)s->migrated,
			(unsigned long long)s->migrate_failed);
	pthread_mutex_lock(&s->lock);
	s->lock_fd = fd;
	if (s->conf.capacity_bytes == 0)
		s->capacity_bytes = capacity;
	s->min_free_bytes = min_free;
	index_loaded(s, loaded);
	__atomic_store_n(&s->seg, sg, __ATOMIC_RELEASE);
	seg_refresh(s);
	policy_restore_reads(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}
