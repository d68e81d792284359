// Wire-compatibility check of a running Norsk Manager against the published
// client package @norskvideo/norsk-api@1.0.384: every request is built and
// every answer decoded by that package's own protoc-gen-es classes and its
// grpc-js ManagerClient, and only fields that exist in 1.0.384 are used.
//
//   node compat.mjs MANAGER_ADDR NODE_ID [--ca CA.pem [--cert C.pem --key K.pem]] [--token-file F]
//
// MANAGER_ADDR is host:port of the manager's gRPC API; NODE_ID an online
// node (a mock node backed by a real worker) that jobs can start on. With
// --ca the channel is TLS (verified against CA.pem; --cert/--key present a
// client certificate for mutual TLS); with --token-file every call carries
// the file's ACL token as `authorization: Bearer <token>` call metadata —
// grpc-js's own channel and call credentials, as an application using the
// published package would pass them. Without options: plaintext, no token.
// The manager must hold no jobs whose id starts with "compat-".
//
// Prints one line per check ("ok   ..."); on the first mismatch prints
// "FAIL ..." with what was expected and what came back, and exits 1.
// Run through `go test ./test/compat/`, which starts the manager and worker.

import { createRequire } from 'node:module';

// The generated code is CommonJS and @bufbuild/protobuf is a dual package:
// an ESM `import` would load a second copy whose Timestamp and Empty fail
// the generated serializers' instanceof checks. Load everything through
// require so this script shares the package's own instances.
const require = createRequire(import.meta.url);
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { Timestamp, Empty, proto3 } = require('@bufbuild/protobuf');
const m = require('@norskvideo/norsk-api/lib/manager_pb.js');
const c = require('@norskvideo/norsk-api/lib/shared/common_pb.js');
const { ManagerClient } = require('@norskvideo/norsk-api/lib/manager_grpc_pb.js');

const RPC_TIMEOUT_MS = 10_000;
const EVENT_TIMEOUT_MS = 20_000;
const ROLE = 'primary';

class CheckFailed extends Error {}

function ok(name, detail) {
  console.log(`ok   ${name}${detail ? ` (${detail})` : ''}`);
}

function fail(name, detail) {
  throw new CheckFailed(`${name}: ${detail}`);
}

function check(cond, name, detail) {
  if (!cond) fail(name, typeof detail === 'function' ? detail() : detail);
}

// --- gRPC helpers -----------------------------------------------------------

function deadline() {
  return { deadline: new Date(Date.now() + RPC_TIMEOUT_MS) };
}

function statusName(code) {
  return Object.keys(grpc.status).find((k) => grpc.status[k] === code) ?? String(code);
}

function describeError(err) {
  return err && err.code !== undefined ? `${statusName(err.code)}: ${err.details}` : String(err);
}

// unary calls method on client and resolves with the response; a gRPC
// error fails the check named what.
async function unary(client, method, req, what) {
  try {
    return await new Promise((resolve, reject) => {
      client[method](req, deadline(), (err, resp) => (err ? reject(err) : resolve(resp)));
    });
  } catch (err) {
    fail(what, `${method} failed: ${describeError(err)}`);
  }
}

// expectStatus calls method and checks that it fails with code.
async function expectStatus(client, method, req, code, what) {
  let resp;
  try {
    resp = await new Promise((resolve, reject) => {
      client[method](req, deadline(), (err, r) => (err ? reject(err) : resolve(r)));
    });
  } catch (err) {
    check(err.code === code, what, `expected status ${statusName(code)}, got ${describeError(err)}`);
    ok(what, `${statusName(code)}: ${err.details}`);
    return;
  }
  fail(what, `expected status ${statusName(code)}, got success: ${resp.toJsonString()}`);
}

// search runs JobSearch with filters and resolves with every CurrentJob.
async function search(client, filters, what) {
  try {
    return await new Promise((resolve, reject) => {
      const out = [];
      const call = client.jobSearch(new m.JobSearchRequest({ jobFilter: filters }), deadline());
      call.on('data', (cj) => out.push(cj));
      call.on('error', reject);
      call.on('end', () => resolve(out));
    });
  } catch (err) {
    fail(what, `JobSearch failed: ${describeError(err)}`);
  }
}

// Subscription is one EventStream call, buffering every event so that checks
// can wait for one matching a predicate (with a deadline, never a sleep).
class Subscription {
  constructor(client, pendingWindowS) {
    this.events = [];
    this.error = null;
    this.ended = false;
    this.wakeups = new Set();
    this.call = client.eventStream(new m.EventStreamRequest({ pendingWindowS }));
    this.call.on('data', (ev) => { this.events.push(ev); this.wake(); });
    this.call.on('error', (err) => {
      if (err.code !== grpc.status.CANCELLED) this.error = err;
      this.ended = true;
      this.wake();
    });
    this.call.on('end', () => { this.ended = true; this.wake(); });
  }

  wake() {
    for (const w of this.wakeups) w();
  }

  // next resolves with [index, event] of the first event at or after
  // index from that matches pred; it fails the check named what if none
  // arrives within EVENT_TIMEOUT_MS or the stream ends.
  async next(from, pred, what) {
    const until = Date.now() + EVENT_TIMEOUT_MS;
    for (let i = from; ; ) {
      for (; i < this.events.length; i++) {
        if (pred(this.events[i])) return [i, this.events[i]];
      }
      if (this.error) fail(what, `event stream failed: ${describeError(this.error)}`);
      if (this.ended) fail(what, 'event stream ended');
      const left = until - Date.now();
      if (left <= 0) {
        fail(what, `no matching event within ${EVENT_TIMEOUT_MS} ms; events after #${from}: ` +
          this.events.slice(from).map(summarize).join(', '));
      }
      await new Promise((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.wakeups.delete(done);
          resolve();
        };
        const timer = setTimeout(done, left);
        this.wakeups.add(done);
      });
    }
  }

  close() {
    this.call.cancel();
  }
}

function summarize(ev) {
  const e = ev.event;
  switch (e.case) {
    case 'jobUpdated': case 'jobActive': case 'jobPending': case 'jobOutOfWindow': {
      const jwh = e.value.jobWithHistory;
      return `${e.case}(${jwh?.job?.jobId?.jobId}: ${historyKinds(jwh).join('>')})`;
    }
    case 'jobDeleted': return `jobDeleted(${e.value.jobId?.jobId})`;
    case 'nodeRunning': return `nodeRunning(${e.value.nodeMetadata?.nodeId?.nodeId})`;
    default: return e.case ?? 'empty';
  }
}

function historyKinds(jwh) {
  return (jwh?.historyEntry ?? []).map((h) => h.historyEntry.case);
}

// --- job fixtures (1.0.384 fields only) --------------------------------------

function timestamp(ms, nanos) {
  return new Timestamp({ seconds: BigInt(Math.floor(ms / 1000)), nanos });
}

function tsMillis(ts) {
  return Number(ts.seconds) * 1000 + ts.nanos / 1e6;
}

function portMappings() {
  return [
    new c.PortMapping({
      containerPort: 5001, protocol: c.ProtocolFamily.UDP, group: 'srt',
      hostPort: { case: 'ephemeral', value: new c.HostPortEphemeral() },
    }),
    new c.PortMapping({
      containerPort: 8080, protocol: c.ProtocolFamily.TCP, hostAddress: '127.0.0.1',
      hostPort: { case: 'specific', value: new c.HostPortSpecific({ port: 18080 }) },
    }),
    new c.PortMapping({
      containerPort: 9000, protocol: c.ProtocolFamily.ANY,
      hostPort: { case: 'range', value: new c.HostPortRange({ minPort: 20000, maxPort: 20010 }) },
    }),
  ];
}

function serviceParameters(cpus) {
  return new c.ServiceParameters({
    portMappings: portMappings(),
    environmentVariables: [
      new c.EnvironmentVariable({ name: 'NORSK_LOG', value: 'debug' }),
      new c.EnvironmentVariable({ name: 'EMPTY', value: '' }),
      new c.EnvironmentVariable({ name: 'QUOTED', value: 'a "b" = c\n' }),
    ],
    sharedMemorySize: new c.OptionalInt64({ value: 1n << 33n }),
    cpuSet: cpus,
    volumeMounts: [
      new c.VolumeMount({ volumeName: 'media', containerPath: '/media', readOnly: true }),
      new c.VolumeMount({ volumeName: 'scratch', containerPath: '/tmp/scratch' }),
    ],
  });
}

// fullJob sets every Job field of 1.0.384 except current_hash and state,
// which the manager owns.
function fullJob(id, start, suite) {
  return new m.Job({
    jobId: new c.JobId({ jobId: id }),
    description: `compat job ${id}: ünïcødé ✓`,
    tags: { 'compat-suite': suite, team: 'video', 'empty-value': '', 'ünï': 'cødé', 42: 'numeric key' },
    startDateTime: start,
    managerConfiguration: JSON.stringify({ retries: 3, nested: { list: [1, 2] } }),
    services: [
      new c.Service({
        name: 'encoder',
        container: {
          case: 'docker',
          value: new c.DockerContainer({ containerUrl: new c.ContainerUrl({ url: 'docker.io/norskvideo/norsk:1.0.384' }) }),
        },
        restart: c.Service_ServiceRestart.ON_FAILURE,
        dependsOn: ['sidecar'],
        configuration: '{"mode":"live"}',
        restartCount: 5,
        restartPeriod: 60,
        command: 'norsk --config /etc/norsk.yaml',
        parameters: serviceParameters([0, 1, 3]),
      }),
      new c.Service({ name: 'sidecar', restart: c.Service_ServiceRestart.ALWAYS, command: 'sidecar --serve' }),
    ],
    norskMediaVersion: m.Version.LTS,
    norskServiceParameters: serviceParameters([2]),
    volumes: ['media', 'scratch'],
    shape: 'VM.Standard.E4.Flex',
    architecture: 'x86_64',
    subnet: 'subnet-0abc',
    availabilityDomain: 'EU-FRANKFURT-1-AD-1',
  });
}

// runJob is a job the worker's process runtime can really run.
function runJob(id, start) {
  return new m.Job({
    jobId: new c.JobId({ jobId: id }),
    description: 'runs on the mock node',
    tags: { 'compat-suite': 'run' },
    startDateTime: start,
    services: [
      new c.Service({
        name: 'main',
        restart: c.Service_ServiceRestart.NEVER,
        // Bounded, so nothing outlives a failed run for long.
        command: 'exec sleep 120',
        parameters: new c.ServiceParameters({
          portMappings: [new c.PortMapping({
            containerPort: 8000, protocol: c.ProtocolFamily.TCP,
            hostPort: { case: 'ephemeral', value: new c.HostPortEphemeral() },
          })],
          environmentVariables: [new c.EnvironmentVariable({ name: 'COMPAT', value: '1' })],
        }),
      }),
    ],
  });
}

// --- byte-level comparison ----------------------------------------------------

function sortedTags(tags) {
  return Object.fromEntries(Object.entries(tags).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

// canonical returns job's encoding with the manager-owned current_hash and
// state cleared and map entries in key order (map order is not part of the
// wire contract). Unknown fields (anything the manager added that 1.0.384
// does not know) are kept, so they show up as a difference.
function canonical(job) {
  const j = m.Job.fromBinary(job.toBinary());
  j.currentHash = 0n;
  j.state = m.Job_JobState.PRE;
  j.tags = sortedTags(j.tags);
  return Buffer.from(j.toBinary());
}

function jobDiff(sent, got) {
  const lines = [];
  const unknown = proto3.bin.listUnknownFields(got);
  if (unknown.length) {
    lines.push(`unknown (post-1.0.384) fields in the answer: ${unknown.map((u) => `#${u.no}`).join(', ')}`);
  }
  const a = sent.toJson({ emitDefaultValues: true });
  const b = got.toJson({ emitDefaultValues: true });
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
    if (k === 'currentHash' || k === 'state') continue;
    const x = JSON.stringify(k === 'tags' ? sortedTags(a[k] ?? {}) : a[k]);
    const y = JSON.stringify(k === 'tags' ? sortedTags(b[k] ?? {}) : b[k]);
    if (x !== y) lines.push(`${k}: sent ${x}, got ${y}`);
  }
  if (!lines.length) lines.push('(the JSON forms agree; the difference is in the encoding)');
  return lines.join('; ');
}

// sameJob checks that got is sent, byte for byte, apart from current_hash
// and state.
function sameJob(sent, got, what) {
  check(got, what, 'no job in the answer');
  const x = canonical(sent);
  const y = canonical(got);
  check(x.equals(y), what, () => `job differs from what was sent: ${jobDiff(sent, got)}`);
}

// --- checks -------------------------------------------------------------------

function ids(currentJobs) {
  return currentJobs.map((cj) => cj.job?.jobId?.jobId).sort();
}

function sameIds(got, want) {
  return JSON.stringify(got) === JSON.stringify([...want].sort());
}

async function checkSearch(client, name, filters, want) {
  const got = await search(client, filters, name);
  const gotIds = ids(got);
  check(sameIds(gotIds, want), name, `expected jobs [${[...want].sort()}], got [${gotIds}]`);
  ok(name, `[${gotIds}]`);
  return got;
}

const idRe = (re) => new m.JobFilter({ jobFilter: { case: 'idFilter', value: new m.IdFilter({ comparison: { case: 're', value: re } }) } });
const idEq = (id) => new m.JobFilter({ jobFilter: { case: 'idFilter', value: new m.IdFilter({ comparison: { case: 'eq', value: id } }) } });
const tagEq = (name, v) => new m.JobFilter({ jobFilter: { case: 'tagFilter', value: new m.TagFilter({ tagName: name, comparison: { case: 'eq', value: v } }) } });
const date = (cmp, value) => new m.JobFilter({ jobFilter: { case: 'dateFilter', value: new m.DateFilter({ comparison: { case: cmp, value } }) } });

function checkPackageVersion() {
  const { version } = require('@norskvideo/norsk-api/package.json');
  check(version === '1.0.384', 'client package', `@norskvideo/norsk-api is ${version}, want 1.0.384 (run npm ci)`);
  ok('client package', `@norskvideo/norsk-api ${version}, @grpc/grpc-js ${require('@grpc/grpc-js/package.json').version}`);
}

async function checkStatusChannel(client) {
  const what = 'CreateStatusChannel sends hello';
  const call = client.createStatusChannel(new Empty());
  try {
    const ev = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no message within ${RPC_TIMEOUT_MS} ms`)), RPC_TIMEOUT_MS);
      call.once('data', (d) => { clearTimeout(timer); resolve(d); });
      call.once('error', (e) => { clearTimeout(timer); reject(e); });
    });
    check(ev.message.case === 'hello', what, `first message is ${ev.message.case}, want hello`);
    ok(what, `version ${ev.message.value.version?.toJsonString()}`);
  } catch (err) {
    if (err instanceof CheckFailed) throw err;
    fail(what, describeError(err));
  } finally {
    call.cancel();
  }
}

// credentialsOf returns the channel credentials for the options (see the
// top of the file).
function credentialsOf(opts) {
  if (!opts.ca) {
    if (opts.tokenFile) throw new Error('--token-file needs --ca: grpc-js sends call credentials only over TLS');
    return grpc.credentials.createInsecure();
  }
  const read = (p) => (p ? fs.readFileSync(p) : null);
  let creds = grpc.credentials.createSsl(read(opts.ca), read(opts.key), read(opts.cert));
  if (opts.tokenFile) {
    const token = fs.readFileSync(opts.tokenFile, 'utf8').trim();
    creds = grpc.credentials.combineChannelCredentials(creds,
      grpc.credentials.createFromMetadataGenerator((_params, callback) => {
        const md = new grpc.Metadata();
        md.set('authorization', `Bearer ${token}`);
        callback(null, md);
      }));
  }
  return creds;
}

async function main(addr, nodeId, opts) {
  checkPackageVersion();
  const client = new ManagerClient(addr, credentialsOf(opts));
  let sub;
  try {
    await checkStatusChannel(client);
    const now = Date.now();
    const past = new Timestamp({ seconds: 1709294400n, nanos: 123456789 }); // 2024-03-01T12:00:00.123456789Z
    const soon = timestamp(now + 30 * 60_000, 987654321); // inside a 1 h pending window
    const later = timestamp(now + 10 * 86_400_000, 5); // outside it

    // CreateJob, and the 1.0.384 conflict rules.
    const full1 = fullJob('compat-full-1', past, 'wire');
    const full2 = fullJob('compat-full-2', soon, 'wire');
    const other3 = fullJob('compat-other-3', later, 'other');
    const hashes = {};
    for (const job of [full1, full2, other3]) {
      const id = job.jobId.jobId;
      const h = await unary(client, 'createJob', job, `CreateJob ${id}`);
      check(h instanceof m.JobHash && h.hash !== 0n, `CreateJob ${id}`, `JobHash.hash is ${h?.hash}, want non-zero`);
      hashes[id] = h.hash;
      ok(`CreateJob ${id}`, `hash ${h.hash}`);
    }
    await expectStatus(client, 'createJob', full1, grpc.status.ALREADY_EXISTS, 'CreateJob with an existing id');

    // UpdateJob: optimistic concurrency on current_hash.
    const original1 = full1.clone();
    const update1 = full1.clone();
    update1.description = 'updated through UpdateJob';
    update1.tags.team = 'media';
    update1.services[0].parameters.environmentVariables.push(new c.EnvironmentVariable({ name: 'ADDED', value: 'yes' }));
    update1.currentHash = hashes['compat-full-1'] + 1n;
    await expectStatus(client, 'updateJob', update1, grpc.status.FAILED_PRECONDITION, 'UpdateJob with a stale current_hash');
    update1.currentHash = hashes['compat-full-1'];
    const uh = await unary(client, 'updateJob', update1, 'UpdateJob with the current hash');
    check(uh.hash !== 0n && uh.hash !== hashes['compat-full-1'], 'UpdateJob with the current hash',
      `new hash ${uh.hash}, want non-zero and different from ${hashes['compat-full-1']}`);
    hashes['compat-full-1'] = uh.hash;
    ok('UpdateJob with the current hash', `hash ${uh.hash}`);
    await expectStatus(client, 'updateJob', update1, grpc.status.FAILED_PRECONDITION, 'UpdateJob repeating the now stale hash');

    // JobSearch: filters, and every 1.0.384 field round-trips.
    const sent = { 'compat-full-1': update1, 'compat-full-2': full2, 'compat-other-3': other3 };
    const all = await checkSearch(client, 'JobSearch without filters', [], Object.keys(sent));
    for (const cj of all) {
      const id = cj.job.jobId.jobId;
      sameJob(sent[id], cj.job, `JobSearch round trip of ${id}`);
      check(cj.job.currentHash === hashes[id], `JobSearch current_hash of ${id}`,
        `current_hash ${cj.job.currentHash}, want the last returned hash ${hashes[id]}`);
      const wantState = id === 'compat-full-1' ? m.Job_JobState.ACTIVE : m.Job_JobState.PRE;
      check(cj.job.state === wantState, `JobSearch state of ${id}`,
        `state ${m.Job_JobState[cj.job.state]}, want ${m.Job_JobState[wantState]}`);
      check(cj.instances.length === 0, `JobSearch instances of ${id}`, `${cj.instances.length} instances, want none`);
      ok(`JobSearch round trip of ${id}`, `byte-identical; current_hash ${cj.job.currentHash}, state ${m.Job_JobState[cj.job.state]}`);
    }
    await checkSearch(client, 'JobSearch tag eq compat-suite=wire', [tagEq('compat-suite', 'wire')], ['compat-full-1', 'compat-full-2']);
    await checkSearch(client, 'JobSearch tag eq team=media (updated tag)', [tagEq('team', 'media')], ['compat-full-1']);
    await checkSearch(client, 'JobSearch id re ^compat-full-', [idRe('^compat-full-')], ['compat-full-1', 'compat-full-2']);
    await checkSearch(client, 'JobSearch id eq compat-other-3', [idEq('compat-other-3')], ['compat-other-3']);
    await checkSearch(client, 'JobSearch date lt now', [date('lt', timestamp(now, 0))], ['compat-full-1']);
    await checkSearch(client, 'JobSearch date gte now', [date('gte', timestamp(now, 0))], ['compat-full-2', 'compat-other-3']);
    await checkSearch(client, 'JobSearch date eq (nanosecond start)', [date('eq', past)], ['compat-full-1']);
    await checkSearch(client, 'JobSearch date gt (nanosecond start)', [date('gt', past)], ['compat-full-2', 'compat-other-3']);
    await checkSearch(client, 'JobSearch date lte (nanosecond start)', [date('lte', soon)], ['compat-full-1', 'compat-full-2']);
    await checkSearch(client, 'JobSearch date within [now, now+1h]', [date('within', new m.DateFilter_Within({
      startDate: timestamp(now, 0), endDate: timestamp(now + 3_600_000, 0) }))], ['compat-full-2']);
    await checkSearch(client, 'JobSearch tag eq AND id re', [tagEq('compat-suite', 'wire'), idRe('-2$')], ['compat-full-2']);

    // EventStream: snapshot, then live job_updated events.
    sub = new Subscription(client, 3600);
    const [doneAt] = await sub.next(0, (ev) => ev.event.case === 'initialDataComplete', 'EventStream snapshot ends with initial_data_complete');
    const snapshot = sub.events.slice(0, doneAt);
    ok('EventStream snapshot ends with initial_data_complete', `${snapshot.length} events: ${snapshot.map(summarize).join(', ')}`);
    const snapFor = (id) => snapshot.filter((ev) => ev.event.value?.jobWithHistory?.job?.jobId?.jobId === id);
    {
      const what = 'EventStream snapshot: job_active for the ACTIVE job';
      const evs = snapFor('compat-full-1');
      check(evs.length === 1 && evs[0].event.case === 'jobActive', what, `got ${evs.map(summarize).join(', ') || 'nothing'}`);
      const jwh = evs[0].event.value.jobWithHistory;
      sameJob(update1, jwh.job, what);
      const kinds = historyKinds(jwh);
      check(kinds.join() === 'jobCreated,jobUpdated', what, `history ${kinds}, want jobCreated, jobUpdated`);
      const prev = jwh.historyEntry[1].historyEntry.value.previousJob;
      sameJob(original1, prev, `${what}: job_updated.previous_job`);
      check(jwh.historyEntry[0].historyEntry.value.timestamp, what, 'job_created has no timestamp');
      ok(what, 'job byte-identical; history job_created, job_updated with the previous job byte-identical');
    }
    {
      const what = 'EventStream snapshot: job_pending for the PRE job inside pending_window_s';
      const evs = snapFor('compat-full-2');
      check(evs.length === 1 && evs[0].event.case === 'jobPending', what, `got ${evs.map(summarize).join(', ') || 'nothing'}`);
      sameJob(full2, evs[0].event.value.jobWithHistory.job, what);
      ok(what);
    }
    {
      const what = 'EventStream snapshot: nothing for the PRE job outside pending_window_s';
      const evs = snapFor('compat-other-3');
      check(evs.length === 0, what, `got ${evs.map(summarize).join(', ')}`);
      ok(what);
    }
    {
      const what = 'EventStream snapshot: node_running for the mock node';
      const evs = snapshot.filter((ev) => ev.event.case === 'nodeRunning' && ev.event.value.nodeMetadata?.nodeId?.nodeId === nodeId);
      check(evs.length === 1, what, `${evs.length} node_running events for ${nodeId}; snapshot: ${snapshot.map(summarize).join(', ')}`);
      ok(what);
    }

    let cursor = doneAt + 1;
    const jobEvent = (id, pred) => (ev) => ev.event.case === 'jobUpdated' && ev.event.value.jobWithHistory?.job?.jobId?.jobId === id &&
      (!pred || pred(ev.event.value.jobWithHistory));
    const live = fullJob('compat-live-4', past, 'live');
    {
      const what = 'EventStream job_updated for a CreateJob made while subscribed';
      const h = await unary(client, 'createJob', live, 'CreateJob compat-live-4');
      const [, ev] = await sub.next(cursor, jobEvent('compat-live-4'), what);
      const jwh = ev.event.value.jobWithHistory;
      sameJob(live, jwh.job, what);
      check(jwh.job.currentHash === h.hash, what, `current_hash ${jwh.job.currentHash}, want ${h.hash}`);
      check(historyKinds(jwh).join() === 'jobCreated', what, `history ${historyKinds(jwh)}, want jobCreated`);
      ok(what, 'job byte-identical, history job_created');
    }

    // StartJob / StopJob / CompleteJob on the mock node.
    const run = runJob('compat-run-5', past);
    await unary(client, 'createJob', run, 'CreateJob compat-run-5');
    ok('CreateJob compat-run-5');
    const req = { jobId: new c.JobId({ jobId: 'compat-run-5' }), role: ROLE, nodeId: new c.NodeId({ nodeId }) };
    await unary(client, 'startJob', new m.StartJobRequest(req), 'StartJob');
    ok('StartJob', `compat-run-5/${ROLE} on ${nodeId}`);
    {
      const what = 'EventStream job_updated with job_provisioned then job_running';
      const [i, ev] = await sub.next(cursor, jobEvent('compat-run-5', (j) => historyKinds(j).includes('jobRunning')), what);
      cursor = i + 1;
      const jwh = ev.event.value.jobWithHistory;
      const kinds = historyKinds(jwh);
      check(kinds.join() === 'jobCreated,jobProvisioned,jobRunning', what, `history ${kinds}, want jobCreated, jobProvisioned, jobRunning`);
      for (const h of jwh.historyEntry.slice(1)) {
        const v = h.historyEntry.value;
        check(v.role === ROLE, what, `${h.historyEntry.case}.role is ${JSON.stringify(v.role)}, want ${ROLE}`);
        check(v.nodeMetadata?.nodeId?.nodeId === nodeId, what, `${h.historyEntry.case}.nodeMetadata.node_id is ${v.nodeMetadata?.nodeId?.nodeId}, want ${nodeId}`);
        check(v.timestamp, what, `${h.historyEntry.case} has no timestamp`);
      }
      const running = jwh.historyEntry[2].historyEntry.value;
      const pm = running.servicePortMappings.main?.mappings ?? [];
      check(pm.length === 1 && pm[0].target === 8000 && pm[0].published !== 0 && pm[0].protocol === c.ProtocolFamily.TCP, what,
        `service_port_mappings ${JSON.stringify(running.toJson().servicePortMappings)}, want main: one TCP mapping of target 8000 with a published port`);
      sameJob(run, jwh.job, what);
      ok(what, `main published on ${pm[0].url}`);
    }
    {
      const what = 'JobSearch shows the running instance';
      const [cj] = await checkSearch(client, 'JobSearch id eq compat-run-5', [idEq('compat-run-5')], ['compat-run-5']);
      const inst = cj.instances.map((r) => `${r.jobKey?.jobId?.jobId}/${r.jobKey?.role}@${r.nodeId?.nodeId}`);
      check(inst.join() === `compat-run-5/${ROLE}@${nodeId}`, what, `instances [${inst}], want [compat-run-5/${ROLE}@${nodeId}]`);
      check(cj.job.state === m.Job_JobState.ACTIVE, what, `state ${m.Job_JobState[cj.job.state]}, want ACTIVE`);
      ok(what, inst.join());
    }
    await unary(client, 'stopJob', new m.StopJobRequest(req), 'StopJob');
    ok('StopJob');
    {
      const what = 'EventStream job_updated with job_stopping then job_stopped';
      const [i, ev] = await sub.next(cursor, jobEvent('compat-run-5', (j) => historyKinds(j).includes('jobStopped')), what);
      cursor = i + 1;
      const jwh = ev.event.value.jobWithHistory;
      const kinds = historyKinds(jwh);
      check(kinds.join() === 'jobCreated,jobProvisioned,jobRunning,jobStopping,jobStopped', what,
        `history ${kinds}, want jobCreated, jobProvisioned, jobRunning, jobStopping, jobStopped`);
      const stopping = jwh.historyEntry[3].historyEntry.value;
      check(stopping.reason === m.JobHistoryJobStopping_Reason.JOB_STOPPED_USER_REQUESTED, what,
        `job_stopping.reason ${m.JobHistoryJobStopping_Reason[stopping.reason]}, want JOB_STOPPED_USER_REQUESTED`);
      for (const h of jwh.historyEntry.slice(3)) {
        check(h.historyEntry.value.role === ROLE && h.historyEntry.value.nodeMetadata?.nodeId?.nodeId === nodeId, what,
          `${h.historyEntry.case} names ${h.historyEntry.value.role}@${h.historyEntry.value.nodeMetadata?.nodeId?.nodeId}, want ${ROLE}@${nodeId}`);
      }
      ok(what, 'reason JOB_STOPPED_USER_REQUESTED');
    }
    {
      const what = 'JobSearch shows no instance after StopJob';
      const [cj] = await search(client, [idEq('compat-run-5')], what);
      check(cj && cj.instances.length === 0, what, `instances ${JSON.stringify(cj?.instances.map((r) => r.toJson()))}, want none`);
      ok(what);
    }
    await unary(client, 'completeJob', new c.JobId({ jobId: 'compat-run-5' }), 'CompleteJob');
    ok('CompleteJob');
    {
      const what = 'EventStream job_updated with job_completed and state POST';
      const [i, ev] = await sub.next(cursor, jobEvent('compat-run-5', (j) => historyKinds(j).includes('jobCompleted')), what);
      cursor = i + 1;
      const jwh = ev.event.value.jobWithHistory;
      const kinds = historyKinds(jwh);
      check(kinds.at(-1) === 'jobCompleted', what, `history ${kinds}, want it to end with jobCompleted`);
      check(jwh.job.state === m.Job_JobState.POST, what, `state ${m.Job_JobState[jwh.job.state]}, want POST`);
      ok(what, `history ${kinds.join(' > ')}`);
    }
    {
      const what = 'JobSearch state POST after CompleteJob';
      const [cj] = await search(client, [idEq('compat-run-5')], what);
      check(cj && cj.job.state === m.Job_JobState.POST, what, `state ${cj && m.Job_JobState[cj.job.state]}, want POST`);
      ok(what);
    }

    // DeleteJob.
    await unary(client, 'deleteJob', new c.JobId({ jobId: 'compat-other-3' }), 'DeleteJob compat-other-3');
    ok('DeleteJob compat-other-3');
    {
      const what = 'EventStream job_deleted';
      await sub.next(cursor, (ev) => ev.event.case === 'jobDeleted' && ev.event.value.jobId?.jobId === 'compat-other-3', what);
      ok(what);
    }
    await checkSearch(client, 'JobSearch after DeleteJob', [idRe('^compat-')],
      ['compat-full-1', 'compat-full-2', 'compat-live-4', 'compat-run-5']);
  } finally {
    sub?.close();
    client.close();
  }
}

const [addr, nodeId, ...rest] = process.argv.slice(2);
const opts = {};
const flags = { '--ca': 'ca', '--cert': 'cert', '--key': 'key', '--token-file': 'tokenFile' };
for (let i = 0; i < rest.length; i += 2) {
  if (!flags[rest[i]] || rest[i + 1] === undefined) {
    console.error(`unknown option or missing value: ${rest[i]}`);
    process.exit(2);
  }
  opts[flags[rest[i]]] = rest[i + 1];
}
if (!addr || !nodeId) {
  console.error('usage: node compat.mjs MANAGER_ADDR NODE_ID [--ca CA.pem [--cert C.pem --key K.pem]] [--token-file F]');
  process.exit(2);
}
try {
  await main(addr, nodeId, opts);
  console.log('PASS all checks');
} catch (err) {
  console.log(`FAIL ${err instanceof CheckFailed ? err.message : err.stack}`);
  process.exitCode = 1;
}
