#!/usr/bin/env python3
"""Writes the seed corpus for request_fuzzer: serialized
metalserve.v1.PredictRequest messages, encoded by hand (protobuf wire format)
so that no protobuf package is needed. Run from the repository root:

    python3 fuzz/make_corpus.py fuzz/corpus
"""
import os
import struct
import sys


def varint(n):
    n &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes it
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def tensor(name, dtype, shape, data):
    packed = b"".join(varint(d) for d in shape)
    return (field(1, 2, name.encode()) + field(2, 0, varint(dtype)) +
            field(3, 2, packed) + field(4, 2, data))


def request(tensors, model_name=""):
    out = field(1, 2, model_name.encode()) if model_name else b""
    return out + b"".join(field(2, 2, t) for t in tensors)


F32, I64, F16 = 1, 5, 2


def f32(n, v=1.0):
    return struct.pack("<%df" % n, *([v] * n))


def i64(n, v=1):
    return struct.pack("<%dq" % n, *([v] * n))


SEEDS = {
    # valid against the fuzzer's signature: input f32 [-1,3,4], mask i64 [-1,-1]
    "valid_1row": request([tensor("input", F32, [1, 3, 4], f32(12)),
                           tensor("mask", I64, [1, 2], i64(2))]),
    "valid_2rows_reordered": request([tensor("mask", I64, [2, 1], i64(2)),
                                      tensor("input", F32, [2, 3, 4], f32(24, 0.5))]),
    "valid_model_name": request([tensor("input", F32, [1, 3, 4], f32(12)),
                                 tensor("mask", I64, [1, 0], b"")], "fake"),
    "nan_inf": request([tensor("input", F32, [1, 3, 4],
                               struct.pack("<f", float("nan")) + struct.pack("<f", float("inf")) +
                               f32(10)),
                        tensor("mask", I64, [1, 1], i64(1))]),
    "short_data": request([tensor("input", F32, [1, 3, 4], f32(11)),
                           tensor("mask", I64, [1, 2], i64(2))]),
    "negative_dim": request([tensor("input", F32, [1, 3, 4], f32(12)),
                             tensor("mask", I64, [1, -2], b"")]),
    "overflow": request([tensor("input", F32, [1, 3, 4], f32(12)),
                         tensor("mask", I64, [3037000500, 3037000500], b"")]),
    "huge_shape": request([tensor("input", F32, [1 << 40, 3, 4], f32(12)),
                           tensor("mask", I64, [1 << 40, 1], b"")]),
    "duplicate": request([tensor("input", F32, [1, 3, 4], f32(12)),
                          tensor("input", F32, [1, 3, 4], f32(12))]),
    "rows_differ": request([tensor("input", F32, [2, 3, 4], f32(24)),
                            tensor("mask", I64, [1, 1], i64(1))]),
    "wrong_dtype": request([tensor("input", F16, [1, 3, 4], b"\0" * 24),
                            tensor("mask", I64, [1, 1], i64(1))]),
    "unnamed_unknown_dtype": request([tensor("", 42, [1], b"\0" * 4)]),
    "empty": b"",
}

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(SEEDS), out))
