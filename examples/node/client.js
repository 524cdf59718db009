#!/usr/bin/env node
// Calls a metalserve server with @grpc/grpc-js: the native API
// (GetModelMetadata, Predict) and the Open Inference Protocol (KServe v2)
// ModelInfer, with the same input, and prints (or writes) the outputs as JSON
// in the format of `metalserve-bench --dump_outputs`.
//
//   npm ci && node client.js --target=127.0.0.1:8500 [--input=row.bin] [--out=FILE]
//
// --input: raw little-endian bytes of one input row (default: zeros).
'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

function parseArgs(argv) {
  const args = {
    target: '127.0.0.1:8500',
    proto_dir: path.join(__dirname, '..', '..', 'proto'),
    input: '',
    out: '',
    timeout_s: 10,
  };
  for (const a of argv) {
    const m = /^--([a-z_]+)=(.*)$/.exec(a);
    if (!m || !(m[1] in args)) throw new Error(`unknown argument '${a}'`);
    args[m[1]] = m[1] === 'timeout_s' ? Number(m[2]) : m[2];
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
      default: throw new Error(`cannot decode datatype ${datatype}`);
    }
  }
  return out;
}

function inputBytes(args, rowShape, datatype) {
  const rowBytes = rowShape.reduce((a, b) => a * b, 1) * ITEM[datatype];
  if (!args.input) return Buffer.alloc(rowBytes);
  const data = fs.readFileSync(args.input);
  if (data.length !== rowBytes) {
    throw new Error(`--input='${args.input}' has ${data.length} bytes; one row ` +
                    `[${rowShape}] of ${datatype} needs ${rowBytes}`);
  }
  return data;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const native = load(args.proto_dir, 'metalserve/v1/inference.proto').metalserve.v1;
  const kserve = load(args.proto_dir, 'inference/grpc_service.proto').inference;
  const creds = grpc.credentials.createInsecure();
  const nativeClient = new native.Inference(args.target, creds);
  const kserveClient = new kserve.GRPCInferenceService(args.target, creds);

  // Native API: metadata, then Predict with one row.
  const md = await call(nativeClient, 'GetModelMetadata', {}, args.timeout_s);
  const spec = md.inputs[0];
  const datatype = NATIVE_TO_KSERVE[spec.dtype];
  const shape = [1, ...spec.shape.slice(1).map(Number)];
  const data = inputBytes(args, shape.slice(1), datatype);
  const predicted = await call(nativeClient, 'Predict', {
    model_name: md.model_name,
    inputs: [{ name: spec.name, dtype: spec.dtype, shape, data }],
  }, args.timeout_s);

  // KServe v2: ModelInfer with raw_input_contents.
  const inferred = await call(kserveClient, 'ModelInfer', {
    model_name: md.model_name,
    inputs: [{ name: spec.name, datatype, shape }],
    raw_input_contents: [data],
  }, args.timeout_s);

  const result = {
    model: md.model_name,
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
