// SPDX-License-Identifier: Apache-2.0
/*
 * lookup — LOOKUP and FORGET: the entries of the export's tree.
 *
 * Owns: answering a name from the immutable namespace (fs->ns), from a
 * directory's listing (fs->listings, cache/namespace/listing.h) or from an
 * NFS LOOKUP, and the entry's timeouts; an inode's dataset when it is
 * first reached. Does not own: the inodes (fs/inode), the namespace and
 * the listings (cache/namespace), the .shardfs/ names (ctl.c).
 * Threading: FUSE workers. A LOOKUP that goes to NFS is answered from the
 * origin I/O thread that gets its reply (lookup_call). Replies are sent
 * with no lock held.
 */
#include "ops.h"
#include "ctl.h"
#include "../../cache/common/log.h"
#include "../memtrim.h"
#include "../../cache/namespace/listing.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* How long the kernel may keep what NFS said at seen_ms (0: now): what is
 * left of actimeo, so that no answer is older than actimeo; immutable:
 * the attribute timeout (a year). */
static double timeout_left(struct sfs_fs *fs, uint64_t seen_ms)
{
	uint64_t ttl = fs->opts->actimeo_s * 1000ull, now = sfs_now_ms();

	if (fs->ns || !seen_ms)
		return fs->attr_timeout_s;
	return now - seen_ms >= ttl ? 0 : (double)(ttl - (now - seen_ms)) / 1000.0;
}

/* Reply a negative entry for what NFS (or the immutable namespace) said
 * just now, cached by the kernel for the attribute timeout. Never for a
 * name a listing merely lacks (lookup_from_listing). */
static void reply_noent(struct sfs_fs *fs, fuse_req_t req)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.entry_timeout = fs->attr_timeout_s;
	fuse_reply_entry(req, &e);
}

/* Reply an entry for (fh, attr), `name` in directory p, as NFS said it at
 * seen_ms (0: now; older only from a listing): the inode gains one lookup
 * reference. Attributes the inode got since seen_ms win. */
static void reply_child(struct sfs_fs *fs, fuse_req_t req, struct sfs_inode *p, const char *name,
			const struct sfs_fh *fh, const struct sfs_attr *a, uint64_t seen_ms)
{
	struct fuse_entry_param e;
	struct sfs_attr cur;
	struct sfs_inode *child =
	    sfs_inode_get(fs->inodes, fh, a, seen_ms ? seen_ms : sfs_now_ms());

	if (!child) {
		reply_err(req, -ENOMEM);
		return;
	}
	inode_set_dataset(child, sfs_ops_child_dataset(fs, p, name, a));
	if (!seen_ms) {
		sfs_ops_fill_entry(fs, &e, child, a);
	} else {
		sfs_inode_lock(child);
		sfs_inode_attr_get(child, &cur);
		uint64_t attr_ms = child->attr_time_ms;
		sfs_inode_unlock(child);
		sfs_ops_fill_entry(fs, &e, child, &cur);
		e.entry_timeout = timeout_left(fs, seen_ms);
		e.attr_timeout = timeout_left(fs, attr_ms);
	}
	sfs_kernel_before(child); /* the kernel's requests on it come after */
	if (fuse_reply_entry(req, &e) != 0)
		sfs_inode_forget(fs->inodes, child, 1);
}

/* Immutable: answer a lookup from the namespace. Returns true if it replied. */
static bool lookup_from_ns(struct sfs_fs *fs, fuse_req_t req, struct sfs_inode *p, const char *name)
{
	struct sfs_fh fh;
	struct sfs_attr a;
	int rc = sfs_ns_lookup(fs->ns, ns_key(fs, p), name, &fh, &a);

	if (rc == -ENODATA)
		return false;
	if (rc == -ENOENT)
		reply_noent(fs, req);
	else
		reply_child(fs, req, p, name, &fh, &a, 0);
	return true;
}

/*
 * A LOOKUP that goes to NFS is answered by the I/O thread that gets its
 * reply: the FUSE worker submits it and goes back to the kernel's queue
 * instead of sleeping until NFS answers. A waiting worker was one more
 * thread put to sleep and woken per file, and libfuse starts more workers
 * while those wait (several per reader, for readers of small files).
 */
struct lookup_call {
	struct sfs_origin_req r; /* LOOKUP, then GETATTR if the reply had no attributes */
	struct sfs_fs *fs;
	fuse_req_t req;
	struct sfs_inode *parent; /* held by the kernel during the lookup */
	uint64_t ns_dir;	  /* immutable: the parent's namespace key */
	struct sfs_fh fh;	  /* the child, once the LOOKUP answered */
	bool getattr;		  /* r is the follow-up GETATTR */
	char name[];		  /* r.name points here */
};

/* Runs on an I/O thread (or in sfs_origin_submit when the pool is closing);
 * owns c and frees it, unless it hands c on to a GETATTR. */
static void lookup_done(struct sfs_origin_req *r)
{
	struct lookup_call *c = r->arg;
	struct sfs_fs *fs = c->fs;
	int rc = r->result;

	if (rc == -ENOENT && !c->getattr) {
		reply_noent(fs, c->req); /* cached by the kernel for actimeo */
	} else if (rc < 0) {
		reply_err(c->req, rc);
	} else if (!c->getattr && !r->have_attr) {
		c->fh = r->out_fh;
		c->getattr = true;
		c->r = (struct sfs_origin_req){
		    .op = SFS_ORIGIN_GETATTR, .fh = c->fh, .done = lookup_done, .arg = c};
		sfs_origin_submit(fs->origin, &c->r);
		return;
	} else {
		if (!c->getattr)
			c->fh = r->out_fh;
		if (fs->ns) /* ".." and "." are refused: they are not names of the tree */
			sfs_ns_add(fs->ns, c->ns_dir, c->name, &c->fh, &r->attr);
		reply_child(fs, c->req, c->parent, c->name, &c->fh, &r->attr, 0);
	}
	free(c);
}

static void lookup_from_nfs(struct sfs_fs *fs, fuse_req_t req, struct sfs_inode *p,
			    const char *name)
{
	size_t len = strlen(name);
	struct lookup_call *c = malloc(sizeof(*c) + len + 1);

	if (!c) {
		reply_err(req, -ENOMEM);
		return;
	}
	memcpy(c->name, name, len + 1);
	c->fs = fs;
	c->req = req;
	c->parent = p;
	c->ns_dir = fs->ns ? ns_key(fs, p) : 0;
	c->getattr = false;
	c->r = (struct sfs_origin_req){.op = SFS_ORIGIN_LOOKUP,
				       .fh = sfs_inode_fh(p),
				       .name = c->name,
				       .done = lookup_done,
				       .arg = c};
	sfs_origin_submit(fs->origin, &c->r);
}

/* Not immutable: answer a lookup from p's listing, or count the miss (and
 * start the listing). A name the listing lacks is not answered: it may have
 * been created on the cluster since the listing, and only NFS knows (a name
 * NFS found missing is then cached by the kernel for actimeo, as on NFS).
 * Returns true if it replied. */
static bool lookup_from_listing(struct sfs_fs *fs, fuse_req_t req, struct sfs_inode *p,
				const char *name)
{
	uint64_t key = ns_key(fs, p), listed_ms = 0;
	struct sfs_fh fh;
	struct sfs_attr a;
	int rc = sfs_ns_lookup_listed(fs->listings, key, name, &fh, &a, &listed_ms);

	if (rc == -ENODATA) {
		struct sfs_fh dir = sfs_inode_fh(p);
		sfs_listing_missed(fs->listings, fs->origin, &dir, key);
	}
	if (rc < 0)
		return false;
	reply_child(fs, req, p, name, &fh, &a, listed_ms);
	return true;
}

void sfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *p = I(fs, parent);

	op_count(fs, SFS_OP_LOOKUP);
	if (sfs_ops_ctl_lookup(req, fs, p, name))
		return;
	if (sfs_inode_kind(p) != SFS_INODE_NFS) {
		reply_err(req, -ENOENT);
		return;
	}
	if (fs->ns && lookup_from_ns(fs, req, p, name))
		return;
	if (fs->listings && lookup_from_listing(fs, req, p, name))
		return;
	lookup_from_nfs(fs, req, p, name);
}

void sfs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct sfs_fs *fs = FS(req);

	op_count(fs, SFS_OP_FORGET);
	sfs_inode_forget(fs->inodes, I(fs, ino), nlookup);
	fuse_reply_none(req);
	sfs_memtrim_freed(1);
}

void sfs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct sfs_fs *fs = FS(req);

	op_count(fs, SFS_OP_FORGET);
	for (size_t k = 0; k < count; k++)
		sfs_inode_forget(fs->inodes, I(fs, forgets[k].ino), forgets[k].nlookup);
	fuse_reply_none(req);
	sfs_memtrim_freed(count); /* memtrim.h: given back within a second */
}
