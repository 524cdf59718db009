#!/usr/bin/env node
// Calls a metalserve server with @grpc/grpc-js: the native API
// (GetModelMetadata, Predict) and the Open Inference Protocol (KServe v2)
// ModelInfer, with the same inputs, and prints (or writes) the inputs sent and
// the outputs of both as JSON (outputs in the format of
// `metalserve-bench --dump_outputs`).
//
//   npm ci && node client.js --target=127.0.0.1:8500 [--fill=zeros|random]
//       [--rows=N] [--input=[NAME=]FILE ...] [--out=FILE]
//
// Every input the model declares (read from GetModelMetadata) is sent. An
// input named by --input (repeatable) takes its rows from FILE, the raw
// little-endian bytes of one row; the others are generated per their declared
// dtype and shape: zeros (default) or seeded random values (floats in [0, 1),
// integers in [0, 100), uint8/int8 any byte, bool 0/1).
'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

function parseArgs(argv) {
  const args = {
    target: '127.0.0.1:8500',
    proto_dir: path.join(__dirname, '..', '..', 'proto'),
    input: [],
    fill: 'zeros',
    seed: 1,
    rows: 1,
    out: '',
    timeout_s: 10,
  };
  const numeric = new Set(['timeout_s', 'seed', 'rows']);
  for (const a of argv) {
    const m = /^--([a-z_]+)=(.*)$/.exec(a);
    if (!m || !(m[1] in args)) throw new Error(`unknown argument '${a}'`);
    if (m[1] === 'input') args.input.push(m[2]);
    else args[m[1]] = numeric.has(m[1]) ? Number(m[2]) : m[2];
  }
  if (args.fill !== 'zeros' && args.fill !== 'random') {
    throw new Error(`--fill='${args.fill}': want zeros or random`);
  }
  if (!Number.isInteger(args.rows) || args.rows < 1) {
    throw new Error(`--rows=${args.rows} must be an integer >= 1`);
  }
  return args;
}

function load(protoDir, file) {
  const def = protoLoader.loadSync(file, {
    includeDirs: [protoDir],
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(def);
}

function call(client, method, request, timeoutS) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + timeoutS * 1000);
    client[method](request, { deadline }, (err, response) => {
      if (err) reject(new Error(`${method}: ${err.code} ${err.details}`));
      else resolve(response);
    });
  });
}

const NATIVE_TO_KSERVE = {
  DATA_TYPE_FLOAT32: 'FP32', DATA_TYPE_FLOAT16: 'FP16', DATA_TYPE_BFLOAT16: 'BF16',
  DATA_TYPE_FLOAT64: 'FP64', DATA_TYPE_INT64: 'INT64', DATA_TYPE_INT32: 'INT32',
  DATA_TYPE_UINT8: 'UINT8', DATA_TYPE_INT8: 'INT8', DATA_TYPE_BOOL: 'BOOL',
};
const ITEM = { FP32: 4, FP64: 8, INT64: 8, INT32: 4, UINT8: 1, INT8: 1, BOOL: 1, FP16: 2, BF16: 2 };

// IEEE half precision to a Number.
function halfToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1F;
  const frac = h & 0x3FF;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

function decode(datatype, buf) {
  const out = [];
  for (let off = 0; off < buf.length; off += ITEM[datatype]) {
    switch (datatype) {
      case 'FP32': out.push(buf.readFloatLE(off)); break;
      case 'FP64': out.push(buf.readDoubleLE(off)); break;
      case 'INT64': out.push(Number(buf.readBigInt64LE(off))); break;
      case 'INT32': out.push(buf.readInt32LE(off)); break;
      case 'UINT8': out.push(buf.readUInt8(off)); break;
      case 'INT8': out.push(buf.readInt8(off)); break;
      case 'BOOL': out.push(buf.readUInt8(off) !== 0); break;
      case 'FP16': out.push(halfToNumber(buf.readUInt16LE(off))); break;
      case 'BF16': out.push(Buffer.from([0, 0, buf[off], buf[off + 1]]).readFloatLE(0)); break;
      default: throw new Error(`cannot decode datatype ${datatype}`);
    }
  }
  return out;
}

// A small seeded generator (mulberry32): the same values on every run.
function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// `count` random elements of `datatype` as little-endian bytes.
function randomBytes(datatype, count, rand) {
  const buf = Buffer.alloc(count * ITEM[datatype]);
  for (let i = 0; i < count; i++) {
    const off = i * ITEM[datatype];
    switch (datatype) {
      case 'FP32': buf.writeFloatLE(rand(), off); break;
      case 'FP64': buf.writeDoubleLE(rand(), off); break;
      case 'FP16': buf.writeUInt16LE(0x3800 | Math.floor(rand() * 1024), off); break;
      case 'BF16': buf.writeUInt16LE(0x3F00 | Math.floor(rand() * 128), off); break;
      case 'INT64': buf.writeBigInt64LE(BigInt(Math.floor(rand() * 100)), off); break;
      case 'INT32': buf.writeInt32LE(Math.floor(rand() * 100), off); break;
      case 'BOOL': buf.writeUInt8(rand() < 0.5 ? 0 : 1, off); break;
      default: buf.writeUInt8(Math.floor(rand() * 256), off); break;  // UINT8, INT8
    }
  }
  return buf;
}

// --input values ([NAME=]FILE) as a Map of input name to path.
function parseFiles(specs, names) {
  const files = new Map();
  for (const spec of specs) {
    const eq = spec.indexOf('=');
    let name = spec.slice(0, eq);
    let file = spec.slice(eq + 1);
    if (eq < 0) {
      if (names.length !== 1) {
        throw new Error(`--input=${spec} names no input; the model has ` +
                        `${names.length} inputs [${names}]: use --input=NAME=FILE`);
      }
      [name, file] = [names[0], spec];
    }
    if (!names.includes(name)) {
      throw new Error(`--input=${spec}: the model has no input '${name}' ` +
                      `(its inputs: [${names}])`);
    }
    files.set(name, file);
  }
  return files;
}

// One {name, dtype, datatype, shape, data} per input the model declares.
function buildInputs(args, md) {
  const files = parseFiles(args.input, md.inputs.map((s) => s.name));
  const rand = seededRandom(args.seed);
  return md.inputs.map((spec) => {
    const datatype = NATIVE_TO_KSERVE[spec.dtype];
    const rowShape = spec.shape.slice(1).map(Number);
    if (rowShape.some((d) => d < 1)) {
      throw new Error(`input '${spec.name}' has a variable dimension ` +
                      `[${spec.shape}]; this client sends fixed shapes only`);
    }
    const count = rowShape.reduce((a, b) => a * b, 1);
    const rowBytes = count * ITEM[datatype];
    let data;
    if (files.has(spec.name)) {
      const file = files.get(spec.name);
      const row = fs.readFileSync(file);
      if (row.length !== rowBytes) {
        throw new Error(`--input=${spec.name}=${file} has ${row.length} bytes; one ` +
                        `row [${rowShape}] of ${datatype} needs ${rowBytes}`);
      }
      data = Buffer.concat(Array(args.rows).fill(row));
    } else if (args.fill === 'random') {
      data = randomBytes(datatype, count * args.rows, rand);
    } else {
      data = Buffer.alloc(rowBytes * args.rows);
    }
    return { name: spec.name, dtype: spec.dtype, datatype, shape: [args.rows, ...rowShape], data };
  });
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const native = load(args.proto_dir, 'metalserve/v1/inference.proto').metalserve.v1;
  const kserve = load(args.proto_dir, 'inference/grpc_service.proto').inference;
  const creds = grpc.credentials.createInsecure();
  const nativeClient = new native.Inference(args.target, creds);
  const kserveClient = new kserve.GRPCInferenceService(args.target, creds);

  // Native API: metadata, then Predict with every declared input.
  const md = await call(nativeClient, 'GetModelMetadata', {}, args.timeout_s);
  const inputs = buildInputs(args, md);
  const predicted = await call(nativeClient, 'Predict', {
    model_name: md.model_name,
    inputs: inputs.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: t.data })),
  }, args.timeout_s);

  // KServe v2: ModelInfer with raw_input_contents.
  const inferred = await call(kserveClient, 'ModelInfer', {
    model_name: md.model_name,
    inputs: inputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape })),
    raw_input_contents: inputs.map((t) => t.data),
  }, args.timeout_s);

  const result = {
    model: md.model_name,
    inputs: inputs.map((t) => ({
      name: t.name, datatype: t.datatype, shape: t.shape, data: decode(t.datatype, t.data),
    })),
    native: {
      outputs: predicted.outputs.map((o) => ({
        name: o.name, datatype: NATIVE_TO_KSERVE[o.dtype], shape: o.shape.map(Number),
        data: decode(NATIVE_TO_KSERVE[o.dtype], o.data),
      })),
    },
    kserve: {
      outputs: inferred.outputs.map((o, i) => ({
        name: o.name, datatype: o.datatype, shape: o.shape.map(Number),
        data: decode(o.datatype, inferred.raw_output_contents[i]),
      })),
    },
  };
  const text = JSON.stringify(result) + '\n';
  if (args.out) fs.writeFileSync(args.out, text);
  else process.stdout.write(text);
  nativeClient.close();
  kserveClient.close();
}

main().catch((err) => {
  process.stderr.write(`client.js: ${err.message}\n`);
  process.exit(1);
});
