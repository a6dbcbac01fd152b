#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Interrupt a command once it has written a given number of bytes.

Usage: signal_export.py [--child] DIR WHEN SIGNAL COMMAND...

Runs COMMAND (SIGINT, SIGTERM and SIGHUP at their default disposition),
watches the regular files in DIR and in its subdirectories (one level: a
sharded export's output directory), and sends SIGNAL (INT, TERM or HUP) to
COMMAND as soon as WHEN holds: a number BYTES, the sizes of the files that
were not in DIR at the start add up to BYTES or more (0: at once); or
"exists:PATH", PATH (relative to DIR) exists.  With --child the signal goes
to COMMAND's child process (COMMAND is a wrapper such as strace).  Prints
"signalled at N bytes" and exits 0 if COMMAND then died of that signal (or,
for a wrapper, exited with 128 + its number); exits 3 if COMMAND ended
before WHEN held, 1 if it did not die of the signal.
"""
import os
import signal
import subprocess
import sys
import time

CHILD = sys.argv[1] == "--child"
ARGS = sys.argv[2:] if CHILD else sys.argv[1:]
DIR, WHEN, SIG = ARGS[0], ARGS[1], getattr(signal, "SIG" + ARGS[2])
CMD = ARGS[3:]


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


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except FileNotFoundError:
        return []


before = set(files())
proc = subprocess.Popen(CMD, preexec_fn=restore)
written = 0
while True:
    written = sum(n for p, n in files().items() if p not in before)
    if (os.path.exists(os.path.join(DIR, WHEN[7:])) if WHEN.startswith("exists:")
            else written >= int(WHEN)):
        break
    if proc.poll() is not None:
        print("%s ended (status %d) after %d bytes, before the signal at %s"
              % (CMD[0], proc.returncode, written, WHEN))
        sys.exit(3)
    time.sleep(0.0005)
if CHILD:
    os.kill(children(proc.pid)[0], SIG)
else:
    proc.send_signal(SIG)
rc = proc.wait()
if rc != -SIG and not (CHILD and rc == 128 + SIG):
    print("FAIL: %s exited with status %d after %s at %d bytes, not of the signal"
          % (CMD[0], rc, ARGS[2], written))
    sys.exit(1)
print("signalled at %d bytes" % written)
