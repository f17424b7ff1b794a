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

#include "../cache/prefetch/prefetch.h"
#include "../cache/store/store.h"
#include "kernel/pagecache.h"

/* The memory budget (mem_max): its default is RAM / SFS_MEM_MAX_SHARE within
 * [DEFAULT_MIN, DEFAULT_MAX]; less than SFS_MEM_MAX_MIN is refused. The
 * bounds it derives count SFS_MEM_INODE_BYTES per kernel-held inode and
 * SFS_MEM_NAME_BYTES per name (listings, the immutable namespace): what
 * each costs the daemon in all (tools/bench/benchmarks.md, memory per
 * file). */
#define SFS_MEM_MAX_SHARE	16
#define SFS_MEM_MAX_DEFAULT_MIN (256ull << 20)
#define SFS_MEM_MAX_DEFAULT_MAX (8ull << 30)
#define SFS_MEM_MAX_MIN		(64ull << 20)
#define SFS_MEM_INODE_BYTES	460
/* prefetch_mem is this share: the buffers it bounds come on huge pages whose
 * free halves iobuf keeps too (shardfs_memory_bytes{kind="chunk_buffers_kept"}),
 * so they hold up to half as much again: about a quarter in all. */
#define SFS_MEM_PREFETCH_SHARE 6
#define SFS_MEM_NAME_BYTES     200

/* Kernel entry/attr timeout under immutable: a year, i.e. never revalidate. */
#define SFS_IMMUTABLE_TIMEOUT_S (365.0 * 86400)

/* passthrough=: whether cached files are opened as kernel passthroughs
 * (fs/kernel/passthrough.h). auto: wherever the kernel offers it and the
 * daemon may register backing files (probed once at mount). */
enum sfs_passthrough { SFS_PASSTHROUGH_OFF = 0, SFS_PASSTHROUGH_AUTO = 1 };

struct sfs_options {
	char *source;	   /* HOST[,HOST...]:/EXPORT as given */
	char *hosts;	   /* the HOST[,HOST...] part */
	char *export_path; /* the /EXPORT part */
	char *mountpoint;
	bool foreground, debug, help, version;
	bool cache_policy_given; /* cache_policy= was on the command line */
	bool page_cache_given;	 /* page_cache= was on the command line */
	bool cache_idle_given;	 /* cache_idle= was on the command line */
	bool scrub_interval_given, scrub_rate_given;
	/* given on the command line, else derived from mem_max: */
	bool prefetch_mem_given, inode_max_given, listing_max_given, namespace_max_given;

	unsigned nconnect;
	uint32_t rsize;
	unsigned timeo_ds, retrans;
	bool hard;
	unsigned actimeo_s;
	uint32_t uid, gid;
	bool allow_other, default_permissions;
	bool allow_other_unchecked;	    /* allow_other without default_permissions (unsafe) */
	bool overmount;			    /* mount on top of a mount already at MOUNTPOINT */
	bool takeover;			    /* ask the keeper of the mount at MOUNTPOINT to serve
					       it with this binary (takeover.h) */
	bool direct_io;			    /* the flag: page_cache=never */
	enum sfs_page_cache page_cache;	    /* page_cache=auto|always|never */
	unsigned io_threads;		    /* 0 = one per CPU */
	unsigned max_threads;		    /* FUSE worker threads */
	unsigned active_threads;	    /* of those, taking requests while none waits */
	unsigned wedge_timeout_s;	    /* a serving process without a heartbeat this long is
					       replaced by its keeper; 0: never */
	unsigned inode_max;		    /* inodes the kernel may hold; 0: no limit */
	uint64_t mem_max;		    /* the daemon's memory budget */
	uint64_t prefetch_mem;		    /* budget for fetch buffers in memory */
	char *cache_dir;		    /* NULL: no local cache */
	uint64_t cache_size;		    /* 0: 90% of cache_dir's filesystem */
	enum sfs_store_policy cache_policy; /* cache_policy=auto|lru|pin */
	unsigned cache_idle_s;		    /* auto: a dataset not read this long is idle */
	enum sfs_passthrough passthrough;   /* passthrough=auto|off */
	bool passthrough_given;
	unsigned scrub_interval_s;	 /* a scrub pass this often; 0: none */
	uint64_t scrub_rate;		 /* the scrubber's bytes per second at most */
	enum sfs_prefetch_mode prefetch; /* prefetch=readahead|shard|off */
	uint64_t prefetch_max;		 /* shard: files up to this size are fetched whole */
	unsigned hint_window;		 /* epoch hints: items fetched ahead per list */
	unsigned hint_fetchers;		 /* epoch hints: fetcher threads */
	unsigned warm_share;		 /* warm-ups: percent of the NFS slots at most */
	uint64_t warm_rate;		 /* warm-ups: bytes per second at most; 0: no limit */
	bool immutable;			 /* files never change: no revalidation, namespace kept */
	bool noimmutable;		 /* refuse the immutable implied by a .snapshot/ path */
	uint64_t namespace_max;		 /* immutable: names held at most (memory and cache_dir) */
	uint64_t listing_max;		 /* not immutable: names held from listings; 0: none */
};

/*
 * The option table (fs/options.c) is the one place a mount option is
 * declared: its name, its value's kind and range, its default, where the
 * value goes in struct sfs_options, and its --help text. Parsing, defaults
 * and the usage text are all driven by it. Exposed read-only for tests.
 */
enum sfs_opt_kind {
	SFS_OPT_FLAG,	       /* "name": stores .set_to into a bool */
	SFS_OPT_UINT,	       /* "name=N", min..max */
	SFS_OPT_SIZE,	       /* "name=SIZE" with K/M/G/T, min..max */
	SFS_OPT_STRING,	       /* "name=TEXT", strdup'd */
	SFS_OPT_CHOICE,	       /* "name=WORD", one of .choices, stores its value ("name"
				  alone: .bare's word, where it has one) */
	SFS_OPT_IGNORED,       /* generic mount(8) flag: accepted, ignored */
	SFS_OPT_IGNORED_VALUE, /* generic mount(8) "name[=value]": accepted, ignored */
};

/* One word of a SFS_OPT_CHOICE option and the module's enum value for it. */
struct sfs_opt_choice {
	const char *name;
	int value;
};

struct sfs_opt_def {
	const char *name;
	enum sfs_opt_kind kind;
	size_t offset; /* of the destination in struct sfs_options */
	size_t width;  /* bytes of the destination: 1 (bool), 4 or 8 */
	uint64_t min, max;
	/* The default, stored before parsing: a number (UINT, SIZE), a choice's
	 * value (CHOICE). def_fn, when set, computes it instead (uid, gid). A
	 * FLAG's bool starts false (set_to is what the flag stores), a STRING
	 * starts NULL. */
	uint64_t def;
	uint64_t (*def_fn)(void);
	bool set_to;
	const struct sfs_opt_choice *choices; /* CHOICE: ends with {NULL} */
	const char *bare;     /* CHOICE: the word the name alone stands for; NULL: needs a value */
	size_t given;	      /* offset of a bool set when the option is given, or 0 */
	const char *meta;     /* the value's name in --help ("N", "SIZE") */
	const char *help;     /* --help text; NULL only for IGNORED kinds */
	const char *def_help; /* the default in words where the value does not say it */
};

/* The table and its length (*n). Never NULL. */
const struct sfs_opt_def *sfs_options_table(size_t *n);

/*
 * Parse argv (argv[0] is the program). On success returns 0 and fills o
 * (free with sfs_options_free). Returns -EINVAL with a one-line reason in
 * err when anything is unknown, malformed or out of range.
 */
int sfs_options_parse(int argc, char **argv, struct sfs_options *o, char *err, size_t err_len);
void sfs_options_free(struct sfs_options *o);
/* Print the --help text, generated from the option table, to out. */
void sfs_options_usage(FILE *out, const char *prog);

/* The server path of rel (relative to the export, rel_len bytes, no '/' at
 * either end; 0 bytes: the export itself) in buf: the export path without
 * its trailing '/', one '/', rel. Returns what snprintf returns. */
int sfs_export_join(const struct sfs_options *o, const char *rel, size_t rel_len, char *buf,
		    size_t size);

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
