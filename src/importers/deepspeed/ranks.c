/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — DeepSpeed importer: the rank files of a tag and their
 * identity (ds_internal.h).
 *
 * Lists a tag directory and classifies its file names (model and optimizer
 * states by rank, layer, expert and model-parallel files), resolves the
 * tag (`latest`, or the only tag directory), opens every rank's files in
 * parallel, and votes on what the optimizer states files say they were
 * written with (stage, BF16_Optimizer, partition_count): a file that
 * disagrees with the others is named, and the model states must record
 * the same dp_world_size.
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/util/pfor.h"
#include "ds_internal.h"

/* --------------------------------------------------------- discovery */

typedef struct ds_name {
	char *name;
	uint64_t rank;
	bool model;
} ds_name;

bool ds_parse_u64(const char **p, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = *p;

	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++)
		if (!gfs_mul_u64(v, 10, &v) || !gfs_add_u64(v, (uint64_t)(*s - '0'), &v))
			return false;
	*p = s;
	*out = v;
	return true;
}

bool ds_eat(const char **p, const char *lit)
{
	const size_t n = strlen(lit);

	if (strncmp(*p, lit, n) != 0)
		return false;
	*p += n;
	return true;
}

/* What classify() recognises. */
typedef enum ds_kind {
	DS_OTHER,   /* not ours (expp_rank_* stubs of MoE runs included) */
	DS_OPTIM,   /* [bf16_]zero_pp_rank_R_mp_rank_MM_optim_states.pt */
	DS_ZMODEL,  /* zero_pp_rank_R_mp_rank_MM_model_states.pt */
	DS_MPMODEL, /* mp_rank_MM_model_states.pt */
	DS_LAYER,   /* layer_XX-model_states.pt, layer_XX-model_TT-model_states.pt */
	DS_EXPERT,  /* layer_L_expert_X_mp_rank_MM_model_states.pt */
} ds_kind;

/*
 * classify(): the kind of file name; *rank is R (a layer file: XX), *mp
 * MM (a layer file: TT, 0 without it).
 */
static ds_kind classify(const char *name, uint64_t *rank, uint64_t *mp)
{
	const char *p = name;

	*rank = 0;
	*mp = 0;
	if (ds_eat(&p, "mp_rank_"))
		return ds_parse_u64(&p, mp) && strcmp(p, "_model_states.pt") == 0 ? DS_MPMODEL
										: DS_OTHER;
	if (ds_eat(&p, "layer_")) {
		if (!ds_parse_u64(&p, rank))
			return DS_OTHER;
		if (ds_eat(&p, "_expert_"))
			return ds_parse_u64(&p, mp) && ds_eat(&p, "_mp_rank_") && ds_parse_u64(&p, mp) &&
			       strcmp(p, "_model_states.pt") == 0 ? DS_EXPERT : DS_OTHER;
		if (strcmp(p, "-model_states.pt") == 0)
			return DS_LAYER;
		return ds_eat(&p, "-model_") && ds_parse_u64(&p, mp) &&
		       strcmp(p, "-model_states.pt") == 0 ? DS_LAYER : DS_OTHER;
	}
	(void)ds_eat(&p, "bf16_");
	if (!ds_eat(&p, "zero_pp_rank_") || !ds_parse_u64(&p, rank) || !ds_eat(&p, "_mp_rank_") ||
	    !ds_parse_u64(&p, mp))
		return DS_OTHER;
	if (strcmp(p, "_optim_states.pt") == 0)
		return DS_OPTIM;
	if (strcmp(p, "_model_states.pt") == 0 && strncmp(name, "bf16_", 5) != 0)
		return DS_ZMODEL;
	return DS_OTHER;
}

static void listing_free(ds_listing *ls)
{
	for (size_t i = 0; i < ls->noptim; i++)
		free(ls->optim[i]);
	for (size_t i = 0; i < ls->nzmodel; i++)
		free(ls->zmodel[i]);
	free(ls->optim);
	free(ls->zmodel);
	free(ls->mpmodel);
}

void ds_dir_free(ds_dir *d)
{
	for (size_t i = 0; i < d->nmp; i++)
		listing_free(&d->mp[i]);
	for (size_t i = 0; i < d->nlayers; i++)
		free(d->layers[i]);
	free(d->mp);
	free(d->layers);
	free(d->expert);
	free(d->tp_layer);
	memset(d, 0, sizeof(*d));
}

static gfs_err slot_put(char ***arr, size_t *n, uint64_t rank, const char *name,
			const char *dir)
{
	if (rank >= DS_MAX_RANKS)
		return gfs_fail(GFS_ERR_LIMIT, "%s/%s: rank %llu is too large", dir, name,
				(unsigned long long)rank);
	if (rank >= *n) {
		char **a = gfs_reallocarray(*arr, (size_t)rank + 1, sizeof(*a));

		if (!a)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		memset(a + *n, 0, ((size_t)rank + 1 - *n) * sizeof(*a));
		*arr = a;
		*n = (size_t)rank + 1;
	}
	if ((*arr)[rank])
		return gfs_fail(GFS_ERR_FORMAT, "%s: two files for rank %llu: %s and %s", dir,
				(unsigned long long)rank, (*arr)[rank], name);
	(*arr)[rank] = gfs_strdup(name);
	return (*arr)[rank] ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

/* mp_slot(): the listing of model-parallel rank mp of d, made on first use. */
static gfs_err mp_slot(ds_dir *d, uint64_t mp, const char *name, const char *dir,
		       ds_listing **out)
{
	if (mp >= DS_MAX_RANKS)
		return gfs_fail(GFS_ERR_LIMIT, "%s/%s: model-parallel rank %llu is too large", dir,
				name, (unsigned long long)mp);
	if (mp >= d->nmp) {
		ds_listing *a = gfs_reallocarray(d->mp, (size_t)mp + 1, sizeof(*a));

		if (!a)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		memset(a + d->nmp, 0, ((size_t)mp + 1 - d->nmp) * sizeof(*a));
		d->mp = a;
		d->nmp = (size_t)mp + 1;
	}
	*out = &d->mp[mp];
	return GFS_OK;
}

/* keep_name(): *slot = a copy of name unless it holds one already. */
static gfs_err keep_name(char **slot, const char *name)
{
	if (!*slot && !(*slot = gfs_strdup(name)))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	return GFS_OK;
}

gfs_err ds_list_tagdir(const char *dir, ds_dir *d)
{
	DIR *dh = opendir(dir);
	const struct dirent *de;
	ds_listing *ls;
	gfs_err err;

	memset(d, 0, sizeof(*d));
	if (!dh)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO,
				"%s: cannot open directory: %s", dir, strerror(errno));
	err = mp_slot(d, 0, "", dir, &ls);
	while (!err && (de = readdir(dh)) != NULL) {
		uint64_t rank, mp;
		const ds_kind kind = classify(de->d_name, &rank, &mp);

		if (kind == DS_OTHER)
			continue;
		if (kind == DS_EXPERT) {
			d->nexpert++;
			err = keep_name(&d->expert, de->d_name);
			continue;
		}
		if (kind == DS_LAYER) {
			err = mp > 0 ? keep_name(&d->tp_layer, de->d_name)
				     : slot_put(&d->layers, &d->nlayers, rank, de->d_name, dir);
			continue;
		}
		err = mp_slot(d, mp, de->d_name, dir, &ls);
		if (err)
			break;
		if (kind == DS_OPTIM) {
			err = slot_put(&ls->optim, &ls->noptim, rank, de->d_name, dir);
			ls->count_optim++;
		} else if (kind == DS_ZMODEL) {
			err = slot_put(&ls->zmodel, &ls->nzmodel, rank, de->d_name, dir);
			ls->count_zmodel++;
		} else {
			err = keep_name(&ls->mpmodel, de->d_name);
		}
	}
	closedir(dh);
	if (err)
		ds_dir_free(d);
	return err;
}

/* ------------------------------------------------------------ top level */

/* holds_optim(): does directory path hold a *_optim_states.pt file? */
static bool holds_optim(const char *path)
{
	DIR *d = opendir(path);
	const struct dirent *de;
	bool found = false;

	if (!d)
		return false;
	while (!found && (de = readdir(d)) != NULL) {
		uint64_t rank, mp;

		found = classify(de->d_name, &rank, &mp) == 1;
	}
	closedir(d);
	return found;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Tag names listed in a message: control bytes shown as '?', at most this many. */
#define TAGS_LISTED 8

/*
 * only_tag(): dir has no `latest`.  If dir holds rank files itself it is a
 * tag directory (*tag NULL).  Else its subdirectories holding
 * *_optim_states.pt files are its tags: exactly one is used (*tag, to free);
 * several are an error listing them; none leaves *tag NULL (dir is then
 * reported as holding no rank files).
 */
static gfs_err only_tag(const char *dir, char **tag)
{
	char **tags = NULL;
	size_t n = 0, cap = 0;
	char msg[1024];
	size_t used;
	const struct dirent *de;
	bool nomem = false;
	DIR *d;

	*tag = NULL;
	if (holds_optim(dir))
		return GFS_OK;
	d = opendir(dir);
	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		char path[4096];
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path) ||
		    stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || !holds_optim(path))
			continue;
		nomem = !gfs_grow((void **)&tags, &cap, n, sizeof(*tags), 8) ||
			!(tags[n] = gfs_strdup(de->d_name));
		if (nomem)
			break;
		n++;
	}
	closedir(d);
	if (nomem) {
		for (size_t i = 0; i < n; i++)
			free(tags[i]);
		free(tags);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	if (n <= 1) {
		*tag = n ? tags[0] : NULL;
		free(tags);
		return GFS_OK;
	}
	qsort(tags, n, sizeof(*tags), cmp_str);
	used = 0;
	for (size_t i = 0; i < n && i < TAGS_LISTED && used < sizeof(msg); i++) {
		used += (size_t)snprintf(msg + used, sizeof(msg) - used, "%s%s", i ? ", " : "",
					 tags[i]);
	}
	if (n > TAGS_LISTED && used < sizeof(msg))
		snprintf(msg + used, sizeof(msg) - used, ", ... (%zu in all)", n);
	for (char *c = msg; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	for (size_t i = 0; i < n; i++)
		free(tags[i]);
	free(tags);
	return gfs_fail(GFS_ERR_INVAL,
			"%s: no `latest` file and %zu tag directories (%s): choose one with --tag (mount: -o tag=)",
			dir, n, msg);
}

gfs_err ds_resolve_tagdir(const char *dir, const char *tag, char **tagdir, char **root,
			  char **note)
{
	char path[4096];
	char buf[512];
	char *only = NULL;
	struct stat st;
	ssize_t n;
	int fd;

	*note = NULL;
	if (stat(dir, &st) != 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: %s", dir,
				strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return gfs_fail(GFS_ERR_INVAL, "%s: not a directory", dir);
	*root = gfs_strdup(dir);
	if (!*root)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!tag) {
		snprintf(path, sizeof(path), "%s/latest", dir);
		gfs_err oerr = gfs_open_regular(path, 0, &fd, NULL);

		if (oerr && oerr != GFS_ERR_NOTFOUND)
			return oerr;
		if (oerr) {
			/* No `latest`: DIR is the tag directory, or holds only one. */
			gfs_err err = only_tag(dir, &only);

			if (err)
				return err;
			if (!only) {
				*tagdir = gfs_strdup(dir);
				return *tagdir ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
			}
			snprintf(buf, sizeof(buf), "%s", only);
			free(only);
			n = (ssize_t)strlen(buf);
			if (snprintf(path, sizeof(path), "%s has no `latest` file: using its only tag directory, %s",
				     dir, buf) >= (int)sizeof(path))
				path[sizeof(path) - 1] = '\0';
			for (char *c = path; *c; c++)
				if ((unsigned char)*c < 0x20 || *c == 0x7f)
					*c = '?';
			*note = gfs_strdup(path);
			if (!*note)
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		} else {
			n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
			if (n < 0)
				return gfs_fail(GFS_ERR_IO, "%s: %s", path, strerror(errno));
			buf[n] = '\0';
		}
		while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
				 buf[n - 1] == '\t'))
			buf[--n] = '\0';
		if (n == 0 || strchr(buf, '/') || strcmp(buf, "..") == 0 || strlen(buf) != (size_t)n)
			return gfs_fail(GFS_ERR_FORMAT, "%s: does not hold a valid tag name", path);
		tag = buf;
	} else if (strchr(tag, '/') || strcmp(tag, "..") == 0 || !*tag) {
		return gfs_fail(GFS_ERR_INVAL, "invalid tag '%s'", tag);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, tag);
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return gfs_fail(GFS_ERR_NOTFOUND, "%s: tag directory '%s' not found", dir, tag);
	*tagdir = gfs_strdup(path);
	return *tagdir ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

/*
 * The files of the ranks, opened in parallel (gfs_pfor()).  ZeRO-3 model
 * states files: rank 0's is read alongside the others, which wait for it
 * (m0_done) before they use it; gfs_pfor() takes index 0 first, so some
 * thread always has it.
 */
typedef struct open_job {
	ds_ckpt *c;
	const ds_listing *ls;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool m0_done;
	bool m0_ok;
} open_job;

/*
 * open_optim(): optimizer states file of rank i, if found: its ZeRO stage,
 * optimizer and partition_count, compared across ranks by vote_optim().
 */
static gfs_err open_optim(void *ctx, size_t i)
{
	const open_job *j = ctx;
	ds_file *f = &j->c->optim[i];
	gfs_err err;

	if (!j->ls->optim[i])
		return GFS_OK;
	err = ds_file_open(f, j->c->tagdir, j->ls->optim[i]);
	if (!err && !ds_osd_of(f))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: no optimizer_state_dict", f->path);
	if (!err)
		err = ds_read_stage(j->c, f, ds_osd_of(f), &f->stage, &f->bf16opt);
	if (!err)
		err = ds_read_ws(f, ds_osd_of(f), &f->ws);
	return err;
}

/* The ZeRO stage, optimizer and world size an optimizer states file says. */
typedef struct ds_sig {
	uint64_t ws;
	int stage;
	bool bf16opt;
} ds_sig;

static ds_sig sig_of(const ds_file *f)
{
	return (ds_sig){ .ws = f->ws, .stage = f->stage, .bf16opt = f->bf16opt };
}

static int sig_cmp(const void *a, const void *b)
{
	const ds_sig *x = a, *y = b;

	if (x->ws != y->ws)
		return x->ws < y->ws ? -1 : 1;
	if (x->stage != y->stage)
		return x->stage < y->stage ? -1 : 1;
	return (int)x->bf16opt - (int)y->bf16opt;
}

/* sig_phrase(): "ZeRO stage 2", "BF16_Optimizer". */
static const char *sig_phrase(const ds_sig *s, char *buf, size_t n)
{
	if (s->bf16opt)
		snprintf(buf, n, "BF16_Optimizer");
	else
		snprintf(buf, n, "ZeRO stage %d", s->stage);
	return buf;
}

/*
 * sig_better(): does a run of run files saying cand beat best_run saying
 * best?  More files win; then a world size equal to count, the files
 * found; then what rank 0 (r0, NULL if absent) says.
 */
static bool sig_better(const ds_sig *cand, size_t run, const ds_sig *best, size_t best_run,
		       size_t count, const ds_sig *r0)
{
	if (run != best_run)
		return run > best_run;
	if ((cand->ws == count) != (best->ws == count))
		return cand->ws == count;
	return r0 && sig_cmp(cand, r0) == 0;
}

/*
 * vote_optim(): the stage and world size of the checkpoint: what most of
 * the count optimizer states files found say (a tie goes to a world size
 * equal to count, then to rank 0's).  A file that says otherwise is from
 * another checkpoint: refused, named.
 */
static gfs_err vote_optim(ds_ckpt *c, const ds_listing *ls, size_t count)
{
	ds_sig *all = malloc(count * sizeof(*all));
	const ds_sig r0 = sig_of(&c->optim[0]);
	ds_sig best = { 0 };
	const ds_file *ref = NULL;
	size_t n = 0, best_run = 0;

	if (!all)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t r = 0; r < c->noptim; r++)
		if (ls->optim[r])
			all[n++] = sig_of(&c->optim[r]);
	assert(n == count && n > 0);
	qsort(all, n, sizeof(*all), sig_cmp);
	for (size_t i = 0, run; i < n; i += run) {
		for (run = 1; i + run < n && sig_cmp(&all[i], &all[i + run]) == 0; run++)
			;
		if (sig_better(&all[i], run, &best, best_run, count, ls->optim[0] ? &r0 : NULL)) {
			best = all[i];
			best_run = run;
		}
	}
	free(all);
	for (size_t r = 0; r < c->noptim && !ref; r++) {
		const ds_sig s = sig_of(&c->optim[r]);

		if (ls->optim[r] && sig_cmp(&s, &best) == 0)
			ref = &c->optim[r];
	}
	assert(ref);
	for (size_t r = 0; r < c->noptim; r++) {
		const ds_file *f = &c->optim[r];
		const ds_sig s = sig_of(f);
		char a[32], b[32];

		if (!ls->optim[r] || sig_cmp(&s, &best) == 0)
			continue;
		if (s.ws != best.ws)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: its partition_count says world size %llu, but %s says %llu (%zu optimizer states files found): a rank file from a checkpoint of another world size",
					f->path, (unsigned long long)s.ws, ref->name,
					(unsigned long long)best.ws, count);
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: written with %s, but %s with %s: a rank file from another checkpoint",
				f->path, sig_phrase(&s, a, sizeof(a)), ref->name,
				sig_phrase(&best, b, sizeof(b)));
	}
	c->ws = best.ws;
	c->stage = best.stage;
	c->bf16_optimizer = best.bf16opt;
	return GFS_OK;
}

/*
 * ws_check(): the model states file f, read, records the world size the
 * optimizer states files say (dp_world_size; not checked if absent).
 */
static gfs_err ws_check(const ds_ckpt *c, const ds_file *f)
{
	const gfs_pv *v = gfs_pv_dict_get(f->root, "dp_world_size");
	int64_t n;

	if (!v)
		return GFS_OK;
	if (!gfs_pv_int(v, &n)) {
		char kind[32];

		return gfs_fail(GFS_ERR_FORMAT, "%s: dp_world_size is %s, not an integer", f->path,
				ds_kind_phrase(v, kind, sizeof(kind)));
	}
	if (n < 0 || (uint64_t)n != c->ws)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: dp_world_size is %lld, but the optimizer states files say %llu: a file from a checkpoint of another world size",
				f->path, (long long)n, (unsigned long long)c->ws);
	return GFS_OK;
}

/* open_model(): ZeRO-3 model states file of rank r. */
static gfs_err open_model(void *ctx, size_t r)
{
	open_job *j = ctx;
	ds_ckpt *c = j->c;
	bool m0_ok;
	gfs_err err;

	if (r >= j->ls->nzmodel || !j->ls->zmodel[r])
		err = gfs_fail(GFS_ERR_NOTFOUND,
			       "%s: model states file of rank %zu (of %llu) is missing",
			       c->tagdir, r, (unsigned long long)c->ws);
	else if (r == 0)
		err = ds_file_open(&c->model[r], c->tagdir, j->ls->zmodel[r]);
	else
		err = ds_file_stat(&c->model[r], c->tagdir, j->ls->zmodel[r]);
	(void)pthread_mutex_lock(&j->mu);
	if (r == 0) {
		j->m0_done = true;
		j->m0_ok = !err;
		(void)pthread_cond_broadcast(&j->cv);
	}
	while (!j->m0_done)
		(void)pthread_cond_wait(&j->cv, &j->mu);
	m0_ok = j->m0_ok;
	(void)pthread_mutex_unlock(&j->mu);
	if (r == 0 || err)
		return err;
	/* only frozen params are read from the other ranks' files (names,
	 * shapes, buffers and aliases come from rank 0's, as in
	 * zero_to_fp32): without frozen params their pickles are not parsed
	 * (a ZeRO-3 rank's holds param_shapes and a placeholder for every
	 * param: most of the import's time at scale); with them their
	 * fragments are located, then each file is freed at once, so the
	 * import holds a few ranks' pickles (one per thread), not ws of them */
	if (m0_ok && ds_has_frozen(&c->model[0])) {
		err = ds_file_read(&c->model[r]);
		if (!err)
			err = ws_check(c, &c->model[r]);
		if (!err)
			err = ds_frags_read(&c->model[r],
					 gfs_pv_dict_get(c->model[0].root, "frozen_param_shapes"));
	} else {
		err = ds_name_peek(&c->model[r]);
	}
	ds_file_release(&c->model[r]);
	return err;
}

gfs_err ds_open_files(ds_ckpt *c, const ds_listing *ls)
{
	gfs_err err;

	if (ls->count_optim == 0)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: not a DeepSpeed ZeRO checkpoint: no *_optim_states.pt files",
				c->tagdir);
	c->optim = calloc(ls->noptim, sizeof(*c->optim));
	if (!c->optim)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->noptim = ls->noptim;
	for (size_t r = 0; r < ls->noptim; r++)
		c->optim[r].fd = -1;
	err = gfs_pfor(ls->noptim, open_optim, &(open_job){ .c = c, .ls = ls });
	if (!err)
		err = vote_optim(c, ls, ls->count_optim);
	if (err)
		return err;
	if (ls->noptim > c->ws)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: found %s for rank %zu, but the rank files say the world size is %llu (a shard from another world size?)",
				c->tagdir, ls->optim[ls->noptim - 1], ls->noptim - 1,
				(unsigned long long)c->ws);
	for (size_t r = 0; r < c->ws; r++)
		if (r >= ls->noptim || !ls->optim[r])
			return gfs_fail(GFS_ERR_NOTFOUND,
					"%s: optimizer states file of rank %zu (of %llu) is missing",
					c->tagdir, r, (unsigned long long)c->ws);
	if (c->stage == 3) {
		if (ls->nzmodel > c->ws)
			return gfs_fail(GFS_ERR_FORMAT, "%s: model states file %s is beyond world size %llu",
					c->tagdir, ls->zmodel[ls->nzmodel - 1], (unsigned long long)c->ws);
		c->model = calloc((size_t)c->ws, sizeof(*c->model));
		if (!c->model)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		for (uint64_t r = 0; r < c->ws; r++)
			c->model[r].fd = -1;
		c->nmodel = (size_t)c->ws;
		open_job j = { .c = c, .ls = ls };

		(void)pthread_mutex_init(&j.mu, NULL);
		(void)pthread_cond_init(&j.cv, NULL);
		err = gfs_pfor((size_t)c->ws, open_model, &j);
		(void)pthread_cond_destroy(&j.cv);
		(void)pthread_mutex_destroy(&j.mu);
		if (err)
			return err;
	} else {
		const char *name = ls->mpmodel ? ls->mpmodel : (ls->nzmodel ? ls->zmodel[0] : NULL);

		if (!name)
			return gfs_fail(GFS_ERR_NOTFOUND, "%s: mp_rank_00_model_states.pt is missing",
					c->tagdir);
		c->model = calloc(1, sizeof(*c->model));
		if (!c->model)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		c->model[0].fd = -1;
		c->nmodel = 1;
		err = ds_file_open(&c->model[0], c->tagdir, name);
		if (err)
			return err;
	}
	return ws_check(c, &c->model[0]);
}

gfs_err ds_moe_plain_open(ds_ckpt *c, const ds_listing *ls)
{
	if (!ls->mpmodel)
		return gfs_fail(GFS_ERR_NOTFOUND, "%s/mp_rank_00_model_states.pt is missing", c->tagdir);
	c->model = calloc(1, sizeof(*c->model));
	if (!c->model)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	c->model[0].fd = -1;
	c->nmodel = 1;
	return ds_file_open(&c->model[0], c->tagdir, ls->mpmodel);
}

gfs_err ds_anon_note(const ds_ckpt *c, char **note)
{
	const ds_file *first = NULL;
	size_t n = 0;
	char buf[8192];
	char *s;

	for (size_t r = 0; r < c->noptim + c->nmodel; r++) {
		const ds_file *f = r < c->noptim ? &c->optim[r] : &c->model[r - c->noptim];

		if (f->anonymous && n++ == 0)
			first = f;
	}
	if (n == 0)
		return GFS_OK;
	snprintf(buf, sizeof(buf),
		 "%s%s%zu of the %zu rank files (%s%s) %s the zip folder archive/ (torch.save to a file object), not %s: a copied or renamed one cannot be told from the rank its name says",
		 *note ? *note : "", *note ? "; " : "", n, c->noptim + c->nmodel, first->name,
		 n > 1 ? ", ..." : "", n > 1 ? "have" : "has", n > 1 ? "their names" : "its name");
	s = gfs_strdup(buf);
	if (!s)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	free(*note);
	*note = s;
	return GFS_OK;
}
