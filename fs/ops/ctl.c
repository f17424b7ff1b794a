// SPDX-License-Identifier: Apache-2.0
/* ctl — the virtual .shardfs/ tree (ctl.h). */
#include "ctl.h"
#include "../kernel/handles.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Attributes of the virtual .shardfs directory and its stats file. */
static void virtual_stat(struct sfs_fs *fs, struct sfs_inode *i, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = i->fileid;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_mode = sfs_inode_kind(i) == SFS_INODE_CTL_DIR ? S_IFDIR | 0555 : S_IFREG | 0444;
	st->st_nlink = sfs_inode_kind(i) == SFS_INODE_CTL_DIR ? 2 : 1;
	st->st_blksize = 4096;
	clock_gettime(CLOCK_REALTIME, &st->st_mtim);
	st->st_atim = st->st_ctim = st->st_mtim;
	if (sfs_inode_kind(i) == SFS_INODE_STATS) {
		/* An upper bound of the text's size: twice its size now, in 4 KiB
		 * pages. Tools that check st_size (test -s) see a non-empty file;
		 * copiers that stop at st_size (cp with copy_file_range) never cut
		 * the snapshot, which is served with direct_io and ends at EOF. */
		char *text;
		ssize_t n = fs->stats_render(fs, &text);
		if (n > 0) {
			st->st_size = (2 * n + 4095) & ~(off_t)4095;
			free(text);
		}
	}
}

/* What fi->fh points to for the stats file: a snapshot taken at open. */
struct stats_snapshot {
	char *text;
	size_t len;
	/* Set (release) once text and len are, before the OPEN reply; read
	 * (acquire) by the READs and the RELEASE of its fh, and released again
	 * by each READ once done with the snapshot. The kernel orders OPEN,
	 * READs and RELEASE, but ThreadSanitizer cannot see through /dev/fuse:
	 * this makes the handoffs ones it sees. */
	int published;
};

/* The snapshot of a stats file's fh (this process's), published. */
static struct stats_snapshot *stats_snapshot_of(uint64_t fh)
{
	struct stats_snapshot *s = sfs_handle_get(fh);

	if (s)
		(void)__atomic_load_n(&s->published, __ATOMIC_ACQUIRE);
	return s;
}

bool sfs_ops_ctl_lookup(fuse_req_t req, struct sfs_fs *fs, struct sfs_inode *p, const char *name)
{
	struct sfs_inode *child = NULL;
	struct fuse_entry_param e;

	if (p == sfs_inode_root(fs->inodes) && !strcmp(name, ".shardfs"))
		child = fs->ctl_dir;
	else if (sfs_inode_kind(p) == SFS_INODE_CTL_DIR && !strcmp(name, "stats"))
		child = fs->stats_file;
	if (!child)
		return false;
	memset(&e, 0, sizeof(e));
	e.ino = sfs_fs_ino(fs, child);
	virtual_stat(fs, child, &e.attr);
	e.attr_timeout = fs->attr_timeout_s;
	e.entry_timeout = fs->attr_timeout_s;
	fuse_reply_entry(req, &e);
	return true;
}

void sfs_ops_ctl_getattr(fuse_req_t req, struct sfs_fs *fs, struct sfs_inode *i)
{
	struct stat st;

	virtual_stat(fs, i, &st);
	fuse_reply_attr(req, &st, 0);
}

bool sfs_ops_ctl_dirent(struct sfs_fs *fs, off_t k, const char **name, struct sfs_attr *a)
{
	static const char *const names[] = {".", "..", "stats"};

	if (k < 0 || k >= 3)
		return false;
	*name = names[k];
	*a = (struct sfs_attr){.type = k == 2 ? S_IFREG : S_IFDIR,
			       .fileid = k == 2 ? fs->stats_file->fileid : fs->ctl_dir->fileid};
	return true;
}

void sfs_ops_ctl_open(fuse_req_t req, struct sfs_fs *fs, struct fuse_file_info *fi)
{
	struct stats_snapshot *s = calloc(1, sizeof(*s));
	ssize_t n = s ? fs->stats_render(fs, &s->text) : -ENOMEM;

	if (n < 0) {
		free(s);
		fuse_reply_err(req, (int)-n);
		return;
	}
	s->len = (size_t)n;
	__atomic_store_n(&s->published, 1, __ATOMIC_RELEASE);
	fi->fh = sfs_handle_make(s);
	fi->direct_io = 1; /* size is not known in advance */
	fi->nonseekable = 0;
	fuse_reply_open(req, fi);
}

void sfs_ops_ctl_read(fuse_req_t req, struct fuse_file_info *fi, size_t size, off_t off)
{
	struct stats_snapshot *s = stats_snapshot_of(fi->fh);

	if (!s) { /* opened from a server that died: its snapshot is gone */
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size_t from = (size_t)off < s->len ? (size_t)off : s->len;
	size_t n = s->len - from < size ? s->len - from : size;
	/* Replied from a copy this thread frees: the snapshot is freed by
	 * the release, on another thread, once the kernel has this reply,
	 * and ThreadSanitizer marks writev's bytes read only after the
	 * call returns, so it took that for a use after free. */
	char *copy = n ? malloc(n) : NULL;
	if (n && !copy) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (n)
		memcpy(copy, s->text + from, n);
	/* Done with s: the RELEASE that frees it acquires this. */
	__atomic_fetch_add(&s->published, 0, __ATOMIC_RELEASE);
	fuse_reply_buf(req, copy, n);
	free(copy);
}

void sfs_ops_ctl_release(struct fuse_file_info *fi)
{
	struct stats_snapshot *s = stats_snapshot_of(fi->fh);

	if (s)
		free(s->text);
	free(s);
}
