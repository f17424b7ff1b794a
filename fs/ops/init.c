// SPDX-License-Identifier: Apache-2.0
/*
 * init — the FUSE low-level operations of shardfs as libfuse takes them
 * (sfs_fuse_ops), and INIT: what the daemon asks of the kernel.
 *
 * Owns: the operations table and the connection's parameters. Does not
 * own: the operations (one file per concern, ops.h), the INIT exchange
 * on the device (fs/kernel/fusedev.c).
 * Threading: INIT runs once, before any other request; the table is
 * read-only.
 */
#include "ops.h"
#include "../kernel/fusedev.h"
#include "../kernel/passthrough.h"

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* 1 MiB requests and a deep kernel readahead: the kernel's default,
	 * 128 KiB requests, caps a buffered FUSE reader far below the network
	 * (a round trip per 128 KiB). */
	conn->max_readahead = SFS_FUSE_MAX_READAHEAD;
	if (conn->max_write < SFS_CHUNK_BYTES)
		conn->max_write = SFS_CHUNK_BYTES;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* Replies are written from our chunk buffers (writev); libfuse's splice
	 * path gave short replies under load (cache/prefetch/prefetch_int.h). */
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	/* fusedev has read the INIT request by now (fusedev.h). */
	struct sfs_fs *fs = userdata;
	fs->page_cache.direct_mmap = sfs_fusedev_direct_io_mmap();
	/* Passthrough is probed once the kernel took this reply (main.c,
	 * sfs_fusedev_after_init). */
}

const struct fuse_lowlevel_ops sfs_fuse_ops = {
    .init = op_init,
    .lookup = sfs_op_lookup,
    .forget = sfs_op_forget,
    .forget_multi = sfs_op_forget_multi,
    .getattr = sfs_op_getattr,
    .readlink = sfs_op_readlink,
    .open = sfs_op_open,
    .read = sfs_op_read,
    .release = sfs_op_release,
    .opendir = sfs_op_opendir,
    .readdir = sfs_op_readdir,
    .readdirplus = sfs_op_readdirplus,
    .releasedir = sfs_op_releasedir,
    .statfs = sfs_op_statfs,
    .getxattr = sfs_op_getxattr,
    .listxattr = sfs_op_listxattr,
    .ioctl = sfs_op_ioctl,
    .setattr = sfs_op_setattr,
    .mknod = sfs_op_mknod,
    .mkdir = sfs_op_mkdir,
    .unlink = sfs_op_unlink,
    .rmdir = sfs_op_unlink,
    .symlink = sfs_op_symlink,
    .rename = sfs_op_rename,
    .link = sfs_op_link,
    .write = sfs_op_write,
    .create = sfs_op_create,
    .setxattr = sfs_op_setxattr,
    .removexattr = sfs_op_removexattr,
    .fallocate = sfs_op_fallocate,
};
