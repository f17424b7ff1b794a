/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernel_order — the order the kernel keeps among the requests on one open
 * file or directory, told to ThreadSanitizer, which cannot see it (it
 * passes through /dev/fuse).
 *
 * The kernel sends no request on a handle before OPEN's (OPENDIR's) reply
 * gave it; sends RELEASE (RELEASEDIR) only once every other request on the
 * handle was answered; and sends one READDIR of a handle at a time. So the
 * daemon's work on a request, up to its reply, happens before the next
 * request that depends on it, on whichever worker that one lands: the
 * handle's object (struct sfs_open_file, a directory's handle) is made by
 * OPEN and freed by RELEASE with no lock between them. Each op on a handle
 * calls sfs_kernel_after(obj) once it has the object, and
 * sfs_kernel_before(obj) just before the reply that ends it (on the thread
 * that replies). The same holds for an inode: the kernel sends a request on
 * a node id only after an entry reply (LOOKUP, READDIRPLUS) gave it, and
 * FORGET after the requests on it: the entry's sfs_kernel_before(inode),
 * every request's sfs_kernel_after(inode) (fs/ops/ops.h, I()). Under
 * -fsanitize=thread these are a release and an acquire on the object's
 * address; in every other build, nothing.
 *
 * Owns nothing. Threading: any thread.
 */
#ifndef SFS_KERNEL_ORDER_H
#define SFS_KERNEL_ORDER_H

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
/* A request on obj's handle starts: after the replies the kernel waited for. */
static inline void sfs_kernel_after(const void *obj)
{
	if (obj)
		__tsan_acquire((void *)obj);
}
/* This request's work on obj is over: its reply follows. */
static inline void sfs_kernel_before(const void *obj)
{
	if (obj)
		__tsan_release((void *)obj);
}
#else
static inline void sfs_kernel_after(const void *obj) { (void)obj; }
static inline void sfs_kernel_before(const void *obj) { (void)obj; }
#endif

#endif
