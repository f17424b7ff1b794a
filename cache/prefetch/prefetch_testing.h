/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch_testing — FOR UNIT TESTS ONLY: what tests/unit/test_prefetch
 * needs of prefetch beyond prefetch.h. prefetch_testing.c is built into the
 * tests (tests/unit/meson.build), never into the prefetch library or the
 * daemon; nothing else includes this header.
 *
 * Threading: as prefetch.h.
 */
#ifndef SFS_PREFETCH_TESTING_H
#define SFS_PREFETCH_TESTING_H

#include "prefetch.h"

/*
 * sfs_pf_file_open_version for a file known only by its size: origin
 * replies are never checked against a version (the fake origin serves a
 * size of its own to test short and long files). Returns 0 or -ENOMEM. The
 * caller holds one reference; drop it with sfs_pf_file_unref().
 */
int sfs_pf_file_open(sfs_prefetch *pf, const struct sfs_fh *fh, uint64_t size, sfs_pf_file **out);

#endif
