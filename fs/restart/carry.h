/* SPDX-License-Identifier: Apache-2.0 */
/*
 * carry — the counters of the stats file continue across a takeover
 * (takeover.h): the process that hands over saves its last rendering of the
 * stats in the keeper's state memfd, past the state page; the next one
 * loads it once and adds each counter series' value (counters, and the
 * _bucket, _sum and _count of histograms; never gauges) to what it renders
 * under the same series. After a crash nothing is carried: counters
 * restart, as Prometheus allows.
 *
 * Owns: the saved text's place in the memfd and the carried values. Does
 * not render the stats: main renders them and hands the text to save, and
 * wires apply into the stats file's rendering (fs/observe/stats.h).
 *
 * Threading: save and load run before or after the FUSE loop; apply runs
 * on any thread (the carried values are read-only once loaded).
 */
#ifndef SFS_CARRY_H
#define SFS_CARRY_H

#include <stddef.h>

struct sfs_keeper_state;
struct sfs_carry;

/* Save text[0, len), the stats file as this process last rendered it, in
 * the keeper's state memfd state_fd for the next process (k->carry_len says
 * how much). Returns 0, or -EIO (too long, or not written). */
int sfs_carry_save(const char *text, size_t len, int state_fd, struct sfs_keeper_state *k);

/* Load what the last process saved (and forget it there). NULL when
 * nothing was saved, or on ENOMEM. */
struct sfs_carry *sfs_carry_load(int state_fd, struct sfs_keeper_state *k);

/* Add the carried values to the counter series of a rendered stats text
 * (*text of *len bytes, malloc'd; replaced by a new one). Returns 0 or
 * -ENOMEM (the text is left as it was). */
int sfs_carry_apply(const struct sfs_carry *c, char **text, size_t *len);

void sfs_carry_free(struct sfs_carry *c);

#endif
