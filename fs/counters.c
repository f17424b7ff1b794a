// SPDX-License-Identifier: Apache-2.0
/* counters — the labels of what the daemon counts (counters.h). */
#include "counters.h"

#include <errno.h>

const char *const sfs_fuse_op_names[SFS_OP_COUNT] = {
    [SFS_OP_LOOKUP] = "lookup",
    [SFS_OP_FORGET] = "forget",
    [SFS_OP_GETATTR] = "getattr",
    [SFS_OP_READLINK] = "readlink",
    [SFS_OP_OPEN] = "open",
    [SFS_OP_READ] = "read",
    [SFS_OP_RELEASE] = "release",
    [SFS_OP_OPENDIR] = "opendir",
    [SFS_OP_READDIR] = "readdir",
    [SFS_OP_READDIRPLUS] = "readdirplus",
    [SFS_OP_RELEASEDIR] = "releasedir",
    [SFS_OP_STATFS] = "statfs",
    [SFS_OP_GETXATTR] = "getxattr",
    [SFS_OP_IOCTL] = "ioctl",
    [SFS_OP_WRITE_DENIED] = "write_denied",
};

/* Stage refusals: the stats label of each reason and the errnos it stands
 * for; an errno no row lists counts as "io". */
static const struct stage_reason {
	const char *name;
	int errnos[2];
} stage_reasons[] = {
    [SFS_STAGE_E_INVALID] = {"invalid", {EINVAL, ENOSPC}},
    [SFS_STAGE_E_RANGE] = {"out_of_range", {ERANGE}},
    [SFS_STAGE_E_NOREGION] = {"no_region", {ENOENT, EOWNERDEAD}},
    [SFS_STAGE_E_PERM] = {"permission", {EPERM, EACCES}},
    [SFS_STAGE_E_UNSUPPORTED] = {"unsupported", {EOPNOTSUPP}},
    [SFS_STAGE_E_IO] = {"io", {0}},
};
_Static_assert(sizeof(stage_reasons) / sizeof(stage_reasons[0]) == SFS_STAGE_E_COUNT,
	       "one row per stage refusal reason");

/* The stats label target="..." of each staging target. */
static const char *const stage_target_names[] = {
    [SFS_STAGE_SHM] = "shm",
    [SFS_STAGE_CUDA] = "cuda",
};
_Static_assert(sizeof(stage_target_names) / sizeof(stage_target_names[0]) == SFS_STAGE_KIND_COUNT,
	       "one label per staging target");

enum sfs_stage_reason sfs_stage_reason_of(int err)
{
	for (int k = 0; k < SFS_STAGE_E_COUNT; k++)
		for (int e = 0; e < 2; e++)
			if (stage_reasons[k].errnos[e] && stage_reasons[k].errnos[e] == -err)
				return (enum sfs_stage_reason)k;
	return SFS_STAGE_E_IO;
}

const char *sfs_stage_reason_name(enum sfs_stage_reason r) { return stage_reasons[r].name; }

const char *sfs_stage_target_name(enum sfs_stage_kind t) { return stage_target_names[t]; }
