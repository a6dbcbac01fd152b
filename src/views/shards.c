/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — HF-style shard planning and index files.
 */
#include "config.h"

#include <assert.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/util/json.h"
#include "gatherfs/server/server.h"
#include "gatherfs/views/shards.h"

void gfs_shard_plan_free(gfs_shard_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nshards; i++)
		free(p->shards[i].entries);
	free(p->shards);
	free(p);
}

gfs_err gfs_shard_plan_new(const gfs_layout *l, gfs_dtype want, uint64_t max_bytes,
			   gfs_shard_plan **out)
{
	gfs_shard_plan *p = calloc(1, sizeof(*p));
	size_t *shard_of = gfs_calloc(l->ntensors, sizeof(*shard_of));
	size_t *fill = NULL;

	assert(l->finished && max_bytes > 0);
	if (!p || !shard_of)
		goto nomem;
	/* First pass: assign tensors with data, greedily in model order. */
	for (size_t i = 0; i < l->ntensors; i++) {
		const uint64_t n = gfs_tensor_out_nbytes(l, i, want);
		gfs_shard *cur;

		if (l->tensors[i].alias_of >= 0)
			continue;
		cur = p->nshards ? &p->shards[p->nshards - 1] : NULL;
		if (!cur || (cur->n > 0 && cur->nbytes + n > max_bytes)) {
			gfs_shard *s = gfs_reallocarray(p->shards, p->nshards + 1, sizeof(*s));

			if (!s)
				goto nomem;
			p->shards = s;
			cur = &p->shards[p->nshards++];
			memset(cur, 0, sizeof(*cur));
		}
		cur->n++;
		cur->nbytes += n;
		p->total_size += n;
		shard_of[i] = p->nshards - 1;
	}
	if (p->nshards == 0) {
		p->shards = calloc(1, sizeof(*p->shards));
		if (!p->shards)
			goto nomem;
		p->nshards = 1;
	}
	for (size_t i = 0; i < l->ntensors; i++)
		if (l->tensors[i].alias_of >= 0) {
			shard_of[i] = shard_of[l->tensors[i].alias_of];
			p->shards[shard_of[i]].n++;
		}
	/* Second pass: fill the entry lists in model order. */
	fill = gfs_calloc(p->nshards, sizeof(*fill));
	if (!fill)
		goto nomem;
	for (size_t s = 0; s < p->nshards; s++) {
		p->shards[s].entries = gfs_calloc(p->shards[s].n, sizeof(size_t));
		if (!p->shards[s].entries)
			goto nomem;
	}
	for (size_t i = 0; i < l->ntensors; i++) {
		gfs_shard *s = &p->shards[shard_of[i]];

		s->entries[fill[shard_of[i]]++] = i;
	}
	free(fill);
	free(shard_of);
	*out = p;
	return GFS_OK;
nomem:
	free(fill);
	free(shard_of);
	gfs_shard_plan_free(p);
	return gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

gfs_err gfs_shard_name(const gfs_shard_plan *p, size_t i, const char *stem,
		       const char *ext, char **out)
{
	const size_t n = strlen(stem) + strlen(ext) + 64;
	char *s = malloc(n);

	assert(i < p->nshards);
	if (!s)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	snprintf(s, n, "%s-%05zu-of-%05zu%s", stem, i + 1, p->nshards, ext);
	*out = s;
	return GFS_OK;
}

gfs_err gfs_shard_index_json(const gfs_layout *l, const gfs_shard_plan *p, const char *stem,
			     const char *ext, bool with_aliases, char **out)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
	cJSON *map = cJSON_AddObjectToObject(root, "weight_map");
	char *text;

	if (!root || !meta || !map || !gfs_json_add_u64(meta, "total_size", p->total_size))
		goto nomem;
	for (size_t s = 0; s < p->nshards; s++) {
		char *name;

		if (gfs_shard_name(p, s, stem, ext, &name))
			goto nomem;
		for (size_t k = 0; k < p->shards[s].n; k++) {
			const gfs_tensor *t = &l->tensors[p->shards[s].entries[k]];

			if (t->alias_of >= 0 && !with_aliases)
				continue;
			if (!cJSON_AddStringToObject(map, t->name, name)) {
				free(name);
				goto nomem;
			}
		}
		free(name);
	}
	text = cJSON_Print(root);
	if (!text)
		goto nomem;
	cJSON_Delete(root);
	*out = text;
	return GFS_OK;
nomem:
	cJSON_Delete(root);
	return gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

gfs_err gfs_parse_size(const char *s, uint64_t *out)
{
	static const struct {
		const char *suffix;
		double mult;
	} units[] = {
		{ "", 1 }, { "B", 1 },
		{ "K", 1e3 }, { "KB", 1e3 }, { "M", 1e6 }, { "MB", 1e6 },
		{ "G", 1e9 }, { "GB", 1e9 }, { "T", 1e12 }, { "TB", 1e12 },
		{ "KI", 1024.0 }, { "KIB", 1024.0 }, { "MI", 1048576.0 }, { "MIB", 1048576.0 },
		{ "GI", 1073741824.0 }, { "GIB", 1073741824.0 },
		{ "TI", 1099511627776.0 }, { "TIB", 1099511627776.0 },
	};
	char *end;
	char suffix[8];
	size_t n = 0;
	double v;

	if (!s || !isdigit((unsigned char)*s))
		return gfs_fail(GFS_ERR_INVAL, "bad size '%s' (e.g. 5G, 500MB, 2GiB)", s ? s : "");
	v = strtod(s, &end);
	while (*end && n < sizeof(suffix) - 1)
		suffix[n++] = (char)toupper((unsigned char)*end++);
	suffix[n] = '\0';
	for (size_t i = 0; !*end && i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(suffix, units[i].suffix) == 0) {
			const double bytes = floor(v * units[i].mult);

			if (!(bytes >= 1) || bytes > 9.0e18)
				break;
			*out = (uint64_t)bytes;
			return GFS_OK;
		}
	}
	return gfs_fail(GFS_ERR_INVAL, "bad size '%s' (e.g. 5G, 500MB, 2GiB)", s);
}
