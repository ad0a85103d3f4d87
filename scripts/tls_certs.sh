#!/usr/bin/env bash
# Test certificates for the TLS tests, made with the openssl CLI (Debian `openssl`).
#
#   scripts/tls_certs.sh DIR
#
# Writes into DIR (created if missing; files already there are replaced, so running it twice is
# harmless):
#   ca.crt ca.key                  the test CA, which the tests trust
#   server.crt server.key          from the test CA; SAN IP:127.0.0.1, DNS:localhost
#   wrong-name.crt wrong-name.key  from the test CA, for another name only (SAN DNS:wrong.example)
#   client.crt client.key          from the test CA, a client certificate for mutual TLS;
#                                  SAN DNS:client.ratelimit.test
#   other-client.crt .key          from the test CA, a client certificate for another name
#                                  (SAN DNS:other.ratelimit.test)
#   peer.crt peer.key              from the test CA, for both ends (serverAuth and clientAuth;
#                                  SAN IP:127.0.0.1, DNS:localhost, DNS:envoy-ratelimit), as
#                                  Envoy Gateway gives its rate limit service one certificate for
#                                  its gRPC port and for its xDS client
#   xds-server.crt .key            from the test CA; SAN DNS:envoy-gateway, IP:127.0.0.1,
#                                  DNS:localhost: the xDS management server as Envoy Gateway
#                                  names it
#   wildcard-client.crt .key       from the test CA, a client certificate for
#                                  DNS:*.clients.ratelimit.test
#   other-ca.crt other-ca.key      an unrelated CA that nobody trusts
#   other-server.crt .key          from the unrelated CA; same SAN as server.crt, so only its
#                                  issuer makes it wrong
#   ca-dir/                        ca.crt under its subject hash (openssl rehash), for ca_dir
# EC keys (prime256v1), valid 10 days: a fresh set per test run, made in well under a second.
# Private keys are unencrypted (the tests read them without a pass phrase).
set -euo pipefail

dir="${1:?usage: tls_certs.sh DIR}"
command -v openssl >/dev/null || { echo "tls_certs.sh: needs openssl (Debian: openssl)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
days=10

key() {  # key NAME: NAME.key, an EC P-256 private key
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1.key" 2>/dev/null
  chmod 600 "$1.key"
}

ca() {  # ca NAME SUBJECT: a self-signed CA certificate NAME.crt
  key "$1"
  openssl req -x509 -new -key "$1.key" -subj "$2" -days "$days" -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$1.crt" 2>/dev/null
}

leaf() {  # leaf NAME ISSUER SUBJECT EXTENSIONS: NAME.crt signed by ISSUER.crt/ISSUER.key
  local name="$1" issuer="$2" subject="$3" ext="$4"
  key "$name"
  openssl req -new -key "$name.key" -subj "$subject" -out "$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$name.ext"
  # A random serial per certificate (no .srl file left behind, nothing to clash on a rerun).
  openssl x509 -req -in "$name.csr" -CA "$issuer.crt" -CAkey "$issuer.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days "$days" -sha256 -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

server_ext() {  # server_ext SAN
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$1"
}

ca ca "/CN=ratelimit test CA"
ca other-ca "/CN=ratelimit unrelated CA"
leaf server ca "/CN=localhost" "$(server_ext 'IP:127.0.0.1,DNS:localhost')"
leaf other-server other-ca "/CN=localhost" "$(server_ext 'IP:127.0.0.1,DNS:localhost')"
leaf wrong-name ca "/CN=wrong.example" "$(server_ext 'DNS:wrong.example')"
client_ext() {  # client_ext SAN
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nsubjectAltName=%s\n' "$1"
}
leaf client ca "/CN=ratelimit test client" "$(client_ext 'DNS:client.ratelimit.test')"
leaf other-client ca "/CN=ratelimit other client" "$(client_ext 'DNS:other.ratelimit.test')"
leaf peer ca "/CN=envoy-ratelimit" \
  "$(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:envoy-ratelimit\n')"
leaf xds-server ca "/CN=envoy-gateway" "$(server_ext 'DNS:envoy-gateway,IP:127.0.0.1,DNS:localhost')"
leaf wildcard-client ca "/CN=ratelimit wildcard client" "$(client_ext 'DNS:*.clients.ratelimit.test')"

rm -rf ca-dir
mkdir ca-dir
cp ca.crt ca-dir/ca.crt
if openssl rehash ca-dir 2>/dev/null; then :; else c_rehash ca-dir >/dev/null; fi

# Each leaf must verify against its own CA (a broken set would make the refusals pass vacuously).
for pair in server:ca wrong-name:ca client:ca other-client:ca peer:ca xds-server:ca wildcard-client:ca other-server:other-ca; do
  openssl verify -CAfile "${pair#*:}.crt" "${pair%%:*}.crt" >/dev/null
done
