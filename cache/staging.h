/* SPDX-License-Identifier: Apache-2.0 */
/*
 * staging — placing verified file bytes into a trainer's shared-memory or
 * GPU buffer (seam; filled in by the staging-ioctl issue).
 *
 * Will own: registered target regions (POSIX shm by name, CUDA allocations
 * by IPC handle), their lifetime per open file and uid, and the copy from
 * cache chunks into them. staging_cuda.c will be the only file that
 * includes CUDA; builds without CUDA get a stub that answers -ENOTSUP.
 *
 * Today sfs_staging_open() answers -ENOTSUP.
 */
#ifndef SFS_STAGING_H
#define SFS_STAGING_H

typedef struct sfs_staging sfs_staging;

/* Returns 0 with *out set, or -errno (-ENOTSUP until the staging issue lands). */
int sfs_staging_open(sfs_staging **out);
void sfs_staging_close(sfs_staging *st);

#endif
