// SPDX-License-Identifier: Apache-2.0
/*
 * test_pagecache — the page_cache= policy (fs/kernel/pagecache.c alone): which opens
 * are direct_io in each mode, and how auto learns readers that read in
 * small pieces and unlearns them through its probes.
 */
#include "../../fs/kernel/pagecache.h"
#include "tap.h"

#include "../../cache/prefetch/prefetch.h"

#define BIG   (SFS_CHUNK_BYTES + 1ull)
#define SMALL ((uint64_t)SFS_CHUNK_BYTES)

static struct sfs_pc_policy policy(enum sfs_page_cache mode)
{
	return (struct sfs_pc_policy){.mode = mode, .direct_mmap = true};
}

/* n direct_io opens of a big file closed after 100 reads of each bytes. */
static void closes(struct sfs_pc_policy *p, int n, uint64_t each)
{
	for (int k = 0; k < n; k++)
		sfs_pc_direct_closed(p, 100, 100 * each);
}

/* How many of n first-epoch opens of a big file are direct_io. */
static int direct_of(struct sfs_pc_policy *p, int n)
{
	int d = 0;
	for (int k = 0; k < n; k++)
		d += sfs_pc_open_direct(p, BIG, true);
	return d;
}

static void test_modes(void)
{
	struct sfs_pc_policy never = policy(SFS_PAGE_CACHE_NEVER);
	struct sfs_pc_policy always = policy(SFS_PAGE_CACHE_ALWAYS);
	ok(sfs_pc_open_direct(&never, 1, false) && sfs_pc_open_direct(&never, BIG, true),
	   "never: every open is direct_io, small files and later epochs too");
	ok(!sfs_pc_open_direct(&always, BIG, true) && !sfs_pc_open_direct(&always, 1, true),
	   "always: no open is direct_io");
	never.direct_mmap = false;
	ok(sfs_pc_open_direct(&never, BIG, true),
	   "never without shared mmap of direct_io files: still direct_io (the user chose it)");

	struct sfs_pc_policy a = policy(SFS_PAGE_CACHE_AUTO);
	ok(sfs_pc_open_direct(&a, BIG, true), "auto: a file over a chunk, first epoch: direct_io");
	ok(!sfs_pc_open_direct(&a, BIG, false), "auto: a later epoch: page cache");
	ok(!sfs_pc_open_direct(&a, SMALL, true) && !sfs_pc_open_direct(&a, 0, true),
	   "auto: a file of a chunk or less: page cache, first epoch too");
	a.direct_mmap = false;
	ok(!sfs_pc_open_direct(&a, BIG, true),
	   "auto on a kernel that cannot map direct_io files shared: page cache");
}

static void test_learning(void)
{
	struct sfs_pc_policy p = policy(SFS_PAGE_CACHE_AUTO);

	closes(&p, 50, 1u << 20);
	ok(sfs_pc_small_share(&p) == 0 && direct_of(&p, 10) == 10,
	   "1 MiB readers: the share stays 0, first epochs direct_io");
	for (int k = 0; k < 50; k++)
		sfs_pc_direct_closed(&p, SFS_PC_MIN_READS - 1, (SFS_PC_MIN_READS - 1) * 4096ull);
	ok(sfs_pc_small_share(&p) == 0, "opens of fewer than %d reads do not count (share %u)",
	   SFS_PC_MIN_READS, sfs_pc_small_share(&p));
	closes(&p, 5, SFS_PC_SMALL_READ - 1);
	ok(sfs_pc_small_share(&p) < SFS_PC_SMALL_SHARE && direct_of(&p, 1) == 1,
	   "5 small readers in a row: still direct_io (share %u of 256)", sfs_pc_small_share(&p));
	closes(&p, 1, 16u << 10);
	ok(sfs_pc_small_share(&p) >= SFS_PC_SMALL_SHARE,
	   "the 6th small reader: small readers dominate (share %u)", sfs_pc_small_share(&p));
	int d = direct_of(&p, 4 * SFS_PC_PROBE_EVERY);
	ok(d == 4, "while they do, one first epoch in %d probes direct_io (%d of %d)",
	   SFS_PC_PROBE_EVERY, d, 4 * SFS_PC_PROBE_EVERY);
	ok(!sfs_pc_open_direct(&p, BIG, false) && !sfs_pc_open_direct(&p, SMALL, true),
	   "probes count first epochs of big files only");
	uint32_t before = sfs_pc_small_share(&p);
	closes(&p, 1, SFS_PC_SMALL_READ);
	ok(sfs_pc_small_share(&p) < before, "reads of %u bytes are not small (share %u -> %u)",
	   SFS_PC_SMALL_READ, before, sfs_pc_small_share(&p));
	closes(&p, 10, 128u << 10);
	ok(sfs_pc_small_share(&p) < SFS_PC_SMALL_SHARE && direct_of(&p, 3) == 3,
	   "probes that find 128 KiB readers bring direct_io back (share %u)",
	   sfs_pc_small_share(&p));
	closes(&p, 200, 16u << 10);
	ok(sfs_pc_small_share(&p) <= 256, "the share stays within 256 (%u)",
	   sfs_pc_small_share(&p));
	closes(&p, 200, 1u << 20);
	ok(sfs_pc_small_share(&p) < 8, "and decays towards 0 (%u)", sfs_pc_small_share(&p));
}

int main(void)
{
	test_modes();
	test_learning();
	return tap_done();
}
