/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the pickle reader.
 *
 * Loads the input with small limits and walks the resulting value through
 * the public accessors.  Memo references make the value a DAG and may make
 * it cyclic, so the walk is bounded both in depth and in visited nodes.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gatherfs/readers/pickle.h"

#define WALK_MAX_DEPTH 64
#define WALK_MAX_NODES 100000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

static void walk(const gfs_pv *v, unsigned depth, size_t *budget);

static void walk_tensor(const gfs_pv_tensor *t)
{
	sink += strlen(t->storage.cls) + strlen(t->storage.key) + strlen(t->storage.location);
	sink += (size_t)t->storage.numel + (size_t)t->offset + t->requires_grad;
	if (t->dtype)
		sink += strlen(t->dtype);
	for (uint32_t i = 0; i < t->ndim && i < GFS_PV_MAX_DIMS; i++)
		sink += (size_t)t->size[i] + (size_t)t->stride[i];
}

static void walk_enum(const gfs_pv *v)
{
	const char *mod = NULL, *name = NULL, *member = NULL;
	int64_t value = 0;
	bool has_value = false;

	if (!gfs_pv_enum(v, &mod, &name, &member, &value, &has_value))
		return;
	sink += strlen(mod) + strlen(name);
	if (has_value)
		sink += (size_t)value;
	else
		sink += strlen(member);
}

static void walk(const gfs_pv *v, unsigned depth, size_t *budget)
{
	int64_t i64;
	size_t n;

	if (!v || depth > WALK_MAX_DEPTH || *budget == 0)
		return;
	(*budget)--;
	sink += strlen(gfs_pv_kind_name(v->kind));
	if (gfs_pv_int(v, &i64))
		sink += (size_t)i64;
	if (gfs_pv_str(v))
		sink += strlen(gfs_pv_str(v));
	sink += gfs_pv_is_global(v, "builtins", "set");
	walk_enum(v);
	n = gfs_pv_seq_len(v);
	for (size_t i = 0; i < n; i++)
		walk(gfs_pv_seq_at(v, i), depth + 1, budget);
	switch (v->kind) {
	case GFS_PV_BIGINT:
	case GFS_PV_BYTES:
		if (v->u.s.len)
			sink += (uint8_t)v->u.s.ptr[v->u.s.len - 1];
		break;
	case GFS_PV_DICT:
		walk(gfs_pv_dict_get(v, "state"), depth + 1, budget);
		for (size_t i = 0; i < v->u.dict.len; i++) {
			walk(v->u.dict.items[i].key, depth + 1, budget);
			walk(v->u.dict.items[i].value, depth + 1, budget);
		}
		break;
	case GFS_PV_GLOBAL:
		sink += strlen(v->u.global.module) + strlen(v->u.global.name);
		break;
	case GFS_PV_OBJECT:
		walk(v->u.obj.cls, depth + 1, budget);
		walk(v->u.obj.args, depth + 1, budget);
		walk(v->u.obj.state, depth + 1, budget);
		walk(v->u.obj.items, depth + 1, budget);
		walk(v->u.obj.list, depth + 1, budget);
		break;
	case GFS_PV_PERSID:
		walk(v->u.persid, depth + 1, budget);
		break;
	case GFS_PV_TENSOR:
		walk_tensor(v->u.tensor);
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const gfs_pickle_limits lim = {
		.max_depth = 1000,
		.max_memo = 1 << 16,
		.max_bytes = (size_t)64 << 20,
	};
	gfs_pickle *p = NULL;
	size_t budget = WALK_MAX_NODES;

	if (gfs_pickle_load(data, size, "fuzz", &lim, &p) == GFS_OK) {
		walk(gfs_pickle_root(p), 0, &budget);
		gfs_pickle_free(p);
	} else {
		sink += strlen(gfs_errmsg());
	}
	return 0;
}
