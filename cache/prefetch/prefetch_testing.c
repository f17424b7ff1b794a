// SPDX-License-Identifier: Apache-2.0
/* prefetch_testing — see prefetch_testing.h. For unit tests only. */
#include "prefetch_testing.h"
#include "prefetch_int.h"

int sfs_pf_file_open(sfs_prefetch *pf, const struct sfs_fh *fh, uint64_t size, sfs_pf_file **out)
{
	struct sfs_file_version v = {.size = size};
	int rc = sfs_pf_file_open_version(pf, fh, &v, out);

	/* Set before the caller can share the file: no lock. */
	if (rc == 0)
		(*out)->check_version = false;
	return rc;
}
