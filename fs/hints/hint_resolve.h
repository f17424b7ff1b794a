/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hint_resolve — the path of a hint item (relative to the mount's root)
 * resolved as its sender would open it: each component looked up the way a
 * reader's lookup is answered (the immutable namespace, a current
 * directory listing, else NFS LOOKUP, recorded in the namespace), every
 * directory on the way searchable and the file readable by the sender (the
 * kernel's generic_permission under default_permissions, root's override
 * included). A lookup that misses a directory's listing counts towards
 * listing it (cache/namespace/listing.h), so that the reader's own lookups
 * there need no NFS.
 *
 * Owns: the directories resolved for one list (struct sfs_hint_dirs: by path,
 * missing and closed ones too, each kept for the attribute timeout, at most
 * 4096, then the table starts over). Does not own: the lists, fetching,
 * the handles it resolves with (the hints', struct sfs_hints_handles).
 *
 * Threading: any thread; a table has its own mutex, a leaf. Lookups that go
 * to NFS wait for it, with no lock held.
 */
#ifndef SFS_HINT_RESOLVE_H
#define SFS_HINT_RESOLVE_H

#include "hint_handles.h"
#include "../../cache/nfs/origin.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sfs_hint_dirs;

/* A table for the lists of sender s, resolving through hh (which outlives
 * it); check_perms: default_permissions. NULL on ENOMEM. */
struct sfs_hint_dirs *sfs_hint_dirs_new(const struct sfs_hints_handles *hh,
					const struct sfs_hint_sender *s, bool check_perms);
void sfs_hint_dirs_free(struct sfs_hint_dirs *D); /* NULL is fine */

/* path[0, len) (sfs_hint_path_ok) as a regular file the sender may read:
 * its handle and attributes. Returns 0, -ENOENT, -ENOTDIR, -EISDIR (not a
 * regular file), -EACCES (the sender may not), -ENAMETOOLONG, or an NFS
 * error. */
int sfs_hint_resolve(struct sfs_hint_dirs *D, const char *path, size_t len, struct sfs_fh *fh,
		     struct sfs_attr *a);

/* The cache dataset (cache/store/store.h) of a path: its top-level
 * directory's, or the export's own for a file at the root; 0 without a
 * cache. */
uint32_t sfs_hint_path_dataset(const struct sfs_hints_handles *hh, const char *path, size_t len);

#endif
