#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every gatherfs-inspect option either works or is refused, and the man
page's synopsis says which.

Usage: check_options.py INSPECT MANPAGE CKPT_DIR SCRATCH_DIR

For every command, the options its SYNOPSIS entry in MANPAGE lists are
accepted (exit status not 2) and every other option is refused with exit
status 2 and one line naming the command and the option; --help mentions
every option; --tag, --prefix and --input-format dcp are refused with
--layout FILE; the synopsis lists every option the program knows.
"""
import os
import re
import subprocess
import sys

INSPECT, MAN, CKPT, TMP = sys.argv[1:5]
problems = []

# option -> a value for it (None: a flag)
OPTIONS = {"--tag": "global_step3", "--input-format": "deepspeed", "--prefix": "model.",
           "--layout": None, "--dtype": "bf16", "--json": None, "--format": "bin",
           "--shard-size": "1M", "--optim": None, "--naming": "hf", "--hf-config": "/", "--all": None,
           "--tp-split": "/",
           # every command takes the merge options; here they fail (exit 1:
           # no adapter, no PEFT checkpoint), but are not refused (exit 2)
           "--lora": "/", "--merge": "lora", "--base": "/", "--lora-tied": "peft",
           "--html": "page.html", "--atol": "0", "--rtol": "0", "--sha256": None,
           # diff's per-side reading options (--a-OPTION, --b-OPTION)
           "--a-tag": "global_step3", "--b-naming": "hf"}
# how the synopsis spells an option (--a-OPTION, --b-OPTION; a digit ends a name)
SIDE = {"--a-tag": "--a-", "--b-naming": "--b-", "--sha256": "--sha"}
# spellings a command needs (cat --optim names the state: --optim=STATE)
SPELLING = {("cat", "--optim"): ["--optim=exp_avg"]}


def check(ok, msg):
    print(("ok: " if ok else "FAIL: ") + msg)
    if not ok:
        problems.append(msg)


def run(args):
    p = subprocess.run([INSPECT, *args], capture_output=True, cwd=TMP)
    return p.returncode, p.stderr.decode(errors="replace")


# The synopsis: ".B gatherfs-inspect CMD" up to ".br" or ".PP".
text = open(MAN).read()
syn = text[text.index(".SH SYNOPSIS"):text.index(".SH DESCRIPTION")]
synopsis = {}
for block in re.split(r"\n\.(?:br|PP)\n", syn):
    m = re.search(r"^\.B gatherfs-inspect (\w+)$", block, re.M)
    if m:
        synopsis[m.group(1)] = set(re.findall(r"(--[a-z-]+)", block.replace("\\-", "-")))
check(set(synopsis) == {"ls", "cat", "layout", "verify", "export", "diff", "stats", "check"},
      f"the synopsis has the eight commands: {sorted(synopsis)}")
listed = set().union(*synopsis.values())
check(listed == {SIDE.get(o, o) for o in OPTIONS},
      f"the synopsis lists every option: {sorted(listed)}")
helptext = subprocess.run([INSPECT, "--help"], capture_output=True).stdout.decode()
for opt in OPTIONS:
    check(opt in helptext, f"--help mentions {opt}")

layout = os.path.join(TMP, "l.json")
with open(layout, "w") as f:
    subprocess.run([INSPECT, "layout", CKPT], stdout=f, check=True)

for cmd, allowed in sorted(synopsis.items()):
    for opt, val in OPTIONS.items():
        if opt == "--layout":
            args = [cmd, "--layout", layout]
        else:
            args = [cmd] + SPELLING.get((cmd, opt), [opt] + ([val] if val else [])) + [CKPT]
        if cmd == "cat":
            args.append("embed.weight")
        elif cmd == "diff" and opt != "--layout":
            args.append(CKPT)
        elif cmd == "export":
            args.append(os.path.join(TMP, "out-%s.bin" % opt.strip("-")))
        rc, err = run(args)
        if SIDE.get(opt, opt) in allowed:
            check(rc != 2, f"{' '.join(args[:3])}: accepted (exit {rc}) {err.strip()[:100]!r}")
        else:
            lines = err.strip().split("\n")
            named = "--a-OPTION/--b-OPTION" if opt in ("--a-tag", "--b-naming") else opt
            check(rc == 2 and len(lines) == 1 and f"{cmd} does not take {named}" in lines[0],
                  f"{cmd} {opt}: refused (exit {rc}): {err.strip()!r}")

# Options of a checkpoint directory, with --layout FILE.
for extra in (["--tag", "global_step3"], ["--prefix", "model."], ["--input-format", "dcp"],
              ["--tp-split", "/"]):
    rc, err = run(["ls", "--layout", layout, *extra])
    check(rc == 2 and err.count("\n") == 1 and "not to --layout FILE" in err,
          f"ls --layout FILE {extra[0]}: refused (exit {rc}): {err.strip()!r}")
rc, err = run(["ls", "--layout", layout, "--input-format", "layout"])
check(rc == 0, f"ls --layout FILE --input-format layout: accepted (exit {rc})")
sys.exit(1 if problems else 0)
