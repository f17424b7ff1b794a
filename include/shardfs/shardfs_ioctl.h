/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shardfs_ioctl.h — the ioctl ABI of a shardfs mount (installed as
 * <shardfs/shardfs_ioctl.h>). Issue the ioctls on a file opened on the mount.
 *
 * Rules of this ABI (FUSE allows only "restricted" ioctls, whose argument
 * the kernel copies by the size encoded in the command): fixed-width
 * fields, 8-byte alignment, no pointers and no file descriptors inside, a
 * `size` field first (the caller's sizeof, so structs can grow), reserved
 * words that must be zero, at most 16383 bytes each way. Refusals come back
 * as errno values, never ENOSYS (which the caller would see as ENOTTY).
 * 32-bit callers are refused with EOPNOTSUPP.
 *
 * Staging: a trainer registers a target region (a POSIX shared-memory
 * object it owns, or a CUDA allocation by IPC handle), then asks shardfs to
 * place byte ranges of the open file into it. Only verified bytes are
 * placed: chunks missing from the local cache are fetched (and checked)
 * first. A region belongs to the open file and the uid that registered it
 * and is dropped when the file is closed.
 */
#ifndef SHARDFS_IOCTL_H
#define SHARDFS_IOCTL_H

#include <linux/ioctl.h>
#include <stdint.h>

#define SHARDFS_IOC_MAGIC   'S'
#define SHARDFS_ABI_VERSION 1

/* --- SHARDFS_IOC_QUERY: what this mount can do --------------------------- */

#define SHARDFS_CAP_SHM	     0x1u /* shared-memory regions */
#define SHARDFS_CAP_CUDA_IPC 0x2u /* CUDA regions (a usable GPU and runtime) */
#define SHARDFS_CAP_WARM     0x4u /* SHARDFS_IOC_WARM (the mount has a cache) */

#define SHARDFS_MAX_GPUS 8

struct shardfs_query {
	uint32_t size;				/* in: sizeof(struct shardfs_query) */
	uint32_t abi_version;			/* out: SHARDFS_ABI_VERSION */
	uint32_t caps;				/* out: SHARDFS_CAP_* */
	uint32_t n_gpus;			/* out: usable GPUs (0 without CUDA) */
	uint32_t max_ranges;			/* out: ranges per SHARDFS_IOC_STAGE */
	uint32_t max_regions;			/* out: regions per open file */
	uint64_t max_stage_bytes;		/* out: bytes per SHARDFS_IOC_STAGE call */
	uint8_t gpu_uuid[SHARDFS_MAX_GPUS][16]; /* out: the first GPUs' UUIDs */
	uint64_t reserved[8];			/* in: zero */
};
#define SHARDFS_IOC_QUERY _IOWR(SHARDFS_IOC_MAGIC, 0x01, struct shardfs_query)

/* --- SHARDFS_IOC_REGISTER: a target region -------------------------------- */

#define SHARDFS_REGION_SHM  1
#define SHARDFS_REGION_CUDA 2

struct shardfs_region {
	uint32_t size;		     /* in: sizeof(struct shardfs_region) */
	uint32_t kind;		     /* in: SHARDFS_REGION_* */
	uint64_t region_id;	     /* out: names the region in STAGE/UNREGISTER */
	uint64_t offset;	     /* in: SHM: offset of the region in the object;
					CUDA: offset of the view in the allocation */
	uint64_t length;	     /* in: bytes of the region */
	uint64_t alloc_size;	     /* in: CUDA: size of the whole allocation */
	char shm_name[256];	     /* in: SHM: "/name" as given to shm_open(3) */
	uint8_t cuda_ipc_handle[64]; /* in: CUDA: cudaIpcMemHandle_t of the allocation base */
	uint8_t gpu_uuid[16];	     /* in: CUDA: the GPU holding the allocation */
	uint64_t reserved[4];	     /* in: zero */
};
#define SHARDFS_IOC_REGISTER _IOWR(SHARDFS_IOC_MAGIC, 0x02, struct shardfs_region)

/* --- SHARDFS_IOC_STAGE: place ranges of the file into a region ------------ */

#define SHARDFS_STAGE_MAX_RANGES 64

struct shardfs_range {
	uint64_t region_offset; /* in: where in the region */
	uint64_t file_offset;	/* in: where in the file */
	uint64_t length;	/* in: bytes */
	uint64_t placed;	/* out: bytes placed (short only at end of file) */
};

#define SHARDFS_PATH_CACHE	 0x1u  /* bytes came from the local cache */
#define SHARDFS_PATH_NFS	 0x2u  /* bytes were fetched from NFS first */
#define SHARDFS_PATH_SHM_COPY	 0x10u /* placed by a copy into shared memory */
#define SHARDFS_PATH_CUDA_PINNED 0x20u /* placed through pinned staging buffers */

struct shardfs_stage {
	uint32_t size;	       /* in: sizeof(struct shardfs_stage) */
	uint32_t n_ranges;     /* in: 1..SHARDFS_STAGE_MAX_RANGES */
	uint64_t region_id;    /* in */
	uint64_t bytes_placed; /* out: sum of ranges[].placed */
	uint32_t path;	       /* out: SHARDFS_PATH_* bits of how they moved */
	uint32_t reserved0;    /* in: zero */
	uint64_t reserved[4];  /* in: zero */
	struct shardfs_range ranges[SHARDFS_STAGE_MAX_RANGES];
};
#define SHARDFS_IOC_STAGE _IOWR(SHARDFS_IOC_MAGIC, 0x03, struct shardfs_stage)

/* --- SHARDFS_IOC_UNREGISTER ---------------------------------------------- */

struct shardfs_unregister {
	uint32_t size;	      /* in: sizeof(struct shardfs_unregister) */
	uint32_t reserved0;   /* in: zero */
	uint64_t region_id;   /* in */
	uint64_t reserved[2]; /* in: zero */
};
#define SHARDFS_IOC_UNREGISTER _IOW(SHARDFS_IOC_MAGIC, 0x04, struct shardfs_unregister)

/*
 * errno values:
 *   EINVAL     bad size field, non-zero reserved words, unknown kind, zero or
 *              too many ranges, a CUDA handle for a GPU we do not have
 *   ERANGE     a range outside its region, or a region outside its object
 *   ENOENT     no such region on this open file, or no such shm object
 *   EPERM      the shm object belongs to another uid, or the region was
 *              registered by another uid
 *   EOPNOTSUPP a 32-bit caller, or CUDA without a usable GPU and runtime
 *   ENOSPC     too many regions on this open file
 *   EIO        the bytes could not be fetched (no NFS node could serve)
 *   ESTALE     the file changed on the server under this open
 *   ENOTTY     not a shardfs file (or an ioctl we do not know)
 */

/* --- SHARDFS_IOC_WARM: fetch the whole file into the local cache ---------- */

/* The first call starts the fetch (whatever prefetch_max says); every call
 * returns at once with the state so far, so a caller polls until
 * cached_bytes == file_bytes or SHARDFS_WARM_ACTIVE clears. The fetch is a
 * background one: it takes at most the mount's warm_share of its NFS
 * slots (and warm_rate), after readers' requests. Open the file with
 * O_NONBLOCK so that the open itself starts no whole-file fetch for a
 * reader (prefetch=shard); a plain open's is made the warm-up's where no
 * read came yet.
 * Errors: ENOTSUP (the mount has no cache_dir), EINVAL. */
struct shardfs_warm {
	uint32_t size;	       /* in: sizeof(struct shardfs_warm) */
	uint32_t flags;	       /* out: SHARDFS_WARM_* */
	uint64_t file_bytes;   /* out: size of the file version being cached */
	uint64_t cached_bytes; /* out: bytes of it in the cache now */
	uint64_t reserved[4];  /* in: zero */
};
#define SHARDFS_WARM_ACTIVE 0x1u /* chunks are still being fetched or written */

#define SHARDFS_IOC_WARM _IOWR(SHARDFS_IOC_MAGIC, 0x10, struct shardfs_warm)

/* --- The cache of a mount: list per dataset, evict, purge ----------------
 *
 * Issued on any file or directory of the mount (shardfs-cache(1) opens the
 * mountpoint itself). Only root and the user the daemon runs as may call
 * them (EPERM). ENOTSUP: the mount has no cache_dir. A dataset is an
 * export's top-level directory ("/EXPORT/DIR"), or the export itself for
 * the files at its root ("/EXPORT").
 */

/* One dataset, packed one after another in shardfs_cache_list.buf: the
 * fixed part, then the name (name_len bytes and a NUL), then zeros up to
 * entry_bytes (a multiple of 8). */
struct shardfs_cache_entry {
	uint16_t entry_bytes;	 /* this entry with its name and padding */
	uint16_t name_len;	 /* 0: objects of no known dataset */
	uint32_t id;		 /* the dataset's id in this cache */
	uint64_t bytes;		 /* bytes of file versions cached */
	uint64_t objects;	 /* file versions cached (packed ones included) */
	uint64_t packed_objects; /* of them, small files packed in segments */
	uint64_t hit_bytes;	 /* bytes readers got from the cache ... */
	uint64_t miss_bytes;	 /* ... and from NFS, since its last eviction */
	int64_t last_use_s;	 /* last read or cache write, Unix time; 0: never */
	char name[];
};

#define SHARDFS_CACHE_LIST_BUF 16000

/* Lists datasets start .. start + n_entries - 1 of total; call again with
 * start + n_entries until it reaches total. A dataset registered between
 * calls can make one appear twice (never skipped): deduplicate by id. */
struct shardfs_cache_list {
	uint32_t size;		 /* in: sizeof(struct shardfs_cache_list) */
	uint32_t start;		 /* in: the first dataset wanted */
	uint32_t n_entries;	 /* out: entries in buf */
	uint32_t total;		 /* out: datasets in the listing */
	uint64_t capacity_bytes; /* out: the cache_size in effect */
	uint64_t used_bytes;	 /* out: bytes counted against it */
	uint64_t reserved[4];	 /* in: zero */
	uint8_t buf[SHARDFS_CACHE_LIST_BUF];
};
#define SHARDFS_IOC_CACHE_LIST _IOWR(SHARDFS_IOC_MAGIC, 0x20, struct shardfs_cache_list)

#define SHARDFS_EVICT_ALL	 0x1u /* purge: every cached object; prefix unused */
#define SHARDFS_EVICT_MOUNT_PATH 0x2u /* prefix is relative to the mount's root */

/* Evicts the datasets named prefix or under it ("/ifs/data" takes every
 * dataset of that export). Readers of evicted files keep reading: their
 * cached chunks become misses, fetched from NFS again. ENOENT: no dataset
 * matches (a path inside a dataset is not one). */
struct shardfs_cache_evict {
	uint32_t size;	      /* in: sizeof(struct shardfs_cache_evict) */
	uint32_t flags;	      /* in: SHARDFS_EVICT_* */
	uint32_t datasets;    /* out: datasets that matched */
	uint32_t reserved0;   /* in: zero */
	uint64_t objects;     /* out: file versions evicted */
	uint64_t bytes;	      /* out: their bytes */
	uint64_t disk_bytes;  /* out: disk space freed now (packed files free
				 theirs when their segment goes) */
	uint64_t reserved[4]; /* in: zero */
	char prefix[4096];    /* in: NUL-terminated */
};
#define SHARDFS_IOC_CACHE_EVICT _IOWR(SHARDFS_IOC_MAGIC, 0x21, struct shardfs_cache_evict)

/* Evicts single file versions by their cache keys (SHARDFS_XATTR_KEY of
 * each file): what shardfs-cache does for a path inside a dataset. Keys
 * not cached are skipped. */
#define SHARDFS_CACHE_EVICT_KEYS_MAX 1000
struct shardfs_cache_evict_keys {
	uint32_t size;	      /* in: sizeof(struct shardfs_cache_evict_keys) */
	uint32_t n_keys;      /* in: 1..SHARDFS_CACHE_EVICT_KEYS_MAX */
	uint64_t objects;     /* out: file versions evicted */
	uint64_t bytes;	      /* out: their bytes */
	uint64_t disk_bytes;  /* out: disk space freed now */
	uint64_t reserved[4]; /* in: zero */
	uint8_t keys[SHARDFS_CACHE_EVICT_KEYS_MAX][16];
};
#define SHARDFS_IOC_CACHE_EVICT_KEYS _IOWR(SHARDFS_IOC_MAGIC, 0x22, struct shardfs_cache_evict_keys)

/* --- SHARDFS_IOC_HINT_*: the order of the coming epoch -------------------
 *
 * A trainer that knows the order in which it will read tells it: an ordered
 * list of items, each a whole file or a byte range of one, which the daemon
 * fetches ahead of the reads, in order, within its memory budget and with
 * its own concurrency, following the reads it sees (items the reader passed
 * are dropped; nothing more than hint_window items ahead is fetched).
 *
 * A list is built in batches: BEGIN (a new pending list), APPEND (items,
 * packed in buf), COMMIT (the pending list replaces the active one and the
 * fetch starts at its first item). CANCEL drops both. A list belongs to the
 * open file the calls were made on (the mount's root directory or any file
 * of the mount) and goes away with that open's release; several open files
 * (jobs, ranks) each have their own.
 *
 * An item, packed in shardfs_hint_append.buf: the fixed part, then the path
 * (path_len bytes, relative to the mount's root, no NUL, no "." or ".."
 * component, no leading or doubled '/'), then zeros up to item_bytes (a
 * multiple of 8). A whole-file item has offset = length = 0.
 *
 * Paths that do not exist, are not regular files, or that the caller may not
 * read (mode bits, as the kernel checks them on this mount) are skipped and
 * counted; they never fail the list.
 *
 * errno values: EINVAL (a malformed batch: size, reserved words, an item
 * that overruns buf or its item_bytes, an unknown kind, an empty or bad
 * path; APPEND or COMMIT without BEGIN), E2BIG (the list would pass
 * SHARDFS_HINT_MAX_ITEMS: the whole pending list is dropped), ENOMEM (the
 * daemon's lists together would pass their share of its memory budget,
 * mem_max / 8: the pending list is dropped).
 */
#define SHARDFS_HINT_MAX_ITEMS (1u << 21) /* items in one list: 2,097,152 */
#define SHARDFS_HINT_BUF       16320

#define SHARDFS_HINT_FILE  0 /* the whole file */
#define SHARDFS_HINT_RANGE 1 /* [offset, offset + length) of the file */

struct shardfs_hint_item {
	uint16_t item_bytes; /* this item with its path and padding */
	uint16_t path_len;   /* 1..4095 */
	uint16_t kind;	     /* SHARDFS_HINT_* */
	uint16_t reserved0;  /* zero */
	uint64_t offset;     /* RANGE: first byte */
	uint64_t length;     /* RANGE: bytes, > 0 */
	char path[];
};

struct shardfs_hint_begin {
	uint32_t size;	      /* in: sizeof(struct shardfs_hint_begin) */
	uint32_t reserved0;   /* in: zero */
	uint64_t max_items;   /* out: SHARDFS_HINT_MAX_ITEMS */
	uint64_t window;      /* out: items fetched ahead at most (hint_window) */
	uint64_t reserved[4]; /* in: zero */
};
#define SHARDFS_IOC_HINT_BEGIN _IOWR(SHARDFS_IOC_MAGIC, 0x30, struct shardfs_hint_begin)

struct shardfs_hint_append {
	uint32_t size;	      /* in: sizeof(struct shardfs_hint_append) */
	uint32_t n_items;     /* in: items packed in buf */
	uint32_t used;	      /* in: bytes of buf they take */
	uint32_t reserved0;   /* in: zero */
	uint64_t reserved[2]; /* in: zero */
	uint8_t buf[SHARDFS_HINT_BUF];
};
#define SHARDFS_IOC_HINT_APPEND _IOW(SHARDFS_IOC_MAGIC, 0x31, struct shardfs_hint_append)

struct shardfs_hint_commit {
	uint32_t size;	      /* in: sizeof(struct shardfs_hint_commit) */
	uint32_t reserved0;   /* in: zero */
	uint64_t n_items;     /* out: items in the list now active */
	uint64_t reserved[4]; /* in: zero */
};
#define SHARDFS_IOC_HINT_COMMIT _IOWR(SHARDFS_IOC_MAGIC, 0x32, struct shardfs_hint_commit)

struct shardfs_hint_cancel {
	uint32_t size;	      /* in: sizeof(struct shardfs_hint_cancel) */
	uint32_t reserved0;   /* in: zero */
	uint64_t reserved[2]; /* in: zero */
};
#define SHARDFS_IOC_HINT_CANCEL _IOW(SHARDFS_IOC_MAGIC, 0x33, struct shardfs_hint_cancel)

/* Progress of the active list of this open file (all zero without one). */
struct shardfs_hint_status {
	uint32_t size;		/* in: sizeof(struct shardfs_hint_status) */
	uint32_t active;	/* out: 1 while items remain to be fetched or read */
	uint64_t n_items;	/* out: items in the list */
	uint64_t position;	/* out: items done with (read, skipped or dropped) */
	uint64_t fetched_items; /* out: items fetched ahead */
	uint64_t fetched_bytes; /* out: their bytes */
	uint64_t read_items;	/* out: of those, read by the reader */
	uint64_t wasted_bytes;	/* out: fetched ahead and dropped unread */
	uint64_t cached_items;	/* out: skipped: already in the cache */
	uint64_t unknown_items; /* out: skipped: missing, not a file, or out of range */
	uint64_t denied_items;	/* out: skipped: the caller may not read them */
	uint64_t reserved[4];	/* in: zero */
};
#define SHARDFS_IOC_HINT_STATUS _IOWR(SHARDFS_IOC_MAGIC, 0x34, struct shardfs_hint_status)

/* The extended attribute every regular file on a mount with a cache answers
 * with the cache key of its current version: 32 hex digits (ENODATA
 * otherwise). Reading it opens nothing and fetches nothing. */
#define SHARDFS_XATTR_KEY "user.shardfs.key"

/* The extended attribute every file on the mount answers with the bytes of
 * it in the local cache, as a decimal string. */
#define SHARDFS_XATTR_CACHED "user.shardfs.cached"

#endif
