"""Helpers of the scapy interop suite: a small independent pcap reader/writer, netveil.toml generation, running
`netveil pcap esp-encrypt|esp-decrypt`, and the suite table mapping netveil (strongSwan) names to scapy's."""

import os
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers import ipsec as scapy_ipsec
from scapy.layers.ipsec import AH, ESP, CryptAlgo, SecurityAssociation

REPO = Path(__file__).resolve().parents[2]


def netveil_bin() -> Path:
    return Path(os.environ.get("NETVEIL_BIN", REPO / "target" / "release" / "netveil"))


# --- scapy: AES-GCM with truncated ICVs -----------------------------------------------------------------------
#
# scapy's 'AES-GCM' (2.6.1, still in 2.8.0) uses cryptography's AESGCM AEAD API, which always produces and expects
# a 16-byte tag: `crypt_icv_size=12/8` is ignored on encrypt (the packet carries a 16-byte ICV) and a truncated ICV
# cannot be verified on decrypt. scapy's own legacy code path (Cipher + modes.GCM, still in
# CryptAlgo.encrypt/decrypt) does truncate and verify truncated tags, so the suite registers an AES-GCM variant
# using it for the 12/8-byte ICVs.
if "AES-GCM-LEGACY" not in scapy_ipsec.CRYPT_ALGOS:
    from cryptography.hazmat.primitives.ciphers import algorithms, modes

    scapy_ipsec.CRYPT_ALGOS["AES-GCM-LEGACY"] = CryptAlgo(
        "AES-GCM-LEGACY",
        cipher=algorithms.AES,
        mode=modes.GCM,
        key_size=(16, 24, 32),
        salt_size=4,
        block_size=1,
        iv_size=8,
        icv_size=16,
        format_mode_iv=lambda sa, iv, **kw: sa.crypt_salt + iv,
    )


# --- pcap (independent of netveil's reader/writer) --------------------------------------------------------------

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101


def write_pcap(path, frames, linktype=LINKTYPE_RAW, big_endian=False, nanos=False):
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    with open(path, "wb") as f:
        f.write(struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, 262144, linktype))
        for i, fr in enumerate(frames):
            fr = bytes(fr)
            f.write(struct.pack(e + "IIII", 1700000000 + i, 1000 * i, len(fr), len(fr)))
            f.write(fr)


def read_pcap(path):
    """Returns (linktype, [frame bytes]); checks the format netveil promises to write (LE, microseconds)."""
    b = Path(path).read_bytes()
    assert len(b) >= 24, "short pcap"
    magic, major, minor, _tz, _sf, snaplen, linktype = struct.unpack("<IHHiIII", b[:24])
    assert magic == 0xA1B2C3D4, hex(magic)
    assert (major, minor) == (2, 4)
    frames, at = [], 24
    while at < len(b):
        _s, us, incl, orig = struct.unpack("<IIII", b[at:at + 16])
        assert us < 1_000_000 and incl <= orig and incl <= snaplen
        frames.append(b[at + 16:at + 16 + incl])
        assert len(frames[-1]) == incl, "truncated record"
        at += 16 + incl
    return linktype, frames


# --- suites -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Suite:
    name: str            # netveil / strongSwan name
    proto: str           # "esp" | "ah"
    crypt: str | None    # scapy crypt_algo
    enc_len: int         # bytes of enc_key incl. salt
    auth: str | None     # scapy auth_algo
    auth_len: int
    icv: int | None = None  # scapy crypt_icv_size (AEAD)

    def __str__(self):
        return self.name


INTEG = {  # netveil name -> (scapy name, key length)
    "md5": ("HMAC-MD5-96", 16),
    "sha1": ("HMAC-SHA1-96", 20),
    "sha256": ("SHA2-256-128", 32),
    "sha384": ("SHA2-384-192", 48),
    "sha512": ("SHA2-512-256", 64),
}


def esp_suites():
    s = []
    for bits in (128, 192, 256):
        for icv in (16, 12, 8):
            crypt = "AES-GCM" if icv == 16 else "AES-GCM-LEGACY"
            s.append(Suite(f"aes{bits}gcm{icv}", "esp", crypt, bits // 8 + 4, None, 0, icv))
    s.append(Suite("chacha20poly1305", "esp", "CHACHA20-POLY1305", 36, None, 0))
    for bits in (128, 256):
        s.append(Suite(f"aes{bits}gmac", "esp", "AES-NULL-GMAC", bits // 8 + 4, None, 0))
    for enc, crypt, klen in (("aes128", "AES-CBC", 16), ("aes192", "AES-CBC", 24), ("aes256", "AES-CBC", 32),
                             ("3des", "3DES", 24), ("null", None, 0)):
        for integ, (auth, alen) in INTEG.items():
            s.append(Suite(f"{enc}-{integ}", "esp", crypt, klen, auth, alen))
    s.append(Suite("null-null", "esp", None, 0, None, 0))
    return s


def ah_suites():
    return [Suite(n, "ah", None, 0, a, l) for n, (a, l) in INTEG.items()]


def key_bytes(n, seed):
    return bytes((seed * 31 + i * 7 + 1) & 0xFF for i in range(n))


# --- modes ------------------------------------------------------------------------------------------------------

OUTER4 = ("203.0.113.1", "203.0.113.2")
OUTER6 = ("2001:db8:ffff::1", "2001:db8:ffff::2")
INNER4 = ("10.1.0.1", "10.2.0.1")
INNER6 = ("2001:db8:1::1", "2001:db8:2::1")


@dataclass(frozen=True)
class Mode:
    name: str
    tunnel: bool
    inner_v6: bool
    outer_v6: bool

    def __str__(self):
        return self.name

    @property
    def outer(self):
        return OUTER6 if self.outer_v6 else OUTER4

    @property
    def inner(self):
        return INNER6 if self.inner_v6 else INNER4


MODES = [
    Mode("tunnel4", True, False, False),
    Mode("tunnel6", True, True, True),
    Mode("transport4", False, False, False),
    Mode("transport6", False, True, True),
]
CROSS_MODES = [Mode("tunnel6in4", True, True, False), Mode("tunnel4in6", True, False, True)]


# --- config and SAs -----------------------------------------------------------------------------------------------

SPI = 0x00C0FFEE


def toml_config(suite: Suite, mode: Mode, esn: bool, natt: bool, seed: int) -> str:
    lines = ["[interface]", "allow_null_null = true", ""]
    enc = key_bytes(suite.enc_len, seed)
    auth = key_bytes(suite.auth_len, seed + 100)
    for name, direction, (local, remote) in (("out", "out", mode.outer), ("in", "in", mode.outer[::-1])):
        lines += ["[[sa]]", f'name = "{name}"', f'direction = "{direction}"', f'protocol = "{suite.proto}"',
                  f"spi = {SPI}", f'suite = "{suite.name}"', f"esn = {'true' if esn else 'false'}"]
        if mode.tunnel:
            lines += ['mode = "tunnel"', f'local = "{local}"', f'remote = "{remote}"']
        else:
            lines += ['mode = "transport"']
        if suite.enc_len:
            lines.append(f'enc_key = "{enc.hex()}"')
        if suite.auth_len:
            lines.append(f'auth_key = "{auth.hex()}"')
        if natt:
            lines += ['encap = "udp"', "local_port = 4500", "remote_port = 4500"]
        lines.append("")
    return "\n".join(lines)


def scapy_sa(suite: Suite, mode: Mode, esn: bool, natt: bool, seed: int) -> SecurityAssociation:
    kw = {}
    if suite.proto == "esp":
        if suite.crypt:
            kw["crypt_algo"] = suite.crypt
            kw["crypt_key"] = key_bytes(suite.enc_len, seed)
        if suite.icv:
            kw["crypt_icv_size"] = suite.icv
        if natt:
            kw["nat_t_header"] = UDP(sport=4500, dport=4500)
    if suite.auth:
        kw["auth_algo"] = suite.auth
        kw["auth_key"] = key_bytes(suite.auth_len, seed + 100)
    if mode.tunnel:
        src, dst = mode.outer
        kw["tunnel_header"] = IPv6(src=src, dst=dst) if mode.outer_v6 else IP(src=src, dst=dst)
    if esn:
        kw["esn_en"] = True
        kw["esn"] = 0
    return SecurityAssociation(ESP if suite.proto == "esp" else AH, spi=SPI, seq_num=1, **kw)


# --- running netveil ----------------------------------------------------------------------------------------------

@dataclass
class Run:
    returncode: int
    stderr: str
    frames: list
    linktype: int


def run_netveil(tmp: Path, op: str, config: str, frames, sas=("out",), linktype=LINKTYPE_RAW, extra=(),
                expect_ok=True) -> Run:
    cfg = tmp / "netveil.toml"
    cfg.write_text(config)
    inp, out = tmp / "in.pcap", tmp / "out.pcap"
    write_pcap(inp, frames, linktype)
    cmd = [str(netveil_bin()), "pcap", op, "-c", str(cfg), "-i", str(inp), "-o", str(out)]
    for s in sas:
        cmd += ["--sa", s]
    cmd += list(extra)
    if op == "esp-encrypt" and "--seq" not in cmd:
        cmd += ["--seq", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if expect_ok:
        assert p.returncode == 0, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}\n--- config ---\n{config}"
    lt, fr = read_pcap(out) if out.exists() else (None, [])
    return Run(p.returncode, p.stderr, fr, lt)
