// SPDX-License-Identifier: Apache-2.0
/*
 * datasets — dataset names and read counters of one cache directory. See
 * datasets.h for the contract and the file format.
 *
 * In memory: slots[SFS_DSETS_MAX], open addressing by id (home slot id &
 * (SFS_DSETS_MAX - 1), linear probing, never deleted). A slot is published
 * by a release store of its id after its name is set; readers load the id
 * with acquire and may then read the name. Counters are relaxed atomics.
 */
#include "datasets.h"
#include "../common/hash.h"
#include "../common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FILE_HEAD "shardfs-datasets 1"
#define MASK	  (SFS_DSETS_MAX - 1)

struct slot {
	uint32_t id;	     /* 0: free; set once (release) under d->lock */
	char *name;	     /* set before id, then read-only */
	uint64_t hit_bytes;  /* atomic */
	uint64_t miss_bytes; /* atomic */
	int64_t last_use_s;  /* atomic */
};

struct sfs_dsets {
	char *path;	      /* set at open, then read-only */
	pthread_mutex_t lock; /* a leaf: insertions and saves */
	struct slot slots[SFS_DSETS_MAX];
	size_t n;	  /* protected by lock */
	bool names_dirty; /* atomic: a name added since the last save */
	bool dirty;	  /* atomic: anything changed since the last save */
};

_Static_assert((SFS_DSETS_MAX & MASK) == 0, "a power of two");

static int64_t now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

long sfs_dsets_find(sfs_dsets *d, uint32_t id)
{
	if (!id)
		return -1;
	for (uint32_t k = 0; k < SFS_DSETS_MAX; k++) {
		uint32_t at = (id + k) & MASK;
		uint32_t got = __atomic_load_n(&d->slots[at].id, __ATOMIC_ACQUIRE);
		if (got == id)
			return (long)at;
		if (!got)
			return -1;
	}
	return -1;
}

/* Publish (id, name) in a free slot. Caller holds lock. Returns 0 or
 * -ENOSPC / -ENOMEM. Takes ownership of name on success. */
static int insert(sfs_dsets *d, uint32_t id, char *name)
{
	if (d->n >= SFS_DSETS_MAX * 3 / 4)
		return -ENOSPC; /* keep probes short */
	for (uint32_t k = 0;; k++) {
		struct slot *s = &d->slots[(id + k) & MASK];
		if (s->id)
			continue;
		s->name = name;
		__atomic_store_n(&s->id, id, __ATOMIC_RELEASE);
		d->n++;
		return 0;
	}
}

uint32_t sfs_dsets_intern(sfs_dsets *d, const char *name)
{
	size_t len = strlen(name);

	if (!len || len > SFS_DSETS_NAME_MAX)
		return 0;
	uint32_t id = (uint32_t)sfs_xxh3_64(name, len);
	for (;; id++) {
		if (!id)
			continue;
		long at = sfs_dsets_find(d, id);
		if (at >= 0 && !strcmp(d->slots[at].name, name))
			return id;
		if (at >= 0)
			continue; /* another name has this id: the next one */
		pthread_mutex_lock(&d->lock);
		at = sfs_dsets_find(d, id); /* added since? */
		if (at >= 0) {
			pthread_mutex_unlock(&d->lock);
			if (!strcmp(d->slots[at].name, name))
				return id;
			continue;
		}
		char *copy = strdup(name);
		int rc = copy ? insert(d, id, copy) : -ENOMEM;
		if (rc == 0) {
			__atomic_store_n(&d->names_dirty, true, __ATOMIC_RELAXED);
			__atomic_store_n(&d->dirty, true, __ATOMIC_RELAXED);
		} else {
			free(copy);
			id = 0;
		}
		pthread_mutex_unlock(&d->lock);
		return id;
	}
}

bool sfs_dsets_get(sfs_dsets *d, size_t slot, struct sfs_dset_info *out)
{
	struct slot *s = &d->slots[slot & MASK];
	uint32_t id = __atomic_load_n(&s->id, __ATOMIC_ACQUIRE);

	if (!id)
		return false;
	out->id = id;
	out->name = s->name;
	out->hit_bytes = __atomic_load_n(&s->hit_bytes, __ATOMIC_RELAXED);
	out->miss_bytes = __atomic_load_n(&s->miss_bytes, __ATOMIC_RELAXED);
	out->last_use_s = __atomic_load_n(&s->last_use_s, __ATOMIC_RELAXED);
	return true;
}

/* Note the time in slot at; stored (and the table dirty) once a second at
 * most, so that readers do not bounce a cache line per read. */
static void touch_slot(sfs_dsets *d, long at)
{
	int64_t now = now_s();

	if (__atomic_load_n(&d->slots[at].last_use_s, __ATOMIC_RELAXED) == now)
		return;
	__atomic_store_n(&d->slots[at].last_use_s, now, __ATOMIC_RELAXED);
	__atomic_store_n(&d->dirty, true, __ATOMIC_RELAXED);
}

void sfs_dsets_count_read(sfs_dsets *d, uint32_t id, uint64_t hit_bytes, uint64_t miss_bytes)
{
	long at = sfs_dsets_find(d, id);

	if (at < 0)
		return;
	struct slot *s = &d->slots[at];
	if (hit_bytes)
		__atomic_fetch_add(&s->hit_bytes, hit_bytes, __ATOMIC_RELAXED);
	if (miss_bytes)
		__atomic_fetch_add(&s->miss_bytes, miss_bytes, __ATOMIC_RELAXED);
	touch_slot(d, at);
}

void sfs_dsets_touch(sfs_dsets *d, uint32_t id)
{
	long at = sfs_dsets_find(d, id);

	if (at >= 0)
		touch_slot(d, at);
}

void sfs_dsets_reset(sfs_dsets *d, uint32_t id)
{
	for (size_t i = 0; i < SFS_DSETS_MAX; i++) {
		struct slot *s = &d->slots[i];
		uint32_t got = __atomic_load_n(&s->id, __ATOMIC_ACQUIRE);
		if (!got || (id && got != id))
			continue;
		__atomic_store_n(&s->hit_bytes, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->miss_bytes, 0, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&d->dirty, true, __ATOMIC_RELAXED);
}

/* --- the file ------------------------------------------------------------- */

static void put_name(FILE *f, const char *name)
{
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if (*p <= ' ' || *p == '%' || *p == 0x7f)
			fprintf(f, "%%%02X", *p);
		else
			fputc(*p, f);
}

/* Decode %XX in place. Returns false for a malformed name. */
static bool get_name(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		unsigned v;
		if (*r != '%') {
			*w++ = *r;
			continue;
		}
		if (sscanf(r + 1, "%2X", &v) != 1 || !v)
			return false;
		*w++ = (char)v;
		r += 2;
	}
	*w = 0;
	return w > s;
}

/* Write every slot to f. Caller holds lock. Returns 0 or -EIO. */
static int write_slots(sfs_dsets *d, FILE *f)
{
	fprintf(f, "%s\n", FILE_HEAD);
	for (size_t i = 0; i < SFS_DSETS_MAX; i++) {
		struct sfs_dset_info in;
		if (!sfs_dsets_get(d, i, &in))
			continue;
		fprintf(f, "%08" PRIx32 " %" PRIu64 " %" PRIu64 " %" PRId64 " ", in.id,
			in.hit_bytes, in.miss_bytes, in.last_use_s);
		put_name(f, in.name);
		fputc('\n', f);
	}
	return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}

int sfs_dsets_save(sfs_dsets *d, bool names_only)
{
	char tmp[4200];
	int rc = 0;

	if (!__atomic_load_n(names_only ? &d->names_dirty : &d->dirty, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&d->lock);
	__atomic_store_n(&d->names_dirty, false, __ATOMIC_RELAXED);
	__atomic_store_n(&d->dirty, false, __ATOMIC_RELAXED);
	snprintf(tmp, sizeof(tmp), "%s.tmp", d->path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		goto out;
	}
	rc = write_slots(d, f);
	if (!rc && fdatasync(fileno(f)) != 0)
		rc = -errno;
	if (fclose(f) != 0 && !rc)
		rc = -EIO;
	if (!rc && rename(tmp, d->path) != 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
out:
	if (rc) /* try again at the next save */
		__atomic_store_n(&d->names_dirty, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

void sfs_dsets_load(sfs_dsets *d)
{
	char *line = NULL;
	size_t cap = 0;

	pthread_mutex_lock(&d->lock);
	FILE *f = fopen(d->path, "re");
	if (!f)
		goto out_unlock;
	if (getline(&line, &cap, f) < 0 || strncmp(line, FILE_HEAD "\n", sizeof(FILE_HEAD)) != 0)
		goto out;
	while (getline(&line, &cap, f) > 0) {
		uint32_t id;
		uint64_t hit, miss;
		int64_t last;
		int at = 0;
		if (sscanf(line, "%8" SCNx32 " %" SCNu64 " %" SCNu64 " %" SCNd64 " %n", &id, &hit,
			   &miss, &last, &at) != 4 ||
		    !at || !id)
			continue;
		char *name = line + at;
		name[strcspn(name, "\n")] = 0;
		if (!get_name(name) || strlen(name) > SFS_DSETS_NAME_MAX ||
		    sfs_dsets_find(d, id) >= 0)
			continue;
		char *copy = strdup(name);
		if (!copy || insert(d, id, copy) < 0) {
			free(copy);
			break;
		}
		struct slot *s = &d->slots[sfs_dsets_find(d, id)];
		s->hit_bytes = hit;
		s->miss_bytes = miss;
		s->last_use_s = last;
	}
out:
	free(line);
	fclose(f);
out_unlock:
	pthread_mutex_unlock(&d->lock);
}

int sfs_dsets_open(const char *path, sfs_dsets **out)
{
	sfs_dsets *d = calloc(1, sizeof(*d));

	if (!d || !(d->path = strdup(path))) {
		free(d);
		return -ENOMEM;
	}
	pthread_mutex_init(&d->lock, NULL);
	sfs_dsets_load(d);
	*out = d;
	return 0;
}

void sfs_dsets_close(sfs_dsets *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < SFS_DSETS_MAX; i++)
		free(d->slots[i].name);
	pthread_mutex_destroy(&d->lock);
	free(d->path);
	free(d);
}
