#!/usr/bin/env bash
# Remakes the strongSwan pki files of this directory (test-only keys: never use them for anything else).
# Made with strongSwan 5.9.8's pki; openssl only converts a key to PKCS#8 (the form pki does not write for RSA/EC).
# The tests (crates/pki/src/keygen_tests.rs, crates/netveil/tests/keygen.rs) read these files; after remaking them,
# update DN and SANS below in the tests too.
set -euo pipefail
cd "$(dirname "$0")"
rm -f ./*.key ./*.der ./*.crt ./*.csr ./*.p8
DN_CA="C=CH, O=strongSwan, CN=strongSwan Test CA"
DN="C=CH, O=netveil Zürich, OU=lab, CN=moon.example.org, E=moon@example.org"
pki() { command pki "$@" 2>/dev/null; }
# Keys in the forms pki writes: PEM is PKCS#1 (RSA PRIVATE KEY) for RSA, SEC1 (EC PRIVATE KEY) for ECDSA, PKCS#8
# (PRIVATE KEY) for Ed25519; DER (pki's default) the same structures.
pki --gen --type rsa --size 2048 --outform pem > rsa-2048.key
pki --gen --type rsa --size 2048 > rsa-2048.der
pki --gen --type ecdsa --size 256 --outform pem > ecdsa-p256.key
pki --gen --type ecdsa --size 384 --outform pem > ca-ecdsa-p384.key
pki --gen --type ecdsa --size 384 > ecdsa-p384.der
pki --gen --type ed25519 --outform pem > ed25519.key
openssl pkcs8 -topk8 -nocrypt -in rsa-2048.key -out rsa-2048.p8
openssl pkcs8 -topk8 -nocrypt -in ecdsa-p256.key -out ecdsa-p256.p8
# A CA (ECDSA P-384) and an RSA CA, valid for 20000 days (about 55 years; pki 5.9.8 wraps a --lifetime past 24855 days, 2^31 seconds).
pki --self --ca --lifetime 20000 --in ca-ecdsa-p384.key --dn "$DN_CA" --outform pem > ca.crt
pki --self --ca --lifetime 20000 --in rsa-2048.der --dn "C=CH, O=strongSwan, CN=strongSwan RSA CA" --outform pem > ca-rsa.crt
# A request, and the certificate pki issues for it.
pki --req --in ecdsa-p256.key --dn "$DN" --san moon.example.org --san 192.0.2.1 --san 2001:db8::1 \
    --san moon@example.org --outform pem > moon.csr
pki --issue --lifetime 20000 --cacert ca.crt --cakey ca-ecdsa-p384.key --type pkcs10 --in moon.csr \
    --flag serverAuth --flag ikeIntermediate --outform pem > moon.crt
# An RSA end entity under the ECDSA CA (for rsa-2048.key).
pki --req --in rsa-2048.key --dn "C=CH, O=strongSwan, CN=venus.example.org" |
    pki --issue --lifetime 20000 --cacert ca.crt --cakey ca-ecdsa-p384.key --type pkcs10 --outform pem > venus.crt
# An Ed25519 end entity under the RSA CA, in DER.
pki --req --in ed25519.key --dn "C=CH, O=strongSwan, CN=sun.example.org" --san sun.example.org > sun.csr.der
pki --issue --lifetime 20000 --cacert ca-rsa.crt --cakey rsa-2048.der --type pkcs10 --in sun.csr.der > sun.crt.der
