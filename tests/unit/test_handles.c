// SPDX-License-Identifier: Apache-2.0
/*
 * test_handles — fh values across a restart (fs/kernel/handles.c): a handle made
 * by this process resolves to its state; one made by another epoch (a dead
 * server) does not, and gets the state adopted for it, once, whichever
 * thread is first, until its release; thousands of them, with the table
 * growing and shrinking, each found until dropped.
 */
#include "../../fs/kernel/handles.h"
#include "tap.h"

#include <stdlib.h>

#define N 5000

int main(void)
{
	static int states[N], mine;
	static uint64_t old[N];

	sfs_handles_set_epoch(3);
	for (int i = 0; i < N; i++)
		old[i] = sfs_handle_make(&states[i]); /* as the dead server made them */
	sfs_handles_set_epoch(4);
	uint64_t fh = sfs_handle_make(&mine);
	ok(sfs_handle_get(fh) == &mine, "a handle of this epoch is its state");
	ok(sfs_handle_get(0) == NULL, "0 is no handle");
	bool stale = true;
	for (int i = 0; i < N; i++)
		stale =
		    stale && sfs_handle_get(old[i]) == NULL && sfs_handle_adopted(old[i]) == NULL;
	ok(stale, "%d handles of the previous epoch are not this process's, none adopted yet", N);

	bool first = true;
	for (int i = 0; i < N; i++)
		first = first && sfs_handle_adopt(old[i], &states[N - 1 - i]) == &states[N - 1 - i];
	ok(first, "each adopted once");
	int other;
	ok(sfs_handle_adopt(old[7], &other) == &states[N - 1 - 7],
	   "a second adoption of one handle gets the first's state (the caller frees its own)");
	bool found = true;
	for (int i = 0; i < N; i++)
		found = found && sfs_handle_adopted(old[i]) == &states[N - 1 - i];
	ok(found, "every adopted state found after the table grew");
	bool dropped = true;
	for (int i = 0; i < N; i += 2)
		dropped = dropped && sfs_handle_drop(old[i]) == &states[N - 1 - i];
	for (int i = 0; i < N; i++)
		dropped =
		    dropped && sfs_handle_adopted(old[i]) == (i % 2 ? &states[N - 1 - i] : NULL);
	ok(dropped, "half dropped (released): those gone, the others still found");
	ok(sfs_handle_drop(old[0]) == NULL, "a handle dropped twice: nothing");

	sfs_handles_set_epoch(0); /* no keeper: fh is the address */
	ok(sfs_handle_make(&mine) == (uint64_t)(uintptr_t)&mine &&
	       sfs_handle_get((uint64_t)(uintptr_t)&mine) == &mine,
	   "without a keeper a handle is the state's address");
	return tap_done();
}
