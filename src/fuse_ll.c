/*
 * gatherfs — FUSE low-level operations over a gfs_fs.
 *
 * The only file where gfs_err becomes an errno.  The namespace is static,
 * so entries and attributes are cached by the kernel forever, files are
 * opened with keep_cache and directories with cache_readdir.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_ll.h"

/* Entry and attribute timeout: the namespace never changes. */
static const double TIMEOUT = DBL_MAX;

static const gfs_fs *fs_of(fuse_req_t req)
{
	return ((const gfs_mount *)fuse_req_userdata(req))->fs;
}

/* node_of(): the node of ino, or NULL after replying ENOENT. */
static const gfs_node *node_of(fuse_req_t req, fuse_ino_t ino)
{
	const gfs_node *n = gfs_fs_node(fs_of(req), ino);

	if (!n)
		fuse_reply_err(req, ENOENT);
	return n;
}

/* read_errno(): errno for a failed read, logged (stderr or syslog). */
static int read_errno(gfs_err err)
{
	fuse_log(FUSE_LOG_ERR, "gatherfs: %s\n", gfs_errmsg());
	return err == GFS_ERR_NOMEM ? ENOMEM : EIO;
}

static void gfs_ll_init(void *userdata, struct fuse_conn_info *conn)
{
	gfs_mount *m = userdata;

	conn->max_read = m->max_read;
	conn->max_readahead = GFS_LL_MAX_READ; /* the kernel lowers it to its own */
	conn->max_background = 64;             /* parallel readahead and page faults */
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	fuse_apply_conn_info_opts(m->conn_opts, conn);
}

static void gfs_ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	const gfs_fs *fs = fs_of(req);
	const gfs_node *dir = node_of(req, parent);
	const gfs_node *n;
	struct fuse_entry_param e;

	if (!dir)
		return;
	if (dir->type != GFS_NODE_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.attr_timeout = TIMEOUT;
	e.entry_timeout = TIMEOUT; /* with ino 0: a cached negative entry */
	n = gfs_fs_lookup(fs, dir, name);
	if (n) {
		e.ino = n->ino;
		gfs_fs_stat(fs, n, &e.attr);
	}
	fuse_reply_entry(req, &e);
}

static void gfs_ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const gfs_node *n = node_of(req, ino);
	struct stat st;

	(void)fi;
	if (!n)
		return;
	gfs_fs_stat(fs_of(req), n, &st);
	fuse_reply_attr(req, &st, TIMEOUT);
}

static void gfs_ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
	const gfs_node *n = node_of(req, ino);

	if (!n)
		return;
	if (n->type != GFS_NODE_LNK)
		fuse_reply_err(req, EINVAL);
	else
		fuse_reply_readlink(req, n->link);
}

static void gfs_ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const gfs_node *n = node_of(req, ino);

	if (!n)
		return;
	if (n->type == GFS_NODE_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void gfs_ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	const gfs_node *n = node_of(req, ino);
	size_t got;
	char *buf;
	gfs_err err;

	(void)fi;
	if (!n)
		return;
	if (n->type != GFS_NODE_REG) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	err = gfs_fs_read(fs_of(req), n, (uint64_t)off, buf, size, &got);
	if (err)
		fuse_reply_err(req, read_errno(err));
	else
		fuse_reply_buf(req, buf, got);
	free(buf);
}

static void gfs_ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const gfs_node *n = node_of(req, ino);

	if (!n)
		return;
	if (n->type != GFS_NODE_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fi->keep_cache = 1;
	fi->cache_readdir = 1;
	fuse_reply_open(req, fi);
}

/*
 * do_readdir(): entries from offset off on; offset k + 1 follows entry k,
 * where entries 0 and 1 are "." and "..".
 */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       bool plus)
{
	const gfs_fs *fs = fs_of(req);
	const gfs_node *dir = node_of(req, ino);
	size_t used = 0;
	size_t count;
	char *buf;

	if (!dir)
		return;
	if (dir->type != GFS_NODE_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	count = gfs_fs_dir_count(fs, dir) + 2;
	for (size_t i = off > 0 ? (size_t)off : 0; i < count; i++) {
		const gfs_node *c = i == 0 ? dir
				  : i == 1 ? gfs_fs_node(fs, dir->parent)
				  : gfs_fs_dir_entry(fs, dir, i - 2);
		const char *name = i == 0 ? "." : i == 1 ? ".." : c->name;
		struct fuse_entry_param e;
		size_t len;

		memset(&e, 0, sizeof(e));
		gfs_fs_stat(fs, c, &e.attr);
		if (plus) {
			/* ino 0 for the dot entries: no lookup count, as the kernel expects */
			e.ino = i < 2 ? 0 : c->ino;
			e.attr_timeout = TIMEOUT;
			e.entry_timeout = TIMEOUT;
			len = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
						     (off_t)i + 1);
		} else {
			len = fuse_add_direntry(req, buf + used, size - used, name, &e.attr,
						(off_t)i + 1);
		}
		if (len > size - used)
			break;
		used += len;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void gfs_ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, false);
}

static void gfs_ll_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			       off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, true);
}

static void gfs_ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	(void)ino;
	gfs_fs_statfs(fs_of(req), &sv);
	fuse_reply_statfs(req, &sv);
}

/* reply_xattr(): the getxattr/listxattr size protocol, errno at the edge. */
static void reply_xattr(fuse_req_t req, gfs_err err, const char *buf, size_t size,
			size_t len)
{
	if (err == GFS_ERR_NOTFOUND)
		fuse_reply_err(req, ENODATA);
	else if (err == GFS_ERR_LIMIT)
		fuse_reply_err(req, ERANGE);
	else if (err)
		fuse_reply_err(req, ENOMEM);
	else if (size == 0)
		fuse_reply_xattr(req, len);
	else
		fuse_reply_buf(req, buf, len);
}

static void gfs_ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			    size_t size)
{
	const gfs_node *n = node_of(req, ino);
	char *buf;
	size_t len = 0;
	gfs_err err;

	if (!n)
		return;
	buf = malloc(size ? size : 1);
	err = buf ? gfs_fs_getxattr(fs_of(req), n, name, buf, size, &len) : GFS_ERR_NOMEM;
	reply_xattr(req, err, buf, size, len);
	free(buf);
}

static void gfs_ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	const gfs_node *n = node_of(req, ino);
	char *buf;
	size_t len = 0;
	gfs_err err;

	if (!n)
		return;
	buf = malloc(size ? size : 1);
	err = buf ? gfs_fs_listxattr(fs_of(req), n, buf, size, &len) : GFS_ERR_NOMEM;
	reply_xattr(req, err, buf, size, len);
	free(buf);
}

/* ---------------------------------------------- modifications: read-only */

static void gfs_ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			   int to_set, struct fuse_file_info *fi)
{
	(void)ino, (void)attr, (void)to_set, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
			 mode_t mode, dev_t rdev)
{
	(void)parent, (void)name, (void)mode, (void)rdev;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
			 mode_t mode)
{
	(void)parent, (void)name, (void)mode;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			   const char *name)
{
	(void)link, (void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			  fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	(void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
			const char *newname)
{
	(void)ino, (void)newparent, (void)newname;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
			 size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino, (void)buf, (void)size, (void)off, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			    const char *value, size_t size, int flags)
{
	(void)ino, (void)name, (void)value, (void)size, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino, (void)name;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_create(fuse_req_t req, fuse_ino_t parent, const char *name,
			  mode_t mode, struct fuse_file_info *fi)
{
	(void)parent, (void)name, (void)mode, (void)fi;
	fuse_reply_err(req, EROFS);
}

static void gfs_ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
			     off_t length, struct fuse_file_info *fi)
{
	(void)ino, (void)mode, (void)offset, (void)length, (void)fi;
	fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops gfs_ll_ops = {
	.init = gfs_ll_init,
	.lookup = gfs_ll_lookup,
	.getattr = gfs_ll_getattr,
	.readlink = gfs_ll_readlink,
	.open = gfs_ll_open,
	.read = gfs_ll_read,
	.opendir = gfs_ll_opendir,
	.readdir = gfs_ll_readdir,
	.readdirplus = gfs_ll_readdirplus,
	.statfs = gfs_ll_statfs,
	.getxattr = gfs_ll_getxattr,
	.listxattr = gfs_ll_listxattr,
	.setattr = gfs_ll_setattr,
	.mknod = gfs_ll_mknod,
	.mkdir = gfs_ll_mkdir,
	.unlink = gfs_ll_unlink,
	.rmdir = gfs_ll_unlink,
	.symlink = gfs_ll_symlink,
	.rename = gfs_ll_rename,
	.link = gfs_ll_link,
	.write = gfs_ll_write,
	.setxattr = gfs_ll_setxattr,
	.removexattr = gfs_ll_removexattr,
	.create = gfs_ll_create,
	.fallocate = gfs_ll_fallocate,
};
