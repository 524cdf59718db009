#!/usr/bin/env python3
"""A gRPC client that never lets the server send it an answer.

Speaks HTTP/2 (cleartext) itself: its SETTINGS give every stream an initial
window of 0 bytes and it never sends a WINDOW_UPDATE, so the server can send
the headers of each answer but none of its message. (A gRPC library client
cannot do this: gRPC 1.51 grants a stream the window for a whole message it
has started to receive, whether the application reads or not.) It answers
the server's SETTINGS and PINGs, so the connection stays healthy, and counts
what the server does with each stream: RST_STREAM (cut off) or trailers.

Used by memory_attack.py (the ctest reliability_memory_bounds). Standard
library only. Run alone:
  python3 bench/reliability/window_zero.py --port 8500 --calls 48 --hold_s 3 \\
      --input x --row_bytes 16
"""

import argparse
import socket
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def _varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def predict_request(input_name, row_bytes):
    """A metalserve.v1.PredictRequest: one float32 row of row_bytes/4 zeros."""
    shape = _varint(1) + _varint(row_bytes // 4)
    tensor = (_field(1, input_name.encode()) + b"\x10\x01" + _field(3, shape) +
              _field(4, bytes(row_bytes)))
    return _field(2, tensor)


def _headers(port):
    """HPACK: every field a literal without indexing, no Huffman."""
    out = bytearray()
    for name, value in ((":method", "POST"), (":scheme", "http"),
                        (":path", "/metalserve.v1.Inference/Predict"),
                        (":authority", f"127.0.0.1:{port}"),
                        ("content-type", "application/grpc"), ("te", "trailers")):
        out += b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + \
            value.encode()
    return bytes(out)


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset_streams = set()
        self.trailers = set()
        self.data_bytes = 0
        self.goaway = False


def _reader(sock, counts):
    buf = b""
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            kind, flags = buf[3], buf[4]
            stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            payload, buf = buf[9:9 + length], buf[9 + length:]
            with counts.lock:
                try:
                    if kind == SETTINGS and not flags & ACK:
                        sock.sendall(frame(SETTINGS, ACK, 0))
                    elif kind == PING and not flags & ACK:
                        sock.sendall(frame(PING, ACK, 0, payload))
                except OSError:
                    return
                if kind == RST_STREAM:
                    counts.reset_streams.add(stream)
                elif kind == HEADERS and flags & END_STREAM:
                    counts.trailers.add(stream)
                elif kind == DATA:
                    counts.data_bytes += length
                elif kind == GOAWAY:
                    counts.goaway = True


def hold_unread(port, calls, hold_s, request):
    """Sends `calls` Predict calls of `request` on one connection with a zero
    window, waits `hold_s`, closes; returns what the server did."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(None)
    counts = Counts()
    # INITIAL_WINDOW_SIZE (4) = 0; ENABLE_PUSH (2) = 0.
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HIHI", 4, 0, 2, 0)))
    reader = threading.Thread(target=_reader, args=(sock, counts), daemon=True)
    reader.start()
    message = b"\x00" + struct.pack(">I", len(request)) + request
    headers = _headers(port)
    for i in range(calls):
        stream = 2 * i + 1
        with counts.lock:
            sock.sendall(frame(HEADERS, END_HEADERS, stream, headers) +
                         frame(DATA, END_STREAM, stream, message))
    time.sleep(hold_s)
    with counts.lock:
        result = {"calls": calls, "reset": len(counts.reset_streams),
                  "trailers": len(counts.trailers), "data_bytes": counts.data_bytes,
                  "goaway": counts.goaway}
    sock.shutdown(socket.SHUT_RDWR)  # wakes the reader
    reader.join(timeout=5)
    sock.close()
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--calls", type=int, default=48)
    ap.add_argument("--hold_s", type=float, default=3)
    ap.add_argument("--input", default="x", help="the model's input name")
    ap.add_argument("--row_bytes", type=int, default=16, help="bytes of one input row")
    args = ap.parse_args()
    print(hold_unread(args.port, args.calls, args.hold_s,
                      predict_request(args.input, args.row_bytes)))


if __name__ == "__main__":
    main()
