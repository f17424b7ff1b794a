/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops — private to fs/ops/: what the files of the FUSE operations share,
 * the helpers of ops.c among it. Other folders never include it; main.c
 * reaches the operations through sfs_fuse_ops (fs.h) alone.
 *
 * The wing, one file per concern, arrows only downwards:
 *   init.c       INIT and the operations table (sfs_fuse_ops)
 *   ops.c        attributes, entries, datasets: what the files below share
 *   lookup.c     LOOKUP, FORGET: entries of the export's tree
 *   attr.c       GETATTR, READLINK, STATFS, the cache's xattrs
 *   file.c       OPEN, READ, RELEASE of NFS files
 *   dir.c        OPENDIR, READDIR(PLUS), RELEASEDIR
 *   ioctl.c      the ioctl ABI (include/shardfs/shardfs_ioctl.h)
 *   ctl.c        the virtual .shardfs/ tree and its stats file (ctl.h)
 *   deny.c       EROFS for every modifying operation
 *   open_file.c  one open NFS file, below file.c and ioctl.c (open_file.h)
 * Threading: every operation runs on a FUSE worker; each file says which
 * of its replies come from another thread.
 */
#ifndef SFS_OPS_H
#define SFS_OPS_H

#include "../fs.h"
#include "open_file.h"
#include "../kernel/kernel_order.h"

#include <sys/stat.h>

static inline struct sfs_fs *FS(fuse_req_t req) { return fuse_req_userdata(req); }

/* The inode of a request's node id: handed to the kernel by an entry reply
 * (kernel_order.h: that reply's work happens before this request's). */
static inline struct sfs_inode *I(struct sfs_fs *fs, fuse_ino_t ino)
{
	struct sfs_inode *i = sfs_fs_inode(fs, ino);

	sfs_kernel_after(i);
	return i;
}

static inline fuse_ino_t INO(struct sfs_fs *fs, struct sfs_inode *i) { return sfs_fs_ino(fs, i); }

static inline void op_count(struct sfs_fs *fs, enum sfs_fuse_op op)
{
	__atomic_fetch_add(&fs->op_count[op], 1, __ATOMIC_RELAXED);
}

static inline void reply_err(fuse_req_t req, int neg_errno) { fuse_reply_err(req, -neg_errno); }

/* The key of a directory in the namespace (fs->ns, fs->listings): the root
 * has its own. */
static inline uint64_t ns_key(struct sfs_fs *fs, struct sfs_inode *i)
{
	return i == sfs_inode_root(fs->inodes) ? SFS_NS_ROOT : i->fileid;
}

/* The first dataset an inode is reached through is its dataset (a hard
 * link in another dataset does not move it). */
static inline void inode_set_dataset(struct sfs_inode *i, uint32_t ds)
{
	uint32_t none = 0;
	if (ds)
		__atomic_compare_exchange_n(&i->dataset, &none, ds, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
}

/* The open file of fh on inode i (sfs_open_file_of, for this mount). */
static inline struct sfs_open_file *sfs_fs_open_file(struct sfs_fs *fs, struct sfs_inode *i,
						     uint64_t fh)
{
	return sfs_open_file_of(fs->prefetch, i, fh, sfs_fs_first_region_id(fs));
}

/* --- ops.c ---------------------------------------------------------------- */

void sfs_ops_attr_to_stat(const struct sfs_attr *a, struct stat *st);
/*
 * Fresh attributes of an NFS inode: cached if younger than actimeo, and
 * forever under immutable (fs->ns), where the root's come from the
 * namespace of an earlier mount when it holds them; force: ask NFS. Takes
 * the inode lock briefly; calls the origin with no lock held. Returns 0 or
 * -errno.
 */
int sfs_ops_inode_getattr(struct sfs_fs *fs, struct sfs_inode *i, struct sfs_attr *out, bool force);

/* The entry of NFS inode i with attributes a, for the attribute timeout. */
void sfs_ops_fill_entry(struct sfs_fs *fs, struct fuse_entry_param *e, struct sfs_inode *i,
			const struct sfs_attr *a);
/*
 * The dataset (cache/store/store.h) of `name` in directory p: for an entry of the
 * root, the export's top-level directory "EXPORT/NAME" if it is a
 * directory, else the export itself; deeper, p's. 0 without a cache. Any
 * thread (the store's table is lock-free for a known name).
 */
uint32_t sfs_ops_child_dataset(struct sfs_fs *fs, struct sfs_inode *p, const char *name,
			       const struct sfs_attr *a);

/* --- the operations, by file (init.c puts them in sfs_fuse_ops) ----------- */

void sfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void sfs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void sfs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);

void sfs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sfs_op_readlink(fuse_req_t req, fuse_ino_t ino);
void sfs_op_statfs(fuse_req_t req, fuse_ino_t ino);
void sfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void sfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);

void sfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void sfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

void sfs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi);
void sfs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi);
void sfs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

void sfs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		  struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		  size_t out_bufsz);

void sfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		    struct fuse_file_info *fi);
void sfs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void sfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void sfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void sfs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void sfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		   const char *newname, unsigned int flags);
void sfs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void sfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		  struct fuse_file_info *fi);
void sfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		   struct fuse_file_info *fi);
void sfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		     size_t size, int flags);
void sfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);
void sfs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
		      struct fuse_file_info *fi);

#endif
