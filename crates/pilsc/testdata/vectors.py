#!/usr/bin/env python3
"""Known answers for PILSC's packet transform, written from the layout in crates/pilsc/src/packet.rs with
Python's `cryptography` (an implementation of AES and ChaCha20 independent of aws-lc): prints, per cipher and mode,
the sealed form of one UDP packet. Run: .venv/bin/python crates/pilsc/testdata/vectors.py"""
import struct
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives import hashes, hmac
import warnings

warnings.filterwarnings("ignore")
try:
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES, Blowfish
except ImportError:
    from cryptography.hazmat.primitives.ciphers.algorithms import TripleDES, Blowfish


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


def ctr64(alg, nonce, data):
    """The 64-bit block ciphers: first counter block E_K(nonce[0:4] + nonce[8:12]), 64-bit big-endian increments."""
    ecb = lambda b: Cipher(alg, modes.ECB()).encryptor().update(b)
    iv = int.from_bytes(ecb(nonce[:4] + nonce[8:]), "big")
    ks = b"".join(ecb(((iv + i) % 2**64).to_bytes(8, "big")) for i in range((len(data) + 7) // 8))
    return bytes(a ^ b for a, b in zip(data, ks))


def seal(pkt, cipher, key, mode, counter):
    hl = (pkt[0] & 15) * 4
    src, dst, proto = pkt[12:16], pkt[16:20], pkt[9]
    payload = pkt[hl:]
    kid = key_id(key)
    ol = 12 if mode == "confidential" else 28
    nonce = src + counter.to_bytes(8, "big")
    if cipher in ("3des", "blowfish"):
        alg = TripleDES(key) if cipher == "3des" else Blowfish(key)
        ct = ctr64(alg, nonce, payload)
        tag = b""
        if mode == "authenticated":
            mk = HKDF(hashes.SHA256(), 32, b"netveil pilsc mac", b"").derive(key)
            aad = src + dst + bytes([proto]) + len(payload).to_bytes(2, "big") + bytes([130, ol]) + kid.to_bytes(2, "big")
            h = hmac.HMAC(mk, hashes.SHA256())
            h.update(aad + counter.to_bytes(8, "big") + ct)
            tag = h.finalize()[:16]
    elif mode == "confidential":
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
# The 64-bit block ciphers: counters below 2^24 (LEGACY_PACKETS).
for cipher, key in [("3des", bytes(range(64, 88))), ("blowfish", bytes(range(88, 104)))]:
    for mode in ["confidential", "authenticated"]:
        print(cipher, mode, hex(key_id(key)), seal(pkt, cipher, key, mode, 0x060708).hex())
