/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — export views to regular files.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gatherfs/cli/export.h"
#include "gatherfs/views/shards.h"
#include "gatherfs/views/view_safetensors.h"
#include "gatherfs/views/view_torchzip.h"

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
	bool created; /* tmp exists on disk (and is ours to remove) */
	bool renamed; /* tmp was renamed to final */
} outfile;

/* kind(): what a file of mode m is, for a message. */
static const char *kind(mode_t m)
{
	return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" :
	       S_ISLNK(m) ? "a symbolic link" : S_ISFIFO(m) ? "a FIFO" :
	       S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" :
	       S_ISSOCK(m) ? "a socket" : "a special file";
}

/* refuse(): path, of mode m, is not what export may write (want_dir: a directory). */
static gfs_err refuse(const char *path, mode_t m, bool want_dir)
{
	if (want_dir)
		return gfs_fail(GFS_ERR_INVAL, "%s: is %s, not a directory: no shards written into it",
				path, kind(m));
	return gfs_fail(GFS_ERR_INVAL,
			"%s: is %s, not a regular file: not replaced (export to - writes standard output)",
			path, kind(m));
}

/*
 * gfs_export_check_target(): path (not followed if a symbolic link) is a name export
 * may write: missing, or a regular file (want_dir: a directory).  Anything
 * else (a device, a FIFO, a socket, a symbolic link, a directory where a
 * file is meant) is GFS_ERR_INVAL naming path and what it is.
 */
gfs_err gfs_export_check_target(const char *path, bool want_dir)
{
	char *name = gfs_strdup(path);
	size_t n = name ? strlen(name) : 0;
	struct stat st;
	gfs_err err = GFS_OK;

	if (!name)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	/* "OUT/" is OUT: a trailing slash would follow a symbolic link. */
	while (want_dir && n > 1 && name[n - 1] == '/')
		name[--n] = '\0';
	if (lstat(name, &st) != 0) {
		if (errno != ENOENT)
			err = gfs_fail(GFS_ERR_IO, "%s: cannot examine: %s", path, strerror(errno));
	} else if (!(want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))) {
		err = refuse(path, st.st_mode, want_dir);
	}
	free(name);
	return err;
}

/*
 * Interruption.  gfs_export() with opts->signals blocks SIGINT, SIGTERM and
 * SIGHUP in the calling thread before it creates anything, so every thread
 * started while it runs (the CRC workers of a torch zip view) inherits the
 * block, and starts one thread, guard_main(), that waits for them with
 * sigwaitinfo().  That thread runs in ordinary thread context (no
 * async-signal-safety constraints): when a signal comes it takes the guard's
 * mutex, removes every temporary file created so far (and the output
 * directory if this export created it), restores the signal's disposition
 * and raises it again, so the process dies of the signal as it would have.
 * The exporting thread holds the mutex while it creates a temporary file
 * (mkstemp and recording the name are one step), during the whole rename
 * phase and while it tears down: a signal that comes during the renames is
 * acted on once they are all done, when nothing is left to remove — the set
 * is complete, then the process dies of the signal.  A read blocked on a
 * slow source does not delay the cleanup.  A signal ignored when the export
 * starts (nohup, a background job of a non-interactive shell) stays ignored.
 * At the end the exporting thread wakes the guard with pthread_sigqueue(): a
 * queued signal from this process (SI_QUEUE, our pid) after "done" is set
 * means "exit"; a real signal still pending then is delivered (and acted on
 * as if no export ran) when the old mask is restored.
 */
typedef struct guard {
	pthread_mutex_t mu;
	outfile *files;    /* [nfiles], entries created under mu */
	size_t nfiles;
	const char *made_dir; /* the directory this export created, or NULL */
	bool committed;   /* everything is in place: nothing to remove */
	bool progress;    /* a progress bar is on the terminal: end its line */
	bool done;        /* the export is over: the guard thread exits */
	sigset_t set;     /* the signals it waits for */
	int wake;         /* the signal used to wake it */
	pthread_t tid;
	bool running;
} guard;

static void guard_remove(guard *g)
{
	for (size_t i = 0; i < g->nfiles; i++) {
		outfile *f = &g->files[i];

		if (f->created && !f->renamed)
			(void)unlink(f->tmp);
		else if (f->renamed)
			(void)unlink(f->final);
		f->created = f->renamed = false;
	}
	if (g->made_dir)
		(void)rmdir(g->made_dir);
	g->made_dir = NULL;
}

static void *guard_main(void *arg)
{
	guard *g = arg;

	for (;;) {
		siginfo_t si;
		sigset_t one;
		const int sig = sigwaitinfo(&g->set, &si);

		if (sig < 0)
			continue;
		pthread_mutex_lock(&g->mu);
		if (g->done && si.si_code == SI_QUEUE && si.si_pid == getpid()) {
			pthread_mutex_unlock(&g->mu);
			return NULL;
		}
		if (!g->committed) {
			guard_remove(g);
			fprintf(stderr, "%s%s: export interrupted by %s: temporary files removed, nothing written\n",
				g->progress ? "\n" : "", program_invocation_short_name,
				sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
		}
		/* Die of the signal, the mutex held: nothing else is created. */
		signal(sig, SIG_DFL);
		sigemptyset(&one);
		sigaddset(&one, sig);
		pthread_sigmask(SIG_UNBLOCK, &one, NULL);
		raise(sig);
		_exit(128 + sig);
	}
}

/* guard_start(): block the signals and start the guard thread. */
static gfs_err guard_start(guard *g, sigset_t *old)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };

	sigemptyset(&g->set);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction sa;

		if (sigaction(sigs[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
			continue;
		sigaddset(&g->set, sigs[i]);
		if (!g->wake)
			g->wake = sigs[i];
	}
	if (!g->wake)
		return GFS_OK;
	pthread_sigmask(SIG_BLOCK, &g->set, old);
	if (pthread_create(&g->tid, NULL, guard_main, g) != 0) {
		pthread_sigmask(SIG_SETMASK, old, NULL);
		return gfs_fail(GFS_ERR_NOMEM, "cannot start a thread");
	}
	g->running = true;
	return GFS_OK;
}

/* guard_stop(): stop the guard thread and restore the signal mask. */
static void guard_stop(guard *g, const sigset_t *old)
{
	if (!g->running)
		return;
	pthread_mutex_lock(&g->mu);
	g->done = true;
	pthread_mutex_unlock(&g->mu);
	pthread_sigqueue(g->tid, g->wake, (union sigval){ .sival_int = 0 });
	pthread_join(g->tid, NULL);
	g->running = false;
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* out_open(): create f's temporary file (g->mu is held). */
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
	f->fd = mkostemp(f->tmp, O_CLOEXEC);
	if (f->fd < 0)
		return gfs_fail(GFS_ERR_IO, "%s: cannot create a temporary file: %s", path,
				strerror(errno));
	f->created = true;
	(void)fchmod(f->fd, 0644);
	return GFS_OK;
}

/* out_abort(): remove what is left of f (g->mu is held). */
static void out_abort(outfile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->created && !f->renamed)
		unlink(f->tmp);
	else if (f->renamed)
		unlink(f->final);
	f->fd = -1;
	f->created = f->renamed = false;
	free(f->tmp);
	free(f->final);
	f->tmp = f->final = NULL;
}

/* out_release(): forget a committed f. */
static void out_release(outfile *f)
{
	f->created = f->renamed = false;
	free(f->tmp);
	free(f->final);
	f->tmp = f->final = NULL;
}

/* fsync_dir(): flush the directory holding path dir_of. */
static gfs_err fsync_dir(const char *dir_of)
{
	char *dir = gfs_strdup(dir_of);
	gfs_err err = GFS_OK;
	int fd;

	if (!dir)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	/* EINVAL: a file system that cannot sync a directory (nothing to wait for). */
	if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
		err = gfs_fail(GFS_ERR_IO, "%s: cannot flush the directory: %s", dir,
			       strerror(errno));
	if (fd >= 0)
		close(fd);
	free(dir);
	return err;
}

/* out_flush(): fsync and close f's temporary file. */
static gfs_err out_flush(outfile *f)
{
	gfs_err err = GFS_OK;

	if (fsync(f->fd) != 0)
		err = gfs_fail(GFS_ERR_IO, "%s: cannot flush to disk: %s", f->final, strerror(errno));
	if (close(f->fd) != 0 && !err)
		err = gfs_fail(GFS_ERR_IO, "%s: cannot close: %s", f->final, strerror(errno));
	f->fd = -1;
	return err;
}

/*
 * out_rename(): move f's flushed temporary file into place (g->mu is held):
 * over nothing (RENAME_NOREPLACE, so that nothing that appears meanwhile is
 * replaced) or over a regular file, checked again just before.
 */
static gfs_err out_rename(outfile *f)
{
	for (int tries = 0;; tries++) {
		struct stat st;
		int rc;

		if (lstat(f->final, &st) == 0) {
			if (!S_ISREG(st.st_mode))
				return refuse(f->final, st.st_mode, false);
			rc = rename(f->tmp, f->final);
		} else if (errno != ENOENT) {
			rc = -1;
		} else {
			rc = renameat2(AT_FDCWD, f->tmp, AT_FDCWD, f->final, RENAME_NOREPLACE);
			/* A file system without RENAME_NOREPLACE: the check above is all. */
			if (rc != 0 && errno == EINVAL)
				rc = rename(f->tmp, f->final);
		}
		if (rc == 0) {
			f->renamed = true;
			return GFS_OK;
		}
		/* EEXIST: something appeared since the lstat(): look again. */
		if (errno != EEXIST || tries >= 3)
			return gfs_fail(GFS_ERR_IO, "%s: cannot rename into place: %s", f->final,
					strerror(errno));
	}
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

/*
 * commit(): move every flushed file into place, the index last (g->mu is
 * held).  A previous export's index in the directory is removed first, and
 * the directory is flushed between the steps, so that even after a crash a
 * reader who goes through an index finds a complete set: the old index goes
 * (flushed) before any shard is replaced, and the new index appears
 * (flushed) only after every shard it names.  On failure the files already
 * renamed are removed again.  Each name is checked again first (dir, the
 * output directory of a sharded export, still a directory; each file missing
 * or a regular file: see out_rename()).
 */
static gfs_err commit(const char *dir, outfile *files, size_t nshards, outfile *index)
{
	gfs_err err = dir ? gfs_export_check_target(dir, true) : GFS_OK;

	if (!err && index)
		err = gfs_export_check_target(index->final, false);
	if (!err && index) {
		if (unlink(index->final) == 0)
			err = fsync_dir(index->final);
		else if (errno != ENOENT)
			err = gfs_fail(GFS_ERR_IO, "%s: cannot remove the old index: %s",
				       index->final, strerror(errno));
	}
	for (size_t i = 0; !err && i < nshards; i++)
		err = out_rename(&files[i]);
	if (!err && index) {
		err = fsync_dir(index->final);
		if (!err)
			err = out_rename(index);
	}
	if (!err)
		err = fsync_dir(index ? index->final : files[0].final);
	return err;
}

/*
 * export_stdout(): write the single-file view to standard output as it is
 * produced (a pipe, a device, a file the shell opened): no temporary file,
 * no rename.  The torch zip's archive name is pytorch_model, the mounted
 * pytorch_model.bin's.
 */
static gfs_err export_stdout(const gfs_vctx *ctx, const gfs_export_opts *o)
{
	char name[] = "standard output";
	outfile f = { .final = name, .fd = STDOUT_FILENO };
	progress pg = { .on = o->progress, .t0 = now_s() };
	job j = { 0 };
	uint8_t *buf = gfs_iobuf(EXPORT_CHUNK);
	gfs_err err = buf ? make_view(ctx, o->format, NULL, 0,
				      o->format == GFS_FORMAT_SAFETENSORS ? "model.safetensors"
									  : "pytorch_model.bin",
				      &j)
			  : gfs_fail(GFS_ERR_NOMEM, "out of memory");

	if (!err) {
		pg.total = gfs_vfile_size(j.vf);
		err = stream(j.vf, &f, buf, &pg);
	}
	if (!err)
		progress_draw(&pg, true);
	else if (pg.on)
		fputc('\n', stderr);
	gfs_tzview_free(j.tz);
	gfs_vfile_free(j.st);
	free(j.path);
	free(buf);
	return err;
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
	size_t njobs = 0, ix = 0; /* files[ix]: the index, after the shards and o->extra */
	char *index = NULL, *index_path = NULL;
	char **extra_path = NULL;
	uint8_t *buf = NULL;
	progress pg = { .on = o->progress, .t0 = now_s() };
	guard g = { .mu = PTHREAD_MUTEX_INITIALIZER, .progress = o->progress };
	sigset_t oldmask;
	gfs_err err = GFS_OK;

	assert(o->format != GFS_FORMAT_NONE);
	if (strcmp(out, "-") == 0) {
		assert(!o->shard_size && !o->signals);
		return export_stdout(&ctx, o);
	}
	err = gfs_export_check_target(out, o->shard_size != 0);
	if (err)
		return err;
	sigemptyset(&oldmask);
	if (o->signals)
		err = guard_start(&g, &oldmask);
	if (!err && o->shard_size) {
		err = gfs_shard_plan_new(l, o->want, o->shard_size, &plan);
		if (!err)
			njobs = plan->nshards;
	} else {
		njobs = 1;
	}
	if (err)
		goto out;
	ix = njobs + (plan ? o->nextra : 0);
	jobs = gfs_calloc(njobs, sizeof(*jobs));
	files = gfs_calloc(ix + 1, sizeof(*files));
	extra_path = gfs_calloc(ix - njobs + 1, sizeof(*extra_path));
	buf = gfs_iobuf(EXPORT_CHUNK);
	if (!jobs || !files || !extra_path || !buf) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i <= ix; i++)
		files[i].fd = -1;
	pthread_mutex_lock(&g.mu);
	g.files = files;
	g.nfiles = ix + 1;
	pthread_mutex_unlock(&g.mu);
	for (size_t i = 0; !err && i < njobs; i++) {
		if (plan) {
			char *name, *path;

			err = gfs_shard_name(plan, i, stem, ext, &name);
			if (err)
				break;
			path = gfs_path_join(out, name);
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
		index_path = gfs_path_join(out, name);
		err = index_path ? gfs_shard_index_json(l, plan, stem, ext, !st, &index)
				 : gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t k = 0; !err && k < ix - njobs; k++)
		if (!(extra_path[k] = gfs_path_join(out, o->extra[k].name)))
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	/* Every name written must be new or a regular file before anything is created. */
	for (size_t i = 0; !err && plan && i < njobs; i++)
		err = gfs_export_check_target(jobs[i].path, false);
	for (size_t k = 0; !err && k < ix - njobs; k++)
		err = gfs_export_check_target(extra_path[k], false);
	if (!err && plan)
		err = gfs_export_check_target(index_path, false);
	if (!err && plan) {
		pthread_mutex_lock(&g.mu);
		if (mkdir(out, 0755) == 0)
			g.made_dir = out;
		else if (errno != EEXIST)
			err = gfs_fail(GFS_ERR_IO, "%s: cannot create directory: %s", out,
				       strerror(errno));
		pthread_mutex_unlock(&g.mu);
	}
	for (size_t i = 0; !err && i < njobs; i++) {
		pthread_mutex_lock(&g.mu);
		err = out_open(&files[i], jobs[i].path);
		pthread_mutex_unlock(&g.mu);
		if (!err)
			err = stream(jobs[i].vf, &files[i], buf, &pg);
	}
	for (size_t k = 0; !err && k < ix - njobs; k++) {
		pthread_mutex_lock(&g.mu);
		err = out_open(&files[njobs + k], extra_path[k]);
		pthread_mutex_unlock(&g.mu);
		if (!err)
			err = write_all(&files[njobs + k], (const uint8_t *)o->extra[k].text,
					o->extra[k].len);
	}
	if (!err && index) {
		pthread_mutex_lock(&g.mu);
		err = out_open(&files[ix], index_path);
		pthread_mutex_unlock(&g.mu);
		if (!err)
			err = write_all(&files[ix], (const uint8_t *)index, strlen(index));
		if (!err)
			err = write_all(&files[ix], (const uint8_t *)"\n", 1);
	}
	/* Everything is written: flush it all, then move it into place, the index last. */
	for (size_t i = 0; !err && i <= ix; i++)
		if (files[i].created)
			err = out_flush(&files[i]);
	if (!err) {
		pthread_mutex_lock(&g.mu);
		err = commit(plan ? out : NULL, files, ix, index ? &files[ix] : NULL);
		if (!err) {
			g.committed = true;
			for (size_t i = 0; i <= ix; i++)
				out_release(&files[i]);
		}
		pthread_mutex_unlock(&g.mu);
	}
	if (!err)
		progress_draw(&pg, true);
	else if (pg.on)
		fputc('\n', stderr);
out:
	pthread_mutex_lock(&g.mu);
	for (size_t i = 0; files && i <= ix; i++)
		out_abort(&files[i]);
	if (err && g.made_dir)
		(void)rmdir(g.made_dir);
	g.made_dir = NULL;
	g.files = NULL;
	g.nfiles = 0;
	pthread_mutex_unlock(&g.mu);
	guard_stop(&g, &oldmask);
	for (size_t i = 0; jobs && i < njobs; i++) {
		gfs_tzview_free(jobs[i].tz);
		gfs_vfile_free(jobs[i].st);
		free(jobs[i].path);
	}
	for (size_t k = 0; extra_path && k < ix - njobs; k++)
		free(extra_path[k]);
	free(extra_path);
	free(jobs);
	free(files);
	free(buf);
	free(index);
	free(index_path);
	gfs_shard_plan_free(plan);
	return err;
}
