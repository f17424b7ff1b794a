// SPDX-License-Identifier: Apache-2.0
/* staging — seam only; see staging.h. */
#include "staging.h"

#include <errno.h>
#include <stddef.h>

int sfs_staging_open(sfs_staging **out)
{
	*out = NULL;
	return -ENOTSUP;
}

void sfs_staging_close(sfs_staging *st)
{
	(void)st;
}
