#!/usr/bin/env python3
"""Known answers for PILSC's packet transform, written from the layout in crates/pilsc/src/packet.rs with
Python's `cryptography` (an implementation of AES and ChaCha20 independent of aws-lc): prints, per cipher and mode,
the sealed form of one UDP packet. Run: .venv/bin/python crates/pilsc/testdata/vectors.py"""
import struct
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives import hashes


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src, dst, proto, payload, options=b"", ident=0x1234):
    hl = 20 + len(options)
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | hl // 4, 0, hl + len(payload), ident, 0x4000, 64, proto, 0, src, dst) + options
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def udp(src, dst, sport, dport, data):
    u = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    ph = src + dst + struct.pack("!BBH", 0, 17, len(u))
    c = csum(ph + u) or 0xFFFF
    return u[:6] + struct.pack("!H", c) + u[8:]


def key_id(key):
    return int.from_bytes(HKDF(hashes.SHA256(), 2, b"netveil pilsc key id", b"").derive(key), "big")


def seal(pkt, cipher, key, mode, counter):
    hl = (pkt[0] & 15) * 4
    src, dst, proto = pkt[12:16], pkt[16:20], pkt[9]
    payload = pkt[hl:]
    kid = key_id(key)
    ol = 12 if mode == "confidential" else 28
    nonce = src + counter.to_bytes(8, "big")
    if mode == "confidential":
        if cipher == "chacha20":
            ct = Cipher(algorithms.ChaCha20(key, (1).to_bytes(4, "little") + nonce), mode=None).encryptor().update(payload)
        else:
            ct = Cipher(algorithms.AES(key), modes.CTR(nonce + (2).to_bytes(4, "big"))).encryptor().update(payload)
        tag = b""
    else:
        aad = src + dst + bytes([proto]) + len(payload).to_bytes(2, "big") + bytes([130, ol]) + kid.to_bytes(2, "big")
        a = ChaCha20Poly1305(key) if cipher == "chacha20" else AESGCM(key)
        out = a.encrypt(nonce, payload, aad)
        ct, tag = out[:-16], out[-16:]
    opt = bytes([130, ol]) + kid.to_bytes(2, "big") + counter.to_bytes(8, "big") + tag
    h = bytearray(pkt[:hl] + opt)
    h[0] = 0x40 | (hl + ol) // 4
    h[2:4] = (len(pkt) + ol).to_bytes(2, "big")
    h[10:12] = b"\0\0"
    h[10:12] = csum(bytes(h)).to_bytes(2, "big")
    return bytes(h) + ct


src, dst = bytes([192, 0, 2, 1]), bytes([198, 51, 100, 7])
pkt = ipv4(src, dst, 17, udp(src, dst, 5353, 53, b"PILSC known answer: 32 bytes ..."))
print("CLEAR", pkt.hex())
for cipher, key in [("aes-128", bytes(range(16))), ("aes-256", bytes(range(32))), ("chacha20", bytes(range(32, 64)))]:
    for mode in ["confidential", "authenticated"]:
        print(cipher, mode, hex(key_id(key)), seal(pkt, cipher, key, mode, 0x0102030405060708).hex())
