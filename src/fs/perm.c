/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — per-class access of views derived from the files behind them
 * and the directories on their paths (see perm.h).
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "gatherfs/fs/perm.h"

#define NO_PARENT UINT32_MAX
#define ACL_XATTR "system.posix_acl_access"

typedef struct pobj {
	char *path;      /* directories: the canonical path (the hash key); files: NULL */
	uid_t uid;
	gid_t gid;
	mode_t mode;
	bool acl;        /* an extended ACL: only the owner's access is certain */
	unsigned need;   /* GFS_NEED_* */
	uint32_t parent; /* the directory holding it, NO_PARENT for "/" */
	bool memo;       /* memo_bits is valid for (memo_uid, memo_gid) */
	uid_t memo_uid;
	gid_t memo_gid;
	unsigned memo_bits;
} pobj;

struct gfs_perm {
	uid_t self;
	pobj *obj;
	size_t n;
	size_t cap;
	uint32_t *hash; /* directory lookup: object index + 1, 0 = empty */
	size_t hash_cap;
};

gfs_err gfs_perm_new(uid_t self, gfs_perm **out)
{
	gfs_perm *p = calloc(1, sizeof(*p));

	if (!p)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	p->self = self;
	*out = p;
	return GFS_OK;
}

void gfs_perm_free(gfs_perm *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		free(p->obj[i].path);
	free(p->obj);
	free(p->hash);
	free(p);
}

size_t gfs_perm_count(const gfs_perm *p)
{
	return p->n;
}

static uint64_t hash_path(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h;
}

/* slot_of(): the hash slot of path[0..len): its object or the empty slot. */
static size_t slot_of(const gfs_perm *p, const char *path, size_t len)
{
	size_t i = (size_t)hash_path(path, len) & (p->hash_cap - 1);

	for (;;) {
		const uint32_t k = p->hash[i];

		if (k == 0)
			return i;
		if (strlen(p->obj[k - 1].path) == len && memcmp(p->obj[k - 1].path, path, len) == 0)
			return i;
		i = (i + 1) & (p->hash_cap - 1);
	}
}

/* hash_grow(): keep the table at most half full. */
static bool hash_grow(gfs_perm *p)
{
	uint32_t *old = p->hash;
	const size_t old_cap = p->hash_cap;
	const size_t cap = old_cap ? 2 * old_cap : 64;

	p->hash = gfs_calloc(cap, sizeof(*p->hash));
	if (!p->hash) {
		p->hash = old;
		return false;
	}
	p->hash_cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (old[i]) {
			const char *s = p->obj[old[i] - 1].path;

			p->hash[slot_of(p, s, strlen(s))] = old[i];
		}
	}
	free(old);
	return true;
}

/* has_acl(): an extended access ACL on the object (errors count as one). */
static bool has_acl(ssize_t r)
{
	return r > 0 || (r < 0 && errno != ENODATA && errno != ENOTSUP && errno != EOPNOTSUPP);
}

/* push(): append an object; @return its index in *id. */
static gfs_err push(gfs_perm *p, const struct stat *st, bool acl, unsigned need,
		    uint32_t parent, char *path, uint32_t *id)
{
	if (p->n >= UINT32_MAX - 1 ||
	    !gfs_grow((void **)&p->obj, &p->cap, p->n, sizeof(*p->obj), 64)) {
		free(path);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	p->obj[p->n] = (pobj){ .path = path, .uid = st->st_uid, .gid = st->st_gid,
			       .mode = st->st_mode, .acl = acl, .need = need, .parent = parent };
	*id = (uint32_t)p->n++;
	return GFS_OK;
}

/* parent_len(): the length of the directory part of canonical path[0..len). */
static size_t parent_len(const char *path, size_t len)
{
	size_t i = len;

	assert(len > 1 && path[0] == '/');
	while (i > 0 && path[i - 1] != '/')
		i--;
	return i > 1 ? i - 1 : 1;
}

/* dir_of(): the object of directory path[0..len) (canonical), added on first use. */
static gfs_err dir_of(gfs_perm *p, const char *path, size_t len, uint32_t *id)
{
	uint32_t parent = NO_PARENT;
	struct stat st;
	char *copy;
	gfs_err err;
	size_t slot;

	if ((p->n + 1) * 2 > p->hash_cap && !hash_grow(p))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	slot = slot_of(p, path, len);
	if (p->hash[slot]) {
		*id = p->hash[slot] - 1;
		return GFS_OK;
	}
	if (len > 1) {
		err = dir_of(p, path, parent_len(path, len), &parent);
		if (err)
			return err;
	}
	copy = gfs_strndup(path, len);
	if (!copy)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (stat(copy, &st) != 0) {
		err = gfs_fail(GFS_ERR_IO, "%s: cannot stat: %s", copy, strerror(errno));
		free(copy);
		return err;
	}
	err = push(p, &st, has_acl(getxattr(copy, ACL_XATTR, NULL, 0)), GFS_NEED_X, parent,
		   copy, id);
	if (err)
		return err;
	/* the table may have grown in the recursion: find the slot again */
	p->hash[slot_of(p, path, len)] = *id + 1;
	return GFS_OK;
}

/* parent_of(): the object of the directory holding canonical path. */
static gfs_err parent_of(gfs_perm *p, const char *path, uint32_t *parent)
{
	const size_t len = strlen(path);

	if (path[0] != '/' || len < 2)
		return gfs_fail(GFS_ERR_INVAL, "%s: not an absolute path to a file", path);
	return dir_of(p, path, parent_len(path, len), parent);
}

gfs_err gfs_perm_add_fd(gfs_perm *p, int fd, const char *label, uint32_t *id)
{
	char link[64];
	char path[PATH_MAX];
	struct stat st;
	uint32_t parent;
	ssize_t n;
	gfs_err err;

	if (fstat(fd, &st) != 0)
		return gfs_fail(GFS_ERR_IO, "%s: cannot stat: %s", label, strerror(errno));
	(void)snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n > 0 && (size_t)n < sizeof(path) - 1 && path[0] == '/') {
		path[n] = '\0';
	} else if (!realpath(label, path)) {
		return gfs_fail(GFS_ERR_IO, "%s: cannot resolve its path: %s", label,
				strerror(errno));
	}
	err = parent_of(p, path, &parent);
	if (err)
		return gfs_fail_prefix(err, "%s", label);
	return push(p, &st, has_acl(fgetxattr(fd, ACL_XATTR, NULL, 0)), GFS_NEED_R, parent,
		    NULL, id);
}

gfs_err gfs_perm_add_path(gfs_perm *p, const char *path, unsigned need, uint32_t *id)
{
	char real[PATH_MAX];
	struct stat st;
	uint32_t parent = NO_PARENT;
	gfs_err err;

	assert(need && !(need & ~(unsigned)(GFS_NEED_R | GFS_NEED_X)));
	if (!realpath(path, real) || stat(real, &st) != 0)
		return gfs_fail(GFS_ERR_IO, "%s: cannot resolve: %s", path, strerror(errno));
	if (strcmp(real, "/") != 0) {
		err = parent_of(p, real, &parent);
		if (err)
			return err;
	}
	return push(p, &st, has_acl(getxattr(real, ACL_XATTR, NULL, 0)), need, parent, NULL, id);
}

void gfs_perm_owner(const gfs_perm *p, uint32_t id, uid_t *uid, gid_t *gid)
{
	assert(id < p->n);
	*uid = p->obj[id].uid;
	*gid = p->obj[id].gid;
}

/* own_bits(): the classes of a view uid:gid certain to get o's need on o itself. */
static unsigned own_bits(const pobj *o, uid_t uid, gid_t gid)
{
	const unsigned need = o->need;
	const bool u = ((o->mode >> 6) & need) == need;
	const bool g = !o->acl && ((o->mode >> 3) & need) == need;
	const bool a = !o->acl && (o->mode & need) == need;
	/* a user of the group or other class may be o's owner, if that is not uid */
	const bool as_owner = o->uid == uid || u;
	const bool owner = o->uid == uid ? u : g && a;
	const bool group = as_owner && (o->gid == gid ? g : g && a);
	const bool other = as_owner && (o->gid == gid || g) && a;

	return (owner ? GFS_CLASS_OWNER : 0) | (group ? GFS_CLASS_GROUP : 0) |
	       (other ? GFS_CLASS_OTHER : 0);
}

unsigned gfs_perm_bits(gfs_perm *p, uint32_t id, uid_t uid, gid_t gid)
{
	pobj *o;
	unsigned bits;

	assert(id < p->n);
	o = &p->obj[id];
	if (o->memo && o->memo_uid == uid && o->memo_gid == gid)
		return o->memo_bits;
	bits = own_bits(o, uid, gid);
	if (uid == p->self)
		bits |= GFS_CLASS_OWNER; /* it opened or listed the object itself */
	if (o->parent != NO_PARENT && bits)
		bits &= gfs_perm_bits(p, o->parent, uid, gid);
	o = &p->obj[id];
	o->memo = true;
	o->memo_uid = uid;
	o->memo_gid = gid;
	o->memo_bits = bits;
	return bits;
}
