// Field-by-field comparison of our protos with the generated code of the
// published client package @norskvideo/norsk-api@1.0.384.
//
//   node fields.mjs DESCRIPTOR_SET
//
// DESCRIPTOR_SET is a binary google.protobuf.FileDescriptorSet of our protos
// with their imports (written by fields_test.go from the Go registry). For
// every message class exported by the package's lib/manager_pb.js,
// lib/worker_pb.js, lib/shared/common_pb.js and lib/shared/error_pb.js, every
// field must exist in ours with the same number, name, JSON name, kind
// (scalar type, enum or message type), repeated-ness, packing, map-ness (key
// and value types), oneof membership and proto3 optional-ness; every enum
// value must keep its name and number; and every method of the package's
// grpc-js services (lib/manager_grpc_pb.js, lib/worker_grpc_pb.js) must exist
// with the same request/response types and streaming shape. Additions in ours
// are allowed.
//
// Prints one "MISMATCH ..." line per difference and a summary line; exits 1
// on any difference, or if the walk did not visit exactly the definitions
// 1.0.384 has (so that a walker that silently skips things cannot pass).

import { createRequire } from 'node:module';

// CommonJS throughout, to share the package's copy of @bufbuild/protobuf.
const require = createRequire(import.meta.url);
const fs = require('node:fs');
const {
  FileDescriptorSet, FieldDescriptorProto_Type: Type, FieldDescriptorProto_Label: Label, proto3,
} = require('@bufbuild/protobuf');

const LIB = '@norskvideo/norsk-api/lib/';
const MESSAGE_MODULES = ['manager_pb.js', 'worker_pb.js', 'shared/common_pb.js', 'shared/error_pb.js'];
const SERVICE_MODULES = ['manager_grpc_pb.js', 'worker_grpc_pb.js'];

// What 1.0.384 defines in those modules (102 messages, 12 enums, 358
// "{ no: ...}" entries in the generated code; 13 Manager RPCs and 1 Worker
// RPC). The lockfile pins the package, so these only change together with it.
const EXPECTED = { messages: 102, fields: 294, enums: 12, enumValues: 64, methods: 14 };

const mismatches = [];
function mismatch(where, what) {
  mismatches.push(`MISMATCH ${where}: ${what}`);
}

// --- our definitions, indexed by full name -----------------------------------

function indexDescriptors(set) {
  const messages = new Map(); // full name -> DescriptorProto
  const enums = new Map(); // full name -> EnumDescriptorProto
  const services = new Map(); // full name -> ServiceDescriptorProto
  const addEnums = (prefix, list) => list.forEach((e) => enums.set(`${prefix}.${e.name}`, e));
  const addMessages = (prefix, list) => list.forEach((d) => {
    const name = `${prefix}.${d.name}`;
    messages.set(name, d);
    addMessages(name, d.nestedType);
    addEnums(name, d.enumType);
  });
  for (const file of set.file) {
    const pkg = file.package;
    addMessages(pkg, file.messageType);
    addEnums(pkg, file.enumType);
    file.service.forEach((s) => services.set(`${pkg}.${s.name}`, s));
  }
  return { messages, enums, services };
}

const typeName = (t) => Type[t] ?? `type ${t}`;
const ref = (name) => `.${name}`;

// describeOurs names what one of our fields is, in the package's vocabulary.
function describeOurs(ours, f) {
  if (f.type === Type.MESSAGE) {
    const entry = mapEntry(ours, f);
    if (entry) return `map<${typeName(entry.field[0].type)}, ${describeOurs(ours, entry.field[1])}>`;
    return `message ${f.typeName.slice(1)}`;
  }
  if (f.type === Type.ENUM) return `enum ${f.typeName.slice(1)}`;
  return typeName(f.type);
}

function describeTheirs(kind, T, K, V) {
  switch (kind) {
    case 'scalar': return typeName(T);
    case 'enum': return `enum ${T.typeName}`;
    case 'message': return `message ${T.typeName}`;
    case 'map': return `map<${typeName(K)}, ${describeTheirs(V.kind, V.T)}>`;
    default: return kind;
  }
}

// mapEntry returns the synthetic map-entry message of a map field, or null.
function mapEntry(ours, f) {
  if (f.type !== Type.MESSAGE || f.label !== Label.REPEATED) return null;
  const d = ours.messages.get(f.typeName.slice(1));
  return d?.options?.mapEntry ? d : null;
}

// sameKind reports whether our field f has the package's kind/T.
function sameKind(ours, f, kind, T) {
  switch (kind) {
    case 'scalar': return f.type === T;
    case 'enum': return f.type === Type.ENUM && f.typeName === ref(T.typeName);
    case 'message': return f.type === Type.MESSAGE && !mapEntry(ours, f) && f.typeName === ref(T.typeName);
    default: return false;
  }
}

// --- the comparison -------------------------------------------------------------

function isPackable(kind, T) {
  return kind === 'enum' || (kind === 'scalar' && T !== Type.STRING && T !== Type.BYTES);
}

function compareField(ours, typeFullName, desc, theirs, counts) {
  counts.fields++;
  const where = `${typeFullName}.${theirs.name} (#${theirs.no})`;
  const f = desc.field.find((x) => x.number === theirs.no);
  if (!f) {
    const byName = desc.field.find((x) => x.name === theirs.name);
    mismatch(where, byName ? `renumbered: ours is #${byName.number}` : 'missing in ours');
    return;
  }
  if (f.name !== theirs.name) mismatch(where, `name: ours is "${f.name}"`);
  if (f.jsonName !== theirs.jsonName) mismatch(where, `JSON name: ours is "${f.jsonName}", 1.0.384 "${theirs.jsonName}"`);
  const want = describeTheirs(theirs.kind, theirs.T, theirs.K, theirs.V);
  const got = describeOurs(ours, f);
  if (theirs.kind === 'map') {
    const entry = mapEntry(ours, f);
    const ok = entry && entry.field[0].type === theirs.K && sameKind(ours, entry.field[1], theirs.V.kind, theirs.V.T);
    if (!ok) mismatch(where, `type: ours is ${got}, 1.0.384 ${want}`);
  } else {
    if (!sameKind(ours, f, theirs.kind, theirs.T)) mismatch(where, `type: ours is ${got}, 1.0.384 ${want}`);
    const repeated = f.label === Label.REPEATED;
    if (repeated !== !!theirs.repeated) mismatch(where, `repeated: ours ${repeated}, 1.0.384 ${!!theirs.repeated}`);
    if (repeated && theirs.repeated && isPackable(theirs.kind, theirs.T)) {
      const packed = f.options?.packed ?? true; // proto3 packs by default
      if (packed !== !!theirs.packed) mismatch(where, `packed: ours ${packed}, 1.0.384 ${!!theirs.packed}`);
    }
  }
  const oneof = f.oneofIndex !== undefined && !f.proto3Optional ? desc.oneofDecl[f.oneofIndex].name : undefined;
  if (oneof !== theirs.oneof?.name) {
    mismatch(where, `oneof: ours ${oneof ?? '(none)'}, 1.0.384 ${theirs.oneof?.name ?? '(none)'}`);
  }
  if (!!f.proto3Optional !== !!theirs.opt) {
    mismatch(where, `proto3 optional: ours ${!!f.proto3Optional}, 1.0.384 ${!!theirs.opt}`);
  }
}

function compareMessage(ours, T, counts) {
  counts.messages++;
  const desc = ours.messages.get(T.typeName);
  if (!desc) {
    mismatch(T.typeName, 'message missing in ours');
    counts.fields += T.fields.list().length;
    return;
  }
  for (const theirs of T.fields.list()) compareField(ours, T.typeName, desc, theirs, counts);
}

function enumTypeOf(v) {
  try {
    return proto3.getEnumType(v);
  } catch {
    return undefined; // not an enum object
  }
}

function compareEnum(ours, et, counts) {
  counts.enums++;
  const desc = ours.enums.get(et.typeName);
  for (const v of et.values) {
    counts.enumValues++;
    const where = `${et.typeName}.${v.name} (= ${v.no})`;
    if (!desc) {
      mismatch(where, 'enum missing in ours');
      continue;
    }
    const byName = desc.value.find((x) => x.name === v.name);
    const byNumber = desc.value.filter((x) => x.number === v.no).map((x) => x.name);
    if (!byName) mismatch(where, `missing in ours${byNumber.length ? `; ${v.no} is ${byNumber.join(', ')}` : ''}`);
    else if (byName.number !== v.no) mismatch(where, `renumbered: ours is ${byName.number}`);
  }
}

function compareServices(ours, counts) {
  for (const mod of SERVICE_MODULES) {
    for (const [exportName, svc] of Object.entries(require(LIB + mod))) {
      if (typeof svc === 'function' || typeof svc !== 'object') continue; // client constructors
      for (const method of Object.values(svc)) {
        counts.methods++;
        const [, svcName, methodName] = method.path.split('/');
        const where = `${exportName} ${method.path}`;
        const s = ours.services.get(svcName);
        const o = s?.method.find((x) => x.name === methodName);
        if (!o) {
          mismatch(where, s ? 'method missing in ours' : `service ${svcName} missing in ours`);
          continue;
        }
        if (o.inputType !== ref(method.requestType.typeName)) mismatch(where, `request: ours ${o.inputType}, 1.0.384 .${method.requestType.typeName}`);
        if (o.outputType !== ref(method.responseType.typeName)) mismatch(where, `response: ours ${o.outputType}, 1.0.384 .${method.responseType.typeName}`);
        if (!!o.clientStreaming !== method.requestStream) mismatch(where, `client streaming: ours ${!!o.clientStreaming}, 1.0.384 ${method.requestStream}`);
        if (!!o.serverStreaming !== method.responseStream) mismatch(where, `server streaming: ours ${!!o.serverStreaming}, 1.0.384 ${method.responseStream}`);
      }
    }
  }
}

function main(path) {
  const ours = indexDescriptors(FileDescriptorSet.fromBinary(fs.readFileSync(path)));
  const counts = { messages: 0, fields: 0, enums: 0, enumValues: 0, methods: 0 };
  for (const mod of MESSAGE_MODULES) {
    for (const v of Object.values(require(LIB + mod))) {
      if (typeof v === 'function' && v.typeName && v.fields) compareMessage(ours, v, counts);
      else if (v && typeof v === 'object') {
        const et = enumTypeOf(v);
        if (et) compareEnum(ours, et, counts);
      }
    }
  }
  compareServices(ours, counts);
  for (const line of mismatches) console.log(line);
  const summary = Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(', ');
  const offCount = Object.keys(EXPECTED).filter((k) => counts[k] !== EXPECTED[k]);
  if (offCount.length) {
    console.log(`INCOMPLETE walked ${summary}; 1.0.384 has ${Object.entries(EXPECTED).map(([k, n]) => `${n} ${k}`).join(', ')}`);
  }
  console.log(`checked ${summary} of @norskvideo/norsk-api@1.0.384: ${mismatches.length} mismatches`);
  return mismatches.length === 0 && offCount.length === 0;
}

const [path] = process.argv.slice(2);
if (!path) {
  console.error('usage: node fields.mjs DESCRIPTOR_SET');
  process.exit(2);
}
process.exitCode = main(path) ? 0 : 1;
