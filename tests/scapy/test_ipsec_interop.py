"""netveil's ESP/AH against scapy's SecurityAssociation, both ways, through `netveil pcap esp-encrypt|esp-decrypt`.

(a) scapy cleartext -> netveil esp-encrypt -> scapy decrypt == original
(b) scapy encrypt -> netveil esp-decrypt -> output == original cleartext
"""

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.ipsec import AH, ESP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from nvhelpers import (CROSS_MODES, LINKTYPE_ETHERNET, LINKTYPE_RAW, MODES, SPI, ah_suites, esp_suites, run_netveil,
                       scapy_sa, toml_config)

SIZES = (0, 1, 3, 17, 100, 1400)


def cleartext(mode):
    """ICMP echo, UDP and TCP packets with payloads of several sizes, including 0 and 1400 bytes."""
    src, dst = mode.inner
    pkts = []
    for i, n in enumerate(SIZES):
        data = bytes((i * 13 + j) & 0xFF for j in range(n))
        if mode.inner_v6:
            ip = IPv6(src=src, dst=dst, hlim=63, tc=0x20, fl=0x12345)
            icmp = ICMPv6EchoRequest(id=0x4242, seq=i, data=data)
        else:
            ip = IP(src=src, dst=dst, ttl=63, id=0x1000 + i, flags="DF", tos=0x20)
            icmp = ICMP(type=8, id=0x4242, seq=i) / Raw(data)
        pkts.append(ip / icmp)
        pkts.append(ip / UDP(sport=40000 + i, dport=53) / Raw(data))
        pkts.append(ip / TCP(sport=50000 + i, dport=443, flags="PA", seq=1000 * i, ack=7) / Raw(data))
    # Build every packet to its final bytes (lengths, checksums).
    return [p.__class__(bytes(p)) for p in pkts]


def parse_ip(b):
    return IPv6(b) if b[0] >> 4 == 6 else IP(b)


# --- the case matrix ---------------------------------------------------------------------------------------

def _id(suite, mode, esn, natt):
    return f"{suite}-{mode}{'-esn' if esn else ''}{'-natt' if natt else ''}"


CASES = []
for s in esp_suites():
    for m in MODES:
        for esn in (False, True):
            CASES.append(pytest.param(s, m, esn, False, id=_id(s, m, esn, False)))
for s in ah_suites():
    for m in MODES:
        for esn in (False, True):
            CASES.append(pytest.param(s, m, esn, False, id=_id(s, m, esn, False)))
# ESP in UDP (RFC 3948) with a few suites, all modes.
NATT_SUITES = [s for s in esp_suites() if s.name in ("aes128gcm16", "aes256-sha256", "chacha20poly1305",
                                                      "null-sha1", "aes128gmac")]
for s in NATT_SUITES:
    for m in MODES:
        for esn in (False, True):
            CASES.append(pytest.param(s, m, esn, True, id=_id(s, m, esn, True)))
# Cross-family tunnels (IPv6 in IPv4, IPv4 in IPv6).
for s in [x for x in esp_suites() if x.name in ("aes128gcm16", "aes256-sha512")] + ah_suites()[:1]:
    for m in CROSS_MODES:
        CASES.append(pytest.param(s, m, False, False, id=_id(s, m, False, False)))

# Known failures: id -> reason (filled in when a bug of netveil or scapy is found).
XFAIL = {}


def _maybe_xfail(request):
    reason = XFAIL.get(request.node.callspec.id)
    if reason:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


def _seed(suite, mode, esn, natt):
    return (sum(map(ord, suite.name + mode.name)) + 3 * esn + 5 * natt) % 251


@pytest.mark.parametrize("suite,mode,esn,natt", CASES)
def test_netveil_encrypts_scapy_decrypts(tmp_path, request, suite, mode, esn, natt):
    _maybe_xfail(request)
    seed = _seed(suite, mode, esn, natt)
    clear = cleartext(mode)
    r = run_netveil(tmp_path, "esp-encrypt", toml_config(suite, mode, esn, natt, seed), clear, sas=["out"])
    assert r.linktype == LINKTYPE_RAW
    assert len(r.frames) == len(clear), r.stderr
    sa = scapy_sa(suite, mode, esn, natt, seed)
    layer = ESP if suite.proto == "esp" else AH
    for i, (orig, wire) in enumerate(zip(clear, r.frames)):
        pkt = parse_ip(wire)
        # Outer header: addresses, protocol, SPI, sequence numbers 1, 2, ...
        if mode.tunnel:
            assert (pkt.src, pkt.dst) == mode.outer
        else:
            assert (pkt.src, pkt.dst) == (orig.src, orig.dst)
        if natt:
            assert pkt.haslayer(UDP) and pkt[UDP].sport == 4500 and pkt[UDP].dport == 4500
            assert pkt[UDP].payload.__class__ is ESP, pkt.summary()
        assert pkt.haslayer(layer), pkt.summary()
        assert pkt[layer].spi == SPI
        assert pkt[layer].seq == i + 1
        if suite.proto == "esp" and suite.crypt not in (None, "AES-NULL-GMAC"):
            # Encrypted: the cleartext payload must not be visible.
            tail = bytes(orig.payload)[-16:]
            if len(tail) >= 16:
                assert tail not in wire
        dec = sa.decrypt(pkt)  # verifies the ICV
        assert bytes(dec) == bytes(orig), f"packet {i}:\n{bytes(dec).hex()}\n!=\n{bytes(orig).hex()}\nwire {wire.hex()}"


@pytest.mark.parametrize("suite,mode,esn,natt", CASES)
def test_scapy_encrypts_netveil_decrypts(tmp_path, request, suite, mode, esn, natt):
    _maybe_xfail(request)
    seed = _seed(suite, mode, esn, natt)
    clear = cleartext(mode)
    sa = scapy_sa(suite, mode, esn, natt, seed)
    wire = [sa.encrypt(p) for p in clear]
    r = run_netveil(tmp_path, "esp-decrypt", toml_config(suite, mode, esn, natt, seed), wire, sas=["in"])
    assert len(r.frames) == len(clear), r.stderr
    for i, (orig, got) in enumerate(zip(clear, r.frames)):
        assert got == bytes(orig), f"packet {i}:\n{got.hex()}\n!=\n{bytes(orig).hex()}\nwire {bytes(wire[i]).hex()}"


# --- drops, tampering, replay ----------------------------------------------------------------------------

@pytest.mark.parametrize("suite_name", ["aes128gcm16", "aes256-sha256", "aes128gmac", "sha256"])
def test_tampered_and_replayed_packets_are_dropped(tmp_path, suite_name):
    suite = next(s for s in esp_suites() + ah_suites() if s.name == suite_name)
    mode = MODES[0]
    clear = cleartext(mode)[:4]
    sa = scapy_sa(suite, mode, False, False, 7)
    wire = [bytearray(bytes(sa.encrypt(p))) for p in clear]
    wire[1][-1] ^= 1  # ICV
    wire.append(wire[0])  # replay
    cfg = toml_config(suite, mode, False, False, 7)
    r = run_netveil(tmp_path, "esp-decrypt", cfg, wire, sas=[], expect_ok=False)
    assert r.returncode == 1, r.stderr
    assert "auth-failed 1" in r.stderr and "replayed 1" in r.stderr, r.stderr
    assert r.frames == [bytes(clear[0]), bytes(clear[2]), bytes(clear[3])]
    r = run_netveil(tmp_path, "esp-decrypt", cfg, wire, sas=[], extra=["--allow-drops"])
    assert len(r.frames) == 3
    assert "5 packets read" in r.stderr, r.stderr


def test_wrong_key_fails_authentication(tmp_path):
    suite = next(s for s in esp_suites() if s.name == "aes256gcm16")
    mode = MODES[1]
    clear = cleartext(mode)[:3]
    sa = scapy_sa(suite, mode, False, False, 1)
    wire = [sa.encrypt(p) for p in clear]
    r = run_netveil(tmp_path, "esp-decrypt", toml_config(suite, mode, False, False, 2), wire, sas=[],
                    expect_ok=False)
    assert r.returncode == 1 and "auth-failed 3" in r.stderr, r.stderr
    assert r.frames == []


@pytest.mark.parametrize("suite_name", ["aes128-sha1", "aes128gcm16", "aes128gmac", "chacha20poly1305", "sha256"])
@pytest.mark.parametrize("esn_at_scapy", [True, False])
def test_esn_mismatch_fails_authentication(tmp_path, suite_name, esn_at_scapy):
    """ESN on one side only: the ICV covers the high sequence bits (AAD of AEADs), so it must not verify. This
    shows that the ESN cases above really exercise ESN although the high bits are 0."""
    suite = next(s for s in esp_suites() + ah_suites() if s.name == suite_name)
    mode = MODES[0]
    clear = cleartext(mode)[:2]
    sa = scapy_sa(suite, mode, esn_at_scapy, False, 3)
    wire = [sa.encrypt(p) for p in clear]
    r = run_netveil(tmp_path, "esp-decrypt", toml_config(suite, mode, not esn_at_scapy, False, 3), wire, sas=[],
                    expect_ok=False)
    assert r.returncode == 1 and "auth-failed 2" in r.stderr, r.stderr
    # And the other way round.
    r = run_netveil(tmp_path, "esp-encrypt", toml_config(suite, mode, not esn_at_scapy, False, 3), clear)
    sa = scapy_sa(suite, mode, esn_at_scapy, False, 3)
    from scapy.layers.ipsec import IPSecIntegrityError
    for f in r.frames:
        with pytest.raises(IPSecIntegrityError):
            sa.decrypt(parse_ip(f))


# --- link layers -------------------------------------------------------------------------------------------

def test_ethernet_in_ethernet_out(tmp_path):
    """Ethernet input (with a VLAN tag and padding) gives Ethernet output with the same MACs and the EtherType
    of the new outer IP version; scapy decrypts it."""
    from scapy.layers.l2 import Dot1Q
    suite = next(s for s in esp_suites() if s.name == "aes128gcm16")
    mode = CROSS_MODES[1]  # IPv4 inside IPv6
    clear = cleartext(mode)[:6]
    frames = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=42) / p for p in clear]
    frames = [bytes(f) + b"\x00" * 8 for f in frames]  # trailer padding must not be encrypted
    cfg = toml_config(suite, mode, False, False, 9)
    r = run_netveil(tmp_path, "esp-encrypt", cfg, frames, linktype=LINKTYPE_ETHERNET)
    assert r.linktype == LINKTYPE_ETHERNET
    sa = scapy_sa(suite, mode, False, False, 9)
    enc_frames = []
    for orig, f in zip(clear, r.frames):
        e = Ether(f)
        assert (e.src, e.dst) == ("02:00:00:00:00:01", "02:00:00:00:00:02")
        assert e[Dot1Q].vlan == 42 and e[Dot1Q].type == 0x86DD
        assert bytes(sa.decrypt(e[IPv6])) == bytes(orig)
        enc_frames.append(f)
    # And back: decrypt gives Ethernet frames with the inner packets' EtherType.
    r = run_netveil(tmp_path, "esp-decrypt", cfg, enc_frames, linktype=LINKTYPE_ETHERNET, sas=[])
    assert r.linktype == LINKTYPE_ETHERNET
    assert r.frames == [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=42) / p)
                        for p in clear]


def test_scapy_reads_netveil_pcap(tmp_path):
    """scapy's own pcap reader accepts netveil's output."""
    from scapy.utils import rdpcap
    suite = next(s for s in esp_suites() if s.name == "aes256-sha256")
    mode = MODES[0]
    clear = cleartext(mode)[:3]
    run_netveil(tmp_path, "esp-encrypt", toml_config(suite, mode, False, False, 4), clear)
    pkts = rdpcap(str(tmp_path / "out.pcap"))
    assert len(pkts) == 3 and all(p.haslayer(ESP) for p in pkts)


def test_scapy_wrpcap_input_big_endian_and_nanoseconds(tmp_path):
    """netveil reads pcaps written by scapy (LINKTYPE_RAW), and big-endian / nanosecond files."""
    import subprocess
    from scapy.utils import wrpcap
    from nvhelpers import netveil_bin, write_pcap
    suite = next(s for s in esp_suites() if s.name == "chacha20poly1305")
    mode = MODES[2]
    clear = cleartext(mode)[:3]
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml_config(suite, mode, False, False, 5))
    sa = scapy_sa(suite, mode, False, False, 5)
    wire = [sa.encrypt(p) for p in clear]
    inputs = {"scapy.pcap": None, "be.pcap": (True, False), "ns.pcap": (False, True)}
    for name, fmt in inputs.items():
        f = tmp_path / name
        if fmt is None:
            wrpcap(str(f), wire, linktype=LINKTYPE_RAW)
        else:
            write_pcap(f, wire, LINKTYPE_RAW, big_endian=fmt[0], nanos=fmt[1])
        cfg.write_text(toml_config(suite, mode, False, False, 5))  # fresh replay window each run
        out = tmp_path / (name + ".out")
        p = subprocess.run([str(netveil_bin()), "pcap", "esp-decrypt", "-c", str(cfg), "-i", str(f), "-o", str(out)],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        from nvhelpers import read_pcap
        assert read_pcap(out)[1] == [bytes(c) for c in clear], name


# --- scapy's own AES-GCM with truncated ICVs -----------------------------------------------------------------

@pytest.mark.xfail(strict=True, reason="scapy bug (2.6.1, still in 2.8.0): 'AES-GCM' (AESGCM AEAD API) ignores "
                   "crypt_icv_size and always appends a 16-byte ICV; the suite uses scapy's legacy GCM code path for "
                   "ICV 12/8 instead")
def test_scapy_native_aes_gcm_truncates_icv():
    from nvhelpers import scapy_ipsec
    sa = scapy_ipsec.SecurityAssociation(ESP, spi=1, crypt_algo="AES-GCM", crypt_key=bytes(20), crypt_icv_size=12)
    clear = IP(src="10.0.0.1", dst="10.0.0.2") / UDP() / Raw(b"abcd")
    e = sa.encrypt(clear)
    # 8 IV + 8 UDP + 4 data + 0 pad + 2 trailer + 12 ICV
    assert len(e[ESP].data) == 8 + 8 + 4 + 2 + 12


# --- IPv6 transport mode with extension headers ------------------------------------------------------------

@pytest.mark.parametrize("suite_name", ["aes128gcm16", "aes256-sha256", "sha256"])
@pytest.mark.parametrize("ext", ["hbh", "dest", "hbh+dest"])
def test_ipv6_transport_with_extension_headers(tmp_path, suite_name, ext):
    """ESP/AH go after Hop-by-Hop and (without a routing header) Destination Options, as scapy/Linux place them."""
    from scapy.layers.inet6 import IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
    suite = next(s for s in esp_suites() + ah_suites() if s.name == suite_name)
    mode = MODES[3]
    hdrs = {"hbh": IPv6ExtHdrHopByHop(), "dest": IPv6ExtHdrDestOpt(),
            "hbh+dest": IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()}[ext]
    src, dst = mode.inner
    clear = [IPv6(bytes(IPv6(src=src, dst=dst) / hdrs / UDP(sport=7, dport=9) / Raw(b"x" * n))) for n in (0, 33)]
    cfg = toml_config(suite, mode, False, False, 11)
    r = run_netveil(tmp_path, "esp-encrypt", cfg, clear)
    sa = scapy_sa(suite, mode, False, False, 11)
    assert [bytes(sa.decrypt(IPv6(f))) for f in r.frames] == [bytes(p) for p in clear]
    sa = scapy_sa(suite, mode, False, False, 11)
    wire = [sa.encrypt(p) for p in clear]
    r = run_netveil(tmp_path, "esp-decrypt", cfg, wire, sas=[])
    assert r.frames == [bytes(p) for p in clear]
