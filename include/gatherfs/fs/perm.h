/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — who may read what a view exposes.
 *
 * A gfs_perm is a table of objects: the files a mount exposes bytes of
 * (sources, passed-through files, the importer's metadata inputs), the
 * directories whose listing it shows, and every directory on their
 * resolved paths, each with its owner, group, mode and whether it carries
 * an extended POSIX ACL.  Directories are shared: n files in one directory
 * cost n + depth stat() calls, once.
 *
 * gfs_perm_bits() answers, for a view owned by (uid, gid), which of its
 * permission classes (owner, group, other) is certain to be granted what
 * the object needs (read; read and search for a listed directory) and
 * search on every directory above it, by the rules of the kernel: a user
 * gets the owner bits if it owns the object, else the group bits if it is
 * in its group, else the other bits.  A class gets a bit only if every
 * user it may hold would get it; membership in groups other than the
 * view's is unknown, so it counts as possible both ways.  An object with
 * an extended ACL grants nothing certain to anyone but its owner.  The
 * user running gatherfs opened or listed every object itself, so a view
 * owned by it always grants its owner class.
 *
 * Built once at mount time, by one thread; then only read.
 */
#ifndef GATHERFS_PERM_H
#define GATHERFS_PERM_H

#include <sys/types.h>

#include "gatherfs/util/common.h"

/* What an object needs (as in an rwx digit). */
enum { GFS_NEED_R = 4, GFS_NEED_X = 1 };

/* Permission classes of a view, as gfs_perm_bits() returns them. */
enum { GFS_CLASS_OWNER = 4, GFS_CLASS_GROUP = 2, GFS_CLASS_OTHER = 1, GFS_CLASS_ALL = 7 };

typedef struct gfs_perm gfs_perm;

/*
 * gfs_perm_new(): an empty table; self is the effective uid of the
 * process, which opened every object added.  @return GFS_OK and *out.
 */
gfs_err gfs_perm_new(uid_t self, gfs_perm **out);

/* gfs_perm_free(): free the table; NULL allowed. */
void gfs_perm_free(gfs_perm *p);

/*
 * gfs_perm_add_fd(): add the regular file open as fd, needing read: its
 * attributes from fstat(fd), its directories from the path the descriptor
 * resolves to (a symlink's target, not the link).  label names it in
 * messages.  @return GFS_OK and its *id.
 */
gfs_err gfs_perm_add_fd(gfs_perm *p, int fd, const char *label, uint32_t *id);

/*
 * gfs_perm_add_path(): add the file or directory at path (symlinks
 * resolved) needing `need` (GFS_NEED_* bits).  @return GFS_OK and its *id,
 * or an error naming path.
 */
gfs_err gfs_perm_add_path(gfs_perm *p, const char *path, unsigned need, uint32_t *id);

/* gfs_perm_owner(): the owner and group of object id. */
void gfs_perm_owner(const gfs_perm *p, uint32_t id, uid_t *uid, gid_t *gid);

/*
 * gfs_perm_bits(): the GFS_CLASS_* bits of a view owned by uid:gid that are
 * certain to be granted object id's need and search on every directory of
 * its path.  O(depth) the first time for a given (uid, gid), O(1) after.
 */
unsigned gfs_perm_bits(gfs_perm *p, uint32_t id, uid_t uid, gid_t gid);

/* gfs_perm_count(): the number of objects (files and directories) stat()ed. */
size_t gfs_perm_count(const gfs_perm *p);

#endif
