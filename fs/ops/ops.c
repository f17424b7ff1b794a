// SPDX-License-Identifier: Apache-2.0
/*
 * ops — what the FUSE operations' files share (declared in ops.h): an
 * NFS inode's attributes as the kernel takes them, kept fresh, as an
 * entry, and the dataset a name belongs to.
 *
 * Owns: nothing but these steps. Does not own: the attributes' storage
 * (fs/inode), the NFS calls (cache/nfs), the datasets (cache/store).
 * Threading: any FUSE worker or origin I/O thread; inode_getattr takes the
 * inode lock briefly and calls the origin with no lock held.
 */
#include "ops.h"
#include "../../cache/common/log.h"

#include <string.h>
#include <sys/sysmacros.h>

void sfs_ops_attr_to_stat(const struct sfs_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->fileid;
	st->st_mode = a->type | (a->mode & 07777);
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_blksize = SFS_CHUNK_BYTES;
	st->st_blocks = (blkcnt_t)((a->used + 511) / 512);
	st->st_rdev = makedev(a->rdev_major, a->rdev_minor);
	st->st_atim = a->atime;
	st->st_mtim = a->mtime;
	st->st_ctim = a->ctime;
}

int sfs_ops_inode_getattr(struct sfs_fs *fs, struct sfs_inode *i, struct sfs_attr *out, bool force)
{
	uint64_t now = sfs_now_ms();
	bool is_root = i == sfs_inode_root(fs->inodes);

	sfs_inode_lock(i);
	bool fresh =
	    i->attr_time_ms && (fs->ns || now - i->attr_time_ms < fs->opts->actimeo_s * 1000ull);
	sfs_inode_attr_get(i, out);
	sfs_inode_unlock(i);
	if (fresh && !force)
		return 0;
	if (fs->ns && is_root && !force && sfs_ns_lookup(fs->ns, SFS_NS_ROOT, "", NULL, out) == 0) {
		sfs_inode_set_attr(i, out, now);
		return 0;
	}
	struct sfs_fh fh = sfs_inode_fh(i);
	struct sfs_origin_req r = {.op = SFS_ORIGIN_GETATTR, .fh = fh};
	int rc = sfs_origin_call(fs->origin, &r);
	if (rc < 0)
		return rc;
	sfs_inode_set_attr(i, &r.attr, now);
	if (fs->ns && is_root)
		sfs_ns_add(fs->ns, SFS_NS_ROOT, "", &fh, &r.attr);
	*out = r.attr;
	return 0;
}

void sfs_ops_fill_entry(struct sfs_fs *fs, struct fuse_entry_param *e, struct sfs_inode *i,
			const struct sfs_attr *a)
{
	memset(e, 0, sizeof(*e));
	e->ino = INO(fs, i);
	sfs_ops_attr_to_stat(a, &e->attr);
	e->attr_timeout = fs->attr_timeout_s;
	e->entry_timeout = fs->attr_timeout_s;
}

uint32_t sfs_ops_child_dataset(struct sfs_fs *fs, struct sfs_inode *p, const char *name,
			       const struct sfs_attr *a)
{
	char buf[2048];

	if (!fs->store)
		return 0;
	if (p != sfs_inode_root(fs->inodes))
		return __atomic_load_n(&p->dataset, __ATOMIC_RELAXED);
	if (a->type != S_IFDIR)
		return fs->root_dataset;
	if (sfs_export_join(fs->opts, name, strlen(name), buf, sizeof(buf)) >= (int)sizeof(buf))
		return 0;
	return sfs_store_dataset(fs->store, buf);
}
