// SPDX-License-Identifier: Apache-2.0
/* pagecache — see pagecache.h. */
#include "pagecache.h"
#include "../../cache/prefetch/prefetch.h" /* SFS_CHUNK_BYTES */

bool sfs_pc_open_direct(struct sfs_pc_policy *p, uint64_t size, bool first_epoch)
{
	switch (p->mode) {
	case SFS_PAGE_CACHE_NEVER:
		return true;
	case SFS_PAGE_CACHE_ALWAYS:
		return false;
	default:
		break;
	}
	if (!first_epoch || size <= SFS_CHUNK_BYTES ||
	    !__atomic_load_n(&p->direct_mmap, __ATOMIC_RELAXED))
		return false;
	if (__atomic_load_n(&p->small_share, __ATOMIC_RELAXED) < SFS_PC_SMALL_SHARE)
		return true;
	return __atomic_add_fetch(&p->probes, 1, __ATOMIC_RELAXED) % SFS_PC_PROBE_EVERY == 0;
}

void sfs_pc_direct_closed(struct sfs_pc_policy *p, uint64_t reads, uint64_t bytes)
{
	if (reads < SFS_PC_MIN_READS)
		return;
	int small = bytes / reads < SFS_PC_SMALL_READ ? 256 : 0;
	int share = (int)__atomic_load_n(&p->small_share, __ATOMIC_RELAXED);
	__atomic_store_n(&p->small_share, (uint32_t)(share + (small - share) / 8),
			 __ATOMIC_RELAXED);
}

uint32_t sfs_pc_small_share(const struct sfs_pc_policy *p)
{
	return __atomic_load_n(&p->small_share, __ATOMIC_RELAXED);
}
