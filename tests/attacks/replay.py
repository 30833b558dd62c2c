#!/usr/bin/env python3
"""Replays recorded frames with scapy (an attacker independent of netveil): sends every frame of PCAP on IFACE,
byte for byte and in the file's order, GAP seconds apart. Prints the number of frames sent.

usage: replay.py IFACE PCAP GAP
"""
import sys

from scapy.all import rdpcap, sendp  # noqa: E402


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    iface, path, gap = argv[1], argv[2], float(argv[3])
    frames = rdpcap(path)
    sendp(frames, iface=iface, inter=gap, verbose=False)
    print(len(frames))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
