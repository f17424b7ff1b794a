/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctl — the virtual .shardfs/ tree: MOUNTPOINT/.shardfs/ and its stats
 * file, whose text (fs->stats_render, which main points at the stats
 * renderer) is a snapshot taken at open and served direct_io. The
 * operations (lookup.c, attr.c, file.c, dir.c) hand it the tree's inodes.
 *
 * Owns: the tree's entries and attributes, the snapshots (what fi->fh
 * points to for the stats file). Does not own: the text, the two inodes
 * (made by main: fs->ctl_dir, fs->stats_file), counting the operations.
 * Threading: FUSE workers; a snapshot is written once before the OPEN reply
 * and read by its READs, freed by its RELEASE (the kernel orders them).
 * Each function that takes a request replies to it.
 */
#ifndef SFS_CTL_H
#define SFS_CTL_H

#include "../fs.h"

#include <stdbool.h>
#include <sys/types.h>

/* LOOKUP of name in p: replies the entry and returns true when name is a
 * name of the tree (.shardfs in the root, stats in .shardfs); false, with
 * no reply, otherwise. */
bool sfs_ops_ctl_lookup(fuse_req_t req, struct sfs_fs *fs, struct sfs_inode *p, const char *name);

/* GETATTR of a virtual inode i. */
void sfs_ops_ctl_getattr(fuse_req_t req, struct sfs_fs *fs, struct sfs_inode *i);

/* The k-th entry of the .shardfs directory (".", "..", "stats" at offsets
 * 1, 2, 3, for k = 0, 1, 2): its name and attributes. Returns false past
 * the last. */
bool sfs_ops_ctl_dirent(struct sfs_fs *fs, off_t k, const char **name, struct sfs_attr *a);

/* OPEN, READ and RELEASE of the stats file (no reply from the release). */
void sfs_ops_ctl_open(fuse_req_t req, struct sfs_fs *fs, struct fuse_file_info *fi);
void sfs_ops_ctl_read(fuse_req_t req, struct fuse_file_info *fi, size_t size, off_t off);
void sfs_ops_ctl_release(struct fuse_file_info *fi);

#endif
