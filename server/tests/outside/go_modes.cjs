// A gRPC client outside the server's code (Node, @grpc/grpc-js, the schema loaded from
// server/proto/ by @grpc/proto-loader) asks ratelimit_server ShouldRateLimit in each mode of the
// Go service's settings and checks every answer against what the Go service (envoyproxy/ratelimit
// at f2fb157) derives: src/service/ratelimit.go (shouldRateLimitWorker, ratelimitToMetadata),
// src/limiter/base_limiter.go (GetResponseDescriptorStatus, IsOverLimitWithLocalCache),
// src/redis/fixed_cache_impl.go (DoLimit, getHitsAddend), src/memcached/cache_impl.go,
// src/config/config_impl.go (GetLimit: an override keeps no shadow mode and no metadata).
//
//   node go_modes.cjs --server BIN --node-modules DIR --proto DIR --storage S
//
// S is memory (RATELIMIT_SERVER_STORAGE=memory), redis (RATELIMIT_TEST_REDIS=host:port),
// cluster (RATELIMIT_TEST_CLUSTER=seed host:port list) or memcache (RATELIMIT_TEST_MEMCACHED=
// host:port list). Without its variable the run is skipped (exit 77), or fails under CI=true.
// For each mode one server is started as a child process (loopback, ports chosen by the
// system, a rules directory written here), asked, and stopped with SIGTERM. The domain is new
// on every run: the Go keys on Redis and memcache outlive a run. Ends with "N passed, M failed";
// exits 0 iff none failed.
'use strict';
const { spawn } = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ['server', 'node-modules', 'proto', 'storage']) {
    if (!(k in out)) throw new Error(`--${k} is required`);
  }
  return out;
}

const args = parseArgs(process.argv.slice(2));
args.proto = path.resolve(args.proto);
const grpc = require(path.join(args['node-modules'], '@grpc/grpc-js'));
const protoLoader = require(path.join(args['node-modules'], '@grpc/proto-loader'));

// The storage's variables, as the Go service reads them (src/settings/settings.go).
const STORAGES = {
  memory: { variable: null, env: () => ({ RATELIMIT_SERVER_STORAGE: 'memory' }) },
  redis: {
    variable: 'RATELIMIT_TEST_REDIS',
    env: (v) => ({ REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: v }),
  },
  cluster: {
    variable: 'RATELIMIT_TEST_CLUSTER',
    env: (v) => ({ REDIS_SOCKET_TYPE: 'tcp', REDIS_TYPE: 'cluster', REDIS_URL: v }),
  },
  memcache: {
    variable: 'RATELIMIT_TEST_MEMCACHED',
    env: (v) => ({ BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: v }),
  },
};

// The modes: each the Go variables it sets beside the storage's.
const HEADERS = { limit: 'X-Go-Limit', remaining: 'X-Go-Remaining', reset: 'X-Go-Reset' };
const MODES = {
  defaults: {},
  headers: {
    LIMIT_RESPONSE_HEADERS_ENABLED: 'true',
    LIMIT_LIMIT_HEADER: HEADERS.limit,
    LIMIT_REMAINING_HEADER: HEADERS.remaining,
    LIMIT_RESET_HEADER: HEADERS.reset,
  },
  metadata: { RESPONSE_DYNAMIC_METADATA: 'true' },
  shadow: { SHADOW_MODE: 'true' },
  quota: { QUOTA_MODE: 'true' },
  // 1 MiB: freecache's smallest useful size is far below it (Go: NewLocalCacheStats).
  local_cache: { LOCAL_CACHE_SIZE_IN_BYTES: '1048576' },
  stop_increment: { STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
};

let passed = 0;
let failed = 0;
const perMode = {};
function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]));
  }
  return v;
}
function check(mode, what, got, want) {
  const g = JSON.stringify(canonical(got));
  const w = JSON.stringify(canonical(want));
  const ok = g === w;
  perMode[mode] = perMode[mode] || { passed: 0, failed: 0 };
  if (ok) { passed += 1; perMode[mode].passed += 1; } else { failed += 1; perMode[mode].failed += 1; }
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${args.storage}/${mode} ${what}: ${g}${ok ? '' : `\n       want ${w}`}`);
}

// google.protobuf.Struct as proto-loader decodes it (oneofs: `kind` names the field that is
// set; the well-known types come with their camelCase names whatever keepCase says).
function fromValue(v) {
  const x = v[v.kind];
  switch (String(v.kind).replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)) {
    case 'null_value': return null;
    case 'number_value': case 'string_value': case 'bool_value': return x;
    case 'struct_value': return fromStruct(x);
    case 'list_value': return (x.values || []).map(fromValue);
    default: throw new Error(`unknown Value kind ${v.kind}`);
  }
}
function fromStruct(s) {
  return Object.fromEntries(Object.entries(s.fields || {}).map(([k, v]) => [k, fromValue(v)]));
}

// The rules: `a` 3 per hour, `b` 10 per hour, `u` unlimited (Go's yaml, config_impl.go).
function rulesYaml(domain) {
  return [
    `domain: ${domain}`,
    'descriptors:',
    '  - key: a',
    '    rate_limit: {unit: hour, requests_per_unit: 3}',
    '    metadata: {tier: gold}',
    '  - key: b',
    '    rate_limit: {unit: hour, requests_per_unit: 10}',
    '    metadata: {team: blue}',
    '  - key: u',
    '    rate_limit: {unlimited: true}',
    '',
  ].join('\n');
}

// The server running now and the rules directory, removed however this process ends (a ctest
// timeout sends SIGTERM), so no server outlives the test.
let running = null;
let rulesDir = null;
process.on('exit', () => {
  if (running && running.exitCode === null && running.signalCode === null) running.kill('SIGKILL');
  if (rulesDir) fs.rmSync(rulesDir, { recursive: true, force: true });
});
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(signal, () => process.exit(1));

function startServer(env) {
  return new Promise((resolve, reject) => {
    const child = spawn(args.server, [], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    running = child;
    let err = '';
    let done = false;
    const timer = setTimeout(() => {
      if (done) return;
      done = true;
      child.kill('SIGKILL');
      reject(new Error(`the server did not listen within 20 s; stderr:\n${err}`));
    }, 20000);
    child.stderr.on('data', (c) => {
      err += c;
      const m = /gRPC on 127\.0\.0\.1:(\d+)/.exec(err);
      if (m && !done) {
        done = true;
        clearTimeout(timer);
        resolve({ child, port: Number(m[1]), stderr: () => err });
      }
    });
    child.on('exit', (code, signal) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(new Error(`the server exited (${code ?? signal}) before listening; stderr:\n${err}`));
    });
  });
}

// SIGTERM, then the exit status (a signal's name when killed): SIGKILL after 15 s.
function stopServer(server) {
  return new Promise((resolve) => {
    const { child } = server;
    if (child.exitCode !== null || child.signalCode !== null) { resolve(child.exitCode ?? child.signalCode); return; }
    const timer = setTimeout(() => child.kill('SIGKILL'), 15000);
    child.on('exit', (code, signal) => { clearTimeout(timer); resolve(code ?? signal); });
    child.kill('SIGTERM');
  });
}

function call(client, request) {
  return new Promise((resolve, reject) => {
    client.ShouldRateLimit(request, { deadline: new Date(Date.now() + 20000) },
      (err, res) => (err ? reject(err) : resolve(res)));
  });
}

// Seconds to the end of the hour window at Unix second t (utilities.go CalculateReset:
// divider - now % divider, 3600 for an hour), for any second the call may have been decided in
// (t0 before it was sent, t1 after the answer): 'window end' when so, else the value itself.
function windowEnd(value, t0, t1) {
  for (let t = t0; t <= t1; t += 1) if (Number(value) === HOUR - (t % HOUR)) return 'window end';
  return value;
}

// What a client compares: the codes, each status's remaining, limit and duration_until_reset
// (generateResponseDescriptorStatus: the window's end with a limit, none without), the headers
// (the reset header the window's end too) and the dynamic metadata.
function project(res, mode, t0, t1) {
  const out = {
    overall: res.overall_code,
    statuses: res.statuses.map((s) => ({
      code: s.code,
      remaining: s.limit_remaining,
      limit: s.current_limit ? [s.current_limit.requests_per_unit, s.current_limit.unit] : null,
      reset: s.duration_until_reset ? windowEnd(s.duration_until_reset.seconds, t0, t1) : null,
    })),
  };
  if (mode === 'headers') {
    const h = {};
    for (const { key, value } of res.response_headers_to_add) {
      if (key === HEADERS.reset) {
        h[key] = windowEnd(value, t0, t1);
      } else {
        h[key] = value;
      }
    }
    out.headers = h;
  } else {
    out.headers = res.response_headers_to_add.length;
  }
  if (mode === 'metadata') {
    out.metadata = res.dynamic_metadata ? fromStruct(res.dynamic_metadata) : null;
    // Go's prototext output of the override (descriptor.Limit.String()) varies its spacing
    // on purpose (protobuf-go): compared without spaces.
    for (const d of (out.metadata && out.metadata.descriptors) || []) {
      if (typeof d.limit === 'string') d.limit = d.limit.replace(/\s+/g, ' ').replace(/: /g, ':');
    }
  } else {
    out.metadata = res.dynamic_metadata ? 'set' : null;
  }
  return out;
}

const HOUR = 3600;
const st = (code, remaining, limit) => ({ code, remaining, limit, reset: limit ? 'window end' : null });

// Runs the calls of one mode and checks them. `memcache` changes what stop-increment does.
async function runMode(client, domain, mode, tag) {
  const want = (overall, statuses, extra = {}) => ({
    overall,
    statuses,
    headers: mode === 'headers' ? (extra.headers || {}) : 0,
    metadata: mode === 'metadata' ? (extra.metadata || null) : null,
  });
  const hdr = (limit, remaining) => ({
    [HEADERS.limit]: String(limit), [HEADERS.remaining]: String(remaining), [HEADERS.reset]: 'window end',
  });
  const shadow = mode === 'shadow';
  const quota = mode === 'quota';
  const results = [];
  const ask = async (what, request, expected) => {
    const t0 = Math.floor(Date.now() / 1000);
    const res = await call(client, request);
    results.push([what, project(res, mode, t0, Math.floor(Date.now() / 1000)), expected]);
  };
  const v1 = `${tag}-1`;
  const v2 = `${tag}-2`;

  // 1. One descriptor a=v1 (3 per hour), hits 1..4 (base_limiter.go: over when the count after
  //    the hit exceeds 3; remaining = 3 - count, never below 0): hits 1..3 OK with 2, 1, 0;
  //    hit 4 OVER_LIMIT with 0. Overall (ratelimit.go): OVER_LIMIT, but OK under SHADOW_MODE;
  //    under QUOTA_MODE the one quota descriptor is over, so all are: OVER_LIMIT.
  //    Headers: the over one (not quota) or the least remaining: limit 3, remaining as status.
  //    Metadata: domain, the descriptor's entries, the request's hitsAddend 1, the rule's
  //    metadata while a passes ({tier: gold}), none once it is over.
  for (let i = 1; i <= 4; i += 1) {
    const over = i > 3;
    const remaining = over ? 0 : 3 - i;
    await ask(`a=v1 hit ${i}`, { domain, descriptors: [{ entries: [{ key: 'a', value: v1 }] }], hits_addend: 1 },
      want(over && !shadow ? 'OVER_LIMIT' : 'OK', [st(over ? 'OVER_LIMIT' : 'OK', remaining, [3, 'HOUR'])], {
        headers: hdr(3, remaining),
        metadata: {
          domain, descriptors: [{ entries: [`a=${v1}`] }], hitsAddend: 1, ...(over ? {} : { metadata: { tier: 'gold' } }),
        },
      }));
  }

  // 2. a=v1 again with a limit override of 100 per hour (config_impl.go GetLimit; same unit, so
  //    cache_key.go's key, which carries no limit, is the rule's): the 5th hit on that counter,
  //    5 <= 100, OK with 100 - 5 = 95. With LOCAL_CACHE_SIZE_IN_BYTES the key went into the
  //    over-limit cache at hit 4 (base_limiter.go, for the unit's length), so DoLimit skips it:
  //    OVER_LIMIT with 0 under the override's limit (IsOverLimitWithLocalCache). An override
  //    has no metadata; the descriptor's `limit` is Go's text of it.
  const cached = mode === 'local_cache';
  await ask('a=v1 override 100/hour', {
    domain, descriptors: [{ entries: [{ key: 'a', value: v1 }], limit: { requests_per_unit: 100, unit: 'HOUR' } }],
    hits_addend: 1,
  }, want(cached && !shadow ? 'OVER_LIMIT' : 'OK', [st(cached ? 'OVER_LIMIT' : 'OK', cached ? 0 : 95, [100, 'HOUR'])], {
    headers: hdr(100, cached ? 0 : 95),
    metadata: { domain, descriptors: [{ entries: [`a=${v1}`], limit: 'requests_per_unit:100 unit:HOUR' }], hitsAddend: 1 },
  }));

  // 3. Two descriptors a=v2 (3/hour) and b=v2 (10/hour) in each call, hits 1..4: a as in 1,
  //    b 10 - i (9, 8, 7). Hit 4: a is over. Every hit counted (fixed_cache_impl.go): b 10 - 4
  //    = 6. STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (getHitsAddend): a would go over (3 + 1 >
  //    3), so only a is counted and b read at 3: 10 - 3 = 7; on memcache the setting does
  //    nothing (cache_impl.go): 6. Overall: OVER_LIMIT; OK under SHADOW_MODE; under QUOTA_MODE
  //    OK, as b (quota too) is not over. Headers: hits 1..3 the least remaining, a (3 - i <
  //    10 - i); hit 4 the over one, a (limit 3, 0); under QUOTA_MODE hit 4 has no rate-limit
  //    descriptor over, so the least remaining, a's 0. Metadata: the passing rules' metadata
  //    merged in order: {tier, team} for hits 1..3, {team} at hit 4.
  const stop = mode === 'stop_increment' && args.storage !== 'memcache';
  for (let i = 1; i <= 4; i += 1) {
    const over = i > 3;
    const aRem = over ? 0 : 3 - i;
    const bRem = over && stop ? 10 - 3 : 10 - i;
    await ask(`a=v2,b=v2 hit ${i}`, {
      domain, descriptors: [{ entries: [{ key: 'a', value: v2 }] }, { entries: [{ key: 'b', value: v2 }] }], hits_addend: 1,
    }, want(over && !shadow && !quota ? 'OVER_LIMIT' : 'OK',
      [st(over ? 'OVER_LIMIT' : 'OK', aRem, [3, 'HOUR']), st('OK', bRem, [10, 'HOUR'])], {
        headers: hdr(3, aRem),
        metadata: {
          domain,
          descriptors: [{ entries: [`a=${v2}`] }, { entries: [`b=${v2}`] }],
          hitsAddend: 1,
          metadata: over ? { team: 'blue' } : { tier: 'gold', team: 'blue' },
        },
      }));
  }

  // 4. An unlimited descriptor and one no rule matches (config_impl.go, ratelimit.go): both OK,
  //    the unlimited one with remaining 4294967295 (math.MaxUint32), neither with a limit, so
  //    no headers. Under QUOTA_MODE neither is over, so OK. Metadata: no rule with metadata.
  await ask('u=any, x=any', {
    domain, descriptors: [{ entries: [{ key: 'u', value: v1 }] }, { entries: [{ key: 'x', value: v1 }] }], hits_addend: 1,
  }, want('OK', [st('OK', 4294967295, null), st('OK', 0, null)], {
    headers: {},
    metadata: { domain, descriptors: [{ entries: [`u=${v1}`] }, { entries: [`x=${v1}`] }], hitsAddend: 1 },
  }));
  // 5. A descriptor's own hits_addend (utilities.go GetHitsAddends: it replaces the request's,
  //    0 checks only; the request's 0 counts as 1 but is left out of the metadata): b=v3 (10 per
  //    hour) with 4, 0, 4, 4 in requests whose hits_addend is 0: counts 4, 4, 8, 12, so
  //    remaining 6, 6, 2 and then 12 > 10: OVER_LIMIT with 0. One descriptor, so
  //    STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT counts it all the same (the over one is counted),
  //    and the over-limit cache only holds it after the last call. Overall, headers and metadata
  //    as in 1 (b's metadata {team: blue} while it passes; each descriptor's hitsAddend).
  const v3 = `${tag}-3`;
  const addends = [4, 0, 4, 4];
  let count = 0;
  for (let i = 0; i < addends.length; i += 1) {
    count += addends[i];
    const over = count > 10;
    const remaining = over ? 0 : 10 - count;
    await ask(`b=v3 hits_addend ${addends[i]} (call ${i + 1})`, {
      domain, descriptors: [{ entries: [{ key: 'b', value: v3 }], hits_addend: { value: addends[i] } }], hits_addend: 0,
    }, want(over && !shadow ? 'OVER_LIMIT' : 'OK', [st(over ? 'OVER_LIMIT' : 'OK', remaining, [10, 'HOUR'])], {
      headers: hdr(10, remaining),
      metadata: {
        domain, descriptors: [{ entries: [`b=${v3}`], hitsAddend: addends[i] }], ...(over ? {} : { metadata: { team: 'blue' } }),
      },
    }));
  }
  return results;
}

async function main() {
  const storage = STORAGES[args.storage];
  if (!storage) throw new Error(`--storage memory, redis, cluster or memcache, not ${args.storage}`);
  let storageValue = null;
  if (storage.variable) {
    storageValue = process.env[storage.variable] || '';
    if (storageValue === '') {
      if (process.env.CI === 'true') {
        console.log(`FAIL: CI=true and ${storage.variable} is not set`);
        console.log('0 passed, 1 failed');
        process.exit(1);
      }
      console.log(`SKIP: ${storage.variable} is not set`);
      process.exit(77);
    }
  }

  const def = protoLoader.loadSync(path.join(args.proto, 'rls.proto'), {
    includeDirs: [args.proto], keepCase: true, enums: String, longs: Number, defaults: true, oneofs: true,
  });
  const Service = grpc.loadPackageDefinition(def).envoy.service.ratelimit.v3.RateLimitService;

  const run = crypto.randomBytes(6).toString('hex');
  const domain = `outside-${run}`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratelimit-outside-'));
  rulesDir = dir;
  fs.mkdirSync(path.join(dir, 'ratelimit', 'config'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'ratelimit', 'config', 'rules.yaml'), rulesYaml(domain));

  try {
    for (const [mode, modeEnv] of Object.entries(MODES)) {
      const env = {
        PATH: process.env.PATH || '/usr/bin:/bin',
        USE_STATSD: 'false',
        GRPC_HOST: '127.0.0.1',
        GRPC_PORT: '0',
        HOST: '127.0.0.1',
        PORT: '0',
        DEBUG_HOST: '127.0.0.1',
        DEBUG_PORT: '0',
        RUNTIME_ROOT: dir,
        RUNTIME_SUBDIRECTORY: 'ratelimit',
        ...storage.env(storageValue),
        ...modeEnv,
      };
      let server;
      try {
        server = await startServer(env);
      } catch (e) {
        // One mode that does not start says so and leaves the others to run.
        check(mode, 'start', e.message, 'listening');
        continue;
      }
      const client = new Service(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
      try {
        // The counts are per hour window: calls that straddle its end start again from 0, so
        // the mode is asked once more, with new descriptor values, when that happened.
        for (let attempt = 1; attempt <= 2; attempt += 1) {
          const before = Math.floor(Date.now() / 1000 / HOUR);
          const results = await runMode(client, domain, mode, `${mode}-${attempt}-${run}`);
          if (Math.floor(Date.now() / 1000 / HOUR) !== before && attempt === 1) {
            console.log(`${mode}: the calls straddled the end of an hour: once more`);
            continue;
          }
          for (const [what, got, expected] of results) check(mode, what, got, expected);
          break;
        }
      } catch (e) {
        check(mode, 'calls', `error: ${e.message}`, 'answers');
        console.log(server.stderr());
      } finally {
        client.close();
        // SIGTERM: the calls answered, the process exits 0 (server/README.md, Health).
        const status = await stopServer(server);
        check(mode, 'exit status after SIGTERM', status, 0);
        if (status !== 0) console.log(server.stderr());
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  for (const [mode, c] of Object.entries(perMode)) {
    console.log(`${args.storage}/${mode}: ${c.passed} passed, ${c.failed} failed`);
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
  console.log(`go_modes: ${e.message}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
