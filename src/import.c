/*
 * gatherfs — importer dispatch: detect what a path holds.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "gatherfs/import.h"

/* is_dcp(): does directory path hold a `.metadata` file? */
static bool is_dcp(const char *path)
{
	struct stat st;
	char buf[4096];

	if ((size_t)snprintf(buf, sizeof(buf), "%s/.metadata", path) >= sizeof(buf))
		return false;
	return stat(buf, &st) == 0 && S_ISREG(st.st_mode);
}

gfs_err gfs_import(const char *path, const gfs_import_opts *opts, gfs_layout **out)
{
	struct stat st;
	const char *tag = opts ? opts->tag : NULL;
	const char *format = opts && opts->format && strcmp(opts->format, "auto") != 0
				     ? opts->format : NULL;
	const char *prefix = opts && opts->prefix && opts->prefix[0] ? opts->prefix : NULL;

	if (format && strcmp(format, "dcp") != 0 && strcmp(format, "deepspeed") != 0 &&
	    strcmp(format, "layout") != 0)
		return gfs_fail(GFS_ERR_INVAL,
				"unknown input format '%s' (dcp, deepspeed, layout or auto)", format);
	if (stat(path, &st) != 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: %s", path,
				strerror(errno));
	if (!format)
		format = S_ISREG(st.st_mode) ? "layout"
			 : S_ISDIR(st.st_mode) && is_dcp(path) ? "dcp" : "deepspeed";
	if (prefix && strcmp(format, "dcp") != 0)
		return gfs_fail(GFS_ERR_INVAL, "%s: a key prefix applies to a DCP checkpoint only",
				path);
	if (tag && strcmp(format, "deepspeed") != 0 && strcmp(format, "layout") != 0)
		return gfs_fail(GFS_ERR_INVAL, "%s: a tag applies to a DeepSpeed checkpoint only",
				path);
	if (strcmp(format, "layout") == 0) {
		if (!S_ISREG(st.st_mode))
			return gfs_fail(GFS_ERR_INVAL, "%s: not a layout file", path);
		if (tag)
			return gfs_fail(GFS_ERR_INVAL, "%s: a tag applies to a checkpoint directory, not to a layout file",
					path);
		return gfs_layout_load_file(path, out);
	}
	if (!S_ISDIR(st.st_mode))
		return gfs_fail(GFS_ERR_INVAL, "%s: neither a checkpoint directory nor a layout file",
				path);
	if (strcmp(format, "dcp") == 0)
		return gfs_import_dcp(path, prefix, out);
	return gfs_import_deepspeed(path, tag, out);
}
