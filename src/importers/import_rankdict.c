/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — per-rank state dicts: FSDP2 DTensors, FSDP1 ShardedTensors and
 * 1-rank plain tensors, saved one torch zip per rank (import_rankdict.h).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/import_rankdict.h"
#include "gatherfs/readers/pickle.h"
#include "gatherfs/readers/torchfile.h"
#include "gatherfs/util/json.h"
#include "gatherfs/util/pfor.h"

#define RD_MAX_PICKLE ((uint64_t)1 << 30)
#define RD_MAX_CONFIG ((uint64_t)1 << 16)
#define RD_MAX_PIECES ((uint64_t)1 << 20) /* pieces of one tensor */
#define RD_MAX_PAIRS 4096 /* parts of a tensor checked pairwise for overlaps by name */
#define RD_LATEST "latest_checkpointed_iteration.txt"
#define RD_PREFIX "model_world_size_"

typedef enum rd_kind { RD_PLAIN, RD_DTENSOR, RD_STENSOR } rd_kind;

/* How a local tensor views its storage: two keys alike on every rank are tied. */
typedef struct rd_view {
	bool set;         /* false: none (no single local tensor on this rank) */
	char key[32];     /* storage record key */
	int64_t offset;
	uint32_t ndim;
	int64_t size[GFS_PV_MAX_DIMS], stride[GFS_PV_MAX_DIMS];
} rd_view;

/* One box of a tensor: its bytes, C-contiguous at off of source src. */
typedef struct rd_part {
	uint32_t src;
	uint32_t rank;
	bool replica;   /* a Replicate coordinate other than 0: compared by verify, not served */
	uint64_t off;
	int64_t lo[GFS_PV_MAX_DIMS];
	int64_t n[GFS_PV_MAX_DIMS];
} rd_part;

typedef struct rd_key {
	char *name;     /* the key; of an optimizer state, its parameter's name */
	char *state;    /* of an optimizer state ("exp_avg", "step"...), else NULL */
	rd_kind kind;
	gfs_dtype dtype;
	uint32_t ndim;
	int64_t shape[GFS_PV_MAX_DIMS];
	uint32_t mesh_ndim;
	int64_t mesh[GFS_PV_MAX_MESH];
	gfs_placement pl[GFS_PV_MAX_MESH];
	rd_part *parts;
	size_t nparts, cap;
	int64_t tied;  /* index of the earlier key it is tied to on every rank so far, or -1 */
	rd_view view;  /* this rank's view (reset per rank) */
} rd_key;

typedef struct rd_import {
	gfs_layout *l;
	const char *dir;
	char **names;    /* [world]: the rank files */
	uint32_t world;
	rd_key *keys;
	size_t nkeys;
	rd_key *okeys;   /* optimizer states, in the rank 0 file's order */
	size_t nokeys, cap_okeys;
	const char **params; /* [nparams]: the i-th unique parameter (model keys not tied) */
	size_t nparams;
	int64_t *coords; /* [world * GFS_PV_MAX_MESH]: each rank's mesh coordinate */
	bool *has_coord;
	uint32_t mesh_ndim;
	int64_t mesh[GFS_PV_MAX_MESH];
	bool any_dtensor, any_stensor;
	uint64_t fsdp_version; /* fsdp_config.json's FSDP_version, 0 without one */
} rd_import;

static bool is_dir(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	return (size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) < sizeof(path) &&
	       stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/*
 * parse_num(): the decimal number (1 to 9 digits) at *s, advancing *s.
 * @return false if there is none.
 */
static bool parse_num(const char **s, uint32_t *out)
{
	uint32_t v = 0;
	int n = 0;

	while (**s >= '0' && **s <= '9' && n < 9) {
		v = v * 10 + (uint32_t)(**s - '0');
		(*s)++;
		n++;
	}
	*out = v;
	return n > 0 && !(**s >= '0' && **s <= '9');
}

/* rank_name(): is name model_world_size_W_rank_R.pt?  Sets *w and *r. */
static bool rank_name(const char *name, uint32_t *w, uint32_t *r)
{
	const char *s = name;

	if (strncmp(s, RD_PREFIX, strlen(RD_PREFIX)) != 0)
		return false;
	s += strlen(RD_PREFIX);
	if (!parse_num(&s, w) || strncmp(s, "_rank_", 6) != 0)
		return false;
	s += 6;
	return parse_num(&s, r) && strcmp(s, ".pt") == 0;
}

/* holds_ranks(): does directory dir hold a rank file? */
static bool holds_ranks(const char *dir)
{
	DIR *d = opendir(dir);
	const struct dirent *de;
	bool found = false;
	uint32_t w, r;

	if (!d)
		return false;
	while (!found && (de = readdir(d)))
		found = rank_name(de->d_name, &w, &r);
	closedir(d);
	return found;
}

/* sub_ranks(): does dir/name hold rank files? */
static bool sub_ranks(const char *dir, const char *name)
{
	char path[PATH_MAX];

	return (size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) < sizeof(path) &&
	       holds_ranks(path);
}

/*
 * latest_step(): the global_step_N directory name that dir's
 * latest_checkpointed_iteration.txt names into buf; false if the file is
 * absent or holds no number.  When err is not NULL, *err is the error of a
 * tracker file that is there but cannot be read as one (a FIFO, a
 * directory, too long), GFS_OK otherwise.
 */
static bool latest_step(const char *dir, char *buf, size_t n, gfs_err *err)
{
	char path[PATH_MAX], *line = NULL;
	const char *s;
	uint32_t v;
	size_t len;
	bool ok;
	gfs_err rerr;

	if (err)
		*err = GFS_OK;
	if ((size_t)snprintf(path, sizeof(path), "%s/" RD_LATEST, dir) >= sizeof(path))
		return false;
	rerr = gfs_read_meta(path, 31, 0, &line, &len);
	if (rerr) {
		if (err && rerr != GFS_ERR_NOTFOUND)
			*err = rerr;
		return false;
	}
	ok = strlen(line) == len; /* a NUL inside holds no number */
	while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
		line[--len] = '\0';
	s = line;
	ok = ok && parse_num(&s, &v) && !*s;
	free(line);
	if (ok)
		snprintf(buf, n, "global_step_%u", v);
	return ok;
}

/* step_match(): a verl step directory with rank files (a gfs_dir_matches() match). */
static bool step_match(const char *path, const char *name)
{
	return strncmp(name, "global_step_", 12) == 0 &&
	       (sub_ranks(path, "actor") || sub_ranks(path, "critic"));
}

/*
 * only_steps(): how many global_step_* directories of dir hold actor/ or
 * critic/ rank files; the first one's name in first (nf bytes), their
 * names, comma-separated, in list (n bytes, cut short with "...").
 */
static size_t only_steps(const char *dir, char *first, size_t nf, char *list, size_t n)
{
	return gfs_dir_matches(dir, step_match, first, nf, list, n);
}

/* has_steps(): does dir hold a global_step_* directory? */
static bool has_steps(const char *dir)
{
	DIR *d = opendir(dir);
	const struct dirent *de;
	bool found = false;

	if (!d)
		return false;
	while (!found && (de = readdir(d)))
		found = strncmp(de->d_name, "global_step_", 12) == 0 && is_dir(dir, de->d_name);
	closedir(d);
	return found;
}

bool gfs_rankdict_detect(const char *dir)
{
	char step[64];

	char list[8];

	return holds_ranks(dir) || sub_ranks(dir, "actor") || sub_ranks(dir, "critic") ||
	       (latest_step(dir, step, sizeof(step), NULL) && has_steps(dir)) ||
	       only_steps(dir, step, sizeof(step), list, sizeof(list)) > 0;
}

/* valid_tag(): a plain directory name. */
static bool valid_tag(const char *t)
{
	return t[0] && strcmp(t, ".") != 0 && strcmp(t, "..") != 0 && !strchr(t, '/');
}

/*
 * rank_dir(): the directory holding the rank files, for dir and tag, into
 * buf; *only: the step directory is the only one of a save directory
 * without the tracker file.
 */
static gfs_err rank_dir(const char *dir, const char *tag, char *buf, size_t n, bool *via_latest,
		       bool *only)
{
	char step[64], sdir[PATH_MAX];

	*via_latest = *only = false;
	if (holds_ranks(dir)) {
		if (tag)
			return gfs_fail(GFS_ERR_INVAL,
					"%s: holds the rank files itself: a tag picks a role directory (actor, critic) of a global_step_N directory",
					dir);
		snprintf(buf, n, "%s", dir);
		return GFS_OK;
	}
	snprintf(sdir, sizeof(sdir), "%s", dir);
	if (!sub_ranks(dir, "actor") && !sub_ranks(dir, "critic") && (!tag || !sub_ranks(dir, tag))) {
		char list[512];
		size_t count = 0;
		gfs_err lerr;
		const bool named = latest_step(dir, step, sizeof(step), &lerr);

		if (lerr)
			return lerr;
		if (!named &&
		    (count = only_steps(dir, step, sizeof(step), list, sizeof(list))) != 1)
			return count > 1 ? gfs_fail(GFS_ERR_NOTFOUND,
						    "%s: no " RD_LATEST " and %zu step directories (%s): mount one of them",
						    dir, count, list)
					 : gfs_fail(GFS_ERR_NOTFOUND,
						    "%s: no " RD_PREFIX "W_rank_R.pt file, actor/ or critic/ directory, or " RD_LATEST " naming a step",
						    dir);
		*only = count == 1;
		if ((size_t)snprintf(sdir, sizeof(sdir), "%s/%s", dir, step) >= sizeof(sdir))
			return gfs_fail(GFS_ERR_INVAL, "%s: path too long", dir);
		if (!is_dir(dir, step))
			return gfs_fail(GFS_ERR_NOTFOUND, "%s: no directory %s (the step " RD_LATEST " names)",
					dir, step);
		*via_latest = true;
	}
	if (tag && !valid_tag(tag))
		return gfs_fail(GFS_ERR_INVAL, "tag '%s': not a directory name (actor, critic...)", tag);
	if ((size_t)snprintf(buf, n, "%s/%s", sdir, tag ? tag : "actor") >= n)
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", sdir);
	if (!holds_ranks(buf))
		return gfs_fail(GFS_ERR_NOTFOUND, "%s: no " RD_PREFIX "W_rank_R.pt file in it", buf);
	return GFS_OK;
}

/*
 * list_ranks(): the world size and the file name of each rank: every rank
 * below W once, one W among the names.  *names is [W] (caller frees each).
 */
static gfs_err list_ranks(const char *dir, uint32_t *world, char ***names)
{
	DIR *d = opendir(dir);
	const struct dirent *de;
	char **nm = NULL;
	char *first = NULL;
	uint32_t w0 = 0;
	gfs_err err = GFS_OK;

	*names = NULL;
	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: %s", dir, strerror(errno));
	while (!err && (de = readdir(d))) {
		uint32_t w, r;

		if (!rank_name(de->d_name, &w, &r))
			continue;
		if (!first) {
			if (w < 1 || w > GFS_RD_MAX_RANKS) {
				err = gfs_fail(GFS_ERR_FORMAT, "%s/%s: world size %u (1 to %d)", dir,
					       de->d_name, w, GFS_RD_MAX_RANKS);
				break;
			}
			w0 = w;
			first = gfs_strdup(de->d_name);
			nm = gfs_calloc(w, sizeof(*nm));
			if (!first || !nm) {
				err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
				break;
			}
		}
		if (w != w0) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s/%s: world size %u, but %s says %u: ranks of two saves",
				       dir, de->d_name, w, first, w0);
		} else if (r >= w) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s/%s: rank %u of a world of %u", dir, de->d_name,
				       r, w);
		} else if (nm[r]) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s/%s: rank %u twice (also %s)", dir, de->d_name,
				       r, nm[r]);
		} else if (!(nm[r] = gfs_strdup(de->d_name))) {
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
	}
	closedir(d);
	free(first);
	for (uint32_t r = 0; !err && r < w0; r++)
		if (!nm[r])
			err = gfs_fail(GFS_ERR_NOTFOUND, "%s/" RD_PREFIX "%u_rank_%u.pt: missing (rank %u of %u)",
				       dir, w0, r, r, w0);
	if (!err && !nm)
		err = gfs_fail(GFS_ERR_NOTFOUND, "%s: no " RD_PREFIX "W_rank_R.pt file", dir);
	if (err) {
		for (uint32_t r = 0; nm && r < w0; r++)
			free(nm[r]);
		free(nm);
		return err;
	}
	*world = w0;
	*names = nm;
	return GFS_OK;
}

/*
 * check_config(): fsdp_config.json, when present, names world size W;
 * *version is its FSDP_version (1: FSDP1, whose optimizer files hold
 * flat-parameter shards even when the model's values are DTensors, as with
 * verl's device_mesh), 0 without one.
 */
static gfs_err check_config(const char *dir, uint32_t world, uint64_t *version)
{
	char path[PATH_MAX];
	char *buf = NULL;
	cJSON *j = NULL;
	uint64_t ws = 0;
	size_t len;
	gfs_err err;

	*version = 0;
	if ((size_t)snprintf(path, sizeof(path), "%s/fsdp_config.json", dir) >= sizeof(path))
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", dir);
	err = gfs_read_meta(path, RD_MAX_CONFIG - 1, 0, &buf, &len);
	if (err)
		return err == GFS_ERR_NOTFOUND ? GFS_OK : err;
	err = gfs_json_parse(buf, len, path, &j);
	free(buf);
	if (!err && gfs_json_get(j, "world_size"))
		err = gfs_json_u64(gfs_json_get(j, "world_size"), path, "world_size", &ws);
	if (!err && gfs_json_get(j, "world_size") && ws != world)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: world_size %llu, but the rank files are of a world of %u",
			       path, (unsigned long long)ws, world);
	if (!err && gfs_json_get(j, "FSDP_version"))
		err = gfs_json_u64(gfs_json_get(j, "FSDP_version"), path, "FSDP_version", version);
	cJSON_Delete(j);
	return err;
}

/*
 * local_bytes(): where the C-contiguous local tensor t of n[] elements per
 * dimension lies: *off in the file; registers its storage record.  Its dtype
 * must be dt.
 */
static gfs_err local_bytes(rd_import *ri, const gfs_tzip *zip, uint32_t src, const char *path,
			   const char *key, const gfs_pv_tensor *t, gfs_dtype dt, const int64_t *n,
			   uint32_t ndim, uint64_t *off)
{
	const gfs_dtype tdt = t->dtype ? gfs_dtype_parse(t->dtype)
				       : gfs_dtype_from_storage_class(t->storage.cls);
	const uint64_t esize = gfs_dtype_size(dt);
	const gfs_tzip_record *zr;
	uint64_t want = 1, first, nbytes;
	gfs_err err;

	if (tdt != dt)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: its local shard is %s, the tensor %s", path, key,
				tdt == GFS_DT_INVALID ? "of an unknown dtype" : gfs_dtype_name(tdt),
				gfs_dtype_name(dt));
	if (t->ndim != ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: its local shard has %u dimensions, the tensor %u",
				path, key, t->ndim, ndim);
	for (uint32_t d = ndim; d-- > 0;) {
		if (t->size[d] != n[d])
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: its local shard has %lld elements on dim %u, its placement says %lld",
					path, key, (long long)t->size[d], d, (long long)n[d]);
		if (t->size[d] > 1 && t->stride[d] != (int64_t)want)
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: its local shard is not contiguous",
					path, key);
		if (!gfs_mul_u64(want, (uint64_t)t->size[d], &want))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: size overflows", path, key);
	}
	if (!gfs_mul_u64(want, esize, &nbytes) || !gfs_mul_u64((uint64_t)t->offset, esize, &first))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: size overflows", path, key);
	if (nbytes == 0) {
		*off = 0;
		return GFS_OK;
	}
	err = gfs_tzip_storage_record(zip, t->storage.key, &zr);
	if (err)
		return gfs_fail_prefix(err, "%s: %s", path, key);
	if (first > zr->size || nbytes > zr->size - first)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s reaches past its storage record: truncated or corrupt",
				path, key);
	*off = zr->data_off + first;
	{
		const gfs_record rec = { .src = src, .kind = GFS_PIECE_FILE, .off = zr->data_off,
					 .len = zr->size, .crc32 = zr->crc32 };

		return gfs_layout_add_record(ri->l, &rec, zr->name);
	}
}

/* add_part(): append a box of key k. */
static gfs_err add_part(rd_key *k, uint32_t r, uint32_t src, uint64_t off, const int64_t *lo,
		       const int64_t *n, bool replica)
{
	rd_part *p;

	if (!gfs_grow((void **)&k->parts, &k->cap, k->nparts, sizeof(*k->parts), 4))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	p = &k->parts[k->nparts++];
	memset(p, 0, sizeof(*p));
	p->src = src;
	p->rank = r;
	p->replica = replica;
	p->off = off;
	memcpy(p->lo, lo, k->ndim * sizeof(*lo));
	memcpy(p->n, n, k->ndim * sizeof(*n));
	return GFS_OK;
}

/* set_view(): remember how t views its storage, for tie detection. */
static void set_view(rd_key *k, const gfs_pv_tensor *t)
{
	memset(&k->view, 0, sizeof(k->view));
	if (!t || strlen(t->storage.key) >= sizeof(k->view.key))
		return;
	k->view.set = true;
	snprintf(k->view.key, sizeof(k->view.key), "%s", t->storage.key);
	k->view.offset = t->offset;
	k->view.ndim = t->ndim;
	for (uint32_t d = 0; d < t->ndim; d++) {
		k->view.size[d] = t->size[d];
		k->view.stride[d] = t->stride[d];
	}
}

static bool same_view(const rd_view *a, const rd_view *b)
{
	return a->set && b->set && strcmp(a->key, b->key) == 0 && a->offset == b->offset &&
	       a->ndim == b->ndim && memcmp(a->size, b->size, a->ndim * sizeof(*a->size)) == 0 &&
	       memcmp(a->stride, b->stride, a->ndim * sizeof(*a->stride)) == 0;
}

/* same_meta(): keys a and b have the same kind, dtype, shape and placements. */
static bool same_meta(const rd_key *a, const rd_key *b)
{
	if (a->kind != b->kind || a->dtype != b->dtype || a->ndim != b->ndim ||
	    memcmp(a->shape, b->shape, a->ndim * sizeof(*a->shape)) != 0 ||
	    a->mesh_ndim != b->mesh_ndim)
		return false;
	for (uint32_t i = 0; i < a->mesh_ndim; i++)
		if (a->mesh[i] != b->mesh[i] || a->pl[i].kind != b->pl[i].kind ||
		    a->pl[i].dim != b->pl[i].dim)
			return false;
	return true;
}

/* set_meta(): fill (rank 0) or check (other ranks) key k's kind, dtype and shape. */
static gfs_err set_meta(rd_key *k, bool first, const char *path, rd_kind kind, const char *dtname,
			uint32_t ndim, const int64_t *shape)
{
	const gfs_dtype dt = gfs_dtype_parse(dtname);

	if (dt == GFS_DT_INVALID)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: unsupported dtype %s", path, k->name,
				dtname);
	if (first) {
		k->kind = kind;
		k->dtype = dt;
		k->ndim = ndim;
		memcpy(k->shape, shape, ndim * sizeof(*shape));
		return GFS_OK;
	}
	if (k->kind != kind || k->dtype != dt || k->ndim != ndim ||
	    memcmp(k->shape, shape, ndim * sizeof(*shape)) != 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: its kind, dtype or global shape disagrees with rank 0's",
				path, k->name);
	return GFS_OK;
}

/*
 * dtensor_box(): the box of the global tensor the DTensor's local shard
 * holds at its coordinate: each Shard(d) mesh dimension in order cuts dim
 * d as torch.chunk does (ceil(n / m) per coordinate, the last ones shorter
 * or empty).  *keep is false for a replica of a coordinate other than 0 on
 * a Replicate dimension.
 */
static gfs_err dtensor_box(const gfs_pv_dtensor *dt, const char *path, const char *key,
			   int64_t *lo, int64_t *n, bool *keep)
{
	*keep = true;
	for (uint32_t d = 0; d < dt->ndim; d++) {
		lo[d] = 0;
		n[d] = dt->shape[d];
	}
	for (uint32_t i = 0; i < dt->mesh_ndim; i++) {
		const gfs_placement *p = &dt->pl[i];
		int64_t cs, a, b;

		switch (p->kind) {
		case GFS_PL_REPLICATE:
			if (dt->coord[i] != 0)
				*keep = false;
			break;
		case GFS_PL_SHARD:
			cs = (n[p->dim] + dt->mesh[i] - 1) / dt->mesh[i];
			a = cs * dt->coord[i];
			b = a + cs;
			if (a > n[p->dim])
				a = n[p->dim];
			if (b > n[p->dim])
				b = n[p->dim];
			lo[p->dim] += a;
			n[p->dim] = b - a;
			break;
		case GFS_PL_STRIDED:
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: a _StridedShard placement (FSDP2 with tensor parallelism): not supported",
					path, key);
		case GFS_PL_PARTIAL:
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: a Partial placement (unreduced values): cannot be gathered",
					path, key);
		}
	}
	return GFS_OK;
}

/* rank_coord(): record (or check) rank r's mesh coordinate and shape from a DTensor. */
static gfs_err rank_coord(rd_import *ri, uint32_t r, const char *path, const char *key,
			  const gfs_pv_dtensor *dt)
{
	int64_t *c = ri->coords + (size_t)r * GFS_PV_MAX_MESH;

	if (dt->rank >= 0 && dt->rank != (int64_t)r)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: saved by rank %lld, not by rank %u its name gives",
				path, key, (long long)dt->rank, r);
	if (!ri->mesh_ndim) {
		uint64_t prod = 1;

		ri->mesh_ndim = dt->mesh_ndim;
		memcpy(ri->mesh, dt->mesh, dt->mesh_ndim * sizeof(*dt->mesh));
		for (uint32_t i = 0; i < dt->mesh_ndim; i++)
			prod *= (uint64_t)dt->mesh[i];
		if (prod != ri->world)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: a device mesh of %llu ranks in a world of %u",
					path, key, (unsigned long long)prod, ri->world);
	} else if (ri->mesh_ndim != dt->mesh_ndim ||
		   memcmp(ri->mesh, dt->mesh, dt->mesh_ndim * sizeof(*dt->mesh)) != 0) {
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: its device mesh differs from the other tensors'",
				path, key);
	}
	if (!ri->has_coord[r]) {
		for (uint32_t q = 0; q < ri->world; q++)
			if (ri->has_coord[q] &&
			    memcmp(ri->coords + (size_t)q * GFS_PV_MAX_MESH, dt->coord,
				   dt->mesh_ndim * sizeof(*dt->coord)) == 0)
				return gfs_fail(GFS_ERR_FORMAT, "%s: %s: rank %u's mesh coordinate is rank %u's too: a duplicated rank file",
						path, key, r, q);
		memcpy(c, dt->coord, dt->mesh_ndim * sizeof(*dt->coord));
		ri->has_coord[r] = true;
	} else if (memcmp(c, dt->coord, dt->mesh_ndim * sizeof(*dt->coord)) != 0) {
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: its mesh coordinate differs from the file's other tensors'",
				path, key);
	}
	return GFS_OK;
}

/* read_value(): key k's value v on rank r (src in zip). */
static gfs_err read_value(rd_import *ri, uint32_t r, const gfs_tzip *zip, uint32_t src,
			  const char *path, rd_key *k, const gfs_pv *v)
{
	const bool first = r == 0;
	char what[PATH_MAX + 256];
	const char *wc;
	int64_t lo[GFS_PV_MAX_DIMS] = { 0 };
	uint64_t off;
	gfs_err err;

	snprintf(what, sizeof(what), "%s: %s", path, k->name);
	if (v->kind == GFS_PV_TENSOR) {
		const gfs_pv_tensor *t = v->u.tensor;
		const char *dn = t->dtype ? t->dtype
					  : gfs_dtype_name(gfs_dtype_from_storage_class(t->storage.cls));
		int64_t n[GFS_PV_MAX_DIMS] = { 0 };

		for (uint32_t d = 0; d < t->ndim; d++)
			n[d] = t->size[d];
		err = set_meta(k, first, path, RD_PLAIN, dn ? dn : "?", t->ndim, n);
		if (err || !first)
			return err;
		set_view(k, t);
		err = local_bytes(ri, zip, src, path, k->name, t, k->dtype, n, t->ndim, &off);
		return err ? err : add_part(k, r, src, off, lo, n, false);
	}
	wc = gfs_pv_wrapper_class(v, NULL);
	if (wc && strcmp(wc, "DTensor") == 0) {
		gfs_pv_dtensor dt;
		int64_t n[GFS_PV_MAX_DIMS];
		bool keep;

		err = gfs_pv_read_dtensor(v, what, &dt);
		if (!err)
			err = set_meta(k, first, path, RD_DTENSOR, dt.dtype, dt.ndim, dt.shape);
		if (err)
			return err;
		if (first) {
			k->mesh_ndim = dt.mesh_ndim;
			memcpy(k->mesh, dt.mesh, sizeof(k->mesh));
			memcpy(k->pl, dt.pl, sizeof(k->pl));
		} else {
			rd_key o = *k;

			o.mesh_ndim = dt.mesh_ndim;
			memcpy(o.mesh, dt.mesh, sizeof(o.mesh));
			memcpy(o.pl, dt.pl, sizeof(o.pl));
			if (!same_meta(k, &o))
				return gfs_fail(GFS_ERR_FORMAT, "%s: its placements or mesh disagree with rank 0's",
						what);
		}
		ri->any_dtensor = true;
		err = rank_coord(ri, r, path, k->name, &dt);
		if (!err)
			err = dtensor_box(&dt, path, k->name, lo, n, &keep);
		if (err)
			return err;
		set_view(k, dt.local);
		err = local_bytes(ri, zip, src, path, k->name, dt.local, k->dtype, n, k->ndim, &off);
		return err ? err : add_part(k, r, src, off, lo, n, !keep);
	}
	if (wc && strcmp(wc, "ShardedTensor") == 0) {
		gfs_pv_stensor *st = gfs_calloc(1, sizeof(*st));

		if (!st)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		err = gfs_pv_read_stensor(v, what, st);
		if (!err)
			err = set_meta(k, first, path, RD_STENSOR, st->dtype, st->ndim, st->shape);
		ri->any_stensor = true;
		set_view(k, st->nlocal == 1 ? st->local[0].t : NULL);
		for (size_t i = 0; !err && i < st->nlocal; i++) {
			const gfs_pv_lshard *ls = &st->local[i];

			if (ls->rank >= 0 && ls->rank != (int64_t)r)
				err = gfs_fail(GFS_ERR_FORMAT, "%s: a local shard placed on rank %lld, not on rank %u its name gives",
					       what, (long long)ls->rank, r);
			if (!err)
				err = local_bytes(ri, zip, src, path, k->name, ls->t, k->dtype, ls->size,
						  k->ndim, &off);
			if (!err)
				err = add_part(k, r, src, off, ls->off, ls->size, false);
		}
		free(st);
		return err;
	}
	return gfs_fail(GFS_ERR_FORMAT, "%s: %s, not a tensor, DTensor or ShardedTensor", what,
			wc ? wc : gfs_pv_kind_name(v->kind));
}

/* skipped(): a key that is no tensor by design (TransformerEngine's _extra_state). */
static bool skipped(const char *key)
{
	const size_t n = strlen(key);

	return n >= 12 && strcmp(key + n - 12, "_extra_state") == 0;
}

/*
 * Rank files are opened and their pickles parsed RD_AHEAD at a time on up to
 * RD_OPEN_THREADS threads (gfs_torch_open() does all of a file's reads:
 * its directory, every local header, data.pkl), the next batch while the
 * calling thread reads the current one's values into the layout: a cold
 * checkpoint of 1,024 rank files has their reads in flight together
 * instead of one file's at a time.  The layout is built in rank order, so
 * errors are the ones a serial read would report.  At most 2 * RD_AHEAD
 * parsed pickles are held (about 1 MiB each for a 291-tensor verl rank
 * file: 32 ahead made the peak RSS of a 1,024-rank import 187 MiB cold
 * instead of 174 for 16 and 154 for none, for 2.9 s instead of 3.1-3.2).
 */
enum { RD_AHEAD = 16, RD_OPEN_THREADS = 16 };

/* A rank file as gfs_torch_open() left it, and its error's message. */
typedef struct rd_file {
	int fd;
	uint64_t size;
	gfs_tzip *zip;
	gfs_pickle *pk;
	gfs_err err;
	char msg[GFS_ERRMSG_MAX];
} rd_file;

/* Rank files [first, first + n): model files, or optimizer files (names NULL). */
typedef struct rd_batch {
	const char *dir;
	char *const *names; /* the model files' names, all ranks'; NULL: optimizer files */
	uint32_t first, n;
	char onames[RD_AHEAD][96];
	rd_file files[RD_AHEAD];
	pthread_t tid;
	bool threaded;
} rd_batch;

/* batch_name(): the name of file i of b. */
static const char *batch_name(const rd_batch *b, uint32_t i)
{
	return b->names ? b->names[b->first + i] : b->onames[i];
}

/* open_one(): file i of b opened and parsed (a gfs_pfor() body; errors kept in the file). */
static gfs_err open_one(void *ctx, size_t i)
{
	rd_batch *b = ctx;
	rd_file *f = &b->files[i];
	char path[PATH_MAX];

	*f = (rd_file){ .fd = -1 };
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", b->dir, batch_name(b, (uint32_t)i)) >=
	    sizeof(path))
		f->err = gfs_fail(GFS_ERR_INVAL, "%s: path too long", b->dir);
	else
		f->err = gfs_torch_open(path, RD_MAX_PICKLE, "a state dict", &f->fd, &f->size,
					&f->zip, &f->pk);
	if (f->err)
		snprintf(f->msg, sizeof(f->msg), "%s", gfs_errmsg());
	return GFS_OK;
}

static void *open_batch(void *arg)
{
	rd_batch *b = arg;

	(void)gfs_pfor_threads(b->n, RD_OPEN_THREADS, open_one, b);
	return NULL;
}

/* batch_start(): start opening b's files from first on (on a thread of its own if one starts). */
static void batch_start(rd_batch *b, const rd_import *ri, bool optim, uint32_t first)
{
	b->dir = ri->dir;
	b->names = optim ? NULL : ri->names;
	b->first = first;
	b->n = ri->world - first < RD_AHEAD ? ri->world - first : RD_AHEAD;
	for (uint32_t i = 0; optim && i < b->n; i++)
		snprintf(b->onames[i], sizeof(b->onames[i]), "optim_world_size_%u_rank_%u.pt",
			 ri->world, first + i);
	b->threaded = pthread_create(&b->tid, NULL, open_batch, b) == 0;
	if (!b->threaded)
		(void)open_batch(b);
}

/*
 * each_rank(): fn(ri, r, name, file) for every rank r in order, of the
 * model files (optim: the optimizer files), until one fails; every file
 * opened is closed.  Returns the first error.
 */
static gfs_err each_rank(rd_import *ri, bool optim,
			 gfs_err (*fn)(rd_import *ri, uint32_t r, const char *name, const rd_file *f))
{
	rd_batch *b = gfs_calloc(2, sizeof(*b));
	gfs_err err = GFS_OK;
	size_t k = 0;

	if (!b)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (ri->world > 0)
		batch_start(&b[0], ri, optim, 0);
	while (b[k].n > 0) {
		rd_batch *cur = &b[k], *next = &b[k ^ 1];

		if (cur->threaded)
			(void)pthread_join(cur->tid, NULL);
		next->n = 0;
		if (!err && cur->first + cur->n < ri->world)
			batch_start(next, ri, optim, cur->first + cur->n);
		for (uint32_t i = 0; i < cur->n; i++) {
			rd_file *f = &cur->files[i];

			if (!err)
				err = fn(ri, cur->first + i, batch_name(cur, i), f);
			gfs_torch_close(f->fd, f->zip, f->pk);
		}
		cur->n = 0;
		k ^= 1;
	}
	free(b);
	return err;
}

/* read_rank(): rank r's file f, opened by each_rank() (name: its name). */
static gfs_err read_rank(rd_import *ri, uint32_t r, const char *name, const rd_file *f)
{
	char path[PATH_MAX];
	const gfs_pv *root;
	uint32_t src;
	size_t nk = 0;
	gfs_err err;

	if (f->err)
		return gfs_fail(f->err, "%s", f->msg);
	snprintf(path, sizeof(path), "%s/%s", ri->dir, name); /* each_rank() checked its length */
	err = gfs_layout_add_source(ri->l, name, f->size, &src);
	if (!err)
		err = gfs_layout_add_metafile(ri->l, path);
	if (err)
		return err;
	root = gfs_pickle_root(f->pk);
	if (r == 0) {
		ri->keys = gfs_calloc(root->u.dict.len ? root->u.dict.len : 1, sizeof(*ri->keys));
		if (!ri->keys)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < root->u.dict.len && !err; i++) {
		const gfs_pv_item *it = &root->u.dict.items[i];
		const char *key = gfs_pv_name(it->key);
		rd_key *k;

		if (!key) {
			err = gfs_pv_name_fail(path, "key", i, it->key);
			break;
		}
		if (skipped(key))
			continue;
		if (r == 0) {
			k = &ri->keys[ri->nkeys++];
			k->tied = -1;
			k->name = gfs_strdup(key);
			if (!k->name) {
				err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
				break;
			}
		} else {
			if (nk >= ri->nkeys || strcmp(ri->keys[nk].name, key) != 0) {
				err = gfs_fail(GFS_ERR_FORMAT, "%s: key %zu is %s, rank 0's is %s", path, nk,
					       key, nk < ri->nkeys ? ri->keys[nk].name : "(none: it has fewer keys)");
				break;
			}
			k = &ri->keys[nk];
		}
		nk++;
		err = read_value(ri, r, f->zip, src, path, k, it->value);
	}
	if (!err && nk != ri->nkeys)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: %zu keys, rank 0's file %zu", path, nk, ri->nkeys);
	/* ties: a key viewing an earlier key's storage the same way, on every rank */
	for (size_t i = 0; !err && i < ri->nkeys; i++) {
		rd_key *k = &ri->keys[i];

		if (r == 0) {
			for (size_t j = 0; j < i && k->tied < 0; j++)
				if (ri->keys[j].tied < 0 && same_view(&ri->keys[j].view, &k->view) &&
				    same_meta(&ri->keys[j], k))
					k->tied = (int64_t)j;
		} else if (k->tied >= 0 && !same_view(&ri->keys[k->tied].view, &k->view)) {
			k->tied = -1;
		}
	}
	return err;
}

/*
 * add_box(): the pieces of part p of key k (tensor ti): runs along the
 * last dimension the box does not span whole, strided over the dimension
 * before it, one piece per index of the dimensions before that.
 */
static gfs_err add_box(rd_import *ri, const rd_key *k, size_t ti, const rd_part *p)
{
	const uint64_t esize = gfs_dtype_size(k->dtype);
	uint64_t gstride[GFS_PV_MAX_DIMS], inner, run, outer = 1, npieces = 1;
	int64_t last = -1;
	uint64_t src = p->off;

	for (uint32_t d = 0; d < k->ndim; d++)
		if (p->n[d] == 0)
			return GFS_OK;
	inner = esize;
	for (uint32_t d = k->ndim; d-- > 0;) {
		gstride[d] = inner;
		inner *= (uint64_t)k->shape[d];
	}
	for (uint32_t d = 0; d < k->ndim; d++)
		if (p->n[d] != k->shape[d])
			last = d;
	if (last < 0) {
		gfs_piece pc = { .kind = GFS_PIECE_FILE, .src = p->src, .src_off = p->off, .count = 1,
				 .toff = 0, .len = inner };

		return p->replica ? gfs_layout_add_replica(ri->l, ti, &pc)
				  : gfs_layout_add_general(ri->l, ti, &pc);
	}
	run = (uint64_t)p->n[last] * gstride[last];
	if (last >= 1)
		outer = (uint64_t)p->n[last - 1];
	for (int64_t d = 0; d < last - 1; d++)
		npieces *= (uint64_t)p->n[d];
	if (npieces > RD_MAX_PIECES)
		return gfs_fail(GFS_ERR_LIMIT, "%s: a shard of more than %llu pieces", k->name,
				(unsigned long long)RD_MAX_PIECES);
	for (uint64_t i = 0; i < npieces; i++) {
		gfs_piece pc = { .kind = GFS_PIECE_FILE, .src = p->src, .src_off = src, .len = run,
				 .count = outer };
		uint64_t rem = i, toff = 0;
		gfs_err err;

		for (int64_t d = last - 2; d >= 0; d--) {
			toff += ((uint64_t)p->lo[d] + rem % (uint64_t)p->n[d]) * gstride[d];
			rem /= (uint64_t)p->n[d];
		}
		if (last >= 1)
			toff += (uint64_t)p->lo[last - 1] * gstride[last - 1];
		toff += (uint64_t)p->lo[last] * gstride[last];
		pc.toff = toff;
		if (outer > 1) {
			pc.dst_stride = gstride[last - 1];
			pc.src_stride = run;
		} else {
			pc.count = 1;
		}
		err = p->replica ? gfs_layout_add_replica(ri->l, ti, &pc)
				 : gfs_layout_add_general(ri->l, ti, &pc);
		if (err)
			return err;
		src += run * outer;
	}
	return GFS_OK;
}

/* boxes_meet(): do parts a and b of key k share an element? */
static bool boxes_meet(const rd_key *k, const rd_part *a, const rd_part *b)
{
	for (uint32_t d = 0; d < k->ndim; d++)
		if (a->n[d] == 0 || b->n[d] == 0 || a->lo[d] >= b->lo[d] + b->n[d] ||
		    b->lo[d] >= a->lo[d] + a->n[d])
			return false;
	return true;
}

/* rd_span: part i's rows [lo, end) on dimension 0. */
typedef struct {
	uint64_t lo, end;
	size_t i;
} rd_span;

static int cmp_span(const void *x, const void *y)
{
	const rd_span *a = x, *b = y;

	if (a->lo != b->lo)
		return a->lo < b->lo ? -1 : 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

/*
 * first_meeting(): *found, whether two of key k's parts (replicas aside)
 * share an element, and if so *a < *b, the first such pair in part order
 * (the pair a pairwise check would name first).  A sweep
 * over the parts sorted by their first row compares only parts whose rows
 * meet: O(n log n) for Shard(0) shards, pair by pair at worst.
 */
static gfs_err first_meeting(const rd_import *ri, const rd_key *k, size_t *a, size_t *b,
			     bool *found)
{
	rd_span *sp = gfs_calloc(k->nparts ? k->nparts : 1, sizeof(*sp));
	size_t n = 0;

	if (!sp)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", ri->dir);
	for (size_t j = 0; j < k->nparts; j++) {
		const rd_part *p = &k->parts[j];

		if (p->replica)
			continue;
		/* a 0-d tensor: one element, which every part holds */
		sp[n++] = k->ndim ? (rd_span){ (uint64_t)p->lo[0], (uint64_t)p->lo[0] + (uint64_t)p->n[0], j }
				  : (rd_span){ 0, 1, j };
	}
	qsort(sp, n, sizeof(*sp), cmp_span);
	*found = false;
	for (size_t s = 0; s < n; s++)
		for (size_t t = s + 1; t < n && sp[t].lo < sp[s].end; t++) {
			const size_t x = sp[s].i < sp[t].i ? sp[s].i : sp[t].i;
			const size_t y = sp[s].i < sp[t].i ? sp[t].i : sp[s].i;

			if ((!*found || x < *a || (x == *a && y < *b)) &&
			    boxes_meet(k, &k->parts[x], &k->parts[y])) {
				*a = x;
				*b = y;
				*found = true;
			}
		}
	free(sp);
	return GFS_OK;
}

/*
 * check_tiles(): the parts of key k tile it: no two share an element
 * (checked up to RD_MAX_PAIRS parts, naming the files of the first such
 * pair; beyond, by the layout) and together they hold all its elements.
 */
static gfs_err check_tiles(const rd_import *ri, const rd_key *k)
{
	uint64_t numel = 1, covered = 0;
	char fa[96], fb[96], what[512];
	size_t a = 0, b = 0;
	bool meet = false;

	snprintf(what, sizeof(what), "%s%s%s", k->state ? k->state : "", k->state ? " of " : "",
		 k->name);
	for (uint32_t d = 0; d < k->ndim; d++)
		if (!gfs_mul_u64(numel, (uint64_t)k->shape[d], &numel))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: size overflows", ri->dir, what);
	if (k->nparts <= RD_MAX_PAIRS) {
		const gfs_err err = first_meeting(ri, k, &a, &b, &meet);

		if (err)
			return err;
	}
	if (meet) {
		const uint32_t ra = k->parts[a].rank, rb = k->parts[b].rank;

		if (k->state) {
			snprintf(fa, sizeof(fa), "optim_world_size_%u_rank_%u.pt", ri->world, ra);
			snprintf(fb, sizeof(fb), "optim_world_size_%u_rank_%u.pt", ri->world, rb);
		} else {
			snprintf(fa, sizeof(fa), "%s", ri->names[ra]);
			snprintf(fb, sizeof(fb), "%s", ri->names[rb]);
		}
		return gfs_fail(GFS_ERR_FORMAT, "%s/%s: %s: its shard overlaps that of %s: the shards do not tile the tensor",
				ri->dir, fb, what, fa);
	}
	for (size_t j = 0; j < k->nparts; j++) {
		uint64_t c = !k->parts[j].replica;

		for (uint32_t d = 0; d < k->ndim; d++)
			c *= (uint64_t)k->parts[j].n[d];
		covered += c;
	}
	if (covered != numel)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: the ranks' shards hold %llu of its %llu elements: they do not tile it",
				ri->dir, what, (unsigned long long)covered, (unsigned long long)numel);
	return GFS_OK;
}

/*
 * add_key(): key k as a layout entry with its pieces: the tensor k->name,
 * or (optim) the optimizer state k->state of parameter k->name.
 */
static gfs_err add_key(rd_import *ri, const rd_key *k, bool optim)
{
	uint64_t shape[GFS_MAX_DIMS];
	size_t ti;
	gfs_err err;

	for (uint32_t d = 0; d < k->ndim; d++)
		shape[d] = (uint64_t)k->shape[d];
	err = optim ? gfs_layout_add_state(ri->l, k->state, k->name, k->dtype, k->ndim, shape, &ti)
		    : gfs_layout_add_tensor(ri->l, k->name, k->dtype, k->ndim, shape, &ti);
	for (size_t j = 0; !err && j < k->nparts; j++)
		err = add_box(ri, k, ti, &k->parts[j]);
	return err;
}

/* build(): one tensor (or alias) per key, in rank 0's order. */
static gfs_err build(rd_import *ri)
{
	for (size_t i = 0; i < ri->nkeys; i++) {
		const rd_key *k = &ri->keys[i];
		gfs_err err;

		if (k->tied >= 0) {
			err = gfs_layout_add_alias(ri->l, k->name, ri->keys[k->tied].name);
			if (err)
				return err;
			continue;
		}
		err = check_tiles(ri, k);
		if (err)
			return err;
		err = add_key(ri, k, false);
		if (err)
			return gfs_fail_prefix(err, "%s", ri->dir);
	}
	return GFS_OK;
}

/* param_of(): the name of optimizer parameter index v (an INT), or NULL. */
static const char *param_of(const rd_import *ri, const char **names, const gfs_pv *v)
{
	int64_t i;

	if (!gfs_pv_int(v, &i) || i < 0 || (uint64_t)i >= ri->nparams)
		return NULL;
	return names ? names[i] : ri->params[i];
}

/* is_param(): is name one of the model's untied keys? */
static bool is_param(const rd_import *ri, const char *name)
{
	for (size_t i = 0; i < ri->nparams; i++)
		if (strcmp(ri->params[i], name) == 0)
			return true;
	return false;
}

/*
 * optim_groups(): check that the optimizer's param_groups list every index
 * 0..nparams-1 once, in order; where every group holds `param_names` (one
 * name of an untied model key per index), *names is [nparams] of them
 * (strings of the pickle; the caller frees the array), else NULL (the
 * model's unique parameters in order name the indices).
 */
static gfs_err optim_groups(const rd_import *ri, const char *path, const gfs_pv *groups,
			    const char ***names)
{
	size_t total = 0, nnamed = 0;
	const char **nm;

	*names = NULL;
	if (!groups || groups->kind != GFS_PV_LIST)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no param_groups list: not an optimizer state dict", path);
	for (size_t g = 0; g < groups->u.seq.len; g++) {
		const gfs_pv *pg = groups->u.seq.items[g];
		const gfs_pv *ps = gfs_pv_dict_get(pg, "params");
		int64_t v;

		if (!ps || ps->kind != GFS_PV_LIST)
			return gfs_fail(GFS_ERR_FORMAT, "%s: param group %zu has no params list", path, g);
		for (size_t j = 0; j < ps->u.seq.len; j++)
			if (!gfs_pv_int(ps->u.seq.items[j], &v) || v != (int64_t)(total + j))
				return gfs_fail(GFS_ERR_FORMAT, "%s: param group %zu: parameter %zu is not index %zu",
						path, g, j, total + j);
		total += ps->u.seq.len;
		nnamed += gfs_pv_dict_get(pg, "param_names") ? 1 : 0;
	}
	if (total != ri->nparams)
		return gfs_fail(GFS_ERR_FORMAT, "%s: the optimizer has %zu parameters, the model %zu (its keys not tied): they cannot be matched",
				path, total, ri->nparams);
	if (nnamed == 0 || total == 0)
		return GFS_OK;
	if (nnamed != groups->u.seq.len)
		return gfs_fail(GFS_ERR_FORMAT, "%s: only some param groups hold param_names", path);
	nm = gfs_calloc(total, sizeof(*nm));
	if (!nm)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	total = 0;
	for (size_t g = 0; g < groups->u.seq.len; g++) {
		const gfs_pv *pg = groups->u.seq.items[g];
		const gfs_pv *pn = gfs_pv_dict_get(pg, "param_names");
		const size_t n = gfs_pv_seq_len(gfs_pv_dict_get(pg, "params"));

		if (!pn || pn->kind != GFS_PV_LIST || pn->u.seq.len != n) {
			free(nm);
			return gfs_fail(GFS_ERR_FORMAT, "%s: param group %zu: its param_names are no list of one name per parameter",
					path, g);
		}
		for (size_t j = 0; j < n; j++, total++) {
			nm[total] = gfs_pv_name(pn->u.seq.items[j]);
			if (!nm[total] || !is_param(ri, nm[total])) {
				free(nm);
				return gfs_fail(GFS_ERR_FORMAT, "%s: param group %zu: param_names[%zu] is no untied key of the model",
						path, g, j);
			}
		}
	}
	*names = nm;
	return GFS_OK;
}

/* find_okey(): the optimizer state (name, state) read from rank 0, or NULL. */
static rd_key *find_okey(rd_import *ri, size_t hint, const char *name, const char *state)
{
	if (hint < ri->nokeys && strcmp(ri->okeys[hint].name, name) == 0 &&
	    strcmp(ri->okeys[hint].state, state) == 0)
		return &ri->okeys[hint];
	return NULL;
}

/* read_optim_rank(): rank r's optimizer file f (name): its states placed as model keys are. */
static gfs_err read_optim_rank(rd_import *ri, uint32_t r, const char *name, const rd_file *f)
{
	char path[PATH_MAX];
	const gfs_pv *root, *state;
	const char **names = NULL;
	uint32_t src;
	size_t n = 0;
	gfs_err err;

	snprintf(path, sizeof(path), "%s/%s", ri->dir, name); /* each_rank() checked its length */
	if (f->err == GFS_ERR_NOTFOUND)
		return gfs_fail(GFS_ERR_FORMAT, "%s: missing (rank %u of %u)", path, r, ri->world);
	if (f->err)
		return gfs_fail(f->err, "%s", f->msg);
	err = gfs_layout_add_source(ri->l, name, f->size, &src);
	if (err)
		return err;
	root = gfs_pickle_root(f->pk);
	state = gfs_pv_dict_get(root, "state");
	err = optim_groups(ri, path, gfs_pv_dict_get(root, "param_groups"), &names);
	if (!err && (!state || state->kind != GFS_PV_DICT))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: no state dict: not an optimizer state dict", path);
	for (size_t i = 0; !err && i < state->u.dict.len; i++) {
		const gfs_pv_item *it = &state->u.dict.items[i];
		const char *param = param_of(ri, names, it->key);
		const gfs_pv *sd = it->value;

		if (!param) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s: state %zu: its key is no parameter index below %zu",
				       path, i, ri->nparams);
			break;
		}
		if (!sd || sd->kind != GFS_PV_DICT) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s: state of %s is no dict", path, param);
			break;
		}
		for (size_t j = 0; !err && j < sd->u.dict.len; j++) {
			const char *sname = gfs_pv_name(sd->u.dict.items[j].key);
			rd_key *k;

			if (!sname) {
				err = gfs_pv_name_fail(path, "state name", j, sd->u.dict.items[j].key);
				break;
			}
			if (r == 0) {
				if (!gfs_grow((void **)&ri->okeys, &ri->cap_okeys, ri->nokeys,
					      sizeof(*ri->okeys), 16)) {
					err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
					break;
				}
				k = &ri->okeys[ri->nokeys++];
				memset(k, 0, sizeof(*k));
				k->tied = -1;
				k->name = gfs_strdup(param);
				k->state = gfs_strdup(sname);
				if (!k->name || !k->state) {
					err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
					break;
				}
			} else if (!(k = find_okey(ri, n, param, sname))) {
				err = gfs_fail(GFS_ERR_FORMAT, "%s: state %s of %s: not rank 0's state %zu",
					       path, sname, param, n);
				break;
			}
			n++;
			err = read_value(ri, r, f->zip, src, path, k, sd->u.dict.items[j].value);
		}
	}
	if (!err && n != ri->nokeys)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: %zu optimizer states, rank 0's file %zu", path, n,
			       ri->nokeys);
	free(names);
	return err;
}

/*
 * read_optim(): the optimizer files optim_world_size_W_rank_R.pt of every
 * rank, each state's global shape checked against its parameter's (a 0-d
 * state, "step", is taken from rank 0).  GFS_ERR_NOTFOUND without rank 0's
 * file; a missing file of another rank is GFS_ERR_FORMAT.
 */
static gfs_err read_optim(rd_import *ri)
{
	char path[PATH_MAX];
	size_t np = 0;
	gfs_err err;

	if ((size_t)snprintf(path, sizeof(path), "%s/optim_world_size_%u_rank_0.pt", ri->dir,
			     ri->world) >= sizeof(path))
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", ri->dir);
	if (access(path, F_OK) != 0)
		return gfs_fail(GFS_ERR_NOTFOUND, "no optim_world_size_%u_rank_0.pt", ri->world);
	if (ri->any_stensor || ri->fsdp_version == 1)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"FSDP1's optimizer files hold flat-parameter shards, which cannot be mapped to parameter names from the files alone%s",
				ri->any_stensor ? "" : " (fsdp_config.json: FSDP_version 1)");
	ri->params = gfs_calloc(ri->nkeys ? ri->nkeys : 1, sizeof(*ri->params));
	if (!ri->params)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < ri->nkeys; i++)
		if (ri->keys[i].tied < 0)
			ri->params[np++] = ri->keys[i].name;
	ri->nparams = np;
	err = each_rank(ri, true, read_optim_rank);
	for (size_t i = 0; !err && i < ri->nokeys; i++) {
		const rd_key *k = &ri->okeys[i];
		const rd_key *t = NULL;
		bool same;

		for (size_t j = 0; !t && j < ri->nkeys; j++)
			if (strcmp(ri->keys[j].name, k->name) == 0)
				t = &ri->keys[j];
		same = t && k->ndim == t->ndim &&
		       memcmp(k->shape, t->shape, k->ndim * sizeof(*k->shape)) == 0;
		if (!err)
			err = check_tiles(ri, k);
		if (!err && k->ndim > 0 && !same)
			err = gfs_fail(GFS_ERR_FORMAT, "%s/optim_world_size_%u_rank_0.pt: state %s of %s: its shape is not its parameter's",
				       ri->dir, ri->world, k->state, k->name);
	}
	return err;
}

/* add_optim(): the optimizer states read by read_optim() as layout entries. */
static gfs_err add_optim(rd_import *ri)
{
	for (size_t i = 0; i < ri->nokeys; i++) {
		const gfs_err err = add_key(ri, &ri->okeys[i], true);

		if (err)
			return err;
	}
	ri->l->optim.world_size = ri->world;
	return GFS_OK;
}

gfs_err gfs_import_rankdict(const char *dir, const char *tag, gfs_layout **out)
{
	rd_import ri = { 0 };
	char rdir[PATH_MAX], info[256], note[PATH_MAX + 1200], onote[1024] = "";
	char **names = NULL;
	bool via_latest, only;
	gfs_err err;

	*out = NULL;
	err = rank_dir(dir, tag, rdir, sizeof(rdir), &via_latest, &only);
	if (!err)
		err = list_ranks(rdir, &ri.world, &names);
	if (err)
		return err;
	ri.dir = rdir;
	ri.names = names;
	err = check_config(rdir, ri.world, &ri.fsdp_version);
	if (!err) {
		ri.coords = gfs_calloc(ri.world, GFS_PV_MAX_MESH * sizeof(*ri.coords));
		ri.has_coord = gfs_calloc(ri.world, sizeof(*ri.has_coord));
		if (!ri.coords || !ri.has_coord)
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	if (!err)
		err = gfs_layout_new("rankdict", rdir, &ri.l);
	if (!err)
		err = each_rank(&ri, false, read_rank);
	if (!err)
		err = build(&ri);
	if (!err) {
		const gfs_err oerr = read_optim(&ri);

		if (!oerr)
			err = add_optim(&ri);
		else if (oerr == GFS_ERR_NOMEM)
			err = oerr;
		else if (oerr != GFS_ERR_NOTFOUND)
			snprintf(onote, sizeof(onote), "no optim/: %s", gfs_errmsg());
	}
	if (!err && is_dir(rdir, "huggingface")) {
		char *hf = gfs_path_join(rdir, "huggingface");

		err = hf ? gfs_layout_set_root(ri.l, hf) : gfs_fail(GFS_ERR_NOMEM, "out of memory");
		free(hf);
	}
	if (!err) {
		snprintf(info, sizeof(info), "per-rank state dicts (%s), world size %u",
			 ri.any_dtensor ? (ri.any_stensor ? "DTensor and ShardedTensor"
					  : ri.fsdp_version == 1 ? "FSDP1 DTensor" : "FSDP2 DTensor")
					: (ri.any_stensor ? "FSDP1 ShardedTensor" : "plain tensors"),
			 ri.world);
		err = gfs_layout_set_info(ri.l, info);
	}
	if (!err && (via_latest || strcmp(rdir, dir) != 0 || onote[0])) {
		snprintf(note, sizeof(note), "%s%s%s%s%s", via_latest || strcmp(rdir, dir) != 0 ? "read " : "",
			 via_latest || strcmp(rdir, dir) != 0 ? rdir : "",
			 only ? " (no " RD_LATEST ": the only step directory)" : "",
			 onote[0] && (via_latest || strcmp(rdir, dir) != 0) ? "; " : "", onote);
		err = gfs_layout_set_note(ri.l, note);
	}
	if (!err)
		err = gfs_layout_finish(ri.l, rdir);
	for (uint32_t r = 0; names && r < ri.world; r++)
		free(names[r]);
	free(names);
	for (size_t i = 0; i < ri.nkeys; i++) {
		free(ri.keys[i].name);
		free(ri.keys[i].parts);
	}
	for (size_t i = 0; i < ri.nokeys; i++) {
		free(ri.okeys[i].name);
		free(ri.okeys[i].state);
		free(ri.okeys[i].parts);
	}
	free(ri.keys);
	free(ri.okeys);
	free(ri.params);
	free(ri.coords);
	free(ri.has_coord);
	if (err) {
		gfs_layout_free(ri.l);
		return err;
	}
	*out = ri.l;
	return GFS_OK;
}
