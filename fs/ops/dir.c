// SPDX-License-Identifier: Apache-2.0
/*
 * dir — OPENDIR, READDIR, READDIRPLUS and RELEASEDIR.
 *
 * Owns: an open directory's state (struct dir_handle: the NFS cookie
 * verifier, and under immutable where its listing comes from and what NFS
 * gave so far), filling the kernel's buffer, recording an immutable
 * export's whole listings in the namespace. Does not own: the namespace
 * (cache/namespace), the inodes READDIRPLUS makes (fs/inode), the
 * .shardfs/ entries (ctl.c), the hint lists sent on a directory (fs/hints).
 * Threading: FUSE workers; READDIR(PLUS) entries are added from the origin
 * I/O thread that decoded the reply, while the worker waits (the FUSE
 * buffer is private to the request until it replies). The kernel
 * serialises the readdirs of one handle.
 */
#include "ops.h"
#include "ctl.h"
#include "../../cache/common/log.h"
#include "../hints/hints.h"
#include "../kernel/handles.h"
#include "../kernel/kernel_order.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* An open directory. Readdirs of one handle are serialised by the kernel. */
struct dir_handle {
	uint8_t dir_verf[SFS_DIR_VERF_BYTES]; /* from the last READDIRPLUS reply */
	/* immutable only: where this listing comes from, and what NFS gave */
	enum { DIR_SRC_ANY, DIR_SRC_NS, DIR_SRC_NFS } src;
	uint64_t next_off; /* the offset that continues the listing */
	uint64_t n_seen;   /* names recorded from offset 0 on, in order */
	bool gap;	   /* a seek or an unrecorded name: do not mark complete */
};

/* The dir_handle of fh: this process's, or, for a directory a dead server
 * opened (keeper.h), a fresh one adopted under its fh: the listing goes on
 * from the kernel's offset as after a seek. NULL on ENOMEM. */
static struct dir_handle *dir_handle_of(uint64_t fh)
{
	struct dir_handle *h = sfs_handle_get(fh);

	if (h || (h = sfs_handle_adopted(fh)))
		return h;
	struct dir_handle *mine = calloc(1, sizeof(*mine));
	if (!mine)
		return NULL;
	mine->gap = true;
	h = sfs_handle_adopt(fh, mine);
	if (h != mine)
		free(mine);
	return h;
}

struct dir_fill {
	fuse_req_t req;
	struct sfs_fs *fs;
	bool plus;
	char *buf;
	size_t size, used;
	unsigned added;
	uint64_t now_ms;
	uint64_t last_cookie;
	struct sfs_inode *dir;	   /* the directory listed */
	struct dir_handle *record; /* immutable, from NFS: record names here */
	uint64_t ns_dir;	   /* ... under this namespace key */
};

static int dir_add(struct dir_fill *d, const char *name, uint64_t cookie,
		   const struct sfs_attr *attr, const struct sfs_fh *fh)
{
	struct fuse_entry_param e;
	bool dot = !strcmp(name, ".") || !strcmp(name, "..");
	size_t need = d->plus ? fuse_add_direntry_plus(d->req, NULL, 0, name, NULL, 0)
			      : fuse_add_direntry(d->req, NULL, 0, name, NULL, 0);

	if (d->used + need > d->size)
		return 1;
	memset(&e, 0, sizeof(e));
	if (attr)
		sfs_ops_attr_to_stat(attr, &e.attr);
	if (d->plus && attr && fh && !dot) {
		struct sfs_inode *i = sfs_inode_get(d->fs->inodes, fh, attr, d->now_ms);
		if (i) {
			inode_set_dataset(i, sfs_ops_child_dataset(d->fs, d->dir, name, attr));
			sfs_ops_fill_entry(d->fs, &e, i, attr);
			sfs_kernel_before(i); /* handed out with this listing's reply */
		}
	}
	if (d->plus)
		fuse_add_direntry_plus(d->req, d->buf + d->used, d->size - d->used, name, &e,
				       (off_t)cookie);
	else
		fuse_add_direntry(d->req, d->buf + d->used, d->size - d->used, name, &e.attr,
				  (off_t)cookie);
	d->used += need;
	d->added++;
	d->last_cookie = cookie;
	return 0;
}

/* Runs on the origin I/O thread (see sfs_origin_dirent_fn); never blocks. */
static int dirent_cb(struct sfs_origin_req *r, const char *name, uint64_t cookie,
		     const struct sfs_attr *attr, const struct sfs_fh *fh)
{
	struct dir_fill *d = r->arg;
	int full = dir_add(d, name, cookie, attr, fh);

	if (!full && d->record && strcmp(name, ".") && strcmp(name, "..")) {
		if (attr && fh && sfs_ns_add(d->fs->ns, d->ns_dir, name, fh, attr) == 0)
			d->record->n_seen++;
		else
			d->record->gap = true;
	}
	return full;
}

static int ns_dirent_cb(void *arg, const char *name, uint64_t next, const struct sfs_fh *fh,
			const struct sfs_attr *attr)
{
	return dir_add(arg, name, next, attr, fh);
}

/*
 * Immutable: list a directory whose whole listing the namespace holds
 * ("." and ".." first, at offsets 1 and 2). Returns true when it filled d.
 */
static bool readdir_from_ns(struct sfs_fs *fs, struct sfs_inode *i, struct dir_handle *h, off_t off,
			    struct dir_fill *d)
{
	struct sfs_attr self;

	if (off == 0)
		h->src = DIR_SRC_ANY; /* rewinddir: decide again */
	if (h->src == DIR_SRC_NFS)
		return false;
	sfs_inode_lock(i);
	sfs_inode_attr_get(i, &self);
	sfs_inode_unlock(i);
	struct sfs_attr parent = {.type = S_IFDIR, .mode = 0555};
	for (off_t k = off; k < 2; k++)
		if (dir_add(d, k ? ".." : ".", (uint64_t)k + 1, k ? &parent : &self, NULL))
			break;
	if (sfs_ns_readdir(fs->ns, ns_key(fs, i), (uint64_t)off, ns_dirent_cb, d) < 0) {
		d->used = d->added = 0; /* not held: NFS lists it, cookies are its own */
		h->src = DIR_SRC_NFS;
		return false;
	}
	h->src = DIR_SRC_NS;
	return true;
}

void sfs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);

	op_count(fs, SFS_OP_OPENDIR);
	struct dir_handle *h = calloc(1, sizeof(*h));
	if (!h) {
		reply_err(req, -ENOMEM);
		return;
	}
	fi->fh = sfs_handle_make(h);
	/* The kernel may keep listings until memory pressure: immutable, for
	 * good; else (AUTO_INVAL_DATA) a listing read again from its start is
	 * reused only while the directory's mtime, as of attributes at most
	 * actimeo old (GETATTR when older), is the one it was read at. */
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	sfs_kernel_before(h);
	if (fuse_reply_open(req, fi) != 0)
		free(h);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	struct dir_handle *h = dir_handle_of(fi->fh);
	struct dir_fill d = {
	    .req = req, .fs = fs, .plus = plus, .size = size, .now_ms = sfs_now_ms(), .dir = i};

	op_count(fs, plus ? SFS_OP_READDIRPLUS : SFS_OP_READDIR);
	if (!h) {
		reply_err(req, -ENOMEM);
		return;
	}
	sfs_kernel_after(h);
	d.buf = malloc(size);
	if (!d.buf) {
		sfs_kernel_before(h);
		reply_err(req, -ENOMEM);
		return;
	}
	if (sfs_inode_kind(i) == SFS_INODE_CTL_DIR) {
		const char *name;
		struct sfs_attr a;
		for (off_t k = off; sfs_ops_ctl_dirent(fs, k, &name, &a); k++)
			if (dir_add(&d, name, (uint64_t)k + 1, &a, NULL))
				break;
	} else if (fs->ns && readdir_from_ns(fs, i, h, off, &d)) {
		/* served from the namespace */
	} else {
		if (fs->ns) {
			/* Record what NFS lists; a listing read whole from offset 0
			 * without a gap becomes complete in the namespace. */
			if (off == 0) {
				h->n_seen = 0;
				h->gap = false;
			} else if ((uint64_t)off != h->next_off)
				h->gap = true;
			d.record = h;
			d.ns_dir = ns_key(fs, i);
		}
		struct sfs_origin_req r = {.op = SFS_ORIGIN_READDIRPLUS,
					   .fh = sfs_inode_fh(i),
					   .cookie = (uint64_t)off,
					   .dir_max_bytes =
					       size * 2 < 8192 ? 8192 : (uint32_t)size * 2,
					   .dirent = dirent_cb};
		r.arg = &d;
		if (off)
			memcpy(r.dir_verf, h->dir_verf, sizeof(r.dir_verf));
		int rc = sfs_origin_call(fs->origin, &r);
		if (rc < 0) {
			free(d.buf);
			sfs_kernel_before(h);
			reply_err(req, rc);
			return;
		}
		memcpy(h->dir_verf, r.dir_verf, sizeof(h->dir_verf));
		if (d.record) {
			h->next_off = d.added ? d.last_cookie : (uint64_t)off;
			if (r.eof && !h->gap)
				sfs_ns_dir_complete(fs->ns, d.ns_dir, h->n_seen);
		}
	}
	sfs_kernel_before(h);
	fuse_reply_buf(req, d.buf, d.used);
	free(d.buf);
}

void sfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

void sfs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

void sfs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);

	op_count(fs, SFS_OP_RELEASEDIR);
	sfs_hints_release(fs->hints, fi->fh); /* hint lists sent on the directory */
	void *h = sfs_handle_get(fi->fh);
	if (!h)
		h = sfs_handle_drop(fi->fh);
	sfs_kernel_after(h);
	free(h);
	fuse_reply_err(req, 0);
}
