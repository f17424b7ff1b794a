/* SPDX-License-Identifier: Apache-2.0 */
/*
 * options — the command line and mount options of shardfs.
 *
 * Owns: the one option table, every default, validation with a one-line
 * message that names the bad option, and host name resolution.
 * Does not include libfuse: the result is handed to fs/main.c, which builds
 * FUSE's own arguments from it. Not thread-safe; used once at startup.
 */
#ifndef SFS_OPTIONS_H
#define SFS_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Defaults, each defined once. See README "Mount options" for the reasons. */
#define SFS_DEFAULT_NCONNECT	  2
#define SFS_DEFAULT_RSIZE	  (1u << 20)
#define SFS_DEFAULT_TIMEO_DS	  50
#define SFS_DEFAULT_RETRANS	  2
#define SFS_DEFAULT_ACTIMEO_S	  60
#define SFS_DEFAULT_PREFETCH_MEM  (256ull << 20)
#define SFS_DEFAULT_PREFETCH_MAX  (2ull << 30)
#define SFS_DEFAULT_NAMESPACE_MAX 2000000
/* Kernel entry/attr timeout under immutable: a year, i.e. never revalidate. */
#define SFS_IMMUTABLE_TIMEOUT_S (365.0 * 86400)

struct sfs_options {
	char *source;	   /* HOST[,HOST...]:/EXPORT as given */
	char *hosts;	   /* the HOST[,HOST...] part */
	char *export_path; /* the /EXPORT part */
	char *mountpoint;
	bool foreground, debug, help, version;
	bool cache_policy_given; /* cache_policy= was on the command line */

	unsigned nconnect;
	uint32_t rsize;
	unsigned timeo_ds, retrans;
	bool hard;
	unsigned actimeo_s;
	uint32_t uid, gid;
	bool allow_other, default_permissions;
	bool allow_other_unchecked; /* allow_other without default_permissions (unsafe) */
	bool overmount;		    /* mount on top of a mount already at MOUNTPOINT */
	bool direct_io;		    /* bypass the kernel page cache for file data */
	unsigned io_threads;	    /* 0 = one per CPU */
	unsigned max_threads;	    /* FUSE worker threads */
	uint64_t prefetch_mem;	    /* budget for fetch buffers in memory */
	char *cache_dir;	    /* NULL: no local cache */
	uint64_t cache_size;	    /* 0: 90% of cache_dir's filesystem */
	unsigned cache_policy;	    /* 0 lru, 1 pin (enum sfs_store_policy) */
	unsigned prefetch;	    /* 0 readahead, 1 shard, 2 off (enum sfs_prefetch_mode) */
	uint64_t prefetch_max;	    /* shard: files up to this size are fetched whole */
	bool immutable;		    /* files never change: no revalidation, namespace kept */
	bool noimmutable;	    /* refuse the immutable implied by a .snapshot/ path */
	uint64_t namespace_max;	    /* immutable: names held at most (memory and cache_dir) */
};

/*
 * Parse argv (argv[0] is the program). On success returns 0 and fills o
 * (free with sfs_options_free). Returns -EINVAL with a one-line reason in
 * err when anything is unknown, malformed or out of range.
 */
int sfs_options_parse(int argc, char **argv, struct sfs_options *o, char *err, size_t err_len);
void sfs_options_free(struct sfs_options *o);
void sfs_options_usage(FILE *out, const char *prog);

/*
 * Resolve a comma-separated list of IPv4 addresses and DNS names to numeric
 * IPv4 addresses; a name with several A records contributes all of them,
 * duplicates are dropped. Returns the count (> 0) with *addrs malloc'd
 * (free with sfs_addrs_free), or -errno with a reason in err.
 */
int sfs_resolve_hosts(const char *hosts, char ***addrs, char *err, size_t err_len);
void sfs_addrs_free(char **addrs, size_t n);

/* Parse "123", "64K", "256M", "2G", "1T" (powers of 1024). 0 or -EINVAL. */
int sfs_parse_size(const char *s, uint64_t *out);

#endif
