/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the tensor byte server: pieces -> pread, with dtype conversion.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "gatherfs/server/compute.h"
#include "gatherfs/server/declcheck.h"
#include "gatherfs/server/integrity.h"
#include "gatherfs/server/server.h"
#include "gatherfs/util/pfor.h"

/* What a source looked like when opened: any change makes reads fail. */
typedef struct src_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	struct timespec ctime;
} src_id;

static _Atomic uint64_t srcset_gen;

struct gfs_srcset {
	const gfs_layout *layout;
	uint64_t gen; /* distinct for every gfs_srcset_open() */
	size_t n;
	src_id *ids;
	struct rec_table *rt;
	gfs_ccache *cc; /* computed tensors' cache, NULL if the layout has none */
	bool verify;    /* reads check the records they touch (gfs_srcset_set_verify()) */
	gfs_notice_fn notice;
	atomic_bool noticed; /* the notice of a large first check was given */
	int *cfds;      /* [n]: the record check's descriptors (gfs_srcset_check_fd()) */
	int fds[];
};

/* The background check of an entry (bg_start()): none yet, running, ended. */
enum { BG_NONE, BG_RUNNING, BG_DONE };

/* What the record checks found (gfs_rec_state), mutable behind a const srcset. */
typedef struct rec_table {
	pthread_mutex_t mu; /* with cv: waiting for a BUSY record */
	pthread_cond_t cv;
	atomic_size_t nbad;  /* records found BAD */
	_Atomic int *state;  /* [nrecords] */
	size_t *piece_base;  /* [entries]: index of each tensor's first piece in piece_crc */
	uint32_t *piece_crc; /* CRC-32 of each contiguous FILE piece of an OK record */
	_Atomic unsigned char *bg; /* [entries]: BG_NONE, BG_RUNNING or BG_DONE */
	unsigned nbg;        /* background checks running (under mu; cv signals the end of one) */
	atomic_bool stop;    /* set by gfs_srcset_close(): background checks stop */
	_Atomic(gfs_pool *) io; /* parallel piece reads (io_pool()), NULL until the first */
	atomic_bool io_failed;  /* the pool could not start: reads stay serial */
	atomic_uint_fast64_t nparallel; /* spans read on it */
	pthread_mutex_t decl_mu; /* held while the declarations are checked */
	_Atomic int decl_state;  /* DECL_* */
	char *decl_why;          /* DECL_WRONG: the line (set before decl_state) */
	_Atomic int *rep;    /* [entries] rep_state of each entry's on_read replicas; NULL: no replicas */
	size_t *rep_bad;     /* [entries] REP_BAD: the replica that differs */
} rec_table;

/* The declarations' check in a srcset (gfs_srcset_decls_require()). */
enum { DECL_UNCHECKED, DECL_RIGHT, DECL_WRONG };

/* What the comparison of an entry's replicas (gfs_layout.replicas) found. */
enum rep_state { REP_NONE, REP_UNCHECKED, REP_BUSY, REP_OK, REP_BAD };

static void rec_table_free(rec_table *rt)
{
	if (!rt)
		return;
	gfs_pool_free(atomic_load(&rt->io)); /* idle: no read is in flight any more */
	pthread_cond_destroy(&rt->cv);
	pthread_mutex_destroy(&rt->mu);
	pthread_mutex_destroy(&rt->decl_mu);
	free(rt->decl_why);
	free(rt->state);
	free(rt->piece_base);
	free(rt->piece_crc);
	free(rt->bg);
	free(rt->rep);
	free(rt->rep_bad);
	free(rt);
}

static rec_table *rec_table_new(const gfs_layout *l)
{
	rec_table *rt = calloc(1, sizeof(*rt));
	const size_t nent = gfs_layout_nentries(l);
	size_t npieces = 0;

	if (!rt)
		return NULL;
	if (pthread_mutex_init(&rt->mu, NULL) != 0) {
		free(rt);
		return NULL;
	}
	if (pthread_cond_init(&rt->cv, NULL) != 0) {
		pthread_mutex_destroy(&rt->mu);
		free(rt);
		return NULL;
	}
	if (pthread_mutex_init(&rt->decl_mu, NULL) != 0) {
		pthread_cond_destroy(&rt->cv);
		pthread_mutex_destroy(&rt->mu);
		free(rt);
		return NULL;
	}
	atomic_init(&rt->decl_state, DECL_UNCHECKED);
	atomic_init(&rt->nbad, 0);
	atomic_init(&rt->stop, false);
	atomic_init(&rt->io, NULL);
	atomic_init(&rt->io_failed, false);
	atomic_init(&rt->nparallel, 0);
	rt->state = gfs_calloc(l->nrecords ? l->nrecords : 1, sizeof(*rt->state));
	rt->piece_base = gfs_calloc(nent ? nent : 1, sizeof(*rt->piece_base));
	rt->bg = gfs_calloc(nent ? nent : 1, sizeof(*rt->bg));
	for (size_t i = 0; rt->piece_base && i < nent; i++) {
		rt->piece_base[i] = npieces;
		npieces += l->tensors[i].npieces;
	}
	rt->piece_crc = gfs_calloc(npieces ? npieces : 1, sizeof(*rt->piece_crc));
	if (!rt->state || !rt->piece_base || !rt->piece_crc || !rt->bg) {
		rec_table_free(rt);
		return NULL;
	}
	for (size_t i = 0; i < nent; i++)
		atomic_init(&rt->bg[i], BG_NONE);
	for (size_t r = 0; r < l->nrecords; r++)
		atomic_init(&rt->state[r], GFS_REC_UNCHECKED);
	if (l->nreplicas) {
		rt->rep = gfs_calloc(nent, sizeof(*rt->rep));
		rt->rep_bad = gfs_calloc(nent, sizeof(*rt->rep_bad));
		if (!rt->rep || !rt->rep_bad) {
			rec_table_free(rt);
			return NULL;
		}
		for (size_t i = 0; i < nent; i++)
			atomic_init(&rt->rep[i], REP_NONE);
		for (size_t r = 0; r < l->nreplicas; r++)
			if (l->replicas[r].on_read)
				atomic_store(&rt->rep[l->replicas[r].ti], REP_UNCHECKED);
	}
	return rt;
}

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

/*
 * check_fd(): a second open file of fd's file (id: its identity), with the
 * kernel's read-ahead off, for the record check (gfs_srcset_check_fd());
 * fd itself if none can be had.  Reopened through /proc/self/fd: the same
 * inode, whatever became of its name.
 */
static int check_fd(int fd, const src_id *id)
{
	char path[64];
	struct stat st;
	int cfd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	cfd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY); /* a regular file: no FIFO to hang on */
	if (cfd < 0)
		return fd;
	if (fstat(cfd, &st) != 0 || st.st_dev != id->dev || st.st_ino != id->ino) {
		close(cfd);
		return fd;
	}
	(void)posix_fadvise(cfd, 0, 0, POSIX_FADV_RANDOM);
	return cfd;
}

/*
 * open_check_fds(): the check's descriptors of every source of s, if the
 * open file limit leaves room for them all next to the sources' own and
 * the daemon's (descriptors are numbered lowest first: the last source's
 * tells how many are open); else the sources' own, shared.
 */
static void open_check_fds(gfs_srcset *s)
{
	struct rlimit rl;
	const bool room = s->n == 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 ||
			  rl.rlim_cur == RLIM_INFINITY ||
			  (rlim_t)s->fds[s->n - 1] + s->n + 64 < rl.rlim_cur;

	for (size_t i = 0; i < s->n; i++)
		s->cfds[i] = room ? check_fd(s->fds[i], &s->ids[i]) : s->fds[i];
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
	s->gen = ++srcset_gen;
	s->n = 0;
	s->cc = NULL;
	s->verify = true;
	s->notice = NULL;
	atomic_init(&s->noticed, false);
	s->ids = gfs_calloc(l->nsources, sizeof(*s->ids));
	s->cfds = gfs_calloc(l->nsources, sizeof(*s->cfds));
	s->rt = rec_table_new(l);
	if (!s->ids || !s->cfds || !s->rt) {
		free(s->ids);
		free(s->cfds);
		rec_table_free(s->rt);
		free(s);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < l->nsources; i++)
		s->cfds[i] = -1;
	raise_nofile(2 * l->nsources);
	for (size_t i = 0; i < l->nsources; i++) {
		const gfs_source *src = &l->sources[i];
		struct stat st;
		/* O_NONBLOCK: a FIFO named as a source must not hang the open */
		const int fd = open(src->abspath, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

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
		if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
			err = gfs_fail(GFS_ERR_IO, "%s: fcntl failed: %s", src->abspath,
				       strerror(errno));
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
	if (!err)
		open_check_fds(s);
	if (!err && l->inputs)
		err = gfs_ccache_new(l, &s->cc);
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
	if (s->rt) { /* background checks stop after their batch */
		atomic_store(&s->rt->stop, true);
		(void)pthread_mutex_lock(&s->rt->mu);
		while (s->rt->nbg)
			(void)pthread_cond_wait(&s->rt->cv, &s->rt->mu);
		(void)pthread_mutex_unlock(&s->rt->mu);
	}
	for (size_t i = 0; i < s->n; i++) {
		if (s->cfds[i] >= 0 && s->cfds[i] != s->fds[i])
			close(s->cfds[i]);
		close(s->fds[i]);
	}
	free(s->cfds);
	rec_table_free(s->rt);
	gfs_ccache_free(s->cc);
	free(s->ids);
	free(s);
}

gfs_rec_state gfs_srcset_rec_state(const gfs_srcset *s, uint32_t r)
{
	assert(r < s->layout->nrecords);
	return (gfs_rec_state)atomic_load(&s->rt->state[r]);
}

bool gfs_srcset_rec_try_claim(const gfs_srcset *s, uint32_t r)
{
	int state = GFS_REC_UNCHECKED;

	assert(r < s->layout->nrecords);
	return atomic_compare_exchange_strong(&s->rt->state[r], &state, GFS_REC_BUSY);
}

bool gfs_srcset_rec_claim(const gfs_srcset *s, uint32_t r)
{
	if (gfs_srcset_rec_try_claim(s, r))
		return true;
	if (atomic_load(&s->rt->state[r]) == GFS_REC_BUSY) {
		(void)pthread_mutex_lock(&s->rt->mu);
		while (atomic_load(&s->rt->state[r]) == GFS_REC_BUSY)
			(void)pthread_cond_wait(&s->rt->cv, &s->rt->mu);
		(void)pthread_mutex_unlock(&s->rt->mu);
	}
	return false;
}

void gfs_srcset_rec_settle(const gfs_srcset *s, uint32_t r, gfs_rec_state state)
{
	assert(r < s->layout->nrecords && state != GFS_REC_BUSY);
	assert(atomic_load(&s->rt->state[r]) == GFS_REC_BUSY);
	if (state == GFS_REC_BAD)
		atomic_fetch_add(&s->rt->nbad, 1);
	atomic_store(&s->rt->state[r], state);
	(void)pthread_mutex_lock(&s->rt->mu);
	(void)pthread_cond_broadcast(&s->rt->cv);
	(void)pthread_mutex_unlock(&s->rt->mu);
}

/* piece_is_summed(): is pc a piece whose CRC-32 a record check records? */
static bool piece_is_summed(const gfs_piece *pc)
{
	return pc->kind == GFS_PIECE_FILE && pc->count == 1 && pc->rec != GFS_NO_RECORD;
}

/* piece_summed_at(): piece_is_summed() of piece p of entry ti. */
static bool piece_summed_at(const gfs_layout *l, size_t ti, size_t p)
{
	const gfs_piece pc = gfs_tensor_piece(&l->tensors[ti], p);

	return piece_is_summed(&pc);
}

void gfs_srcset_set_piece_crc(const gfs_srcset *s, size_t ti, size_t p, uint32_t crc)
{
	assert(ti < gfs_layout_nentries(s->layout) && p < s->layout->tensors[ti].npieces);
	assert(piece_summed_at(s->layout, ti, p));
	s->rt->piece_crc[s->rt->piece_base[ti] + p] = crc;
}

bool gfs_srcset_piece_crc(const gfs_srcset *s, size_t ti, size_t p, uint32_t *crc)
{
	gfs_piece pcv;
	const gfs_piece *pc = &pcv;

	assert(ti < gfs_layout_nentries(s->layout) && p < s->layout->tensors[ti].npieces);
	pcv = gfs_tensor_piece(&s->layout->tensors[ti], p);
	if (!piece_is_summed(pc) || atomic_load(&s->rt->state[pc->rec]) != GFS_REC_OK)
		return false;
	*crc = s->rt->piece_crc[s->rt->piece_base[ti] + p];
	return true;
}

void gfs_srcset_set_verify(gfs_srcset *s, bool on, gfs_notice_fn notice)
{
	s->verify = on;
	s->notice = notice;
}

bool gfs_srcset_replicas_servable(const gfs_srcset *s, size_t ti)
{
	assert(ti < gfs_layout_nentries(s->layout));
	return !s->verify || !s->rt->rep || atomic_load(&s->rt->rep[ti]) == REP_NONE ||
	       atomic_load(&s->rt->rep[ti]) == REP_OK;
}

bool gfs_srcset_rec_servable(const gfs_srcset *s, uint32_t r)
{
	const int state = atomic_load(&s->rt->state[r]);

	assert(r < s->layout->nrecords);
	return state == GFS_REC_OK ||
	       (!s->verify && state != GFS_REC_BAD && !s->layout->records[r].lazy);
}

gfs_err gfs_srcset_decls_require(const gfs_srcset *s)
{
	rec_table *rt = s->rt;
	gfs_err err = GFS_OK;

	if (atomic_load(&rt->decl_state) == DECL_UNCHECKED) {
		(void)pthread_mutex_lock(&rt->decl_mu);
		if (atomic_load(&rt->decl_state) == DECL_UNCHECKED) {
			char *why = NULL;

			err = gfs_decl_check(s->layout, s, &why, NULL);
			if (!err) {
				rt->decl_why = why;
				atomic_store(&rt->decl_state, why ? DECL_WRONG : DECL_RIGHT);
			}
		}
		(void)pthread_mutex_unlock(&rt->decl_mu);
	}
	if (err)
		return gfs_fail_prefix(err, "checking %s against the data", s->layout->decls.what);
	if (atomic_load(&rt->decl_state) == DECL_WRONG)
		return gfs_fail(GFS_ERR_IO, "%s", rt->decl_why);
	return GFS_OK;
}

bool gfs_srcset_decls_wrong(const gfs_srcset *s)
{
	return atomic_load(&s->rt->decl_state) == DECL_WRONG;
}

bool gfs_srcset_entry_servable(const gfs_srcset *s, size_t i)
{
	return !s->verify || !s->layout->decls.ngoverned ||
	       atomic_load(&s->rt->decl_state) == DECL_RIGHT || !gfs_layout_governed(s->layout, i);
}

size_t gfs_srcset_nbad(const gfs_srcset *s)
{
	return atomic_load(&s->rt->nbad);
}

/* bad_record(): the error for a read of record r, found corrupt. */
static gfs_err bad_record(const gfs_layout *l, uint32_t r)
{
	char desc[1024];

	return gfs_fail(GFS_ERR_IO,
			"%s does not match its stored CRC-32: refusing to serve its bytes",
			gfs_record_describe(l, r, 8, desc, sizeof(desc)));
}

uint64_t gfs_srcset_parallel_spans(const gfs_srcset *s)
{
	return (uint64_t)atomic_load(&s->rt->nparallel);
}

bool gfs_srcset_remote(const gfs_srcset *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (gfs_fd_remote(s->fds[i]))
			return true;
	return false;
}

int gfs_srcset_fd(const gfs_srcset *s, uint32_t i)
{
	assert(i < s->n);
	return s->fds[i];
}

int gfs_srcset_check_fd(const gfs_srcset *s, uint32_t i)
{
	assert(i < s->n);
	return s->cfds[i];
}

uint64_t gfs_tensor_out_nbytes(const gfs_layout *l, size_t i, gfs_dtype want)
{
	const gfs_tensor *t = gfs_layout_target(l, i);

	return t->numel * gfs_dtype_size(gfs_dtype_out(t->dtype, want));
}

/* change_of(): what differs between a source as opened (was) and now, in words. */
static void change_of(const src_id *was, const src_id *now, char *buf, size_t cap)
{
	if (was->dev != now->dev || was->ino != now->ino)
		snprintf(buf, cap, "another file is in its place");
	else if (was->size != now->size)
		snprintf(buf, cap, "its size is %lld bytes, was %lld", (long long)now->size,
			 (long long)was->size);
	else if (was->mtime.tv_sec != now->mtime.tv_sec || was->mtime.tv_nsec != now->mtime.tv_nsec)
		snprintf(buf, cap, "its contents were modified: mtime %lld.%09ld, was %lld.%09ld",
			 (long long)now->mtime.tv_sec, now->mtime.tv_nsec,
			 (long long)was->mtime.tv_sec, was->mtime.tv_nsec);
	else
		snprintf(buf, cap, "its inode changed (ctime): owner, mode or times were set");
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
	/* Unlinking (rm, or rename over it) changes only the ctime: not the bytes. */
	if (st.st_nlink == 0)
		now.ctime = s->ids[i].ctime;
	if (!same_id(&now, &s->ids[i])) {
		char what[128];

		change_of(&s->ids[i], &now, what, sizeof(what));
		return gfs_fail(GFS_ERR_IO,
				"%s: the file changed since it was opened (%s): refusing to serve its bytes",
				l->sources[i].abspath, what);
	}
	return GFS_OK;
}

gfs_err gfs_srcset_check(const gfs_layout *l, const gfs_srcset *s, uint32_t i)
{
	assert(s->layout == l && i < s->n);
	return check_unchanged(l, s, i);
}

/*
 * The zstd reader.  A frame that decompresses to at most ZCACHE_FRAME_MAX
 * bytes (and the budget) is decompressed whole, once, into a cache shared by
 * all threads (ZCACHE_SLOTS frames, a budget of 256 MiB or
 * GATHERFS_ZSTD_CACHE_MB in all, least recently used out first; reads copy
 * under its lock).  A larger frame is streamed: one
 * decompression stream per thread, positioned inside one frame, with a
 * window of the ZSTD_WINDOW most recently decompressed bytes.  A read inside
 * the window is a copy; a read further on decompresses forward; a read
 * before the window restarts the frame.  So sequential reads of a large
 * frame cost one pass per reading thread, random reads up to one pass per
 * read.  Memory: the budget plus, per thread, ZSTD_WINDOW and the
 * decoder's state (bounded by ZSTD_WINDOW_LOG_MAX).
 */
enum { ZSTD_WINDOW = 8 << 20, ZSTD_INBUF = 1 << 17, ZSTD_WINDOW_LOG_MAX = 27 };
enum { ZCACHE_SLOTS = 32 };
#define ZCACHE_FRAME_MAX ((uint64_t)64 << 20)
#define ZCACHE_BUDGET_DEFAULT ((uint64_t)256 << 20)

/*
 * The cache budget: GATHERFS_ZSTD_CACHE_MB from the environment (0 turns the
 * shared cache off: every frame is streamed), else ZCACHE_BUDGET_DEFAULT.
 */
static uint64_t zcache_budget;
static pthread_once_t zcache_once = PTHREAD_ONCE_INIT;

#define ZCACHE_MB_MAX ((uint64_t)1 << 20)

/* zcache_env(): GATHERFS_ZSTD_CACHE_MB in bytes (*set: it is given); false if malformed. */
static bool zcache_env(uint64_t *bytes, bool *set)
{
	const char *env = getenv("GATHERFS_ZSTD_CACHE_MB");
	char *end;
	unsigned long long mb;

	*set = env && *env;
	if (!*set)
		return true;
	errno = 0;
	mb = strtoull(env, &end, 10);
	if (*end != '\0' || errno || env[0] < '0' || env[0] > '9' || mb > ZCACHE_MB_MAX)
		return false;
	*bytes = (uint64_t)mb << 20;
	return true;
}

gfs_err gfs_zstd_cache_check(void)
{
	uint64_t bytes;
	bool set;

	if (!zcache_env(&bytes, &set))
		return gfs_fail(GFS_ERR_INVAL,
				"GATHERFS_ZSTD_CACHE_MB=%s: expected a whole number of MiB from 0 to %llu",
				getenv("GATHERFS_ZSTD_CACHE_MB"), (unsigned long long)ZCACHE_MB_MAX);
	return GFS_OK;
}

static void zcache_budget_init(void)
{
	uint64_t bytes = ZCACHE_BUDGET_DEFAULT;
	bool set;

	if (!zcache_env(&bytes, &set) || !set)
		bytes = ZCACHE_BUDGET_DEFAULT;
	zcache_budget = bytes;
}

/* zcache_fits(): is pc's frame served through the shared cache? */
static bool zcache_fits(const gfs_piece *pc)
{
	(void)pthread_once(&zcache_once, zcache_budget_init);
	return pc->frame_size <= ZCACHE_FRAME_MAX && pc->frame_size <= zcache_budget;
}

/* A decompressed frame of the shared cache. */
typedef struct zslot {
	uint8_t *data;      /* NULL: free slot */
	uint64_t size;
	uint64_t gen;       /* srcset generation, source, frame offset: the key */
	uint32_t src;
	uint64_t frame_off;
	uint64_t used;      /* LRU tick */
} zslot;

static struct {
	pthread_mutex_t mu;
	zslot slot[ZCACHE_SLOTS];
	uint64_t bytes;
	uint64_t tick;
} zcache = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* zcache_copy(): copy n bytes at off of pc's frame if cached. */
static bool zcache_copy(const gfs_srcset *s, const gfs_piece *pc, uint64_t off, uint8_t *buf,
			size_t n)
{
	bool hit = false;

	(void)pthread_mutex_lock(&zcache.mu);
	for (size_t i = 0; i < ZCACHE_SLOTS; i++) {
		zslot *z = &zcache.slot[i];

		if (z->data && z->gen == s->gen && z->src == pc->src &&
		    z->frame_off == pc->frame_off) {
			assert(off + n <= z->size);
			memcpy(buf, z->data + off, n);
			z->used = ++zcache.tick;
			hit = true;
			break;
		}
	}
	(void)pthread_mutex_unlock(&zcache.mu);
	return hit;
}

/* zcache_put(): insert pc's decompressed frame (taking data), evicting LRU frames. */
static void zcache_put(const gfs_srcset *s, const gfs_piece *pc, uint8_t *data)
{
	zslot *free_slot = NULL;

	(void)pthread_mutex_lock(&zcache.mu);
	for (size_t i = 0; i < ZCACHE_SLOTS; i++) {
		const zslot *z = &zcache.slot[i];

		if (z->data && z->gen == s->gen && z->src == pc->src &&
		    z->frame_off == pc->frame_off) { /* another thread was first */
			(void)pthread_mutex_unlock(&zcache.mu);
			free(data);
			return;
		}
	}
	for (;;) {
		zslot *lru = NULL;

		free_slot = NULL;
		for (size_t i = 0; i < ZCACHE_SLOTS; i++) {
			zslot *z = &zcache.slot[i];

			if (!z->data && !free_slot)
				free_slot = z;
			if (z->data && (!lru || z->used < lru->used))
				lru = z;
		}
		if (free_slot && zcache.bytes + pc->frame_size <= zcache_budget)
			break;
		assert(lru);
		zcache.bytes -= lru->size;
		free(lru->data);
		memset(lru, 0, sizeof(*lru));
	}
	*free_slot = (zslot){
		.data = data, .size = pc->frame_size, .gen = s->gen, .src = pc->src,
		.frame_off = pc->frame_off, .used = ++zcache.tick,
	};
	zcache.bytes += pc->frame_size;
	(void)pthread_mutex_unlock(&zcache.mu);
}

typedef struct zstd_cursor {
	ZSTD_DCtx *dctx;
	uint8_t *win;        /* [win_cap] */
	size_t win_cap;      /* min(frame size, ZSTD_WINDOW), grown as needed */
	uint8_t *in;         /* [ZSTD_INBUF] */
	const gfs_srcset *set;
	uint64_t gen;        /* generation of set, to tell a reused address apart */
	uint32_t src;
	uint64_t frame_off;
	uint64_t frame_len;
	uint64_t consumed;   /* compressed bytes fed to the decoder */
	uint64_t win_start;  /* decompressed offset of win[0] */
	uint64_t win_len;
	bool done;           /* the frame ended */
} zstd_cursor;

static _Thread_local zstd_cursor tl_zc;

static void zstd_cursor_free(void *p)
{
	zstd_cursor *zc = p;

	ZSTD_freeDCtx(zc->dctx);
	free(zc->win);
	free(zc->in);
	memset(zc, 0, sizeof(*zc));
}

static pthread_key_t zc_key;
static pthread_once_t zc_once = PTHREAD_ONCE_INIT;

static void zc_key_init(void)
{
	(void)pthread_key_create(&zc_key, zstd_cursor_free);
}

/* zc_init(): this thread's decoder and input buffer. */
static gfs_err zc_init(void)
{
	zstd_cursor *zc = &tl_zc;

	if (!zc->dctx) {
		(void)pthread_once(&zc_once, zc_key_init);
		zc->dctx = ZSTD_createDCtx();
		zc->in = malloc(ZSTD_INBUF);
		if (!zc->dctx || !zc->in) {
			zstd_cursor_free(zc);
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
		(void)pthread_setspecific(zc_key, zc);
		(void)ZSTD_DCtx_setParameter(zc->dctx, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX);
	}
	return GFS_OK;
}

/* zstd_restart(): position tl_zc at the start of piece pc's frame. */
static gfs_err zstd_restart(const gfs_srcset *s, const gfs_piece *pc)
{
	zstd_cursor *zc = &tl_zc;
	const gfs_err err = zc_init();

	if (err)
		return err;
	if (zc->win_cap < ZSTD_WINDOW && zc->win_cap < pc->frame_size) {
		const size_t cap = pc->frame_size < ZSTD_WINDOW ? (size_t)pc->frame_size : ZSTD_WINDOW;
		uint8_t *w = realloc(zc->win, cap);

		if (!w) {
			zc->set = NULL;
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
		zc->win = w;
		zc->win_cap = cap;
	}
	(void)ZSTD_DCtx_reset(zc->dctx, ZSTD_reset_session_only);
	zc->set = s;
	zc->gen = s->gen;
	zc->src = pc->src;
	zc->frame_off = pc->frame_off;
	zc->frame_len = pc->frame_len;
	zc->consumed = 0;
	zc->win_start = 0;
	zc->win_len = 0;
	zc->done = false;
	return GFS_OK;
}

/* zstd_advance(): decompress the next window's worth of the frame. */
static gfs_err zstd_advance(const gfs_layout *l, const gfs_srcset *s, const gfs_piece *pc)
{
	zstd_cursor *zc = &tl_zc;
	const char *path = l->sources[zc->src].abspath;
	ZSTD_outBuffer out = { zc->win, zc->win_cap, 0 };

	zc->win_start += zc->win_len;
	zc->win_len = 0;
	while (out.pos < out.size && !zc->done) {
		const uint64_t left = zc->frame_len - zc->consumed;
		const size_t n = left < ZSTD_INBUF ? (size_t)left : ZSTD_INBUF;
		ZSTD_inBuffer in = { zc->in, n, 0 };
		size_t ret;
		gfs_err err;

		if (n == 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: zstd frame at offset %llu (%llu bytes) ends early: truncated or corrupt",
					path, (unsigned long long)zc->frame_off,
					(unsigned long long)zc->frame_len);
		err = gfs_pread_full(s->fds[zc->src], zc->in, n, zc->frame_off + zc->consumed, path);
		if (!err)
			err = check_unchanged(l, s, zc->src);
		if (err)
			return err;
		ret = ZSTD_decompressStream(zc->dctx, &out, &in);
		if (ZSTD_isError(ret))
			return gfs_fail(GFS_ERR_FORMAT, "%s: zstd frame at offset %llu: %s", path,
					(unsigned long long)zc->frame_off, ZSTD_getErrorName(ret));
		zc->consumed += in.pos;
		if (ret == 0)
			zc->done = true;
	}
	zc->win_len = out.pos;
	if (zc->win_start + zc->win_len > pc->frame_size ||
	    (zc->done && zc->win_start + zc->win_len != pc->frame_size))
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zstd frame at offset %llu does not decompress to the expected %llu bytes",
				path, (unsigned long long)zc->frame_off,
				(unsigned long long)pc->frame_size);
	return GFS_OK;
}

/* zstd_whole(): decompress piece pc's whole frame into a new buffer. */
static gfs_err zstd_whole(const gfs_layout *l, const gfs_srcset *s, const gfs_piece *pc,
			  uint8_t **out)
{
	zstd_cursor *zc = &tl_zc;
	const char *path = l->sources[pc->src].abspath;
	uint64_t consumed = 0;
	bool done = false;
	ZSTD_outBuffer ob;
	uint8_t *data;
	gfs_err err = zc_init();

	if (err)
		return err;
	data = malloc((size_t)pc->frame_size);
	if (!data)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	ob = (ZSTD_outBuffer){ data, (size_t)pc->frame_size, 0 };
	zc->set = NULL; /* the stream cursor loses its position */
	(void)ZSTD_DCtx_reset(zc->dctx, ZSTD_reset_session_only);
	while (!err && !done) {
		const uint64_t left = pc->frame_len - consumed;
		const size_t n = left < ZSTD_INBUF ? (size_t)left : ZSTD_INBUF;
		ZSTD_inBuffer ib = { zc->in, n, 0 };

		if (n == 0) {
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s: zstd frame at offset %llu (%llu bytes) ends early: truncated or corrupt",
				       path, (unsigned long long)pc->frame_off,
				       (unsigned long long)pc->frame_len);
			break;
		}
		err = gfs_pread_full(s->fds[pc->src], zc->in, n, pc->frame_off + consumed, path);
		if (!err)
			err = check_unchanged(l, s, pc->src);
		while (!err) {
			const size_t ipos = ib.pos, opos = ob.pos;
			const size_t ret = ZSTD_decompressStream(zc->dctx, &ob, &ib);

			if (ZSTD_isError(ret)) {
				err = gfs_fail(GFS_ERR_FORMAT, "%s: zstd frame at offset %llu: %s", path,
					       (unsigned long long)pc->frame_off, ZSTD_getErrorName(ret));
			} else if (ret == 0) {
				done = true;
				break;
			} else if (ib.pos == ib.size) {
				break;
			} else if (ib.pos == ipos && ob.pos == opos) {
				err = gfs_fail(GFS_ERR_FORMAT,
					       "%s: zstd frame at offset %llu decompresses past the expected %llu bytes",
					       path, (unsigned long long)pc->frame_off,
					       (unsigned long long)pc->frame_size);
			}
		}
		consumed += ib.pos;
	}
	if (!err && ob.pos != pc->frame_size)
		err = gfs_fail(GFS_ERR_FORMAT,
			       "%s: zstd frame at offset %llu does not decompress to the expected %llu bytes",
			       path, (unsigned long long)pc->frame_off,
			       (unsigned long long)pc->frame_size);
	if (err) {
		free(data);
		return err;
	}
	*out = data;
	return GFS_OK;
}

/* read_zstd(): n bytes at decompressed offset off of piece pc's frame. */
static gfs_err read_zstd(const gfs_layout *l, const gfs_srcset *s, const gfs_piece *pc,
			 uint64_t off, uint8_t *buf, size_t n)
{
	zstd_cursor *zc = &tl_zc;
	gfs_err err;

	assert(off + n <= pc->frame_size);
	if (zcache_fits(pc)) {
		uint8_t *data = NULL;

		if (zcache_copy(s, pc, off, buf, n))
			return GFS_OK;
		err = zstd_whole(l, s, pc, &data);
		if (err)
			return err;
		memcpy(buf, data + off, n);
		zcache_put(s, pc, data);
		return GFS_OK;
	}
	if (!zc->dctx || zc->set != s || zc->gen != s->gen || zc->src != pc->src ||
	    zc->frame_off != pc->frame_off || off < zc->win_start) {
		err = zstd_restart(s, pc);
		if (err)
			return err;
	}
	while (n > 0) {
		if (off < zc->win_start + zc->win_len) {
			const uint64_t in = off - zc->win_start;
			const size_t k = (size_t)(zc->win_len - in < n ? zc->win_len - in : n);

			memcpy(buf, zc->win + in, k);
			buf += k;
			off += k;
			n -= k;
			continue;
		}
		if (zc->done)
			return gfs_fail(GFS_ERR_FORMAT, "%s: zstd frame at offset %llu is short",
					l->sources[pc->src].abspath,
					(unsigned long long)pc->frame_off);
		err = zstd_advance(l, s, pc);
		if (err) {
			zc->set = NULL;
			return err;
		}
	}
	return GFS_OK;
}

/* read_run(): n bytes at offset in (< pc->len) of run k of piece pc. */
static gfs_err read_run(const gfs_layout *l, const gfs_srcset *s, const gfs_piece *pc,
			uint64_t k, uint64_t in, uint8_t *buf, size_t n)
{
	const uint64_t src = pc->src_off + k * pc->src_stride + in;

	switch (pc->kind) {
	case GFS_PIECE_ZERO:
		memset(buf, 0, n);
		return GFS_OK;
	case GFS_PIECE_FILE:
		return gfs_pread_full(s->fds[pc->src], buf, n, src, l->sources[pc->src].abspath);
	case GFS_PIECE_ZSTD:
		return read_zstd(l, s, pc, src, buf, n);
	}
	return gfs_fail(GFS_ERR_FORMAT, "unknown piece kind");
}

/*
 * Strided FILE pieces of short runs (row-parallel tensor-parallel merges,
 * column slices, QKV and gate/up splits) are read as covering ranges: the
 * runs a read needs, with the gaps between them, in preads of at most
 * GATHER_BUF bytes into this thread's buffer, then scattered from memory.
 * A piece whose runs are longer than GATHER_RUN_MAX is read a run a pread
 * (each large already); one whose gaps are longer than its runs too (more
 * than half of a covering read would be thrown away).  Memory: GATHER_BUF
 * per thread that reads such a piece, kept for the thread's life.
 */
enum { GATHER_BUF = 1 << 20, GATHER_RUN_MAX = 1 << 16 };

static _Thread_local uint8_t *tl_gather;
static pthread_key_t gather_key;
static pthread_once_t gather_once = PTHREAD_ONCE_INIT;

static void gather_key_init(void)
{
	(void)pthread_key_create(&gather_key, free);
}

/* gather_buf(): this thread's GATHER_BUF bytes, or NULL (out of memory). */
static uint8_t *gather_buf(void)
{
	if (!tl_gather) {
		(void)pthread_once(&gather_once, gather_key_init);
		tl_gather = malloc(GATHER_BUF);
		if (tl_gather && pthread_setspecific(gather_key, tl_gather) != 0) {
			free(tl_gather);
			tl_gather = NULL;
		}
	}
	return tl_gather;
}

/* gathered(): are runs [k, kend) of piece pc read as covering ranges? */
static bool gathered(const gfs_piece *pc, uint64_t k, uint64_t kend)
{
	return pc->kind == GFS_PIECE_FILE && kend > k + 1 && pc->len <= GATHER_RUN_MAX &&
	       pc->src_stride - pc->len <= pc->len;
}

/*
 * read_gather(): runs [k, kend) of a gathered() piece pc, clipped to tensor
 * bytes [off, end), into buf (tensor byte off at buf[0]): each batch of
 * runs whose covering source range fits in tmp (GATHER_BUF bytes) in one
 * pread, then scattered.  The gaps read are source bytes between the runs
 * (inside the file), never served.
 */
static gfs_err read_gather(const gfs_layout *l, const gfs_srcset *s, const gfs_piece *pc,
			   uint64_t k, uint64_t kend, uint64_t off, uint64_t end, uint8_t *buf,
			   uint8_t *tmp)
{
	const uint64_t per = (GATHER_BUF - pc->len) / pc->src_stride + 1;

	assert(gathered(pc, k, kend) && per > 0);
	while (k < kend) {
		const uint64_t nb = kend - k < per ? kend - k : per;
		const gfs_err err = gfs_pread_full(s->fds[pc->src], tmp,
						   (size_t)((nb - 1) * pc->src_stride + pc->len),
						   pc->src_off + k * pc->src_stride,
						   l->sources[pc->src].abspath);

		if (err)
			return err;
		for (uint64_t j = 0; j < nb; j++) {
			const uint64_t rs = pc->toff + (k + j) * pc->dst_stride;
			const uint64_t a = rs > off ? rs : off;
			const uint64_t b = rs + pc->len < end ? rs + pc->len : end;

			if (a < b)
				memcpy(buf + (a - off), tmp + j * pc->src_stride + (a - rs),
				       (size_t)(b - a));
		}
		k += nb;
	}
	return GFS_OK;
}

/*
 * piece_rows(): the runs [*k, *kend) of piece pc that may hold bytes of
 * [off, end) (a contiguous piece has one run).
 */
static void piece_rows(const gfs_piece *pc, uint64_t off, uint64_t end, uint64_t *k,
		       uint64_t *kend)
{
	*k = 0;
	*kend = pc->count;
	if (pc->count > 1) {
		*k = off > pc->toff ? (off - pc->toff) / pc->dst_stride : 0;
		*kend = end <= pc->toff ? 0 : (end - pc->toff + pc->dst_stride - 1) / pc->dst_stride;
		if (*kend > pc->count)
			*kend = pc->count;
	}
}

/*
 * A first read that checks at least NOTICE_MIN bytes of records, and
 * NOTICE_RATIO times what it returns, is announced (once a srcset).
 */
#define NOTICE_MIN ((uint64_t)64 << 20)
#define NOTICE_RATIO 16

/*
 * check_batch(): gfs_integrity_require() of recs[0..n) (bytes of records),
 * or with require false gfs_integrity_check() (a corrupt record is settled
 * BAD, not an error); announced if large.
 */
static gfs_err check_batch(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			   const uint32_t *recs, size_t n, uint64_t bytes, uint64_t want,
			   bool require)
{
	if (s->notice && bytes >= NOTICE_MIN && bytes / NOTICE_RATIO >= want &&
	    !atomic_exchange(&((gfs_srcset *)s)->noticed, true)) {
		char line[512];

		snprintf(line, sizeof(line),
			 "reading %llu bytes of tensor %s first checks %.1f MiB of source records against their stored CRC-32 (each record once a mount; -o verify=off skips these checks, unsafe)",
			 (unsigned long long)want, t->name, (double)bytes / (1 << 20));
		s->notice(line);
	}
	return require ? gfs_integrity_require(l, s, recs, n, 0)
		       : gfs_integrity_check(l, s, recs, n, 0, NULL, NULL);
}

/* needs_check(): must piece pc's record be checked before its bytes are served? */
static bool needs_check(const gfs_layout *l, const gfs_srcset *s, const gfs_piece *pc)
{
	return pc->rec != GFS_NO_RECORD && atomic_load(&s->rt->state[pc->rec]) != GFS_REC_OK &&
	       (s->verify || l->records[pc->rec].lazy);
}

/*
 * check_records(): check_batch() of the records of t's candidate pieces sp
 * holding bytes of [off, end) that need a check (in batches, each in
 * parallel); want, the bytes the caller reads (for the notice).  Without
 * require (a pass that only settles records), it stops between batches
 * once gfs_srcset_close() began.
 */
static gfs_err check_records(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			     gfs_piece_span sp, uint64_t off, uint64_t end, uint64_t want,
			     bool require)
{
	enum { BATCH = 64 };
	uint32_t recs[BATCH];
	size_t n = 0;
	uint64_t bytes = 0;
	gfs_err err = GFS_OK;

	for (size_t p = sp.first; p < sp.last && !err && (require || !atomic_load(&s->rt->stop)); p++) {
		const gfs_piece pc = gfs_tensor_piece(t, p);
		uint64_t k, kend;

		if (!needs_check(l, s, &pc))
			continue;
		piece_rows(&pc, off, end, &k, &kend);
		if (k >= kend || (n && recs[n - 1] == pc.rec))
			continue;
		if (n == BATCH) {
			err = check_batch(l, s, t, recs, n, bytes, want, require);
			n = 0;
			bytes = 0;
		}
		recs[n++] = pc.rec;
		bytes += gfs_record_src_len(&l->records[pc.rec]);
	}
	if (!err && n && (require || !atomic_load(&s->rt->stop)))
		err = check_batch(l, s, t, recs, n, bytes, want, require);
	return err;
}

/* A background check of a tensor's records (bg_start()). */
typedef struct bg_check {
	const gfs_layout *l;
	const gfs_srcset *s;
	const gfs_tensor *t;
	size_t ti; /* t's index */
	uint64_t want;
} bg_check;

static void *bg_main(void *arg)
{
	bg_check *b = arg;
	rec_table *rt = b->s->rt;

	/* An error leaves its batch's records unchecked: each read checks
	 * its own then, and fails with the error if it needs a bad one. */
	(void)check_records(b->l, b->s, b->t, gfs_piece_candidates(b->t, 0, b->t->nbytes), 0,
			    b->t->nbytes, b->want, false);
	(void)pthread_mutex_lock(&rt->mu);
	atomic_store(&rt->bg[b->ti], BG_DONE);
	free(b);
	rt->nbg--;
	(void)pthread_cond_broadcast(&rt->cv);
	(void)pthread_mutex_unlock(&rt->mu);
	return NULL;
}

/*
 * bg_start(): have the records of entry t checked in the background,
 * batch after batch in tensor order, by one thread of at most BG_MAX; a
 * reader then waits only for its own records, and serves them while the
 * check goes on with the next ones.  true if such a check runs or ran for
 * t (started by this call or an earlier one); false if none can start
 * (the caller checks the tensor itself).
 */
static bool bg_start(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
		     uint64_t want)
{
	enum { BG_MAX = 2 };
	rec_table *rt = s->rt;
	const size_t ti = (size_t)(t - l->tensors);
	pthread_attr_t attr;
	pthread_t tid;
	bg_check *b;
	bool started = false;

	if (t < l->tensors || ti >= gfs_layout_nentries(l))
		return false;
	if (atomic_load(&rt->bg[ti]))
		return true;
	b = malloc(sizeof(*b));
	if (!b)
		return false;
	*b = (bg_check){ .l = l, .s = s, .t = t, .ti = ti, .want = want };
	(void)pthread_mutex_lock(&rt->mu);
	if (rt->nbg < BG_MAX && !atomic_load(&rt->stop) && atomic_load(&rt->bg[ti]) == BG_NONE) {
		atomic_store(&rt->bg[ti], BG_RUNNING);
		rt->nbg++;
		started = true;
	}
	(void)pthread_mutex_unlock(&rt->mu);
	if (!started) {
		free(b);
		return atomic_load(&rt->bg[ti]);
	}
	if (pthread_attr_init(&attr) == 0) {
		if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
		    pthread_create(&tid, &attr, bg_main, b) == 0) {
			(void)pthread_attr_destroy(&attr);
			return true;
		}
		(void)pthread_attr_destroy(&attr);
	}
	free(b);
	(void)pthread_mutex_lock(&rt->mu);
	rt->nbg--;
	atomic_store(&rt->bg[ti], BG_NONE);
	(void)pthread_cond_broadcast(&rt->cv);
	(void)pthread_mutex_unlock(&rt->mu);
	return false;
}

/*
 * require_records(): the checksummed records holding bytes of [off, end)
 * of t (its candidate pieces sp) are checked and good: each is checked on
 * its first use; a corrupt one is GFS_ERR_IO naming its file, record and
 * tensors.  Without verification (-o verify=off), only lazy records (DCP
 * chunks whose archive the import did not open) are: where their bytes are
 * is known only then.  With it, a read that needs a check first checks the
 * records of the whole tensor together: a tensor is mostly read whole, and
 * its records (a ZeRO-3 tensor's: one a rank) then have their reads in
 * flight together, instead of one record at a time as the reads reach them
 * (on storage where a request takes milliseconds, that is a factor of the
 * number of ranks).  That check runs in the background (bg_start()) while
 * the read checks and serves its own records: a reader waits for the
 * batch holding its bytes, not for the whole tensor, and serving overlaps
 * the check of the rest; without a free background slot the read checks
 * the tensor itself first.  What is served does not change:
 * only a record holding bytes of [off, end) that is corrupt, or whose
 * chunk archive is broken, fails the read.
 */
static gfs_err require_records(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			       gfs_piece_span sp, uint64_t off, uint64_t end)
{
	bool any = false;

	for (size_t p = sp.first; s->verify && p < sp.last && !any; p++) {
		const gfs_piece pc = gfs_tensor_piece(t, p);
		uint64_t k, kend;

		piece_rows(&pc, off, end, &k, &kend);
		any = k < kend && needs_check(l, s, &pc) &&
		      atomic_load(&s->rt->state[pc.rec]) != GFS_REC_BAD;
	}
	/* As in the background: an error of the whole-tensor pass leaves its
	 * batch unchecked, and fails this read only if its own records do. */
	if (any && !bg_start(l, s, t, end - off))
		(void)check_records(l, s, t, gfs_piece_candidates(t, 0, t->nbytes), 0, t->nbytes,
				    end - off, false);
	return check_records(l, s, t, sp, off, end, end - off, true);
}

void gfs_tensor_check_ahead(const gfs_layout *l, const gfs_srcset *s, size_t cur, size_t next)
{
	const gfs_tensor *c = gfs_layout_target(l, cur), *t = gfs_layout_target(l, next);

	assert(s->layout == l);
	if (!s->verify || c == t || t->comp || t->npieces == 0 ||
	    atomic_load(&s->rt->bg[c - l->tensors]) == BG_RUNNING ||
	    atomic_load(&s->rt->bg[t - l->tensors]) != BG_NONE)
		return;
	(void)bg_start(l, s, t, t->nbytes);
}

/* One read_span(): piece p of its candidates copies its runs in [off, end) to buf. */
typedef struct span_read {
	const gfs_layout *l;
	const gfs_srcset *s;
	const gfs_tensor *t;
	size_t first; /* the first candidate piece */
	uint64_t off, end;
	uint8_t *buf; /* tensor byte off at buf[0] */
} span_read;

/*
 * read_piece(): candidate piece first + i of a span_read copies its runs
 * that hold bytes of [off, end): a strided piece of short runs in covering
 * ranges (read_gather(), this thread's buffer), else run by run; a FILE
 * piece's source is then checked for changes once.  Pieces write disjoint
 * bytes of buf: several threads may read pieces of one span at once.
 */
static gfs_err read_piece(void *ctx, size_t i)
{
	const span_read *x = ctx;
	const gfs_piece pcv = gfs_tensor_piece(x->t, x->first + i), *pc = &pcv;
	uint8_t *tmp;
	uint64_t k, kend;
	gfs_err err = GFS_OK;

	piece_rows(pc, x->off, x->end, &k, &kend);
	if (k < kend && pc->rec != GFS_NO_RECORD &&
	    atomic_load(&x->s->rt->state[pc->rec]) == GFS_REC_BAD)
		return bad_record(x->l, pc->rec);
	if (gathered(pc, k, kend) && (tmp = gather_buf()) != NULL) {
		err = read_gather(x->l, x->s, pc, k, kend, x->off, x->end, x->buf, tmp);
	} else {
		for (uint64_t r = k; r < kend && !err; r++) {
			const uint64_t rs = pc->toff + r * pc->dst_stride;
			const uint64_t a = rs > x->off ? rs : x->off;
			const uint64_t b = rs + pc->len < x->end ? rs + pc->len : x->end;

			if (a < b)
				err = read_run(x->l, x->s, pc, r, a - rs, x->buf + (a - x->off),
					       (size_t)(b - a));
		}
	}
	if (!err && k < kend && pc->kind == GFS_PIECE_FILE)
		err = check_unchanged(x->l, x->s, pc->src);
	return err;
}

/*
 * Reads of the pieces of one span in parallel, on storage where a read
 * waits (network file systems, a cold disk): IO_POOL threads kept for the
 * srcset's life, started at the first such span.  A span goes there when
 * two or more of its FILE pieces hold bytes of it and a byte of one of
 * them is not in the page cache (gfs_fd_cached() of each, up to
 * the first miss): each of its FILE pieces is then a read in flight, where
 * one after the other a span of n pieces costs n waits.  Spans from the
 * page cache stay in the calling thread (a copy is no faster elsewhere).
 */
enum { IO_POOL = 16 };

/* io_pool(): s's pool of IO_POOL threads, started now if need be; NULL if none could. */
static gfs_pool *io_pool(const gfs_srcset *s)
{
	rec_table *rt = s->rt;
	gfs_pool *p = atomic_load(&rt->io);

	if (p || atomic_load(&rt->io_failed))
		return p;
	(void)pthread_mutex_lock(&rt->mu);
	p = atomic_load(&rt->io);
	if (!p && !atomic_load(&rt->io_failed)) {
		if (gfs_pool_new_threads(IO_POOL, &p) == GFS_OK)
			atomic_store(&rt->io, p);
		else
			atomic_store(&rt->io_failed, true);
	}
	(void)pthread_mutex_unlock(&rt->mu);
	return p;
}

/* span_parallel(): are the candidate pieces sp of x read in parallel (see IO_POOL)? */
static bool span_parallel(const span_read *x, gfs_piece_span sp)
{
	size_t nfile = 0;
	bool miss = false;

	for (size_t p = sp.first; p < sp.last; p++) {
		const gfs_piece pc = gfs_tensor_piece(x->t, p);
		uint64_t k, kend, rs = 0, a;

		if (pc.kind != GFS_PIECE_FILE)
			continue;
		piece_rows(&pc, x->off, x->end, &k, &kend);
		for (; k < kend; k++) { /* its first run with bytes of [off, end) */
			rs = pc.toff + k * pc.dst_stride;
			if (rs + pc.len > x->off && rs < x->end)
				break;
		}
		if (k == kend)
			continue;
		nfile++;
		a = rs > x->off ? rs : x->off;
		if (!miss)
			miss = !gfs_fd_cached(x->s->fds[pc.src],
					      pc.src_off + k * pc.src_stride + (a - rs));
		if (nfile >= 2 && miss)
			return true;
	}
	return false;
}

/*
 * read_span(): bytes [off, off+len) of tensor t in its own dtype.  The
 * candidate pieces (O(log n) to find) are those that may intersect the
 * range; each copies its runs that do (read_piece()), in this thread or,
 * off the page cache, in parallel (span_parallel()).  The pieces tile the
 * tensor, so every byte is written exactly once; the error is the first
 * piece's in order, as one after the other.
 */
static gfs_err read_span(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			 uint64_t off, uint8_t *buf, size_t len)
{
	const uint64_t end = off + len;
	const gfs_piece_span sp = gfs_piece_candidates(t, off, end);
	const span_read x = { .l = l, .s = s, .t = t, .first = sp.first, .off = off, .end = end,
			      .buf = buf };
	gfs_pool *pool;
	gfs_err err = GFS_OK;

	assert(end <= t->nbytes);
	if (len == 0)
		return GFS_OK;
	if (s->verify || l->lazy_records) {
		err = require_records(l, s, t, sp, off, end);
		if (err)
			return gfs_fail_prefix(err, "tensor %s", t->name);
	}
	if (sp.last - sp.first >= 2 && span_parallel(&x, sp) && (pool = io_pool(s)) != NULL) {
		atomic_fetch_add(&s->rt->nparallel, 1);
		err = gfs_pool_for(pool, sp.last - sp.first, read_piece, (void *)&x);
	} else {
		for (size_t i = 0; i < sp.last - sp.first && !err; i++)
			err = read_piece((void *)&x, i);
	}
	return err ? gfs_fail_prefix(err, "tensor %s", t->name) : GFS_OK;
}

/*
 * compare_replicas(): the bytes every on_read replica of entry ti holds against
 * those t (its target) serves there, read in chunks of n bytes into a and
 * b.  @return GFS_OK and *bad the first replica that differs, or
 * l->nreplicas when none does.
 */
static gfs_err compare_replicas(const gfs_layout *l, const gfs_srcset *s, size_t ti,
				const gfs_tensor *t, uint8_t *a, uint8_t *b, size_t n, size_t *bad)
{
	gfs_err err = GFS_OK;

	*bad = l->nreplicas;
	for (size_t i = 0; i < l->nreplicas && !err && *bad == l->nreplicas; i++) {
		const gfs_replica *r = &l->replicas[i];

		if (r->ti != ti || !r->on_read)
			continue;
		err = check_unchanged(l, s, r->p.src);
		for (uint64_t k = 0; !err && *bad == l->nreplicas && k < r->p.count; k++)
			for (uint64_t o = 0; !err && *bad == l->nreplicas && o < r->p.len; o += n) {
				const size_t m = r->p.len - o < n ? (size_t)(r->p.len - o) : n;

				err = read_span(l, s, t, r->p.toff + k * r->p.dst_stride + o, a, m);
				if (!err)
					err = gfs_pread_full(s->fds[r->p.src], b, m,
							     r->p.src_off + k * r->p.src_stride + o,
							     l->sources[r->p.src].path);
				if (!err && memcmp(a, b, m) != 0)
					*bad = i;
			}
	}
	return err;
}

/*
 * require_replicas(): under -o verify=read, before entry t's first bytes
 * are served, its on_read replicas (copies the checkpoint keeps of some of
 * its bytes, gfs_layout.replicas) are compared with them, once a srcset; a
 * replica that differs fails every read of the entry (GFS_ERR_IO naming
 * it).  Concurrent readers wait for the one comparing.
 */
static gfs_err require_replicas(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t)
{
	enum { CMP_CHUNK = 1 << 20 };
	rec_table *rt = s->rt;
	const size_t ti = (size_t)(t - l->tensors);
	int st = atomic_load(&rt->rep[ti]);

	if (st == REP_UNCHECKED && atomic_compare_exchange_strong(&rt->rep[ti], &st, REP_BUSY)) {
		uint8_t *a = malloc(CMP_CHUNK), *b = malloc(CMP_CHUNK);
		size_t bad = l->nreplicas;
		const gfs_err err = a && b ? compare_replicas(l, s, ti, t, a, b, CMP_CHUNK, &bad)
					   : gfs_fail(GFS_ERR_NOMEM, "out of memory");

		free(a);
		free(b);
		(void)pthread_mutex_lock(&rt->mu);
		rt->rep_bad[ti] = bad;
		atomic_store(&rt->rep[ti], err ? REP_UNCHECKED : bad < l->nreplicas ? REP_BAD : REP_OK);
		(void)pthread_cond_broadcast(&rt->cv);
		(void)pthread_mutex_unlock(&rt->mu);
		if (err)
			return err;
		st = atomic_load(&rt->rep[ti]);
	}
	if (st == REP_BUSY) {
		(void)pthread_mutex_lock(&rt->mu);
		while ((st = atomic_load(&rt->rep[ti])) == REP_BUSY)
			(void)pthread_cond_wait(&rt->cv, &rt->mu);
		(void)pthread_mutex_unlock(&rt->mu);
		if (st == REP_UNCHECKED)
			return require_replicas(l, s, t);
	}
	if (st == REP_BAD) {
		const gfs_replica *r = &l->replicas[rt->rep_bad[ti]];

		return gfs_fail(GFS_ERR_IO,
				"tensor %s: a copy the checkpoint keeps of its bytes [%llu, %llu), in %s at offset %llu, holds other values: not served (gatherfs-inspect verify compares them)",
				t->name, (unsigned long long)r->p.toff,
				(unsigned long long)(r->p.toff + (r->p.count - 1) * r->p.dst_stride + r->p.len),
				l->sources[r->p.src].path, (unsigned long long)r->p.src_off);
	}
	return GFS_OK;
}

/*
 * read_native(): read_span(), after the replicas of t are compared under
 * -o verify=read (require_replicas()).
 */
static gfs_err read_native(const gfs_layout *l, const gfs_srcset *s,
			   const gfs_tensor *t, uint64_t off, uint8_t *buf, size_t len)
{
	if (s->verify && s->rt->rep && len > 0 &&
	    atomic_load(&s->rt->rep[t - l->tensors]) != REP_NONE &&
	    atomic_load(&s->rt->rep[t - l->tensors]) != REP_OK) {
		const gfs_err err = require_replicas(l, s, t);

		if (err)
			return err;
	}
	return read_span(l, s, t, off, buf, len);
}

gfs_err gfs_tensor_read_raw(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
			    uint64_t off, void *buf, size_t len)
{
	assert(s->layout == l && !t->comp && t->alias_of < 0 && off + len <= t->nbytes);
	return read_native(l, s, t, off, buf, len);
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
	if (!gfs_srcset_entry_servable(s, i)) {
		const gfs_err err = gfs_srcset_decls_require(s);

		if (err)
			return gfs_fail_prefix(err, "tensor %s: not served", l->tensors[i].name);
	}
	if (t->comp)
		return gfs_compute_read(l, s, s->cc, (size_t)(t - l->tensors), out, off, buf, len);
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
