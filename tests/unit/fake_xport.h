/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_xport — an in-memory transport for the origin pool's unit tests
 * (cache/nfs/origin_xport.h), in the spirit of SQLite's do_ioerr_test: every
 * call the pool makes of it is counted, and the Nth (or the Nth and every
 * later one) fails.
 *
 * Nodes are named "n0", "n1", ...; a file handle carries a seed and a size
 * (fake_xport_fh), and byte i of a file is fake_xport_byte(fh, i). Calls are
 * answered from service() on the connection's own thread, after
 * conf.reply_delay_ms (READs only) — never from inside send().
 *
 * Counted calls, and what a failure of each does: connect (refused start),
 * the mount answer (connection refused), send (not sent), probe (not sent),
 * a reply (an RPC error: the connection breaks), decode (NFS3ERR_JUKEBOX:
 * ask again later).
 *
 * Threading: the pool calls each connection from its owner thread; the
 * counters are atomics; fake_xport_setup() only while no pool is open.
 */
#ifndef SFS_FAKE_XPORT_H
#define SFS_FAKE_XPORT_H

#include "origin_xport.h"

struct fake_xport_conf {
	unsigned fail_at;	 /* fail the Nth counted call (1-based); 0: none */
	bool fail_persist;	 /* and every one after it */
	unsigned reply_delay_ms; /* READ replies wait this long */
	unsigned slow_nodes;	 /* bit k: node k's READ replies wait slow_ms more */
	unsigned slow_ms;
	uint32_t short_read; /* READ replies give at most this many bytes; 0: all */
	/* Runs inside send(), on the I/O thread, for every call; a non-zero
	 * return fails the send (as a failure of the call would). */
	int (*send_hook)(const struct sfs_xport_args *args, int node);
};

extern const struct sfs_xport_ops fake_xport_ops;

/* Reset the counters and set the knobs. */
void fake_xport_setup(const struct fake_xport_conf *conf);
/* Counted calls so far. */
unsigned fake_xport_calls(void);
/* Connections created and not yet destroyed. */
int fake_xport_live(void);

/* A file handle of a file of size bytes whose contents follow seed. */
struct sfs_fh fake_xport_fh(uint64_t seed, uint64_t size);
uint8_t fake_xport_byte(const struct sfs_fh *fh, uint64_t off);

#endif
