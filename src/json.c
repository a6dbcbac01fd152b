/*
 * gatherfs — cJSON wrapper.
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gatherfs/json.h"

gfs_err gfs_json_parse(const char *text, size_t len, const char *label, cJSON **out)
{
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);

	if (!root) {
		const size_t at = end && end >= text ? (size_t)(end - text) : 0;

		return gfs_fail(GFS_ERR_FORMAT, "%s: invalid JSON near byte %zu", label, at);
	}
	*out = root;
	return GFS_OK;
}

const cJSON *gfs_json_get(const cJSON *obj, const char *key)
{
	if (!cJSON_IsObject(obj))
		return NULL;
	return cJSON_GetObjectItemCaseSensitive(obj, key);
}

gfs_err gfs_json_u64(const cJSON *v, const char *label, const char *what, uint64_t *out)
{
	double d;

	if (!cJSON_IsNumber(v))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s must be a number", label, what);
	d = v->valuedouble;
	if (!(d >= 0) || d > (double)GFS_JSON_MAX_INT || floor(d) != d)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s must be an integer between 0 and 2^53", label, what);
	*out = (uint64_t)d;
	return GFS_OK;
}

gfs_err gfs_json_str(const cJSON *v, const char *label, const char *what, const char **out)
{
	if (!cJSON_IsString(v) || !v->valuestring)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s must be a string", label, what);
	*out = v->valuestring;
	return GFS_OK;
}

cJSON *gfs_json_u64_item(uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	return cJSON_CreateRaw(buf);
}

bool gfs_json_add_u64(cJSON *obj, const char *key, uint64_t v)
{
	cJSON *item = gfs_json_u64_item(v);

	if (!item)
		return false;
	if (!cJSON_AddItemToObject(obj, key, item)) {
		cJSON_Delete(item);
		return false;
	}
	return true;
}
