/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the layout JSON loader.
 *
 * Parses the input as a layout; when it loads, checks the invariants the
 * byte server relies on (pieces sorted by offset, with their reach, tile
 * each tensor exactly, also when strided; FILE pieces inside their source,
 * ZSTD pieces inside their frame and the frame inside its source; objects
 * inside their source; aliases point at tensors), serialises it and loads it again: the
 * round trip must be exact.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/index/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * check_tiling(): every byte of t is in exactly one run (brute force over a
 * byte map; tensors above 1 MiB are only checked by their pieces' bounds).
 */
static void check_tiling(const gfs_tensor *t)
{
	uint8_t *seen;

	if (t->nbytes > (1u << 20))
		return;
	seen = calloc(t->nbytes + 1, 1);
	if (!seen)
		abort();
	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece pcv = gfs_tensor_piece(t, p), *pc = &pcv;

		for (uint64_t k = 0; k < pc->count; k++)
			for (uint64_t b = 0; b < pc->len; b++) {
				const uint64_t at = pc->toff + k * pc->dst_stride + b;

				if (at >= t->nbytes || seen[at])
					abort();
				seen[at] = 1;
			}
	}
	for (uint64_t b = 0; b < t->nbytes; b++)
		if (!seen[b])
			abort();
	free(seen);
}

static void check_invariants(const gfs_layout *l)
{
	/* the operands of computed tensors: a finished layout of their own */
	if (l->inputs) {
		if (!l->inputs->finished || l->inputs->nsources != l->nsources)
			abort();
		check_invariants(l->inputs);
	}
	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];
		uint64_t reach = 0;

		if (t->alias_of >= 0) {
			if ((size_t)t->alias_of >= l->ntensors || l->tensors[t->alias_of].alias_of >= 0)
				abort();
			continue;
		}
		if (t->comp) {
			if (t->npieces || !l->inputs || !isfinite(t->comp->scale))
				abort();
			for (int k = 0; k < GFS_OPIN_COUNT; k++)
				if (t->comp->in[k] >= (int64_t)l->inputs->ntensors)
					abort();
			if (gfs_layout_find(l, t->name) != (int64_t)i)
				abort();
			continue;
		}
		for (size_t p = 0; p < t->npieces; p++) {
			const gfs_piece pcv = gfs_tensor_piece(t, p), *pc = &pcv;

			if (pc->len == 0 || pc->count == 0 || gfs_piece_end(pc) > t->nbytes ||
			    (p > 0 && pc->toff < t->slots[p - 1].toff))
				abort();
			if (pc->count > 1 && (pc->dst_stride <= pc->len || pc->src_stride < pc->len))
				abort();
			if (gfs_piece_end(pc) > reach)
				reach = gfs_piece_end(pc);
			if (pc->reach != reach)
				abort();
			if (pc->kind == GFS_PIECE_FILE &&
			    (pc->src >= l->nsources || gfs_piece_src_end(pc) > l->sources[pc->src].size))
				abort();
			if (pc->kind == GFS_PIECE_ZSTD &&
			    (pc->src >= l->nsources || gfs_piece_src_end(pc) > pc->frame_size ||
			     pc->frame_off + pc->frame_len > l->sources[pc->src].size))
				abort();
		}
		check_tiling(t);
		if (t->nbytes != t->numel * gfs_dtype_size(t->dtype))
			abort();
		if (gfs_layout_find(l, t->name) != (int64_t)i)
			abort();
	}
	for (size_t i = 0; i < l->nobjects; i++)
		if (l->objects[i].src >= l->nsources ||
		    l->objects[i].src_off + l->objects[i].len > l->sources[l->objects[i].src].size)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_layout *l = NULL, *l2 = NULL;
	char *a = NULL, *b = NULL;

	if (gfs_layout_from_json((const char *)data, size, "fuzz.json", "/fuzz", &l) != GFS_OK) {
		if (l || !gfs_errmsg()[0])
			abort();
		return 0;
	}
	check_invariants(l);
	if (gfs_layout_to_json(l, &a) == GFS_OK) {
		if (gfs_layout_from_json(a, strlen(a), "again.json", "/fuzz", &l2) != GFS_OK)
			abort();
		if (gfs_layout_to_json(l2, &b) != GFS_OK || strcmp(a, b) != 0)
			abort();
	}
	free(a);
	free(b);
	gfs_layout_free(l);
	gfs_layout_free(l2);
	return 0;
}
