"""GGUF compatibility with the reference implementation (the `gguf` package
that llama.cpp's converters use), both ways:

1. A file written by gguf.GGUFWriter (pairs of many types, nested and string
   arrays, a custom alignment, F32/F16/Q8_0/Q4_0/BF16/I32 tensors quantized by
   gguf.quants) is read by our reader: `model_test_gguf --dump FILE` must
   print exactly what gguf.GGUFReader sees, and the tensor bytes must be the
   bytes Python wrote.
2. The sample our writer makes (`model_test_gguf --write-sample FILE`) is
   read by gguf.GGUFReader: the same view as our dump, and the values and
   tensor bytes (quantized blocks bit-exact with gguf.quants) are the ones the
   sample is defined to hold.

The dump is a stable text form: one line per pair, `kv<TAB>key<TAB>type<TAB>
value`, integers in decimal, floats as their bit patterns, strings as hex of
their bytes, arrays as [elemtype;n;v,v,...] (nested arrays recursively);
one line per tensor with name, type, n_dims, dims, offset, size and an
FNV-1a 64 checksum of its bytes. Here the same text is rebuilt from the
parts gguf.GGUFReader decodes.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

BIN = os.path.join(os.environ.get("TSL_TEST_BIN", "build/tests"), "model_test_gguf")
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print("ok  ", what)
    else:
        failed += 1
        print("FAIL", what, file=sys.stderr)


def fnv64(b):
    h = 1469598103934665603
    for x in b:
        h ^= x
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


TYPE_NAMES = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
              VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "str", VT.ARRAY: "arr",
              VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64"}


def enc_value(parts, i, t):
    """Canonical text of the value of type t whose first part is parts[i];
    returns (text, index of the next part)."""
    t = VT(int(t))
    if t == VT.STRING:
        return "s:" + bytes(parts[i + 1]).hex(), i + 2
    if t == VT.ARRAY:
        et = VT(int(parts[i][0]))
        n = int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(n):
            s, i = enc_value(parts, i, et)
            items.append(s)
        return "[%s;%d;%s]" % (TYPE_NAMES[et], n, ",".join(items)), i
    v = parts[i][0]
    if t == VT.FLOAT32:
        return "0x%08x" % int(np.array([v], dtype=np.float32).view(np.uint32)[0]), i + 1
    if t == VT.FLOAT64:
        return "0x%016x" % int(np.array([v], dtype=np.float64).view(np.uint64)[0]), i + 1
    return str(int(v)), i + 1


def reference_dump(path):
    """The dump text built from what gguf.GGUFReader decodes."""
    r = gguf.GGUFReader(path)
    lines = ["version\t%d" % int(r.fields["GGUF.version"].parts[0][0]),
             "alignment\t%d" % int(r.alignment),
             "data_offset\t%d" % int(r.data_offset)]
    kvs = [f for name, f in r.fields.items() if not name.startswith("GGUF.")]
    lines.append("kv_count\t%d" % len(kvs))
    for f in kvs:
        t = VT(int(f.parts[2][0]))
        text, end = enc_value(f.parts, 3, t)
        assert end == len(f.parts), "parts left over in %s" % f.name
        lines.append("kv\t%s\t%s\t%s" % (f.name, TYPE_NAMES[t], text))
    lines.append("tensor_count\t%d" % len(r.tensors))
    for t in r.tensors:
        dims = [int(d) for d in t.shape]
        lines.append("tensor\t%s\t%s\t%d\t%s\t%d\t%d\t%s" % (
            t.name, QT(t.tensor_type).name.lower(), len(dims), ",".join(map(str, dims)),
            int(t.data_offset) - int(r.data_offset), int(t.n_bytes), fnv64(t.data.tobytes())))
    return lines, r


def our_dump(path):
    p = subprocess.run([BIN, "--dump", path], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
    return p.returncode, p.stdout.splitlines()


def compare(ours, ref, what):
    same = ours == ref
    if not same:
        for k in range(max(len(ours), len(ref))):
            a = ours[k] if k < len(ours) else "(none)"
            b = ref[k] if k < len(ref) else "(none)"
            if a != b:
                print("  first difference at line %d:\n    ours: %s\n    gguf: %s" % (k, a, b), file=sys.stderr)
                break
    check(same, what)


def pat(n, seed):
    i = np.arange(n, dtype=np.int64)
    return (((i * 7 + seed * 3) % 23) - 11).astype(np.float32) * np.float32(0.125)


tmp = tempfile.mkdtemp(prefix="tsl_gguf_compat_")

# ---- 1. gguf.GGUFWriter -> our reader ---------------------------------------
py_path = os.path.join(tmp, "from_python.gguf")
w = gguf.GGUFWriter(py_path, arch="tensile-py")
w.add_custom_alignment(128)
w.add_name("written by gguf.GGUFWriter \u00e9")
w.add_uint8("p.u8", 250)
w.add_int8("p.i8", -7)
w.add_uint16("p.u16", 65000)
w.add_int16("p.i16", -12345)
w.add_uint32("p.u32", 3000000000)
w.add_int32("p.i32", -123456789)
w.add_uint64("p.u64", 2**64 - 2)
w.add_int64("p.i64", -(2**62))
w.add_float32("p.f32", 0.1)
w.add_float64("p.f64", 1.0 / 3.0)
w.add_bool("p.bool", False)
w.add_array("p.arr.i32", [1, -2, 3])
w.add_array("p.arr.f32", [0.5, -0.25])
w.add_array("p.arr.str", ["hello", "w\u00f6rld", ""])
w.add_array("p.arr.bool", [True, False])
w.add_key_value("p.arr.u16", [1, 2, 65535], VT.ARRAY, sub_type=VT.UINT16)
w.add_key_value("p.arr.u64", [2**64 - 1], VT.ARRAY, sub_type=VT.UINT64)
w.add_key_value("p.arr.f64", [1e-300, 2.5], VT.ARRAY, sub_type=VT.FLOAT64)
w.add_array("p.nested", [[1, 2, 3], [4], [5, 6]])

tensors = {}
tensors["t.f32"] = (pat(64 * 3, 11).reshape(3, 64), None)
tensors["t.f16"] = (pat(32 * 2, 12).astype(np.float16).reshape(2, 32), None)
tensors["t.q8_0"] = (gguf.quants.quantize(pat(64 * 2, 13).reshape(2, 64), QT.Q8_0), QT.Q8_0)
tensors["t.q4_0"] = (gguf.quants.quantize(pat(32 * 4, 14).reshape(4, 32), QT.Q4_0), QT.Q4_0)
tensors["t.bf16"] = (gguf.quants.quantize(pat(16, 15).reshape(2, 8), QT.BF16), QT.BF16)
tensors["t.i32"] = (np.array([7, -8, 9], dtype=np.int32), None)
tensors["t.3d"] = (pat(4 * 3 * 2, 16).reshape(2, 3, 4), None)
for name, (arr, raw) in tensors.items():
    w.add_tensor(name, arr, raw_dtype=raw)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

rc, ours = our_dump(py_path)
check(rc == 0, "our reader opens the file gguf.GGUFWriter wrote")
ref, reader = reference_dump(py_path)
compare(ours, ref, "our dump of the Python-written file equals gguf.GGUFReader's view")
check("alignment\t128" in ours, "general.alignment 128 is honoured")
# the bytes we hand out are the bytes Python wrote, not just what its reader says
sums = {l.split("\t")[1]: l.split("\t")[7] for l in ours if l.startswith("tensor\t")}
for name, (arr, raw) in tensors.items():
    check(sums.get(name) == fnv64(np.ascontiguousarray(arr).tobytes()), "tensor %s bytes match what was written" % name)
shapes = {l.split("\t")[1]: l.split("\t")[4] for l in ours if l.startswith("tensor\t")}
check(shapes.get("t.3d") == "4,3,2" and shapes.get("t.q8_0") == "64,2", "dims are in ggml order (ne[0] innermost)")

# ---- 2. our writer -> gguf.GGUFReader ---------------------------------------
c_path = os.path.join(tmp, "from_tensile.gguf")
p = subprocess.run([BIN, "--write-sample", c_path], capture_output=True, text=True, timeout=120)
check(p.returncode == 0, "model_test_gguf --write-sample succeeds")
ref, r = reference_dump(c_path)
rc, ours = our_dump(c_path)
check(rc == 0, "our reader opens our sample")
compare(ours, ref, "gguf.GGUFReader's view of our file equals our dump")

f = r.fields
check(f["general.architecture"].contents() == "tensile-test", "general.architecture")
check(f["general.name"].contents() == "sample \u00fcn\u00efcode", "general.name (UTF-8)")
check(f["t.u64"].contents() == 9223372036854775813, "u64 above INT64_MAX")
check(f["t.i64"].contents() == -4611686018427387907, "i64")
check(abs(f["t.f32"].contents() - 3.14159) < 1e-6, "f32")
check(f["t.f64"].contents() == -2.718281828459045, "f64")
check(f["t.bool"].contents() is True, "bool")
check(f["t.arr.str"].contents() == ["alpha", "", "\u03b3 gamma"], "string array")
check(f["t.arr.i16"].contents() == [-32768, 5, 32767], "i16 array")
check(f["t.arr.empty"].contents() == [], "empty array")
check(f["t.nested"].contents() == [1, -2, 7], "nested array (gguf flattens it)")
check(r.alignment == 64 and r.data_offset % 64 == 0, "alignment 64 and an aligned data section")
check(all((t.data_offset - r.data_offset) % 64 == 0 for t in r.tensors), "every tensor offset is aligned")
check(os.path.getsize(c_path) % 64 == 0, "the file ends padded to the alignment, as gguf.GGUFWriter pads it")

T = {t.name: t for t in r.tensors}
check(np.array_equal(T["tok_embd.weight"].data, pat(64 * 3, 1).reshape(3, 64)), "F32 tensor values")
check(np.array_equal(T["blk.0.attn_q.weight"].data, pat(32 * 4, 2).astype(np.float16).reshape(4, 32)),
      "F16 tensor values")
q8 = gguf.quants.quantize(pat(64 * 2, 3).reshape(2, 64), QT.Q8_0)
check(np.array_equal(T["blk.0.ffn_up.weight"].data, q8), "Q8_0 blocks bit-exact with gguf.quants")
q4 = gguf.quants.quantize(pat(32 * 3, 4).reshape(1, 3, 32), QT.Q4_0)
check(T["blk.0.ffn_down.weight"].data.tobytes() == q4.tobytes(), "Q4_0 blocks bit-exact with gguf.quants")
deq = gguf.quants.dequantize(T["blk.0.ffn_up.weight"].data, QT.Q8_0)
check(np.max(np.abs(deq - pat(64 * 2, 3).reshape(2, 64))) < 0.02, "Q8_0 dequantizes close to the source")
check(np.array_equal(T["output_norm.weight"].data, pat(5, 9)), "tensor produced by a callback")
check(np.array_equal(T["pos.i32"].data, np.array([-5, 0, 123456], dtype=np.int32)), "I32 tensor")
bf = gguf.quants.quantize(pat(16, 5), QT.BF16)
check(T["emb.bf16"].data.tobytes() == bf.tobytes(), "BF16 bytes equal gguf.quants' rounding")
check([int(d) for d in T["emb.bf16"].shape] == [4, 2, 1, 2], "4-D shape")

for name in os.listdir(tmp):
    os.unlink(os.path.join(tmp, name))
os.rmdir(tmp)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
