/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_int.h — private to fs/ops/: what the FUSE operations' files share.
 * Other folders never include it.
 */
#ifndef SFS_OPS_INT_H
#define SFS_OPS_INT_H

#include "../fs.h"
#include "open_file.h"

/* The open file of fh on inode i (sfs_open_file_of, for this mount). */
static inline struct sfs_open_file *sfs_fs_open_file(struct sfs_fs *fs, struct sfs_inode *i,
						     uint64_t fh)
{
	return sfs_open_file_of(fs->prefetch, i, fh, sfs_fs_first_region_id(fs));
}

#endif
