// SPDX-License-Identifier: Apache-2.0
/*
 * deny — every operation that would modify the export answers EROFS, and
 * is counted (write_denied). Opens for writing are refused by file.c.
 *
 * Owns: nothing but the refusals. Threading: FUSE workers, no lock.
 */
#include "ops.h"

#include <errno.h>

static void deny(fuse_req_t req)
{
	op_count(FS(req), SFS_OP_WRITE_DENIED);
	fuse_reply_err(req, EROFS);
}

void sfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		    struct fuse_file_info *fi)
{
	deny(req);
}
void sfs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	deny(req);
}
void sfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) { deny(req); }
void sfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) { deny(req); }
void sfs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	deny(req);
}
void sfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		   const char *newname, unsigned int flags)
{
	deny(req);
}
void sfs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	deny(req);
}
void sfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		  struct fuse_file_info *fi)
{
	deny(req);
}
void sfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		   struct fuse_file_info *fi)
{
	deny(req);
}
void sfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		     size_t size, int flags)
{
	deny(req);
}
void sfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) { deny(req); }
void sfs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
		      struct fuse_file_info *fi)
{
	deny(req);
}
