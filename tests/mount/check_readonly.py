#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""check_readonly.py MOUNTPOINT: every way of writing to a gatherfs mount
fails with EROFS, and nothing changes.  Exits 1 on the first surprise."""
import errno
import os
import sys

mnt = sys.argv[1]
f = os.path.join(mnt, "config.json")
t = os.path.join(mnt, "tensors", "embed.weight")
before = {n: os.stat(os.path.join(mnt, n)) for n in os.listdir(mnt)}
problems = 0


def expect_erofs(what, fn, *args):
    global problems
    try:
        fn(*args)
    except OSError as e:
        if e.errno == errno.EROFS:
            print(f"ok: {what}: EROFS")
            return
        print(f"FAIL: {what}: {e}")
    else:
        print(f"FAIL: {what}: succeeded")
    problems += 1


expect_erofs("create", os.open, os.path.join(mnt, "new"), os.O_WRONLY | os.O_CREAT, 0o644)
expect_erofs("open for writing", os.open, f, os.O_WRONLY)
expect_erofs("open read-write", os.open, t, os.O_RDWR)
expect_erofs("open with O_TRUNC", os.open, f, os.O_RDONLY | os.O_TRUNC)
expect_erofs("truncate", os.truncate, f, 0)
expect_erofs("rename", os.rename, f, os.path.join(mnt, "config2.json"))
expect_erofs("rename into tensors/", os.rename, f, os.path.join(mnt, "tensors", "x"))
expect_erofs("unlink", os.unlink, f)
expect_erofs("unlink a tensor", os.unlink, t)
expect_erofs("rmdir", os.rmdir, os.path.join(mnt, "tensors"))
expect_erofs("mkdir", os.mkdir, os.path.join(mnt, "d"))
expect_erofs("chmod", os.chmod, f, 0o600)
expect_erofs("chown", os.chown, f, 1, 1)
expect_erofs("utime", os.utime, f, (0, 0))
expect_erofs("symlink", os.symlink, "config.json", os.path.join(mnt, "l"))
expect_erofs("link", os.link, f, os.path.join(mnt, "l"))
expect_erofs("mknod", os.mkfifo, os.path.join(mnt, "fifo"))
expect_erofs("setxattr", os.setxattr, t, "user.x", b"1")
expect_erofs("removexattr", os.removexattr, t, "user.gatherfs.dtype")
after = {n: os.stat(os.path.join(mnt, n)) for n in os.listdir(mnt)}
if before != after:
    print("FAIL: the mount changed")
    problems += 1
sys.exit(1 if problems else 0)
