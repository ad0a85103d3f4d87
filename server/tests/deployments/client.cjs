// The deployments tests' client: a gRPC client outside the server's code (Node, @grpc/grpc-js,
// the schema loaded from server/proto/ by @grpc/proto-loader), run in the deployment's network
// namespace against its ports as the manifest names them.
//
//   node client.cjs --proto DIR --grpc HOST:PORT --http HOST:PORT --domain D --key K
//                   --limit N --unit UNIT [--tls-ca FILE --tls-name NAME]
//
// --tls-ca: the gRPC port serves TLS: the client trusts FILE's CA, checks NAME in the server's
// certificate (as Envoy calls the Service by its name) and presents no client certificate.
// 1. GET /healthcheck on the HTTP port answers 200 "OK" (Go's health handler).
// 2. N + 1 ShouldRateLimit calls, one hit each, on the descriptor (K, a value no earlier run
//    used) under a rule `K: N per UNIT` get what Go's fixed window derives: call i (1-based) of
//    the window counts i hits, so calls 1..N are OK with limit_remaining N - i, and call N + 1,
//    the (N+1)-th hit, is over N: OVER_LIMIT with limit_remaining 0. When the calls straddle a
//    window boundary the counts restart, so the run is repeated once with a new value.
// Prints each answer; exits 0 when every one is as derived, 1 otherwise.
'use strict';
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const http = require('http');
const path = require('path');
const crypto = require('crypto');
const fs = require('fs');

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ['proto', 'grpc', 'http', 'domain', 'key', 'limit', 'unit']) {
    if (!(k in out)) throw new Error(`--${k} is required`);
  }
  return out;
}

const UNIT_SECONDS = { SECOND: 1, MINUTE: 60, HOUR: 3600, DAY: 86400 };

function healthcheck(hostPort) {
  const [host, port] = [hostPort.slice(0, hostPort.lastIndexOf(':')), hostPort.slice(hostPort.lastIndexOf(':') + 1)];
  return new Promise((resolve, reject) => {
    const req = http.get({ host, port: Number(port), path: '/healthcheck', timeout: 30000 }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('timeout', () => req.destroy(new Error('healthcheck timed out')));
    req.on('error', reject);
  });
}

function call(client, request) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + 30000);
    client.ShouldRateLimit(request, { deadline }, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const limit = Number(a.limit);
  const unit = a.unit.toUpperCase();
  if (!(unit in UNIT_SECONDS) || !(limit >= 1)) throw new Error('--limit >= 1, --unit second..day');
  let failures = 0;
  const check = (what, got, want) => {
    const ok = JSON.stringify(got) === JSON.stringify(want);
    if (!ok) failures += 1;
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}: ${JSON.stringify(got)}${ok ? '' : ` (want ${JSON.stringify(want)})`}`);
  };

  const health = await healthcheck(a.http);
  check(`GET http://${a.http}/healthcheck`, [health.status, health.body.trim()], [200, 'OK']);

  const def = protoLoader.loadSync(path.join(a.proto, 'rls.proto'), {
    includeDirs: [a.proto], keepCase: true, enums: String, longs: Number, defaults: true,
  });
  const proto = grpc.loadPackageDefinition(def);
  const Service = proto.envoy.service.ratelimit.v3.RateLimitService;
  let client;
  if (a['tls-ca'] !== undefined) {
    if (a['tls-name'] === undefined) throw new Error('--tls-ca needs --tls-name');
    client = new Service(a.grpc, grpc.credentials.createSsl(fs.readFileSync(a['tls-ca'])), {
      'grpc.ssl_target_name_override': a['tls-name'],
      'grpc.default_authority': a['tls-name'],
    });
  } else {
    client = new Service(a.grpc, grpc.credentials.createInsecure());
  }

  const window = () => Math.floor(Date.now() / 1000 / UNIT_SECONDS[unit]);
  for (let attempt = 1; attempt <= 2; attempt += 1) {
    const value = crypto.randomBytes(8).toString('hex');
    const before = window();
    const answers = [];
    for (let i = 1; i <= limit + 1; i += 1) {
      answers.push(await call(client, {
        domain: a.domain, descriptors: [{ entries: [{ key: a.key, value }] }], hits_addend: 1,
      }));
    }
    if (window() !== before && attempt === 1) {
      console.log('the calls straddled a window boundary: once more with a new value');
      continue;
    }
    answers.forEach((res, idx) => {
      const i = idx + 1;
      const over = i > limit;
      const s = res.statuses[0] || {};
      // Hit i of the window: over when i > limit; remaining = limit - i, never below 0.
      check(`call ${i} (${a.key}=${value})`,
        [res.overall_code, s.code, s.limit_remaining, s.current_limit && s.current_limit.requests_per_unit,
          s.current_limit && s.current_limit.unit],
        [over ? 'OVER_LIMIT' : 'OK', over ? 'OVER_LIMIT' : 'OK', over ? 0 : limit - i, limit, unit]);
    });
    break;
  }
  client.close();
  console.log(`${failures === 0 ? 'PASS' : 'FAIL'}: ${failures} check(s) failed`);
  process.exit(failures === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error(`client: ${e.message}`);
  process.exit(1);
});
