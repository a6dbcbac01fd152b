/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the classes and callables the safe pickle reader recognises,
 * and what REDUCE builds from them.
 *
 * classes[] below is the whole whitelist: every class or callable the
 * reader gives a meaning to, with each module torch has pickled it from.
 * Anything else is an inert OBJECT (pickle.h).  Recognising never runs
 * anything: gfs_pk_call() builds a dict for OrderedDict(), a set or
 * frozenset, the tuple of a torch.Size, an ENUM for getattr(cls, "name"),
 * a TENSOR for torch's tensor and parameter rebuild functions with a
 * storage persistent id ("storage", torch.<X>Storage, key, location,
 * numel); pickle_dist.c reads DTensor and ShardedTensor objects.
 */
#include "config.h"

#include <assert.h>
#include <string.h>

#include "pickle_internal.h"

#define MODS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* The whitelist: class, its name, the modules it is pickled from. */
static const struct {
	const char *name;
	const char *const *mods; /* NULL-terminated */
} classes[GFS_PK_NCLASSES] = {
	/* Python */
	[GFS_PK_ORDERED_DICT] = { "OrderedDict", MODS("collections") },
	[GFS_PK_SET] = { "set", MODS("builtins") },
	[GFS_PK_FROZENSET] = { "frozenset", MODS("builtins") },
	[GFS_PK_GETATTR] = { "getattr", MODS("builtins") },
	/* torch tensors and parameters */
	[GFS_PK_TORCH_SIZE] = { "Size", MODS("torch") },
	[GFS_PK_REBUILD_TENSOR_V2] = { "_rebuild_tensor_v2", MODS("torch._utils") },
	[GFS_PK_REBUILD_TENSOR_V3] = { "_rebuild_tensor_v3", MODS("torch._utils") },
	[GFS_PK_REBUILD_FROM_TYPE_V2] = { "_rebuild_from_type_v2", MODS("torch._tensor") },
	[GFS_PK_REBUILD_PARAMETER] = { "_rebuild_parameter", MODS("torch._utils") },
	[GFS_PK_REBUILD_PARAMETER_WITH_STATE] = { "_rebuild_parameter_with_state",
						   MODS("torch._utils") },
	[GFS_PK_REBUILD_WRAPPER_SUBCLASS] = { "_rebuild_wrapper_subclass", MODS("torch._utils") },
	/* DTensor */
	[GFS_PK_DTENSOR] = { "DTensor",
			     MODS("torch.distributed.tensor", "torch.distributed.tensor._api",
				  "torch.distributed._tensor", "torch.distributed._tensor.api") },
#define SPEC_MODS                                                                         \
	MODS("torch.distributed.tensor._dtensor_spec", "torch.distributed._tensor._dtensor_spec", \
	     "torch.distributed._tensor.placement_types")
	[GFS_PK_DTENSOR_SPEC] = { "DTensorSpec", SPEC_MODS },
	[GFS_PK_TENSOR_META] = { "TensorMeta", SPEC_MODS },
#define PLACE_MODS                                                                            \
	MODS("torch.distributed.tensor.placement_types", "torch.distributed._tensor.placement_types", \
	     "torch.distributed.tensor._utils")
	[GFS_PK_REPLICATE] = { "Replicate", PLACE_MODS },
	[GFS_PK_PARTIAL] = { "Partial", PLACE_MODS },
	[GFS_PK_PARTIAL_OLD] = { "_Partial", PLACE_MODS },
	[GFS_PK_STRIDED_SHARD] = { "_StridedShard", PLACE_MODS },
	[GFS_PK_SHARD] = { "Shard", PLACE_MODS },
	[GFS_PK_DEVICE_MESH] = { "DeviceMesh",
				 MODS("torch.distributed.device_mesh", "torch.distributed._device_mesh") },
	[GFS_PK_MESH_LAYOUT] = { "_MeshLayout", MODS("torch.distributed._mesh_layout") },
	[GFS_PK_FLAT_LAYOUT] = { "_FlatLayout", MODS("torch.distributed._mesh_layout") },
	/* ShardedTensor */
	[GFS_PK_SHARDED_TENSOR] = { "ShardedTensor",
				    MODS("torch.distributed._shard.sharded_tensor.api",
					 "torch.distributed._sharded_tensor.api") },
	[GFS_PK_LOCAL_SHARD] = { "Shard", MODS("torch.distributed._shard.sharded_tensor.shard",
					       "torch.distributed._sharded_tensor.shard") },
	[GFS_PK_SHARD_METADATA] = { "ShardMetadata",
				    MODS("torch.distributed._shard.metadata",
					 "torch.distributed._shard.sharding_spec.api",
					 "torch.distributed._shard.sharding_spec") },
	[GFS_PK_REMOTE_DEVICE] = { "_remote_device", MODS("torch.distributed.remote_device") },
#undef SPEC_MODS
#undef PLACE_MODS
};

bool gfs_pk_is_class(const gfs_pv *v, gfs_pk_class c)
{
	assert((unsigned)c < GFS_PK_NCLASSES);
	for (const char *const *mod = classes[c].mods; *mod; mod++)
		if (gfs_pv_is_global(v, *mod, classes[c].name))
			return true;
	return false;
}

bool gfs_pk_is_object(const gfs_pv *v, gfs_pk_class c)
{
	return v && v->kind == GFS_PV_OBJECT && gfs_pk_is_class(v->u.obj.cls, c);
}

static bool is_cstr(const gfs_pv *v)
{
	return v->kind == GFS_PV_STR && !memchr(v->u.s.ptr, '\0', v->u.s.len);
}

/* read_dims(): a size or stride tuple of make_tensor(). */
static gfs_err read_dims(const vm *m, const gfs_pv *t, const char *what, int64_t *dims)
{
	for (size_t i = 0; i < t->u.seq.len; i++) {
		const gfs_pv *const d = t->u.seq.items[i];

		if (d->kind != GFS_PV_INT)
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "tensor %s[%zu] is a %s, not an int", what, i,
					    gfs_pv_kind_name(d->kind));
		if (d->u.i < 0)
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "tensor %s[%zu] is negative (%lld)", what, i,
					    (long long)d->u.i);
		dims[i] = d->u.i;
	}
	return GFS_OK;
}

/*
 * make_tensor(): _rebuild_tensor_v2/v3(persid, offset, size, stride,
 * requires_grad, hooks[, dtype][, metadata]).  *out stays NULL when the
 * arguments do not have that shape.
 */
static gfs_err make_tensor(vm *m, const gfs_pv *args, bool v3, gfs_pv **out)
{
	const size_t n = args->u.seq.len;
	gfs_pv *const *const a = args->u.seq.items;
	const gfs_pv *pid = NULL, *cls = NULL, *key = NULL, *loc = NULL, *numel = NULL;
	const gfs_pv *dtype = NULL;
	gfs_pv_tensor *t;
	void *mem = NULL;
	gfs_err err;

	*out = NULL;
	if (n != (v3 ? 7u : 6u) && n != (v3 ? 8u : 7u))
		return GFS_OK;
	if (a[0]->kind != GFS_PV_PERSID || a[1]->kind != GFS_PV_INT ||
	    a[2]->kind != GFS_PV_TUPLE || a[3]->kind != GFS_PV_TUPLE || a[4]->kind != GFS_PV_BOOL)
		return GFS_OK;
	if (v3) {
		dtype = a[6];
		if (dtype->kind != GFS_PV_GLOBAL || strcmp(dtype->u.global.module, "torch") != 0)
			return GFS_OK;
	}
	pid = a[0]->u.persid;
	if (pid->kind != GFS_PV_TUPLE || pid->u.seq.len != 5)
		return GFS_OK;
	cls = pid->u.seq.items[1];
	key = pid->u.seq.items[2];
	loc = pid->u.seq.items[3];
	numel = pid->u.seq.items[4];
	/* v3 (FP8 and other dtypes without a typed storage): torch.storage.UntypedStorage,
	 * its numel in bytes, as torch 2.1+ writes it */
	if (!gfs_pk_str_eq(pid->u.seq.items[0], "storage", 7) || cls->kind != GFS_PV_GLOBAL ||
	    (strcmp(cls->u.global.module, "torch") != 0 &&
	     !(v3 && gfs_pv_is_global(cls, "torch.storage", "UntypedStorage"))) || key->kind != GFS_PV_STR ||
	    loc->kind != GFS_PV_STR || numel->kind != GFS_PV_INT)
		return GFS_OK;

	if (!is_cstr(key) || !is_cstr(loc))
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "tensor storage key or location contains a NUL byte");
	if (numel->u.i < 0)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "tensor storage numel is negative (%lld)",
				    (long long)numel->u.i);
	if (a[1]->u.i < 0)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "tensor storage offset is negative (%lld)",
				    (long long)a[1]->u.i);
	if (a[2]->u.seq.len != a[3]->u.seq.len)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "tensor has %zu sizes but %zu strides",
				    a[2]->u.seq.len, a[3]->u.seq.len);
	if (a[2]->u.seq.len > GFS_PV_MAX_DIMS)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "tensor has %zu dimensions, more than %d",
				    a[2]->u.seq.len, GFS_PV_MAX_DIMS);
	err = gfs_pk_vm_zalloc(m, sizeof(*t), &mem);
	if (err)
		return err;
	t = mem;
	if (a[2]->u.seq.len > 0) {
		int64_t *dims;

		err = gfs_pk_vm_alloc(m, 2 * a[2]->u.seq.len * sizeof(*dims), &mem);
		if (err)
			return err;
		dims = mem;
		err = read_dims(m, a[2], "size", dims);
		if (!err)
			err = read_dims(m, a[3], "stride", dims + a[2]->u.seq.len);
		if (err)
			return err;
		t->size = dims;
		t->stride = dims + a[2]->u.seq.len;
	}
	t->storage.cls = cls->u.global.name;
	t->storage.key = key->u.s.ptr;
	t->storage.location = loc->u.s.ptr;
	t->storage.numel = numel->u.i;
	t->dtype = dtype ? dtype->u.global.name : NULL;
	t->offset = a[1]->u.i;
	t->ndim = (uint32_t)a[2]->u.seq.len;
	t->requires_grad = a[4]->u.b;
	err = gfs_pk_new_node(m, GFS_PV_TENSOR, out);
	if (!err)
		(*out)->u.tensor = t;
	return err;
}

static gfs_err make_set(vm *m, bool frozen, const gfs_pv *src, gfs_pv **out)
{
	gfs_err err = gfs_pk_new_set(m, frozen, out);

	for (size_t i = 0; !err && src && i < src->u.seq.len; i++)
		err = gfs_pk_set_add(m, *out, src->u.seq.items[i]);
	return err;
}

/*
 * gfs_pk_call(): the value of fn(*args) (REDUCE): the interpreted callables listed
 * in pickle.h and classes[], otherwise an inert OBJECT.
 */
gfs_err gfs_pk_call(vm *m, gfs_pv *fn, gfs_pv *args, gfs_pv **out)
{
	const size_t n = args->u.seq.len;
	gfs_pv *const *const a = args->u.seq.items;
	const bool frozen = gfs_pk_is_class(fn, GFS_PK_FROZENSET);
	const bool v3 = gfs_pk_is_class(fn, GFS_PK_REBUILD_TENSOR_V3);
	gfs_err err;

	assert(args->kind == GFS_PV_TUPLE);
	if (fn->kind != GFS_PV_GLOBAL)
		return gfs_pk_new_object(m, fn, args, out);
	if (gfs_pk_is_class(fn, GFS_PK_ORDERED_DICT) && n == 0)
		return gfs_pk_new_dict(m, out);
	if ((frozen || gfs_pk_is_class(fn, GFS_PK_SET)) &&
	    (n == 0 || (n == 1 && gfs_pk_is_seq(a[0]))))
		return make_set(m, frozen, n ? a[0] : NULL, out);
	if (gfs_pk_is_class(fn, GFS_PK_TORCH_SIZE) && n == 1 && a[0]->kind == GFS_PV_TUPLE) {
		*out = a[0];
		return GFS_OK;
	}
	if (gfs_pk_is_class(fn, GFS_PK_TORCH_SIZE) && n == 1 && a[0]->kind == GFS_PV_LIST)
		return gfs_pk_new_tuple(m, a[0]->u.seq.items, a[0]->u.seq.len, out);
	if (gfs_pk_is_class(fn, GFS_PK_GETATTR) && n == 2 &&
	    a[0]->kind == GFS_PV_GLOBAL && is_cstr(a[1])) {
		err = gfs_pk_new_node(m, GFS_PV_ENUM, out);
		if (!err) {
			(*out)->u.enm.cls = a[0];
			(*out)->u.enm.member = a[1]->u.s.ptr;
		}
		return err;
	}
	if (v3 || gfs_pk_is_class(fn, GFS_PK_REBUILD_TENSOR_V2)) {
		err = make_tensor(m, args, v3, out);
		if (err || *out)
			return err;
	}
	/* torch 2.x pickles tensors of subclasses and tensors with Python
	 * attributes (DeepSpeed's ds_id) as _rebuild_from_type_v2(func, type,
	 * args, state): the tensor is func(*args). */
	if (gfs_pk_is_class(fn, GFS_PK_REBUILD_FROM_TYPE_V2) && n == 4 &&
	    a[2]->kind == GFS_PV_TUPLE &&
	    (gfs_pk_is_class(a[0], GFS_PK_REBUILD_TENSOR_V2) ||
	     gfs_pk_is_class(a[0], GFS_PK_REBUILD_TENSOR_V3))) {
		err = make_tensor(m, a[2],
				  gfs_pk_is_class(a[0], GFS_PK_REBUILD_TENSOR_V3), out);
		if (err || *out)
			return err;
	}
	if (((gfs_pk_is_class(fn, GFS_PK_REBUILD_PARAMETER) && n == 3) ||
	     (gfs_pk_is_class(fn, GFS_PK_REBUILD_PARAMETER_WITH_STATE) && n == 4)) &&
	    a[0]->kind == GFS_PV_TENSOR) {
		*out = a[0];
		return GFS_OK;
	}
	return gfs_pk_new_object(m, fn, args, out);
}

