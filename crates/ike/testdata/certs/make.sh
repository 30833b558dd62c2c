#!/bin/sh
# Test certificates and keys (test use only) made with strongSwan's pki, valid 2026-01-01 to 2036-01-01 (expired.der:
# to 2027-01-01); the tests check them at 2027-06-01. Run from this directory to make them again.
set -e
D='--dateform %Y-%m-%d --not-before 2026-01-01 --not-after 2036-01-01'
pki --gen --type ecdsa --size 256 > ca.key
pki --self --ca --in ca.key --type ecdsa $D --dn "C=CH, O=netveil test, CN=netveil test CA" > ca.der
pki --gen --type rsa --size 2048 > other_ca.key
pki --self --ca --in other_ca.key --type rsa $D --dn "C=CH, O=other, CN=other CA" > other_ca.der
issue() { # name keytype size dn san [ca] [dates]
    pki --gen --type "$2" ${3:+--size $3} > "$1.key"
    pki --pub --in "$1.key" | pki --issue --cacert "${6:-ca}.der" --cakey "${6:-ca}.key" \
        ${7:-$D} --dn "$4" --san "$5" > "$1.der"
}
issue moon ecdsa 256 "C=CH, O=netveil test, CN=moon.netveil.test" moon.netveil.test
issue sun rsa 2048 "C=CH, O=netveil test, CN=sun.netveil.test" sun.netveil.test
issue mars ecdsa 384 "C=CH, O=netveil test, CN=mars.netveil.test" mars.netveil.test
issue venus ed25519 "" "C=CH, O=netveil test, CN=venus.netveil.test" venus.netveil.test
issue pluto ed25519 "" "C=CH, O=netveil test, CN=pluto.netveil.test" pluto.netveil.test
issue rogue ecdsa 256 "C=CH, O=netveil test, CN=moon.netveil.test" moon.netveil.test other_ca
issue expired ecdsa 256 "C=CH, O=netveil test, CN=moon.netveil.test" moon.netveil.test ca \
    '--dateform %Y-%m-%d --not-before 2026-01-01 --not-after 2027-01-01'
# An intermediate CA under ca, and deimos under it.
pki --gen --type ecdsa --size 384 > inter.key
pki --pub --in inter.key | pki --issue --ca --cacert ca.der --cakey ca.key $D \
    --dn "C=CH, O=netveil test, CN=netveil test intermediate" > inter.der
issue deimos ecdsa 256 "C=CH, O=netveil test, CN=deimos.netveil.test" deimos.netveil.test inter
openssl x509 -inform DER -in sun.der -out sun.pem
openssl x509 -inform DER -in ca.der -out ca.pem
