// SPDX-License-Identifier: Apache-2.0
/*
 * hint_resolve — a hint item's path resolved as its sender would open it
 * (hint_resolve.h).
 */
#include "hint_resolve.h"
#include "../inode/inode.h"
#include "../options.h"
#include "../../cache/namespace/listing.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A directory resolved for a list: its path (a prefix of items' paths). */
struct hint_dir {
	struct hint_dir *next;
	uint64_t hash, key, seen_ms;
	struct sfs_fh fh;
	uint32_t mode, uid, gid;
	int err; /* 0, or why the path is no directory the sender may search */
	uint16_t len;
	char path[];
};
#define DIR_BUCKETS 1024
#define DIR_MAX	    4096 /* directories kept per list; past it the table starts over */

struct sfs_hint_dirs {
	const struct sfs_hints_handles *hh; /* the hints', which outlive the table */
	struct sfs_hint_sender sender;
	bool check_perms;
	pthread_mutex_t lock; /* a leaf: the table below */
	struct hint_dir *dirs[DIR_BUCKETS];
	unsigned n_dirs;
};

static void dirs_clear(struct sfs_hint_dirs *D)
{
	for (size_t b = 0; b < DIR_BUCKETS; b++)
		for (struct hint_dir *d = D->dirs[b], *n; d; d = n) {
			n = d->next;
			free(d);
		}
	memset(D->dirs, 0, sizeof(D->dirs));
	D->n_dirs = 0;
}

struct sfs_hint_dirs *sfs_hint_dirs_new(const struct sfs_hints_handles *hh,
					const struct sfs_hint_sender *s, bool check_perms)
{
	struct sfs_hint_dirs *D = calloc(1, sizeof(*D));

	if (!D)
		return NULL;
	D->hh = hh;
	D->sender = *s;
	D->check_perms = check_perms;
	pthread_mutex_init(&D->lock, NULL);
	return D;
}

void sfs_hint_dirs_free(struct sfs_hint_dirs *D)
{
	if (!D)
		return;
	dirs_clear(D);
	pthread_mutex_destroy(&D->lock);
	free(D);
}

static bool in_groups(const struct sfs_hint_sender *s, uint32_t gid)
{
	if (s->gid == gid)
		return true;
	for (int k = 0; k < s->n_groups; k++)
		if (s->groups[k] == gid)
			return true;
	return false;
}

/* Whether the sender may `want` (4 read, 1 search) an object of mode, uid,
 * gid: the kernel's generic_permission, with root's override. */
static bool sender_may(const struct sfs_hint_dirs *D, uint32_t mode, uint32_t uid, uint32_t gid,
		       unsigned want)
{
	const struct sfs_hint_sender *s = &D->sender;

	if (!D->check_perms || s->uid == 0)
		return true;
	unsigned bits = s->uid == uid ? mode >> 6 : in_groups(s, gid) ? mode >> 3 : mode;
	return (bits & want) == want;
}

static uint64_t path_hash(const char *p, size_t n)
{
	uint64_t x = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		x = (x ^ (uint8_t)p[i]) * 1099511628211ull;
	return x;
}

/* The resolved directory path[0, len) of L, if kept and not older than the
 * attribute timeout. Caller holds D->lock; copies it out. */
static bool dir_cached(struct sfs_hint_dirs *D, const char *path, size_t len, struct hint_dir *out)
{
	uint64_t hash = path_hash(path, len), now = sfs_now_ms();
	uint64_t ttl = (uint64_t)(D->hh->attr_timeout_s * 1000) + 1000;

	for (struct hint_dir *d = D->dirs[hash % DIR_BUCKETS]; d; d = d->next)
		if (d->hash == hash && d->len == len && !memcmp(d->path, path, len) &&
		    now - d->seen_ms < ttl) {
			memcpy(out, d, sizeof(*out));
			return true;
		}
	return false;
}

static void dir_keep(struct sfs_hint_dirs *D, const char *path, size_t len,
		     const struct hint_dir *d)
{
	struct hint_dir *n = malloc(sizeof(*n) + len);
	if (!n)
		return;
	*n = *d;
	n->hash = path_hash(path, len);
	n->len = (uint16_t)len;
	n->seen_ms = sfs_now_ms();
	memcpy(n->path, path, len);
	pthread_mutex_lock(&D->lock);
	if (D->n_dirs >= DIR_MAX)
		dirs_clear(D);
	n->next = D->dirs[n->hash % DIR_BUCKETS];
	D->dirs[n->hash % DIR_BUCKETS] = n;
	D->n_dirs++;
	pthread_mutex_unlock(&D->lock);
}

/* Look name up in directory d as a reader's lookup would: the namespace
 * (immutable), a current listing, else NFS (recorded in the namespace).
 * A miss in a directory not listed counts towards its listing, so that the
 * reader's own lookups there are answered without NFS. Returns 0 or -errno. */
static int lookup_name(struct sfs_hint_dirs *D, const struct hint_dir *d, const char *name,
		       struct sfs_fh *fh, struct sfs_attr *a)
{
	const struct sfs_hints_handles *hh = D->hh;
	uint64_t listed_ms;
	int rc;

	if (hh->ns) {
		if ((rc = sfs_ns_lookup(hh->ns, d->key, name, fh, a)) != -ENODATA)
			return rc;
	} else if (hh->listings) {
		rc = sfs_ns_lookup_listed(hh->listings, d->key, name, fh, a, &listed_ms);
		if (rc == 0)
			return 0;
		if (rc == -ENODATA)
			sfs_listing_missed(hh->listings, hh->origin, &d->fh, d->key);
	}
	struct sfs_origin_req r = {.op = SFS_ORIGIN_LOOKUP, .fh = d->fh, .name = name};
	if ((rc = sfs_origin_call(hh->origin, &r)) < 0)
		return rc;
	*fh = r.out_fh;
	if (!r.have_attr) {
		r = (struct sfs_origin_req){.op = SFS_ORIGIN_GETATTR, .fh = *fh};
		if ((rc = sfs_origin_call(hh->origin, &r)) < 0)
			return rc;
	}
	*a = r.attr;
	if (hh->ns)
		sfs_ns_add(hh->ns, d->key, name, fh, a);
	return 0;
}

static void dir_from(struct hint_dir *d, const struct sfs_fh *fh, const struct sfs_attr *a,
		     uint64_t key)
{
	d->fh = *fh;
	d->key = key;
	d->mode = a->mode;
	d->uid = a->uid;
	d->gid = a->gid;
}

/* The directory path[0, len) (len 0: the root), from the list's table or
 * looked up. Returns 0 or -errno. */
static int lookup_dir(struct sfs_hint_dirs *D, const char *path, size_t len, struct hint_dir *out);

/* Look path[0, len) up (not the root): its directory (searchable by the
 * sender), then its last name there. Returns 0 or -errno. */
static int lookup_path(struct sfs_hint_dirs *D, const char *path, size_t len, struct sfs_fh *fh,
		       struct sfs_attr *a)
{
	const char *slash = memrchr(path, '/', len);
	size_t plen = slash ? (size_t)(slash - path) : 0;
	size_t nlen = len - (slash ? plen + 1 : 0);
	struct hint_dir dir;
	char name[256];
	int rc;

	if (nlen >= sizeof(name))
		return -ENAMETOOLONG;
	if ((rc = lookup_dir(D, path, plen, &dir)) < 0)
		return rc;
	memcpy(name, path + len - nlen, nlen);
	name[nlen] = 0;
	return lookup_name(D, &dir, name, fh, a);
}

/* Look directory path[0, len) up (not the root). Returns 0 or -errno. */
static int lookup_dir_name(struct sfs_hint_dirs *D, const char *path, size_t len,
			   struct hint_dir *out)
{
	struct sfs_attr a;
	struct sfs_fh fh;
	int rc = lookup_path(D, path, len, &fh, &a);

	if (rc < 0)
		return rc;
	if (a.type != S_IFDIR)
		return -ENOTDIR;
	dir_from(out, &fh, &a, a.fileid);
	return 0;
}

static int lookup_dir(struct sfs_hint_dirs *D, const char *path, size_t len, struct hint_dir *out)
{
	pthread_mutex_lock(&D->lock);
	bool hit = dir_cached(D, path, len, out);
	pthread_mutex_unlock(&D->lock);
	if (hit)
		return out->err;
	int rc = 0;
	if (len == 0) {
		struct sfs_inode *root = sfs_inode_root(D->hh->inodes);
		struct sfs_attr a;
		sfs_inode_lock(root);
		sfs_inode_attr_get(root, &a);
		sfs_inode_unlock(root);
		struct sfs_fh fh = sfs_inode_fh(root);
		dir_from(out, &fh, &a, SFS_NS_ROOT);
	} else {
		rc = lookup_dir_name(D, path, len, out);
	}
	if (rc == 0 && !sender_may(D, out->mode, out->uid, out->gid, 1))
		rc = -EACCES;
	/* A missing, wrong or closed directory is kept as such: the items
	 * under it are skipped without asking NFS again (until the entry is
	 * older than the attribute timeout). Other errors may pass. */
	if (rc == 0 || rc == -ENOENT || rc == -ENOTDIR || rc == -EACCES) {
		out->err = rc;
		dir_keep(D, path, len, out);
	}
	return rc;
}

/* path[0, len) of L, readable by its sender: handle and attributes. */
int sfs_hint_resolve(struct sfs_hint_dirs *D, const char *path, size_t len, struct sfs_fh *fh,
		     struct sfs_attr *a)
{
	int rc = lookup_path(D, path, len, fh, a);

	if (rc < 0)
		return rc;
	if (a->type != S_IFREG)
		return -EISDIR;
	if (!sender_may(D, a->mode, a->uid, a->gid, 4))
		return -EACCES;
	return 0;
}

/* The dataset (cache/store/store.h) of a path: its top-level directory, or
 * the export itself for a file at the root. */
uint32_t sfs_hint_path_dataset(const struct sfs_hints_handles *hh, const char *path, size_t len)
{
	const char *slash = memchr(path, '/', len);
	char buf[2048];

	if (!hh->store)
		return 0;
	if (!slash)
		return hh->root_dataset;
	if (sfs_export_join(hh->opts, path, (size_t)(slash - path), buf, sizeof(buf)) >=
	    (int)sizeof(buf))
		return 0;
	return sfs_store_dataset(hh->store, buf);
}
