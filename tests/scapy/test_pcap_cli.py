"""`netveil pcap` command-line behaviour: exit codes and messages for bad input."""

import subprocess

from scapy.layers.inet import IP, UDP

from nvhelpers import MODES, esp_suites, netveil_bin, toml_config, write_pcap


def run(*args):
    return subprocess.run([str(netveil_bin()), "pcap", *map(str, args)], capture_output=True, text=True, timeout=30)


def setup(tmp_path):
    suite = next(s for s in esp_suites() if s.name == "aes128gcm16")
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml_config(suite, MODES[0], False, False, 1))
    inp = tmp_path / "in.pcap"
    write_pcap(inp, [IP(src="10.0.0.1", dst="10.0.0.2") / UDP()])
    return cfg, inp, tmp_path / "out.pcap"


def test_bad_pcap_is_a_usage_error_naming_the_file(tmp_path):
    cfg, _, out = setup(tmp_path)
    bad = tmp_path / "garbage.pcap"
    bad.write_bytes(b"\x00" * 40)
    p = run("esp-encrypt", "-c", cfg, "--sa", "out", "--seq", 1, "-i", bad, "-o", out)
    assert p.returncode == 2, p.stderr
    assert "garbage.pcap" in p.stderr and "magic" in p.stderr


def test_truncated_pcap(tmp_path):
    cfg, inp, out = setup(tmp_path)
    t = tmp_path / "trunc.pcap"
    t.write_bytes(inp.read_bytes()[:-3])
    p = run("esp-encrypt", "-c", cfg, "--sa", "out", "--seq", 1, "-i", t, "-o", out)
    assert p.returncode == 2 and "trunc.pcap" in p.stderr and "truncated" in p.stderr, p.stderr


def test_unknown_and_wrong_direction_sa(tmp_path):
    cfg, inp, out = setup(tmp_path)
    p = run("esp-encrypt", "-c", cfg, "--sa", "nope", "--seq", 1, "-i", inp, "-o", out)
    assert p.returncode == 2 and "nope" in p.stderr, p.stderr
    p = run("esp-encrypt", "-c", cfg, "--sa", "in", "--seq", 1, "-i", inp, "-o", out)
    assert p.returncode == 2 and "'out'" in p.stderr, p.stderr
    p = run("esp-encrypt", "-c", cfg, "--seq", 1, "-i", inp, "-o", out)
    assert p.returncode == 2 and "--sa" in p.stderr, p.stderr


def test_summary_and_clear_packets(tmp_path):
    cfg, inp, out = setup(tmp_path)
    p = run("esp-encrypt", "-c", cfg, "--sa", "out", "--seq", 1, "-i", inp, "-o", out)
    assert p.returncode == 0 and "1 packets read" in p.stderr and "1 written" in p.stderr, p.stderr
    # Decrypting cleartext: nothing to write, not a failure.
    p = run("esp-decrypt", "-c", cfg, "-i", inp, "-o", out)
    assert p.returncode == 0 and "0 written" in p.stderr and "not-protected 1" in p.stderr, p.stderr


def test_encrypt_takes_the_first_sequence_number_explicitly(tmp_path):
    """An offline tool with a live configuration's keys must not start at 1 again: --seq is required and used."""
    from scapy.layers.ipsec import ESP
    from nvhelpers import read_pcap
    cfg, inp, out = setup(tmp_path)
    p = run("esp-encrypt", "-c", cfg, "--sa", "out", "-i", inp, "-o", out)
    assert p.returncode == 2 and "--seq" in p.stderr, p.stderr
    p = run("esp-encrypt", "-c", cfg, "--sa", "out", "--seq", 0, "-i", inp, "-o", out)
    assert p.returncode == 2 and "--seq" in p.stderr, p.stderr
    p = run("esp-decrypt", "-c", cfg, "--seq", 5, "-i", inp, "-o", out)
    assert p.returncode == 2 and "--seq" in p.stderr, p.stderr
    p = run("esp-encrypt", "-c", cfg, "--sa", "out", "--seq", 1000001, "-i", inp, "-o", out)
    assert p.returncode == 0, p.stderr
    _, frames = read_pcap(out)
    esp = IP(frames[0])[ESP]
    assert esp.seq == 1000001, esp.seq
