#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Damage copies of real fixtures and check gatherfs-inspect's refusal.

Usage: check_badinput.py INSPECT CKPTS_DIR    (standard library only)

Every case must exit with status 1 and print exactly one line on stderr
that names the offending file (or directory) and contains the expected
words.  None may crash (signal), hang (timeout) or print tensor data.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

INSPECT, CKPTS = sys.argv[1], sys.argv[2]
failures = []
passed = 0


copies = 0


def copy_case(tmp, case):
    global copies
    copies += 1
    dst = os.path.join(tmp, f"{copies}-{case}")
    shutil.copytree(os.path.join(CKPTS, case, "checkpoint"), dst)
    for root, dirs, files in os.walk(dst):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)
    return dst


def expect_error(what, args, *words):
    global passed
    p = subprocess.run([INSPECT, *args], capture_output=True, timeout=60)
    err = p.stderr.decode(errors="replace")
    lines = err.strip().splitlines()
    problems = []
    if p.returncode != 1:
        problems.append(f"exit status {p.returncode} (want 1)")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr (want 1): {err!r}")
    for w in words:
        if w not in err:
            problems.append(f"message lacks {w!r}: {err.strip()!r}")
    if p.stdout:
        problems.append(f"printed {len(p.stdout)} bytes on stdout")
    if problems:
        failures.append(what)
        print(f"not ok - {what}: " + "; ".join(problems))
    else:
        passed += 1
        print(f"ok - {what}: {err.strip()}")


def pickle_offset(path):
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("/data.pkl"))
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        n, m = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
    return info.header_offset + 30 + n + m, info.file_size


with tempfile.TemporaryDirectory() as tmp:
    # missing rank file
    d = copy_case(tmp, "z3_ws3_bf16")
    os.remove(os.path.join(d, "global_step3", "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt"))
    expect_error("missing rank file", ["ls", d], "rank 2", "missing")

    # truncated shard
    d = copy_case(tmp, "z3_ws2_fp32")
    f = os.path.join(d, "global_step3", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    os.truncate(f, os.path.getsize(f) // 2)
    expect_error("truncated shard", ["ls", d], "zero_pp_rank_1_mp_rank_00_optim_states.pt")

    # truncated by a few bytes: the central directory is damaged
    d = copy_case(tmp, "z2_ws3_bf16")
    f = os.path.join(d, "global_step3", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt")
    os.truncate(f, os.path.getsize(f) - 7)
    expect_error("shard missing its last bytes", ["verify", d],
                 "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt")

    # a shard from another world size (ws=2 rank file in a ws=3 checkpoint)
    d = copy_case(tmp, "z3_ws3_fp32_subgroups")
    shutil.copy(os.path.join(CKPTS, "z3_ws2_fp32", "checkpoint", "global_step3",
                             "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
                os.path.join(d, "global_step3", "zero_pp_rank_1_mp_rank_00_optim_states.pt"))
    expect_error("shard from another world size", ["ls", d],
                 "zero_pp_rank_1_mp_rank_00_optim_states.pt", "world size")

    # an extra rank beyond the world size: a copy of rank 1 (its zip folder
    # names rank 1), the rank 2 file of a world size 3 checkpoint
    d = copy_case(tmp, "z2_ws2_fp32_twotags")
    g = os.path.join(d, "global_step3")
    shutil.copy(os.path.join(g, "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
                os.path.join(g, "zero_pp_rank_2_mp_rank_00_optim_states.pt"))
    expect_error("extra rank file, copied", ["ls", d], "zero_pp_rank_2_mp_rank_00_optim_states.pt",
                 "zip folder is zero_pp_rank_1_mp_rank_00_optim_states/")
    d = copy_case(tmp, "z2_ws2_fp32_twotags")
    shutil.copy(os.path.join(CKPTS, "z2_ws3_fp32_roundrobin", "checkpoint", "global_step3",
                             "zero_pp_rank_2_mp_rank_00_optim_states.pt"),
                os.path.join(d, "global_step3", "zero_pp_rank_2_mp_rank_00_optim_states.pt"))
    expect_error("extra rank file", ["ls", d], "zero_pp_rank_2_mp_rank_00_optim_states.pt",
                 "world size 3")

    # corrupt pickle: the data.pkl bytes overwritten in place
    d = copy_case(tmp, "z1_ws2_fp32")
    f = os.path.join(d, "global_step3", "mp_rank_00_model_states.pt")
    off, size = pickle_offset(f)
    with open(f, "r+b") as fh:
        fh.seek(off + size // 3)
        fh.write(b"\xff" * 16)
    expect_error("corrupt pickle", ["ls", d], "mp_rank_00_model_states.pt", "data.pkl")

    # a module key with a NUL byte (a newline was found by fuzz_import_deepspeed;
    # control bytes are fine now, a NUL cannot be part of a name): one line
    # naming the key by index and escaped
    d = copy_case(tmp, "z3_ws2_fp32")
    f = os.path.join(d, "global_step3", "zero_pp_rank_0_mp_rank_00_model_states.pt")
    off, size = pickle_offset(f)
    with open(f, "r+b") as fh:
        fh.seek(off)
        pkl = fh.read(size)
        fh.seek(off + pkl.index(b"embed.weight"))
        fh.write(b"embed\0weight")
    expect_error("a module key with a NUL byte", ["ls", d], "zero_pp_rank_0_mp_rank_00_model_states.pt",
                 '("embed%00weight") holds a NUL byte')

    # a pickle that tries to call os.system: must not run, must be refused
    marker = os.path.join(tmp, "pwned")
    d = copy_case(tmp, "z1_ws2_fp32")
    f = os.path.join(d, "global_step3", "mp_rank_00_model_states.pt")
    evil = b"\x80\x02cos\nsystem\nq\x00X" + len(f"touch {marker}").to_bytes(4, "little") \
        + f"touch {marker}".encode() + b"\x85R."
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("mp_rank_00_model_states/data.pkl", evil)
        z.writestr("mp_rank_00_model_states/version", "3\n")
    expect_error("pickle calling os.system", ["ls", d], "mp_rank_00_model_states.pt")
    if os.path.exists(marker):
        failures.append("os.system ran")
        print("not ok - the pickle's os.system call ran")

    # not a checkpoint directory
    d = os.path.join(tmp, "notackpt")
    os.mkdir(d)
    with open(os.path.join(d, "config.json"), "w") as fh:
        fh.write("{}")
    expect_error("non-checkpoint directory", ["ls", d], "notackpt: no known checkpoint format (looked for:")
    d = os.path.join(tmp, "emptydir")
    os.mkdir(d)
    expect_error("empty directory", ["ls", d], "emptydir: no known checkpoint format (looked for:",
                 "DeepSpeed", "DCP", "zero3", "layout.json", "model.safetensors")
    d = os.path.join(tmp, "readmeonly")
    os.mkdir(d)
    with open(os.path.join(d, "README"), "w") as fh:
        fh.write("a model\n")
    expect_error("a directory with a README only", ["ls", d],
                 "readmeonly: no known checkpoint format (looked for:")

    # a tag directory that does not exist
    expect_error("unknown tag", ["ls", "--tag", "global_step9",
                                 os.path.join(CKPTS, "z3_ws2_fp32", "checkpoint")],
                 "global_step9")

    # zero-length model states file
    d = copy_case(tmp, "z3_ws2_fp32")
    f = os.path.join(d, "global_step3", "zero_pp_rank_0_mp_rank_00_model_states.pt")
    os.truncate(f, 0)
    expect_error("zero-length file", ["ls", d], "zero_pp_rank_0_mp_rank_00_model_states.pt",
                 "empty")

    # a shard changed after the layout was saved: cat refuses, never wrong bytes
    d = copy_case(tmp, "z3_ws2_fp32")
    lay = os.path.join(tmp, "layout.json")
    with open(lay, "wb") as fh:
        fh.write(subprocess.run([INSPECT, "layout", d], capture_output=True, check=True).stdout)
    f = os.path.join(d, "global_step3", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    os.truncate(f, os.path.getsize(f) - 100)
    expect_error("shard changed after layout", ["cat", "--layout", lay, "embed.weight"],
                 "zero_pp_rank_1_mp_rank_00_optim_states.pt", "size")

    # a rank manifest of a rank-local ZeRO-3 save whose strings hold control
    # characters: the message quoting them stays one line
    d = os.path.join(tmp, "z3-control")
    shutil.copytree(os.path.join(CKPTS, "..", "lomo", "saves", "ws3_bf16", "gfs_save"), d)
    for n in os.listdir(d):
        os.chmod(os.path.join(d, n), 0o644)
    m = os.path.join(d, "zero3-rank-0.json")
    with open(m) as fh:
        man = json.load(fh)
    man["tensors"][0]["dtype"] = "bf\n16\r\x1b[2J"
    with open(m, "w") as fh:
        json.dump(man, fh)
    expect_error("zero3 manifest: control characters in a dtype", ["ls", d],
                 "zero3-rank-0.json", "unknown dtype 'bf?16??[2J'")

    # broken layout JSON files
    for what, text, word in (
            ("layout not JSON", "{not json", "invalid JSON"),
            ("layout without magic", '{"tensors": []}', "not a gatherfs layout"),
            ("layout piece past source end",
             '{"gatherfs_layout": 1, "sources": [{"path": "x", "size": 4}], "tensors": ['
             '{"name": "t", "dtype": "float32", "shape": [2], '
             '"pieces": [{"source": 0, "offset": 0, "length": 8}]}]}', "past its end"),
            ("layout size mismatch",
             '{"gatherfs_layout": 1, "sources": [{"path": "x", "size": 64}], "tensors": ['
             '{"name": "t", "dtype": "float32", "shape": [3], '
             '"pieces": [{"source": 0, "offset": 0, "length": 8}]}]}', "cover 8 of its 12"),
            ("layout alias to nothing",
             '{"gatherfs_layout": 1, "sources": [], "tensors": ['
             '{"name": "t", "alias_of": "u"}]}', "does not exist"),
            ("layout huge number",
             '{"gatherfs_layout": 1, "sources": [{"path": "x", "size": 1e300}], "tensors": []}',
             "integer")):
        p = os.path.join(tmp, "bad.json")
        with open(p, "w") as fh:
            fh.write(text)
        expect_error(what, ["ls", "--layout", p], "bad.json", word)

print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
