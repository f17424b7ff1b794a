// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/offer — the offer of fetched chunks to the store (write-behind):
 * whether a chunk may be offered (all of it fetched from the origin, and
 * the writes waiting within their share of the budget: write_admitted);
 * its 16 KiB sub-blocks hashed as the bytes land (chunk_place), so that the
 * writer need not hash them again; the offer (chunk_offer: the write pins
 * the chunk and holds a file reference until it is durable); and the
 * write's completion (write_done), which lets the buffer of a chunk now in
 * the store go unless a reader still wants it, and moves the shard pump on.
 * Not here: what the store takes and how it writes (cache/store/writer.c);
 * the chunk's fetch and state (chunks.c).
 *
 * Threading: callers hold the chunk's file lock where a function says so;
 * chunk_place runs on origin I/O threads, several at once for one chunk
 * (each part sets its own bits); write_done runs on the store's writer
 * thread and never blocks. prefetch_int.h has the lock order.
 */
#include "prefetch_int.h"

/* --- admission --------------------------------------------------------------- */

/* Whether buf_bytes more of writes waiting would hold more than limit. */
static bool write_behind_over(sfs_prefetch *pf, uint32_t buf_bytes, uint64_t limit)
{
	uint64_t pinned = __atomic_load_n(&pf->stats.write_pinned_bytes, __ATOMIC_RELAXED);
	return pinned + buf_bytes > limit;
}

/* The bytes the writes waiting may hold for chunk c to be offered to the
 * store (see write_admitted). Caller holds the chunk's file lock. */
static uint64_t write_limit(const sfs_prefetch *pf, const struct pf_chunk *c)
{
	if (c->file->warmed)
		return UINT64_MAX;
	return c->readahead ? pf->conf.mem_bytes / 2 : pf->conf.mem_bytes;
}

/* Whether a reader's own chunk of bytes fetched now would be refused by
 * write_admitted: the writes waiting hold the budget. */
bool write_behind_full(sfs_prefetch *pf, uint32_t buf_bytes)
{
	return write_behind_over(pf, buf_bytes, pf->conf.mem_bytes);
}

/*
 * Whether a fetched chunk may be offered to the cache. Its buffer stays
 * pinned until the write is durable, so when the cache disk is slower than
 * the network the writes waiting would hold memory without bound, many
 * times the budget.
 *
 * A chunk fetched ahead (readahead, the pump) is offered while the writes
 * waiting hold at most half the budget; past that it serves its reader from
 * memory and is not cached this time (counted). The other half keeps the
 * fetch ahead of the readers, so they go on at network speed and the cache
 * takes what its disk can write meanwhile. (When every such chunk was
 * offered, the writes held the whole budget behind a slow disk, the pump
 * and readahead stopped, and readers fetched their own chunks one at a
 * time: a cold epoch with cache_dir ran at the disk's pace.) A reader's own
 * chunk is offered while the writes hold less than the whole budget; past
 * it, it is not cached and its buffer goes once read. A warm-up
 * (sfs_pf_file_warm) is there to fill the cache: its chunks are always
 * offered, and its pump waits for the budget, so it goes at disk speed.
 * write_limit says which. Caller holds the chunk's file lock.
 */
bool write_admitted(sfs_prefetch *pf, const struct pf_chunk *c)
{
	if (!write_behind_over(pf, c->buf_bytes, write_limit(pf, c)))
		return true;
	count(&pf->stats.write_skipped_bytes, c->len);
	return false;
}

/* Whether chunk c's sub-blocks are hashed as they land (chunk_place): only
 * for the store's per-file layout (objects of one chunk or less are packed,
 * with one checksum of their own), and only while the chunk would be
 * offered (write_admitted) and taken (pin full, a chunk present). Caller
 * holds the chunk's file lock. */
bool hash_as_landed(const struct pf_chunk *c)
{
	const struct sfs_pf_file *f = c->file;

	return f->obj && f->size > SFS_CHUNK_BYTES &&
	       !write_behind_over(f->pf, c->buf_bytes, write_limit(f->pf, c)) &&
	       sfs_store_would_take(f->obj, (uint32_t)c->index, c->fetch_len);
}

/*
 * Place a piece of a part's reply in its chunk: copied, and every 16 KiB
 * sub-block that the piece holds whole hashed right after its copy, while
 * its bytes are in the CPU's cache, for the store's record (cheaper than the
 * writer hashing the chunk again from memory later). A sub-block split
 * between pieces or parts (an rsize that is no multiple of 16 KiB, a short
 * reply) is left to the writer. An I/O thread; parts of one chunk may
 * land at once on several, each setting its own bits.
 */
void chunk_place(struct sfs_origin_req *r, void *dst, const void *src, uint32_t n)
{
	struct pf_chunk *c = r->arg;
	const uint32_t sub = 1u << SFS_STORE_SUB_SHIFT;
	char *d = dst;
	const char *s = src;
	uint64_t from = (uint64_t)(d - c->buf), to = from + n, at = from, known = 0;

	for (uint64_t k = (from + sub - 1) >> SFS_STORE_SUB_SHIFT;; k++) {
		uint64_t b0 = k << SFS_STORE_SUB_SHIFT;
		uint64_t b1 = b0 + sub < c->fetch_len ? b0 + sub : c->fetch_len;
		if (b0 >= c->fetch_len || b1 > to)
			break;
		memcpy(d + (at - from), s + (at - from), b1 - at); /* a head before b0 too */
		c->sub_xxh64[k] = sfs_xxh3_64(d + (b0 - from), b1 - b0);
		known |= 1ull << k;
		at = b1;
	}
	if (to > at)
		memcpy(d + (at - from), s + (at - from), to - at);
	if (known)
		__atomic_fetch_or(&c->sub_known, known, __ATOMIC_RELEASE);
}

/* --- the offer and its completion -------------------------------------------- */

/* Whether READY chunk c holds what the store may take: all of a chunk
 * fetched from the origin, not yet durable there. Caller holds lock. */
bool chunk_storable(const struct sfs_pf_file *f, const struct pf_chunk *c)
{
	return !c->err && f->obj && c->len == c->fetch_len && !c->loaded && !c->in_store;
}

static void write_done(void *arg, int err);

/* Queue c's bytes for the store. Returns true if queued: the write pins c
 * until write_done and holds a file reference, which the caller gives it.
 * False when the store refuses (present or being written, pin full,
 * offline). Caller holds lock. */
bool chunk_offer(struct sfs_pf_file *f, struct pf_chunk *c)
{
	assert(c->state == CHUNK_READY && chunk_storable(f, c));
	uint64_t known = __atomic_load_n(&c->sub_known, __ATOMIC_ACQUIRE);
	if (sfs_store_write_chunk_hashed(f->obj, (uint32_t)c->index, c->buf, c->len, c->sub_xxh64,
					 known, write_done, c) != 0)
		return false;
	chunk_pin(c); /* the writer reads the buffer until done */
	count(&f->pf->stats.write_pinned_bytes, c->buf_bytes);
	return true;
}

/* Store write completion: runs on the store's writer thread. */
static void write_done(void *arg, int err)
{
	struct pf_chunk *c = arg;
	struct sfs_pf_file *f = c->file;
	struct pf_chunk *started[SFS_PF_MAX_WINDOW];
	size_t n_started = 0;

	count(&f->pf->stats.write_pinned_bytes, -(int64_t)c->buf_bytes);
	pthread_mutex_lock(&f->lock);
	assert(c->state == CHUNK_READY && !c->in_store && !c->loaded);
	chunk_unpin(c);
	c->in_store = err == 0;
	/* Bytes durable in the store need no memory: drop the buffer unless a
	 * reader pins it, used it and has not finished it, or is still to
	 * come to it (chunk_awaits_reader). */
	if (c->in_store && !chunk_busy(c) && (c->consumed || !c->used) &&
	    !chunk_awaits_reader(f, c))
		chunk_free_ptr(f, c);
	pthread_cond_broadcast(&f->cond);
	shard_pump(f, started, &n_started, SFS_PF_MAX_WINDOW);
	bool last = file_put_locked(f); /* chunks just started hold their own refs */
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n_started);
	if (last)
		file_free(f);
}
