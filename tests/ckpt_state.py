#!/usr/bin/env python3
"""ckpt_state.py: reads the f32 tensors of an ljperf training checkpoint in either format, for
the shell tests (docs/reference.md "Sharded training state"):

  - sharded: ITER/metadata.json + ITER/shard_RRRRR_of_WWWWW.bin (raw f32 slices, or bf16 ones for
    moments stored as bf16: read widened to f32);
  - single file: ITER/state.safetensors.

  ckpt_state.py tensor ITER NAME          prints the element count and the sum
  ckpt_state.py dtype ITER NAME           prints the tensor's stored dtype (F32, BF16)
  ckpt_state.py same ITER_A ITER_B        exit 0 when master, adam.m and adam.v are bit-identical
  ckpt_state.py flip ITER TENSOR PARAM    flips one byte inside the slice of TENSOR for
                                          parameter PARAM, prints the file it changed (sharded)
  ckpt_state.py hf ITER                   exit 0 when every tensor of ITER/hf/model.safetensors
                                          (F32, or BF16 rounded to nearest even) is the master's
                                          slices of its parameter (sharded format); prints the count
An ITER argument may also be a checkpoint root (its latest iteration is used).
"""
import array
import json
import os
import struct
import sys


def iter_dir(path):
    latest = os.path.join(path, "latest_checkpointed_iteration.txt")
    if os.path.exists(latest):
        return os.path.join(path, "iter_%07d" % int(open(latest).read().strip()))
    return path


def tensor(path, name):
    d = iter_dir(path)
    meta = os.path.join(d, "metadata.json")
    if os.path.exists(meta):
        m = json.load(open(meta))
        t = m["tensors"][name]
        size = {"F32": 4, "BF16": 2}[t["dtype"]]
        out = array.array("f", bytes(4 * t["shape"][0]))
        files = [open(os.path.join(d, f["name"]), "rb") for f in m["files"]]
        for s in t["slices"]:
            f = files[s["file"]]
            f.seek(s["byte_offset"])
            data = f.read(size * s["numel"])
            if size == 2:  # bf16: the top half of a little-endian f32, the low half zero
                wide = bytearray(2 * len(data))
                wide[2::4], wide[3::4] = data[0::2], data[1::2]
                data = bytes(wide)
            x = array.array("f")
            x.frombytes(data)
            out[s["offset"]:s["offset"] + s["numel"]] = x
        return out
    f = open(os.path.join(d, "state.safetensors"), "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    begin, end = h[name]["data_offsets"]
    f.seek(8 + n + begin)
    x = array.array("f")
    x.frombytes(f.read(end - begin))
    return x


def dtype(path, name):
    d = iter_dir(path)
    meta = os.path.join(d, "metadata.json")
    if os.path.exists(meta):
        return json.load(open(meta))["tensors"][name]["dtype"]
    f = open(os.path.join(d, "state.safetensors"), "rb")
    return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))[name]["dtype"]


def flip(path, name, param):
    d = iter_dir(path)
    m = json.load(open(os.path.join(d, "metadata.json")))
    size = {"F32": 4, "BF16": 2}[m["tensors"][name]["dtype"]]
    for s in m["tensors"][name]["slices"]:
        if s.get("param") == param:
            f = os.path.join(d, m["files"][s["file"]]["name"])
            b = bytearray(open(f, "rb").read())
            b[s["byte_offset"] + size * (s["numel"] // 2)] ^= 0x10
            open(f, "wb").write(b)
            return m["files"][s["file"]]["name"]
    raise SystemExit("no slice of %s for %s" % (name, param))


def hf(path):
    d = iter_dir(path)
    m = json.load(open(os.path.join(d, "metadata.json")))
    master = tensor(path, "master")
    ranges = {}
    for s in m["tensors"]["master"]["slices"]:
        b, e = ranges.get(s["param"], (s["offset"], s["offset"]))
        if e != s["offset"]:
            raise SystemExit("the slices of %s are not contiguous" % s["param"])
        ranges[s["param"]] = (b, s["offset"] + s["numel"])
    f = open(os.path.join(d, "hf", "model.safetensors"), "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    for name, e in h.items():
        if name not in ranges:
            raise SystemExit("hf tensor %s has no slice in the master" % name)
        b, end = ranges[name]
        f.seek(8 + n + e["data_offsets"][0])
        data = f.read(e["data_offsets"][1] - e["data_offsets"][0])
        want = master[b:end]
        if e["dtype"] == "F32":
            ok = data == want.tobytes()
        else:
            bits = array.array("I", want.tobytes())
            w = array.array("H", (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF if (u & 0x7FFFFFFF) <= 0x7F800000
                                  else ((u >> 16) | 0x40) & 0xFFFF for u in bits))
            ok = data == w.tobytes()
        if not ok:
            raise SystemExit("hf tensor %s differs from the master's [%d, %d)" % (name, b, end))
    return len(h)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "tensor":
        x = tensor(sys.argv[2], sys.argv[3])
        print(len(x), sum(x))
    elif cmd == "same":
        for name in ("master", "adam.m", "adam.v"):
            if tensor(sys.argv[2], name).tobytes() != tensor(sys.argv[3], name).tobytes():
                print("tensor %s differs" % name)
                sys.exit(1)
    elif cmd == "dtype":
        print(dtype(sys.argv[2], sys.argv[3]))
    elif cmd == "hf":
        print(hf(sys.argv[2]))
    elif cmd == "flip":
        print(flip(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        raise SystemExit("unknown command " + cmd)
