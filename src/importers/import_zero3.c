/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — importer of rank-local ZeRO-3 saves (python/gatherfs_save.py,
 * docs/zero3-save.md).
 *
 * A save directory holds, for each rank R of W, zero3-rank-R.bin (the
 * valid elements of every partition R owns, then on rank 0 the buffers)
 * and zero3-rank-R.json, its manifest, written last.  Rank 0's manifest
 * sets the tag, the world size and the tensor table; every other rank's
 * must agree with it, every rank 0..W-1 must be there and no other, and
 * each data file must have the size its manifest records.  Where each
 * rank's bytes of a partitioned tensor are follows from the partition
 * arithmetic (ceil(numel / W) elements per rank, the last ranks short),
 * which the manifests must match exactly.  Anything else is refused with
 * one line: a partial model is never served.  Tensor payloads are not read;
 * the CRC-32 the manifests give for each tensor's bytes make those bytes
 * checksummed records, checked by the layout's integrity machinery.
 *
 * The saver puts each save in its own directory DIR/TAG; given DIR, the
 * newest complete one is imported (each save on its own: two are never
 * mixed), and the newer incomplete ones are named in the note.  A save
 * written straight into DIR (before tag directories) is imported as it is.
 */
#define _GNU_SOURCE /* qsort_r */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/util/json.h"

#define Z3_PREFIX "zero3-rank-"
#define Z3_MAX_RANKS ((uint64_t)1 << 20)
#define Z3_MAX_MANIFEST ((uint64_t)1 << 28)
#define Z3_MAX_TENSORS ((uint64_t)1 << 24)
#define Z3_MAX_SLOTS ((uint64_t)1 << 24) /* ranks x tensors */
#define Z3_STALE_NAMES 6

/* One entry of the tensor table, as rank 0's manifest gives it. */
typedef struct z3_entry {
	const char *name;
	const char *alias_of; /* alias: its target, else NULL */
	bool full;            /* an unpartitioned tensor, bytes in rank 0's file */
	gfs_dtype dtype;
	uint32_t ndim;
	uint64_t shape[GFS_MAX_DIMS];
	uint64_t numel;
	uint64_t partition_numel;
	unsigned stale; /* Z3_STALE_*: some rank found its live copy stale */
} z3_entry;

#define Z3_STALE_DATA 1u
#define Z3_STALE_SECONDARY 2u

typedef struct z3_save {
	const char *dir;
	uint64_t world;
	const char *tag;
	cJSON **docs;     /* manifest of rank r */
	size_t nslots;    /* entries of docs and mpaths */
	char **mpaths;    /* dir/zero3-rank-r.json, for messages */
	z3_entry *ents;   /* rank 0's table */
	size_t nents;
	size_t *byname;   /* entry indices sorted by name */
	uint64_t *offs;   /* offs[r * nents + i]: tensor i's bytes in rank r's file */
	uint32_t *crcs;   /* crcs[r * nents + i]: their CRC-32, if has_crc[r] */
	bool *has_crc;    /* has_crc[r]: rank r's manifest gives CRC-32s (else an older save) */
	gfs_layout *l;
} z3_save;

/* rank_of(): the rank R of a name "zero3-rank-R<ext>" (R decimal, no leading zero). */
static bool rank_of(const char *name, const char *ext, uint64_t *r)
{
	const size_t pl = sizeof(Z3_PREFIX) - 1, el = strlen(ext), n = strlen(name);
	uint64_t v = 0;

	if (n <= pl + el || strncmp(name, Z3_PREFIX, pl) != 0 || strcmp(name + n - el, ext) != 0)
		return false;
	if (n - pl - el > 7 || (name[pl] == '0' && n - pl - el > 1))
		return false;
	for (size_t i = pl; i < n - el; i++) {
		if (name[i] < '0' || name[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(name[i] - '0');
	}
	*r = v;
	return true;
}

/*
 * rank_files(): does directory dir hold a file named zero3-rank-R.json or
 * .bin?  If so and newest is not NULL, *newest is the latest mtime of those.
 */
static bool rank_files(const char *dir, struct timespec *newest)
{
	DIR *d = opendir(dir);
	const struct dirent *de;
	bool found = false;
	struct stat st;
	uint64_t r;

	if (!d)
		return false;
	while ((!found || newest) && (de = readdir(d)) != NULL) {
		if (!rank_of(de->d_name, ".json", &r) && !rank_of(de->d_name, ".bin", &r))
			continue;
		found = true;
		if (newest && fstatat(dirfd(d), de->d_name, &st, 0) == 0 &&
		    (st.st_mtim.tv_sec > newest->tv_sec ||
		     (st.st_mtim.tv_sec == newest->tv_sec && st.st_mtim.tv_nsec > newest->tv_nsec)))
			*newest = st.st_mtim;
	}
	closedir(d);
	return found;
}

/* A save of a directory of saves: DIR/TAG, the newest mtime of its rank files. */
typedef struct z3_cand {
	char *path;
	const char *name; /* in path */
	struct timespec newest;
} z3_cand;

#define Z3_MAX_SAVES 100000
#define Z3_UNTAGGED "untagged" /* gatherfs_save.py: the directory of a save with no tag */

/*
 * list_saves(): the subdirectories of dir (not hidden: a save moved aside
 * by an overwrite is) holding rank files, the first Z3_MAX_SAVES found,
 * in no order.  @return GFS_OK and *out, *n (possibly 0).
 */
static gfs_err list_saves(const char *dir, z3_cand **out, size_t *n)
{
	DIR *d = opendir(dir);
	const struct dirent *de;
	z3_cand *c = NULL;
	size_t cap = 0;

	*n = 0;
	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		struct timespec t = { 0, 0 };
		char *path;

		if (de->d_name[0] == '.')
			continue;
		path = gfs_path_join(dir, de->d_name);
		if (!path) {
			closedir(d);
			free(c);
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
		if (!rank_files(path, &t)) {
			free(path);
			continue;
		}
		if (*n == Z3_MAX_SAVES) {
			free(path);
			break;
		}
		if (*n == cap) {
			z3_cand *g = gfs_reallocarray(c, cap ? cap * 2 : 8, sizeof(*c));

			if (!g) {
				free(path);
				for (size_t i = 0; i < *n; i++)
					free(c[i].path);
				free(c);
				closedir(d);
				*n = 0;
				return gfs_fail(GFS_ERR_NOMEM, "out of memory");
			}
			c = g;
			cap = cap ? cap * 2 : 8;
		}
		c[(*n)++] = (z3_cand){ .path = path, .name = strrchr(path, '/') + 1, .newest = t };
	}
	closedir(d);
	*out = c;
	return GFS_OK;
}

static int cmp_newest(const void *a, const void *b)
{
	const z3_cand *x = a, *y = b;

	if (x->newest.tv_sec != y->newest.tv_sec)
		return x->newest.tv_sec < y->newest.tv_sec ? 1 : -1;
	if (x->newest.tv_nsec != y->newest.tv_nsec)
		return x->newest.tv_nsec < y->newest.tv_nsec ? 1 : -1;
	return strcmp(y->name, x->name);
}

bool gfs_zero3_detect(const char *dir)
{
	return rank_files(dir, NULL);
}

bool gfs_zero3_detect_saves(const char *dir)
{
	z3_cand *c = NULL;
	size_t n = 0;

	if (list_saves(dir, &c, &n) != GFS_OK)
		return false;
	for (size_t i = 0; i < n; i++)
		free(c[i].path);
	free(c);
	return n > 0;
}

/* scan(): the highest rank any manifest or data file in the directory is named for. */
static gfs_err scan(const z3_save *s, uint64_t *max_rank)
{
	DIR *d = opendir(s->dir);
	const struct dirent *de;
	uint64_t r;

	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: cannot open directory: %s", s->dir, strerror(errno));
	*max_rank = 0;
	while ((de = readdir(d)) != NULL) {
		if ((rank_of(de->d_name, ".json", &r) || rank_of(de->d_name, ".bin", &r)) &&
		    r > *max_rank)
			*max_rank = r;
	}
	closedir(d);
	return GFS_OK;
}

/* load_manifest(): parse rank r's manifest and check its header. */
static gfs_err load_manifest(z3_save *s, uint64_t r)
{
	char name[64], *text = NULL;
	const char *lbl;
	size_t len = 0;
	uint64_t v;
	gfs_err err;

	snprintf(name, sizeof(name), Z3_PREFIX "%" PRIu64 ".json", r);
	s->mpaths[r] = gfs_path_join(s->dir, name);
	if (!s->mpaths[r])
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	lbl = s->mpaths[r];
	err = gfs_read_text(lbl, Z3_MAX_MANIFEST, &text, &len);
	if (err == GFS_ERR_NOTFOUND)
		return gfs_fail(err, "%s: missing: rank %" PRIu64 " did not finish this save "
				"(it failed, or is still writing)", lbl, r);
	if (!err)
		err = gfs_json_parse(text, len, lbl, &s->docs[r]);
	free(text);
	if (err)
		return err;
	err = gfs_json_u64(gfs_json_get(s->docs[r], "gatherfs_zero3"), lbl, "gatherfs_zero3", &v);
	if (!err && v != 1)
		err = gfs_fail(GFS_ERR_UNSUPPORTED, "%s: gatherfs_zero3 version %" PRIu64
			       " is not known (1 is)", lbl, v);
	if (!err)
		err = gfs_json_u64(gfs_json_get(s->docs[r], "rank"), lbl, "rank", &v);
	if (!err && v != r)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: says it is rank %" PRIu64, lbl, v);
	return err;
}

/* parse_entry(): one tensor table entry of manifest lbl. */
static gfs_err parse_entry(const cJSON *t, const char *lbl, size_t i, z3_entry *e)
{
	const cJSON *shape = gfs_json_get(t, "shape"), *x;
	const char *dt;
	char what[64];
	uint64_t numel = 0;
	gfs_err err;

	memset(e, 0, sizeof(*e));
	snprintf(what, sizeof(what), "tensors[%zu].name", i);
	err = gfs_json_str(gfs_json_get(t, "name"), lbl, what, &e->name);
	if (err)
		return err;
	if (gfs_json_get(t, "alias_of"))
		return gfs_json_str(gfs_json_get(t, "alias_of"), lbl, "alias_of", &e->alias_of);
	err = gfs_json_str(gfs_json_get(t, "dtype"), lbl, "dtype", &dt);
	if (err)
		return gfs_fail_prefix(err, "tensor %s", e->name);
	e->dtype = gfs_dtype_parse(dt);
	if (e->dtype == GFS_DT_INVALID)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: unknown dtype '%s'", lbl, e->name, dt);
	if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > GFS_MAX_DIMS)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: shape must be an array of at most %d sizes",
				lbl, e->name, GFS_MAX_DIMS);
	e->numel = 1;
	cJSON_ArrayForEach(x, shape) {
		err = gfs_json_u64(x, lbl, "a shape size", &e->shape[e->ndim]);
		if (err)
			return err;
		if (!gfs_mul_u64(e->numel, e->shape[e->ndim++], &e->numel))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: size overflows", lbl, e->name);
	}
	e->full = cJSON_IsTrue(gfs_json_get(t, "full"));
	if (e->full)
		return GFS_OK;
	err = gfs_json_u64(gfs_json_get(t, "numel"), lbl, "numel", &numel);
	if (!err)
		err = gfs_json_u64(gfs_json_get(t, "partition_numel"), lbl, "partition_numel",
				   &e->partition_numel);
	if (err)
		return gfs_fail_prefix(err, "tensor %s", e->name);
	if (numel != e->numel)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: numel %" PRIu64 " for a shape of %"
				PRIu64 " elements", lbl, e->name, numel, e->numel);
	return GFS_OK;
}

/* same_entry(): do two table entries describe the same tensor? */
static bool same_entry(const z3_entry *a, const z3_entry *b)
{
	if (strcmp(a->name, b->name) != 0 || !a->alias_of != !b->alias_of)
		return false;
	if (a->alias_of)
		return strcmp(a->alias_of, b->alias_of) == 0;
	return a->full == b->full && a->dtype == b->dtype && a->ndim == b->ndim &&
	       memcmp(a->shape, b->shape, a->ndim * sizeof(a->shape[0])) == 0 &&
	       a->partition_numel == b->partition_numel;
}

/*
 * span_bytes(): how many bytes of partitioned entry e rank r holds: the
 * valid elements of its partition, [r * ps, min((r + 1) * ps, numel)).
 * No overflow: load_table() checked ps * W and numel * itemsize.
 */
static uint64_t span_bytes(const z3_entry *e, uint64_t r)
{
	const uint64_t start = e->partition_numel * r;
	const uint64_t valid = start >= e->numel ? 0
			       : e->numel - start < e->partition_numel ? e->numel - start
								       : e->partition_numel;

	return valid * gfs_dtype_size(e->dtype);
}

/* check_header(): rank r's manifest is of rank 0's save: same world size and tag. */
static gfs_err check_header(const z3_save *s, uint64_t r)
{
	const cJSON *doc = s->docs[r];
	const char *lbl = s->mpaths[r], *tag;
	uint64_t w;
	gfs_err err;

	err = gfs_json_u64(gfs_json_get(doc, "world_size"), lbl, "world_size", &w);
	if (!err)
		err = gfs_json_str(gfs_json_get(doc, "tag"), lbl, "tag", &tag);
	if (err)
		return err;
	if (w != s->world)
		return gfs_fail(GFS_ERR_FORMAT, "%s: world size %" PRIu64 ", but rank 0's is %" PRIu64
				": a file of another save", lbl, w, s->world);
	if (strcmp(tag, s->tag) != 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tag '%s', but rank 0's is '%s': a file of another save",
				lbl, tag, s->tag);
	return GFS_OK;
}

/* check_rank(): rank r's tensor table against rank 0's, and its offsets. */
static gfs_err check_rank(z3_save *s, uint64_t r, uint64_t data_size)
{
	const cJSON *tensors = gfs_json_get(s->docs[r], "tensors"), *t;
	const char *lbl = s->mpaths[r];
	size_t i = 0;
	bool first = true;
	gfs_err err;

	if (!cJSON_IsArray(tensors))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensors must be an array", lbl);
	if ((size_t)cJSON_GetArraySize(tensors) != s->nents)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %d tensors, but rank 0's manifest has %zu: a file of another save",
				lbl, cJSON_GetArraySize(tensors), s->nents);
	cJSON_ArrayForEach(t, tensors) {
		const z3_entry *e = &s->ents[i];
		z3_entry mine;
		uint64_t off = 0, len = 0, want = 0;
		const bool has_bytes = !e->alias_of && (!e->full || r == 0);
		const cJSON *crc = gfs_json_get(t, "crc32");
		uint64_t crcv = 0;

		err = r == 0 ? GFS_OK : parse_entry(t, lbl, i, &mine);
		if (err)
			return err;
		if (r != 0 && !same_entry(e, &mine))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %zu (%s): its name, dtype, shape or partition "
					"size differs from rank 0's (%s): a file of another save",
					lbl, i, mine.name, e->name);
		if (has_bytes) {
			want = e->full ? e->numel * gfs_dtype_size(e->dtype) : span_bytes(e, r);
			err = gfs_json_u64(gfs_json_get(t, "offset"), lbl, "offset", &off);
			if (!err)
				err = gfs_json_u64(gfs_json_get(t, "length"), lbl, "length", &len);
			if (err)
				return gfs_fail_prefix(err, "tensor %s", e->name);
			if (len != want)
				return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: %" PRIu64 " bytes, but rank %" PRIu64
						" of %" PRIu64 " holds %" PRIu64, lbl, e->name, len, r, s->world, want);
			if (off > data_size || len > data_size - off)
				return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: bytes %" PRIu64 "..%" PRIu64
						" lie past the end of its data file (%" PRIu64 " bytes)",
						lbl, e->name, off, off + len, data_size);
			if (first) /* the first tensor with bytes says whether the rank has CRC-32s */
				s->has_crc[r] = crc != NULL;
			first = false;
			if (!crc != !s->has_crc[r])
				return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: crc32 %s, unlike the tensors before it",
						lbl, e->name, crc ? "given" : "missing");
			err = crc ? gfs_json_u64(crc, lbl, "crc32", &crcv) : GFS_OK;
			if (err)
				return gfs_fail_prefix(err, "tensor %s", e->name);
			if (crcv > UINT32_MAX)
				return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: crc32 %" PRIu64 " is not a CRC-32",
						lbl, e->name, crcv);
		}
		s->offs[r * s->nents + i] = off;
		s->crcs[r * s->nents + i] = (uint32_t)crcv;
		i++;
	}
	return GFS_OK;
}

/* add_data(): rank r's data file as layout source r, its size checked. */
static gfs_err add_data(z3_save *s, uint64_t r, uint64_t *size)
{
	const cJSON *data = gfs_json_get(s->docs[r], "data");
	const char *lbl = s->mpaths[r], *path;
	char want[64], *full;
	struct stat st;
	uint32_t src;
	gfs_err err;

	snprintf(want, sizeof(want), Z3_PREFIX "%" PRIu64 ".bin", r);
	err = gfs_json_str(gfs_json_get(data, "path"), lbl, "data.path", &path);
	if (!err)
		err = gfs_json_u64(gfs_json_get(data, "size"), lbl, "data.size", size);
	if (err)
		return err;
	if (strcmp(path, want) != 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: data.path must be '%s'", lbl, want);
	full = gfs_path_join(s->dir, want);
	if (!full)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (stat(full, &st) != 0)
		err = gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: %s (named by %s)",
			       full, strerror(errno), lbl);
	else if (!S_ISREG(st.st_mode))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file", full);
	else if ((uint64_t)st.st_size != *size)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: %" PRIu64 " bytes, but its manifest says %" PRIu64
			       ": truncated, or replaced by another save", full, (uint64_t)st.st_size, *size);
	free(full);
	if (!err)
		err = gfs_layout_add_source(s->l, want, *size, &src);
	if (!err && src != r)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: duplicate data file", lbl);
	return err;
}

/* add_manifest_source(): list manifest r as a source, so it is not passed through. */
static gfs_err add_manifest_source(z3_save *s, uint64_t r)
{
	struct stat st;
	uint32_t src;

	if (stat(s->mpaths[r], &st) != 0)
		return gfs_fail(GFS_ERR_IO, "%s: %s", s->mpaths[r], strerror(errno));
	return gfs_layout_add_source(s->l, strrchr(s->mpaths[r], '/') + 1, (uint64_t)st.st_size,
				     &src);
}

static int cmp_by_name(const void *a, const void *b, void *arg)
{
	const z3_entry *ents = arg;

	return strcmp(ents[*(const size_t *)a].name, ents[*(const size_t *)b].name);
}

/* sort_names(): s->byname: entry indices sorted by name, for find_entry(). */
static gfs_err sort_names(z3_save *s)
{
	s->byname = gfs_calloc(s->nents, sizeof(*s->byname));
	if (!s->byname)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < s->nents; i++)
		s->byname[i] = i;
	qsort_r(s->byname, s->nents, sizeof(*s->byname), cmp_by_name, s->ents);
	return GFS_OK;
}

/* find_entry(): the index of the entry named name, or -1. */
static int64_t find_entry(const z3_save *s, const char *name)
{
	size_t lo = 0, hi = s->nents;

	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		const int c = strcmp(s->ents[s->byname[mid]].name, name);

		if (c == 0)
			return (int64_t)s->byname[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/*
 * note_stale(): mark the entries whose live copies rank r found stale
 * (its "stale" list: a diagnostic, never used for the bytes served).
 */
static void note_stale(z3_save *s, uint64_t r)
{
	const cJSON *stale = gfs_json_get(s->docs[r], "stale"), *x;

	cJSON_ArrayForEach(x, stale) {
		const cJSON *name = gfs_json_get(x, "name"), *copy = gfs_json_get(x, "copy");
		const int64_t i = cJSON_IsString(name) ? find_entry(s, name->valuestring) : -1;

		if (i >= 0)
			s->ents[i].stale |= cJSON_IsString(copy) &&
							    strcmp(copy->valuestring, "secondary") == 0
						    ? Z3_STALE_SECONDARY : Z3_STALE_DATA;
	}
}

/* stale_info(): the one-line summary of the stale live copies, into info. */
static void stale_info(const z3_save *s, char *info, size_t n)
{
	size_t data = 0, sec = 0, shown = 0, used;

	for (size_t i = 0; i < s->nents; i++) {
		data += (s->ents[i].stale & Z3_STALE_DATA) != 0;
		sec += (s->ents[i].stale & Z3_STALE_SECONDARY) != 0;
	}
	used = (size_t)snprintf(info, n, "gatherfs save_zero3, tag '%.64s', %" PRIu64 " ranks, %zu entries; ",
				s->tag, s->world, s->nents);
	if (!data && !sec) {
		snprintf(info + used, n - used, "no stale live copies");
		return;
	}
	used += (size_t)snprintf(info + used, n - used,
				 "stale live copies, not saved: p.data of %zu params, ds_secondary_tensor of %zu:",
				 data, sec);
	for (size_t i = 0; i < s->nents && used < n; i++) {
		if (!s->ents[i].stale)
			continue;
		if (shown++ == Z3_STALE_NAMES) {
			snprintf(info + used, n - used, " ...");
			return;
		}
		used += (size_t)snprintf(info + used, n - used, "%s %.60s", shown > 1 ? "," : "",
					 s->ents[i].name);
	}
}

/*
 * add_record(): the len bytes at off of rank r's data file, with their
 * CRC-32, as a checksummed record named after its tensor: the layout's
 * integrity checks (-o verify, gatherfs-inspect verify, the CRC pass of the
 * mount) then check it as they check a zip record.
 */
static gfs_err add_record(z3_save *s, uint32_t r, uint64_t off, uint64_t len, uint32_t crc,
			  const char *name)
{
	const gfs_record rec = { .src = r, .kind = GFS_PIECE_FILE, .off = off, .len = len,
				 .crc32 = crc };

	return gfs_layout_add_record(s->l, &rec, name);
}

/* build(): the layout, once every manifest is loaded and checked. */
static gfs_err build(z3_save *s)
{
	gfs_err err = GFS_OK;

	for (size_t i = 0; !err && i < s->nents; i++) {
		const z3_entry *e = &s->ents[i];
		size_t ti;

		if (e->alias_of) {
			err = gfs_layout_add_alias(s->l, e->name, e->alias_of);
			continue;
		}
		err = gfs_layout_add_tensor(s->l, e->name, e->dtype, e->ndim, e->shape, &ti);
		for (uint64_t r = 0; !err && r < (e->full ? 1 : s->world); r++) {
			const uint64_t len = e->full ? e->numel * gfs_dtype_size(e->dtype)
						     : span_bytes(e, r);

			const size_t k = (size_t)r * s->nents + i;

			if (len)
				err = gfs_layout_add_piece(s->l, ti, (uint32_t)r, s->offs[k], len);
			if (!err && len && s->has_crc[r])
				err = add_record(s, (uint32_t)r, s->offs[k], len, s->crcs[k], e->name);
		}
	}
	return err;
}

/* load_table(): rank 0's tensor table, with the partition arithmetic checked. */
static gfs_err load_table(z3_save *s)
{
	const char *lbl = s->mpaths[0];
	const cJSON *tensors = gfs_json_get(s->docs[0], "tensors"), *t;
	gfs_err err;

	err = gfs_json_u64(gfs_json_get(s->docs[0], "world_size"), lbl, "world_size", &s->world);
	if (!err)
		err = gfs_json_str(gfs_json_get(s->docs[0], "tag"), lbl, "tag", &s->tag);
	if (err)
		return err;
	for (const char *c = s->tag; *c; c++) {
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return gfs_fail(GFS_ERR_FORMAT, "%s: the tag holds a control character", lbl);
	}
	if (s->world == 0 || s->world > Z3_MAX_RANKS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: world size %" PRIu64 " is not in 1..%" PRIu64, lbl,
				s->world, Z3_MAX_RANKS);
	if (!cJSON_IsArray(tensors) || cJSON_GetArraySize(tensors) < 1 ||
	    (uint64_t)cJSON_GetArraySize(tensors) > Z3_MAX_TENSORS ||
	    (uint64_t)cJSON_GetArraySize(tensors) * s->world > Z3_MAX_SLOTS)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensors must be a non-empty array (at most %" PRIu64
				" entries over all ranks)", lbl, Z3_MAX_SLOTS);
	s->nents = (size_t)cJSON_GetArraySize(tensors);
	s->ents = gfs_calloc(s->nents, sizeof(*s->ents));
	s->offs = gfs_calloc(s->nents * (size_t)s->world, sizeof(*s->offs));
	s->crcs = gfs_calloc(s->nents * (size_t)s->world, sizeof(*s->crcs));
	s->has_crc = gfs_calloc((size_t)s->world, sizeof(*s->has_crc));
	if (!s->ents || !s->offs || !s->crcs || !s->has_crc)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	size_t i = 0;
	cJSON_ArrayForEach(t, tensors) {
		z3_entry *e = &s->ents[i];
		uint64_t ps_w;

		err = parse_entry(t, lbl, i++, e);
		if (err)
			return err;
		if (e->alias_of)
			continue;
		if (!gfs_mul_u64(e->numel, gfs_dtype_size(e->dtype), &ps_w))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: size overflows", lbl, e->name);
		if (e->full)
			continue;
		/* DeepSpeed: every rank holds ceil(numel / W) elements, padding included */
		if (!gfs_mul_u64(e->partition_numel, s->world, &ps_w) || ps_w < e->numel ||
		    (e->numel && ps_w - e->numel >= s->world) || (!e->numel && e->partition_numel))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: partitions of %" PRIu64
					" elements over %" PRIu64 " ranks do not hold %" PRIu64 " elements",
					lbl, e->name, e->partition_numel, s->world, e->numel);
	}
	return GFS_OK;
}

/*
 * grow_ranks(): room for the manifests of ranks 0..world-1 (only rank 0's
 * is loaded so far; s->nloaded says how many save_free() must free).
 */
static gfs_err grow_ranks(z3_save *s)
{
	cJSON **docs = gfs_calloc((size_t)s->world, sizeof(*docs));
	char **mpaths = gfs_calloc((size_t)s->world, sizeof(*mpaths));

	if (!docs || !mpaths) {
		free(docs);
		free(mpaths);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	docs[0] = s->docs[0];
	mpaths[0] = s->mpaths[0];
	free(s->docs);
	free(s->mpaths);
	s->docs = docs;
	s->mpaths = mpaths;
	s->nslots = (size_t)s->world;
	return GFS_OK;
}

static void save_free(z3_save *s)
{
	for (size_t r = 0; s->docs && r < s->nslots; r++) {
		cJSON_Delete(s->docs[r]);
		free(s->mpaths[r]);
	}
	free(s->docs);
	free(s->mpaths);
	free(s->ents);
	free(s->byname);
	free(s->offs);
	free(s->crcs);
	free(s->has_crc);
	gfs_layout_free(s->l);
}

/* import_save(): the save whose rank files are in dir itself. */
static gfs_err import_save(const char *dir, const char *tag, gfs_layout **out)
{
	z3_save s = { .dir = dir };
	uint64_t max_rank = 0, size;
	char info[512];
	gfs_err err;

	s.docs = gfs_calloc(1, sizeof(*s.docs));
	s.mpaths = gfs_calloc(1, sizeof(*s.mpaths));
	if (!s.docs || !s.mpaths) {
		free(s.docs);
		free(s.mpaths);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	s.nslots = 1;
	err = load_manifest(&s, 0);
	if (!err)
		err = load_table(&s);
	if (!err && tag && strcmp(tag, s.tag) != 0)
		err = gfs_fail(GFS_ERR_NOTFOUND, "%s: tag '%s', not the '%s' asked for", s.mpaths[0],
			       s.tag, tag);
	if (!err)
		err = scan(&s, &max_rank);
	if (!err && max_rank >= s.world)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: holds files of rank %" PRIu64
			       ", but rank 0's save has %" PRIu64 " ranks: files of another save are mixed in",
			       dir, max_rank, s.world);
	if (!err)
		err = grow_ranks(&s);
	if (!err)
		err = sort_names(&s);
	if (!err)
		err = gfs_layout_new("zero3", dir, &s.l);
	if (!err)
		err = gfs_layout_set_root(s.l, dir);
	for (uint64_t r = 0; !err && r < s.world; r++) {
		if (r)
			err = load_manifest(&s, r);
		if (!err)
			err = check_header(&s, r);
		if (!err)
			err = add_data(&s, r, &size);
		if (!err)
			err = check_rank(&s, r, size);
		if (!err)
			note_stale(&s, r);
		if (r) { /* only rank 0's table is kept: its names are the layout's */
			cJSON_Delete(s.docs[r]);
			s.docs[r] = NULL;
		}
	}
	for (uint64_t r = 0; !err && r < s.world; r++)
		err = add_manifest_source(&s, r);
	if (!err)
		err = build(&s);
	if (!err) {
		stale_info(&s, info, sizeof(info));
		err = gfs_layout_set_info(s.l, info);
		if (!err)
			err = gfs_layout_set_note(s.l, info);
	}
	if (!err)
		err = gfs_layout_finish(s.l, s.mpaths[0]);
	if (!err) {
		*out = s.l;
		s.l = NULL;
	}
	save_free(&s);
	return err;
}

/*
 * pick(): of the saves c[0..n) (newest first), the first that imports
 * (complete), noting on the layout which it is and the newer ones that are
 * not complete, each with why.  Saves of two directories are never mixed:
 * each is imported on its own.
 */
static gfs_err pick(const char *dir, const z3_cand *c, size_t n, gfs_layout **out)
{
	char newer[1024] = "", *note;
	size_t used = 0;
	gfs_err err = GFS_OK;
	size_t i;

	for (i = 0; i < n; i++) {
		err = import_save(c[i].path, NULL, out);
		if (!err)
			break;
		if (i < 3 && used < sizeof(newer))
			used += (size_t)snprintf(newer + used, sizeof(newer) - used, "%s%s (%.200s)",
						 i ? "; " : "", c[i].name, gfs_errmsg());
	}
	if (err)
		return gfs_fail(err, "%s: no complete save among its %zu: %s", dir, n, newer);
	if (asprintf(&note, "save '%s' in %s, the newest complete one%s%s%s; %s", c[i].name, dir,
		     i ? "; newer, not complete: " : "", newer, i > 3 ? " ..." : "",
		     (*out)->note ? (*out)->note : "") < 0)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!err) {
		err = gfs_layout_set_note(*out, note);
		free(note);
	}
	if (err) {
		gfs_layout_free(*out);
		*out = NULL;
	}
	return err;
}

gfs_err gfs_import_zero3(const char *dir, const char *tag, gfs_layout **out)
{
	z3_cand *c = NULL;
	size_t n = 0;
	char *path;
	gfs_err err;

	if (rank_files(dir, NULL)) /* a save written straight into dir (before tag directories) */
		return import_save(dir, tag, out);
	if (tag) {
		path = gfs_path_join(dir, *tag ? tag : Z3_UNTAGGED);
		if (!path)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		if (strchr(tag, '/') || tag[0] == '.' || !rank_files(path, NULL))
			err = gfs_fail(GFS_ERR_NOTFOUND, "%s: no save of tag '%s' (no directory %s "
				       "holding zero3-rank-* files)", dir, tag, path);
		else
			err = import_save(path, tag, out);
		free(path);
		return err;
	}
	err = list_saves(dir, &c, &n);
	if (!err && !n)
		err = gfs_fail(GFS_ERR_NOTFOUND, "%s: no zero3-rank-* files, in it or in a directory of it", dir);
	if (!err) {
		qsort(c, n, sizeof(*c), cmp_newest);
		err = pick(dir, c, n, out);
	}
	for (size_t i = 0; i < n; i++)
		free(c[i].path);
	free(c);
	return err;
}
