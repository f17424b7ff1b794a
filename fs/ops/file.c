// SPDX-License-Identifier: Apache-2.0
/*
 * file — OPEN, READ and RELEASE of an NFS file of the export.
 *
 * Owns: an open's decisions (revalidation and the kernel's page cache,
 * direct_io, passthrough, what prefetch starts) and its reply; a read's
 * reply and its accounting (per job, the mount's counters);
 * a release's. Does not own: the open file's state (open_file.c), the
 * bytes (cache/prefetch), the stats file's opens (ctl.c).
 * Threading: FUSE workers. A READ whose bytes were not at hand (read_call,
 * sfs_pf_read_answer) is answered by the thread that lands them: the origin
 * I/O thread for bytes fetched, a loader thread or another worker for a
 * chunk loaded from the cache. Replies are sent with no lock held.
 */
#include "ops.h"
#include "ctl.h"
#include "../hints/hints.h"
#include "../kernel/fusedev.h"
#include "../kernel/passthrough.h"
#include "../kernel/handles.h"
#include "../kernel/kernel_order.h"
#include "../kernel/pagecache.h"

#include <errno.h>
#include <fcntl.h>

static void open_reply(struct sfs_fs *fs, fuse_req_t req, struct fuse_file_info *fi,
		       struct sfs_inode *i, struct sfs_open_file *of,
		       const struct sfs_file_version *v, const struct sfs_open_state *st,
		       enum sfs_pt_mode pt, int backing_id);

/* passthrough.h's rule for an open that found version `unchanged` or not
 * (sfs_open_file_seen_fn): under the inode lock. */
static void pt_opened_version(struct sfs_inode *i, bool unchanged)
{
	sfs_pt_opened_version(i, unchanged);
}

void sfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	struct sfs_attr a;
	sfs_pf_file *pf;
	struct sfs_open_state st;
	int rc;

	op_count(fs, SFS_OP_OPEN);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		reply_err(req, -EROFS);
		return;
	}
	if (sfs_inode_kind(i) == SFS_INODE_STATS) {
		sfs_ops_ctl_open(req, fs, fi);
		return;
	}
	if (sfs_inode_kind(i) != SFS_INODE_NFS) {
		reply_err(req, -EISDIR);
		return;
	}
	/* Revalidate after actimeo: a changed file gets a new fetch state, and
	 * the kernel keeps its page cache only for an unchanged file. */
	if ((rc = sfs_ops_inode_getattr(fs, i, &a, false)) < 0) {
		reply_err(req, rc);
		return;
	}
	struct sfs_file_version v = sfs_open_file_version(&a, i);
	if ((rc = sfs_open_file_begin(fs->prefetch, i, &v, pt_opened_version, &pf, &st)) < 0) {
		reply_err(req, rc);
		return;
	}
	if (st.changed) {
		/* The file changed on the server: pages the kernel cached for the
		 * old version must go (AUTO_INVAL_DATA also does this on the next
		 * getattr; this makes it immediate). */
		__atomic_fetch_add(&fs->invalidations, 1, __ATOMIC_RELAXED);
		fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
	}
	/* O_NONBLOCK, meaningless for a regular file, marks a tool's open
	 * (shardfs-warm): no whole-file fetch for a reader, the tool's ioctl
	 * says what it wants. A passthrough open fetches nothing either: the
	 * kernel reads the cache itself. */
	bool tool = (fi->flags & O_NONBLOCK) != 0;
	int backing_id = 0;
	sfs_pf_file_opened_no_prefetch(pf);
	enum sfs_pt_mode pt =
	    fs->pt->wanted ? sfs_pt_open(fs->pt, i, pf, &v, !tool, &backing_id) : SFS_PT_NO;
	if (pt == SFS_PT_STALE) { /* the kernel looks the name up again and retries */
		sfs_open_file_end(i, pf);
		reply_err(req, -ESTALE);
		return;
	}
	if (!tool && pt != SFS_PT_OPEN)
		sfs_pf_file_prefetch_whole(pf);
	if (!st.unchanged && !tool && pt != SFS_PT_OPEN) /* the kernel will read it */
		sfs_pf_file_preload(pf);
	sfs_hints_opened(fs->hints, a.fsid, a.fileid); /* where a hint list's reader is */
	struct sfs_open_file *of =
	    sfs_open_file_new(pf, fuse_req_ctx(req)->uid, sfs_fs_first_region_id(fs));
	if (!of) {
		if (pt == SFS_PT_OPEN)
			sfs_pt_release(fs->pt, i);
		sfs_open_file_end(i, pf);
		reply_err(req, -ENOMEM);
		return;
	}
	open_reply(fs, req, fi, i, of, &v, &st, pt, backing_id);
}

/* Answer an open (sfs_op_open's last step): the handle, the page cache or
 * passthrough, the accounting of a passthrough open (its reads never reach
 * the daemon: the version counts as read from the cache at open). */
static void open_reply(struct sfs_fs *fs, fuse_req_t req, struct fuse_file_info *fi,
		       struct sfs_inode *i, struct sfs_open_file *of,
		       const struct sfs_file_version *v, const struct sfs_open_state *st,
		       enum sfs_pt_mode pt, int backing_id)
{
	fi->fh = sfs_handle_make_flagged(of, pt == SFS_PT_OPEN ? SFS_HANDLE_PASSTHROUGH : 0);
	fi->keep_cache = st->unchanged && pt != SFS_PT_OPEN;
	fi->direct_io = of->direct =
	    pt == SFS_PT_NO && sfs_pc_open_direct(&fs->page_cache, v->size, st->first_epoch);
	if (fi->direct_io)
		__atomic_fetch_add(&fs->direct_opens, 1, __ATOMIC_RELAXED);
	if (pt == SFS_PT_OPEN) {
		struct sfs_job_read jr = sfs_fs_job_begin(fs, req);
		sfs_jobs_read_end(fs->jobs, &jr, (ssize_t)v->size, v->size);
		if (fs->store)
			sfs_store_dataset_read(fs->store, v->dataset, v->size, 0);
	}
	sfs_kernel_before(of);
	if (sfs_fusedev_reply_open(req, fi, pt == SFS_PT_OPEN ? backing_id : 0) != 0) {
		if (pt == SFS_PT_OPEN)
			sfs_pt_release(fs->pt, i);
		sfs_open_file_end(i, sfs_open_file_free(of));
	}
}

/* What read_done needs to answer a read: on this worker, or on the thread
 * that got its bytes (a fetch without a chunk, or the chunk it waited for:
 * see sfs_pf_read_answer), which keeps a copy. */
struct read_call {
	struct sfs_fs *fs;
	fuse_req_t req;
	struct sfs_job_read jr;
	struct sfs_open_file *of; /* for kernel_order.h only */
};
_Static_assert(sizeof(struct read_call) <= SFS_PF_ASYNC_ARG_MAX,
	       "a read_call fits where prefetch keeps it (else every read is answered inline)");

/* Account a read's outcome to its job and reply with its bytes or its
 * error (the dataset's counters are kept where the bytes are found:
 * prefetch and the store). */
static void read_reply(struct sfs_fs *fs, fuse_req_t req, const struct sfs_job_read *jr, ssize_t n,
		       const struct sfs_pf_view *v)
{
	sfs_jobs_read_end(fs->jobs, jr, n, v->cache_bytes);
	if (n < 0) {
		__atomic_fetch_add(&fs->read_errors, 1, __ATOMIC_RELAXED);
		reply_err(req, (int)n);
		return;
	}
	__atomic_fetch_add(&fs->read_bytes, (uint64_t)n, __ATOMIC_RELAXED);
	if (v->n_iov)
		fuse_reply_iov(req, v->iov, v->n_iov);
	else
		fuse_reply_buf(req, NULL, 0);
}

/* Runs on this FUSE worker when the bytes are at hand, else on the thread
 * that lands them (sfs_pf_read_answer): an
 * origin I/O thread (a fetch, or a chunk fetched from the origin), a loader
 * thread or another FUSE worker (a chunk loaded from the cache), or a thread
 * submitting READs while the origin pool closes (this read's own, among
 * others). */
static void read_done(void *arg, ssize_t n, const struct sfs_pf_view *v)
{
	struct read_call *c = arg;

	sfs_kernel_before(c->of);
	read_reply(c->fs, c->req, &c->jr, n, v);
}

void sfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);

	op_count(fs, SFS_OP_READ);
	if (sfs_inode_kind(i) == SFS_INODE_STATS) {
		sfs_ops_ctl_read(req, fi, size, off);
		return;
	}
	struct sfs_open_file *of = sfs_fs_open_file(fs, i, fi->fh);
	if (!of) {
		reply_err(req, -ENOMEM);
		return;
	}
	sfs_kernel_after(of);
	if (of->direct) { /* what its reader asks for (pagecache.h) */
		__atomic_fetch_add(&of->direct_reads, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&of->direct_read_bytes, size, __ATOMIC_RELAXED);
	}
	/* read_done replies: here, or on the thread that lands the bytes. */
	struct read_call c = {fs, req, sfs_fs_job_begin(fs, req), of};
	sfs_pf_read_answer(of->pf, (uint64_t)off, size, read_done, &c, sizeof(c));
}

void sfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);

	op_count(fs, SFS_OP_RELEASE);
	if (sfs_inode_kind(i) == SFS_INODE_STATS) {
		sfs_ops_ctl_release(fi);
	} else if (fi->fh) {
		struct sfs_open_file *of = sfs_handle_get(fi->fh);
		if (fi->fh & SFS_HANDLE_PASSTHROUGH) /* this server's or a dead one's */
			sfs_pt_release(fs->pt, i);
		if (!of && !(of = sfs_handle_drop(fi->fh))) { /* a dead server's, never used here */
			fuse_reply_err(req, 0);
			return;
		}
		sfs_kernel_after(of);
		sfs_open_file_drop_regions(of);	      /* regions belong to the open file */
		sfs_hints_release(fs->hints, fi->fh); /* and so do hint lists */
		if (of->direct)
			sfs_pc_direct_closed(&fs->page_cache, of->direct_reads,
					     of->direct_read_bytes);
		/* The kernel holds i until this reply. */
		if (sfs_open_file_end(i, sfs_open_file_free(of)))
			sfs_inode_closed(fs->inodes, i);
	}
	fuse_reply_err(req, 0);
}
