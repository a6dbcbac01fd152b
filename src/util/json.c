/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — cJSON wrapper.
 */
#include "config.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/util/json.h"

/* Where a member sits, for messages: "tensors[3].pieces[0]" (cut if long). */
#define WHERE_MAX 192

/* shown(): s for a one-line message: control bytes as '?', cut at 64 bytes. */
static void shown(const char *s, char *buf, size_t n)
{
	size_t i = 0;

	assert(n > 4);
	for (; s[i] && i < n - 1; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = '\0';
	if (s[i])
		memcpy(buf + n - 4, "...", 4);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * no_duplicates(): fail on an object member that appears twice, anywhere
 * below v.  where[0..used) names v.  Recursion is bounded by cJSON's
 * nesting limit (CJSON_NESTING_LIMIT).
 */
static gfs_err no_duplicates(const cJSON *v, const char *label, char *where, size_t used)
{
	const cJSON *c;
	size_t n = 0, i = 0;

	if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
		return GFS_OK;
	cJSON_ArrayForEach(c, v)
		n++;
	if (cJSON_IsObject(v) && n > 1) {
		const char **names = malloc(n * sizeof(*names));
		const char *dup = NULL;

		if (!names)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		cJSON_ArrayForEach(c, v)
			names[i++] = c->string ? c->string : "";
		qsort(names, n, sizeof(*names), cmp_names);
		for (i = 1; i < n && !dup; i++)
			if (strcmp(names[i - 1], names[i]) == 0)
				dup = names[i];
		if (dup) {
			char name[64];

			shown(dup, name, sizeof(name));
			free(names);
			return gfs_fail(GFS_ERR_FORMAT, "%s: member \"%s\" appears twice in %s", label,
					name, used ? where : "the top-level object");
		}
		free(names);
	}
	i = 0;
	cJSON_ArrayForEach(c, v) {
		size_t u = used;
		gfs_err err;

		if (u < WHERE_MAX) {
			char name[64];

			if (cJSON_IsArray(v)) {
				u += (size_t)snprintf(where + u, WHERE_MAX - u, "[%zu]", i);
			} else {
				shown(c->string ? c->string : "", name, sizeof(name));
				u += (size_t)snprintf(where + u, WHERE_MAX - u, "%s%s", u ? "." : "",
						      name);
			}
			if (u >= WHERE_MAX)
				u = WHERE_MAX - 1;
		}
		err = no_duplicates(c, label, where, u);
		where[used] = '\0';
		if (err)
			return err;
		i++;
	}
	return GFS_OK;
}

/*
 * nul_escape(): where valid JSON text[0..len) has a \u0000 escape (cJSON
 * would end the string there, cutting a name short), or len.  In valid
 * JSON a backslash only starts an escape inside a string.
 */
static size_t nul_escape(const char *text, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (text[i] != '\\')
			continue;
		if (text[i + 1] == 'u' && len - i >= 6 && memcmp(text + i + 2, "0000", 4) == 0)
			return i;
		i++; /* the escaped character */
	}
	return len;
}

gfs_err gfs_json_parse(const char *text, size_t len, const char *label, cJSON **out)
{
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
	char where[WHERE_MAX] = "";
	gfs_err err;

	if (!root) {
		const size_t at = end && end >= text ? (size_t)(end - text) : 0;

		return gfs_fail(GFS_ERR_FORMAT, "%s: invalid JSON near byte %zu", label, at);
	}
	/* After the value only white space may follow (a NUL ends a C string). */
	while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
		end++;
	if (end < text + len) {
		cJSON_Delete(root);
		return gfs_fail(GFS_ERR_FORMAT, "%s: unexpected data after the JSON value at byte %zu",
				label, (size_t)(end - text));
	}
	if (nul_escape(text, len) < len) {
		cJSON_Delete(root);
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: a string holds \\u0000 at byte %zu (a NUL byte, which no name can hold)",
				label, nul_escape(text, len));
	}
	err = no_duplicates(root, label, where, 0);
	if (err) {
		cJSON_Delete(root);
		return err;
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

/* "label: " in front of a message, or nothing without a label. */
#define LABEL(label) (label) ? (label) : "", (label) ? ": " : ""

gfs_err gfs_json_u64(const cJSON *v, const char *label, const char *what, uint64_t *out)
{
	double d;

	if (!cJSON_IsNumber(v))
		return gfs_fail(GFS_ERR_FORMAT, "%s%s%s must be a number", LABEL(label), what);
	d = v->valuedouble;
	if (!(d >= 0) || d > (double)GFS_JSON_MAX_INT || floor(d) != d)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s%s%s must be an integer between 0 and 2^53", LABEL(label), what);
	*out = (uint64_t)d;
	return GFS_OK;
}

gfs_err gfs_json_str(const cJSON *v, const char *label, const char *what, const char **out)
{
	if (!cJSON_IsString(v) || !v->valuestring)
		return gfs_fail(GFS_ERR_FORMAT, "%s%s%s must be a string", LABEL(label), what);
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
