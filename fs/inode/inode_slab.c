// SPDX-License-Identifier: Apache-2.0
/*
 * inode_slab — inodes in slab pages of one shared-memory region. See
 * inode_slab.h.
 */
#include "inode_slab.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Under AddressSanitizer a slot is poisoned while free, so that a use of a
 * forgotten inode is caught as it would be with malloc. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SFS_INODE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SFS_INODE_ASAN 1
#endif
#ifdef SFS_INODE_ASAN
#include <sanitizer/asan_interface.h>
#define SLOT_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define SLOT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SLOT_POISON(p, n)   ((void)(p), (void)(n))
#define SLOT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define PAGE	  SFS_INODE_SLAB_PAGE
#define PAGE_HEAD 64u
/* Address space, not memory: 4 M pages, some 1.2 billion inodes. */
#define REGION_BYTES (256ull << 30)
#define REGION_PAGES (REGION_BYTES / PAGE)
#define REGION_MAGIC 0x3173656e6f646673ull /* version 1 of this layout */

/* Page 0. Shared: written under the lock by the process that serves. */
struct sfs_inode_slab_head {
	uint64_t magic;
	uint64_t layout;
	uint64_t slot_bytes[SFS_INODE_SLAB_CLASSES];
	uint64_t pages_high; /* pages handed out so far, the head included; written
				under the lock, read atomically without it */
	uint64_t root_id;
};

/* A slab page's first PAGE_HEAD bytes. slot_bytes and used are shared (an
 * adopter reads slot_bytes; 0: the page is a hole or the spare); the rest
 * is this process's own. */
struct sfs_inode_slab_page {
	struct sfs_inode_slab_page *prev, *next; /* in partial[] while a slot is free */
	void *free;				 /* free slots, linked through their first word */
	uint32_t used;				 /* slots handed out */
	uint32_t slot_bytes;			 /* atomic; 0: not a slab page now */
	uint32_t klass;
};
_Static_assert(sizeof(struct sfs_inode_slab_page) <= PAGE_HEAD, "the page header fits");
_Static_assert(sizeof(struct sfs_inode_slab_head) <= PAGE, "the region head fits page 0");

static struct sfs_inode_slab_page *page_at(const struct sfs_inode_slab *sl, uint64_t i)
{
	return (struct sfs_inode_slab_page *)(sl->base + i * PAGE);
}

static uint64_t page_index(const struct sfs_inode_slab *sl, const void *p)
{
	return (uint64_t)((const uint8_t *)p - sl->base) / PAGE;
}

static size_t slots_of(uint32_t slot_bytes) { return (PAGE - PAGE_HEAD) / slot_bytes; }

static void unlink_partial(struct sfs_inode_slab *sl, struct sfs_inode_slab_page *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		sl->partial[p->klass] = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->prev = p->next = NULL;
}

static void push_partial(struct sfs_inode_slab *sl, struct sfs_inode_slab_page *p)
{
	p->prev = NULL;
	p->next = sl->partial[p->klass];
	if (p->next)
		p->next->prev = p;
	sl->partial[p->klass] = p;
}

/* Make page p a slab page of class k with every slot on its free list. */
static void page_format(struct sfs_inode_slab *sl, struct sfs_inode_slab_page *p, uint32_t k)
{
	uint32_t sz = (uint32_t)sl->conf.slot_bytes[k];
	uint8_t *a = (uint8_t *)p;

	SLOT_UNPOISON(a, PAGE);	  /* the spare's or a hole's old poison */
	p->prev = p->next = NULL; /* not slot_bytes: sfs_inode_slab_at reads it unlocked */
	p->free = NULL;
	p->used = 0;
	for (size_t i = slots_of(sz); i-- > 0;) {
		void *slot = a + PAGE_HEAD + i * sz;
		memset(slot, 0, sz);
		memcpy(slot, &p->free, sizeof(void *));
		p->free = slot;
	}
	p->klass = k;
	__atomic_store_n(&p->slot_bytes, sz, __ATOMIC_RELEASE);
	SLOT_POISON(a + PAGE_HEAD, PAGE - PAGE_HEAD);
}

/* An empty page: the spare, a hole, or one past the high mark; NULL when
 * the region is full. Caller holds lock. */
static struct sfs_inode_slab_page *page_take(struct sfs_inode_slab *sl)
{
	struct sfs_inode_slab_page *p = sl->spare;

	if (p) {
		sl->spare = NULL;
		return p;
	}
	if (sl->n_holes)
		return page_at(sl, sl->holes[--sl->n_holes]);
	uint64_t high = sl->head->pages_high;
	if (high >= REGION_PAGES)
		return NULL;
	/* sfs_inode_slab_at reads it without the lock */
	__atomic_store_n(&sl->head->pages_high, high + 1, __ATOMIC_RELEASE);
	return page_at(sl, high);
}

/* Give an empty page's memory back, keeping its index for reuse. Caller
 * holds lock. */
static void page_release(struct sfs_inode_slab *sl, struct sfs_inode_slab_page *p)
{
	uint64_t i = page_index(sl, p);

	if (sl->n_holes == sl->cap_holes) {
		size_t cap = sl->cap_holes ? sl->cap_holes * 2 : 64;
		uint32_t *h = realloc(sl->holes, cap * sizeof(*h));
		if (!h) { /* keep the page's memory; it is reused as the spare is */
			__atomic_store_n(&p->slot_bytes, 0, __ATOMIC_RELEASE);
			return;
		}
		sl->holes = h;
		sl->cap_holes = cap;
	}
	SLOT_UNPOISON((uint8_t *)p, PAGE);
	__atomic_store_n(&p->slot_bytes, 0, __ATOMIC_RELEASE);
	fallocate(sl->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(i * PAGE), PAGE);
	sl->holes[sl->n_holes++] = (uint32_t)i;
}

static int region_map(struct sfs_inode_slab *sl, int fd)
{
	void *a =
	    mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);

	if (a == MAP_FAILED)
		return -errno;
	sl->fd = fd;
	sl->base = a;
	sl->head = a;
	/* Under ASan, address space another mapping had here may keep its poison. */
	SLOT_UNPOISON(a, (size_t)PAGE);
	pthread_mutex_init(&sl->lock, NULL);
	return 0;
}

/* Under ASan: the pages handed out so far, free of poison, before they are
 * read whole (adopt) or unmapped (so that the next mapping there starts
 * clean). */
static void unpoison_all(struct sfs_inode_slab *sl)
{
	SLOT_UNPOISON(sl->base, (size_t)(sl->head->pages_high * PAGE));
}

int sfs_inode_slab_open(struct sfs_inode_slab *sl, const struct sfs_inode_slab_conf *conf)
{
	int err, fd = memfd_create("shardfs-inodes", MFD_CLOEXEC);

	memset(sl, 0, sizeof(*sl));
	sl->conf = *conf;
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)REGION_BYTES) < 0) {
		err = -errno;
		goto err_close;
	}
	if ((err = region_map(sl, fd)) < 0)
		goto err_close;
	sl->head->magic = REGION_MAGIC;
	sl->head->layout = conf->layout;
	for (int k = 0; k < SFS_INODE_SLAB_CLASSES; k++)
		sl->head->slot_bytes[k] = conf->slot_bytes[k];
	sl->head->pages_high = 1;
	return 0;
err_close:
	close(fd);
	return err;
}

/* Rebuild page p (a slab page of the adopted region): its free list from
 * the slots keep() refuses, its used count from those it keeps. Returns
 * false when the page's header is not one of conf's classes. */
static bool page_adopt(struct sfs_inode_slab *sl, struct sfs_inode_slab_page *p,
		       bool (*keep)(void *slot, void *arg), void *arg)
{
	uint32_t sz = p->slot_bytes, k = 0;

	while (k < SFS_INODE_SLAB_CLASSES && sl->conf.slot_bytes[k] != sz)
		k++;
	if (k == SFS_INODE_SLAB_CLASSES)
		return false;
	p->klass = k;
	p->free = NULL;
	p->used = 0;
	p->prev = p->next = NULL;
	for (size_t i = slots_of(sz); i-- > 0;) {
		uint8_t *slot = (uint8_t *)p + PAGE_HEAD + i * sz;
		if (keep(slot, arg)) {
			p->used++;
		} else {
			memset(slot, 0, sz);
			memcpy(slot, &p->free, sizeof(void *));
			p->free = slot;
			SLOT_POISON(slot, sz);
		}
	}
	return true;
}

int sfs_inode_slab_adopt(struct sfs_inode_slab *sl, const struct sfs_inode_slab_conf *conf, int fd)
{
	int err, own = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	memset(sl, 0, sizeof(*sl));
	sl->conf = *conf;
	if (own < 0)
		return -errno;
	if ((err = region_map(sl, own)) < 0)
		goto err_close;
	const struct sfs_inode_slab_head *h = sl->head;
	bool same = h->magic == REGION_MAGIC && h->layout == conf->layout && h->pages_high >= 1 &&
		    h->pages_high <= REGION_PAGES;
	for (int k = 0; k < SFS_INODE_SLAB_CLASSES; k++)
		same = same && h->slot_bytes[k] == conf->slot_bytes[k];
	if (!same) {
		err = -EINVAL;
		goto err_unmap;
	}
	unpoison_all(sl);
	return 0;
err_unmap:
	munmap(sl->base, REGION_BYTES);
	pthread_mutex_destroy(&sl->lock);
err_close:
	close(own);
	return err;
}

void sfs_inode_slab_rebuild(struct sfs_inode_slab *sl, bool (*keep)(void *slot, void *arg),
			    void *arg)
{
	pthread_mutex_lock(&sl->lock);
	for (uint64_t i = 1; i < sl->head->pages_high; i++) {
		struct sfs_inode_slab_page *p = page_at(sl, i);
		if (p->slot_bytes == 0 || !page_adopt(sl, p, keep, arg)) {
			page_release(sl, p); /* a hole, the old spare, or not ours: reuse */
			continue;
		}
		if (p->used == 0)
			page_release(sl, p);
		else if (p->free)
			push_partial(sl, p);
	}
	pthread_mutex_unlock(&sl->lock);
}

void sfs_inode_slab_close(struct sfs_inode_slab *sl)
{
	if (!sl->base)
		return;
	unpoison_all(sl);
	munmap(sl->base, REGION_BYTES);
	close(sl->fd);
	free(sl->holes);
	pthread_mutex_destroy(&sl->lock);
	sl->base = NULL;
}

void *sfs_inode_slab_alloc(struct sfs_inode_slab *sl, size_t bytes)
{
	uint32_t k = 0;
	void *slot = NULL;

	while (k < SFS_INODE_SLAB_CLASSES && sl->conf.slot_bytes[k] < bytes)
		k++;
	if (k == SFS_INODE_SLAB_CLASSES)
		return NULL;
	pthread_mutex_lock(&sl->lock);
	struct sfs_inode_slab_page *p = sl->partial[k];
	if (!p && (p = page_take(sl))) {
		page_format(sl, p, k);
		push_partial(sl, p);
	}
	if (p) {
		slot = p->free;
		SLOT_UNPOISON(slot, sl->conf.slot_bytes[k]);
		memcpy(&p->free, slot, sizeof(void *));
		if (++p->used == slots_of(p->slot_bytes))
			unlink_partial(sl, p);
	}
	pthread_mutex_unlock(&sl->lock);
	if (slot)
		memset(slot, 0, sl->conf.slot_bytes[k]);
	return slot;
}

void sfs_inode_slab_free(struct sfs_inode_slab *sl, void *slot)
{
	struct sfs_inode_slab_page *p = page_at(sl, page_index(sl, slot));

	pthread_mutex_lock(&sl->lock);
	memcpy(slot, &p->free, sizeof(void *));
	SLOT_POISON(slot, p->slot_bytes);
	p->free = slot;
	if (p->used-- == slots_of(p->slot_bytes))
		push_partial(sl, p);
	if (!p->used) {
		unlink_partial(sl, p);
		if (sl->spare) {
			page_release(sl, p);
		} else {
			SLOT_UNPOISON((uint8_t *)p, PAGE);
			__atomic_store_n(&p->slot_bytes, 0, __ATOMIC_RELEASE);
			sl->spare = p; /* formatted again when taken */
		}
	}
	pthread_mutex_unlock(&sl->lock);
}

uint64_t sfs_inode_slab_id(const struct sfs_inode_slab *sl, const void *slot)
{
	return (uint64_t)((const uint8_t *)slot - sl->base);
}

void *sfs_inode_slab_at(const struct sfs_inode_slab *sl, uint64_t id)
{
	uint64_t i = id / PAGE, in = id % PAGE;

	if (i == 0 || i >= __atomic_load_n(&sl->head->pages_high, __ATOMIC_RELAXED) ||
	    in < PAGE_HEAD)
		return NULL;
	uint32_t sz = __atomic_load_n(&page_at(sl, i)->slot_bytes, __ATOMIC_ACQUIRE);
	if (!sz || (in - PAGE_HEAD) % sz || (in - PAGE_HEAD) / sz >= slots_of(sz))
		return NULL;
#ifdef SFS_INODE_ASAN
	if (__asan_address_is_poisoned(sl->base + id))
		return NULL; /* a free slot: what the caller would read is not an inode */
#endif
	return sl->base + id;
}

uint64_t sfs_inode_slab_root_id(const struct sfs_inode_slab *sl) { return sl->head->root_id; }

void sfs_inode_slab_set_root_id(struct sfs_inode_slab *sl, uint64_t id) { sl->head->root_id = id; }

uint64_t sfs_inode_slab_bytes(struct sfs_inode_slab *sl)
{
	pthread_mutex_lock(&sl->lock);
	uint64_t n = (sl->head->pages_high - sl->n_holes) * (uint64_t)PAGE;
	pthread_mutex_unlock(&sl->lock);
	return n;
}
