/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — source integrity: CRC-32 checks of the records of a layout, in
 * one parallel pass (see integrity.h).
 */
#include "config.h"

#include <assert.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/server/integrity.h"
#include "gatherfs/util/crc32.h"
#include "gatherfs/util/pfor.h"

enum {
	READ_BUF = 1 << 20,     /* bytes per pread of a FILE record */
	/* A record below this is read through the check's own descriptor, only
	 * its own bytes (gfs_srcset_check_fd()); larger ones with the kernel's
	 * read-ahead, whose window is then a small part of the record. */
	SMALL_RECORD = 4 << 20,
	CHUNK = 16 << 20,       /* unit of work: a FILE record is cut into chunks */
	MAX_THREADS = 32,
	/* Threads by default, CPUs permitting more: enough reads in flight
	 * for storage where one takes milliseconds (NFS, Lustre). */
	IO_THREADS = 16,
	ZSTD_IN = 1 << 17,
	ZSTD_OUT = 1 << 20,
	ZSTD_WINDOW_LOG_MAX = 27, /* as the byte server */
	ZSTD_FHD = 4,           /* offset of the frame header descriptor */
	ZSTD_FHD_CHECKSUM = 1 << 2,
};

/*
 * A FILE record is cut into segments at every boundary of a piece inside it
 * and every CHUNK bytes: the CRC-32 of every segment is computed, the
 * record's is their combination, and so is each piece's (recorded in the
 * srcset, so that pytorch_model.bin can combine its CRC-32s without reading
 * the bytes again).  A unit of work is the segments of one CHUNK of a FILE
 * record, or a whole ZSTD record.
 */
typedef struct chk_seg {
	uint64_t off; /* in the record */
	uint64_t len;
	uint32_t crc;
} chk_seg;

typedef struct chk_item {
	uint32_t rec;
	size_t k;          /* rec's index among the claimed records */
	size_t seg0, seg1; /* FILE: segments [seg0, seg1) */
	uint32_t crc;      /* ZSTD: of the record's bytes */
	bool corrupt;      /* ZSTD: the frame does not decode */
	bool checksum;     /* ZSTD: the frame carries a content checksum */
} chk_item;

/* A piece whose CRC-32 the check records: contiguous FILE bytes of a claimed record. */
typedef struct chk_piece {
	size_t k;     /* index among the claimed records */
	uint64_t off; /* in the record */
	uint64_t end;
	size_t ti, p;
} chk_piece;

/* A plan: the segments, items and pieces of the records claimed[0..n). */
typedef struct chk_plan {
	chk_piece *pieces;
	size_t npieces;
	size_t *piece0; /* [n + 1]: pieces of claimed record k: [piece0[k], piece0[k + 1]) */
	size_t *seg0;   /* [n + 1]: its segments */
	size_t *item0;  /* [n + 1]: its items */
} chk_plan;

/*
 * A job: the items of the claimed records, taken in order by the workers.
 * A record is settled (gfs_srcset_rec_settle()) by the worker that ends
 * its last item, so that a reader waiting for it goes on while the job
 * checks the other records.
 */
typedef struct chk_job {
	const gfs_layout *l;
	const gfs_srcset *s;
	const uint32_t *claimed;
	const uint32_t *want; /* per claimed record: its stored CRC-32 */
	const chk_plan *pl;
	atomic_size_t *left;  /* per claimed record: its items not ended yet */
	bool *settled;        /* per claimed record: settled by the job */
	chk_seg *segs;
	size_t nsegs;
	chk_item *items;
	size_t nitems;
	atomic_size_t next;
	_Atomic int err;  /* first error, GFS_OK if none */
	char msg[512];    /* its message */
} chk_job;

static void job_fail(chk_job *job, gfs_err err)
{
	int none = GFS_OK;

	if (atomic_compare_exchange_strong(&job->err, &none, (int)err))
		snprintf(job->msg, sizeof(job->msg), "%s", gfs_errmsg());
}

/*
 * The segments of a FILE item, summed in order (seg_feed()): the next
 * segment sg, pos the record offset reached, crc that of the bytes of sg
 * before pos.
 */
typedef struct seg_cursor {
	chk_seg *segs;
	size_t sg;
	uint64_t pos;
	uint32_t crc;
} seg_cursor;

/* seg_feed(): the n bytes at p, those at the cursor's position. */
static void seg_feed(seg_cursor *c, const uint8_t *p, size_t n)
{
	size_t at = 0;

	while (at < n) {
		chk_seg *g = &c->segs[c->sg];
		const uint64_t gend = g->off + g->len;
		const size_t take = gend - c->pos < n - at ? (size_t)(gend - c->pos) : n - at;

		c->crc = gfs_crc32(c->crc, p + at, take);
		at += take;
		c->pos += take;
		if (c->pos == gend) {
			g->crc = c->crc;
			c->crc = 0;
			c->sg++;
		}
	}
}

/*
 * Checking from mappings of the sources (GATHERFS_CHECK_MMAP=1, local file
 * systems only): the CRC-32 is computed straight from the page cache, each
 * MAP_WINDOW of an item mapped (MAP_SHARED, read-only, populated) and
 * unmapped after use: no copy into a buffer, at most MAP_WINDOW mapped per
 * thread.  Not the default: it saves about 5% of a first read whose
 * sources are in the page cache, but where they are not, faulting them in
 * through populated mappings fills 4 KiB pages where pread()'s read-ahead
 * fills large folios, and 16 threads mapping and unmapping contend on the
 * process's memory map (cold first reads 1.1x-6x slower: a 256-rank verl
 * view 0.30-0.47 GB/s mapped, 1.75 read; bench/RESULTS.md, stop 52).
 * Sources on network or FUSE file systems are always read with pread()
 * (map_source()): there every read can take milliseconds and the threads'
 * reads in flight are what keeps the storage busy, which faulting pages in
 * one by one would not.
 *
 * A source truncated under a mapping makes touching the lost pages SIGBUS.
 * The sources are only checked for changes (gfs_srcset_check()) after the
 * bytes are read, so the accesses are guarded instead: a SIGBUS handler
 * (installed once, process-wide) returns by siglongjmp() to the thread's
 * guarded window, whose check then fails with GFS_ERR_IO naming the file;
 * a SIGBUS outside a guarded window goes to the handler there was before
 * (by default: the process dies, as without this code).
 */
enum { MAP_WINDOW = 4 << 20 };

static _Thread_local sigjmp_buf *volatile chk_guard;
static struct sigaction chk_prev_bus;
static pthread_once_t chk_bus_once = PTHREAD_ONCE_INIT;
static bool chk_bus_ok;

static void chk_on_bus(int sig, siginfo_t *si, void *uc)
{
	sigjmp_buf *jb = chk_guard;

	if (jb)
		siglongjmp(*jb, 1);
	if (chk_prev_bus.sa_flags & SA_SIGINFO) {
		chk_prev_bus.sa_sigaction(sig, si, uc);
	} else if (chk_prev_bus.sa_handler != SIG_IGN && chk_prev_bus.sa_handler != SIG_DFL) {
		chk_prev_bus.sa_handler(sig);
	} else {
		/* Returning retries the access: now it takes the default action. */
		signal(SIGBUS, SIG_DFL);
	}
}

static void chk_bus_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = chk_on_bus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	chk_bus_ok = sigaction(SIGBUS, &sa, &chk_prev_bus) == 0;
}

/*
 * map_source(): whether source fd is checked from mappings: it is on a
 * local file system and GATHERFS_CHECK_MMAP is 1.
 */
static bool map_source(int fd)
{
	const char *env = getenv("GATHERFS_CHECK_MMAP");

	if (!env || strcmp(env, "1") != 0 || gfs_fd_remote(fd))
		return false;
	(void)pthread_once(&chk_bus_once, chk_bus_install);
	return chk_bus_ok;
}

/*
 * feed_mapped(): feed the bytes [c->pos, c->pos + n) of the record at roff
 * of fd to c from a mapping.  *mapped false: the range could not be mapped
 * (nothing fed).  @return GFS_OK, or GFS_ERR_IO naming path if the source
 * lost the bytes under the mapping (SIGBUS).
 */
static gfs_err feed_mapped(seg_cursor *c, int fd, uint64_t roff, size_t n, const char *path,
			   bool *mapped)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t at = roff + c->pos;
	uint64_t base;
	size_t len;
	uint8_t *volatile p;
	sigjmp_buf jb;

	base = at - at % page;
	len = (size_t)(at - base) + n;
	*mapped = false;
	p = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)base);
	if (p == MAP_FAILED)
		return GFS_OK;
	*mapped = true;
	if (sigsetjmp(jb, 1)) {
		chk_guard = NULL;
		munmap(p, len);
		return gfs_fail(GFS_ERR_IO, "%s: changed (truncated?) while being checked", path);
	}
	chk_guard = &jb;
	seg_feed(c, p + (at - base), n);
	chk_guard = NULL;
	munmap(p, len);
	return GFS_OK;
}

/*
 * A worker's buffers, allocated at first use: a check from mappings needs
 * none, one of FILE records read with pread() only buf.
 */
typedef struct chk_bufs {
	uint8_t *buf; /* READ_BUF bytes */
	uint8_t *zin; /* ZSTD_IN bytes */
	uint8_t *zout; /* ZSTD_OUT bytes */
	ZSTD_DCtx *d;
} chk_bufs;

/* read_buf(): b's pread() buffer, allocated at first use; NULL if out of memory. */
static uint8_t *read_buf(chk_bufs *b)
{
	if (!b->buf)
		b->buf = gfs_iobuf(READ_BUF);
	return b->buf;
}

/*
 * check_file(): the CRC-32 of every segment of a FILE item, from mappings
 * of the source (map_source()) or read into b's buffer (a small record's
 * through the check's own descriptor, gfs_srcset_check_fd()).
 */
static gfs_err check_file(const chk_job *job, const chk_item *it, chk_bufs *b)
{
	const gfs_record *r = &job->l->records[it->rec];
	const char *path = job->l->sources[r->src].abspath;
	const int fd = gfs_srcset_fd(job->s, r->src);
	const bool small = r->len < SMALL_RECORD;
	const int rfd = small ? gfs_srcset_check_fd(job->s, r->src) : fd;
	const chk_seg *last = &job->segs[it->seg1 - 1];
	const uint64_t end = last->off + last->len;
	seg_cursor c = { .segs = job->segs, .sg = it->seg0, .pos = job->segs[it->seg0].off };
	bool mapped = map_source(fd);

	if (small) /* its descriptor reads no further than asked: the item's bytes, at once */
		(void)posix_fadvise(rfd, (off_t)(r->off + c.pos), (off_t)(end - c.pos),
				    POSIX_FADV_WILLNEED);
	while (c.pos < end) {
		size_t n;
		gfs_err err = GFS_OK;

		if (mapped) {
			n = end - c.pos < MAP_WINDOW ? (size_t)(end - c.pos) : MAP_WINDOW;
			err = feed_mapped(&c, fd, r->off, n, path, &mapped);
			if (err) {
				const gfs_err changed = gfs_srcset_check(job->l, job->s, r->src);

				return changed ? changed : err;
			}
			if (mapped)
				continue;
		}
		if (!read_buf(b))
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		n = end - c.pos < READ_BUF ? (size_t)(end - c.pos) : READ_BUF;
		err = gfs_pread_full(rfd, b->buf, n, r->off + c.pos, path);
		if (err)
			return err;
		seg_feed(&c, b->buf, n);
	}
	assert(c.sg == it->seg1);
	return gfs_srcset_check(job->l, job->s, r->src);
}

/*
 * check_zstd(): decompress the whole frame of a ZSTD record, computing the
 * CRC-32 of the record's bytes in it.  A frame that does not decode to
 * frame_size bytes in exactly frame_len bytes is corrupt.
 */
static gfs_err check_zstd(const chk_job *job, chk_item *it, ZSTD_DCtx *d, uint8_t *in,
			  uint8_t *out)
{
	const gfs_record *r = &job->l->records[it->rec];
	const char *path = job->l->sources[r->src].abspath;
	const int fd = gfs_srcset_fd(job->s, r->src);
	const uint64_t rend = r->off + r->len;
	uint32_t crc = 0;
	uint64_t consumed = 0, produced = 0;
	bool ended = false;

	(void)ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
	while (!ended && consumed < r->frame_len && !it->corrupt) {
		const uint64_t left = r->frame_len - consumed;
		const size_t n = left < ZSTD_IN ? (size_t)left : ZSTD_IN;
		ZSTD_inBuffer ib = { in, n, 0 };
		const gfs_err err = gfs_pread_full(fd, in, n, r->frame_off + consumed, path);

		if (err)
			return err;
		if (consumed == 0 && n > ZSTD_FHD)
			it->checksum = (in[ZSTD_FHD] & ZSTD_FHD_CHECKSUM) != 0;
		while (!ended) {
			ZSTD_outBuffer ob = { out, ZSTD_OUT, 0 };
			const size_t ret = ZSTD_decompressStream(d, &ob, &ib);
			uint64_t a, b;

			if (ZSTD_isError(ret) || produced + ob.pos > r->frame_size) {
				it->corrupt = true;
				break;
			}
			a = produced > r->off ? produced : r->off;
			b = produced + ob.pos < rend ? produced + ob.pos : rend;
			if (a < b)
				crc = gfs_crc32(crc, out + (a - produced), (size_t)(b - a));
			produced += ob.pos;
			ended = ret == 0;
			if (ib.pos == ib.size && ob.pos < ob.size)
				break; /* needs more input */
		}
		consumed += ib.pos;
	}
	if (!ended || consumed != r->frame_len || produced != r->frame_size)
		it->corrupt = true;
	it->crc = crc;
	return gfs_srcset_check(job->l, job->s, r->src);
}

/* zstd_bufs(): b's decompression buffers, allocated at first use; false if out of memory. */
static bool zstd_bufs(chk_bufs *b)
{
	if (!b->zin)
		b->zin = gfs_iobuf(ZSTD_IN);
	if (!b->zout)
		b->zout = malloc(ZSTD_OUT);
	if (!b->d) {
		b->d = ZSTD_createDCtx();
		if (b->d)
			(void)ZSTD_DCtx_setParameter(b->d, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX);
	}
	return b->zin && b->zout && b->d;
}

/* combine(): the CRC-32 of segments [a, b). */
static uint32_t combine(const chk_seg *segs, size_t a, size_t b)
{
	uint32_t crc = 0;

	for (size_t i = a; i < b; i++)
		crc = gfs_crc32_combine(crc, segs[i].crc, segs[i].len);
	return crc;
}

/* seg_at(): the segment of [a, b) starting at off (there is one). */
static size_t seg_at(const chk_seg *segs, size_t a, size_t b, uint64_t off)
{
	while (b - a > 1) {
		const size_t mid = a + (b - a) / 2;

		if (segs[mid].off <= off)
			a = mid;
		else
			b = mid;
	}
	assert(segs[a].off == off);
	return a;
}

/*
 * settle(): claimed record k, all of whose items ended: GOOD or BAD by its
 * CRC-32, and the CRC-32 of each summed piece in it recorded.
 */
static void settle(chk_job *job, size_t k)
{
	const chk_plan *pl = job->pl;
	const uint32_t rec = job->claimed[k];
	const gfs_record *r = &job->l->records[rec];
	bool good;

	if (r->kind == GFS_PIECE_ZSTD || r->len == 0) {
		const chk_item *zi = &job->items[pl->item0[k]];

		assert(pl->item0[k + 1] == pl->item0[k] + 1 && zi->rec == rec);
		good = !zi->corrupt && zi->crc == r->crc32;
	} else {
		const size_t a = pl->seg0[k], b = pl->seg0[k + 1];

		good = combine(job->segs, a, b) == job->want[k];
		for (size_t i = pl->piece0[k]; good && i < pl->piece0[k + 1]; i++) {
			const chk_piece *cp = &pl->pieces[i];
			const size_t g0 = seg_at(job->segs, a, b, cp->off);
			size_t g1 = g0;

			while (g1 < b && job->segs[g1].off < cp->end)
				g1++;
			gfs_srcset_set_piece_crc(job->s, cp->ti, cp->p, combine(job->segs, g0, g1));
		}
	}
	job->settled[k] = true;
	gfs_srcset_rec_settle(job->s, rec, good ? GFS_REC_OK : GFS_REC_BAD);
}

static void *chk_worker(void *arg)
{
	chk_job *job = arg;
	chk_bufs b = { 0 };

	while (atomic_load(&job->err) == GFS_OK) {
		const size_t i = atomic_fetch_add(&job->next, 1);
		chk_item *it;
		gfs_err err;

		if (i >= job->nitems)
			break;
		it = &job->items[i];
		if (job->l->records[it->rec].kind != GFS_PIECE_ZSTD)
			err = it->seg0 < it->seg1 ? check_file(job, it, &b) : GFS_OK;
		else if (!zstd_bufs(&b))
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		else
			err = check_zstd(job, it, b.d, b.zin, b.zout);
		if (err)
			job_fail(job, err);
		else if (atomic_fetch_sub(&job->left[it->k], 1) == 1)
			settle(job, it->k);
	}
	ZSTD_freeDCtx(b.d);
	free(b.zout);
	free(b.zin);
	free(b.buf);
	return NULL;
}

/* run_job(): run job on nthreads threads, this one included. */
static void run_job(chk_job *job, unsigned nthreads)
{
	pthread_t tids[MAX_THREADS];
	unsigned started = 0;

	if (nthreads > job->nitems)
		nthreads = (unsigned)job->nitems;
	while (started + 1 < nthreads &&
	       pthread_create(&tids[started], NULL, chk_worker, job) == 0)
		started++;
	chk_worker(job);
	while (started > 0)
		pthread_join(tids[--started], NULL);
}

static int u64_cmp(const void *a, const void *b)
{
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cpiece_cmp(const void *a, const void *b)
{
	const chk_piece *x = a, *y = b;

	if (x->k != y->k)
		return x->k < y->k ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

static void plan_free(chk_plan *pl, chk_job *job)
{
	free(pl->pieces);
	free(pl->piece0);
	free(pl->seg0);
	free(pl->item0);
	free(job->left);
	free(job->settled);
	free(job->segs);
	free(job->items);
}

/* What add_piece() adds the pieces of claimed record k to. */
typedef struct plan_add {
	const gfs_layout *l;
	chk_plan *pl;
	size_t *cap;
	size_t k;
	uint64_t roff; /* the record's offset */
} plan_add;

/* add_piece(): a contiguous FILE piece of the record to the plan; false if out of memory. */
static bool add_piece(void *ctx, gfs_piece_ref ref)
{
	plan_add *a = ctx;
	const gfs_piece pc = gfs_tensor_piece(&a->l->tensors[ref.ti], ref.p);

	if (pc.kind != GFS_PIECE_FILE || pc.count != 1)
		return true;
	if (!gfs_grow((void **)&a->pl->pieces, a->cap, a->pl->npieces, sizeof(*a->pl->pieces), 64))
		return false;
	a->pl->pieces[a->pl->npieces++] = (chk_piece){
		.k = a->k, .off = pc.src_off - a->roff, .end = pc.src_off - a->roff + pc.len,
		.ti = ref.ti, .p = ref.p,
	};
	return true;
}

/*
 * plan(): cut the claimed records into segments and items, and find the
 * pieces inside them.  O(x log x), x = their pieces + bytes / CHUNK.
 */
static gfs_err plan(const gfs_layout *l, const uint32_t *claimed, size_t n, chk_plan *pl,
		    chk_job *job)
{
	uint64_t *bounds = NULL;
	size_t cap_pieces = 0, nseg_max = 0, nitem_max = 0, bcap = 0;
	gfs_err err = GFS_ERR_NOMEM;

	pl->piece0 = gfs_calloc(n + 1, sizeof(*pl->piece0));
	pl->seg0 = gfs_calloc(n + 1, sizeof(*pl->seg0));
	pl->item0 = gfs_calloc(n + 1, sizeof(*pl->item0));
	job->left = gfs_calloc(n, sizeof(*job->left));
	job->settled = gfs_calloc(n, sizeof(*job->settled));
	if (!pl->piece0 || !pl->seg0 || !pl->item0 || !job->left || !job->settled)
		goto out;
	for (size_t k = 0; k < n; k++) {
		plan_add ctx = { .l = l, .pl = pl, .cap = &cap_pieces, .k = k,
				 .roff = l->records[claimed[k]].off };

		if (!gfs_record_each_piece(l, claimed[k], add_piece, &ctx))
			goto out;
	}
	if (pl->npieces > 1)
		qsort(pl->pieces, pl->npieces, sizeof(*pl->pieces), cpiece_cmp);
	for (size_t i = 0, k = 0; k <= n; k++) {
		while (i < pl->npieces && pl->pieces[i].k < k)
			i++;
		pl->piece0[k] = i;
	}
	for (size_t k = 0; k < n; k++) {
		const gfs_record *r = &l->records[claimed[k]];
		const size_t np = pl->piece0[k + 1] - pl->piece0[k];

		nseg_max += 2 * np + 1 + (r->kind == GFS_PIECE_FILE ? r->len / CHUNK : 0);
		nitem_max += 1 + (r->kind == GFS_PIECE_FILE ? r->len / CHUNK : 0);
	}
	job->segs = gfs_calloc(nseg_max ? nseg_max : 1, sizeof(*job->segs));
	job->items = gfs_calloc(nitem_max ? nitem_max : 1, sizeof(*job->items));
	if (!job->segs || !job->items)
		goto out;
	for (size_t k = 0; k < n; k++) {
		const gfs_record *r = &l->records[claimed[k]];
		size_t nb = 0;

		pl->seg0[k] = job->nsegs;
		pl->item0[k] = job->nitems;
		if (r->kind == GFS_PIECE_ZSTD || r->len == 0) {
			job->items[job->nitems++] = (chk_item){ .rec = claimed[k], .k = k };
			continue;
		}
		{
			const size_t need = 2 * (pl->piece0[k + 1] - pl->piece0[k]) + 2 +
					    (size_t)(r->len / CHUNK);

			if (need > bcap) {
				uint64_t *nbounds = gfs_reallocarray(bounds, need, sizeof(*bounds));

				if (!nbounds)
					goto out;
				bounds = nbounds;
				bcap = need;
			}
		}
		bounds[nb++] = 0;
		bounds[nb++] = r->len;
		for (uint64_t c = CHUNK; c < r->len; c += CHUNK)
			bounds[nb++] = c;
		for (size_t i = pl->piece0[k]; i < pl->piece0[k + 1]; i++) {
			bounds[nb++] = pl->pieces[i].off;
			bounds[nb++] = pl->pieces[i].end;
		}
		qsort(bounds, nb, sizeof(*bounds), u64_cmp);
		for (size_t i = 0; i + 1 < nb; i++) {
			if (bounds[i + 1] == bounds[i])
				continue;
			if (bounds[i] % CHUNK == 0) { /* a new item */
				if (job->nitems && job->items[job->nitems - 1].rec == claimed[k] &&
				    job->items[job->nitems - 1].seg1 == 0)
					job->items[job->nitems - 1].seg1 = job->nsegs;
				job->items[job->nitems++] =
					(chk_item){ .rec = claimed[k], .k = k, .seg0 = job->nsegs };
			}
			assert(job->nsegs < nseg_max);
			job->segs[job->nsegs++] = (chk_seg){ .off = bounds[i],
							     .len = bounds[i + 1] - bounds[i] };
		}
		job->items[job->nitems - 1].seg1 = job->nsegs;
	}
	pl->seg0[n] = job->nsegs;
	pl->item0[n] = job->nitems;
	for (size_t k = 0; k < n; k++)
		atomic_init(&job->left[k], pl->item0[k + 1] - pl->item0[k]);
	err = GFS_OK;
out:
	free(bounds);
	return err ? gfs_fail(err, "out of memory") : GFS_OK;
}

/* Lazy DCP records being confirmed (confirm()). */
typedef struct confirm_ctx {
	const gfs_layout *l;
	const gfs_srcset *s;
	const uint32_t *claimed;
	uint32_t *want;
} confirm_ctx;

/* confirm_one(): claimed record k, if lazy: its stored CRC-32, from its archive. */
static gfs_err confirm_one(void *ctx, size_t k)
{
	const confirm_ctx *cc = ctx;
	const gfs_record *r = &cc->l->records[cc->claimed[k]];

	if (!r->lazy) /* confirm() set it */
		return GFS_OK;
	return gfs_dcp_confirm(r, gfs_srcset_fd(cc->s, r->src), cc->l->sources[r->src].abspath,
			       &cc->want[k]);
}

/*
 * confirm(): want[k] = the stored CRC-32 of record claimed[k], k < n:
 * lazy records (DCP chunks whose archive the import did not open) are
 * opened and confirmed first, on up to nthreads threads (small reads,
 * each a wait on slow storage); one that is not where the layout places
 * it is an error (GFS_ERR_IO naming its file).
 */
static gfs_err confirm(const gfs_layout *l, const gfs_srcset *s, const uint32_t *claimed,
		       size_t n, unsigned nthreads, uint32_t *want)
{
	confirm_ctx cc = { .l = l, .s = s, .claimed = claimed, .want = want };
	size_t nlazy = 0;

	for (size_t k = 0; k < n; k++) {
		want[k] = l->records[claimed[k]].crc32;
		nlazy += l->records[claimed[k]].lazy;
	}
	return nlazy ? gfs_pfor_threads(n, nthreads, confirm_one, &cc) : GFS_OK;
}

/*
 * check_claimed(): check records claimed[0..n), which the caller holds
 * BUSY, and settle every one of them: each as soon as its bytes are
 * checked (settle()), those an error left UNCHECKED at the end.
 */
static gfs_err check_claimed(const gfs_layout *l, const gfs_srcset *s, const uint32_t *claimed,
			     size_t n, unsigned nthreads, gfs_integrity_stats *st)
{
	chk_plan pl = { 0 };
	uint32_t *want = gfs_calloc(n ? n : 1, sizeof(*want));
	chk_job job = { .l = l, .s = s, .claimed = claimed, .want = want, .pl = &pl };
	gfs_err err = want ? confirm(l, s, claimed, n, nthreads, want)
			   : gfs_fail(GFS_ERR_NOMEM, "out of memory");

	if (!err && n)
		err = plan(l, claimed, n, &pl, &job);

	atomic_init(&job.next, 0);
	atomic_init(&job.err, GFS_OK);
	if (err)
		job_fail(&job, err);
	else if (job.nitems)
		run_job(&job, nthreads);
	err = (gfs_err)atomic_load(&job.err);
	for (size_t k = 0; k < n; k++) {
		const gfs_record *r = &l->records[claimed[k]];

		if (!job.settled || !job.settled[k]) {
			gfs_srcset_rec_settle(s, claimed[k], GFS_REC_UNCHECKED);
			continue;
		}
		st->checked++;
		st->bytes += gfs_record_src_len(r);
		if (r->kind == GFS_PIECE_ZSTD) {
			st->frames++;
			st->frames_sum += job.items[pl.item0[k]].checksum;
		}
	}
	plan_free(&pl, &job);
	free(want);
	return err ? gfs_fail(err, "%s", job.msg) : GFS_OK;
}

gfs_err gfs_integrity_check(const gfs_layout *l, const gfs_srcset *s, const uint32_t *recs,
			    size_t n, unsigned nthreads, size_t *nbad, gfs_integrity_stats *st)
{
	gfs_integrity_stats dummy = { 0 };
	uint32_t *claimed;
	size_t nclaimed = 0, bad = 0;
	gfs_err err;

	if (!st)
		st = &dummy;
	if (!recs)
		n = l->nrecords;
	if (nthreads == 0) {
		const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

		nthreads = ncpu < IO_THREADS ? IO_THREADS : ncpu > MAX_THREADS ? MAX_THREADS : (unsigned)ncpu;
	}
	if (nthreads > MAX_THREADS)
		nthreads = MAX_THREADS;
	claimed = gfs_calloc(n ? n : 1, sizeof(*claimed));
	if (!claimed)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	/*
	 * Claim what nobody checks yet (a duplicate is BUSY by then: skipped),
	 * without waiting: a thread holding claims that waited for a record
	 * another thread claimed meanwhile could wait for one waiting on it.
	 */
	for (size_t k = 0; k < n; k++) {
		const uint32_t r = recs ? recs[k] : (uint32_t)k;

		assert(r < l->nrecords);
		if (gfs_srcset_rec_try_claim(s, r))
			claimed[nclaimed++] = r;
	}
	err = check_claimed(l, s, claimed, nclaimed, nthreads, st);
	free(claimed);
	/* Records other threads were checking meanwhile, or left unchecked. */
	for (size_t k = 0; !err && k < n; k++) {
		const uint32_t r = recs ? recs[k] : (uint32_t)k;
		gfs_rec_state state;

		while (!err && (state = gfs_srcset_rec_state(s, r)) != GFS_REC_OK &&
		       state != GFS_REC_BAD)
			if (gfs_srcset_rec_claim(s, r))
				err = check_claimed(l, s, &r, 1, 1, st);
		bad += gfs_srcset_rec_state(s, r) == GFS_REC_BAD;
	}
	if (nbad)
		*nbad = bad;
	return err;
}

gfs_err gfs_integrity_require(const gfs_layout *l, const gfs_srcset *s, const uint32_t *recs,
			      size_t n, unsigned nthreads)
{
	size_t nbad = 0;
	const gfs_err err = gfs_integrity_check(l, s, recs, n, nthreads, &nbad, NULL);
	char desc[1024];

	if (err || nbad == 0)
		return err;
	if (!recs)
		n = l->nrecords;
	for (size_t k = 0; k < n; k++) {
		const uint32_t r = recs ? recs[k] : (uint32_t)k;

		if (gfs_srcset_rec_state(s, r) == GFS_REC_BAD)
			return gfs_fail(GFS_ERR_IO, "%s does not match its stored CRC-32%s",
					gfs_record_describe(l, r, 8, desc, sizeof(desc)),
					nbad > 1 ? " (and more records are corrupt)" : "");
	}
	assert(!"a BAD record went missing");
	return GFS_ERR_IO;
}

uint64_t gfs_integrity_unsummed(const gfs_layout *l, bool *unsummed, size_t *ntensors)
{
	uint64_t bytes = 0;
	size_t nt = 0;

	for (size_t i = 0; i < gfs_layout_nentries(l); i++) {
		const gfs_tensor *t = &l->tensors[i];
		bool any = false;

		for (size_t p = 0; t->alias_of < 0 && p < t->npieces; p++) {
			const gfs_piece pc = gfs_tensor_piece(t, p);

			if (pc.kind == GFS_PIECE_ZERO || pc.rec != GFS_NO_RECORD)
				continue;
			bytes += pc.len * pc.count;
			any = true;
			if (unsummed) {
				assert(pc.src < l->nsources);
				unsummed[pc.src] = true;
			}
		}
		nt += any;
	}
	if (ntensors)
		*ntensors = nt;
	return bytes;
}

bool gfs_unsummed_init(gfs_unsummed *u, const gfs_layout *l)
{
	assert(u && l);
	memset(u, 0, sizeof(*u));
	u->src = gfs_calloc(l->nsources ? l->nsources : 1, sizeof(*u->src));
	if (!u->src)
		return false;
	u->l = l;
	u->bytes = gfs_integrity_unsummed(l, u->src, &u->ntensors);
	return true;
}

const gfs_source *gfs_unsummed_next(gfs_unsummed *u)
{
	assert(u);
	while (u->bytes && u->next < u->l->nsources)
		if (u->src[u->next++])
			return &u->l->sources[u->next - 1];
	return NULL;
}

void gfs_unsummed_free(gfs_unsummed *u)
{
	if (u) {
		free(u->src);
		u->src = NULL;
	}
}
