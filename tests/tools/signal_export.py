#!/usr/bin/python3
"""Interrupt a command once it has written a given number of bytes.

Usage: signal_export.py DIR BYTES SIGNAL COMMAND...

Runs COMMAND (SIGINT, SIGTERM and SIGHUP at their default disposition),
watches the regular files in DIR and in its subdirectories (one level: a
sharded export's output directory), and sends SIGNAL (INT, TERM or HUP) to
COMMAND as soon as the sizes of the files that were not in DIR at the start
add up to BYTES or more (BYTES 0: at once).  Prints "signalled at N bytes"
and exits 0 if COMMAND then died of that signal; exits 1 if COMMAND ended
before the threshold was reached or did not die of the signal.
"""
import os
import signal
import subprocess
import sys
import time

DIR, LIMIT, SIG = sys.argv[1], int(sys.argv[2]), getattr(signal, "SIG" + sys.argv[3])
CMD = sys.argv[4:]


def files():
    out = {}
    for root, dirs, names in os.walk(DIR):
        if root.count(os.sep) - DIR.count(os.sep) > 1:
            continue
        for n in names:
            p = os.path.join(root, n)
            try:
                out[p] = os.stat(p).st_size
            except FileNotFoundError:
                pass
    return out


def restore():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


before = set(files())
proc = subprocess.Popen(CMD, preexec_fn=restore)
written = 0
while True:
    written = sum(n for p, n in files().items() if p not in before)
    if written >= LIMIT:
        break
    if proc.poll() is not None:
        print("FAIL: %s ended (status %d) after %d bytes, before the signal at %d"
              % (CMD[0], proc.returncode, written, LIMIT))
        sys.exit(1)
    time.sleep(0.0005)
proc.send_signal(SIG)
rc = proc.wait()
if rc != -SIG:
    print("FAIL: %s exited with status %d after %s at %d bytes, not of the signal"
          % (CMD[0], rc, sys.argv[3], written))
    sys.exit(1)
print("signalled at %d bytes" % written)
