// SPDX-License-Identifier: Apache-2.0
/* blocking — see blocking.h. */
#include "blocking.h"

#include <stddef.h>

static const struct sfs_blocking_hooks *hooks; /* set while no caller runs */

void sfs_blocking_set_hooks(const struct sfs_blocking_hooks *h)
{
	__atomic_store_n(&hooks, h, __ATOMIC_RELEASE);
}

void sfs_blocking_begin(void)
{
	const struct sfs_blocking_hooks *h = __atomic_load_n(&hooks, __ATOMIC_ACQUIRE);
	if (h)
		h->begin();
}

void sfs_blocking_end(void)
{
	const struct sfs_blocking_hooks *h = __atomic_load_n(&hooks, __ATOMIC_ACQUIRE);
	if (h)
		h->end();
}
