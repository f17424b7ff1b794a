// SPDX-License-Identifier: Apache-2.0
/* store — seam only; see store.h. */
#include "store.h"

#include <errno.h>
#include <stddef.h>

int sfs_store_open(const struct sfs_store_conf *conf, sfs_store **out)
{
	(void)conf;
	*out = NULL;
	return -ENOTSUP;
}

void sfs_store_close(sfs_store *store)
{
	(void)store;
}
