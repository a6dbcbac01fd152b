/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a torch.save file opened for its pickle (torchfile.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/readers/torchfile.h"

gfs_err gfs_torch_open(const char *path, uint64_t max_pickle, const char *what, int *fd,
		       uint64_t *size, gfs_tzip **zip, gfs_pickle **pk)
{
	struct stat st;
	const gfs_tzip_record *rec;
	char label[PATH_MAX + 64];
	uint8_t *buf = NULL;
	size_t len = 0;
	gfs_err err;

	*zip = NULL;
	*pk = NULL;
	err = gfs_open_regular(path, 0, fd, &st);
	if (err)
		return err;
	*size = (uint64_t)st.st_size;
	if (*size == 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: empty file (0 bytes), not a torch checkpoint", path);
	err = gfs_tzip_open(*fd, 0, *size, path, NULL, zip);
	if (err)
		return err;
	rec = gfs_tzip_find(*zip, "data.pkl");
	if (!rec)
		return gfs_fail(GFS_ERR_FORMAT, "%s: no data.pkl in the archive", path);
	err = gfs_tzip_read_record(*zip, rec, max_pickle, &buf, &len);
	if (err)
		return err;
	snprintf(label, sizeof(label), "%s:%s", path, rec->name);
	err = gfs_pickle_load(buf, len, label, NULL, pk);
	free(buf);
	if (!err && (!gfs_pickle_root(*pk) || gfs_pickle_root(*pk)->kind != GFS_PV_DICT))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: its pickle holds no dict: not %s", path, what);
	return err;
}

void gfs_torch_close(int fd, gfs_tzip *zip, gfs_pickle *pk)
{
	gfs_pickle_free(pk);
	gfs_tzip_close(zip);
	if (fd >= 0)
		close(fd);
}
