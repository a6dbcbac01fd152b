/*
 * gatherfs — the tensor byte server: pieces -> pread, with dtype conversion.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/server.h"

/* What a source looked like when opened: any change makes reads fail. */
typedef struct src_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	struct timespec ctime;
} src_id;

struct gfs_srcset {
	const gfs_layout *layout;
	size_t n;
	src_id *ids;
	int fds[];
};

static src_id id_of(const struct stat *st)
{
	return (src_id){ .dev = st->st_dev, .ino = st->st_ino, .size = st->st_size,
			 .mtime = st->st_mtim, .ctime = st->st_ctim };
}

static bool same_id(const src_id *a, const src_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* Raise the soft RLIMIT_NOFILE so that need descriptors (plus slack) fit. */
static void raise_nofile(size_t need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need + 64) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

gfs_err gfs_srcset_open(const gfs_layout *l, gfs_srcset **out)
{
	gfs_srcset *s;
	gfs_err err = GFS_OK;

	assert(l->finished);
	s = malloc(sizeof(*s) + l->nsources * sizeof(s->fds[0]));
	if (!s)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	s->layout = l;
	s->n = 0;
	s->ids = gfs_calloc(l->nsources, sizeof(*s->ids));
	if (!s->ids) {
		free(s);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	raise_nofile(l->nsources);
	for (size_t i = 0; i < l->nsources; i++) {
		const gfs_source *src = &l->sources[i];
		struct stat st;
		const int fd = open(src->abspath, O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			err = gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO,
				       "%s: cannot open: %s%s", src->abspath, strerror(errno),
				       errno == EMFILE ? " (raise the open file limit: ulimit -n)" : "");
			break;
		}
		s->fds[s->n++] = fd;
		if (fstat(fd, &st) != 0) {
			err = gfs_fail(GFS_ERR_IO, "%s: stat failed: %s", src->abspath,
				       strerror(errno));
			break;
		}
		if (!S_ISREG(st.st_mode)) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file", src->abspath);
			break;
		}
		if ((uint64_t)st.st_size != src->size) {
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: size is %llu bytes, the layout expects %llu (file changed or truncated)",
				       src->abspath, (unsigned long long)st.st_size,
				       (unsigned long long)src->size);
			break;
		}
		s->ids[i] = id_of(&st);
	}
	if (err) {
		gfs_srcset_close(s);
		return err;
	}
	*out = s;
	return GFS_OK;
}

void gfs_srcset_close(gfs_srcset *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		close(s->fds[i]);
	free(s->ids);
	free(s);
}

int gfs_srcset_fd(const gfs_srcset *s, uint32_t i)
{
	assert(i < s->n);
	return s->fds[i];
}

uint64_t gfs_tensor_out_nbytes(const gfs_layout *l, size_t i, gfs_dtype want)
{
	const gfs_tensor *t = gfs_layout_target(l, i);

	return t->numel * gfs_dtype_size(gfs_dtype_out(t->dtype, want));
}

/*
 * check_unchanged(): fail if source i was modified, truncated or replaced
 * in place since it was opened (a file replaced by rename keeps serving the
 * old inode through our descriptor, which is consistent).
 */
static gfs_err check_unchanged(const gfs_layout *l, const gfs_srcset *s, uint32_t i)
{
	struct stat st;
	src_id now;

	if (fstat(s->fds[i], &st) != 0)
		return gfs_fail(GFS_ERR_IO, "%s: stat failed: %s", l->sources[i].abspath,
				strerror(errno));
	now = id_of(&st);
	if (!same_id(&now, &s->ids[i]))
		return gfs_fail(GFS_ERR_IO,
				"%s: the file changed since it was opened (size %lld, was %lld): refusing to serve its bytes",
				l->sources[i].abspath, (long long)st.st_size,
				(long long)s->ids[i].size);
	return GFS_OK;
}

/* find_piece(): index of the piece containing byte off (off < nbytes). */
static size_t find_piece(const gfs_tensor *t, uint64_t off)
{
	size_t lo = 0, hi = t->npieces;

	assert(t->npieces > 0);
	while (hi - lo > 1) {
		const size_t mid = lo + (hi - lo) / 2;

		if (t->pieces[mid].toff <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* read_native(): bytes [off, off+len) of tensor t in its own dtype. */
static gfs_err read_native(const gfs_layout *l, const gfs_srcset *s,
			   const gfs_tensor *t, uint64_t off, uint8_t *buf, size_t len)
{
	size_t p;

	assert(off + len <= t->nbytes);
	if (len == 0)
		return GFS_OK;
	p = find_piece(t, off);
	while (len > 0) {
		const gfs_piece *pc = &t->pieces[p];
		const uint64_t in = off - pc->toff;
		const size_t n = (size_t)(pc->len - in < len ? pc->len - in : len);

		assert(p < t->npieces && off >= pc->toff && in < pc->len);
		if (pc->kind == GFS_PIECE_ZERO) {
			memset(buf, 0, n);
		} else {
			gfs_err err = gfs_pread_full(s->fds[pc->src], buf, n, pc->src_off + in,
						     l->sources[pc->src].abspath);

			/* After the read: a change during it is caught too. */
			if (!err)
				err = check_unchanged(l, s, pc->src);
			if (err)
				return gfs_fail_prefix(err, "tensor %s", t->name);
		}
		buf += n;
		off += n;
		len -= n;
		p++;
	}
	return GFS_OK;
}

gfs_err gfs_tensor_read(const gfs_layout *l, const gfs_srcset *s, size_t i,
			gfs_dtype want, uint64_t off, void *buf, size_t len)
{
	enum { CHUNK_ELEMS = 16384 };
	const gfs_tensor *t = gfs_layout_target(l, i);
	const gfs_dtype out = gfs_dtype_out(t->dtype, want);
	const size_t is = gfs_dtype_size(t->dtype);
	const size_t os = gfs_dtype_size(out);
	uint8_t *dst = buf;
	uint8_t tmp_in[CHUNK_ELEMS * 8];
	uint8_t tmp_out[CHUNK_ELEMS * 8];

	assert(s->layout == l);
	assert(off + len <= t->numel * os);
	if (out == t->dtype)
		return read_native(l, s, t, off, dst, len);
	while (len > 0) {
		const uint64_t e0 = off / os;
		const size_t skip = (size_t)(off % os);
		uint64_t ne = (skip + len + os - 1) / os;
		size_t take;
		gfs_err err;

		if (ne > CHUNK_ELEMS)
			ne = CHUNK_ELEMS;
		err = read_native(l, s, t, e0 * is, tmp_in, (size_t)ne * is);
		if (err)
			return err;
		gfs_dtype_convert(t->dtype, out, tmp_in, tmp_out, (size_t)ne);
		take = (size_t)ne * os - skip;
		if (take > len)
			take = len;
		memcpy(dst, tmp_out + skip, take);
		dst += take;
		off += take;
		len -= take;
	}
	return GFS_OK;
}
