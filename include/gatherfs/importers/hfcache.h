/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — Hugging Face cache repositories (what huggingface_hub keeps
 * under ~/.cache/huggingface/hub).
 *
 * A repository is a directory models--ORG--NAME holding blobs/ (the files,
 * named by their hash), snapshots/REV/ (one per revision: symbolic links
 * ../../blobs/HASH under the model's file names) and refs/ (files naming a
 * revision: refs/main).  gfs_hf_snapshot() turns a repository into the
 * snapshot directory to import; gfs_hf_open_blob() follows one link of a
 * snapshot into its repository's blobs/ (the pass-through of config.json
 * and the like, which otherwise refuses links that leave the directory).
 */
#ifndef GATHERFS_HFCACHE_H
#define GATHERFS_HFCACHE_H

#include <stdbool.h>

#include "gatherfs/util/common.h"

/* The longest revision accepted (a commit hash is 40 characters). */
enum { GFS_HF_REV_MAX = 255 };

/*
 * gfs_hf_is_repo(): dir is a Hugging Face cache repository: its last path
 * component starts with "models--" and it holds the directories blobs,
 * snapshots and refs.
 */
bool gfs_hf_is_repo(const char *dir);

/*
 * gfs_hf_snapshot(): the snapshot directory of repository repo (see
 * gfs_hf_is_repo()) for revision rev: snapshots/REV if it is a directory,
 * else the revision the file refs/REV names (a branch); rev NULL is "main".
 * A revision (given or read from refs/) is one path component of at most
 * GFS_HF_REV_MAX bytes, neither "." nor "..", without control characters.
 * @return GFS_OK and *out (malloc'd "repo/snapshots/REV"), or an error
 * naming the repository and the revision.
 */
gfs_err gfs_hf_snapshot(const char *repo, const char *rev, char **out);

/*
 * gfs_hf_is_snapshot(): real (a canonical path) is repo/snapshots/REV of a
 * Hugging Face cache repository.
 */
bool gfs_hf_is_snapshot(const char *real);

/*
 * gfs_hf_open_blob(): open name, a symbolic link in the snapshot directory
 * dfd (at canonical path real, gfs_hf_is_snapshot()), for reading if its
 * text leads straight into the repository's blobs/: "../../blobs/FILE" or
 * the absolute "REPO/blobs/FILE".  One hop: the repository is reached
 * from dfd by "..", then blobs and FILE are opened with O_NOFOLLOW, so a
 * blob that is itself a link (or a blobs/ that is one) fails with ELOOP;
 * nothing is looked up twice.  The caller checks the opened file (fstat).
 * @return the descriptor, or -1 with errno (EXDEV: the link leads
 * elsewhere).
 */
int gfs_hf_open_blob(int dfd, const char *real, const char *name);

/*
 * gfs_hf_blob_fn: called by gfs_hf_verify() for each file of the snapshot
 * checked: its name in the snapshot, its blob's name (the hash it should
 * have), and got NULL when the contents hash to it, else the hash they have.
 */
typedef void (*gfs_hf_blob_fn)(void *ctx, const char *name, const char *blob, const char *got);

/*
 * gfs_hf_verify(): hash every file of snapshot (a snapshot directory,
 * gfs_hf_is_snapshot() of its real path) that is a link straight into
 * blobs/ (as gfs_hf_open_blob()) under a hash name: 64 hex digits, an LFS
 * file, is its contents' SHA-256; 40, a small file git stores, is git's
 * blob SHA-1 (of "blob LEN\0" and the contents).  fn is called for each.
 * Subdirectories and other names are not looked at.  @return an error
 * (unreadable file, not a snapshot) or GFS_OK, whatever the hashes.
 */
gfs_err gfs_hf_verify(const char *snapshot, gfs_hf_blob_fn fn, void *ctx);

#endif
