/*
 * gatherfs — layout index <-> JSON (schema: docs/layout-json.md).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/json.h"
#include "gatherfs/layout.h"

#define LAYOUT_MAGIC "gatherfs_layout"
#define LAYOUT_JSON_MAX ((uint64_t)1 << 31)

static cJSON *shape_json(const gfs_tensor *t)
{
	cJSON *arr = cJSON_CreateArray();

	for (uint32_t d = 0; arr && d < t->ndim; d++) {
		cJSON *v = gfs_json_u64_item(t->shape[d]);

		if (!v || !cJSON_AddItemToArray(arr, v)) {
			cJSON_Delete(v);
			cJSON_Delete(arr);
			return NULL;
		}
	}
	return arr;
}

/* tensor_is_general(): does t need version-2 pieces (explicit "at")? */
static bool tensor_is_general(const gfs_tensor *t)
{
	for (size_t p = 0; p < t->npieces; p++)
		if (t->pieces[p].count > 1 || t->pieces[p].kind == GFS_PIECE_ZSTD)
			return true;
	return false;
}

static cJSON *piece_json(const gfs_piece *p, bool general)
{
	cJSON *o = cJSON_CreateObject();
	bool ok = o != NULL;

	if (ok && general)
		ok = gfs_json_add_u64(o, "at", p->toff);
	if (ok && p->kind == GFS_PIECE_ZERO) {
		ok = gfs_json_add_u64(o, "zero", p->len);
	} else if (ok) {
		ok = gfs_json_add_u64(o, "source", p->src) &&
		     gfs_json_add_u64(o, "offset", p->src_off) &&
		     gfs_json_add_u64(o, "length", p->len);
	}
	if (ok && p->count > 1)
		ok = gfs_json_add_u64(o, "count", p->count) &&
		     gfs_json_add_u64(o, "dst_stride", p->dst_stride) &&
		     gfs_json_add_u64(o, "src_stride", p->src_stride);
	if (ok && p->kind == GFS_PIECE_ZSTD) {
		cJSON *z = cJSON_AddObjectToObject(o, "zstd");

		ok = z && gfs_json_add_u64(z, "offset", p->frame_off) &&
		     gfs_json_add_u64(z, "length", p->frame_len) &&
		     gfs_json_add_u64(z, "size", p->frame_size);
	}
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* compute_json(): the "compute" member of computed tensor t (version 3). */
static cJSON *compute_json(const gfs_layout *l, const gfs_compute *c)
{
	static const char *const roles[] = { "weight", "lora_A", "lora_B", "magnitude" };
	cJSON *o = cJSON_CreateObject();
	bool ok = o && cJSON_AddStringToObject(o, "op", gfs_op_name(c->op)) &&
		  cJSON_AddNumberToObject(o, "scale", c->scale) &&
		  cJSON_AddBoolToObject(o, "transpose", (c->flags & GFS_OPF_T) != 0);

	for (int k = 0; ok && k < GFS_OPIN_COUNT; k++)
		if (c->in[k] >= 0)
			ok = cJSON_AddStringToObject(o, roles[k], l->inputs->tensors[c->in[k]].name);
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static cJSON *tensor_json(const gfs_layout *l, const gfs_tensor *t)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *shape = NULL;
	cJSON *pieces = NULL;

	if (!o || !cJSON_AddStringToObject(o, "name", t->name))
		goto fail;
	if (t->alias_of >= 0) {
		if (!cJSON_AddStringToObject(o, "alias_of", l->tensors[t->alias_of].name))
			goto fail;
		return o;
	}
	if (!cJSON_AddStringToObject(o, "dtype", gfs_dtype_name(t->dtype)))
		goto fail;
	shape = shape_json(t);
	if (!shape || !cJSON_AddItemToObject(o, "shape", shape))
		goto fail;
	shape = NULL;
	if (t->comp) {
		cJSON *c = compute_json(l, t->comp);

		if (!c || !cJSON_AddItemToObject(o, "compute", c)) {
			cJSON_Delete(c);
			goto fail;
		}
		return o;
	}
	pieces = cJSON_CreateArray();
	if (!pieces || !cJSON_AddItemToObject(o, "pieces", pieces)) {
		cJSON_Delete(pieces);
		goto fail;
	}
	for (size_t p = 0; p < t->npieces; p++) {
		cJSON *pj = piece_json(&t->pieces[p], tensor_is_general(t));

		if (!pj || !cJSON_AddItemToArray(pieces, pj)) {
			cJSON_Delete(pj);
			goto fail;
		}
	}
	return o;
fail:
	cJSON_Delete(shape);
	cJSON_Delete(o);
	return NULL;
}

gfs_err gfs_layout_to_json(const gfs_layout *l, char **text)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *sources, *tensors;
	char *out;

	bool v2 = l->nobjects > 0;
	const bool v3 = l->inputs != NULL;

	for (size_t i = 0; i < l->ntensors && !v2; i++)
		v2 = tensor_is_general(&l->tensors[i]);
	if (!root)
		goto nomem;
	if (!gfs_json_add_u64(root, LAYOUT_MAGIC, v3 ? GFS_LAYOUT_VERSION_COMPUTE
						 : v2 ? 2 : GFS_LAYOUT_VERSION) ||
	    !cJSON_AddStringToObject(root, "format", l->format) ||
	    (l->info && !cJSON_AddStringToObject(root, "info", l->info)) ||
	    !cJSON_AddStringToObject(root, "base_dir", l->base_dir) ||
	    (l->root_dir && !cJSON_AddStringToObject(root, "root_dir", l->root_dir)))
		goto nomem;
	sources = cJSON_AddArrayToObject(root, "sources");
	tensors = cJSON_AddArrayToObject(root, "tensors");
	if (!sources || !tensors)
		goto nomem;
	for (size_t i = 0; i < l->nsources; i++) {
		cJSON *s = cJSON_CreateObject();

		if (!s || !cJSON_AddItemToArray(sources, s)) {
			cJSON_Delete(s);
			goto nomem;
		}
		if (!cJSON_AddStringToObject(s, "path", l->sources[i].path) ||
		    !gfs_json_add_u64(s, "size", l->sources[i].size))
			goto nomem;
	}
	for (size_t i = 0; i < l->ntensors; i++) {
		cJSON *t = tensor_json(l, &l->tensors[i]);

		if (!t || !cJSON_AddItemToArray(tensors, t)) {
			cJSON_Delete(t);
			goto nomem;
		}
	}
	if (v3) {
		cJSON *inputs = cJSON_AddArrayToObject(root, "inputs");

		if (!inputs)
			goto nomem;
		for (size_t i = 0; i < l->inputs->ntensors; i++) {
			cJSON *t = tensor_json(l->inputs, &l->inputs->tensors[i]);

			if (!t || !cJSON_AddItemToArray(inputs, t)) {
				cJSON_Delete(t);
				goto nomem;
			}
		}
	}
	if (l->nobjects) {
		cJSON *objects = cJSON_AddArrayToObject(root, "objects");

		if (!objects)
			goto nomem;
		for (size_t i = 0; i < l->nobjects; i++) {
			const gfs_object *ob = &l->objects[i];
			cJSON *o = cJSON_CreateObject();

			if (!o || !cJSON_AddItemToArray(objects, o)) {
				cJSON_Delete(o);
				goto nomem;
			}
			if (!cJSON_AddStringToObject(o, "name", ob->name) ||
			    !gfs_json_add_u64(o, "source", ob->src) ||
			    !gfs_json_add_u64(o, "offset", ob->src_off) ||
			    !gfs_json_add_u64(o, "length", ob->len))
				goto nomem;
		}
	}
	out = cJSON_Print(root);
	if (!out)
		goto nomem;
	cJSON_Delete(root);
	*text = out;
	return GFS_OK;
nomem:
	cJSON_Delete(root);
	return gfs_fail(GFS_ERR_NOMEM, "out of memory while writing the layout JSON");
}

static gfs_err parse_shape(const cJSON *shape, const char *label, const char *name,
			   uint32_t *ndim, uint64_t *dims)
{
	const cJSON *d;
	uint32_t n = 0;

	if (!cJSON_IsArray(shape))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: shape must be an array",
				label, name);
	cJSON_ArrayForEach(d, shape) {
		gfs_err err;

		if (n >= GFS_MAX_DIMS)
			return gfs_fail(GFS_ERR_LIMIT, "%s: tensor %s: more than %d dimensions",
					label, name, GFS_MAX_DIMS);
		err = gfs_json_u64(d, label, "a shape dimension", &dims[n]);
		if (err)
			return gfs_fail_prefix(err, "tensor %s", name);
		n++;
	}
	*ndim = n;
	return GFS_OK;
}

/* parse_general(): a piece with "at" (version 2: any order, strides, zstd). */
static gfs_err parse_general(gfs_layout *l, size_t ti, const cJSON *p, const char *label)
{
	const cJSON *zero = gfs_json_get(p, "zero");
	const cJSON *z = gfs_json_get(p, "zstd");
	gfs_piece pc = { .count = 1, .kind = zero ? GFS_PIECE_ZERO : GFS_PIECE_FILE };
	uint64_t src = 0;
	gfs_err err = gfs_json_u64(gfs_json_get(p, "at"), label, "piece at", &pc.toff);

	if (!err && zero) {
		err = gfs_json_u64(zero, label, "zero", &pc.len);
	} else if (!err) {
		err = gfs_json_u64(gfs_json_get(p, "source"), label, "piece source", &src);
		if (!err)
			err = gfs_json_u64(gfs_json_get(p, "offset"), label, "piece offset", &pc.src_off);
		if (!err)
			err = gfs_json_u64(gfs_json_get(p, "length"), label, "piece length", &pc.len);
		if (!err && src >= l->nsources)
			err = gfs_fail(GFS_ERR_FORMAT, "%s: piece source %llu out of range (%zu sources)",
				       label, (unsigned long long)src, l->nsources);
		pc.src = (uint32_t)src;
	}
	if (!err && gfs_json_get(p, "count")) {
		err = gfs_json_u64(gfs_json_get(p, "count"), label, "piece count", &pc.count);
		if (!err)
			err = gfs_json_u64(gfs_json_get(p, "dst_stride"), label, "piece dst_stride",
					   &pc.dst_stride);
		if (!err)
			err = gfs_json_u64(gfs_json_get(p, "src_stride"), label, "piece src_stride",
					   &pc.src_stride);
	}
	if (!err && z) {
		if (zero)
			return gfs_fail(GFS_ERR_FORMAT, "%s: a zero piece cannot be zstd", label);
		pc.kind = GFS_PIECE_ZSTD;
		err = gfs_json_u64(gfs_json_get(z, "offset"), label, "zstd offset", &pc.frame_off);
		if (!err)
			err = gfs_json_u64(gfs_json_get(z, "length"), label, "zstd length", &pc.frame_len);
		if (!err)
			err = gfs_json_u64(gfs_json_get(z, "size"), label, "zstd size", &pc.frame_size);
	}
	return err ? err : gfs_layout_add_general(l, ti, &pc);
}

static gfs_err parse_pieces(gfs_layout *l, size_t ti, const cJSON *pieces,
			    const char *label, const char *name)
{
	const cJSON *p;
	int general = -1; /* unknown, 0: all in order, 1: all with "at" */

	if (!cJSON_IsArray(pieces))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: pieces must be an array",
				label, name);
	cJSON_ArrayForEach(p, pieces) {
		const cJSON *zero = gfs_json_get(p, "zero");
		const int g = gfs_json_get(p, "at") != NULL;
		uint64_t src, off, len;
		gfs_err err;

		if (!cJSON_IsObject(p))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: a piece must be an object",
					label, name);
		if (general >= 0 && g != general)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: tensor %s: either every piece has \"at\" or none does",
					label, name);
		general = g;
		if (!g && (gfs_json_get(p, "count") || gfs_json_get(p, "zstd")))
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: tensor %s: a strided or zstd piece needs \"at\"", label, name);
		if (g) {
			err = parse_general(l, ti, p, label);
		} else if (zero) {
			err = gfs_json_u64(zero, label, "zero", &len);
			if (!err)
				err = gfs_layout_add_zero(l, ti, len);
		} else {
			err = gfs_json_u64(gfs_json_get(p, "source"), label, "piece source", &src);
			if (!err)
				err = gfs_json_u64(gfs_json_get(p, "offset"), label, "piece offset", &off);
			if (!err)
				err = gfs_json_u64(gfs_json_get(p, "length"), label, "piece length", &len);
			if (!err && src >= l->nsources)
				err = gfs_fail(GFS_ERR_FORMAT, "%s: piece source %llu out of range (%zu sources)",
					       label, (unsigned long long)src, l->nsources);
			if (!err)
				err = gfs_layout_add_piece(l, ti, (uint32_t)src, off, len);
		}
		if (err)
			return gfs_fail_prefix(err, "%s: tensor %s", label, name);
	}
	return GFS_OK;
}

static gfs_err parse_objects(gfs_layout *l, const cJSON *v, const char *label)
{
	const cJSON *o;

	if (!cJSON_IsArray(v))
		return gfs_fail(GFS_ERR_FORMAT, "%s: \"objects\" must be an array", label);
	cJSON_ArrayForEach(o, v) {
		const char *name;
		uint64_t src, off, len;
		gfs_err err = gfs_json_str(gfs_json_get(o, "name"), label, "object name", &name);

		if (!err)
			err = gfs_json_u64(gfs_json_get(o, "source"), label, "object source", &src);
		if (!err)
			err = gfs_json_u64(gfs_json_get(o, "offset"), label, "object offset", &off);
		if (!err)
			err = gfs_json_u64(gfs_json_get(o, "length"), label, "object length", &len);
		if (!err && src >= l->nsources)
			err = gfs_fail(GFS_ERR_FORMAT, "%s: object source %llu out of range (%zu sources)",
				       label, (unsigned long long)src, l->nsources);
		if (!err)
			err = gfs_layout_add_object(l, name, (uint32_t)src, off, len);
		if (err)
			return err;
	}
	return GFS_OK;
}

/* parse_compute(): the "compute" member of tensor ti (version 3). */
static gfs_err parse_compute(gfs_layout *l, size_t ti, const cJSON *c, const char *label,
			     const char *name)
{
	static const char *const roles[] = { "weight", "lora_A", "lora_B", "magnitude" };
	gfs_compute comp = { .in = { -1, -1, -1, -1 } };
	const cJSON *scale = gfs_json_get(c, "scale");
	const cJSON *tr = gfs_json_get(c, "transpose");
	const char *op;
	gfs_err err;

	if (!cJSON_IsObject(c))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: compute must be an object", label, name);
	err = gfs_json_str(gfs_json_get(c, "op"), label, "compute op", &op);
	if (err)
		return gfs_fail_prefix(err, "tensor %s", name);
	comp.op = gfs_op_parse(op);
	if (!comp.op)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: unknown compute op '%s'", label, name, op);
	if (!cJSON_IsNumber(scale))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: compute scale must be a number", label, name);
	comp.scale = scale->valuedouble;
	if (tr && !cJSON_IsBool(tr))
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: compute transpose must be true or false",
				label, name);
	if (tr && cJSON_IsTrue(tr))
		comp.flags |= GFS_OPF_T;
	for (int k = 0; k < GFS_OPIN_COUNT; k++) {
		const cJSON *v = gfs_json_get(c, roles[k]);
		const char *in;

		if (!v)
			continue;
		err = gfs_json_str(v, label, roles[k], &in);
		if (err)
			return gfs_fail_prefix(err, "tensor %s", name);
		comp.in[k] = l->inputs ? gfs_layout_find(l->inputs, in) : -1;
		if (comp.in[k] < 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: %s '%s' is not in \"inputs\"",
					label, name, roles[k], in);
	}
	return gfs_layout_set_compute(l, ti, &comp);
}

static gfs_err parse_tensor(gfs_layout *l, const cJSON *t, const char *label)
{
	const char *name, *alias, *dtname;
	uint64_t dims[GFS_MAX_DIMS];
	uint32_t ndim = 0;
	gfs_dtype dt;
	size_t ti;
	gfs_err err;

	if (!cJSON_IsObject(t))
		return gfs_fail(GFS_ERR_FORMAT, "%s: each tensor must be an object", label);
	err = gfs_json_str(gfs_json_get(t, "name"), label, "tensor name", &name);
	if (err)
		return err;
	if (gfs_json_get(t, "alias_of")) {
		err = gfs_json_str(gfs_json_get(t, "alias_of"), label, "alias_of", &alias);
		return err ? err : gfs_layout_add_alias(l, name, alias);
	}
	err = gfs_json_str(gfs_json_get(t, "dtype"), label, "dtype", &dtname);
	if (err)
		return gfs_fail_prefix(err, "tensor %s", name);
	dt = gfs_dtype_parse(dtname);
	if (dt == GFS_DT_INVALID)
		return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: unknown dtype '%s'",
				label, name, dtname);
	err = parse_shape(gfs_json_get(t, "shape"), label, name, &ndim, dims);
	if (!err)
		err = gfs_layout_add_tensor(l, name, dt, ndim, dims, &ti);
	if (!err && gfs_json_get(t, "compute")) {
		if (gfs_json_get(t, "pieces"))
			return gfs_fail(GFS_ERR_FORMAT, "%s: tensor %s: a computed tensor has no pieces",
					label, name);
		return parse_compute(l, ti, gfs_json_get(t, "compute"), label, name);
	}
	if (!err)
		err = parse_pieces(l, ti, gfs_json_get(t, "pieces"), label, name);
	return err;
}

static gfs_err parse_root(const cJSON *root, const char *label, const char *json_dir,
			  gfs_layout **out)
{
	const cJSON *v, *s, *t;
	const char *format = "json", *base_dir = json_dir, *str;
	uint64_t version;
	gfs_layout *l = NULL;
	gfs_err err;

	if (!cJSON_IsObject(root))
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a gatherfs layout (not a JSON object)", label);
	v = gfs_json_get(root, LAYOUT_MAGIC);
	if (!v)
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a gatherfs layout (no \"%s\" member)",
				label, LAYOUT_MAGIC);
	err = gfs_json_u64(v, label, LAYOUT_MAGIC, &version);
	if (err)
		return err;
	if (version < GFS_LAYOUT_VERSION || version > GFS_LAYOUT_VERSION_MAX)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: layout version %llu (this gatherfs reads %d to %d)",
				label, (unsigned long long)version, GFS_LAYOUT_VERSION,
				GFS_LAYOUT_VERSION_MAX);
	if (gfs_json_get(root, "format") &&
	    (err = gfs_json_str(gfs_json_get(root, "format"), label, "format", &format)))
		return err;
	if (gfs_json_get(root, "base_dir") &&
	    (err = gfs_json_str(gfs_json_get(root, "base_dir"), label, "base_dir", &base_dir)))
		return err;
	err = gfs_layout_new(format, base_dir, &l);
	if (err)
		return err;
	if (gfs_json_get(root, "info")) {
		err = gfs_json_str(gfs_json_get(root, "info"), label, "info", &str);
		if (!err)
			err = gfs_layout_set_info(l, str);
	}
	if (!err && gfs_json_get(root, "root_dir")) {
		err = gfs_json_str(gfs_json_get(root, "root_dir"), label, "root_dir", &str);
		if (!err)
			err = gfs_layout_set_root(l, str);
	}
	v = gfs_json_get(root, "sources");
	if (!err && !cJSON_IsArray(v))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: \"sources\" must be an array", label);
	if (!err) {
		cJSON_ArrayForEach(s, v) {
			const char *path;
			uint64_t size;
			uint32_t idx;

			err = gfs_json_str(gfs_json_get(s, "path"), label, "source path", &path);
			if (!err)
				err = gfs_json_u64(gfs_json_get(s, "size"), label, "source size", &size);
			if (!err)
				err = gfs_layout_add_source(l, path, size, &idx);
			if (err)
				break;
		}
	}
	v = gfs_json_get(root, "inputs");
	if (!err && v && version < GFS_LAYOUT_VERSION_COMPUTE)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: \"inputs\" needs layout version %d", label,
			       GFS_LAYOUT_VERSION_COMPUTE);
	if (!err && v && !cJSON_IsArray(v))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: \"inputs\" must be an array", label);
	if (!err && v) {
		err = gfs_layout_new("inputs", l->base_dir, &l->inputs);
		for (size_t i = 0; !err && i < l->nsources; i++) {
			uint32_t idx;

			err = gfs_layout_add_source(l->inputs, l->sources[i].path, l->sources[i].size,
						    &idx);
		}
		cJSON_ArrayForEach(t, v) {
			if (err)
				break;
			err = parse_tensor(l->inputs, t, label);
		}
		if (!err)
			err = gfs_layout_finish_inputs(l, label);
	}
	v = gfs_json_get(root, "tensors");
	if (!err && !cJSON_IsArray(v))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: \"tensors\" must be an array", label);
	if (!err) {
		cJSON_ArrayForEach(t, v) {
			err = parse_tensor(l, t, label);
			if (err)
				break;
		}
	}
	if (!err && gfs_json_get(root, "objects"))
		err = parse_objects(l, gfs_json_get(root, "objects"), label);
	if (!err)
		err = gfs_layout_finish(l, label);
	if (err) {
		gfs_layout_free(l);
		return err;
	}
	*out = l;
	return GFS_OK;
}

gfs_err gfs_layout_from_json(const char *text, size_t len, const char *label,
			     const char *json_dir, gfs_layout **out)
{
	cJSON *root;
	gfs_err err = gfs_json_parse(text, len, label, &root);

	if (err)
		return err;
	err = parse_root(root, label, json_dir, out);
	cJSON_Delete(root);
	return err;
}

gfs_err gfs_layout_load_file(const char *path, gfs_layout **out)
{
	struct stat st;
	char *text = NULL, *dir = NULL;
	gfs_err err;
	const int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO,
				"%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		err = gfs_fail(GFS_ERR_IO, "%s: stat failed: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > LAYOUT_JSON_MAX) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file of at most 2 GiB", path);
		goto out;
	}
	text = malloc((size_t)st.st_size + 1);
	dir = gfs_strdup(path);
	if (!text || !dir) {
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		goto out;
	}
	err = gfs_pread_full(fd, text, (size_t)st.st_size, 0, path);
	if (!err)
		err = gfs_layout_from_json(text, (size_t)st.st_size, path, dirname(dir), out);
out:
	free(text);
	free(dir);
	close(fd);
	return err;
}
