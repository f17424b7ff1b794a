// SPDX-License-Identifier: Apache-2.0
/*
 * attr — GETATTR, READLINK, STATFS and the cache's xattrs
 * (SHARDFS_XATTR_CACHED, SHARDFS_XATTR_KEY) of the export's files.
 *
 * Owns: an inode's attributes as the kernel sees them (their freshness:
 * actimeo, or forever under immutable), the immutable mount's first
 * FSSTAT answer. Does not own: the attributes' storage (fs/inode), the
 * cache's bytes (cache/store).
 * Threading: FUSE workers; GETATTR, READLINK and STATFS wait for NFS with
 * no lock held.
 */
#include "ops.h"
#include "ctl.h"
#include "../../cache/common/log.h"
#include <shardfs/shardfs_ioctl.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

void sfs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	struct sfs_attr a;
	struct stat st;

	op_count(fs, SFS_OP_GETATTR);
	if (sfs_inode_kind(i) != SFS_INODE_NFS) {
		sfs_ops_ctl_getattr(req, fs, i);
		return;
	}
	int rc = sfs_ops_inode_getattr(fs, i, &a, false);
	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	sfs_ops_attr_to_stat(&a, &st);
	fuse_reply_attr(req, &st, fs->attr_timeout_s);
}

void sfs_op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);

	op_count(fs, SFS_OP_READLINK);
	if (sfs_inode_kind(i) != SFS_INODE_NFS) {
		reply_err(req, -EINVAL);
		return;
	}
	struct sfs_origin_req r = {.op = SFS_ORIGIN_READLINK, .fh = sfs_inode_fh(i)};
	int rc = sfs_origin_call(fs->origin, &r);
	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	fuse_reply_readlink(req, r.link);
	free(r.link);
}

void sfs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct sfs_fs *fs = FS(req);
	struct statvfs sv = {0};

	op_count(fs, SFS_OP_STATFS);
	struct sfs_origin_req r = {.op = SFS_ORIGIN_FSSTAT,
				   .fh = sfs_inode_fh(sfs_inode_root(fs->inodes))};
	/* Immutable: the first answer serves the whole mount, and a mount with
	 * no answer yet reports no sizes rather than wait for a node. */
	bool cached = false;
	if (fs->ns) {
		pthread_mutex_lock(&fs->statfs_lock);
		cached = fs->have_fsstat;
		r.fsstat = fs->fsstat;
		pthread_mutex_unlock(&fs->statfs_lock);
	}
	if (!cached) {
		int rc = sfs_origin_call(fs->origin, &r);
		if (rc < 0 && !fs->ns) {
			reply_err(req, rc);
			return;
		}
		if (rc == 0 && fs->ns) {
			pthread_mutex_lock(&fs->statfs_lock);
			fs->fsstat = r.fsstat;
			fs->have_fsstat = true;
			pthread_mutex_unlock(&fs->statfs_lock);
		}
	}
	sv.f_bsize = SFS_CHUNK_BYTES;
	sv.f_frsize = 4096;
	sv.f_blocks = r.fsstat.total_bytes / 4096;
	sv.f_bfree = r.fsstat.free_bytes / 4096;
	sv.f_bavail = r.fsstat.avail_bytes / 4096;
	sv.f_files = r.fsstat.total_files;
	sv.f_ffree = r.fsstat.free_files;
	sv.f_favail = r.fsstat.avail_files;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

/* --- the cache's xattrs --------------------------------------------------- */

/* Bytes of the inode's current version in the cache. */
static uint64_t inode_cached_bytes(struct sfs_fs *fs, struct sfs_inode *i)
{
	struct sfs_attr a;

	if (!fs->store || sfs_ops_inode_getattr(fs, i, &a, false) < 0)
		return 0;
	struct sfs_file_version v = sfs_open_file_version(&a, i);
	return sfs_store_cached_bytes(fs->store, &v);
}

/* The cache key of the inode's current version as 32 hex digits in out
 * (33 bytes). Returns 32, or -ENODATA (no cache, not a regular file) or
 * the getattr's -errno. */
static int inode_key_hex(struct sfs_fs *fs, struct sfs_inode *i, char *out)
{
	struct sfs_attr a;
	uint8_t key[16];
	int rc;

	if (!fs->store)
		return -ENODATA;
	if ((rc = sfs_ops_inode_getattr(fs, i, &a, false)) < 0)
		return rc;
	if (a.type != S_IFREG)
		return -ENODATA;
	struct sfs_file_version v = sfs_open_file_version(&a, i);
	sfs_store_key(&v, key);
	for (int k = 0; k < 16; k++)
		snprintf(out + 2 * k, 3, "%02x", key[k]);
	return 32;
}

void sfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	char val[40];

	op_count(fs, SFS_OP_GETXATTR);
	bool key = !strcmp(name, SHARDFS_XATTR_KEY);
	if ((strcmp(name, SHARDFS_XATTR_CACHED) != 0 && !key) ||
	    sfs_inode_kind(i) != SFS_INODE_NFS) {
		reply_err(req, -ENODATA);
		return;
	}
	int n =
	    key ? inode_key_hex(fs, i, val)
		: snprintf(val, sizeof(val), "%llu", (unsigned long long)inode_cached_bytes(fs, i));
	if (n < 0) {
		reply_err(req, n);
		return;
	}
	if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else if (size < (size_t)n)
		reply_err(req, -ERANGE);
	else
		fuse_reply_buf(req, val, (size_t)n);
}

void sfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	static const char names[] = SHARDFS_XATTR_CACHED; /* one name, NUL included */

	op_count(fs, SFS_OP_GETXATTR);
	size_t n = sfs_inode_kind(i) == SFS_INODE_NFS ? sizeof(names) : 0;
	if (size == 0)
		fuse_reply_xattr(req, n);
	else if (size < n)
		reply_err(req, -ERANGE);
	else
		fuse_reply_buf(req, names, n);
}
