// SPDX-License-Identifier: Apache-2.0
/*
 * segment — the packed small-object log. See segment.h for the contract.
 *
 * Owns the segment files under conf->dir, the index (key -> record), the
 * segment table, the open-fd cache and the write buffer. Does not own keys,
 * admission, capacity or threads (the store's).
 *
 * On disk (little-endian, native layout):
 *
 *   NNNNNNNN.seg   records, each 4096-aligned:
 *     [0, 8)    magic "SFSSEGR2"          [24, 28) len (1 .. 1 MiB)
 *     [8, 24)   key                       [28, 32) dataset id (datasets.h)
 *     [32, 40)  XXH3-64 of the bytes      [40, 56) zero
 *     [56, 64)  XXH3-64 of these 64 bytes with [56, 64) zero
 *     [64, 64 + len) the bytes, then zeros to the next 4096 boundary.
 *     A record longer than segment_bytes gets a segment of its own (the
 *     only case where a segment exceeds segment_bytes).
 *   NNNNNNNN.idx   a sealed segment's summary:
 *     [0, 32)   struct idx_head {magic "SFSSEGI2", seq, n, end_bytes, 0}
 *     then n    struct idx_ent {key, xxh64, off4k, len, dataset, 0} (40 bytes
 *               each)
 *     then      XXH3-64 of everything before it (8 bytes)
 *   written as NNNNNNNN.idx.tmp, fdatasync'd, renamed, directory fsync'd.
 *   Valid when the checksum matches, seq matches the name and the .seg is at
 *   least end_bytes long (end_bytes >= every entry's end). An eviction
 *   rewrites the .idx of each segment it took records from (without them),
 *   so that a restart does not bring them back; a segment left without
 *   records is deleted.
 *   Older layouts ("SFSSEGR1" records, "SFSSEGI1" summaries, which had no
 *   dataset) do not check: their segments are scanned, hold no good record
 *   and are removed at open.
 *
 * In memory:
 *
 *   sg->parts[N_PARTS]  the index: 64 tables, one per value of the key's
 *                 top 6 bits, so that a doubling copies a 64th of the index
 *                 and the memory peak while the index grows is the index
 *                 plus one part's old table, not twice the index. Each:
 *                 open addressing, linear probing, backward-shift deletion,
 *                 load <= 0.8, doubling; struct ent is 16 bytes, so 16-32
 *                 bytes per object (20 at 0.8 load, 32 just after doubling).
 *                 An entry keeps the first 8 bytes of its key (the key is a
 *                 uniform hash; the part number is 6 of them), the segment
 *                 slot, offset, length and dataset packed, and no checksum:
 *                 a read checks the whole key and the bytes against the
 *                 record's own header, whose checksum it checks first; a
 *                 summary rewritten by an eviction takes the full entries
 *                 from the segment's old .idx (or, for the segment being
 *                 filled, act_ents).
 *                 the entry's slot -> sg->segs[slot] (struct seg: one per
 *                 segment file; slot reused once an evicted segment is
 *                 unreferenced); its dsi -> sg->ds_ids[dsi], the dataset id
 *                 (one 4-byte id per distinct dataset, not per object)
 *   writer state  wbuf (records being appended), pend[] (their keys and
 *                 where each goes), act (the segment being filled) and
 *                 act_ents[] (its records so far, for its .idx)
 *
 * Locking: sg->lock (a leaf) protects tab, segs[] and every struct seg's
 * fields except the writer-only ones marked so; it is never held across a
 * syscall other than clock_gettime. The writer state is touched only by
 * the writer thread (sfs_seg_append/flush/evict_coldest), one at a time.
 * A reader holds a reference (seg->refs) on a segment across its pread; an
 * evicted segment (dead) is freed and its fd closed by the last unref.
 */
#include "segment.h"
#include "../common/fileio.h"
#include "../common/hash.h"
#include "../common/iobuf.h"
#include "../common/log.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define REC_MAGIC	  0x3252474553534653ull /* "SFSSEGR2": with the dataset id */
#define IDX_MAGIC	  0x3249474553534653ull /* "SFSSEGI2": with the dataset id */
#define BLK		  4096u
#define HDR_BYTES	  64u
#define MAX_OPEN_FDS	  256u
#define DEFAULT_SEG_BYTES (256ull << 20)
#define DEFAULT_WBUF	  (8u << 20)
#define PART_BITS	  6u
#define N_PARTS		  (1u << PART_BITS)
#define MIN_PART_CAP	  8u
#define SEG_NAME_LEN	  12 /* "NNNNNNNN.seg" */

struct rec_hdr {
	uint64_t magic;
	uint8_t key[16];
	uint32_t len;
	uint32_t dataset;
	uint64_t xxh64;
	uint64_t zero1[2];
	uint64_t hdr_xxh;
};
_Static_assert(sizeof(struct rec_hdr) == HDR_BYTES, "record header layout");

struct idx_head {
	uint64_t magic;
	uint32_t seq;
	uint32_t n;
	uint64_t end_bytes;
	uint64_t zero;
};
_Static_assert(sizeof(struct idx_head) == 32, "idx header layout");

struct idx_ent {
	uint8_t key[16];
	uint64_t xxh64;
	uint32_t off4k;
	uint32_t len;
	uint32_t dataset;
	uint32_t zero;
};
_Static_assert(sizeof(struct idx_ent) == 40, "idx entry layout");

/*
 * One index slot, 16 bytes: the index holds one per cached object, millions
 * of them. Two words of packed fields (ent_make and the ent_* accessors
 * below are the only code that knows the layout):
 *   w0  [0, 58)  the key's first 8 bytes (key8) but its top PART_BITS,
 *                which are the number of the part holding the slot
 *       [58, 64) loc's top 6 bits
 *   w1  [0, 21)  len, 1 .. SFS_SEG_MAX_OBJECT; 0: an empty slot
 *       [21, 34) dsi: the dataset, as an index into sg->ds_ids
 *       [34, 64) loc's low 30 bits
 *   loc = segment slot << OFF_BITS | offset in 4 KiB blocks.
 * Hence the limits: 2^SLOT_BITS segment slots, records starting in the
 * first 2^OFF_BITS blocks of a segment (segment_bytes <= MAX_SEG_BYTES),
 * 2^DSI_BITS distinct datasets per directory.
 */
struct ent {
	uint64_t w0, w1;
};
_Static_assert(sizeof(struct ent) == 16, "index entry is 16 bytes");

#define KEY_BITS      (64u - PART_BITS)
#define LEN_BITS      21u
#define DSI_BITS      13u
#define OFF_BITS      18u
#define SLOT_BITS     18u
#define LOC_LO_BITS   (64u - LEN_BITS - DSI_BITS)
#define KEY_MASK      ((1ull << KEY_BITS) - 1)
#define MAX_SEGS      (1u << SLOT_BITS)
#define MAX_DSETS     (1u << DSI_BITS)
#define MAX_SEG_BYTES ((uint64_t)BLK << OFF_BITS) /* 1 GiB */
_Static_assert(KEY_BITS + LEN_BITS + DSI_BITS + OFF_BITS + SLOT_BITS == 128, "16 bytes");
_Static_assert(SFS_SEG_MAX_OBJECT < (1u << LEN_BITS), "len fits");

static struct ent ent_make(uint64_t key8, uint32_t slot, uint32_t off4k, uint32_t len, uint32_t dsi)
{
	uint64_t loc = (uint64_t)slot << OFF_BITS | off4k;
	return (struct ent){.w0 = (key8 & KEY_MASK) | (loc >> LOC_LO_BITS) << KEY_BITS,
			    .w1 = len | (uint64_t)dsi << LEN_BITS | loc << (LEN_BITS + DSI_BITS)};
}

static uint64_t ent_key_lo(const struct ent *e) { return e->w0 & KEY_MASK; }
static uint32_t ent_len(const struct ent *e) { return (uint32_t)(e->w1 & ((1u << LEN_BITS) - 1)); }
static uint32_t ent_dsi(const struct ent *e)
{
	return (uint32_t)(e->w1 >> LEN_BITS) & (MAX_DSETS - 1);
}
static uint64_t ent_loc(const struct ent *e)
{
	return e->w1 >> (LEN_BITS + DSI_BITS) | (e->w0 >> KEY_BITS) << LOC_LO_BITS;
}
static uint32_t ent_slot(const struct ent *e) { return (uint32_t)(ent_loc(e) >> OFF_BITS); }
static uint32_t ent_off4k(const struct ent *e)
{
	return (uint32_t)ent_loc(e) & ((1u << OFF_BITS) - 1);
}

/* One part of the index: the entries whose key's top PART_BITS bits are
 * its number. cap is a power of two, at least MIN_PART_CAP. */
struct part {
	struct ent *tab;
	uint32_t cap, n;
};

struct seg {
	uint32_t seq;	      /* set at creation, then read-only */
	uint32_t slot;	      /* set when published, then read-only */
	int fd;		      /* -1 when closed; protected by lock */
	uint32_t refs;	      /* readers + the writer for act; lock */
	bool dead;	      /* evicted; lock */
	bool active;	      /* the segment being filled; lock */
	uint64_t bytes;	      /* end of the last published record; lock */
	uint64_t last_use_ms; /* lock */
	uint64_t n_live;      /* index entries pointing here; lock */
	bool touched;	      /* an eviction took records from it; lock */
	/* The dataset of its records (tab_put; lock): the first one's, and
	 * mixed once a record of another dataset was placed here. */
	uint32_t dataset;
	bool has_dataset, mixed;
	uint64_t wend; /* end of the records written; writer only */
};

struct pend {
	uint8_t key[16];
	uint64_t xxh64;
	uint32_t len;
	uint32_t dataset;
	uint32_t dsi;	   /* its index in sg->ds_ids */
	uint32_t rel;	   /* 0: act; k >= 1: the k-th segment this flush creates */
	uint64_t file_off; /* offset in that segment */
	uint64_t buf_off;  /* offset in wbuf */
};

/* What a segment holds, from its .idx or a scan. */
struct seg_sum {
	struct idx_ent *ents;
	uint32_t n, cap;
	uint64_t end_bytes;
};

struct sfs_seg {
	char *dir;			 /* set at open, then read-only */
	int dirfd;			 /* set at open, then read-only */
	uint64_t seg_bytes;		 /* set at open, then read-only */
	uint32_t wbuf_cap;		 /* set at open, then read-only */
	bool no_direct;			 /* O_DIRECT refused once (tmpfs); atomic */
	struct sfs_log_ratelimit err_rl; /* flush failure warnings; atomic */
	pthread_mutex_t lock;		 /* a leaf */

	/* protected by lock */
	struct part parts[N_PARTS];
	uint32_t tab_n;	   /* entries, all parts */
	struct seg **segs; /* by slot; NULL = free */
	uint32_t segs_cap;
	uint32_t segs_used; /* slots taken (dead segments still read included) */
	uint32_t n_segs;    /* segments not evicted */
	uint32_t n_open_fds;
	struct sfs_seg_stats st; /* objects, segments, index_bytes computed */
	uint32_t ds_n;		 /* datasets in ds_ids; grows under lock */

	/* ds_ids[dsi]: the dataset id an entry's dsi stands for. MAX_DSETS
	 * slots, filled in order, never changed: by open and the writer
	 * thread (ds_index), each before an entry naming it is published, so
	 * a reader of a published entry holding lock reads a set slot. */
	uint32_t *ds_ids;
	uint32_t ds_last; /* writer: the dsi ds_index found last */

	/* writer thread only */
	uint8_t *wbuf;
	uint32_t wlen;
	struct pend *pend;
	uint32_t n_pend, pend_cap;
	uint32_t tgt_rel;	  /* where the next append goes (struct pend.rel) */
	uint64_t tgt_pos;	  /* and at which offset */
	struct seg *act;	  /* segment being filled (writer holds a ref), or NULL */
	struct idx_ent *act_ents; /* act's records so far */
	uint32_t n_act_ents, act_ents_cap;
	uint32_t next_seq;

	/* Asynchronous reads (sfs_seg_read_start): one kernel AIO context,
	 * made on first use. A completion is reaped by whichever waiter holds
	 * the reaper role and handed to its read; the others sleep on
	 * aio_cond. Lock order: aio_lock, then lock. */
	pthread_mutex_t aio_lock;
	pthread_cond_t aio_cond;
	aio_context_t aio_ctx; /* protected by aio_lock; 0: none yet */
	bool aio_failed;       /* protected by aio_lock: io_setup refused */
	bool aio_reaping;      /* protected by aio_lock: a waiter is in io_getevents */
	uint32_t aio_inflight; /* protected by aio_lock */
};

/* An asynchronous read of one record, started by sfs_seg_read_start. */
struct sfs_seg_aio {
	struct iocb cb;
	uint8_t key[16];
	struct ent e;  /* the entry read */
	struct seg *s; /* referenced until the read is finished */
	void *buf;     /* the caller's, 4096-aligned */
	int64_t res;   /* protected by sg->aio_lock: the completion's result */
	bool done;     /* protected by sg->aio_lock */
};

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static uint64_t rec_bytes(uint32_t len) { return round_up(HDR_BYTES + (uint64_t)len, BLK); }

size_t sfs_seg_read_buf_bytes(uint32_t len) { return (size_t)rec_bytes(len); }

static uint64_t key8_of(const uint8_t key[16])
{
	uint64_t h;
	memcpy(&h, key, 8);
	return h;
}

static void seg_name(char *buf, uint32_t seq, const char *ext)
{
	snprintf(buf, 32, "%08x.%s", seq, ext);
}

/* --- index (caller holds lock) ---------------------------------------------- */

/* The key is already a uniform hash: its top bits pick the part, its low
 * bits the home slot in it. */
static uint32_t part_no(uint64_t key8) { return (uint32_t)(key8 >> (64 - PART_BITS)); }

static struct part *part_of(sfs_seg *sg, uint64_t key8) { return &sg->parts[part_no(key8)]; }

static uint32_t tab_home(const struct part *p, uint64_t key8)
{
	return (uint32_t)(key8 & (p->cap - 1));
}

/* Returns the slot of *pp (key's part) holding key's first 8 bytes, or -1.
 * Two keys alike in those are one entry (a 2^-64 chance per pair): a read
 * of the other's record finds a header of another key, a miss
 * (sfs_seg_read). */
static long tab_find(sfs_seg *sg, const uint8_t key[16], struct part **pp)
{
	uint64_t key8 = key8_of(key);
	struct part *p = part_of(sg, key8);
	uint32_t mask = p->cap - 1;
	*pp = p;
	for (uint32_t i = tab_home(p, key8);; i = (i + 1) & mask) {
		if (!ent_len(&p->tab[i]))
			return -1;
		if (ent_key_lo(&p->tab[i]) == (key8 & KEY_MASK))
			return (long)i;
	}
}

/* Empties slot i of p and shifts later members of its probe run back. */
static void tab_del_at(sfs_seg *sg, struct part *p, uint32_t i)
{
	uint32_t mask = p->cap - 1;
	struct ent *e = &p->tab[i];
	struct seg *s = sg->segs[ent_slot(e)];

	s->n_live--;
	sg->st.live_bytes -= ent_len(e);
	sg->tab_n--;
	p->n--;
	for (uint32_t j = (i + 1) & mask; ent_len(&p->tab[j]); j = (j + 1) & mask) {
		uint32_t home = tab_home(p, ent_key_lo(&p->tab[j]));
		if (((j - home) & mask) >= ((j - i) & mask)) {
			p->tab[i] = p->tab[j];
			i = j;
		}
	}
	p->tab[i] = (struct ent){0};
}

/* Places e in a table known not to hold its key. */
static void tab_place(struct ent *tab, uint32_t cap, const struct ent *e)
{
	uint32_t i = (uint32_t)(ent_key_lo(e) & (cap - 1));
	while (ent_len(&tab[i]))
		i = (i + 1) & (cap - 1);
	tab[i] = *e;
}

/* Doubles part p until n more entries keep it at most 0.8 full. Returns
 * 0 or -ENOMEM (the part is unchanged). */
static int part_reserve(sfs_seg *sg, struct part *p, uint32_t n)
{
	uint32_t cap = p->cap;
	while ((uint64_t)(p->n + n) * 5 > (uint64_t)cap * 4)
		cap *= 2;
	if (cap == p->cap)
		return 0;
	struct ent *tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->cap; i++)
		if (ent_len(&p->tab[i]))
			tab_place(tab, cap, &p->tab[i]);
	free(p->tab);
	p->tab = tab;
	p->cap = cap;
	return 0;
}

/* Room for the pending appends' entries in their parts, so that publishing
 * them cannot fail. Returns 0 or -ENOMEM (parts grown so far stay so). */
static int tab_reserve_pending(sfs_seg *sg)
{
	uint32_t more[N_PARTS] = {0};
	for (uint32_t i = 0; i < sg->n_pend; i++)
		more[part_no(key8_of(sg->pend[i].key))]++;
	for (uint32_t k = 0; k < N_PARTS; k++) {
		int err = more[k] ? part_reserve(sg, &sg->parts[k], more[k]) : 0;
		if (err)
			return err;
	}
	return 0;
}

/* Inserts (or replaces: a later record of a key wins) the entry; dsi is
 * its dataset's index (ds_index). Returns 0, -ENOMEM, or -ERANGE when its
 * offset is past what an entry holds (a segment written with a larger
 * segment_bytes than MAX_SEG_BYTES: never by this code). */
static int tab_put(sfs_seg *sg, const struct idx_ent *ie, struct seg *s, uint32_t dsi)
{
	if (ie->off4k >= 1u << OFF_BITS)
		return -ERANGE;
	struct ent e = ent_make(key8_of(ie->key), s->slot, ie->off4k, ie->len, dsi);
	uint32_t len = ie->len;
	struct part *p;
	long at = tab_find(sg, ie->key, &p);
	if (at >= 0) {
		tab_del_at(sg, p, (uint32_t)at);
	} else {
		int err = part_reserve(sg, p, 1);
		if (err)
			return err;
	}
	tab_place(p->tab, p->cap, &e);
	sg->tab_n++;
	p->n++;
	s->n_live++;
	if (!s->has_dataset) {
		s->dataset = sg->ds_ids[dsi];
		s->has_dataset = true;
	} else if (s->dataset != sg->ds_ids[dsi]) {
		s->mixed = true;
	}
	sg->st.live_bytes += len;
	return 0;
}

/* The index of dataset id in ds_ids, added if new. Returns it, or -EMLINK
 * when MAX_DSETS distinct ids are known already. A scan: the writer's
 * appends come in runs of one dataset, and ds_last answers those. Open and
 * the writer thread only. */
static int ds_index(sfs_seg *sg, uint32_t dataset)
{
	if (sg->ds_last < sg->ds_n && sg->ds_ids[sg->ds_last] == dataset)
		return (int)sg->ds_last;
	for (uint32_t i = 0; i < sg->ds_n; i++)
		if (sg->ds_ids[i] == dataset)
			return (int)(sg->ds_last = i);
	if (sg->ds_n == MAX_DSETS)
		return -EMLINK;
	pthread_mutex_lock(&sg->lock);
	sg->ds_ids[sg->ds_n] = dataset;
	sg->ds_last = sg->ds_n++;
	pthread_mutex_unlock(&sg->lock);
	return (int)sg->ds_last;
}

/* --- segment table (caller holds lock) ---------------------------------------- */

/* Makes room for n more segments. Returns 0, -ENOMEM, or -ENOSPC when
 * that would take more than the MAX_SEGS slots an entry can name. */
static int segs_reserve(sfs_seg *sg, uint32_t n)
{
	if ((uint64_t)sg->segs_used + n > MAX_SEGS)
		return -ENOSPC;
	uint32_t cap = sg->segs_cap ? sg->segs_cap : 64;
	while (cap - sg->segs_used < n)
		cap *= 2;
	if (cap == sg->segs_cap)
		return 0;
	struct seg **v = realloc(sg->segs, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	memset(v + sg->segs_cap, 0, (cap - sg->segs_cap) * sizeof(*v));
	sg->segs = v;
	sg->segs_cap = cap;
	return 0;
}

/* Gives s a slot and counts it. Returns 0 or -ENOMEM. */
static int segs_add(sfs_seg *sg, struct seg *s)
{
	int err = segs_reserve(sg, 1);
	if (err)
		return err;
	uint32_t slot = 0;
	while (sg->segs[slot])
		slot++;
	s->slot = slot;
	sg->segs[slot] = s;
	sg->segs_used++;
	sg->n_segs++;
	sg->st.disk_bytes += s->bytes;
	if (s->fd >= 0)
		sg->n_open_fds++;
	return 0;
}

static struct seg *seg_new(uint32_t seq, int fd, uint64_t bytes)
{
	struct seg *s = calloc(1, sizeof(*s));
	if (s) {
		s->seq = seq;
		s->fd = fd;
		s->bytes = bytes;
		s->last_use_ms = sfs_now_ms();
	}
	return s;
}

/*
 * Drops a reference. When it was the last one of a dead segment, frees the
 * slot and returns the fd the caller must close after unlocking (and the
 * struct to free through *free_me); else returns -1. Caller holds lock.
 */
static int seg_unref_locked(sfs_seg *sg, struct seg *s, struct seg **free_me)
{
	int fd = -1;
	*free_me = NULL;
	if (--s->refs || !s->dead)
		return -1;
	sg->segs[s->slot] = NULL;
	sg->segs_used--;
	fd = s->fd;
	if (fd >= 0)
		sg->n_open_fds--;
	*free_me = s;
	return fd;
}

static void seg_unref(sfs_seg *sg, struct seg *s)
{
	struct seg *free_me;
	pthread_mutex_lock(&sg->lock);
	int fd = seg_unref_locked(sg, s, &free_me);
	pthread_mutex_unlock(&sg->lock);
	if (fd >= 0)
		close(fd);
	free(free_me);
}

/*
 * Opens segment seq for reading (rw for the writer), O_DIRECT unless the
 * filesystem refused it once. Returns the fd or -errno. Any thread, no lock.
 */
static int seg_open_fd(sfs_seg *sg, uint32_t seq, int flags)
{
	char name[32];
	seg_name(name, seq, "seg");
	flags |= O_CLOEXEC;
	if (!__atomic_load_n(&sg->no_direct, __ATOMIC_RELAXED)) {
		int fd = openat(sg->dirfd, name, flags | O_DIRECT, 0600);
		if (fd >= 0 || errno != EINVAL)
			return fd >= 0 ? fd : -errno;
		__atomic_store_n(&sg->no_direct, true, __ATOMIC_RELAXED);
	}
	int fd = openat(sg->dirfd, name, flags, 0600);
	return fd >= 0 ? fd : -errno;
}

/* The least recently used segment with an fd that nobody reads. Caller
 * holds lock. A scan: it runs only when an fd is opened past the bound. */
static struct seg *fd_victim(sfs_seg *sg)
{
	struct seg *best = NULL;
	for (uint32_t i = 0; i < sg->segs_cap; i++) {
		struct seg *s = sg->segs[i];
		if (s && s->fd >= 0 && !s->refs && (!best || s->last_use_ms < best->last_use_ms))
			best = s;
	}
	return best;
}

/*
 * The fd of s, which the caller holds a reference on; opens it if closed
 * (outside the lock) and closes the least recently used idle fd past
 * MAX_OPEN_FDS. Returns the fd (valid while the reference is held) or
 * -errno. Any thread, lock not held.
 */
static int seg_fd(sfs_seg *sg, struct seg *s)
{
	int fd = seg_open_fd(sg, s->seq, O_RDONLY);
	int extra = -1;
	pthread_mutex_lock(&sg->lock);
	if (fd < 0) {
		/* nothing to install */
	} else if (s->fd >= 0) {
		extra = fd;
		fd = s->fd;
	} else {
		s->fd = fd;
		if (++sg->n_open_fds > MAX_OPEN_FDS) {
			struct seg *v = fd_victim(sg);
			if (v) {
				extra = v->fd;
				v->fd = -1;
				sg->n_open_fds--;
			}
		}
	}
	pthread_mutex_unlock(&sg->lock);
	if (extra >= 0)
		close(extra);
	return fd;
}

/* --- reads -------------------------------------------------------------------- */

bool sfs_seg_lookup(sfs_seg *sg, const uint8_t key[16], uint32_t *len)
{
	struct part *p;
	pthread_mutex_lock(&sg->lock);
	long at = tab_find(sg, key, &p);
	if (at >= 0 && len)
		*len = ent_len(&p->tab[at]);
	pthread_mutex_unlock(&sg->lock);
	return at >= 0;
}

static uint64_t hdr_sum(const struct rec_hdr *h)
{
	struct rec_hdr c = *h;
	c.hdr_xxh = 0;
	return sfs_xxh3_64(&c, sizeof(c));
}

/* Whether the record at buf (n bytes read) is key's with length len: its
 * header checks (its own checksum), names key and len, and the bytes hash
 * to the header's XXH3-64. */
static bool rec_check(const uint8_t *buf, ssize_t n, const uint8_t key[16], uint32_t len)
{
	const struct rec_hdr *h = (const struct rec_hdr *)buf;
	if (n < (ssize_t)(HDR_BYTES + len))
		return false;
	if (h->magic != REC_MAGIC || h->len != len || memcmp(h->key, key, 16) ||
	    h->hdr_xxh != hdr_sum(h))
		return false;
	return sfs_xxh3_64(buf + HDR_BYTES, len) == h->xxh64;
}

/* Drops key's entry if it still is the one read (segment slot and offset).
 * Counts the failure. Any thread, lock not held. */
static void drop_entry(sfs_seg *sg, const uint8_t key[16], const struct ent *was, bool io_error)
{
	struct part *p;
	pthread_mutex_lock(&sg->lock);
	long at = tab_find(sg, key, &p);
	if (at >= 0 && ent_loc(&p->tab[at]) == ent_loc(was))
		tab_del_at(sg, p, (uint32_t)at);
	if (io_error)
		sg->st.errors++;
	else
		sg->st.checksum_failures++;
	pthread_mutex_unlock(&sg->lock);
}

ssize_t sfs_seg_read(sfs_seg *sg, const uint8_t key[16], void *buf, size_t buf_len,
		     const char **data)
{
	struct ent e;
	struct part *p;
	struct seg *s;
	int fd;

	pthread_mutex_lock(&sg->lock);
	long at = tab_find(sg, key, &p);
	if (at < 0) {
		pthread_mutex_unlock(&sg->lock);
		return -ENOENT;
	}
	e = p->tab[at];
	uint32_t len = ent_len(&e);
	if (buf_len < rec_bytes(len) || (uintptr_t)buf % BLK) {
		pthread_mutex_unlock(&sg->lock);
		return -EINVAL;
	}
	s = sg->segs[ent_slot(&e)];
	s->refs++;
	s->last_use_ms = sfs_now_ms();
	fd = s->fd;
	pthread_mutex_unlock(&sg->lock);

	if (fd < 0)
		fd = seg_fd(sg, s);
	ssize_t n = 0;
	int err = fd < 0 ? fd : 0;
	if (!err) {
		n = pread(fd, buf, rec_bytes(len), (off_t)ent_off4k(&e) * BLK);
		if (n < 0)
			err = -errno;
	}
	seg_unref(sg, s);
	if (!err && rec_check(buf, n, key, len)) {
		*data = (const char *)buf + HDR_BYTES;
		return len;
	}
	/* A vanished segment, a short read or bytes that do not check: a miss. */
	bool io_error = err && err != -ENOENT;
	drop_entry(sg, key, &e, io_error);
	return io_error ? err : -EBADMSG;
}

/* --- asynchronous reads ------------------------------------------------------- */

/*
 * Kernel AIO, not io_uring: an io_uring read completes through task work of
 * the thread that submitted it, and here the read is started by one FUSE
 * worker (at OPEN) and finished by another (at READ); an AIO completion is
 * posted from the disk's interrupt into the context's ring, where any
 * thread reaps it, and wakes nobody when nobody waits.
 */
#define AIO_EVENTS    256 /* the context's ring */
#define AIO_MAX_READS 128 /* started and not finished; more start nothing */

static long aio_setup(unsigned n, aio_context_t *ctx) { return syscall(SYS_io_setup, n, ctx); }

static long aio_submit(aio_context_t ctx, long n, struct iocb **cbs)
{
	return syscall(SYS_io_submit, ctx, n, cbs);
}

static long aio_getevents(aio_context_t ctx, long min, long max, struct io_event *ev)
{
	return syscall(SYS_io_getevents, ctx, min, max, ev, NULL);
}

/* Claim a slot for one more read, making the context on first use. Returns
 * 0 or -errno (-ENOSYS: no AIO here, -EAGAIN: too many in flight). */
static int aio_claim(sfs_seg *sg)
{
	int err = 0;

	pthread_mutex_lock(&sg->aio_lock);
	if (sg->aio_failed)
		err = -ENOSYS;
	else if (!sg->aio_ctx && aio_setup(AIO_EVENTS, &sg->aio_ctx) < 0) {
		sg->aio_ctx = 0;
		sg->aio_failed = true;
		err = -ENOSYS;
	} else if (sg->aio_inflight >= AIO_MAX_READS)
		err = -EAGAIN;
	else
		sg->aio_inflight++;
	pthread_mutex_unlock(&sg->aio_lock);
	return err;
}

int sfs_seg_read_start(sfs_seg *sg, const uint8_t key[16], void *buf, size_t buf_len,
		       struct sfs_seg_aio **out)
{
	struct sfs_seg_aio *a;
	struct part *p;
	int err;

	if ((uintptr_t)buf % BLK)
		return -EINVAL;
	if (!sfs_seg_lookup(sg, key, NULL)) /* a cold file: nothing to claim */
		return -ENOENT;
	if (!(a = calloc(1, sizeof(*a))))
		return -ENOMEM;
	memcpy(a->key, key, 16);
	a->buf = buf;
	pthread_mutex_lock(&sg->lock);
	long at = tab_find(sg, key, &p);
	if (at >= 0) {
		a->e = p->tab[at];
		a->s = sg->segs[ent_slot(&a->e)];
		a->s->refs++;
		a->s->last_use_ms = sfs_now_ms();
	}
	int fd = a->s ? a->s->fd : -1;
	pthread_mutex_unlock(&sg->lock);
	err = -ENOENT;
	if (!a->s)
		goto err_free;
	err = -EINVAL;
	if (buf_len < rec_bytes(ent_len(&a->e)))
		goto err_unref;
	if (fd < 0 && (err = fd = seg_fd(sg, a->s)) < 0)
		goto err_unref;
	a->cb.aio_data = (uint64_t)(uintptr_t)a;
	a->cb.aio_lio_opcode = IOCB_CMD_PREAD;
	a->cb.aio_fildes = (uint32_t)fd;
	a->cb.aio_buf = (uint64_t)(uintptr_t)buf;
	a->cb.aio_nbytes = rec_bytes(ent_len(&a->e));
	a->cb.aio_offset = (int64_t)ent_off4k(&a->e) * BLK;
	/* Claimed once a is written: whichever thread reaps its completion
	 * (aio_wait) writes a->res and a->done under aio_lock, and the claim's
	 * release of that lock is what orders a's writes here before those
	 * (the kernel's submit-then-complete order is not a C or TSan edge). */
	if ((err = aio_claim(sg)) < 0)
		goto err_unref;
	struct iocb *cbs[1] = {&a->cb};
	if (aio_submit(sg->aio_ctx, 1, cbs) != 1) {
		err = -errno;
		goto err_unclaim;
	}
	*out = a;
	return 0;

err_unclaim:
	pthread_mutex_lock(&sg->aio_lock);
	sg->aio_inflight--;
	pthread_mutex_unlock(&sg->aio_lock);
err_unref:
	seg_unref(sg, a->s);
err_free:
	free(a);
	return err;
}

/* Wait until a's completion has been reaped: reap as the one reaper, or
 * sleep until the reaper hands it over. Lock not held. */
static void aio_wait(sfs_seg *sg, struct sfs_seg_aio *a)
{
	struct io_event ev[16];

	pthread_mutex_lock(&sg->aio_lock);
	while (!a->done) {
		if (sg->aio_reaping) {
			pthread_cond_wait(&sg->aio_cond, &sg->aio_lock);
			continue;
		}
		sg->aio_reaping = true;
		pthread_mutex_unlock(&sg->aio_lock);
		long n = aio_getevents(sg->aio_ctx, 1, 16, ev);
		pthread_mutex_lock(&sg->aio_lock);
		sg->aio_reaping = false;
		for (long k = 0; k < n; k++) {
			struct sfs_seg_aio *d = (struct sfs_seg_aio *)(uintptr_t)ev[k].data;
			d->res = ev[k].res;
			d->done = true;
		}
		/* Hand the role on (or the others' results over): every waiter
		 * looks again. */
		pthread_cond_broadcast(&sg->aio_cond);
	}
	sg->aio_inflight--;
	pthread_mutex_unlock(&sg->aio_lock);
}

ssize_t sfs_seg_read_finish(sfs_seg *sg, struct sfs_seg_aio *a, const char **data)
{
	aio_wait(sg, a);
	uint32_t len = ent_len(&a->e);
	ssize_t n = (ssize_t)a->res;
	int err = n < 0 ? (int)n : 0;
	struct ent e = a->e;
	uint8_t key[16];

	memcpy(key, a->key, 16);
	seg_unref(sg, a->s);
	if (!err && rec_check(a->buf, n, key, len)) {
		*data = (const char *)a->buf + HDR_BYTES;
		free(a);
		return len;
	}
	free(a);
	bool io_error = err && err != -ENOENT;
	drop_entry(sg, key, &e, io_error);
	return io_error ? err : -EBADMSG;
}

/* --- writing ------------------------------------------------------------------ */

/*
 * Writes DIR/NNNNNNNN.idx for segment seq: n entries, the records ending at
 * end_bytes. Temp file, fdatasync, rename, directory fsync. Returns 0 or
 * -errno (then no .idx exists and the segment is scanned at the next open).
 * Writer thread (or open), no lock.
 */
static int write_idx(sfs_seg *sg, uint32_t seq, const struct idx_ent *ents, uint32_t n,
		     uint64_t end_bytes)
{
	size_t size = sizeof(struct idx_head) + (size_t)n * sizeof(*ents) + 8;
	uint8_t *buf = malloc(size);
	char tmp[32], name[32];
	int err = -ENOMEM;

	if (!buf)
		return err;
	struct idx_head h = {.magic = IDX_MAGIC, .seq = seq, .n = n, .end_bytes = end_bytes};
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), ents, (size_t)n * sizeof(*ents));
	uint64_t sum = sfs_xxh3_64(buf, size - 8);
	memcpy(buf + size - 8, &sum, 8);
	seg_name(name, seq, "idx");
	seg_name(tmp, seq, "idx.tmp");
	int fd = openat(sg->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = -errno;
		goto err_free;
	}
	err = sfs_pwrite_all(fd, buf, size, 0);
	if (!err && fdatasync(fd))
		err = -errno;
	close(fd);
	if (!err && renameat(sg->dirfd, tmp, sg->dirfd, name))
		err = -errno;
	if (err)
		unlinkat(sg->dirfd, tmp, 0);
	else if (fsync(sg->dirfd))
		err = -errno;
err_free:
	free(buf);
	return err;
}

/* Adds an .idx entry for the segment being written. Returns 0 or -ENOMEM. */
static int act_ents_add(sfs_seg *sg, const struct pend *p)
{
	if (sg->n_act_ents == sg->act_ents_cap) {
		uint32_t cap = sg->act_ents_cap ? sg->act_ents_cap * 2 : 256;
		struct idx_ent *v = realloc(sg->act_ents, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		sg->act_ents = v;
		sg->act_ents_cap = cap;
	}
	struct idx_ent *e = &sg->act_ents[sg->n_act_ents++];
	memcpy(e->key, p->key, 16);
	e->xxh64 = p->xxh64;
	e->off4k = (uint32_t)(p->file_off / BLK);
	e->len = p->len;
	e->dataset = p->dataset;
	e->zero = 0;
	return 0;
}

static bool pending_has(const sfs_seg *sg, const uint8_t key[16])
{
	for (uint32_t i = 0; i < sg->n_pend; i++)
		if (!memcmp(sg->pend[i].key, key, 16))
			return true;
	return false;
}

int sfs_seg_append(sfs_seg *sg, const uint8_t key[16], const void *bytes, uint32_t len,
		   uint32_t dataset)
{
	uint64_t rb = rec_bytes(len);

	if (!len || len > SFS_SEG_MAX_OBJECT)
		return -E2BIG;
	if (pending_has(sg, key) || sfs_seg_lookup(sg, key, NULL))
		return -EEXIST;
	if (sg->wlen + rb > sg->wbuf_cap)
		return -ENOBUFS;
	int dsi = ds_index(sg, dataset);
	if (dsi < 0)
		return dsi;
	if (sg->n_pend == sg->pend_cap) {
		uint32_t cap = sg->pend_cap ? sg->pend_cap * 2 : 64;
		struct pend *v = realloc(sg->pend, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		sg->pend = v;
		sg->pend_cap = cap;
	}
	/* A record that does not fit starts the next segment (a record longer
	 * than a segment gets one of its own). */
	if (sg->tgt_pos && sg->tgt_pos + rb > sg->seg_bytes) {
		sg->tgt_rel++;
		sg->tgt_pos = 0;
	}
	struct pend *p = &sg->pend[sg->n_pend++];
	memcpy(p->key, key, 16);
	p->len = len;
	p->dataset = dataset;
	p->dsi = (uint32_t)dsi;
	p->xxh64 = sfs_xxh3_64(bytes, len);
	p->rel = sg->tgt_rel;
	p->file_off = sg->tgt_pos;
	p->buf_off = sg->wlen;

	uint8_t *r = sg->wbuf + sg->wlen;
	struct rec_hdr h = {.magic = REC_MAGIC, .len = len, .dataset = dataset, .xxh64 = p->xxh64};
	memcpy(h.key, key, 16);
	h.hdr_xxh = hdr_sum(&h);
	memcpy(r, &h, sizeof(h));
	sfs_copy_stream(r + HDR_BYTES, bytes, len); /* for the disk's DMA, not for us */
	memset(r + HDR_BYTES + len, 0, rb - HDR_BYTES - len);
	sg->wlen += (uint32_t)rb;
	sg->tgt_pos += rb;
	return 0;
}

/* Creates the next segment file (and makes its name durable). Returns 0 and
 * the new segment (writer's reference held, not yet published), or -errno. */
static int seg_create(sfs_seg *sg, struct seg **out)
{
	uint32_t seq = sg->next_seq++;
	char name[32];
	int err;

	/* Created first without O_DIRECT: a filesystem refusing O_DIRECT
	 * may create the file before it says EINVAL. */
	seg_name(name, seq, "seg");
	int fd = openat(sg->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	close(fd);
	fd = seg_open_fd(sg, seq, O_RDWR);
	if (fd < 0) {
		err = fd;
		goto err_unlink;
	}
	if (fsync(sg->dirfd)) {
		err = -errno;
		goto err_close;
	}
	struct seg *s = seg_new(seq, fd, 0);
	if (!s) {
		err = -ENOMEM;
		goto err_close;
	}
	s->refs = 1;
	*out = s;
	return 0;
err_close:
	close(fd);
err_unlink:
	unlinkat(sg->dirfd, name, 0);
	return err;
}

/* Writes pend[i, j) (one segment's run: contiguous in wbuf and in the file)
 * to s and fdatasyncs it. Returns 0 or -errno. */
static int write_run(sfs_seg *sg, struct seg *s, uint32_t i, uint32_t j)
{
	const struct pend *a = &sg->pend[i], *z = &sg->pend[j - 1];
	uint64_t n = z->buf_off + rec_bytes(z->len) - a->buf_off;
	int err = sfs_pwrite_all(s->fd, sg->wbuf + a->buf_off, n, (off_t)a->file_off);
	if (!err && fdatasync(s->fd))
		err = -errno;
	if (err)
		return err;
	for (uint32_t k = i; k < j; k++) {
		err = act_ents_add(sg, &sg->pend[k]);
		if (err)
			return err;
	}
	s->wend = a->file_off + n;
	return 0;
}

/*
 * Writes the pending records, run by run: a run for a new segment first
 * seals the previous one (its .idx), then creates the file. nw[0] is act,
 * nw[k] the k-th new segment (filled in here). Returns 0 or -errno.
 */
static int write_runs(sfs_seg *sg, struct seg **nw)
{
	for (uint32_t i = 0, j; i < sg->n_pend; i = j) {
		uint32_t rel = sg->pend[i].rel;
		int err;

		for (j = i; j < sg->n_pend && sg->pend[j].rel == rel;)
			j++;
		if (rel > 0) {
			struct seg *prev = nw[rel - 1];
			if (prev) {
				/* best effort: without .idx it is scanned at open */
				write_idx(sg, prev->seq, sg->act_ents, sg->n_act_ents, prev->wend);
			}
			sg->n_act_ents = 0;
			err = seg_create(sg, &nw[rel]);
			if (err)
				return err;
		}
		err = write_run(sg, nw[rel], i, j);
		if (err)
			return err;
	}
	return 0;
}

/* Room for everything a flush publishes, so that publishing cannot fail.
 * Returns 0 or -ENOMEM. Takes the lock. */
static int reserve_publish(sfs_seg *sg, uint32_t n_new)
{
	pthread_mutex_lock(&sg->lock);
	int err = tab_reserve_pending(sg);
	if (!err)
		err = segs_reserve(sg, n_new);
	pthread_mutex_unlock(&sg->lock);
	return err;
}

/* Makes a written run's segment end visible. Caller holds lock. */
static void publish_end(sfs_seg *sg, struct seg *s)
{
	sg->st.disk_bytes += s->wend - s->bytes;
	s->bytes = s->wend;
}

/*
 * Publishes a flush that wrote everything: new segments into the table,
 * entries into the index, the last segment written becomes act. Cannot
 * fail (reserve_publish made room). Takes the lock.
 */
static void publish(sfs_seg *sg, struct seg **nw, uint32_t n_new)
{
	struct seg *old_act = sg->act;

	pthread_mutex_lock(&sg->lock);
	for (uint32_t k = 1; k <= n_new; k++)
		segs_add(sg, nw[k]);
	for (uint32_t k = 0; k <= n_new; k++)
		if (nw[k])
			publish_end(sg, nw[k]);
	for (uint32_t i = 0; i < sg->n_pend; i++) {
		const struct pend *p = &sg->pend[i];
		struct idx_ent ie = {.xxh64 = p->xxh64,
				     .off4k = (uint32_t)(p->file_off / BLK),
				     .len = p->len,
				     .dataset = p->dataset};
		memcpy(ie.key, p->key, 16);
		tab_put(sg, &ie, nw[p->rel], p->dsi); /* room reserved; off4k fits */
	}
	if (n_new) {
		if (old_act)
			old_act->active = false;
		nw[n_new]->active = true;
		sg->act = nw[n_new];
	}
	sg->st.write_bytes += sg->wlen;
	sg->st.flushes++;
	pthread_mutex_unlock(&sg->lock);
	/* The writer's references on the segments sealed by this flush. */
	if (n_new && old_act)
		seg_unref(sg, old_act);
	for (uint32_t k = 1; k < n_new; k++)
		seg_unref(sg, nw[k]);
}

/*
 * A flush that failed: nothing is published. The new files go away; act
 * is retired (its file may now hold a torn record past its end: it gets no
 * more appends, stays readable and evictable, and is scanned at the next
 * open, where the torn record stops the scan).
 */
static void flush_failed(sfs_seg *sg, struct seg **nw, uint32_t n_new, int err)
{
	char name[32];

	for (uint32_t k = 1; k <= n_new && nw[k]; k++) {
		close(nw[k]->fd);
		seg_name(name, nw[k]->seq, "seg");
		unlinkat(sg->dirfd, name, 0);
		seg_name(name, nw[k]->seq, "idx");
		unlinkat(sg->dirfd, name, 0);
		free(nw[k]);
	}
	struct seg *act = sg->act;
	pthread_mutex_lock(&sg->lock);
	sg->st.errors++;
	if (act)
		act->active = false;
	pthread_mutex_unlock(&sg->lock);
	if (act)
		seg_unref(sg, act);
	sg->act = NULL;
	sg->n_act_ents = 0;
	if (sfs_log_ratelimit(&sg->err_rl, 60000))
		sfs_log(SFS_LOG_WARN, "segment", "%s: flush failed: %s; starting a new segment",
			sg->dir, strerror(-err));
}

/* Forgets the appended records; the next append goes after act's end. */
static void pending_reset(sfs_seg *sg)
{
	sg->wlen = 0;
	sg->n_pend = 0;
	sg->tgt_rel = sg->act ? 0 : 1;
	sg->tgt_pos = sg->act ? sg->act->wend : 0;
}

int sfs_seg_flush(sfs_seg *sg)
{
	if (!sg->n_pend)
		return 0;
	uint32_t n_new = sg->pend[sg->n_pend - 1].rel;
	struct seg **nw = calloc(n_new + 1, sizeof(*nw));
	int err = nw ? reserve_publish(sg, n_new) : -ENOMEM;
	if (err)
		goto out;
	nw[0] = sg->act;
	err = write_runs(sg, nw);
	if (err)
		flush_failed(sg, nw, n_new, err);
	else
		publish(sg, nw, n_new);
out:
	pending_reset(sg);
	free(nw);
	return err;
}

/* --- eviction ----------------------------------------------------------------- */

/* The dataset a segment is counted under: its records' one dataset, or 0
 * (unknown) when empty or mixed. Caller holds lock. */
static uint32_t seg_dataset(const struct seg *s) { return s->mixed ? 0 : s->dataset; }

/* The least recently used segment but act (ties: the older) whose dataset
 * and bytes ok() accepts (ok NULL: any). Caller holds lock. */
static struct seg *coldest_locked(sfs_seg *sg, sfs_seg_dataset_fn *ok, void *arg)
{
	struct seg *best = NULL;
	for (uint32_t i = 0; i < sg->segs_cap; i++) {
		struct seg *s = sg->segs[i];
		if (!s || s->dead || s->active || (ok && !ok(arg, seg_dataset(s), s->bytes)))
			continue;
		if (!best || s->last_use_ms < best->last_use_ms ||
		    (s->last_use_ms == best->last_use_ms && s->seq < best->seq))
			best = s;
	}
	return best;
}

bool sfs_seg_coldest(sfs_seg *sg, uint64_t *last_use_ms, uint64_t *bytes)
{
	pthread_mutex_lock(&sg->lock);
	struct seg *s = coldest_locked(sg, NULL, NULL);
	if (s) {
		*last_use_ms = s->last_use_ms;
		*bytes = s->bytes;
	}
	pthread_mutex_unlock(&sg->lock);
	return s != NULL;
}

/* Removes every index entry of s: a scan of the table (eviction is rare).
 * After a backward shift, slot i holds a new entry and is looked at again.
 * Caller holds lock. */
static void tab_drop_seg(sfs_seg *sg, const struct seg *s)
{
	for (uint32_t k = 0; k < N_PARTS && s->n_live; k++) {
		struct part *p = &sg->parts[k];
		for (uint32_t i = 0; i < p->cap && s->n_live;) {
			if (ent_len(&p->tab[i]) && ent_slot(&p->tab[i]) == s->slot)
				tab_del_at(sg, p, i);
			else
				i++;
		}
	}
}

/* Evict s (NULL: nothing): its entries leave the index, its files go once
 * no reader holds it. Caller holds lock; it is dropped. Returns the disk
 * bytes freed. */
static uint64_t evict_unlock(sfs_seg *sg, struct seg *s)
{
	char name[32];

	if (!s) {
		pthread_mutex_unlock(&sg->lock);
		return 0;
	}
	uint64_t bytes = s->bytes;
	tab_drop_seg(sg, s);
	s->dead = true;
	s->refs++; /* ours, until the files are gone */
	sg->n_segs--;
	sg->st.disk_bytes -= bytes;
	sg->st.evicted_segments++;
	sg->st.evicted_bytes += bytes;
	pthread_mutex_unlock(&sg->lock);

	seg_name(name, s->seq, "idx");
	unlinkat(sg->dirfd, name, 0);
	seg_name(name, s->seq, "seg");
	unlinkat(sg->dirfd, name, 0);
	seg_unref(sg, s);
	return bytes;
}

uint64_t sfs_seg_evict_coldest(sfs_seg *sg)
{
	pthread_mutex_lock(&sg->lock);
	return evict_unlock(sg, coldest_locked(sg, NULL, NULL));
}

bool sfs_seg_coldest_of(sfs_seg *sg, sfs_seg_dataset_fn *ok, void *arg, uint64_t *last_use_ms,
			uint32_t *seq)
{
	pthread_mutex_lock(&sg->lock);
	struct seg *s = coldest_locked(sg, ok, arg);
	if (s) {
		*last_use_ms = s->last_use_ms;
		*seq = s->seq;
	}
	pthread_mutex_unlock(&sg->lock);
	return s != NULL;
}

uint64_t sfs_seg_evict_seq(sfs_seg *sg, uint32_t seq)
{
	struct seg *found = NULL;

	pthread_mutex_lock(&sg->lock);
	for (uint32_t i = 0; i < sg->segs_cap && !found; i++) {
		struct seg *s = sg->segs[i];
		if (s && s->seq == seq && !s->dead && !s->active)
			found = s;
	}
	return evict_unlock(sg, found);
}

void sfs_seg_foreach_segment(sfs_seg *sg, void (*fn)(void *arg, uint32_t dataset, uint64_t bytes),
			     void *arg)
{
	pthread_mutex_lock(&sg->lock);
	for (uint32_t i = 0; i < sg->segs_cap; i++) {
		struct seg *s = sg->segs[i];
		if (s && !s->dead)
			fn(arg, seg_dataset(s), s->bytes);
	}
	pthread_mutex_unlock(&sg->lock);
}

/* --- eviction by dataset ------------------------------------------------------- */

/* Slots scanned per hold of the lock: lookups of small files wait at most
 * one stretch, not the whole table. */
#define FOREACH_STRETCH 65536u

void sfs_seg_foreach(sfs_seg *sg, void (*fn)(void *arg, uint32_t dataset, uint32_t len), void *arg)
{
	uint32_t scanned = 0;
	pthread_mutex_lock(&sg->lock);
	for (uint32_t k = 0; k < N_PARTS; k++) {
		const struct part *p = &sg->parts[k];
		/* The part may grow while the lock is let go: cap is re-read. */
		for (uint32_t i = 0; i < p->cap; i++) {
			const struct ent *e = &p->tab[i];
			if (ent_len(e))
				fn(arg, sg->ds_ids[ent_dsi(e)], ent_len(e));
			if (++scanned % FOREACH_STRETCH == 0) {
				pthread_mutex_unlock(&sg->lock);
				pthread_mutex_lock(&sg->lock);
			}
		}
	}
	pthread_mutex_unlock(&sg->lock);
}

/* Drops the entries match() accepts (NULL: all) and marks their segments
 * touched. After a backward shift slot i holds a new entry and is looked at
 * again (entries only move back, towards i). Caller holds lock. */
static void drop_matching(sfs_seg *sg, sfs_seg_match_fn *match, void *arg,
			  struct sfs_seg_evicted *out)
{
	for (uint32_t k = 0; k < N_PARTS; k++) {
		struct part *p = &sg->parts[k];
		for (uint32_t i = 0; i < p->cap;) {
			const struct ent *e = &p->tab[i];
			uint64_t key8 = (uint64_t)k << KEY_BITS | ent_key_lo(e);
			if (ent_len(e) && (!match || match(arg, sg->ds_ids[ent_dsi(e)],
							   (const uint8_t *)&key8))) {
				sg->segs[ent_slot(e)]->touched = true;
				out->objects++;
				out->bytes += ent_len(e);
				tab_del_at(sg, p, i);
			} else {
				i++;
			}
		}
	}
}

/* The segment being filled gets no more appends (the next flush starts a
 * new one), so that its summary can be written now. Writer thread. */
static void retire_act(sfs_seg *sg)
{
	struct seg *act = sg->act;

	pthread_mutex_lock(&sg->lock);
	act->active = false;
	pthread_mutex_unlock(&sg->lock);
	seg_unref(sg, act); /* the writer's reference */
	sg->act = NULL;
	sg->n_act_ents = 0;
	pending_reset(sg);
}

static int load_idx(sfs_seg *sg, uint32_t seq, uint64_t seg_size, struct seg_sum *sum);

/* What an eviction does to one touched segment once the lock is dropped:
 * a new summary of what it still holds, or (live NULL) its deletion. */
struct redo {
	struct seg *s;	/* referenced */
	uint32_t *live; /* the off4k of its records still indexed */
	uint32_t n;	/* of them */
	uint64_t end_bytes;
};

/* Plans the touched segments: empty ones die (as in sfs_seg_evict_coldest),
 * the others get the offsets of their remaining records noted for a new
 * summary. Caller holds lock. Returns the plans (malloc'd, *n_out of them)
 * or NULL with *n_out 0 on ENOMEM or when nothing was touched. */
static struct redo *plan_touched(sfs_seg *sg, uint32_t *n_out, struct sfs_seg_evicted *out)
{
	uint32_t n = 0, *at = calloc(sg->segs_cap ? sg->segs_cap : 1, sizeof(*at));
	struct redo *r = calloc(sg->segs_cap ? sg->segs_cap : 1, sizeof(*r));

	*n_out = 0;
	for (uint32_t i = 0; at && r && i < sg->segs_cap; i++) {
		struct seg *s = sg->segs[i];
		if (!s || !s->touched || s->dead)
			continue;
		s->touched = false;
		if (s->active)
			continue; /* the caller retired it first; never here */
		struct redo *x = &r[n];
		x->s = s;
		x->end_bytes = s->bytes;
		s->refs++;
		if (!s->n_live) {
			s->dead = true;
			sg->n_segs--;
			sg->st.disk_bytes -= s->bytes;
			sg->st.evicted_segments++;
			sg->st.evicted_bytes += s->bytes;
			out->disk_bytes += s->bytes;
		} else if (!(x->live = malloc(s->n_live * sizeof(*x->live)))) {
			s->refs--;
			continue; /* its old summary stays: a restart brings the records back */
		}
		at[i] = ++n; /* 1-based: 0 = not planned */
	}
	for (uint32_t k = 0; at && k < N_PARTS; k++) {
		const struct part *p = &sg->parts[k];
		for (uint32_t i = 0; i < p->cap; i++) {
			const struct ent *e = &p->tab[i];
			struct redo *x =
			    ent_len(e) && at[ent_slot(e)] ? &r[at[ent_slot(e)] - 1] : NULL;
			if (x && x->live)
				x->live[x->n++] = ent_off4k(e);
		}
	}
	free(at);
	if (!n) {
		free(r);
		return NULL;
	}
	*n_out = n;
	return r;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/*
 * Writes x's segment a summary of the records x->live names. Their full
 * entries (the index keeps 8 bytes of each key and no checksum) come from
 * retired (act_ents of the segment being filled until this eviction, whose
 * summary was never written; unused once it is retired, so filtered in
 * place) or else from the segment's summary on disk. Returns 0 or -errno;
 * on an error the old summary stays (a restart brings the evicted records
 * back: a cache that keeps too much, never a wrong byte). Writer thread.
 */
static int rewrite_idx(sfs_seg *sg, const struct redo *x, struct idx_ent *retired,
		       uint32_t n_retired)
{
	struct seg_sum sum = {.ents = retired, .n = n_retired};
	int err = 0;

	if (!retired && (err = load_idx(sg, x->s->seq, UINT64_MAX, &sum))) {
		sfs_log(SFS_LOG_WARN, "segment",
			"%s/%08x.idx: %s; its evicted records come back at the next start", sg->dir,
			x->s->seq, strerror(-err));
		return err;
	}
	qsort(x->live, x->n, sizeof(*x->live), cmp_u32);
	uint32_t kept = 0;
	for (uint32_t i = 0; i < sum.n; i++)
		if (bsearch(&sum.ents[i].off4k, x->live, x->n, sizeof(*x->live), cmp_u32))
			sum.ents[kept++] = sum.ents[i];
	err = write_idx(sg, x->s->seq, sum.ents, kept, x->end_bytes);
	if (!retired)
		free(sum.ents);
	return err;
}

int sfs_seg_evict_where(sfs_seg *sg, sfs_seg_match_fn *match, void *arg,
			struct sfs_seg_evicted *out)
{
	char name[32];
	uint32_t n;
	int err = 0;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&sg->lock);
	drop_matching(sg, match, arg, out);
	bool act_touched = sg->act && sg->act->touched;
	pthread_mutex_unlock(&sg->lock);
	/* The retired segment's entries stay in act_ents until the next
	 * append, which only this (the writer) thread makes, after this. */
	struct seg *retired = act_touched ? sg->act : NULL;
	uint32_t n_retired = sg->n_act_ents;
	if (act_touched)
		retire_act(sg);
	pthread_mutex_lock(&sg->lock);
	struct redo *r = plan_touched(sg, &n, out);
	pthread_mutex_unlock(&sg->lock);
	for (uint32_t k = 0; k < n; k++) {
		struct redo *x = &r[k];
		if (x->live) {
			int rc = x->s == retired ? rewrite_idx(sg, x, sg->act_ents, n_retired)
						 : rewrite_idx(sg, x, NULL, 0);
			err = err ? err : rc;
			free(x->live);
		} else {
			seg_name(name, x->s->seq, "idx");
			unlinkat(sg->dirfd, name, 0);
			seg_name(name, x->s->seq, "seg");
			unlinkat(sg->dirfd, name, 0);
		}
		seg_unref(sg, x->s);
	}
	free(r);
	return err;
}

void sfs_seg_get_stats(sfs_seg *sg, struct sfs_seg_stats *out)
{
	pthread_mutex_lock(&sg->lock);
	*out = sg->st;
	out->objects = sg->tab_n;
	out->segments = sg->n_segs;
	uint64_t slots = 0;
	for (uint32_t k = 0; k < N_PARTS; k++)
		slots += sg->parts[k].cap;
	out->index_bytes =
	    slots * sizeof(struct ent) + (uint64_t)sg->segs_cap * sizeof(struct seg *) +
	    (uint64_t)sg->segs_used * sizeof(struct seg) + (uint64_t)sg->ds_n * sizeof(*sg->ds_ids);
	pthread_mutex_unlock(&sg->lock);
}

/* --- open and recovery -------------------------------------------------------- */

static int sum_add(struct seg_sum *sum, const struct rec_hdr *h, uint64_t off)
{
	if (sum->n == sum->cap) {
		uint32_t cap = sum->cap ? sum->cap * 2 : 256;
		struct idx_ent *v = realloc(sum->ents, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		sum->ents = v;
		sum->cap = cap;
	}
	struct idx_ent *e = &sum->ents[sum->n++];
	memcpy(e->key, h->key, 16);
	e->xxh64 = h->xxh64;
	e->off4k = (uint32_t)(off / BLK);
	e->len = h->len;
	e->dataset = h->dataset;
	e->zero = 0;
	return 0;
}

/*
 * Reads and checks DIR/NNNNNNNN.idx against a segment file of seg_size
 * bytes. Returns 0 with *sum filled, or -errno (-EBADMSG: it does not
 * check). Open, and the writer thread (rewrite_idx).
 */
static int load_idx(sfs_seg *sg, uint32_t seq, uint64_t seg_size, struct seg_sum *sum)
{
	char name[32];
	struct stat st;
	struct idx_head h;
	int err = -EBADMSG;

	seg_name(name, seq, "idx");
	int fd = openat(sg->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || st.st_size < (off_t)(sizeof(h) + 8) ||
	    (st.st_size - sizeof(h) - 8) % sizeof(struct idx_ent))
		goto out_close;
	size_t size = (size_t)st.st_size;
	uint8_t *buf = malloc(size);
	if (!buf) {
		err = -ENOMEM;
		goto out_close;
	}
	uint64_t sum64;
	if (pread(fd, buf, size, 0) != (ssize_t)size)
		goto out_free;
	memcpy(&h, buf, sizeof(h));
	memcpy(&sum64, buf + size - 8, 8);
	if (h.magic != IDX_MAGIC || h.seq != seq || sfs_xxh3_64(buf, size - 8) != sum64 ||
	    h.n != (size - sizeof(h) - 8) / sizeof(struct idx_ent) || h.end_bytes > seg_size)
		goto out_free;
	struct idx_ent *ents = (struct idx_ent *)(buf + sizeof(h));
	for (uint32_t i = 0; i < h.n; i++)
		if (!ents[i].len || ents[i].len > SFS_SEG_MAX_OBJECT ||
		    (uint64_t)ents[i].off4k * BLK + rec_bytes(ents[i].len) > h.end_bytes)
			goto out_free;
	sum->ents = malloc(h.n * sizeof(*ents) + 1);
	if (!sum->ents) {
		err = -ENOMEM;
		goto out_free;
	}
	memcpy(sum->ents, ents, h.n * sizeof(*ents));
	sum->n = sum->cap = h.n;
	sum->end_bytes = h.end_bytes;
	err = 0;
out_free:
	free(buf);
out_close:
	close(fd);
	return err;
}

/* Checks the record at off and returns its length in the file, or 0 when
 * it does not check (the end of the good records). */
static uint64_t scan_one(int fd, uint8_t *buf, uint64_t off, uint64_t size)
{
	const struct rec_hdr *h = (const struct rec_hdr *)buf;
	if (pread(fd, buf, BLK, (off_t)off) != (ssize_t)BLK)
		return 0;
	if (h->magic != REC_MAGIC || !h->len || h->len > SFS_SEG_MAX_OBJECT ||
	    h->hdr_xxh != hdr_sum(h))
		return 0;
	uint64_t rb = rec_bytes(h->len);
	if (off + rb > size)
		return 0;
	if (rb > BLK && pread(fd, buf + BLK, rb - BLK, (off_t)(off + BLK)) != (ssize_t)(rb - BLK))
		return 0;
	return sfs_xxh3_64(buf + HDR_BYTES, h->len) == h->xxh64 ? rb : 0;
}

/* Scans a segment without a valid .idx record by record; stops at the first
 * record that does not check. Returns 0 with *sum filled, or -errno. */
static int scan_seg(int fd, uint64_t size, struct seg_sum *sum)
{
	uint8_t *buf = aligned_alloc(BLK, rec_bytes(SFS_SEG_MAX_OBJECT));
	uint64_t off = 0, rb;
	int err = 0;

	if (!buf)
		return -ENOMEM;
	while (!err && (rb = scan_one(fd, buf, off, size))) {
		err = sum_add(sum, (const struct rec_hdr *)buf, off);
		off += rb;
	}
	sum->end_bytes = off;
	free(buf);
	return err;
}

/* Index entries and table slot for a recovered segment. Records an entry
 * cannot name (past MAX_DSETS datasets or the offsets an entry holds) are
 * left out: misses. Returns 0, -ENOMEM, or -ENOSPC (no slot left: the
 * segment is not adopted). Open only. */
static int seg_adopt(sfs_seg *sg, uint32_t seq, const struct seg_sum *sum)
{
	struct seg *s = seg_new(seq, -1, sum->end_bytes);
	uint32_t left_out = 0;
	if (!s)
		return -ENOMEM;
	int err = segs_add(sg, s);
	if (err) {
		free(s);
		return err;
	}
	for (uint32_t i = 0; !err && i < sum->n; i++) {
		int dsi = ds_index(sg, sum->ents[i].dataset);
		err = dsi < 0 ? dsi : tab_put(sg, &sum->ents[i], s, (uint32_t)dsi);
		if (err == -EMLINK || err == -ERANGE) {
			left_out++;
			err = 0;
		}
	}
	if (left_out)
		sfs_log(SFS_LOG_WARN, "segment",
			"%s/%08x.seg: %u records left out of the index (%s)", sg->dir, seq,
			left_out, "too many datasets or offsets past 1 GiB");
	return err;
}

/*
 * Recovers segment seq: entries from its .idx when it checks, else from a
 * scan (and then an .idx is written: the segment gets no more appends).
 * A torn tail is cut off; a segment with no good record is removed.
 * Returns 0 or -ENOMEM (an unreadable segment is skipped). Open only.
 */
static int load_seg(sfs_seg *sg, uint32_t seq, bool has_idx)
{
	char name[32];
	struct stat st;
	struct seg_sum sum = {0};

	seg_name(name, seq, "seg");
	int fd = openat(sg->dirfd, name, O_RDWR | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		sfs_log(SFS_LOG_WARN, "segment", "%s/%s: %s; skipped", sg->dir, name,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return 0;
	}
	int err = has_idx ? load_idx(sg, seq, (uint64_t)st.st_size, &sum) : -ENOENT;
	bool scanned = err && err != -ENOMEM;
	if (scanned) {
		if (has_idx) {
			seg_name(name, seq, "idx");
			unlinkat(sg->dirfd, name, 0);
			seg_name(name, seq, "seg");
		}
		err = scan_seg(fd, (uint64_t)st.st_size, &sum);
	}
	if (err)
		goto out;
	if (!sum.n) {
		unlinkat(sg->dirfd, name, 0);
		goto out;
	}
	if ((uint64_t)st.st_size > sum.end_bytes && ftruncate(fd, (off_t)sum.end_bytes) == 0)
		fdatasync(fd);
	err = seg_adopt(sg, seq, &sum);
	if (err == -ENOSPC) {
		sfs_log(SFS_LOG_WARN, "segment", "%s/%s: more than %u segments; removed", sg->dir,
			name, MAX_SEGS);
		unlinkat(sg->dirfd, name, 0);
		seg_name(name, seq, "idx");
		unlinkat(sg->dirfd, name, 0);
		err = 0;
		goto out;
	}
	if (!err && scanned)
		write_idx(sg, seq, sum.ents, sum.n, sum.end_bytes);
out:
	free(sum.ents);
	close(fd);
	return err;
}

/* Parses "NNNNNNNN.seg" / "NNNNNNNN.idx". Returns 1 (.seg), 2 (.idx) or 0. */
static int parse_name(const char *name, uint32_t *seq)
{
	if (strlen(name) != SEG_NAME_LEN || name[8] != '.')
		return 0;
	for (int i = 0; i < 8; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return 0;
	*seq = (uint32_t)strtoul(name, NULL, 16);
	return !strcmp(name + 9, "seg") ? 1 : !strcmp(name + 9, "idx") ? 2 : 0;
}

struct seq_list {
	uint32_t *v;
	size_t n, cap;
};

static int seq_add(struct seq_list *l, uint32_t seq)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		uint32_t *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = seq;
	return 0;
}

static int seq_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static bool seq_has(const struct seq_list *l, uint32_t seq)
{
	return l->n && bsearch(&seq, l->v, l->n, sizeof(seq), seq_cmp);
}

/* Lists DIR: segment and .idx numbers into segs/idxs; removes other files.
 * Returns 0 or -errno. */
static int list_dir(sfs_seg *sg, struct seq_list *segs, struct seq_list *idxs)
{
	int fd = dup(sg->dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	int err = 0;

	if (!d) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	rewinddir(d);
	while (!err && (de = readdir(d))) {
		uint32_t seq;
		int kind = parse_name(de->d_name, &seq);
		if (kind == 1)
			err = seq_add(segs, seq);
		else if (kind == 2)
			err = seq_add(idxs, seq);
		else if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
			 de->d_type != DT_DIR)
			unlinkat(sg->dirfd, de->d_name, 0); /* not ours: temp files, strays */
	}
	closedir(d);
	if (segs->n)
		qsort(segs->v, segs->n, sizeof(uint32_t), seq_cmp);
	if (idxs->n)
		qsort(idxs->v, idxs->n, sizeof(uint32_t), seq_cmp);
	return err;
}

/* Loads every segment in DIR, oldest first (a key's later record wins).
 * Returns 0 or -errno. Open only. */
static int recover(sfs_seg *sg)
{
	struct seq_list segs = {0}, idxs = {0};
	char name[32];

	int err = list_dir(sg, &segs, &idxs);
	for (size_t i = 0; !err && i < idxs.n; i++) {
		if (!seq_has(&segs, idxs.v[i])) {
			seg_name(name, idxs.v[i], "idx");
			unlinkat(sg->dirfd, name, 0);
		}
	}
	for (size_t i = 0; !err && i < segs.n; i++)
		err = load_seg(sg, segs.v[i], seq_has(&idxs, segs.v[i]));
	if (!err && segs.n)
		sg->next_seq = segs.v[segs.n - 1] + 1;
	free(segs.v);
	free(idxs.v);
	return err;
}

int sfs_seg_open(const struct sfs_seg_conf *conf, sfs_seg **out)
{
	sfs_seg *sg = calloc(1, sizeof(*sg));
	int err = -ENOMEM;

	if (!sg)
		return err;
	pthread_mutex_init(&sg->lock, NULL);
	pthread_mutex_init(&sg->aio_lock, NULL);
	pthread_cond_init(&sg->aio_cond, NULL);
	sg->dirfd = -1;
	sg->seg_bytes =
	    conf->segment_bytes ? round_up(conf->segment_bytes, BLK) : DEFAULT_SEG_BYTES;
	if (sg->seg_bytes > MAX_SEG_BYTES)
		sg->seg_bytes = MAX_SEG_BYTES; /* a record's start fits an entry */
	uint64_t wb =
	    round_up(conf->write_buffer_bytes ? conf->write_buffer_bytes : DEFAULT_WBUF, BLK);
	if (wb < rec_bytes(SFS_SEG_MAX_OBJECT))
		wb = rec_bytes(SFS_SEG_MAX_OBJECT); /* room for the largest record */
	sg->wbuf_cap = (uint32_t)wb;
	sg->dir = strdup(conf->dir);
	/* On huge pages (iobuf.h): the batch's O_DIRECT write pins a few
	 * pages and is a few segments, not one per 4 KiB. */
	sg->wbuf = sfs_iobuf_alloc_huge(sg->wbuf_cap);
	sg->ds_ids = malloc(MAX_DSETS * sizeof(*sg->ds_ids)); /* resident as used */
	bool parts_ok = sg->ds_ids != NULL;
	for (uint32_t k = 0; k < N_PARTS; k++) {
		sg->parts[k].tab = calloc(MIN_PART_CAP, sizeof(struct ent));
		sg->parts[k].cap = MIN_PART_CAP;
		parts_ok &= sg->parts[k].tab != NULL;
	}
	if (!sg->dir || !sg->wbuf || !parts_ok)
		goto err_close;
	if (mkdir(conf->dir, 0700) && errno != EEXIST) {
		err = -errno;
		goto err_close;
	}
	sg->dirfd = open(conf->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sg->dirfd < 0) {
		err = -errno;
		goto err_close;
	}
	err = recover(sg);
	if (err)
		goto err_close;
	pending_reset(sg);
	*out = sg;
	return 0;
err_close:
	sfs_seg_close(sg);
	return err;
}

void sfs_seg_close(sfs_seg *sg)
{
	if (!sg)
		return;
	for (uint32_t i = 0; i < sg->segs_cap; i++) {
		struct seg *s = sg->segs[i];
		if (s && s->fd >= 0)
			close(s->fd);
		free(s);
	}
	if (sg->dirfd >= 0)
		close(sg->dirfd);
	assert(!sg->aio_inflight); /* every started read was finished */
	if (sg->aio_ctx)
		syscall(SYS_io_destroy, sg->aio_ctx);
	pthread_mutex_destroy(&sg->lock);
	pthread_mutex_destroy(&sg->aio_lock);
	pthread_cond_destroy(&sg->aio_cond);
	free(sg->segs);
	for (uint32_t k = 0; k < N_PARTS; k++)
		free(sg->parts[k].tab);
	free(sg->wbuf);
	free(sg->pend);
	free(sg->act_ents);
	free(sg->ds_ids);
	free(sg->dir);
	free(sg);
}
