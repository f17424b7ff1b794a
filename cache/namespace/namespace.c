// SPDX-License-Identifier: Apache-2.0
/*
 * namespace — the seen namespace of an immutable export. See namespace.h.
 *
 * Data structures:
 *
 *   sfs_ns ──lock──> ents (htab.h): ns_ent -> ns_ent  keyed by (parent, name)
 *     │                 each ns_ent holds its record exactly as on disk
 *     ├──────────────> dirs (htab.h): ns_dir -> ns_dir  keyed by directory fileid
 *     │                 ns_dir.ents[]: its names in the order first seen
 *     │                 (readdir offset SFS_NS_INDEX_FIRST + i is ents[i])
 *     └──────────────> pend: records appended since the last flush
 *
 * File DIR/<16 hex digits>.log (host byte order; little-endian machines):
 *
 *   header  "SFSNSv1\n" u32 len  u16 export_len u16 hosts_len u8 fh_len 0 0 0
 *           export hosts root_fh  u64 XXH3-64(all before)
 *   ENTRY   u16 len u8 1 u8 name_len u64 parent u8 fh_len fh attrs(92) name
 *           u64 XXH3-64(all before)
 *   DIRDONE u16 len u8 2 u8 0 u64 dir u64 n_entries u64 XXH3-64(all before)
 *
 *   attrs   u32 type|mode u32 nlink u32 uid u32 gid u64 size u64 used u64 fsid
 *           u64 fileid u32 rdev_major u32 rdev_minor, then mtime, ctime, atime
 *           as u64 seconds + u32 nanoseconds (atime last: ignored when
 *           deciding whether a record changed).
 *
 * Replay reads records in order; a later ENTRY for the same (parent, name)
 * replaces an earlier one; a DIRDONE marks its directory complete only when
 * the index holds exactly n_entries names under it. The first record that
 * is short, malformed or fails its checksum ends the log: the file is cut
 * there, and what followed is read from NFS again. A separate .lock file is
 * flock()ed by the daemon that owns the log (the log itself is replaced by
 * rename() when compacted).
 */
#include "namespace.h"
#include "../common/fileio.h"
#include "../common/hash.h"
#include "../common/htab.h"
#include "../common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAGIC	      "SFSNSv1\n"
#define KIND_ENTRY    1
#define KIND_DIRDONE  2
#define ATTR_BYTES    92
#define ATIME_OFF     80 /* within attrs */
#define ENT_FIXED     (4 + 8 + 1)
#define DIRDONE_BYTES 28
#define PEND_MAX      (64u << 20) /* pending bytes beyond which records stay in memory only */
#define PEND_URGENT   (1u << 20)

struct ns_ent {
	struct ns_ent *hnext; /* protected by ns->lock */
	uint16_t len;	      /* bytes of rec */
	uint8_t rec[];	      /* the ENTRY record as on disk; read-only once indexed */
};

struct ns_dir {
	struct ns_dir *hnext; /* protected by ns->lock, as is everything here */
	uint64_t fileid;
	bool complete;
	uint32_t n, cap;
	struct ns_ent **ents;
	/* listings mode: when its listing started (or failed, or its window of
	 * counted misses began); a listing in flight; a failed one, and how
	 * many of its listings failed in a row (the backoff, dir_hold_ms). */
	uint64_t since_ms;
	uint32_t misses;
	bool listing, failed;
	bool relisting; /* the listing in flight is of a directory listed before */
	uint8_t fails;
};

/* The bucket of the name (parent, name[len]): the low bits of this. */
static uint64_t name_hash(uint64_t parent, const char *name, size_t len)
{
	return XXH3_64bits_withSeed(name, len, parent);
}

/* The bucket of the directory fileid: the low bits of this. */
static uint64_t dir_hash(uint64_t fileid) { return (fileid * 0x9e3779b97f4a7c15ull) >> 20; }

static uint64_t ent_parent(const struct ns_ent *e);
static const char *ent_name(const struct ns_ent *e, size_t *len);

static uint64_t ent_hash(const struct ns_ent *e)
{
	size_t nl;
	const char *name = ent_name(e, &nl);
	return name_hash(ent_parent(e), name, nl);
}

static uint64_t ns_dir_hash(const struct ns_dir *d) { return dir_hash(d->fileid); }

SFS_HTAB_DEFINE(ns_ents, struct ns_ent, hnext, ent_hash, 1);
SFS_HTAB_DEFINE(ns_dirs, struct ns_dir, hnext, ns_dir_hash, 1);

struct sfs_ns {
	struct sfs_ns_conf conf; /* set at open; strings owned */
	char *path, *tmp_path;	 /* set at open; NULL: memory only */
	int fd, lock_fd;	 /* fd: written under io_lock only */
	bool have_root;		 /* set at open/bind, then read-only */
	struct sfs_fh root;	 /* set at open/bind, then read-only */
	bool loaded;		 /* set at open */
	bool need_rewrite;	 /* set at open, used at bind */

	pthread_mutex_t io_lock; /* serialises writes to fd; taken before lock */
	pthread_mutex_t lock;	 /* the index, pend and counters below */
	pthread_cond_t wake;	 /* the flusher sleeps on it, with lock */
	pthread_t flusher;
	bool started, stopping, urgent; /* protected by lock */

	struct ns_ents ents; /* every name, by (parent, name) */
	struct ns_dirs dirs; /* every directory seen, by fileid */
	size_t n_complete;
	uint8_t *pend;
	size_t pend_len, pend_cap;
	uint64_t file_bytes, mem_bytes, dead_bytes;
	uint64_t hits, misses, not_recorded, discarded_bytes;
	uint64_t listings, listings_failed, listing_absent;
};

/* --- records ------------------------------------------------------------ */

static void put32(uint8_t **p, uint32_t v)
{
	memcpy(*p, &v, 4);
	*p += 4;
}
static void put64(uint8_t **p, uint64_t v)
{
	memcpy(*p, &v, 8);
	*p += 8;
}
static uint32_t get32(const uint8_t **p)
{
	uint32_t v;
	memcpy(&v, *p, 4);
	*p += 4;
	return v;
}
static uint64_t get64(const uint8_t **p)
{
	uint64_t v;
	memcpy(&v, *p, 8);
	*p += 8;
	return v;
}

static void put_time(uint8_t **p, const struct timespec *t)
{
	put64(p, (uint64_t)t->tv_sec);
	put32(p, (uint32_t)t->tv_nsec);
}
static void get_time(const uint8_t **p, struct timespec *t)
{
	t->tv_sec = (time_t)get64(p);
	t->tv_nsec = (long)get32(p);
}

static void attr_encode(uint8_t *p, const struct sfs_attr *a)
{
	put32(&p, a->type | (a->mode & 07777));
	put32(&p, a->nlink);
	put32(&p, a->uid);
	put32(&p, a->gid);
	put64(&p, a->size);
	put64(&p, a->used);
	put64(&p, a->fsid);
	put64(&p, a->fileid);
	put32(&p, a->rdev_major);
	put32(&p, a->rdev_minor);
	put_time(&p, &a->mtime);
	put_time(&p, &a->ctime);
	put_time(&p, &a->atime);
}

static void attr_decode(const uint8_t *p, struct sfs_attr *a)
{
	uint32_t tm = get32(&p);

	a->type = tm & ~07777u;
	a->mode = tm & 07777u;
	a->nlink = get32(&p);
	a->uid = get32(&p);
	a->gid = get32(&p);
	a->size = get64(&p);
	a->used = get64(&p);
	a->fsid = get64(&p);
	a->fileid = get64(&p);
	a->rdev_major = get32(&p);
	a->rdev_minor = get32(&p);
	get_time(&p, &a->mtime);
	get_time(&p, &a->ctime);
	get_time(&p, &a->atime);
}

static void seal(uint8_t *rec, size_t len)
{
	uint64_t sum = sfs_xxh3_64(rec, len - 8);
	memcpy(rec + len - 8, &sum, 8);
}

/* Encode an ENTRY into rec (SFS_NS_RECORD_MAX bytes). Returns its length. */
static size_t ent_encode(uint8_t *rec, uint64_t parent, const char *name, size_t name_len,
			 const struct sfs_fh *fh, const struct sfs_attr *attr)
{
	uint8_t *p = rec + 2;
	size_t len = ENT_FIXED + fh->len + ATTR_BYTES + name_len + 8;
	uint16_t l16 = (uint16_t)len;

	memcpy(rec, &l16, 2);
	*p++ = KIND_ENTRY;
	*p++ = (uint8_t)name_len;
	put64(&p, parent);
	*p++ = (uint8_t)fh->len;
	memcpy(p, fh->data, fh->len);
	p += fh->len;
	attr_encode(p, attr);
	p += ATTR_BYTES;
	memcpy(p, name, name_len);
	seal(rec, len);
	return len;
}

static uint64_t ent_parent(const struct ns_ent *e)
{
	uint64_t v;
	memcpy(&v, e->rec + 4, 8);
	return v;
}
static size_t ent_attr_off(const uint8_t *rec) { return ENT_FIXED + rec[12]; }
static const char *ent_name(const struct ns_ent *e, size_t *len)
{
	*len = e->rec[3];
	return (const char *)e->rec + ent_attr_off(e->rec) + ATTR_BYTES;
}

/* Decode an entry; name_buf (256 bytes) receives the NUL-terminated name. */
static void ent_decode(const struct ns_ent *e, struct sfs_fh *fh, struct sfs_attr *attr,
		       char *name_buf)
{
	size_t off = ent_attr_off(e->rec), nl;
	const char *name = ent_name(e, &nl);

	if (fh) {
		fh->len = e->rec[12];
		memcpy(fh->data, e->rec + ENT_FIXED, fh->len);
	}
	if (attr) {
		memset(attr, 0, sizeof(*attr));
		attr_decode(e->rec + off, attr);
	}
	if (name_buf) {
		memcpy(name_buf, name, nl);
		name_buf[nl] = 0;
	}
}

/* Same record but for atime (and so the checksum)? */
static bool ent_same(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	size_t at = ent_attr_off(a) + ATIME_OFF;

	return alen == blen && !memcmp(a, b, at) &&
	       !memcmp(a + at + 12, b + at + 12, alen - 8 - at - 12);
}

/* Length of the valid record at p (avail bytes left), or 0. */
static size_t rec_check(const uint8_t *p, size_t avail)
{
	uint16_t len;
	uint64_t sum;

	if (avail < DIRDONE_BYTES)
		return 0;
	memcpy(&len, p, 2);
	if (len < DIRDONE_BYTES || len > avail || len > SFS_NS_RECORD_MAX)
		return 0;
	memcpy(&sum, p + len - 8, 8);
	if (sum != sfs_xxh3_64(p, len - 8U))
		return 0;
	if (p[2] == KIND_DIRDONE)
		return len == DIRDONE_BYTES ? len : 0;
	if (p[2] != KIND_ENTRY || len < ENT_FIXED + ATTR_BYTES + 8 || p[12] > SFS_FH_MAX)
		return 0;
	return (size_t)ENT_FIXED + p[12] + ATTR_BYTES + p[3] + 8 == len ? len : 0;
}

/* --- the index (caller holds ns->lock) ---------------------------------- */

static void listing_fail_locked(sfs_ns *ns, struct ns_dir *d);

static struct ns_ent **ent_slot(sfs_ns *ns, uint64_t parent, const char *name, size_t len)
{
	struct ns_ent **p = ns_ents_head(&ns->ents, name_hash(parent, name, len));

	for (; *p; p = &(*p)->hnext) {
		size_t nl;
		const char *n = ent_name(*p, &nl);
		if (nl == len && ent_parent(*p) == parent && !memcmp(n, name, len))
			break;
	}
	return p;
}

static struct ns_dir *dir_find(sfs_ns *ns, uint64_t fileid)
{
	struct ns_dir *d = *ns_dirs_head(&ns->dirs, dir_hash(fileid));

	while (d && d->fileid != fileid)
		d = d->hnext;
	return d;
}

static struct ns_dir *dir_get(sfs_ns *ns, uint64_t fileid)
{
	struct ns_dir *d = dir_find(ns, fileid);

	if (d)
		return d;
	if (!(d = calloc(1, sizeof(*d))))
		return NULL;
	d->fileid = fileid;
	ns_dirs_insert(&ns->dirs, d);
	ns->mem_bytes += sizeof(*d);
	return d;
}

static int dir_append(sfs_ns *ns, struct ns_dir *d, struct ns_ent *e)
{
	if (d->n == d->cap) {
		uint32_t cap = d->cap ? d->cap * 2 : 8;
		struct ns_ent **n = realloc(d->ents, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		ns->mem_bytes += (cap - d->cap) * sizeof(*n);
		d->ents = n;
		d->cap = cap;
	}
	d->ents[d->n++] = e;
	if (d->complete) { /* a new name in a "complete" listing: it changed */
		d->complete = false;
		ns->n_complete--;
	}
	return 0;
}

/*
 * Index a record (copied). Returns 0 when it is new or replaced an older
 * one, 1 when the same record was already held, or -ENOSPC / -ENOMEM.
 */
static int index_put(sfs_ns *ns, const uint8_t *rec, size_t len)
{
	struct ns_ent *e;
	size_t nl;
	uint64_t parent;
	memcpy(&parent, rec + 4, 8);
	nl = rec[3];
	const char *name = (const char *)rec + ent_attr_off(rec) + ATTR_BYTES;
	struct ns_ent **slot = ent_slot(ns, parent, name, nl), *old = *slot;
	if (old && ent_same(old->rec, old->len, rec, len))
		return 1;
	if (!old && ns->ents.n >= ns->conf.max_entries)
		return -ENOSPC;
	if (!(e = malloc(sizeof(*e) + len)))
		return -ENOMEM;
	e->len = (uint16_t)len;
	memcpy(e->rec, rec, len);
	ns->mem_bytes += sizeof(*e) + len;
	if (old) { /* replace in the chain and in the listing */
		e->hnext = old->hnext;
		*slot = e;
		struct ns_dir *d = nl ? dir_find(ns, parent) : NULL;
		for (uint32_t i = 0; d && i < d->n; i++)
			if (d->ents[i] == old)
				d->ents[i] = e;
		ns->mem_bytes -= sizeof(*old) + old->len;
		ns->dead_bytes += old->len;
		free(old);
		return 0;
	}
	struct ns_dir *d = nl ? dir_get(ns, parent) : NULL;
	if ((nl && !d) || (d && dir_append(ns, d, e) < 0)) {
		ns->mem_bytes -= sizeof(*e) + len;
		free(e);
		return -ENOMEM;
	}
	ns_ents_insert_at(&ns->ents, slot, e);
	return 0;
}

static int mark_complete(sfs_ns *ns, uint64_t dir, uint64_t n)
{
	struct ns_dir *d = n ? dir_find(ns, dir) : dir_get(ns, dir);

	if (!d || d->n != n)
		return -ESTALE;
	if (!d->complete) {
		d->complete = true;
		ns->n_complete++;
	}
	return 0;
}

/* Queue a record for the flusher. Caller holds lock. */
static void pend_append(sfs_ns *ns, const uint8_t *rec, size_t len)
{
	if (ns->fd < 0 || ns->pend_len + len > PEND_MAX)
		return;
	if (ns->pend_len + len > ns->pend_cap) {
		size_t cap = ns->pend_cap ? ns->pend_cap * 2 : 64 * 1024;
		while (cap < ns->pend_len + len)
			cap *= 2;
		uint8_t *p = realloc(ns->pend, cap);
		if (!p)
			return; /* kept in memory; a replay will not know it */
		ns->pend = p;
		ns->pend_cap = cap;
	}
	memcpy(ns->pend + ns->pend_len, rec, len);
	ns->pend_len += len;
	ns->file_bytes += len;
	if (ns->pend_len >= PEND_URGENT && !ns->urgent) {
		ns->urgent = true;
		pthread_cond_signal(&ns->wake);
	}
}

/* --- the file ----------------------------------------------------------- */

/* The header for this export and root into buf (>= 1200 bytes). */
static size_t header_encode(const sfs_ns *ns, uint8_t *buf)
{
	size_t el = strlen(ns->conf.export_path), hl = strlen(ns->conf.hosts);
	uint32_t len = (uint32_t)(8 + 4 + 2 + 2 + 4 + el + hl + ns->root.len + 8);
	uint16_t e16 = (uint16_t)el, h16 = (uint16_t)hl;
	uint8_t *p = buf;

	memcpy(p, MAGIC, 8);
	p += 8;
	put32(&p, len);
	memcpy(p, &e16, 2);
	memcpy(p + 2, &h16, 2);
	p += 4;
	*p++ = (uint8_t)ns->root.len;
	*p++ = 0;
	*p++ = 0;
	*p++ = 0;
	memcpy(p, ns->conf.export_path, el);
	memcpy(p + el, ns->conf.hosts, hl);
	memcpy(p + el + hl, ns->root.data, ns->root.len);
	seal(buf, len);
	return len;
}

/*
 * Check the header at map (size bytes): valid, and naming our export and
 * host list. Returns its length and sets ns->root, or 0.
 */
static size_t header_check(sfs_ns *ns, const uint8_t *map, size_t size)
{
	const uint8_t *p = map + 8;
	uint16_t el, hl;
	uint64_t sum;

	if (size < 28 || memcmp(map, MAGIC, 8))
		return 0;
	uint32_t len = get32(&p);
	if (len < 28 || len > size || len > 4096)
		return 0;
	memcpy(&el, p, 2);
	memcpy(&hl, p + 2, 2);
	uint8_t fl = p[4];
	memcpy(&sum, map + len - 8, 8);
	if ((size_t)20 + el + hl + fl + 8 != len || fl > SFS_FH_MAX ||
	    sum != sfs_xxh3_64(map, len - 8U))
		return 0;
	p += 8;
	if (el != strlen(ns->conf.export_path) || memcmp(p, ns->conf.export_path, el) ||
	    hl != strlen(ns->conf.hosts) || memcmp(p + el, ns->conf.hosts, hl))
		return 0;
	ns->root.len = fl;
	memcpy(ns->root.data, p + el + hl, fl);
	return len;
}

/* Replay the records after the header. Returns the end of the valid part. */
static size_t replay(sfs_ns *ns, const uint8_t *map, size_t off, size_t size)
{
	size_t len;

	while ((len = rec_check(map + off, size - off)) > 0) {
		const uint8_t *p = map + off + 4;
		if (map[off + 2] == KIND_DIRDONE) {
			uint64_t dir = get64(&p), n = get64(&p);
			mark_complete(ns, dir, n);
		} else if (index_put(ns, map + off, len) == 1) {
			ns->dead_bytes += len;
		}
		off += len;
	}
	return off;
}

/* Open the log (if any) and replay it. Single-threaded. */
static int load(sfs_ns *ns)
{
	struct stat st;
	size_t end = 0;

	if (fstat(ns->fd, &st) != 0)
		return -errno;
	if (st.st_size > 0) {
		size_t size = (size_t)st.st_size;
		uint8_t *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, ns->fd, 0);
		if (map == MAP_FAILED)
			return -errno;
		size_t hl = header_check(ns, map, size);
		if (hl) {
			ns->have_root = ns->loaded = true;
			end = replay(ns, map, hl, size);
			ns->discarded_bytes = size - end;
		} else {
			sfs_log(
			    SFS_LOG_WARN, "namespace",
			    "%s: not a namespace of %s (or a damaged header); it will be replaced",
			    ns->path, ns->conf.export_path);
		}
		munmap(map, size);
	}
	if (ns->discarded_bytes) {
		sfs_log(SFS_LOG_WARN, "namespace",
			"%s: damaged or torn record at offset %zu; %llu bytes dropped, to be read "
			"from NFS again",
			ns->path, end, (unsigned long long)ns->discarded_bytes);
		if (ftruncate(ns->fd, (off_t)end) != 0)
			ns->need_rewrite = true;
	}
	if (ns->dead_bytes > (1u << 20) && ns->dead_bytes > end / 2)
		ns->need_rewrite = true;
	ns->file_bytes = end;
	if (lseek(ns->fd, (off_t)end, SEEK_SET) < 0)
		return -errno;
	return 0;
}

/* Append one record to a buffer, writing it out when full. */
static int wbuf_add(int fd, uint8_t *buf, size_t *used, const uint8_t *rec, size_t len)
{
	int rc = 0;

	if (*used + len > (1u << 20)) {
		rc = sfs_write_all(fd, buf, *used);
		*used = 0;
	}
	memcpy(buf + *used, rec, len);
	*used += len;
	return rc;
}

/*
 * Write the whole index (header, entries, DIRDONE marks) to a new file and
 * rename it over the log (compaction, or a reset to empty). Caller holds
 * io_lock and lock; single-threaded use at startup. Returns 0 or -errno.
 */
static int rewrite(sfs_ns *ns)
{
	uint8_t *buf = malloc(1u << 20), hdr[1200], dd[DIRDONE_BYTES];
	size_t used = 0;
	int fd, rc = -ENOMEM;

	if (!buf)
		return -ENOMEM;
	fd = open(ns->tmp_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto out_buf;
	}
	size_t total = header_encode(ns, hdr);
	rc = wbuf_add(fd, buf, &used, hdr, total);
	for (size_t b = 0; b < ns->ents.n_buckets && !rc; b++)
		for (struct ns_ent *e = ns->ents.buckets[b]; e && !rc; e = e->hnext) {
			rc = wbuf_add(fd, buf, &used, e->rec, e->len);
			total += e->len;
		}
	for (size_t b = 0; b < ns->dirs.n_buckets && !rc; b++)
		for (struct ns_dir *d = ns->dirs.buckets[b]; d && !rc; d = d->hnext) {
			if (!d->complete)
				continue;
			uint8_t *p = dd;
			uint16_t l16 = DIRDONE_BYTES;
			memcpy(p, &l16, 2);
			p[2] = KIND_DIRDONE;
			p[3] = 0;
			p += 4;
			put64(&p, d->fileid);
			put64(&p, d->n);
			seal(dd, DIRDONE_BYTES);
			rc = wbuf_add(fd, buf, &used, dd, DIRDONE_BYTES);
			total += DIRDONE_BYTES;
		}
	if (!rc)
		rc = sfs_write_all(fd, buf, used);
	if (!rc && fdatasync(fd) != 0)
		rc = -errno;
	if (!rc && rename(ns->tmp_path, ns->path) != 0)
		rc = -errno;
	if (rc) {
		close(fd);
		unlink(ns->tmp_path);
		goto out_buf;
	}
	close(ns->fd);
	ns->fd = fd;
	ns->file_bytes = total;
	ns->dead_bytes = 0;
	free(ns->pend);
	ns->pend = NULL;
	ns->pend_len = ns->pend_cap = 0;
out_buf:
	free(buf);
	return rc;
}

int sfs_ns_flush(sfs_ns *ns)
{
	int rc = 0;

	pthread_mutex_lock(&ns->io_lock);
	pthread_mutex_lock(&ns->lock);
	uint8_t *buf = ns->pend;
	size_t len = ns->pend_len;
	ns->pend = NULL;
	ns->pend_len = ns->pend_cap = 0;
	ns->urgent = false;
	pthread_mutex_unlock(&ns->lock);
	if (len && ns->fd >= 0) {
		off_t at = lseek(ns->fd, 0, SEEK_END);
		rc = sfs_write_all(ns->fd, buf, len);
		if (!rc && fdatasync(ns->fd) != 0)
			rc = -errno;
		if (rc < 0) {
			static struct sfs_log_ratelimit rl;
			if (at >= 0 && ftruncate(ns->fd, at) == 0)
				lseek(ns->fd, at, SEEK_SET); /* no torn record before later ones */
			pthread_mutex_lock(&ns->lock);
			ns->file_bytes -= len;
			pthread_mutex_unlock(&ns->lock);
			if (sfs_log_ratelimit(&rl, 10000))
				sfs_log(SFS_LOG_WARN, "namespace", "%s: cannot write: %s", ns->path,
					strerror(-rc));
		}
	}
	pthread_mutex_unlock(&ns->io_lock);
	free(buf);
	return rc;
}

static void *flusher_main(void *arg)
{
	sfs_ns *ns = arg;
	pthread_setname_np(pthread_self(), "sfs-nsflush"); /* top -H, perf --sort comm */

	pthread_mutex_lock(&ns->lock);
	while (!ns->stopping) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += SFS_NS_FLUSH_MS / 1000;
		while (!ns->stopping && !ns->urgent &&
		       pthread_cond_timedwait(&ns->wake, &ns->lock, &until) == 0) {
		}
		bool work = ns->pend_len > 0;
		pthread_mutex_unlock(&ns->lock);
		if (work)
			sfs_ns_flush(ns);
		pthread_mutex_lock(&ns->lock);
	}
	pthread_mutex_unlock(&ns->lock);
	return NULL;
}

/* --- public API ----------------------------------------------------------- */

static int open_files(sfs_ns *ns, char *err, size_t err_len)
{
	char name[32], *lock_path = NULL;
	int rc;

	if (mkdir(ns->conf.dir, 0700) != 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(err, err_len, "namespace folder %s: %s", ns->conf.dir, strerror(-rc));
		return rc;
	}
	snprintf(
	    name, sizeof(name), "%016llx",
	    (unsigned long long)sfs_xxh3_64(ns->conf.export_path, strlen(ns->conf.export_path)));
	if (asprintf(&ns->path, "%s/%s.log", ns->conf.dir, name) < 0 ||
	    asprintf(&ns->tmp_path, "%s/%s.log.tmp", ns->conf.dir, name) < 0 ||
	    asprintf(&lock_path, "%s/%s.lock", ns->conf.dir, name) < 0) {
		free(lock_path);
		return -ENOMEM;
	}
	ns->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	rc = ns->lock_fd < 0 ? -errno : 0;
	if (!rc && flock(ns->lock_fd, LOCK_EX | LOCK_NB) != 0)
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
	if (rc)
		snprintf(err, err_len, "namespace %s: %s", lock_path,
			 rc == -EBUSY ? "in use by another shardfs" : strerror(-rc));
	free(lock_path);
	if (rc)
		return rc;
	ns->fd = open(ns->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (ns->fd < 0) {
		rc = -errno;
		snprintf(err, err_len, "namespace %s: %s", ns->path, strerror(-rc));
		return rc;
	}
	if ((rc = load(ns)) < 0)
		snprintf(err, err_len, "namespace %s: %s", ns->path, strerror(-rc));
	return rc;
}

int sfs_ns_open(const struct sfs_ns_conf *conf, sfs_ns **out, char *err, size_t err_len)
{
	sfs_ns *ns = calloc(1, sizeof(*ns));
	pthread_condattr_t ca;
	int rc = -ENOMEM;

	if (!ns)
		return -ENOMEM;
	ns->fd = ns->lock_fd = -1;
	ns->conf.max_entries = conf->max_entries ? conf->max_entries : SFS_NS_DEFAULT_MAX;
	ns->conf.ttl_ms = conf->ttl_ms;
	const char *dir = conf->ttl_ms ? NULL : conf->dir; /* listings: memory only */
	ns->conf.export_path = strdup(conf->export_path ? conf->export_path : "");
	ns->conf.hosts = strdup(conf->hosts ? conf->hosts : "");
	ns->conf.dir = dir ? strdup(dir) : NULL;
	if (!ns->conf.export_path || !ns->conf.hosts || (dir && !ns->conf.dir) ||
	    ns_ents_init(&ns->ents, 1024) < 0 || ns_dirs_init(&ns->dirs, 1024) < 0 ||
	    strlen(ns->conf.export_path) > 1024 || strlen(ns->conf.hosts) > 1024)
		goto err_free;
	ns->mem_bytes = sizeof(*ns); /* the bucket arrays are counted at sfs_ns_get_stats */
	pthread_mutex_init(&ns->lock, NULL);
	pthread_mutex_init(&ns->io_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ns->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (ns->conf.dir && (rc = open_files(ns, err, err_len)) < 0) {
		sfs_ns_close(ns);
		return rc;
	}
	*out = ns;
	return 0;

err_free:
	snprintf(err, err_len, "namespace: out of memory or identity too long");
	ns_ents_fini(&ns->ents);
	ns_dirs_fini(&ns->dirs);
	free((char *)ns->conf.export_path);
	free((char *)ns->conf.hosts);
	free((char *)ns->conf.dir);
	free(ns);
	return rc;
}

bool sfs_ns_saved_root(sfs_ns *ns, struct sfs_fh *root)
{
	if (!ns->loaded)
		return false;
	*root = ns->root;
	return true;
}

static void index_clear(sfs_ns *ns)
{
	for (size_t b = 0; b < ns->ents.n_buckets; b++)
		for (struct ns_ent *e; (e = ns->ents.buckets[b]);) {
			ns_ents_unlink(&ns->ents, &ns->ents.buckets[b]);
			free(e);
		}
	for (size_t b = 0; b < ns->dirs.n_buckets; b++)
		for (struct ns_dir *d; (d = ns->dirs.buckets[b]);) {
			ns_dirs_unlink(&ns->dirs, &ns->dirs.buckets[b]);
			free(d->ents);
			free(d);
		}
	ns->n_complete = 0;
	ns->mem_bytes = sizeof(*ns);
}

int sfs_ns_bind(sfs_ns *ns, const struct sfs_fh *root)
{
	int dropped = 0, rc = 0;

	pthread_mutex_lock(&ns->io_lock);
	pthread_mutex_lock(&ns->lock);
	bool same = ns->have_root && ns->root.len == root->len &&
		    !memcmp(ns->root.data, root->data, root->len);
	if (ns->loaded && !same) {
		sfs_log(SFS_LOG_WARN, "namespace",
			"%s: saved for another export root (another cluster or export); dropped",
			ns->path ? ns->path : "namespace");
		index_clear(ns);
		ns->loaded = false;
		dropped = 1;
	}
	bool write = ns->fd >= 0 && (!same || ns->need_rewrite || !ns->have_root);
	ns->root = *root;
	ns->have_root = true;
	ns->need_rewrite = false;
	if (write && (rc = rewrite(ns)) < 0) {
		sfs_log(SFS_LOG_WARN, "namespace", "%s: cannot rewrite (%s); kept in memory only",
			ns->path, strerror(-rc));
		close(ns->fd);
		ns->fd = -1;
	}
	pthread_mutex_unlock(&ns->lock);
	pthread_mutex_unlock(&ns->io_lock);
	return rc < 0 ? rc : dropped;
}

int sfs_ns_start(sfs_ns *ns)
{
	if (ns->fd < 0)
		return 0;
	int rc = -pthread_create(&ns->flusher, NULL, flusher_main, ns);
	ns->started = rc == 0;
	return rc;
}

void sfs_ns_close(sfs_ns *ns)
{
	if (!ns)
		return;
	if (ns->started) {
		pthread_mutex_lock(&ns->lock);
		ns->stopping = true;
		pthread_cond_signal(&ns->wake);
		pthread_mutex_unlock(&ns->lock);
		pthread_join(ns->flusher, NULL);
	}
	if (ns->fd >= 0)
		sfs_ns_flush(ns);
	index_clear(ns);
	if (ns->fd >= 0)
		close(ns->fd);
	if (ns->lock_fd >= 0)
		close(ns->lock_fd);
	free(ns->pend);
	ns_ents_fini(&ns->ents);
	ns_dirs_fini(&ns->dirs);
	free(ns->path);
	free(ns->tmp_path);
	free((char *)ns->conf.export_path);
	free((char *)ns->conf.hosts);
	free((char *)ns->conf.dir);
	pthread_cond_destroy(&ns->wake);
	pthread_mutex_destroy(&ns->lock);
	pthread_mutex_destroy(&ns->io_lock);
	free(ns);
}

int sfs_ns_lookup(sfs_ns *ns, uint64_t parent, const char *name, struct sfs_fh *fh,
		  struct sfs_attr *attr)
{
	size_t len = strlen(name);
	int rc = -ENODATA;

	if (len > 255)
		return -ENODATA;
	pthread_mutex_lock(&ns->lock);
	struct ns_ent *e = *ent_slot(ns, parent, name, len);
	if (e) {
		ent_decode(e, fh, attr, NULL);
		rc = 0;
	} else if (len) {
		struct ns_dir *d = dir_find(ns, parent);
		if (d && d->complete)
			rc = -ENOENT;
	}
	if (rc == -ENODATA)
		ns->misses++;
	else
		ns->hits++;
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int sfs_ns_add(sfs_ns *ns, uint64_t parent, const char *name, const struct sfs_fh *fh,
	       const struct sfs_attr *attr)
{
	uint8_t rec[SFS_NS_RECORD_MAX];
	size_t nl = strlen(name);

	if (nl > 255 || (!nl && parent != SFS_NS_ROOT) || !strcmp(name, ".") ||
	    !strcmp(name, "..") || fh->len > SFS_FH_MAX)
		return -EINVAL;
	size_t len = ent_encode(rec, parent, name, nl, fh, attr);
	pthread_mutex_lock(&ns->lock);
	int rc = index_put(ns, rec, len);
	if (rc == 0)
		pend_append(ns, rec, len);
	else if (rc == -ENOSPC)
		ns->not_recorded++;
	pthread_mutex_unlock(&ns->lock);
	return rc < 0 ? rc : 0;
}

int sfs_ns_dir_complete(sfs_ns *ns, uint64_t dir, uint64_t n_entries)
{
	uint8_t rec[DIRDONE_BYTES], *p = rec;
	uint16_t l16 = DIRDONE_BYTES;

	memcpy(p, &l16, 2);
	p[2] = KIND_DIRDONE;
	p[3] = 0;
	p += 4;
	put64(&p, dir);
	put64(&p, n_entries);
	seal(rec, DIRDONE_BYTES);
	pthread_mutex_lock(&ns->lock);
	struct ns_dir *d = dir_find(ns, dir);
	bool was = d && d->complete;
	int rc = mark_complete(ns, dir, n_entries);
	if (ns->conf.ttl_ms) {
		d = dir_find(ns, dir); /* mark_complete may have made it */
		if (d && rc < 0 && d->listing) {
			listing_fail_locked(ns, d);
		} else if (d) {
			d->listing = false;
			d->fails = 0;
		}
	} else if (rc == 0 && !was) {
		pend_append(ns, rec, DIRDONE_BYTES);
		ns->urgent = true; /* a listing is worth making durable now */
		pthread_cond_signal(&ns->wake);
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

int sfs_ns_readdir(sfs_ns *ns, uint64_t dir, uint64_t index, sfs_ns_dirent_fn fn, void *arg)
{
	char name[256];
	struct sfs_fh fh;
	struct sfs_attr attr;
	int n = 0;

	pthread_mutex_lock(&ns->lock);
	struct ns_dir *d = dir_find(ns, dir);
	if (!d || !d->complete) {
		ns->misses++;
		pthread_mutex_unlock(&ns->lock);
		return -ENODATA;
	}
	ns->hits++;
	for (uint64_t i = index < SFS_NS_INDEX_FIRST ? 0 : index - SFS_NS_INDEX_FIRST; i < d->n;
	     i++) {
		ent_decode(d->ents[i], &fh, &attr, name);
		if (fn(arg, name, SFS_NS_INDEX_FIRST + i + 1, &fh, &attr))
			break;
		n++;
	}
	pthread_mutex_unlock(&ns->lock);
	return n;
}

void sfs_ns_get_stats(sfs_ns *ns, struct sfs_ns_stats *out)
{
	pthread_mutex_lock(&ns->lock);
	size_t bucket_bytes = (ns->ents.n_buckets + ns->dirs.n_buckets) * sizeof(void *);
	*out = (struct sfs_ns_stats){.entries = ns->ents.n,
				     .dirs_complete = ns->n_complete,
				     .file_bytes = ns->fd >= 0 ? ns->file_bytes : 0,
				     .mem_bytes = ns->mem_bytes + bucket_bytes,
				     .hits = ns->hits,
				     .misses = ns->misses,
				     .not_recorded = ns->not_recorded,
				     .discarded_bytes = ns->discarded_bytes,
				     .listings = ns->listings,
				     .listings_failed = ns->listings_failed,
				     .listing_absent = ns->listing_absent,
				     .loaded = ns->loaded};
	pthread_mutex_unlock(&ns->lock);
}

/* --- listings mode ------------------------------------------------------ */

/* Drop every name of d from the index (d stays). Caller holds lock. */
static void dir_drop_names(sfs_ns *ns, struct ns_dir *d)
{
	for (uint32_t i = 0; i < d->n; i++) {
		struct ns_ent *e = d->ents[i];
		size_t nl;
		const char *name = ent_name(e, &nl);
		struct ns_ent **slot = ent_slot(ns, d->fileid, name, nl);
		if (*slot == e) /* (parent, name) is unique in the index */
			ns_ents_unlink(&ns->ents, slot);
		ns->mem_bytes -= sizeof(*e) + e->len;
		free(e);
	}
	ns->mem_bytes -= d->cap * sizeof(*d->ents);
	free(d->ents);
	d->ents = NULL;
	d->n = d->cap = 0;
	if (d->complete) {
		d->complete = false;
		ns->n_complete--;
	}
}

/* How long d's state holds from since_ms: a listing answers for ttl_ms; a
 * directory whose listings failed k times in a row is not listed again for
 * ttl_ms << k (k <= LISTING_BACKOFF_MAX), so a directory larger than
 * max_entries is not read whole every ttl_ms for nothing. */
#define LISTING_BACKOFF_MAX 6
static uint64_t dir_hold_ms(const sfs_ns *ns, const struct ns_dir *d)
{
	return d->failed ? ns->conf.ttl_ms << d->fails : ns->conf.ttl_ms;
}

/* Whether d's listing answers at now. Caller holds lock. */
static bool listing_fresh(const sfs_ns *ns, const struct ns_dir *d, uint64_t now)
{
	return d && d->complete && now - d->since_ms < ns->conf.ttl_ms;
}

int sfs_ns_lookup_listed(sfs_ns *ns, uint64_t parent, const char *name, struct sfs_fh *fh,
			 struct sfs_attr *attr, uint64_t *listed_ms)
{
	size_t len = strlen(name);
	uint64_t now = sfs_now_ms();
	int rc = -ENODATA;

	pthread_mutex_lock(&ns->lock);
	struct ns_dir *d = dir_find(ns, parent);
	if (len && len <= 255 && listing_fresh(ns, d, now)) {
		struct ns_ent *e = *ent_slot(ns, parent, name, len);
		if (e) {
			ent_decode(e, fh, attr, NULL);
			*listed_ms = d->since_ms;
			ns->hits++;
			rc = 0;
		} else {
			ns->listing_absent++;
			rc = -ENOENT;
		}
	} else {
		ns->misses++;
	}
	pthread_mutex_unlock(&ns->lock);
	return rc;
}

bool sfs_ns_listing_wanted(sfs_ns *ns, uint64_t dir)
{
	uint64_t now = sfs_now_ms();
	bool go = false;

	pthread_mutex_lock(&ns->lock);
	struct ns_dir *d = dir_get(ns, dir);
	if (d && d->listing && d->misses < UINT32_MAX)
		d->misses++; /* it may read further (sfs_ns_listing_may_go_on) */
	if (d && !d->listing) {
		bool was_listed = d->complete;
		if (now - d->since_ms >= dir_hold_ms(ns, d)) { /* a new window */
			dir_drop_names(ns, d);
			d->failed = false; /* d->fails stays: the next failure backs off longer */
			d->misses = 0;
			d->since_ms = now;
		}
		if (!d->failed && !d->complete &&
		    (was_listed || ++d->misses >= SFS_NS_LIST_AFTER) &&
		    ns->ents.n < ns->conf.max_entries) { /* full: it would fail */
			dir_drop_names(ns, d);		 /* names a racing listing left */
			d->listing = true;
			d->relisting = was_listed;
			d->since_ms = now; /* answers are at most ttl_ms older than this */
			ns->listings++;
			go = true;
		}
	}
	pthread_mutex_unlock(&ns->lock);
	return go;
}

/* Caller holds lock. */
static void listing_fail_locked(sfs_ns *ns, struct ns_dir *d)
{
	dir_drop_names(ns, d);
	d->listing = false;
	d->failed = true;
	if (d->fails < LISTING_BACKOFF_MAX)
		d->fails++;
	d->since_ms = sfs_now_ms();
	ns->listings_failed++;
}

void sfs_ns_listing_failed(sfs_ns *ns, uint64_t dir)
{
	pthread_mutex_lock(&ns->lock);
	struct ns_dir *d = dir_find(ns, dir);
	if (d && d->listing)
		listing_fail_locked(ns, d);
	pthread_mutex_unlock(&ns->lock);
}

bool sfs_ns_listing_may_go_on(sfs_ns *ns, uint64_t dir, uint64_t names)
{
	pthread_mutex_lock(&ns->lock);
	struct ns_dir *d = dir_find(ns, dir);
	bool go = d && d->listing &&
		  (d->relisting || names < (uint64_t)SFS_NS_NAMES_PER_MISS * d->misses);
	pthread_mutex_unlock(&ns->lock);
	return go;
}

uint64_t sfs_ns_expire(sfs_ns *ns)
{
	uint64_t now = sfs_now_ms(), dropped = 0;

	if (!ns->conf.ttl_ms)
		return 0;
	pthread_mutex_lock(&ns->lock);
	for (size_t b = 0; b < ns->dirs.n_buckets; b++)
		for (struct ns_dir **p = &ns->dirs.buckets[b], *d; (d = *p);) {
			/* A failed directory is kept for twice its backoff, so that
			 * it is still known when it fails again. */
			uint64_t keep = d->failed ? 2 * dir_hold_ms(ns, d) : ns->conf.ttl_ms;
			if (d->listing || now - d->since_ms < keep) {
				p = &d->hnext;
				continue;
			}
			ns_dirs_unlink(&ns->dirs, p);
			dropped += d->n;
			dir_drop_names(ns, d);
			ns->mem_bytes -= sizeof(*d);
			free(d);
		}
	pthread_mutex_unlock(&ns->lock);
	return dropped;
}
