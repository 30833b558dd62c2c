#!/usr/bin/env python3
"""Forges l2sec-looking unicast frames with scapy (an attacker without any key): version-1 headers (first byte
0x21) with random sequence numbers and random bodies, EtherType ETHERTYPE (hex), to DST_MAC.

- ROUNDS times, one frame per key id 0..255 except those in SKIP (comma-separated decimal, or "-"), from SRC_MAC
  (a real host's address);
- then RANDOM frames, each from a new random unicast source MAC (locally administered);

GAP seconds apart. Prints the number of frames sent.

usage: forge_unicast.py IFACE ETHERTYPE DST_MAC SRC_MAC SKIP ROUNDS RANDOM GAP
"""
import os
import sys

from scapy.all import Ether, Raw, sendp  # noqa: E402


def body(key_id):
    # flags byte (version 1, ENC), key id, sequence number, then what would be the section and the tag.
    return bytes([0x21, key_id]) + os.urandom(4) + os.urandom(64)


def random_mac():
    b = bytearray(os.urandom(6))
    b[0] = (b[0] & 0xFC) | 0x02  # unicast, locally administered
    return ":".join(f"{x:02x}" for x in b)


def main(argv):
    if len(argv) != 9:
        print(__doc__, file=sys.stderr)
        return 2
    iface, ethertype, dst, src, skip, rounds, randoms, gap = argv[1:]
    ethertype = int(ethertype, 16)
    skip = set() if skip == "-" else {int(k) for k in skip.split(",")}
    frames = []
    for _ in range(int(rounds)):
        for k in range(256):
            if k not in skip:
                frames.append(Ether(dst=dst, src=src, type=ethertype) / Raw(body(k)))
    for _ in range(int(randoms)):
        frames.append(Ether(dst=dst, src=random_mac(), type=ethertype) / Raw(body(1)))
    sendp(frames, iface=iface, inter=float(gap), verbose=False)
    print(len(frames))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
