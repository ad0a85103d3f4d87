// A test xDS management server: Envoy's aggregated discovery service (State of the World) over
// gRPC with TLS, written against Envoy's own discovery protos as @grpc/grpc-js-xds ships them
// (deps/envoy-api), with the rate limit configuration resource declared here, independently of
// the server's own schema (as envoyproxy/ratelimit's api/ratelimit/config/ratelimit/v3/
// rls_conf.proto declares it).
//
//   node management_server.js PORT CERT_DIR [--no-client-cert] [--server-cert NAME]
//                             [--snapshot FILE]
//
// PORT 0 picks a free port. CERT_DIR holds scripts/tls_certs.sh's files: the server presents
// NAME.crt and NAME.key (default: server; xds-server carries Envoy Gateway's name for it,
// envoy-gateway) and asks for a client certificate from ca.crt (unless --no-client-cert).
// --snapshot FILE: a push command (below) in force from the start; the server then keeps
// running when its stdin ends (to run as a service beside a container).
// Driven line by line: commands on stdin, events on stdout, one JSON object a line.
//   in:  {"push": {"version": V, "resources": [RateLimitConfig as JSON]}}: the new snapshot,
//        sent to every open stream and to each new one; a resource may also be given as
//        {"type_url": T, "value_base64": B}, sent as is.
//   in:  {"exit": true}
//   out: one line an event, its fields separated by tabs (tabs and newlines inside a field
//        become spaces):
//        listening PORT
//        stream N HEADERS                     a stream opened; HEADERS "name=value;..." (x-*)
//        request N VERSION NONCE HAS_ERROR ERROR_MESSAGE NODE_ID TYPE_URL NAMES METADATA
//                                             a DiscoveryRequest on stream N; HAS_ERROR 0 or 1,
//                                             NAMES the count of resource_names, METADATA the
//                                             node's string fields "key=value;..." sorted
//        sent N VERSION NONCE                 a DiscoveryResponse sent on stream N
'use strict';

const fs = require('fs');
const path = require('path');
const readline = require('readline');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const [port, certDir, ...options] = process.argv.slice(2);
const option = (name) => {
  const at = options.indexOf(name);
  return at < 0 ? undefined : options[at + 1];
};
const serverCert = option('--server-cert') || 'server';
const snapshotFile = option('--snapshot');
const deps = path.join(path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
const definition = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) => path.join(deps, d)),
});
const ads = grpc.loadPackageDefinition(definition).envoy.service.discovery.v3;

// The resource, declared by this test.
const rlsConf = new protobuf.Root();
rlsConf.addJSON(protobuf.common.get('google/protobuf/struct.proto').nested);
protobuf.parse(`
syntax = "proto3";
package ratelimit.config.ratelimit.v3;
import "google/protobuf/struct.proto";
message RateLimitConfig { string name = 1; string domain = 2; repeated RateLimitDescriptor descriptors = 3; }
message RateLimitDescriptor {
  string key = 1; string value = 2; RateLimitPolicy rate_limit = 3;
  repeated RateLimitDescriptor descriptors = 4; bool shadow_mode = 5; bool detailed_metric = 6;
  bool quota_mode = 7; google.protobuf.Struct metadata = 8;
}
message RateLimitPolicy {
  RateLimitUnit unit = 1; uint32 requests_per_unit = 2; bool unlimited = 3; string name = 4;
  repeated RateLimitReplace replaces = 5;
}
message RateLimitReplace { string name = 1; }
enum RateLimitUnit { UNKNOWN = 0; SECOND = 1; MINUTE = 2; HOUR = 3; DAY = 4; WEEK = 7; MONTH = 5; YEAR = 6; }
`, rlsConf, { keepCase: true });
const RateLimitConfig = rlsConf.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig');
const typeUrl = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

function emit(...fields) {
  process.stdout.write(fields.map((f) => String(f).replace(/[\t\n\r]/g, ' ')).join('\t') + '\n');
}

function encode(resource) {
  if (resource.value_base64 !== undefined)
    return { type_url: resource.type_url, value: Buffer.from(resource.value_base64, 'base64') };
  // (google.protobuf.Struct in `metadata` takes protobufjs's field names: stringValue, ...)
  return { type_url: typeUrl, value: Buffer.from(RateLimitConfig.encode(RateLimitConfig.fromObject(resource)).finish()) };
}

let snapshot = null; // {version, resources}
let nonces = 0;
let streamCount = 0;
const streams = new Map();

function send(id, call) {
  if (snapshot === null) return;
  const nonce = 'nonce-' + ++nonces;
  call.write({ version_info: snapshot.version, resources: snapshot.resources, type_url: typeUrl, nonce });
  emit('sent', id, snapshot.version, nonce);
}

function streamAggregatedResources(call) {
  const id = ++streamCount;
  streams.set(id, call);
  const headers = Object.entries(call.metadata.getMap())
    .filter(([name]) => name.startsWith('x-'))
    .map(([name, value]) => name + '=' + value);
  emit('stream', id, headers.sort().join(';'));
  let first = true;
  call.on('data', (request) => {
    const fields = (request.node && request.node.metadata && request.node.metadata.fields) || {};
    const metadata = Object.keys(fields)
      .sort()
      .map((key) => key + '=' + (fields[key].string_value ?? fields[key].stringValue ?? '?'));
    emit(
      'request',
      id,
      request.version_info,
      request.response_nonce,
      request.error_detail ? 1 : 0,
      request.error_detail ? request.error_detail.message : '',
      request.node ? request.node.id : '',
      request.type_url,
      request.resource_names.length,
      metadata.join(';')
    );
    // A new stream gets the snapshot in force after its first request.
    if (first) {
      first = false;
      send(id, call);
    }
  });
  const close = () => streams.delete(id);
  call.on('end', () => {
    close();
    call.end();
  });
  call.on('error', close);
  call.on('cancelled', close);
}

const server = new grpc.Server();
server.addService(ads.AggregatedDiscoveryService.service, {
  StreamAggregatedResources: streamAggregatedResources,
  DeltaAggregatedResources: (call) => call.destroy({ code: grpc.status.UNIMPLEMENTED }),
});
const read = (name) => fs.readFileSync(path.join(certDir, name));
const credentials = grpc.ServerCredentials.createSsl(
  read('ca.crt'),
  [{ private_key: read(serverCert + '.key'), cert_chain: read(serverCert + '.crt') }],
  !options.includes('--no-client-cert')
);
server.bindAsync('127.0.0.1:' + port, credentials, (error, bound) => {
  if (error) {
    process.stderr.write('management_server.js: ' + error.message + '\n');
    process.exit(1);
  }
  emit('listening', bound);
});

function run(command) {
  if (command.exit) {
    server.forceShutdown();
    process.exit(0);
  }
  if (command.push) {
    snapshot = { version: command.push.version, resources: command.push.resources.map(encode) };
    for (const [id, call] of streams) send(id, call);
  }
}

if (snapshotFile !== undefined) run(JSON.parse(fs.readFileSync(snapshotFile, 'utf8')));
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim() !== '') run(JSON.parse(line));
});
// The test going away (its end of stdin closed) ends this server too, unless it runs as a
// service with its snapshot.
process.stdin.on('end', () => {
  if (snapshotFile === undefined) process.exit(0);
});
