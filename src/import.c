/*
 * gatherfs — importer dispatch: detect what a path holds.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "gatherfs/import.h"

gfs_err gfs_import(const char *path, const gfs_import_opts *opts, gfs_layout **out)
{
	struct stat st;
	const char *tag = opts ? opts->tag : NULL;

	if (stat(path, &st) != 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: %s", path,
				strerror(errno));
	if (S_ISREG(st.st_mode)) {
		if (tag)
			return gfs_fail(GFS_ERR_INVAL, "%s: a tag applies to a checkpoint directory, not to a layout file",
					path);
		return gfs_layout_load_file(path, out);
	}
	if (!S_ISDIR(st.st_mode))
		return gfs_fail(GFS_ERR_INVAL, "%s: neither a checkpoint directory nor a layout file",
				path);
	return gfs_import_deepspeed(path, tag, out);
}
