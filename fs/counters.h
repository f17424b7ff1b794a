/* SPDX-License-Identifier: Apache-2.0 */
/*
 * counters — the events the daemon counts by kind, and their labels in
 * the stats file: the FUSE operations (fs/ops counts them) and the
 * staging targets and refusal reasons (fs/ops/ioctl.c counts them), so
 * that the stats renderer (fs/observe) names them without calling into
 * the operations.
 *
 * Owns: the enums, the label tables, which errno counts under which
 * refusal reason. Does not own: the counters (struct sfs_fs, fs.h).
 * Threading: read-only tables; any thread.
 */
#ifndef SFS_COUNTERS_H
#define SFS_COUNTERS_H

#include "../cache/staging/staging.h"

/* FUSE operations we count, by name in the stats file. */
enum sfs_fuse_op {
	SFS_OP_LOOKUP,
	SFS_OP_FORGET,
	SFS_OP_GETATTR,
	SFS_OP_READLINK,
	SFS_OP_OPEN,
	SFS_OP_READ,
	SFS_OP_RELEASE,
	SFS_OP_OPENDIR,
	SFS_OP_READDIR,
	SFS_OP_READDIRPLUS,
	SFS_OP_RELEASEDIR,
	SFS_OP_STATFS,
	SFS_OP_GETXATTR,
	SFS_OP_IOCTL,
	SFS_OP_WRITE_DENIED, /* any modifying operation, answered EROFS */
	SFS_OP_COUNT
};
/* The stats label of each operation ("lookup"). */
extern const char *const sfs_fuse_op_names[SFS_OP_COUNT];

/* Staging counters: by target (enum sfs_stage_kind, cache/staging/staging.h)
 * and by refusal reason. The targets' ABI bits are a table in
 * fs/ops/ioctl.c. */
enum sfs_stage_reason {
	SFS_STAGE_E_INVALID,	 /* EINVAL: bad struct, sizes, reserved words */
	SFS_STAGE_E_RANGE,	 /* ERANGE */
	SFS_STAGE_E_NOREGION,	 /* ENOENT */
	SFS_STAGE_E_PERM,	 /* EPERM */
	SFS_STAGE_E_UNSUPPORTED, /* EOPNOTSUPP */
	SFS_STAGE_E_IO,		 /* EIO, ESTALE and others while placing bytes */
	SFS_STAGE_E_COUNT
};
/* The reason a refusal err (-errno) counts under: an errno no reason lists
 * counts as SFS_STAGE_E_IO. */
enum sfs_stage_reason sfs_stage_reason_of(int err);
/* The stats label of a target ("shm") and of a reason ("out_of_range"). */
const char *sfs_stage_target_name(enum sfs_stage_kind t);
const char *sfs_stage_reason_name(enum sfs_stage_reason r);

#endif
