// SPDX-License-Identifier: Apache-2.0
/* handles — see handles.h. */
#include "handles.h"

#include <pthread.h>
#include <stdlib.h>

#define EPOCH_SHIFT 48
#define FLAG_MASK   ((uint64_t)SFS_HANDLE_FLAGS)
#define ADDR_MASK   (((1ull << EPOCH_SHIFT) - 1) & ~FLAG_MASK)

static uint64_t epoch_tag; /* set before any request */

/* Adopted handles: an open hash of (fh, state), grown by doubling. Rare
 * (only after a restart, one per handle the dead process had), so simple. */
static pthread_mutex_t adopted_lock = PTHREAD_MUTEX_INITIALIZER;
static struct adopted {
	uint64_t fh; /* 0: empty */
	void *state;
} * adopted;			      /* protected by adopted_lock */
static size_t n_adopted, cap_adopted; /* protected by adopted_lock */

void sfs_handles_set_epoch(uint32_t epoch)
{
	epoch_tag = (uint64_t)(epoch & 0xffff) << EPOCH_SHIFT;
}

uint64_t sfs_handle_make(const void *state) { return (uint64_t)(uintptr_t)state | epoch_tag; }

uint64_t sfs_handle_make_flagged(const void *state, uint64_t flags)
{
	return sfs_handle_make(state) | (flags & FLAG_MASK);
}

void *sfs_handle_get(uint64_t fh)
{
	return fh && (fh & ~(ADDR_MASK | FLAG_MASK)) == epoch_tag
		   ? (void *)(uintptr_t)(fh & ADDR_MASK)
		   : NULL;
}

/* The slot of fh, or the empty slot where it would go. Caller holds the
 * lock; cap_adopted > 0. */
static struct adopted *slot_of(uint64_t fh)
{
	size_t i = (size_t)((fh * 0x9e3779b97f4a7c15ull) >> 20) & (cap_adopted - 1);

	while (adopted[i].fh && adopted[i].fh != fh)
		i = (i + 1) & (cap_adopted - 1);
	return &adopted[i];
}

static int grow(void)
{
	size_t cap = cap_adopted ? cap_adopted * 2 : 256;
	struct adopted *old = adopted, *n = calloc(cap, sizeof(*n));

	if (!n)
		return -1;
	size_t old_cap = cap_adopted;
	adopted = n;
	cap_adopted = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].fh)
			*slot_of(old[i].fh) = old[i];
	free(old);
	return 0;
}

void *sfs_handle_adopted(uint64_t fh)
{
	void *state = NULL;

	pthread_mutex_lock(&adopted_lock);
	if (cap_adopted)
		state = slot_of(fh)->state;
	pthread_mutex_unlock(&adopted_lock);
	return state;
}

void *sfs_handle_adopt(uint64_t fh, void *state)
{
	pthread_mutex_lock(&adopted_lock);
	if ((n_adopted + 1) * 2 > cap_adopted && grow() < 0) {
		pthread_mutex_unlock(&adopted_lock);
		return NULL;
	}
	struct adopted *s = slot_of(fh);
	if (!s->fh) {
		*s = (struct adopted){fh, state};
		n_adopted++;
	}
	state = s->state;
	pthread_mutex_unlock(&adopted_lock);
	return state;
}

void *sfs_handle_drop(uint64_t fh)
{
	void *state = NULL;

	pthread_mutex_lock(&adopted_lock);
	if (cap_adopted) {
		struct adopted *s = slot_of(fh);
		state = s->state;
		if (s->fh) {
			/* Backward-shift deletion keeps every probe chain whole. */
			size_t i = (size_t)(s - adopted), j = i;
			s->fh = 0;
			s->state = NULL;
			n_adopted--;
			for (;;) {
				j = (j + 1) & (cap_adopted - 1);
				if (!adopted[j].fh)
					break;
				size_t home =
				    (size_t)((adopted[j].fh * 0x9e3779b97f4a7c15ull) >> 20) &
				    (cap_adopted - 1);
				if (((j - home) & (cap_adopted - 1)) >=
				    ((j - i) & (cap_adopted - 1))) {
					adopted[i] = adopted[j];
					adopted[j].fh = 0;
					adopted[j].state = NULL;
					i = j;
				}
			}
		}
	}
	pthread_mutex_unlock(&adopted_lock);
	return state;
}
