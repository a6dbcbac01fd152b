/*
 * gatherfs — export views to regular files.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gatherfs/export.h"
#include "gatherfs/shards.h"
#include "gatherfs/view_safetensors.h"
#include "gatherfs/view_torchzip.h"

#define EXPORT_CHUNK ((size_t)4 << 20)

static bool ends_with(const char *s, const char *suffix)
{
	const size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

gfs_format gfs_format_from_name(const char *s)
{
	if (!s)
		return GFS_FORMAT_NONE;
	if (strcmp(s, "bin") == 0 || strcmp(s, "pt") == 0 || strcmp(s, "torch") == 0 ||
	    ends_with(s, ".bin") || ends_with(s, ".pt") || ends_with(s, ".pth"))
		return GFS_FORMAT_BIN;
	if (strcmp(s, "safetensors") == 0 || strcmp(s, "st") == 0 || ends_with(s, ".safetensors"))
		return GFS_FORMAT_SAFETENSORS;
	return GFS_FORMAT_NONE;
}

/* Progress over all files of one export. */
typedef struct progress {
	bool on;
	uint64_t done, total;
	double t0, last;
} progress;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void progress_draw(progress *p, bool final)
{
	const double t = now_s();
	const int width = 30;
	int fill;
	double frac, rate;

	if (!p->on || (!final && t - p->last < 0.2))
		return;
	p->last = t;
	frac = p->total ? (double)p->done / (double)p->total : 1.0;
	fill = (int)(frac * width);
	rate = t > p->t0 ? (double)p->done / (t - p->t0) : 0.0;
	fprintf(stderr, "\r[%.*s%*s] %3.0f%% %.1f / %.1f MB  %.0f MB/s", fill,
		"##############################", width - fill, "", frac * 100.0,
		(double)p->done / 1e6, (double)p->total / 1e6, rate / 1e6);
	if (final)
		fputc('\n', stderr);
	fflush(stderr);
}

/* A file being written under a temporary name in its final directory. */
typedef struct outfile {
	char *final;
	char *tmp;
	int fd;
} outfile;

static gfs_err out_open(outfile *f, const char *path)
{
	const size_t n = strlen(path) + 32;
	char *dir = gfs_strdup(path);
	char *base = gfs_strdup(path);

	f->fd = -1;
	f->final = gfs_strdup(path);
	f->tmp = malloc(n);
	if (!dir || !base || !f->final || !f->tmp) {
		free(dir);
		free(base);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	snprintf(f->tmp, n, "%s/.%s.XXXXXX", dirname(dir), basename(base));
	free(dir);
	free(base);
	f->fd = mkstemp(f->tmp);
	if (f->fd < 0)
		return gfs_fail(GFS_ERR_IO, "%s: cannot create a temporary file: %s", path,
				strerror(errno));
	(void)fchmod(f->fd, 0644);
	return GFS_OK;
}

/* out_abort(): remove the temporary file; the final name is never created. */
static void out_abort(outfile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->tmp && f->fd >= 0)
		unlink(f->tmp);
	f->fd = -1;
	free(f->tmp);
	free(f->final);
	f->tmp = f->final = NULL;
}

static gfs_err fsync_dir_of(const char *path)
{
	char *dir = gfs_strdup(path);
	int fd;

	if (!dir)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
	return GFS_OK;
}

/* out_commit(): fsync, close and rename into place. */
static gfs_err out_commit(outfile *f)
{
	gfs_err err = GFS_OK;

	if (fsync(f->fd) != 0 || close(f->fd) != 0)
		err = gfs_fail(GFS_ERR_IO, "%s: cannot flush to disk: %s", f->final, strerror(errno));
	f->fd = -1;
	if (!err && rename(f->tmp, f->final) != 0)
		err = gfs_fail(GFS_ERR_IO, "%s: cannot rename into place: %s", f->final,
			       strerror(errno));
	if (err)
		unlink(f->tmp);
	else
		err = fsync_dir_of(f->final);
	free(f->tmp);
	free(f->final);
	f->tmp = f->final = NULL;
	return err;
}

static gfs_err write_all(const outfile *f, const uint8_t *p, size_t n)
{
	while (n > 0) {
		const ssize_t w = write(f->fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return gfs_fail(GFS_ERR_IO, "%s: write failed: %s", f->final, strerror(errno));
		}
		p += w;
		n -= (size_t)w;
	}
	return GFS_OK;
}

/* stream(): copy a whole vfile into an open output file. */
static gfs_err stream(const gfs_vfile *vf, const outfile *f, uint8_t *buf, progress *pg)
{
	const uint64_t size = gfs_vfile_size(vf);
	uint64_t off = 0;

	while (off < size) {
		size_t got = 0;
		gfs_err err = gfs_vfile_read(vf, off, buf, EXPORT_CHUNK, &got);

		if (!err && got == 0)
			err = gfs_fail(GFS_ERR_IO, "%s: short read at %llu", f->final,
				       (unsigned long long)off);
		if (!err)
			err = write_all(f, buf, got);
		if (err)
			return err;
		off += got;
		pg->done += got;
		progress_draw(pg, false);
	}
	return GFS_OK;
}

/* One output file: its view and its name. */
typedef struct job {
	gfs_tzview *tz;
	gfs_vfile *st;
	char *path;
	const gfs_vfile *vf;
} job;

static gfs_err make_view(const gfs_vctx *ctx, gfs_format fmt, const size_t *entries, size_t n,
			 const char *path, job *j)
{
	gfs_err err;

	j->path = gfs_strdup(path);
	if (!j->path)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (fmt == GFS_FORMAT_SAFETENSORS) {
		err = gfs_stview_new(ctx, entries, n, &j->st);
		j->vf = j->st;
	} else {
		char *stem = gfs_strdup(path);
		char *b, *dot;

		if (!stem)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		b = basename(stem);
		dot = strrchr(b, '.');
		if (dot && dot != b)
			*dot = '\0';
		err = gfs_tzview_new(ctx, *b ? b : "archive", entries, n, &j->tz);
		free(stem);
		if (!err)
			j->vf = gfs_tzview_vfile(j->tz);
	}
	return err;
}

static char *join(const char *dir, const char *name)
{
	const size_t n = strlen(dir) + 1 + strlen(name) + 1;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

gfs_err gfs_export(const gfs_layout *l, const gfs_srcset *s, const char *out,
		   const gfs_export_opts *o)
{
	const gfs_vctx ctx = { .layout = l, .src = s, .want = o->want };
	const bool st = o->format == GFS_FORMAT_SAFETENSORS;
	const char *stem = st ? "model" : "pytorch_model";
	const char *ext = st ? ".safetensors" : ".bin";
	gfs_shard_plan *plan = NULL;
	job *jobs = NULL;
	outfile *files = NULL;
	size_t njobs = 0;
	char *index = NULL, *index_path = NULL;
	uint8_t *buf = NULL;
	progress pg = { .on = o->progress, .t0 = now_s() };
	gfs_err err;

	assert(o->format != GFS_FORMAT_NONE);
	if (o->shard_size) {
		if (mkdir(out, 0755) != 0 && errno != EEXIST)
			return gfs_fail(GFS_ERR_IO, "%s: cannot create directory: %s", out,
					strerror(errno));
		err = gfs_shard_plan_new(l, o->want, o->shard_size, &plan);
		if (err)
			return err;
		njobs = plan->nshards;
	} else {
		njobs = 1;
	}
	jobs = gfs_calloc(njobs, sizeof(*jobs));
	files = gfs_calloc(njobs + 1, sizeof(*files));
	buf = malloc(EXPORT_CHUNK);
	if (!jobs || !files || !buf) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i <= njobs; i++)
		files[i].fd = -1;
	err = GFS_OK;
	for (size_t i = 0; !err && i < njobs; i++) {
		if (plan) {
			char *name, *path;

			err = gfs_shard_name(plan, i, stem, ext, &name);
			if (err)
				break;
			path = join(out, name);
			free(name);
			if (!path) {
				err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
				break;
			}
			err = make_view(&ctx, o->format, plan->shards[i].entries, plan->shards[i].n,
					path, &jobs[i]);
			free(path);
		} else {
			err = make_view(&ctx, o->format, NULL, 0, out, &jobs[i]);
		}
		if (!err)
			pg.total += gfs_vfile_size(jobs[i].vf);
	}
	if (!err && plan) {
		char name[64];

		snprintf(name, sizeof(name), "%s%s.index.json", stem, ext);
		index_path = join(out, name);
		err = index_path ? gfs_shard_index_json(l, plan, stem, ext, !st, &index)
				 : gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; !err && i < njobs; i++) {
		err = out_open(&files[i], jobs[i].path);
		if (!err)
			err = stream(jobs[i].vf, &files[i], buf, &pg);
	}
	if (!err && index) {
		err = out_open(&files[njobs], index_path);
		if (!err)
			err = write_all(&files[njobs], (const uint8_t *)index, strlen(index));
		if (!err)
			err = write_all(&files[njobs], (const uint8_t *)"\n", 1);
	}
	/* Everything is written: move it all into place, the index last. */
	for (size_t i = 0; !err && i <= njobs; i++)
		if (files[i].tmp)
			err = out_commit(&files[i]);
	if (!err)
		progress_draw(&pg, true);
	else if (pg.on)
		fputc('\n', stderr);
out:
	for (size_t i = 0; files && i <= njobs; i++)
		out_abort(&files[i]);
	for (size_t i = 0; jobs && i < njobs; i++) {
		gfs_tzview_free(jobs[i].tz);
		gfs_vfile_free(jobs[i].st);
		free(jobs[i].path);
	}
	free(jobs);
	free(files);
	free(buf);
	free(index);
	free(index_path);
	gfs_shard_plan_free(plan);
	return err;
}
