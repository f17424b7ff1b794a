/* SPDX-License-Identifier: Apache-2.0 */
/*
 * segment — the packed small-object log behind the store. Private to
 * cache/store/: the store's files are its only users (through
 * store_int.h); prefetch and fs/ never see it.
 *
 * Owns: cached objects of at most SFS_SEG_MAX_OBJECT bytes (file versions
 * of one chunk or less: JPEGs, labels, small shards) packed as records into
 * append-only segment files; the in-memory index key -> record; the write
 * buffer; recovery at open; eviction by whole segments.
 * Does not own: admission and capacity (the store decides what goes in and
 * which segment goes out), keys (the store hashes file versions), threads.
 *
 * On disk, DIR (cache_dir/segments):
 *   NNNNNNNN.seg   a segment: 8 hex digits of a sequence number that only
 *                  grows; records appended, never rewritten; at most
 *                  segment_bytes long (a record longer than that gets a
 *                  segment of its own)
 *   NNNNNNNN.idx   the summary of a sealed segment (every record's key,
 *                  offset, length, XXH3-64, and a checksum of the summary),
 *                  written to a temporary name, fdatasync'd and renamed once
 *                  the segment is full
 * A record starts 4096-aligned: a 64-byte header (magic, key, length, XXH3-64
 * of the bytes, XXH3-64 of the header itself), the bytes right after it, zero
 * padding to the next 4096 boundary. A read is one O_DIRECT pread from the
 * record's start.
 *
 * Recovery (open): a sealed segment's index entries come from its .idx (one
 * small read); a segment without a valid .idx (the one being filled when the
 * daemon died) is scanned record by record, checking headers and bytes, and
 * the scan stops at the first record that does not check: a torn tail costs
 * only the records after it. Files that are not ours are removed.
 *
 * Rules kept from the store: a record is visible (lookup and read find it)
 * only once its header and bytes are durable (written and fdatasync'd);
 * every read verifies the record's header (its own checksum, the key, the
 * length) and the bytes against the header's XXH3-64; a
 * mismatch, a short read or a vanished segment is a miss: the entry is
 * dropped and the caller fetches from the origin again. Never an error
 * for the reader, never a wrong byte.
 *
 * Memory: one index entry per live object (open addressing, 16 bytes a
 * slot, 16-32 bytes an object), one small descriptor per segment, 4 bytes
 * per distinct dataset, a bounded number of open segment fds, and the
 * write buffer (write_buffer_bytes, allocated at open).
 *
 * Limits (what one 16-byte index entry names): segment_bytes up to 1 GiB
 * (larger is taken as 1 GiB); 2^18 segment files (262,144: with 1 GiB
 * segments, 256 TiB); 8,192 distinct dataset ids per directory.
 *
 * Threading: sfs_seg_lookup, sfs_seg_read, sfs_seg_get_stats and
 * sfs_seg_coldest, sfs_seg_foreach may be called from any thread.
 * sfs_seg_append, sfs_seg_flush, sfs_seg_evict_coldest and
 * sfs_seg_evict_where are called by one thread at a time (the store's
 * writer). One mutex (a leaf) protects the index, the
 * segment table and the fd cache; no I/O is done under it. A segment being
 * read is never closed or unlinked under the reader (per-segment reference
 * held across the pread).
 */
#ifndef SFS_SEGMENT_H
#define SFS_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SFS_SEG_MAX_OBJECT (1u << 20) /* one chunk */

struct sfs_seg_conf {
	const char *dir;	     /* created 0700 if missing */
	uint64_t segment_bytes;	     /* 0 = 256 MiB; at most 1 GiB */
	uint32_t write_buffer_bytes; /* 0 = 8 MiB: the most one flush writes */
};

struct sfs_seg_stats {
	uint64_t objects;	    /* live index entries */
	uint64_t segments;	    /* segment files, the one being filled included */
	uint64_t disk_bytes;	    /* bytes of segment files on disk */
	uint64_t live_bytes;	    /* object bytes of live entries */
	uint64_t index_bytes;	    /* memory of the index and segment table */
	uint64_t write_bytes;	    /* record bytes made durable */
	uint64_t flushes;	    /* pwrite + fdatasync rounds */
	uint64_t checksum_failures; /* reads that did not check (misses) */
	uint64_t evicted_segments, evicted_bytes;
	uint64_t errors; /* I/O errors other than checksum failures */
};

typedef struct sfs_seg sfs_seg;

/*
 * Open (creating DIR if needed) and load the index from DIR. Returns 0, or
 * -errno when DIR cannot be created or read (the store then runs without
 * packed objects and retries later).
 */
int sfs_seg_open(const struct sfs_seg_conf *conf, sfs_seg **out);

/* Close; records appended but not flushed are dropped (never visible). */
void sfs_seg_close(sfs_seg *sg);

/* Whether key is present (durable); sets *len. The index knows a key by
 * its first 8 bytes: another key alike in those (a 2^-64 chance per pair)
 * counts too, and its read is then a miss (sfs_seg_read). Any thread. */
bool sfs_seg_lookup(sfs_seg *sg, const uint8_t key[16], uint32_t *len);

/* Scratch bytes a read of an object of len bytes needs (4096-aligned). */
size_t sfs_seg_read_buf_bytes(uint32_t len);

/*
 * Read object key into buf (4096-aligned, buf_len >= sfs_seg_read_buf_bytes
 * of its length) and verify it. On success sets *data to its first byte
 * inside buf and returns its length. -ENOENT: not present. -EBADMSG: it did
 * not check, was short, or its segment is gone: the entry is dropped (a
 * miss). -EINVAL: buf is too small or not 4096-aligned (nothing dropped).
 * Another -errno: an I/O error (the entry is dropped too). Marks the
 * segment used (for lru). Any thread; blocks on one pread.
 */
ssize_t sfs_seg_read(sfs_seg *sg, const uint8_t key[16], void *buf, size_t buf_len,
		     const char **data);

/*
 * sfs_seg_read, split in two so that the disk works while the caller does
 * something else: start reads key's record into buf (as sfs_seg_read) and
 * returns at once; *out, owned by the caller, must be passed to
 * sfs_seg_read_finish exactly once (buf must stay valid until then), which
 * waits for the read if it has not landed and returns what sfs_seg_read
 * would. Start returns 0, -ENOENT (not present), -EINVAL (buf), -EAGAIN (too
 * many started and not finished), -ENOSYS (no kernel AIO) or another -errno;
 * nothing to finish then. Any threads: one may start and another finish.
 */
struct sfs_seg_aio;
int sfs_seg_read_start(sfs_seg *sg, const uint8_t key[16], void *buf, size_t buf_len,
		       struct sfs_seg_aio **out);
ssize_t sfs_seg_read_finish(sfs_seg *sg, struct sfs_seg_aio *a, const char **data);
/*
 * Append an object to the write buffer (copies the bytes, hashes them),
 * recording the id of its dataset (datasets.h; 0: unknown).
 * Not visible until sfs_seg_flush() succeeds. Returns 0; -EEXIST if key is
 * present or already appended; -ENOBUFS if the write buffer has no room
 * (flush, then append again); -E2BIG if len > SFS_SEG_MAX_OBJECT or 0;
 * -EMLINK if dataset would be the 8,193rd distinct id (not admitted).
 * sfs_seg_flush() returns -ENOSPC, and publishes nothing, when its new
 * segments would take more than 2^18 segment files.
 * Writer thread only.
 */
int sfs_seg_append(sfs_seg *sg, const uint8_t key[16], const void *bytes, uint32_t len,
		   uint32_t dataset);

/*
 * Make every appended record durable and visible: one write of the buffer
 * (two when it crosses into a new segment; a full segment is sealed and its
 * .idx written) and one fdatasync. Returns 0, or -errno: then none of the
 * records appended since the last flush becomes visible. Writer thread only.
 */
int sfs_seg_flush(sfs_seg *sg);

/*
 * The least recently used segment that may be evicted (any but the one
 * being filled): its last use in CLOCK_MONOTONIC ms and its disk bytes.
 * Returns false if there is none. Any thread.
 */
bool sfs_seg_coldest(sfs_seg *sg, uint64_t *last_use_ms, uint64_t *bytes);

/*
 * Evict that segment: its entries leave the index, the files are unlinked
 * (closed once no reader holds it). Returns the disk bytes freed, 0 if
 * there was nothing to evict. Writer thread only.
 */
uint64_t sfs_seg_evict_coldest(sfs_seg *sg);

/* Whether a segment of `bytes` disk bytes whose records are of dataset
 * `dataset` (0: unknown or several) may be taken. Called under segment.c's
 * lock: must not call in. */
typedef bool sfs_seg_dataset_fn(void *arg, uint32_t dataset, uint64_t bytes);

/* As sfs_seg_coldest, among the segments ok() accepts: the chosen one's
 * last use and sequence number (for sfs_seg_evict_seq). Any thread. */
bool sfs_seg_coldest_of(sfs_seg *sg, sfs_seg_dataset_fn *ok, void *arg, uint64_t *last_use_ms,
			uint32_t *seq);

/* Evict segment seq as sfs_seg_evict_coldest would; 0 if it is gone or
 * being filled. Writer thread only. */
uint64_t sfs_seg_evict_seq(sfs_seg *sg, uint32_t seq);

/* Call fn(arg, dataset, bytes) for every segment file (the one being
 * filled too): its dataset (0 when unknown or several) and its disk bytes.
 * Under the lock (fn must not call in); a scan of the segment table, not
 * of the index. Any thread. */
void sfs_seg_foreach_segment(sfs_seg *sg, void (*fn)(void *arg, uint32_t dataset, uint64_t bytes),
			     void *arg);

/* Call fn(arg, dataset, len) for every live object, under the lock (fn
 * must not call in), dropped between stretches of the table: objects added
 * or dropped meanwhile may be missed or seen twice. A scan of the index,
 * for listings. Any thread. */
void sfs_seg_foreach(sfs_seg *sg, void (*fn)(void *arg, uint32_t dataset, uint32_t len), void *arg);

struct sfs_seg_evicted {
	uint64_t objects;    /* records dropped */
	uint64_t bytes;	     /* their object bytes */
	uint64_t disk_bytes; /* segment files deleted because nothing was left in them */
};

/* Whether an eviction takes the object of dataset `dataset` whose key
 * begins with the 8 bytes key8 (the index keeps no more of a key; keys are
 * uniform hashes, so 8 bytes tell them apart). */
typedef bool sfs_seg_match_fn(void *arg, uint32_t dataset, const uint8_t key8[8]);

/*
 * Drop every object match() accepts (match NULL: every object). Each segment that lost records gets
 * a new .idx without them (a restart does not bring them back); one left empty is deleted. The
 * segment being filled, if it lost any, is sealed first. The disk space of
 * dropped records in segments that keep others stays until that segment is
 * evicted. A reader already past its lookup still reads and verifies the
 * old record (the file is not rewritten): never a wrong byte. Returns 0 or
 * the first -errno of writing a summary (its records come back at the next
 * open). Writer thread only.
 */
int sfs_seg_evict_where(sfs_seg *sg, sfs_seg_match_fn *match, void *arg,
			struct sfs_seg_evicted *out);

void sfs_seg_get_stats(sfs_seg *sg, struct sfs_seg_stats *out);

#endif
