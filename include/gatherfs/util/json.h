/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a small wrapper over cJSON: case-sensitive lookups, exact
 * 64-bit integers in and out, and error messages in gfs style.
 * Only this wrapper and the modules that build JSON documents include cJSON.
 */
#ifndef GATHERFS_JSON_H
#define GATHERFS_JSON_H

#include <cjson/cJSON.h>

#include "gatherfs/util/common.h"

/* Largest integer a JSON number read through cJSON (a double) holds exactly. */
#define GFS_JSON_MAX_INT ((uint64_t)1 << 53)

/*
 * gfs_json_parse(): parse text[0..len) (need not be NUL-terminated) as one
 * strict JSON value: anything but white space after it, a \u0000 escape
 * (a C string cannot carry it), and an object
 * member name that appears twice in one object, are GFS_ERR_FORMAT (the
 * message names label, the member and where it is).  label names the
 * document in messages.  Free *out with cJSON_Delete().
 */
gfs_err gfs_json_parse(const char *text, size_t len, const char *label, cJSON **out);

/*
 * gfs_json_get(): the member key of object obj (case-sensitive), or NULL.
 */
const cJSON *gfs_json_get(const cJSON *obj, const char *key);

/*
 * gfs_json_u64(): read a non-negative integral number <= 2^53.  what names
 * the value in messages, after "label: " (nothing when label is NULL).
 */
gfs_err gfs_json_u64(const cJSON *v, const char *label, const char *what, uint64_t *out);

/* gfs_json_str(): read a string value (borrowed); label as for gfs_json_u64(). */
gfs_err gfs_json_str(const cJSON *v, const char *label, const char *what, const char **out);

/*
 * gfs_json_add_u64(): add an exact integer member to obj (printed with
 * PRIu64, never in exponent form).  @return false on allocation failure.
 */
bool gfs_json_add_u64(cJSON *obj, const char *key, uint64_t v);

/* gfs_json_u64_item(): a new exact integer item, or NULL. */
cJSON *gfs_json_u64_item(uint64_t v);

#endif
