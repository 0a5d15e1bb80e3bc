#!/usr/bin/env python3
"""Files written by xjax read by numpy, and files numpy writes read by xjax (issue 29).

usage: numpy_interop.py INTEROP_TOOL. Exits 77 (meson's "skipped") where numpy is not installed.
The safetensors files are read and written with numpy and the standard library alone (the format
is an 8-byte little-endian header length, a JSON header, raw little-endian data).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    # The python3 first on PATH may be another installation (pyenv) than Debian's, which has
    # python3-numpy: try that one once before skipping.
    system = "/usr/bin/python3"
    if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system) and \
            not os.environ.get("XJAX_INTEROP_REEXEC"):
        os.environ["XJAX_INTEROP_REEXEC"] = "1"
        os.execv(system, [system] + sys.argv)
    print("numpy is not installed: skipped")
    sys.exit(77)


def ramp(shape, dtype, scale, offset):
    n = int(np.prod(shape)) if shape else 1
    return (np.arange(n, dtype=np.float64) * scale + offset).astype(dtype).reshape(shape)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    names = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U32": "<u4", "BOOL": "|b1"}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        out[name] = np.frombuffer(raw, dtype=names[e["dtype"]]).reshape(e["shape"])
    return out


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    names = {"float32": "F32", "int64": "I64"}
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[str(a.dtype)], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def same(what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        print(f"{what}: got {got.dtype}{list(got.shape)} {got.ravel()[:6]}, want {want.dtype}{list(want.shape)} {want.ravel()[:6]}")
        return 1
    return 0


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([tool, "write", d], check=True)
        bad = same("a.npy", np.load(f"{d}/a.npy"), ramp((2, 3), np.float32, 0.5, 0))
        bad += same("b.npy", np.load(f"{d}/b.npy"), ramp((4,), np.int64, -3, 7))
        st = read_safetensors(f"{d}/m.safetensors")
        bad += same("m.safetensors w", st["w"], ramp((2, 2), np.float64, 0.25, -1))
        bad += same("m.safetensors b", st["b"], ramp((3,), np.float32, 2, 1))
        bad += same("m.safetensors n", st["n"], ramp((2,), np.int32, 5, -4))
        np.save(f"{d}/p.npy", ramp((3, 4), np.float64, 1.0 / 3.0, 0))
        np.save(f"{d}/q.npy", ramp((5,), np.uint32, 3, 1))
        write_safetensors(f"{d}/p.safetensors", {"x": ramp((2, 3), np.float32, 1.5, -2), "y": ramp((4,), np.int64, 1000000007, 0)})
        bad += subprocess.run([tool, "check", d]).returncode
    print("numpy interop:", "FAILED" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
