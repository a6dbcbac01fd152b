#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""read_corrupt.py MODE FILE WINDOW: read FILE (a view of a mount over a
checkpoint with one flipped byte) and check that it fails with EIO and never
serves the corrupt bytes (WINDOW: hex of the 16 bytes starting at the
flipped one, as the shard now holds them; "" to skip that check).

  seq    read(2) front to back in 1 MiB pieces until EIO;
  zip    zipfile: open, then read every member, until EIO;
  torch  torch.load(FILE) (weights_only) must raise EIO;
  open   zipfile opens FILE (its central directory is served), then
         reading the members fails with EIO.
Prints what it read before the error."""
import errno
import sys
import zipfile

mode, path, window = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
got = bytearray()


def eio(e):
    return isinstance(e, OSError) and e.errno == errno.EIO


def check_window():
    if window and window in got:
        sys.exit("%s: served the corrupt bytes %s" % (path, window.hex()))


try:
    if mode == "seq":
        with open(path, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                got += b
    elif mode in ("zip", "open"):
        opened = False
        with zipfile.ZipFile(path) as z:
            opened = True
            for name in z.namelist():
                got += z.read(name)
    elif mode == "torch":
        import torch

        torch.load(path)
    else:
        sys.exit("unknown mode " + mode)
except Exception as e:  # noqa: BLE001 - the error is what we test
    if not eio(e) and not eio(e.__cause__) and not eio(e.__context__):
        sys.exit("%s (%s): failed, but not with EIO: %r" % (path, mode, e))
    if mode == "open" and not opened:
        sys.exit("%s: the central directory was not served: %r" % (path, e))
    check_window()
    print("  %s %s: EIO after %d bytes" % (mode, path, len(got)))
    sys.exit(0)
sys.exit("%s (%s): read %d bytes without an error" % (path, mode, len(got)))
