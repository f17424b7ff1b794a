/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inode_slab — the memory the inode table's inodes live in: slab pages of
 * fixed-size slots inside one shared-memory region (a memfd), so that a
 * node id can be a slot's offset in the region and a process that maps the
 * same memfd later (a restarted or upgraded daemon) finds every inode the
 * kernel holds at the id the kernel knows it by. Private to fs/inode/inode.c.
 *
 *   region (memfd, REGION_BYTES of address space, sparse)
 *   +-------------+----------------+----------------+----
 *   | page 0:     | page 1:        | page 2:        |
 *   | region head | slab page head | slab page head | ...   SLAB_PAGE each
 *   | (magic,     | slots of one   | slots of       |
 *   |  layout,    | size class     | another class  |
 *   |  pages_high,|                |                |
 *   |  root id)   |                |                |
 *   +-------------+----------------+----------------+----
 *
 * What the region holds is the slots' bytes and, per page, its slot size
 * and count of slots in use; every pointer (free lists, partial lists, the
 * inodes' own hash_next and pf) means something only to the process that
 * wrote it and is rebuilt by whoever adopts the region
 * (sfs_inode_slab_adopt). A slot is live while its inode's fh_len is not 0
 * (every NFS inode has a handle): slab_free clears it before the slot goes
 * on a free list, and a new inode sets it last. Pages left empty give their
 * memory back (a hole punched in the memfd). Does not own what a slot holds
 * (the inode's fields, the index: inode.c).
 *
 * Threading: one lock, a leaf (the table frees inodes outside its own lock).
 */
#ifndef SFS_INODE_SLAB_H
#define SFS_INODE_SLAB_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SFS_INODE_SLAB_CLASSES 2

/* What the table stores in slots: set at open (and checked at adopt). */
struct sfs_inode_slab_conf {
	size_t slot_bytes[SFS_INODE_SLAB_CLASSES]; /* ascending, multiples of 8 */
	uint64_t layout; /* a fingerprint of the slot's layout: adopt refuses another */
};

struct sfs_inode_slab_page;
struct sfs_inode_slab_head;

struct sfs_inode_slab {
	pthread_mutex_t lock;
	struct sfs_inode_slab_conf conf;  /* set at open, then read-only */
	int fd;				  /* the memfd; set at open, then read-only */
	uint8_t *base;			  /* its mapping; set at open, then read-only */
	struct sfs_inode_slab_head *head; /* page 0, shared */
	/* protected by lock: pages with a free slot, per size class */
	struct sfs_inode_slab_page *partial[SFS_INODE_SLAB_CLASSES];
	struct sfs_inode_slab_page *spare; /* protected by lock: an empty page kept */
	uint32_t *holes;		   /* protected by lock: indices of pages to reuse */
	size_t n_holes, cap_holes;	   /* protected by lock */
};

/* A new, empty region. Returns 0 or -errno. */
int sfs_inode_slab_open(struct sfs_inode_slab *sl, const struct sfs_inode_slab_conf *conf);

/*
 * Map the region of memfd fd (a dup is kept; the caller keeps fd), written
 * by another process or an earlier table with the same conf, without
 * changing it. Returns 0; -EINVAL when the region is not one of this conf's
 * (another build: the caller must not use it); or -errno.
 */
int sfs_inode_slab_adopt(struct sfs_inode_slab *sl, const struct sfs_inode_slab_conf *conf, int fd);

/*
 * After sfs_inode_slab_adopt, once the caller has checked what it needs
 * (sfs_inode_slab_at works): rebuild the free lists. Each slot of each page
 * in use is offered to keep(slot, arg), which says whether it holds a live
 * inode (and may reset in it what meant something only to the writer); the
 * others are freed. The region's writer must be gone or stopped for good:
 * this rewrites the pages' lists and whatever keep() resets.
 */
void sfs_inode_slab_rebuild(struct sfs_inode_slab *sl, bool (*keep)(void *slot, void *arg),
			    void *arg);

/* Unmap and close; every slot is gone. */
void sfs_inode_slab_close(struct sfs_inode_slab *sl);

/* A zeroed slot of at least `bytes` (at most the largest class), or NULL
 * on ENOMEM (or when the region is full). */
void *sfs_inode_slab_alloc(struct sfs_inode_slab *sl, size_t bytes);

/* Free a slot. The caller has made it not live first (whatever keep()
 * looks at), so that an adopter never takes it for an inode. */
void sfs_inode_slab_free(struct sfs_inode_slab *sl, void *slot);

/* A slot's id (its offset in the region: SFS_INODE_SLAB_PAGE or more) and
 * back. sfs_inode_slab_at returns NULL for an id that is not a slot of a
 * page in use (not one this region handed out). */
uint64_t sfs_inode_slab_id(const struct sfs_inode_slab *sl, const void *slot);
void *sfs_inode_slab_at(const struct sfs_inode_slab *sl, uint64_t id);

/* The region head's root id: the slot of the table's root (0: none yet). */
uint64_t sfs_inode_slab_root_id(const struct sfs_inode_slab *sl);
void sfs_inode_slab_set_root_id(struct sfs_inode_slab *sl, uint64_t id);

/* Bytes of memory the region's pages hold now (pages in use, the spare
 * and the head). */
uint64_t sfs_inode_slab_bytes(struct sfs_inode_slab *sl);

#define SFS_INODE_SLAB_PAGE (64u << 10)

#endif
