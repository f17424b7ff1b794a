/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store — cached file versions on local disk, in two layouts behind one
 * interface (store.h): prefetch and fs/ never know which one holds a chunk.
 * What the store owns and does not: store.h. Files: store.c (the API,
 * references, chunk states), index.c (index, LRU, making room), load.c and
 * migrate.c (opening a cache directory), read.c (reads), writer.c (offers
 * and the writer thread), policy.c (auto), by_dataset.c (listing and evicting
 * by dataset), scrub.c (the scrubber), segment.c (packed versions),
 * datasets.c (dataset names and counters).
 *
 * On disk, cache_dir/:
 *   LOCK                       flock()ed by the daemon that owns the cache
 *   objects/KK/KEY             one data file per version larger than one
 *                              chunk (KEY = 32 hex digits of XXH3-128, KK
 *                              its first two): byte x of the version at
 *                              offset x and nothing else, so that the
 *                              kernel can read it as a FUSE passthrough
 *                              backing file (fs/kernel/passthrough.h)
 *   objects/KK/KEY.sums        its checksums beside it:
 *     [0, 64)                  struct obj_header (magic "SFSOBJS5"; the
 *                              dataset id of the version, datasets.h)
 *     [64, 64 + 520 n_chunks)  struct chunk_rec, one per chunk: its length, a
 *                              valid mark, and one XXH3-64 per 16 KiB
 *                              sub-block (the last one of a short chunk
 *                              covers what is there)
 *   segments/                  versions of one chunk or less (1 byte to
 *                              SFS_SEG_MAX_OBJECT), packed as records in
 *                              append-only segment files: segment.c owns
 *                              that directory and its format (segment.h)
 * A chunk counts only if its record is valid, its length matches what the
 * file size implies, the data file is long enough, and (when read) the
 * XXH3-64 of every sub-block read matches. Records are written with the
 * data and both files made durable (one fdatasync each per object per
 * batch) before the chunk becomes visible in memory; a crash can leave a
 * record without its data, which the checksum turns into a miss. A data
 * file without its .sums (or the reverse) is deleted at load. Object files
 * of the previous layout ("SFSOBJS4": header, records and data in one file,
 * byte x at data_off + x) are migrated at load (migrate.c): the header and
 * records are copied to KEY.sums.tmp, the records' bytes are cut from the
 * front of the file (fallocate COLLAPSE_RANGE), and the .sums renamed into
 * place last; where the filesystem cannot collapse a range the object is
 * discarded. Older layouts, and versions small enough for the segments,
 * are discarded like any file that is not ours.
 *   datasets                   dataset names and read counters (datasets.c)
 *
 * Datasets: every object records the id of its dataset (the caller's
 * sfs_file_version.dataset when the object is created). Listing sums the
 * index and the segments per id; eviction of datasets (or of everything)
 * runs on the writer thread, like every other change to the cache files:
 * an object nobody holds leaves the index and its file is unlinked; one
 * that is held is detached (out of the index, every chunk ABSENT, marked
 * evicted so nothing is written to it again, its file unlinked while its
 * holders' fds keep reading the old, verified bytes) and freed with its
 * last reference; a new open of the same version makes a new object.
 *
 * In memory:
 *
 *   sfs_store ── buckets[] ──> sfs_store_obj ── state[n_chunks]  1 B/chunk, always
 *       │                          │   └──── recs[n_chunks]     520 B/chunk, only
 *       └── lru_head ... lru_tail ─┘                            while referenced
 *                                                                (objects <= ~2 GiB)
 *       └── seg ──> segment.c: key -> record index (16 B entry per packed version)
 *
 * A hash of objects by key and an LRU list of the per-file objects (least
 * recently used first, each with its last use in CLOCK_MONOTONIC ms), both
 * protected by store->lock, which also protects every object's state[] /
 * recs / used_bytes / refs / gen / fds. A per-file object nobody holds costs
 * its struct and one state byte per chunk: chunk lengths follow from the
 * size, and the records (the sub-block hashes) stay on disk. While it is
 * referenced, the records of the chunks it reads are kept in recs (read
 * once from the object file, or set by the writer) and dropped with the fds
 * when the last reference goes. A packed version has an sfs_store_obj only
 * while referenced (so that all its holders share one WRITING state); what
 * is durable is in the segment index, asked at each call.
 *
 * Capacity: used bytes = the chunk bytes of the object files + the disk
 * bytes of the segments (+ what a batch being written has reserved). lru
 * makes room by evicting whichever is colder: the least recently used
 * object nobody holds, or the least recently used segment (a whole segment:
 * the packed versions in it become misses even if someone holds them).
 * pin admits nothing once full.
 *
 * Lock order: callers may hold their own locks (prefetch file locks) when
 * calling in; store->lock, then segment.c's lock (a leaf, taken under
 * store->lock only for its index and stats, never for I/O). Reads
 * (read_chunk, read_range) take store->lock only to plan and to record the
 * outcome, never across open/pread/pwrite. The writer thread does its file
 * I/O (create, unlink, write, fdatasync, segment appends and flushes)
 * without it, and never calls out with it held.
 */
#ifndef SFS_STORE_INT_H
#define SFS_STORE_INT_H

#include "store.h"
#include "../common/hash.h"
#include "../common/htab.h"
#include "datasets.h"
#include "../common/log.h"
#include "segment.h"
#include "../common/uring.h"

#include <assert.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#define OBJ_MAGIC	 0x35534a424f534653ull /* "SFSOBJS5": KEY.sums beside KEY */
#define OBJ_MAGIC_V4	 0x34534a424f534653ull /* "SFSOBJS4": one file, data at data_off */
#define REC_VALID	 0x4b4f4843u	       /* "CHOK" */
#define WRITE_BATCH	 64
#define GATHER_MS	 5	     /* a writer with few packed jobs waits this long */
#define GATHER_JOBS	 WRITE_BATCH /* ... for this many */
#define GATHER_BYTES	 (4u << 20)  /* ... or this many bytes queued */
#define RETRY_OFFLINE_MS 5000
#define SUB_SHIFT	 SFS_STORE_SUB_SHIFT
#define SUB_BYTES	 (1u << SUB_SHIFT)
#define MAX_CHUNK_SHIFT	 20
#define MAX_SUBS	 (1u << (MAX_CHUNK_SHIFT - SUB_SHIFT)) /* sub-blocks of a 1 MiB chunk */
#define INLINE_STATES	 8 /* objects of up to 8 chunks keep state[] inline */
/* An object keeps its records in memory while referenced only up to this
 * many bytes of them (objects up to ~2 GiB); a larger one reads the records
 * of each span from the page cache (cheap: see struct span, read.c), so
 * that a 100 GB file does not hold 50 MB of hashes. */
#define RECS_TABLE_MAX (1u << 20)
#define SEG_MIN_BYTES  (4ull << 20)
#define SEG_MAX_BYTES  (256ull << 20)
#define DSETS_SAVE_MS  10000 /* read counters and last use saved this often */

struct obj_header {
	uint64_t magic;
	uint8_t key[16];
	uint64_t size;
	uint32_t n_chunks;
	uint32_t chunk_shift;
	uint64_t data_off; /* 0 ("SFSOBJS4": where the chunk bytes began) */
	uint32_t dataset;  /* datasets.h id; 0: unknown */
	uint8_t reserved[12];
};
_Static_assert(sizeof(struct obj_header) == 64, "header layout");

struct chunk_rec {
	uint64_t sub_xxh64[MAX_SUBS]; /* XXH3-64 per sub-block; unused slots 0 */
	uint32_t len;
	uint32_t valid;
};
_Static_assert(sizeof(struct chunk_rec) == 8 * MAX_SUBS + 8, "record layout");

struct sfs_store_obj {
	sfs_store *store;  /* set at creation */
	uint8_t key[16];   /* set at creation */
	uint64_t size;	   /* set at creation */
	uint32_t n_chunks; /* set at creation */
	bool packed;	   /* set at creation: lives in the segments */
	uint32_t dataset;  /* set at creation: datasets.h id, 0 unknown */
	/* protected by store->lock */
	/* enum sfs_chunk_state per chunk. A packed version's state[0] is only
	 * ABSENT or WRITING (queued); PRESENT is what the segment index says. */
	uint8_t *state;
	/* NULL, or while referenced: a record per chunk, meaningful where its
	 * valid mark is set (read from disk by a reader, or set by the writer);
	 * freed when refs drops to 0. */
	struct chunk_rec *recs;
	uint64_t used_bytes;
	uint64_t last_use_ms; /* CLOCK_MONOTONIC, at lru_touch */
	uint32_t gen;	      /* bumped when a PRESENT/VERIFIED chunk is dropped */
	unsigned refs;
	int fd;	 /* the data file: -1 until needed; closed when refs drops to 0 */
	int dfd; /* O_DIRECT twin of fd for chunk bytes, or -1 */
	int rfd; /* the .sums file (records), with fd */
	bool on_disk, in_index;
	bool evicted;	     /* detached by an eviction: nothing is written to it */
	uint64_t held_bytes; /* evicted while referenced: its bytes in store->held_bytes */
	uint8_t state_inline[INLINE_STATES]; /* state[] of small objects */
	struct sfs_store_obj *hnext, *lru_prev, *lru_next;
};

/* The index's bucket of a key: the low bits of its first 8 bytes (keys are
 * hashes already). */
static inline uint64_t key_hash(const uint8_t key[16])
{
	uint64_t h;
	memcpy(&h, key, sizeof(h));
	return h;
}

static inline uint64_t obj_hash(const sfs_store_obj *o) { return key_hash(o->key); }

SFS_HTAB_DEFINE(store_index, sfs_store_obj, hnext, obj_hash, 2);

/* A change to the cache that runs on the writer thread (sfs_store_evict,
 * sfs_store_evict_keys). */
struct ctl_job {
	const char *prefix;	   /* NULL (and no keys): everything */
	const uint8_t (*keys)[16]; /* or these versions, sorted */
	size_t n_keys;
	struct sfs_store_evicted result; /* out */
	int rc;				 /* out */
	bool done;			 /* protected by lock */
	struct ctl_job *next;		 /* protected by lock */
};

struct write_job {
	sfs_store_obj *obj; /* referenced */
	uint32_t index, len;
	const void *buf;
	void (*done)(void *arg, int err);
	void *arg;
	struct write_job *next;
	const uint64_t *sub_xxh64; /* the caller's, for the sub-blocks in known */
	uint64_t known;
};

/*
 * The policy's view of one dataset (policy.c), by the dataset table's slot;
 * slot SFS_DSETS_MAX stands for id 0 (objects of no known dataset, and
 * those of datasets the table had no room for).
 */
struct pol_ds {
	uint32_t id;		/* protected by lock: set when first seen */
	bool listed;		/* protected by lock: in s->pol_live */
	uint64_t obj_bytes;	/* protected by lock: per-file objects' chunk bytes */
	uint64_t seg_bytes;	/* protected by lock: segments counted under it (seg_refresh) */
	uint64_t reuse_ms;	/* protected by lock: last ghost hit or warm-up */
	uint64_t last_offer_ms; /* protected by lock: last chunk offered (hungry) */
	uint32_t ghost_hits;	/* protected by lock: since reuse_ms was last idle_ms old */
	uint64_t victim_max;	/* protected by lock: policy_allow's bound for this dataset */
	/* atomic: */
	uint64_t last_read_ms; /* sfs_now_ms() of a reader's last bytes; 0 never */
	uint64_t admitted_bytes, refused_bytes[SFS_STORE_REFUSALS];
	uint64_t read_hit, read_miss; /* readers' bytes since open */
	uint64_t win_hit, win_miss;   /* read_hit/read_miss when the window began */
	int32_t win_ppm;	      /* the last closed window's hit share; -1 none */
};

#define POL_SLOTS	(SFS_DSETS_MAX + 1)
#define POL_GHOSTS	(1u << 16) /* ghost list slots (8 bytes each) */
#define POL_GHOST_REUSE 2	   /* ghost hits that make a dataset "read again" */

struct sfs_store {
	struct sfs_store_conf conf; /* set at open; dir owned */
	unsigned chunk_shift;	    /* set at open */
	int lock_fd;		    /* set at attach, by open or the writer thread */
	uint64_t min_free_bytes;    /* set at attach: leave the filesystem this much */
	/* Set (release) once by store_attach, then read-only until close;
	 * NULL until the directory was first usable. Its own lock inside. */
	sfs_seg *seg;
	sfs_dsets *dsets; /* set at open, then read-only; its own lock inside */

	pthread_mutex_t lock;
	pthread_cond_t work;		    /* jobs queued or stopping */
	struct store_index index;	    /* protected by lock: every object, by key */
	size_t n_objects;		    /* protected by lock: per-file objects in index */
	uint64_t mem_bytes;		    /* protected by lock: objects' structs, states, recs */
	sfs_store_obj *lru_head, *lru_tail; /* protected by lock; head = coldest */
	uint64_t used_bytes;		    /* protected by lock: object files' chunk bytes */
	/* Protected by lock: bytes the disk still holds for what is no longer
	 * cached: objects an eviction detached while referenced (their files
	 * unlinked, kept by their holders' fds and the kernel's passthrough
	 * opens of them) until their last reference, and sfs_store_held_add's.
	 * Counted against capacity; admission stops while they alone fill it. */
	uint64_t held_bytes;
	uint64_t seg_disk_bytes;	    /* protected by lock: segments, as of the writer's
					       last flush or eviction */
	uint64_t seg_reserved;		    /* protected by lock: packed bytes being written */
	uint64_t capacity_bytes;	    /* protected by lock */
	bool online;			    /* protected by lock */
	uint64_t retry_at_ms;		    /* protected by lock */
	bool full_logged;		    /* protected by lock */
	struct write_job *jobs, *jobs_tail; /* protected by lock */
	size_t n_jobs;			    /* protected by lock */
	bool gathering;			    /* protected by lock: writer_gather waits */
	uint64_t queued_bytes;		    /* protected by lock: chunk bytes not yet written */
	bool stopping;			    /* protected by lock */
	struct ctl_job *ctl;		    /* protected by lock: evictions queued */
	pthread_cond_t ctl_done;	    /* a ctl job is done */

	pthread_t writer;
	bool writer_started;
	sfs_uring *ring; /* writer thread only */
	struct sfs_log_ratelimit err_rl;
	struct sfs_store_stats stats; /* atomic counters (used/capacity/online from fields) */

	/* The policy (policy.c). pol[] is allocated at open; an entry's
	 * fields say what protects them. pol_live lists the slots seen since
	 * open (protected by lock, never shrinks; at most POL_SLOTS).
	 * ghosts[]: recently refused or evicted chunks, a direct-mapped table
	 * of tagged hashes (protected by lock). */
	struct pol_ds *pol;
	uint16_t *pol_live;
	size_t n_pol_live;
	uint64_t *ghosts;
	uint64_t dataset_overflows; /* atomic */
	struct scrub *scrub;	    /* set by sfs_store_scrub_start, then read-only; NULL: none */
	/* set while loading (store_attach): old-layout objects migrated or not */
	uint64_t migrated, migrate_failed;
};

static inline void count(uint64_t *c, uint64_t n) { __atomic_fetch_add(c, n, __ATOMIC_RELAXED); }

static inline sfs_seg *seg_of(sfs_store *s) { return __atomic_load_n(&s->seg, __ATOMIC_ACQUIRE); }

static inline void key_for(const struct sfs_file_version *v, uint8_t key[16])
{
	/* Packed explicitly: padding must not reach the hash. */
	uint8_t raw[8 * 5 + 4 * 2];
	size_t o = 0;
#define PUT(x) (memcpy(raw + o, &(x), sizeof(x)), o += sizeof(x))
	PUT(v->fsid);
	PUT(v->fileid);
	PUT(v->size);
	PUT(v->mtime_s);
	PUT(v->ctime_s);
	PUT(v->mtime_ns);
	PUT(v->ctime_ns);
#undef PUT
	XXH128_hash_t h = XXH3_128bits(raw, o);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	memcpy(key, c.digest, 16);
}

static inline void key_hex(const uint8_t key[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", key[i]);
}

/* Whether a version of this size is packed in the segments. */
static inline bool size_packed(const sfs_store *s, uint64_t size)
{
	return size > 0 && size <= SFS_SEG_MAX_OBJECT && size <= (1ull << s->chunk_shift);
}

/* Where "SFSOBJS4" object files began their chunk bytes (migrate.c). */
static inline uint64_t v4_data_off(uint32_t n_chunks)
{
	uint64_t n = sizeof(struct obj_header) + (uint64_t)n_chunks * sizeof(struct chunk_rec);
	return (n + 4095) & ~4095ull;
}

/* The bytes of a .sums file of n_chunks records. */
static inline uint64_t sums_bytes(uint32_t n_chunks)
{
	return sizeof(struct obj_header) + (uint64_t)n_chunks * sizeof(struct chunk_rec);
}

static inline uint32_t chunk_len(const sfs_store_obj *o, uint32_t index, unsigned shift)
{
	uint64_t start = (uint64_t)index << shift;
	uint64_t left = o->size - start;
	return (uint32_t)(left < (1ull << shift) ? left : (1ull << shift));
}

static inline off_t rec_off(uint32_t index)
{
	return (off_t)(sizeof(struct obj_header) + (uint64_t)index * sizeof(struct chunk_rec));
}

/* The record of a chunk of len bytes at buf: one XXH3-64 per sub-block,
 * those in known taken from sub_xxh64 (sfs_store_write_chunk_hashed), the
 * others computed. */
static inline void rec_fill(struct chunk_rec *r, const void *buf, uint32_t len,
			    const uint64_t *sub_xxh64, uint64_t known)
{
	memset(r, 0, sizeof(*r));
	for (uint32_t k = 0; (uint64_t)k << SUB_SHIFT < len; k++) {
		uint32_t at = k << SUB_SHIFT;
		uint32_t n = len - at < SUB_BYTES ? len - at : SUB_BYTES;
		r->sub_xxh64[k] =
		    known >> k & 1 ? sub_xxh64[k] : sfs_xxh3_64((const char *)buf + at, n);
	}
	r->len = len;
	r->valid = REC_VALID;
}

/* Disk bytes a packed version of len bytes takes in a segment. */
static inline uint64_t packed_bytes(uint32_t len) { return sfs_seg_read_buf_bytes(len); }

/* Bytes counted against capacity. Caller holds lock. */
static inline uint64_t used_total(const sfs_store *s)
{
	return s->used_bytes + s->seg_disk_bytes + s->seg_reserved + s->held_bytes;
}

/* Whether a packed version is durable in the segments. Any thread, no lock
 * needed (segment.c's own). */
static inline bool packed_present(sfs_store *s, const sfs_store_obj *o)
{
	sfs_seg *sg = seg_of(s);
	uint32_t len = 0;

	return sg && sfs_seg_lookup(sg, o->key, &len) && len == o->size;
}

/* Shared by the files of this module (store); not for other modules. */

/* policy.c: the admission policies (store.h) and the per-dataset counters.
 * Functions that say "caller holds lock" need s->lock. */
int policy_open(sfs_store *s);
void policy_close(sfs_store *s);
/* A per-file object's chunk bytes change by delta: s->used_bytes,
 * o->used_bytes and its dataset's count. Caller holds lock. */
void obj_bytes_add(sfs_store *s, sfs_store_obj *o, int64_t delta);
/* Bytes of objects loaded at open (o->used_bytes already set). Caller
 * holds lock. */
void policy_loaded(sfs_store *s, const sfs_store_obj *o);
/* At open, once the cache is loaded: a dataset used within idle_ms before
 * the last daemon stopped (cache_dir/datasets) is not idle, so a restart
 * does not hand a job's dataset to the first scan. Caller holds lock. */
void policy_restore_reads(sfs_store *s);
/* The segments' bytes per dataset, recounted. Caller holds lock. */
void policy_seg_recount(sfs_store *s);
/* Whether auto admits chunk index of o (need disk bytes, len chunk bytes)
 * now: 0 or -ENOSPC. record: a real offer (a ghost hit counts as reuse, a
 * refusal is counted and remembered); else a hint with no effect. Caller
 * holds lock; the policy is auto. */
int policy_admit(sfs_store *s, sfs_store_obj *o, uint32_t index, uint64_t need, uint32_t len,
		 bool record);
/* Count bytes admitted for o's dataset (any policy). */
void policy_admitted(sfs_store *s, const sfs_store_obj *o, uint32_t len);
/* The datasets a write may evict now (auto), a bit per policy slot. */
struct pol_allow {
	uint64_t bits[(POL_SLOTS + 63) / 64];
};
/* Fill a with the datasets a write of `dataset` may evict now. Returns
 * false when there are none. Caller holds lock. */
bool policy_allow(sfs_store *s, uint32_t dataset, struct pol_allow *a);
/* The coldest object nobody holds with bytes, of a dataset in a and within
 * its victim_max, or NULL. Caller holds lock. */
sfs_store_obj *policy_coldest_object(sfs_store *s, const struct pol_allow *a);
/* The coldest segment a allows (its dataset and size), its last use and
 * sequence number (sfs_seg_evict_seq evicts it without the lock). Caller
 * holds lock (segment.c's is taken inside). */
bool policy_coldest_segment(sfs_store *s, const struct pol_allow *a, uint64_t *last_use_ms,
			    uint32_t *seq);
/* The policy's fields of a listing entry (admitted, refused, window,
 * reused, in use) for out->id. Caller holds lock. */
void policy_list_fill(sfs_store *s, struct sfs_store_dataset *out);
/* An object leaves the cache to make room: its first chunks go on the
 * ghost list. Caller holds lock. */
void policy_evicted(sfs_store *s, const sfs_store_obj *o);

void lru_touch(sfs_store *s, sfs_store_obj *o);

sfs_store_obj *index_find(sfs_store *s, const uint8_t key[16]);

void index_add(sfs_store *s, sfs_store_obj *o);

void index_remove(sfs_store *s, sfs_store_obj *o);

sfs_store_obj *obj_new(sfs_store *s, const uint8_t key[16], uint64_t size);

void obj_free(sfs_store_obj *o);

/* The paths of an object's files. */
enum obj_file { OBJ_DIR, OBJ_DATA, OBJ_SUMS };
void obj_path(const sfs_store *s, const uint8_t key[16], char *buf, size_t len, enum obj_file f);
/* Unlink both files of an object (no lock; file I/O). */
void obj_unlink(const sfs_store *s, const uint8_t key[16]);

void seg_refresh(sfs_store *s);

bool make_room(sfs_store *s, const sfs_store_obj *for_obj, uint64_t need, uint64_t in_batch,
	       uint64_t *fs_avail, sfs_store_obj **victims);

void victims_free(sfs_store *s, sfs_store_obj *victims);

int store_attach(sfs_store *s, char *err, size_t err_len);

int obj_open_fds(sfs_store *s, sfs_store_obj *o);
/* read_chunk of a per-file object for the scrubber: every sub-block
 * checked, VERIFIED if it checks, no recency (read.c). */
ssize_t read_chunk_scrub(sfs_store_obj *o, uint32_t index, void *buf);
/* Stop the scrubber's thread, if any (scrub.c; sfs_store_close). */
void scrub_stop(sfs_store *s);
/* Queue a version for the scrubber to verify soon (scrub.c). Caller holds
 * s->lock. */
void scrub_queue(sfs_store *s, const uint8_t key[16]);
/* An "SFSOBJS4" object file at path turned into today's pair (migrate.c);
 * sums: its .sums path. Returns 0, -EINVAL (not an old object of ours) or
 * -errno (the caller discards it). Startup, no lock. */
int migrate_v4(sfs_store *s, const char *path, const char *sums);

bool gathered(const sfs_store *s);

void writer_gather(sfs_store *s);

void *writer_main(void *arg);

bool chunk_cached(const sfs_store_obj *o, uint32_t index);

void run_ctl(sfs_store *s, struct ctl_job *c);

#endif /* SFS_STORE_INT_H */
