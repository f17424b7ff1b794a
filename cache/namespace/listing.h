/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listing — whole directory listings read from NFS into a namespace in
 * listings mode (namespace.h), so that the lookups of a directory whose
 * names keep missing are answered without an NFS LOOKUP each.
 *
 * Not immutable, the kernel asks again for every name whose entry is older
 * than actimeo (and for every name after drop_caches or memory pressure):
 * an NFS LOOKUP per file per epoch, a metadata call on the cluster for
 * every image. A directory whose names miss SFS_NS_LIST_AFTER times within
 * actimeo is listed whole instead (READDIRPLUS: the names, handles and
 * attributes of a few hundred entries a call), and that listing answers
 * its lookups (sfs_ns_lookup_listed) until actimeo after the listing
 * started. The listing runs on the origin's I/O threads; lookups meanwhile
 * go to NFS.
 *
 * Owns: a running listing's state, from its first READDIRPLUS to its end
 * (sfs_ns_dir_complete, or sfs_ns_listing_failed). Does not own: the names
 * (the namespace), the NFS calls (the origin pool), the lookups (fs/ops
 * and fs/hints answer them).
 * Threading: any thread; never blocks. A listing's replies are handled on
 * the origin I/O thread that decoded them.
 */
#ifndef SFS_LISTING_H
#define SFS_LISTING_H

#include "namespace.h"
#include "../nfs/origin.h"

#include <stdint.h>

/* A lookup in directory dir (handle dir, key `key` of listings ls) found
 * no listing (sfs_ns_lookup_listed returned -ENODATA): count the miss and,
 * when sfs_ns_listing_wanted says so, start listing dir through origin in
 * the background. */
void sfs_listing_missed(sfs_ns *ls, sfs_origin *origin, const struct sfs_fh *dir, uint64_t key);

#endif
