#!/bin/sh
# Writes a throwaway CA, a server certificate for 127.0.0.1 / localhost / kubernetes.test and a
# client certificate (CN=strata-test) into DIR, for the fake API server's TLS tests.
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -keyout ca.key -out ca.crt -days 2 -subj /CN=strata-test-ca 2>/dev/null
openssl req -x509 $ec -keyout server.key -out server.crt -days 2 -subj /CN=kubernetes.test \
  -CA ca.crt -CAkey ca.key \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.test" 2>/dev/null
openssl req -x509 $ec -keyout client.key -out client.crt -days 2 -subj /CN=strata-test \
  -CA ca.crt -CAkey ca.key -addext "extendedKeyUsage=clientAuth" 2>/dev/null
# A second CA that signed nothing here: a client trusting it must refuse the server.
openssl req -x509 $ec -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca 2>/dev/null
