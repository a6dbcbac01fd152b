/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — FUSE low-level operations over a gfs_fs.
 *
 * The only file where gfs_err becomes an errno.  The namespace is static,
 * so entries and attributes are cached by the kernel forever, every
 * listing is a readdirplus (see gfs_ll_init()), files are opened with
 * keep_cache (torch zip views with direct_io, see gfs_ll_open()) and
 * directories are not opened where the kernel allows (else opened with
 * cache_readdir).
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fuse_ll.h"

/*
 * Entry and attribute timeout: the namespace never changes, nor does a
 * size (layout.json's, computed on first use, is the same whenever it is
 * computed), nor an owner or mode (derived once at mount, the same for
 * every user: the kernel checks them, default_permissions, for whoever
 * asks, from cached attributes as from fresh ones).
 */
static const double TIMEOUT = DBL_MAX;

static const gfs_fs *fs_of(fuse_req_t req)
{
	return ((const gfs_mount *)fuse_req_userdata(req))->fs;
}

/* node_of(): the node of ino (maybe made in buf), or NULL after replying ENOENT. */
static const gfs_node *node_of(fuse_req_t req, fuse_ino_t ino, gfs_node *buf)
{
	const gfs_node *n = gfs_fs_node(fs_of(req), ino, buf);

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

/*
 * mountinfo_field_eq(): whether the escaped /proc/self/mountinfo field f
 * (octal escapes \ooo for space, tab, newline, backslash) equals s.
 */
static bool mountinfo_field_eq(const char *f, size_t flen, const char *s)
{
	size_t i = 0;

	while (i < flen) {
		int c = (unsigned char)f[i];

		if (c == '\\' && i + 3 < flen) {
			c = (f[i + 1] - '0') * 64 + (f[i + 2] - '0') * 8 + (f[i + 3] - '0');
			i += 4;
		} else {
			i++;
		}
		if (*s++ != (char)c)
			return false;
	}
	return *s == '\0';
}

/*
 * find_mount(): the last mount at mountpoint in /proc/self/mountinfo
 * ("ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - TYPE SOURCE SUPEROPTS"):
 * true, its MAJ:MIN in dev and its type in type.
 */
static bool find_mount(const char *mountpoint, char *dev, size_t devlen, char *type,
		       size_t typelen)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		char *fields[5];
		char *p = line, *t;
		int k;

		for (k = 0; k < 5; k++) {
			fields[k] = p;
			p = strchr(p, ' ');
			if (!p)
				break;
			*p++ = '\0';
		}
		if (k < 5 || !mountinfo_field_eq(fields[4], strlen(fields[4]), mountpoint))
			continue;
		t = strstr(p, " - ");
		if (!t || strlen(fields[2]) >= devlen)
			continue;
		t += 3;
		(void)snprintf(type, typelen, "%.*s", (int)strcspn(t, " \n"), t);
		strcpy(dev, fields[2]);
		found = true;
	}
	fclose(f);
	return found;
}

bool gfs_ll_mount_type(const char *mountpoint, char *type, size_t len)
{
	char dev[32];

	return find_mount(mountpoint, dev, sizeof(dev), type, len);
}

bool gfs_ll_set_readahead(const char *mountpoint, unsigned kb)
{
	char dev[32], type[64], path[64];
	FILE *f;

	if (kb == 0)
		return true;
	if (!find_mount(mountpoint, dev, sizeof(dev), type, sizeof(type)) ||
	    strncmp(type, "fuse", 4) != 0)
		return false;
	(void)snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	f = fopen(path, "we");
	if (!f)
		return false; /* not permitted (not root): the kernel's default stays */
	fprintf(f, "%u\n", kb);
	return fclose(f) == 0;
}

char *gfs_ll_crc_cache_dir(void)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char *dir;

	if (xdg && xdg[0] == '/') {
		dir = malloc(strlen(xdg) + sizeof("/gatherfs"));
		if (dir)
			(void)sprintf(dir, "%s/gatherfs", xdg);
	} else if (home && home[0] == '/') {
		dir = malloc(strlen(home) + sizeof("/.cache/gatherfs"));
		if (dir)
			(void)sprintf(dir, "%s/.cache/gatherfs", home);
	} else {
		dir = malloc(sizeof("/var/cache/gatherfs"));
		if (dir)
			strcpy(dir, "/var/cache/gatherfs");
	}
	return dir;
}

/*
 * FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6): bit 36 of the INIT
 * flags, so bit 4 of flags2.  Without it the kernel refuses shared
 * mappings of a file opened with direct_io (ENODEV).
 */
#define INIT_FLAGS2_DIRECT_IO_ALLOW_MMAP (1u << (36 - 32))

/* io_read(): read(2) of a request; notes what the INIT request offers. */
static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	gfs_mount *m = userdata;
	const ssize_t n = read(fd, buf, len);
	struct fuse_in_header in;
	struct fuse_init_in init;

	if (atomic_load(&m->init_done) || m->init_read ||
	    n < (ssize_t)(sizeof(in) + sizeof(init)))
		return n;
	memcpy(&in, buf, sizeof(in));
	if (in.opcode != FUSE_INIT)
		return n;
	memcpy(&init, (const char *)buf + sizeof(in), sizeof(init));
	m->init_unique = in.unique;
	m->init_read = true;
	m->mmap_offered = (init.flags & FUSE_INIT_EXT) &&
			  (init.flags2 & INIT_FLAGS2_DIRECT_IO_ALLOW_MMAP);
	return n;
}

/*
 * io_writev(): writev(2) of a reply; the INIT reply (a header and libfuse's
 * whole fuse_init_out) is sent with FUSE_DIRECT_IO_ALLOW_MMAP added if the
 * kernel offered it and libfuse answered with FUSE_INIT_EXT.
 */
static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	gfs_mount *m = userdata;
	struct fuse_out_header out;
	struct fuse_init_out init;
	struct iovec patched[2];

	if (atomic_load(&m->init_done) || !m->init_read || count != 2 ||
	    iov[0].iov_len != sizeof(out) || iov[1].iov_len != sizeof(init))
		return writev(fd, iov, count);
	memcpy(&out, iov[0].iov_base, sizeof(out));
	if (out.unique != m->init_unique)
		return writev(fd, iov, count);
	memcpy(&init, iov[1].iov_base, sizeof(init));
	if (out.error == 0 && m->mmap_offered && (init.flags & FUSE_INIT_EXT)) {
		init.flags2 |= INIT_FLAGS2_DIRECT_IO_ALLOW_MMAP;
		m->direct_mmap = true;
	}
	patched[0] = iov[0];
	patched[1] = (struct iovec){ .iov_base = &init, .iov_len = sizeof(init) };
	atomic_store(&m->init_done, true);
	return writev(fd, patched, 2);
}

static ssize_t io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
			      unsigned int flags, void *userdata)
{
	(void)userdata;
	return splice(fdin, offin, fdout, offout, len, flags);
}

int gfs_ll_custom_io(struct fuse_session *se, gfs_mount *m)
{
	static const struct fuse_custom_io io = {
		.read = io_read,
		.writev = io_writev,
		.splice_send = io_splice_send,
	};

	assert(se && m);
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

static void gfs_ll_init(void *userdata, struct fuse_conn_info *conn)
{
	gfs_mount *m = userdata;

	/* Splice file pieces into replies (see reply_mapped()) unless -o nosplice. */
	m->splice = !m->nosplice && (conn->capable & FUSE_CAP_SPLICE_WRITE);
	if (m->splice)
		conn->want |= FUSE_CAP_SPLICE_WRITE;

	conn->max_read = m->max_read;
	/*
	 * The kernel keeps the lower of this and the window set through sysfs
	 * before this reply (gfs_ll_set_readahead()); 1 MiB here silently
	 * capped -o readahead_kb at 1024.
	 */
	conn->max_readahead = GFS_LL_READAHEAD_KB_MAX << 10;
	conn->max_background = 64; /* parallel readahead and page faults */
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	/*
	 * Every listing is a readdirplus: each entry comes with its inode and
	 * attributes, cached forever, so stat() of a listed name never reaches
	 * us.  The adaptive mode (libfuse's default) asks for attributes only
	 * in the first request of a listing or after a lookup in between:
	 * find and ls read a whole directory before they stat(), so all but
	 * the first batch cost a LOOKUP each (bench/RESULTS.md, Stop 28).
	 * -o readdirplus=auto|no still chooses otherwise.
	 */
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	/*
	 * No OPENDIR and RELEASEDIR: two of the four requests each directory
	 * costs a fresh find (the universal view has one per param).
	 */
	m->no_opendir = conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT;
	if (m->no_opendir)
		conn->want |= FUSE_CAP_NO_OPENDIR_SUPPORT;
	fuse_apply_conn_info_opts(m->conn_opts, conn);
}

static void gfs_ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	const gfs_fs *fs = fs_of(req);
	gfs_node nbuf;
	const gfs_node *dir = node_of(req, parent, &nbuf);
	const gfs_node *n;
	gfs_node ebuf;
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
	n = gfs_fs_lookup(fs, dir, name, &ebuf);
	if (n) {
		const gfs_err err = gfs_fs_stat(fs, n, &e.attr);

		if (err) {
			fuse_reply_err(req, read_errno(err));
			return;
		}
		e.ino = gfs_fs_ino(fs, n);
	}
	fuse_reply_entry(req, &e);
}

static void gfs_ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	gfs_node nbuf;
	const gfs_node *n = node_of(req, ino, &nbuf);
	struct stat st;
	gfs_err err;

	(void)fi;
	if (!n)
		return;
	err = gfs_fs_stat(fs_of(req), n, &st);
	if (err)
		fuse_reply_err(req, read_errno(err));
	else
		fuse_reply_attr(req, &st, TIMEOUT);
}

static void gfs_ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
	gfs_node nbuf;
	const gfs_node *n = node_of(req, ino, &nbuf);

	if (!n)
		return;
	if (n->type != GFS_NODE_LNK)
		fuse_reply_err(req, EINVAL);
	else
		fuse_reply_readlink(req, n->link);
}

static void gfs_ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const gfs_mount *m = fuse_req_userdata(req);
	gfs_node nbuf;
	const gfs_node *n = node_of(req, ino, &nbuf);

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
	/*
	 * torch.load reads a zip view once, front to back, in read(2)s of
	 * whole records.  Through the page cache the reader allocates and
	 * charges every 4 KiB page the read-ahead fills (FUSE's page cache has
	 * no large folios, up to Linux 6.18 at least), which costs it more
	 * than the copy (bench/RESULTS.md); with direct_io each read is a
	 * request whose reply is spliced from the shards straight into the
	 * reader's buffer.  Mappings still go through the page cache: private
	 * ones (torch.load mmap=True) always, shared ones where the kernel
	 * granted FUSE_DIRECT_IO_ALLOW_MMAP (gfs_ll_custom_io(); else ENODEV,
	 * hence -o bin_cache).  tensors/ and optim/ files (a layout
	 * entry each) take direct_io with -o tensors_direct: a first read of
	 * a large tensor then fills no page-cache page (each a new page of
	 * memory, about as dear as the read itself), a second read is served
	 * again.
	 */
	if (n->zip_view ? !m->bin_cache : m->tensors_direct && n->entry >= 0) {
		fi->direct_io = 1;
		/* Reads of a direct-I/O zip view reach us one by one: our own
		 * read-ahead keeps slow storage busy (see prefetch.h).  Out of
		 * memory: the file is read without. */
		if (n->zip_view && m->prefetch) {
			gfs_pfstream *s;

			if (gfs_pfstream_open(m->prefetch, n->vf, &s) == GFS_OK)
				fi->fh = (uint64_t)(uintptr_t)s;
		}
	} else {
		/* Once a source record is found corrupt, an open drops the
		 * file's cached pages: bytes read before are not served again
		 * from the cache (reads of the bad record then fail). */
		fi->keep_cache = gfs_srcset_nbad(m->src) == 0;
	}
	fuse_reply_open(req, fi);
}

static void gfs_ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	gfs_pfstream_close((gfs_pfstream *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/*
 * Per-thread read state.  Copying reads use a buffer kept for the thread's
 * life: a 1 MiB malloc per request is an mmap/munmap pair plus 256 page
 * faults (above glibc's mmap threshold), as costly as the copy itself.
 * Spliced reads describe the reply as extents (memory, or source file
 * ranges) in a bufvec; libfuse splices file ranges into /dev/fuse without
 * copying them through user space.  The key's destructor frees the state.
 */
enum {
	MAP_MAX = 64,
	SCRATCH = 16 << 10,
	/*
	 * Largest spliced reply: libfuse 3.14 splices only if the reply and a
	 * page per buffer fit in a pipe it can grow to pipe-max-size (1 MiB by
	 * default), and otherwise copies through a fresh posix_memalign()
	 * buffer per request; copy such reads ourselves instead.
	 */
	SPLICE_MAX = 768 << 10,
};

/* Direct-I/O reads come in requests of max_read: by default, spliceable. */
_Static_assert(GFS_LL_MAX_READ <= SPLICE_MAX, "default max_read above the splice limit");

typedef struct rstate {
	gfs_vext ext[MAP_MAX];
	uint8_t scratch[SCRATCH]; /* generated bytes (zip headers) of a mapped read */
	struct fuse_bufvec *bv;   /* room for MAP_MAX buffers */
	size_t cap;
	char *buf;                /* cap bytes for copying reads */
} rstate;

static pthread_key_t rstate_key;
static pthread_once_t rstate_once = PTHREAD_ONCE_INIT;

static void rstate_free(void *p)
{
	rstate *r = p;

	if (!r)
		return;
	free(r->bv);
	free(r->buf);
	free(r);
}

static void rstate_key_init(void)
{
	if (pthread_key_create(&rstate_key, rstate_free) != 0)
		abort();
}

/* thread_state(): this thread's read state, or NULL (out of memory). */
static rstate *thread_state(void)
{
	rstate *r;

	(void)pthread_once(&rstate_once, rstate_key_init);
	r = pthread_getspecific(rstate_key);
	if (r)
		return r;
	r = calloc(1, sizeof(*r));
	if (r)
		r->bv = malloc(sizeof(*r->bv) + (MAP_MAX - 1) * sizeof(r->bv->buf[0]));
	if (!r || !r->bv || pthread_setspecific(rstate_key, r) != 0) {
		rstate_free(r);
		return NULL;
	}
	return r;
}

/* thread_buf(): r's copy buffer, grown to at least size bytes, or NULL. */
static char *thread_buf(rstate *r, size_t size)
{
	if (r->cap < size) {
		char *b = gfs_iobuf(size ? size : 1);

		if (!b)
			return NULL;
		free(r->buf);
		r->buf = b;
		r->cap = size;
	}
	return r->buf;
}

/*
 * reply_mapped(): answer a read by splicing; false if the range cannot be
 * mapped (then nothing was replied and the caller copies).
 */
static bool reply_mapped(fuse_req_t req, const gfs_node *n, rstate *r, size_t size,
			 off_t off)
{
	struct fuse_bufvec *bv = r->bv;
	size_t next = 0, got = 0;
	gfs_vfile_buf vb;
	const gfs_vfile *vf = gfs_fs_vfile(fs_of(req), n, &vb);
	gfs_err err;

	if (!vf) /* layout.json, written on demand: copied */
		return false;
	err = gfs_vfile_map(vf, (uint64_t)off, size, r->ext, MAP_MAX, r->scratch,
			    sizeof(r->scratch), &next, &got);
	if (err == GFS_ERR_LIMIT)
		return false;
	if (err) {
		fuse_reply_err(req, read_errno(err));
		return true;
	}
	if (got == 0) {
		fuse_reply_buf(req, NULL, 0);
		return true;
	}
	assert(next > 0 && next <= MAP_MAX);
	bv->count = next;
	bv->idx = 0;
	bv->off = 0;
	for (size_t i = 0; i < next; i++) {
		const gfs_vext *e = &r->ext[i];

		bv->buf[i] = (struct fuse_buf){ .size = e->len };
		if (e->mem) {
			bv->buf[i].mem = (void *)e->mem; /* only read: libfuse's type lacks const */
		} else {
			bv->buf[i].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
			bv->buf[i].fd = e->fd;
			bv->buf[i].pos = (off_t)e->off;
		}
	}
	fuse_reply_data(req, bv, 0); /* replies an error itself if sending fails */
	return true;
}

/* serve_read(): answer a read by splicing, else by copying. */
static void serve_read(fuse_req_t req, const gfs_mount *m, const gfs_node *n, rstate *r,
		       size_t size, off_t off)
{
	size_t got;
	char *buf;
	gfs_err err;

	if (r && m->splice && size <= SPLICE_MAX && reply_mapped(req, n, r, size, off))
		return;
	buf = r ? thread_buf(r, size ? size : 1) : NULL;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	err = gfs_fs_read(fs_of(req), n, (uint64_t)off, buf, size, &got);
	if (err)
		fuse_reply_err(req, read_errno(err));
	else
		fuse_reply_buf(req, buf, got);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * read_ahead(): a read of a file with a read-ahead stream: from its
 * chunks once it prefetches, else served as any read and timed (a slow
 * sequential reader whose bytes are not in the page cache starts the
 * read-ahead).  The stream outlives the
 * reply: its close waits for the put or timed.
 */
static void read_ahead(fuse_req_t req, const gfs_mount *m, const gfs_node *n, rstate *r,
		       gfs_pfstream *s, size_t size, off_t off)
{
	char *buf = r && size > 0 ? thread_buf(r, size) : NULL;
	gfs_pfhit hit;
	uint64_t t0;
	bool cached;

	if (!buf) {
		serve_read(req, m, n, r, size, off);
		return;
	}
	if (gfs_pfstream_get(s, (uint64_t)off, size, (uint8_t *)buf, &hit)) {
		fuse_reply_buf(req, (const char *)hit.mem, hit.len);
		gfs_pfstream_put(s, &hit);
		return;
	}
	/* Slow because the CPU is busy, with the bytes in the page cache: not
	 * a case for the read-ahead (it would copy what splicing serves). */
	cached = gfs_vfile_cached(n->vf, (uint64_t)off, size);
	t0 = now_ns();
	serve_read(req, m, n, r, size, off);
	gfs_pfstream_timed(s, cached ? 0 : now_ns() - t0);
}

static void gfs_ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	const gfs_mount *m = fuse_req_userdata(req);
	gfs_node nbuf;
	const gfs_node *n = node_of(req, ino, &nbuf);
	gfs_pfstream *s = fi ? (gfs_pfstream *)(uintptr_t)fi->fh : NULL;

	if (!n)
		return;
	if (n->type != GFS_NODE_REG) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (s)
		read_ahead(req, m, n, thread_state(), s, size, off);
	else
		serve_read(req, m, n, thread_state(), size, off);
}

static void gfs_ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	gfs_node nbuf;
	const gfs_node *n = node_of(req, ino, &nbuf);

	if (!n)
		return;
	if (n->type != GFS_NODE_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (((const gfs_mount *)fuse_req_userdata(req))->no_opendir) {
		fuse_reply_err(req, ENOSYS);
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
	gfs_node nbuf;
	const gfs_node *dir = node_of(req, ino, &nbuf);
	size_t used = 0;
	size_t count;
	rstate *r;
	char *buf;

	if (!dir)
		return;
	if (dir->type != GFS_NODE_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	r = thread_state();
	buf = r ? thread_buf(r, size ? size : 1) : NULL; /* the thread's, no malloc */
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	count = gfs_fs_dir_count(fs, dir) + 2;
	for (size_t i = off > 0 ? (size_t)off : 0; i < count; i++) {
		gfs_node cbuf;
		const gfs_node *c = i == 0 ? dir
				  : i == 1 ? gfs_fs_node(fs, dir->parent, &cbuf)
				  : gfs_fs_dir_entry(fs, dir, i - 2, &cbuf);
		const char *name = i == 0 ? "." : i == 1 ? ".." : c->name;
		struct fuse_entry_param e;
		gfs_err err;
		size_t len;

		memset(&e, 0, sizeof(e));
		err = gfs_fs_stat(fs, c, &e.attr);
		if (err && used == 0) { /* the next call starts at the entry */
			fuse_reply_err(req, read_errno(err));
			return;
		}
		if (err)
			break;
		if (plus) {
			/* ino 0 for the dot entries: no lookup count, as the kernel expects */
			e.ino = i < 2 ? 0 : gfs_fs_ino(fs, c);
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

/*
 * do_xattr(): getxattr of `name`, or listxattr if name is NULL, with the
 * size protocol (size 0: only the length); errno at the edge.
 */
static void do_xattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	gfs_node nbuf;
	const gfs_node *n = node_of(req, ino, &nbuf);
	char *buf;
	size_t len = 0;
	gfs_err err;

	if (!n)
		return;
	buf = malloc(size ? size : 1);
	if (!buf)
		err = GFS_ERR_NOMEM;
	else if (name)
		err = gfs_fs_getxattr(fs_of(req), n, name, buf, size, &len);
	else
		err = gfs_fs_listxattr(fs_of(req), n, buf, size, &len);
	if (err == GFS_ERR_NOTFOUND)
		fuse_reply_err(req, ENODATA);
	else if (err == GFS_ERR_UNSUPPORTED)
		fuse_reply_err(req, EOPNOTSUPP);
	else if (err == GFS_ERR_LIMIT)
		fuse_reply_err(req, ERANGE);
	else if (err == GFS_ERR_NOMEM)
		fuse_reply_err(req, ENOMEM);
	else if (err) /* user.gatherfs.sha256: its file could not be read */
		fuse_reply_err(req, EIO);
	else if (size == 0)
		fuse_reply_xattr(req, len);
	else
		fuse_reply_buf(req, buf, len);
	free(buf);
}

static void gfs_ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			    size_t size)
{
	do_xattr(req, ino, name, size);
}

static void gfs_ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	do_xattr(req, ino, NULL, size);
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
	.release = gfs_ll_release,
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
