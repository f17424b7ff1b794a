/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store — the local NVMe chunk cache.
 *
 * Owns: cached file versions ("objects") under cache_dir, in two layouts
 * that callers never see: a version larger than one chunk has a data file
 * of its own, byte x of the version at offset x (a passthrough open's
 * backing file), and its checksums beside it (KEY.sums: a header, then one
 * record per 1 MiB chunk: its length, a valid mark, one XXH3-64 per 16 KiB
 * sub-block; store_int.h); a version of one chunk or less (1 byte to
 * SFS_SEG_MAX_OBJECT) is packed as one record among many in append-only
 * segment files (segment.h), so a million small files make a few hundred
 * files, not a million. A version is named by XXH3-128 of (fsid, fileid,
 * size, mtime, ctime) — never by path — so a changed file is a new object
 * and old bytes can never be served for it. Also owns: the in-memory index,
 * recovery at startup, the writer thread (io_uring batches and segment
 * flushes, fdatasync before a chunk becomes visible), eviction (lru: the
 * colder of the least recently used file nobody holds and the least
 * recently used segment; auto: by dataset, below) or admission control
 * (pin) under cache_size, the scrubber, the lock that keeps a second
 * daemon off the same cache_dir, and degrading to "no cache" when the
 * directory is missing, full or failing. And the cache's lifecycle: the
 * dataset every object was cached for (datasets.h), the listing per
 * dataset, and evicting datasets, single versions or everything, on the
 * writer thread (sfs_store_evict); a tool that opens an unmounted cache_dir
 * with sfs_store_open gets the same, under the lock.
 * Does not own: what is fetched and when (cache/prefetch), file versions'
 * identity (the caller's sfs_file_version), the origin.
 *
 * Chunk states: ABSENT -> WRITING -> VERIFIED (written by us this run), or
 * PRESENT (found on disk at startup) -> VERIFIED on the first read whose
 * checksum matches; a mismatch makes it ABSENT again (a miss, never an
 * error). Every read checks what it reads, except a VERIFIED chunk's under
 * conf.trust_verified (where the scrubber runs): read_chunk all sub-blocks
 * of a chunk, read_range only the sub-blocks its range touches (a range
 * read leaves a PRESENT chunk PRESENT). A packed version's one chunk is
 * ABSENT, WRITING (queued) or PRESENT (durable in a segment), never
 * VERIFIED: each read checks it whole; a segment evicted under its holders
 * makes it ABSENT (a miss).
 *
 * Memory: a per-file object nobody holds costs its struct (~150 bytes) and
 * one byte per chunk; while it is referenced, also its open fds and 520
 * bytes per chunk it has read (the records; none for objects over ~2 GiB,
 * whose records are read from the page cache each time), until the last
 * reference goes. A packed version costs one segment index entry (16
 * bytes, 20-32 with the table's load) and nothing else unless referenced.
 *
 * Threading: every function may be called from any thread. One lock
 * (store->lock) protects the index and every object's chunk table; under it
 * only the segment index's own lock (a leaf) may be taken. Reads take it
 * only around their I/O, never across it. Write completions run on the
 * writer thread and must not block.
 */
#ifndef SFS_STORE_H
#define SFS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum sfs_store_policy {
	SFS_STORE_LRU,	/* evict least recently used files to admit new data */
	SFS_STORE_PIN,	/* once full, admit nothing and keep what is cached */
	SFS_STORE_AUTO, /* by dataset: see below */
};

/*
 * auto: a dataset keeps what it holds (nothing of it is evicted for more of
 * itself, so a dataset larger than its share is a stable subset, never
 * churned). Once the cache is full, a dataset takes the space of datasets
 * not read for idle_ms; a dataset being read again (a chunk refused or
 * evicted before is offered again: the ghost list; or a warm-up) also takes
 * the space of datasets not being read now (none for idle_ms / 20) and of
 * datasets being read now beyond an equal share of the cache. A one-off
 * scan is a first pass: it never evicts a dataset read within idle_ms.
 */
#define SFS_STORE_IDLE_MS_DEFAULT (600 * 1000ull)

/* Why auto did not admit bytes (struct sfs_store_dataset.refused_bytes). */
enum sfs_store_refusal {
	SFS_STORE_REFUSED_FULL,	 /* full of this dataset (or of what nobody may take) */
	SFS_STORE_REFUSED_SCAN,	 /* a first pass: the rest was read within idle_ms */
	SFS_STORE_REFUSED_SHARE, /* read again, but at its share while others are read */
	SFS_STORE_REFUSALS
};

struct sfs_store_conf {
	const char *dir;	 /* cache_dir; created 0700 */
	uint64_t capacity_bytes; /* cache_size; 0 = 90% of the filesystem */
	enum sfs_store_policy policy;
	uint64_t idle_ms;	/* auto: a dataset not read this long is idle; 0: the default */
	uint64_t chunk_bytes;	/* 1 MiB (a power of two, 64 KiB to 1 MiB) */
	uint64_t segment_bytes; /* packed segments; 0 = capacity / 16, 4 to 256 MiB */
	/* A per-file chunk already VERIFIED (written by this daemon, or checked
	 * whole since the cache was loaded) is read without checking it again:
	 * the trade passthrough makes (checked at fill and by the scrubber, not
	 * per read), for the daemon's own reads; the daemon sets it where the
	 * scrubber runs. false: every read checks every sub-block. Packed
	 * versions are checked at every read either way. */
	bool trust_verified;
};

/* The identity of one version of one file. */
struct sfs_file_version {
	uint64_t fsid, fileid, size;
	int64_t mtime_s, ctime_s;
	uint32_t mtime_ns, ctime_ns;
	/* Not part of the identity: the dataset (sfs_store_dataset) that a
	 * version cached for the first time is recorded under; 0 unknown. */
	uint32_t dataset;
};

enum sfs_chunk_state { SFS_CHUNK_ABSENT, SFS_CHUNK_WRITING, SFS_CHUNK_PRESENT, SFS_CHUNK_VERIFIED };

struct sfs_store_stats {
	uint64_t used_bytes; /* object files' chunk bytes + segment files' bytes + held_bytes */
	/* Of used_bytes: versions no longer cached that readers still hold
	 * (evicted while open, passthrough opens included) and
	 * sfs_store_held_add's, until their last release. */
	uint64_t held_bytes;
	uint64_t capacity_bytes;
	uint64_t write_bytes, evicted_bytes, checksum_failures, errors;
	uint64_t read_bytes; /* read from cache files: whole sub-blocks, chunks, records */
	uint64_t objects;    /* cached versions of both layouts */
	uint64_t not_admitted_bytes;
	uint64_t queued_bytes;	/* chunk bytes waiting to be written */
	uint64_t segments;	/* segment files */
	uint64_t small_objects; /* versions packed in segments (in objects too) */
	uint64_t index_bytes;	/* memory held by the store's indexes */
	bool online;
};

typedef struct sfs_store sfs_store;
typedef struct sfs_store_obj sfs_store_obj;

/*
 * Open (or create) the cache in conf->dir and load its index. Returns 0;
 * -EBUSY when another daemon holds the directory (err says which pid);
 * -EINVAL for a bad path. A directory that cannot be used right now
 * (missing parent, read-only, I/O errors) is not a failure: the store starts
 * offline, logs once, and retries every few seconds.
 */
int sfs_store_open(const struct sfs_store_conf *conf, sfs_store **out, char *err, size_t err_len);

/* Start the writer thread (after any fork: the lock survives fork, threads
 * do not). Until then writes queue up. Returns 0 or -errno. */
int sfs_store_start(sfs_store *store);
void sfs_store_close(sfs_store *store);
void sfs_store_get_stats(sfs_store *store, struct sfs_store_stats *out);

/* The object for a file version (created in memory if new), referenced.
 * Returns NULL on ENOMEM. */
sfs_store_obj *sfs_store_obj_get(sfs_store *store, const struct sfs_file_version *v);
void sfs_store_obj_put(sfs_store_obj *obj);
/* Bytes the disk holds for a version this store no longer knows (a
 * passthrough open adopted from a dead server whose version that server
 * evicted): counted as held (sfs_store_stats.held_bytes) from +n until the
 * caller's -n. Any thread. */
void sfs_store_held_add(sfs_store *store, int64_t n);

/* One more reference to an object the caller already holds. */
void sfs_store_obj_ref(sfs_store_obj *obj);

enum sfs_chunk_state sfs_store_chunk_state(sfs_store_obj *obj, uint32_t index);
uint64_t sfs_store_obj_cached_bytes(sfs_store_obj *obj);

/* Bytes cached for a file version, without creating anything. */
uint64_t sfs_store_cached_bytes(sfs_store *store, const struct sfs_file_version *v);

/*
 * Read chunk `index` into buf (chunk_bytes) and check it against its
 * record. Returns its length (and marks it VERIFIED), or -EBADMSG for a
 * mismatch / short file (the chunk becomes ABSENT), -ENOENT if not on disk,
 * -errno for an I/O error.
 */
ssize_t sfs_store_read_chunk(sfs_store_obj *obj, uint32_t index, void *buf);

/*
 * Queue chunk `index` (len bytes at buf) for writing. done(arg, err) runs on
 * the writer thread once the bytes and record are durable (err 0) or the
 * write was dropped (-ENOSPC, -EIO, ...); buf must stay valid until then.
 * Returns 0 if queued; -EINVAL for an index past the end or a len other
 * than the chunk's; -EEXIST if the chunk is present or being written;
 * -ENOSPC if pin policy is full (or auto did not admit it); -EAGAIN if the
 * store is offline; -ENOMEM. done is not called when it returns non-zero.
 *
 * sub_xxh64 (NULL when known is 0): the checksums of some of the chunk's
 * 16 KiB sub-blocks (SFS_STORE_SUB_SHIFT) already computed by the caller,
 * as the bytes landed: bit k of known says sub_xxh64[k] is XXH3-64 of
 * sub-block k of buf (the last one as long as the chunk's end allows); the
 * writer computes the others. Nothing checks them: a wrong one is recorded
 * and makes the chunk fail its check at every load (a miss). sub_xxh64
 * must stay valid until done. Packed versions (objects of one chunk or
 * less) keep one checksum of their own and ignore them.
 */
int sfs_store_write_chunk_hashed(sfs_store_obj *obj, uint32_t index, const void *buf, uint32_t len,
				 const uint64_t *sub_xxh64, uint64_t known,
				 void (*done)(void *arg, int err), void *arg);

/* Whether sfs_store_write_chunk_hashed of chunk index (len bytes) would
 * queue it now (online, not present or being written, room under pin): a
 * hint, the answer may change before the write. Takes the store lock
 * briefly. */
bool sfs_store_would_take(sfs_store_obj *obj, uint32_t index, uint32_t len);

/*
 * The random-access read: [off, off + len) of a cached version (len <= 1 MiB,
 * any alignment, may cross one chunk boundary), read from disk and verified
 * at a finer grain than a chunk: every 16 KiB sub-block that the range
 * touches (objects of several chunks), or the whole object (objects of one
 * chunk or less, packed in segments). buf is 4096-aligned scratch of buf_len
 * >= sfs_store_range_bytes(obj, off, len) (at most SFS_STORE_RANGE_BUF_BYTES;
 * -EINVAL when shorter). On success *data points at byte `off` inside
 * buf. Returns the bytes available (short only at the end of the version),
 * -ENOENT if a chunk of the range is not in the store (nothing was read),
 * -EBADMSG if a checksum failed (that chunk becomes ABSENT: a miss), or
 * another -errno for an I/O error. The bytes returned count as read from
 * the cache by a reader of the version's dataset (sfs_store_dataset_read).
 * Takes the store lock only briefly, never across I/O; any thread.
 */
#define SFS_STORE_SUB_SHIFT	  14 /* 16 KiB verification blocks */
#define SFS_STORE_RANGE_BUF_BYTES ((1u << 20) + (3u << SFS_STORE_SUB_SHIFT))
ssize_t sfs_store_read_range(sfs_store_obj *obj, uint64_t off, size_t len, void *buf,
			     size_t buf_len, const char **data);

/* The scratch bytes sfs_store_read_range(obj, off, len) reads into: the
 * packed record (header and object, whole 4 KiB blocks), or the 16 KiB
 * blocks the range touches; never more than SFS_STORE_RANGE_BUF_BYTES for
 * len <= 1 MiB. A small file's read needs a few blocks, not a huge page. */
size_t sfs_store_range_bytes(const sfs_store_obj *obj, uint64_t off, size_t len);

/*
 * sfs_store_read_range of a whole packed version, in two steps: start
 * begins reading it into buf (as sfs_store_read_range with off 0) and
 * returns at once; finish waits for it if needed, verifies it and returns
 * what sfs_store_read_range(obj, off, len, ...) would, *data pointing at
 * byte `off` (its bytes counted as sfs_store_read_range's are). Every
 * successful start is finished exactly once, with buf valid until then.
 * Start returns 0, -ENOTSUP (the version is not packed),
 * -ENOENT (not in the store) or another -errno (no asynchronous read here,
 * too many in flight): nothing to finish then. Any threads: one may start
 * and another finish.
 */
struct sfs_seg_aio; /* opaque */
int sfs_store_read_start(sfs_store_obj *obj, void *buf, size_t buf_len, struct sfs_seg_aio **out);
ssize_t sfs_store_read_finish(sfs_store_obj *obj, struct sfs_seg_aio *a, uint64_t off, size_t len,
			      const char **data);

/* --- passthrough and the scrubber ---------------------------------------------- */

/*
 * A new read-only fd of obj's data file (byte x of the version at offset
 * x, nothing after its end), for the kernel to read as a FUSE passthrough
 * backing file: only when every chunk of the version is in the cache and
 * VERIFIED (written by this daemon, or read whole and checked since the
 * cache was loaded). The kernel's reads of it are not checked again: the
 * scrubber re-reads cached versions. Counts as a use of the object (its
 * recency). Returns the fd (the caller closes it), -ENOENT (not wholly
 * cached, packed, evicted, or the cache is offline), -EAGAIN (wholly
 * cached, not yet verified since the load: queued for the scrubber, which
 * verifies it ahead of its passes when it runs), or -errno. Any thread.
 */
int sfs_store_obj_backing_fd(sfs_store_obj *obj);
/* The same answer without opening anything (0: it would give an fd). */
int sfs_store_obj_backing_check(sfs_store_obj *obj);

struct sfs_store_scrub_conf {
	uint64_t interval_ms; /* a pass over every cached file starts this often; 0: none */
	uint64_t rate_bytes;  /* the scrubber reads at most this many bytes per second */
};

/*
 * Start the scrubber's thread: it re-reads the per-file versions (the ones
 * passthrough serves; packed versions are checked whole at every read)
 * chunk by chunk with every checksum, at most rate_bytes per second, a pass
 * every interval_ms (from the start of one to the start of the next; a
 * pass that takes longer is followed at once), and verifies the versions
 * sfs_store_obj_backing_fd queued in between. A version that fails is
 * evicted (sfs_store_evict_keys): new opens fetch it again; readers that
 * hold it get misses for its chunks (refetched from NFS). Its reads are not
 * uses (no recency). Call after sfs_store_start; stopped by
 * sfs_store_close. Returns 0 or -errno.
 */
int sfs_store_scrub_start(sfs_store *store, const struct sfs_store_scrub_conf *conf);

struct sfs_store_scrub_stats {
	bool running;
	uint64_t interval_ms, rate_bytes;
	uint64_t passes;	  /* passes completed */
	uint64_t bytes;		  /* bytes read and checked */
	uint64_t versions;	  /* versions checked (passes and queued ones) */
	uint64_t failures;	  /* versions that failed a check, evicted */
	uint64_t queued_verified; /* versions verified for a passthrough open */
	uint64_t last_pass_ms;	  /* how long the last complete pass took */
	uint64_t pass_started_s;  /* CLOCK_REALTIME of the last pass's start; 0 none */
};
void sfs_store_scrub_get_stats(sfs_store *store, struct sfs_store_scrub_stats *out);

/* --- datasets: what an operator lists and evicts --------------------------- */

/* The id of dataset NAME ("/EXPORT/TOPDIR", or "/EXPORT" for the files at
 * the export's root), registered if new (its name reaches cache_dir/datasets
 * before any object that carries it). Returns 0 (unknown) when the table is
 * full (datasets.h: SFS_DSETS_MAX). Any thread; cheap for a known name. */
uint32_t sfs_store_dataset(sfs_store *store, const char *name);

/* Count bytes a reader of dataset `id` got from the cache and from NFS,
 * and note the time. Lock-free; any thread. */
void sfs_store_dataset_read(sfs_store *store, uint32_t id, uint64_t hit_bytes, uint64_t miss_bytes);

/* An explicit warm-up of this version's dataset (shardfs-warm, a prolog):
 * auto treats the dataset as read again, not as a first pass. Any thread. */
void sfs_store_obj_wanted(sfs_store_obj *obj);

/* Datasets whose objects could not be told apart because the dataset table
 * was full (their objects are counted under id 0, never another's). */
uint64_t sfs_store_dataset_overflows(sfs_store *store);

struct sfs_store_dataset {
	uint32_t id;	  /* 0: objects of no known dataset (name NULL) */
	const char *name; /* valid until sfs_store_close */
	uint64_t bytes;	  /* object bytes cached */
	uint64_t objects; /* cached versions, both layouts */
	uint64_t packed_objects;
	uint64_t hit_bytes, miss_bytes; /* readers' bytes since the last eviction */
	int64_t last_use_s;		/* last read or write, CLOCK_REALTIME; 0 never */
	/* Since this daemon opened the cache (0 for a tool's open): */
	uint64_t admitted_bytes;		    /* offered and queued for writing */
	uint64_t refused_bytes[SFS_STORE_REFUSALS]; /* auto: not admitted, by reason */
	/* Readers' share of bytes from the cache over the last window of
	 * max(2 x its bytes, 256 MiB) read (an epoch, or two of a dataset that
	 * fits), in millionths; -1 before the first window closed. */
	int32_t window_hit_ppm;
	bool reused; /* auto: read again (ghost hits or a warm-up) within idle_ms */
	bool in_use; /* read within idle_ms / 20 */
};

/* Every known dataset (also those with nothing cached now), then one entry
 * of id 0 for objects of unknown datasets if there are any; *out is
 * malloc'd (the caller frees it). Scans the index and the segments' index
 * (under their locks, briefly each). Returns 0 or -ENOMEM. Any thread. */
int sfs_store_list(sfs_store *store, struct sfs_store_dataset **out, size_t *n_out);

/*
 * The datasets seen since the store was opened (read, offered or holding
 * bytes), from the policy's own counters: no scan of the index, so cheap
 * enough for every render of the stats file. bytes counts a segment under
 * the dataset of its records (0 when mixed); objects and last_use_s are 0.
 * *out is malloc'd. Returns 0 or -ENOMEM. Any thread.
 */
int sfs_store_dataset_stats(sfs_store *store, struct sfs_store_dataset **out, size_t *n_out);

/* The policy in effect and auto's idle time in ms. */
enum sfs_store_policy sfs_store_policy_of(sfs_store *store, uint64_t *idle_ms);

struct sfs_store_evicted {
	uint32_t datasets;   /* datasets that matched */
	uint64_t objects;    /* versions evicted */
	uint64_t bytes;	     /* their object bytes */
	uint64_t disk_bytes; /* freed now: object files, and segment files left empty */
};

/*
 * Evict every version of the datasets whose name is `prefix` or starts with
 * `prefix` + "/" (prefix NULL: every object, of any dataset: a purge). Runs
 * on the writer thread (the caller waits; inline if the writer was never
 * started). Readers of an evicted version keep their reference: its chunks
 * become misses (refetched from NFS, not cached again under that reference),
 * bytes already being read are the old, verified ones. Packed records of
 * segments that keep other records use disk space until the segment is
 * evicted. Read counters of the datasets start again from 0. Returns 0,
 * -ENOENT when no dataset matches, -EAGAIN when the cache directory is not
 * usable now, or another -errno (what was done is in *out).
 */
int sfs_store_evict(sfs_store *store, const char *prefix, struct sfs_store_evicted *out);

/* The cache key of a version (XXH3-128 of its identity; never of a path):
 * what sfs_store_evict_keys takes. */
void sfs_store_key(const struct sfs_file_version *v, uint8_t key[16]);

/* Evict the versions with these keys (n of them, any order), as
 * sfs_store_evict does with datasets (holders, packed space: the same).
 * Keys not cached are skipped. Returns 0 or -EAGAIN / -errno. */
int sfs_store_evict_keys(sfs_store *store, const uint8_t (*keys)[16], size_t n,
			 struct sfs_store_evicted *out);

#endif
