/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — readers of torch's distributed tensors in a loaded pickle:
 * DTensor (gfs_pv_read_dtensor(): placements, device mesh, global shape)
 * and ShardedTensor (gfs_pv_read_stensor(): local shards and their
 * metadata), and gfs_pv_wrapper_class().  They read the inert OBJECTs the
 * VM built, recognise their classes through pickle_classes.c's table, and
 * refuse any shape they do not know with one line naming `what`.
 */
#include "config.h"

#include <assert.h>
#include <string.h>

#include "pickle_internal.h"

/*
 * state_field(), obj_field(): attribute key of a BUILD state (a dict, or a
 * (dict or None, slots dict or None) pair), of the OBJECT v's; NULL if
 * absent.
 */
static const gfs_pv *state_field(const gfs_pv *st, const char *key)
{
	if (!st)
		return NULL;
	if (st->kind == GFS_PV_DICT)
		return gfs_pv_dict_get(st, key);
	if (st->kind == GFS_PV_TUPLE && st->u.seq.len == 2) {
		const gfs_pv *r = gfs_pv_dict_get(st->u.seq.items[0], key);

		return r ? r : gfs_pv_dict_get(st->u.seq.items[1], key);
	}
	return NULL;
}

static const gfs_pv *obj_field(const gfs_pv *v, const char *key)
{
	return v && v->kind == GFS_PV_OBJECT ? state_field(v->u.obj.state, key) : NULL;
}

/* obj_class(): "module.Name" of an OBJECT's class, or its kind, for messages. */
static const char *obj_class(const gfs_pv *v)
{
	if (!v)
		return "nothing";
	if (v->kind == GFS_PV_OBJECT && v->u.obj.cls->kind == GFS_PV_GLOBAL)
		return gfs_pk_global_qualname(v->u.obj.cls);
	return gfs_pv_kind_name(v->kind);
}

/*
 * int_tuple(): the ints of a TUPLE or LIST v (at most max, each >= 0) into
 * out; false if v is not such a sequence.
 */
static bool int_tuple(const gfs_pv *v, size_t max, int64_t *out, uint32_t *n)
{
	if (!v || (v->kind != GFS_PV_TUPLE && v->kind != GFS_PV_LIST) || v->u.seq.len > max)
		return false;
	for (size_t i = 0; i < v->u.seq.len; i++)
		if (v->u.seq.items[i]->kind != GFS_PV_INT || v->u.seq.items[i]->u.i < 0)
			return false;
		else
			out[i] = v->u.seq.items[i]->u.i;
	*n = (uint32_t)v->u.seq.len;
	return true;
}

/*
 * wrapper_parts(): the parts of _rebuild_from_type_v2(
 * _rebuild_wrapper_subclass, CLS, (CLS, dtype, size, stride, ...), state):
 * *cls (the GLOBAL), *wargs (the inner tuple) and *state; false otherwise.
 */
static bool wrapper_parts(const gfs_pv *v, const gfs_pv **cls, const gfs_pv **wargs,
			  const gfs_pv **state)
{
	const gfs_pv *a;

	if (!v || v->kind != GFS_PV_OBJECT ||
	    !gfs_pk_is_class(v->u.obj.cls, GFS_PK_REBUILD_FROM_TYPE_V2))
		return false;
	a = v->u.obj.args;
	if (a->u.seq.len != 4 ||
	    !gfs_pk_is_class(a->u.seq.items[0], GFS_PK_REBUILD_WRAPPER_SUBCLASS) ||
	    a->u.seq.items[1]->kind != GFS_PV_GLOBAL || a->u.seq.items[2]->kind != GFS_PV_TUPLE)
		return false;
	*cls = a->u.seq.items[1];
	*wargs = a->u.seq.items[2];
	*state = a->u.seq.items[3];
	return true;
}

const char *gfs_pv_wrapper_class(const gfs_pv *v, const char **module)
{
	const gfs_pv *cls, *wargs, *state;

	if (!wrapper_parts(v, &cls, &wargs, &state))
		return NULL;
	if (module)
		*module = cls->u.global.module;
	return cls->u.global.name;
}

/*
 * wrapper_meta(): check the wrapper's arguments (CLS, dtype, size, stride,
 * storage_offset, layout, device, requires_grad): CLS again, a torch dtype,
 * matching size and stride; set the dtype name and the global shape.
 */
static gfs_err wrapper_meta(const gfs_pv *cls, const gfs_pv *wa, const char *what,
			    const char **dtype, uint32_t *ndim, int64_t *shape)
{
	int64_t stride[GFS_PV_MAX_DIMS];
	uint32_t ns = 0;
	const gfs_pv *dt;

	if (wa->u.seq.len < 5 || wa->u.seq.items[0] != cls)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a %s whose rebuild arguments are not (class, dtype, size, stride, offset, ...)",
				what, cls->u.global.name);
	dt = wa->u.seq.items[1];
	if (dt->kind != GFS_PV_GLOBAL || strcmp(dt->u.global.module, "torch") != 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a %s whose dtype is no torch dtype", what,
				cls->u.global.name);
	if (!int_tuple(wa->u.seq.items[2], GFS_PV_MAX_DIMS, shape, ndim) ||
	    !int_tuple(wa->u.seq.items[3], GFS_PV_MAX_DIMS, stride, &ns) || ns != *ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a %s whose size or stride is no tuple of up to %d non-negative ints (or they differ in length)",
				what, cls->u.global.name, GFS_PV_MAX_DIMS);
	*dtype = dt->u.global.name;
	return GFS_OK;
}

/* read_placement(): one of a DTensorSpec's placements. */
static gfs_err read_placement(const gfs_pv *p, const char *what, uint32_t ndim,
			      gfs_placement *out)
{
	const gfs_pv *dv;
	int64_t v;

	memset(out, 0, sizeof(*out));
	if (gfs_pk_is_object(p, GFS_PK_REPLICATE)) {
		out->kind = GFS_PL_REPLICATE;
		return GFS_OK;
	}
	if (gfs_pk_is_object(p, GFS_PK_PARTIAL) || gfs_pk_is_object(p, GFS_PK_PARTIAL_OLD)) {
		out->kind = GFS_PL_PARTIAL;
		return GFS_OK;
	}
	if (gfs_pk_is_object(p, GFS_PK_STRIDED_SHARD)) {
		out->kind = GFS_PL_STRIDED;
		if (!gfs_pv_int(obj_field(p, "split_factor"), &v) || v < 1)
			return gfs_fail(GFS_ERR_FORMAT, "%s: a _StridedShard placement without a positive split_factor",
					what);
		out->split_factor = v;
	} else if (gfs_pk_is_object(p, GFS_PK_SHARD)) {
		out->kind = GFS_PL_SHARD;
	} else {
		return gfs_fail(GFS_ERR_FORMAT, "%s: placement %s is none of Shard, Replicate, _StridedShard, Partial",
				what, obj_class(p));
	}
	dv = obj_field(p, "dim");
	if (!dv && p->u.obj.args->u.seq.len >= 1)
		dv = p->u.obj.args->u.seq.items[0];
	if (!gfs_pv_int(dv, &v))
		return gfs_fail(GFS_ERR_FORMAT, "%s: a Shard placement without an int dim", what);
	if (v < 0 || (uint64_t)v >= ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a Shard placement on dim %lld of a %u-dimensional tensor",
				what, (long long)v, ndim);
	out->dim = v;
	return GFS_OK;
}

/*
 * mesh_shape(): a DeviceMesh's shape: the shape of its `mesh` tensor
 * (torch <= 2.8), else the top-level sizes of its `_layout` (_MeshLayout
 * whose `axes` are _FlatLayouts: the product of each one's shape, () for
 * an axis of size 1).
 */
static gfs_err mesh_shape(const gfs_pv *mesh, const char *what, uint32_t *n, int64_t *shape)
{
	const gfs_pv *t = obj_field(mesh, "mesh"), *lay = obj_field(mesh, "_layout"), *axes;

	if (t && t->kind == GFS_PV_TENSOR) {
		if (t->u.tensor->ndim < 1 || t->u.tensor->ndim > GFS_PV_MAX_MESH)
			return gfs_fail(GFS_ERR_FORMAT, "%s: a device mesh of %u dimensions", what,
					t->u.tensor->ndim);
		*n = t->u.tensor->ndim;
		memcpy(shape, t->u.tensor->size, *n * sizeof(*shape));
		return GFS_OK;
	}
	if (!gfs_pk_is_object(lay, GFS_PK_MESH_LAYOUT))
		return gfs_fail(GFS_ERR_FORMAT, "%s: a device mesh with neither a mesh tensor nor a _MeshLayout (%s)",
				what, obj_class(lay));
	axes = obj_field(lay, "axes");
	if (!axes || axes->kind != GFS_PV_TUPLE || axes->u.seq.len < 1 ||
	    axes->u.seq.len > GFS_PV_MAX_MESH)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a _MeshLayout whose axes are no tuple of 1 to %d layouts",
				what, GFS_PV_MAX_MESH);
	for (size_t i = 0; i < axes->u.seq.len; i++) {
		const gfs_pv *ax = axes->u.seq.items[i];
		int64_t s[GFS_PV_MAX_DIMS];
		uint32_t k = 0;
		uint64_t prod = 1;

		if (!gfs_pk_is_object(ax, GFS_PK_FLAT_LAYOUT) ||
		    !int_tuple(obj_field(ax, "shape"), GFS_PV_MAX_DIMS, s, &k))
			return gfs_fail(GFS_ERR_FORMAT, "%s: mesh axis %zu is no _FlatLayout with a shape",
					what, i);
		for (uint32_t j = 0; j < k; j++)
			if (!gfs_mul_u64(prod, (uint64_t)s[j], &prod) || prod > INT32_MAX)
				return gfs_fail(GFS_ERR_FORMAT, "%s: mesh axis %zu is too large", what, i);
		shape[i] = (int64_t)prod;
	}
	*n = (uint32_t)axes->u.seq.len;
	return GFS_OK;
}

gfs_err gfs_pv_read_dtensor(const gfs_pv *v, const char *what, gfs_pv_dtensor *out)
{
	const gfs_pv *cls, *wa, *state, *lt, *spec, *mesh, *pls, *meta, *coord;
	int64_t mshape[GFS_PV_MAX_DIMS];
	uint32_t mn = 0, cn = 0;
	gfs_err err;

	memset(out, 0, sizeof(*out));
	if (!wrapper_parts(v, &cls, &wa, &state) || !gfs_pk_is_class(cls, GFS_PK_DTENSOR))
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a DTensor", what);
	err = wrapper_meta(cls, wa, what, &out->dtype, &out->ndim, out->shape);
	if (err)
		return err;
	lt = state_field(state, "_local_tensor");
	spec = state_field(state, "_spec");
	if (!lt || lt->kind != GFS_PV_TENSOR)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensor whose _local_tensor is %s, not a tensor",
				what, obj_class(lt));
	out->local = lt->u.tensor;
	if (!gfs_pk_is_object(spec, GFS_PK_DTENSOR_SPEC))
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensor whose _spec is %s, not a DTensorSpec",
				what, obj_class(spec));
	meta = obj_field(spec, "tensor_meta");
	if (meta && meta->kind != GFS_PV_NONE) {
		const gfs_pv *ma = meta->kind == GFS_PV_OBJECT ? meta->u.obj.args : NULL;

		if (!gfs_pk_is_object(meta, GFS_PK_TENSOR_META) || !ma || ma->u.seq.len < 1 ||
		    !int_tuple(ma->u.seq.items[0], GFS_PV_MAX_DIMS, mshape, &mn))
			return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensorSpec whose tensor_meta is %s, not a TensorMeta(shape, ...)",
					what, obj_class(meta));
		if (mn != out->ndim || memcmp(mshape, out->shape, mn * sizeof(*mshape)) != 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: the DTensor's size disagrees with its TensorMeta's shape",
					what);
	}
	mesh = obj_field(spec, "mesh");
	if (!gfs_pk_is_object(mesh, GFS_PK_DEVICE_MESH))
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensorSpec whose mesh is %s, not a DeviceMesh",
				what, obj_class(mesh));
	err = mesh_shape(mesh, what, &out->mesh_ndim, out->mesh);
	if (err)
		return err;
	for (uint32_t i = 0; i < out->mesh_ndim; i++)
		if (out->mesh[i] < 1 || out->mesh[i] > INT32_MAX)
			return gfs_fail(GFS_ERR_FORMAT, "%s: mesh dimension %u has size %lld", what, i,
					(long long)out->mesh[i]);
	coord = obj_field(mesh, "_coordinate_on_dim");
	if (!int_tuple(coord, GFS_PV_MAX_MESH, out->coord, &cn) || cn != out->mesh_ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DeviceMesh without its rank's coordinate (_coordinate_on_dim of %u ints)",
				what, out->mesh_ndim);
	for (uint32_t i = 0; i < cn; i++)
		if (out->coord[i] >= out->mesh[i])
			return gfs_fail(GFS_ERR_FORMAT, "%s: mesh coordinate %lld outside mesh dimension %u of size %lld",
					what, (long long)out->coord[i], i, (long long)out->mesh[i]);
	if (!gfs_pv_int(obj_field(mesh, "_rank"), &out->rank) || out->rank < 0)
		out->rank = -1;
	pls = obj_field(spec, "placements");
	if (!pls || pls->kind != GFS_PV_TUPLE || pls->u.seq.len != out->mesh_ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a DTensorSpec whose placements are no tuple of %u (one per mesh dimension)",
				what, out->mesh_ndim);
	for (uint32_t i = 0; i < out->mesh_ndim; i++) {
		err = read_placement(pls->u.seq.items[i], what, out->ndim, &out->pl[i]);
		if (err)
			return err;
	}
	return GFS_OK;
}

/* read_lshard(): a ShardedTensor's local Shard(tensor, ShardMetadata). */
static gfs_err read_lshard(const gfs_pv *s, const gfs_pv_stensor *st, const char *what,
			   gfs_pv_lshard *out)
{
	const gfs_pv *t = obj_field(s, "tensor"), *m = obj_field(s, "metadata"), *pl;
	uint32_t no = 0, ns = 0;
	int64_t r;

	if (!gfs_pk_is_object(s, GFS_PK_LOCAL_SHARD) || !t || t->kind != GFS_PV_TENSOR)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a local shard that is %s, not a Shard of a tensor",
				what, obj_class(s));
	if (!gfs_pk_is_object(m, GFS_PK_SHARD_METADATA) ||
	    !int_tuple(obj_field(m, "shard_offsets"), GFS_PV_MAX_DIMS, out->off, &no) ||
	    !int_tuple(obj_field(m, "shard_sizes"), GFS_PV_MAX_DIMS, out->size, &ns) ||
	    no != st->ndim || ns != st->ndim)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a local shard whose metadata is no ShardMetadata with %u offsets and sizes",
				what, st->ndim);
	for (uint32_t d = 0; d < st->ndim; d++)
		if (out->off[d] > st->shape[d] || out->size[d] > st->shape[d] - out->off[d])
			return gfs_fail(GFS_ERR_FORMAT, "%s: a local shard reaching past the tensor on dim %u",
					what, d);
	out->t = t->u.tensor;
	out->rank = -1;
	pl = obj_field(m, "placement");
	if (gfs_pk_is_object(pl, GFS_PK_REMOTE_DEVICE) && gfs_pv_int(obj_field(pl, "_rank"), &r))
		out->rank = r;
	return GFS_OK;
}

gfs_err gfs_pv_read_stensor(const gfs_pv *v, const char *what, gfs_pv_stensor *out)
{
	const gfs_pv *cls, *wa, *state, *shards;
	gfs_err err;

	memset(out, 0, sizeof(*out));
	if (!wrapper_parts(v, &cls, &wa, &state) || !gfs_pk_is_class(cls, GFS_PK_SHARDED_TENSOR))
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a ShardedTensor", what);
	err = wrapper_meta(cls, wa, what, &out->dtype, &out->ndim, out->shape);
	if (err)
		return err;
	if (state->kind != GFS_PV_TUPLE || state->u.seq.len < 2 ||
	    state->u.seq.items[0]->kind != GFS_PV_LIST)
		return gfs_fail(GFS_ERR_FORMAT, "%s: a ShardedTensor whose state is not (local_shards, metadata, ...)",
				what);
	shards = state->u.seq.items[0];
	if (shards->u.seq.len > GFS_PV_MAX_SHARDS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: a ShardedTensor with %zu local shards, more than %d",
				what, shards->u.seq.len, GFS_PV_MAX_SHARDS);
	for (size_t i = 0; i < shards->u.seq.len; i++) {
		err = read_lshard(shards->u.seq.items[i], out, what, &out->local[i]);
		if (err)
			return err;
	}
	out->nlocal = shards->u.seq.len;
	return GFS_OK;
}
