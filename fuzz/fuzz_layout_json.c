/*
 * gatherfs — libFuzzer target for the layout JSON loader.
 *
 * Parses the input as a layout; when it loads, checks the invariants the
 * byte server relies on (pieces tile each tensor, FILE pieces inside their
 * source, aliases point at tensors), serialises it and loads it again: the
 * round trip must be exact.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gatherfs/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_invariants(const gfs_layout *l)
{
	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];
		uint64_t covered = 0;

		if (t->alias_of >= 0) {
			if ((size_t)t->alias_of >= l->ntensors || l->tensors[t->alias_of].alias_of >= 0)
				abort();
			continue;
		}
		for (size_t p = 0; p < t->npieces; p++) {
			const gfs_piece *pc = &t->pieces[p];

			if (pc->toff != covered || pc->len == 0)
				abort();
			covered += pc->len;
			if (pc->kind == GFS_PIECE_FILE &&
			    (pc->src >= l->nsources || pc->src_off + pc->len > l->sources[pc->src].size))
				abort();
		}
		if (covered != t->nbytes || t->nbytes != t->numel * gfs_dtype_size(t->dtype))
			abort();
		if (gfs_layout_find(l, t->name) != (int64_t)i)
			abort();
	}
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
