//! `netveil lab`'s `http` experiment, as the IPsec web/email study's HTTP half: files of 1 KB to 10 MB, compressible
//! (text, which nginx sends gzip-compressed to `curl --compressed`) or not (random bytes), downloaded from nginx with
//! curl through each path; per download the bytes and packets on the wire (IP bytes; both directions together, and
//! down and up apart), the transfer time, and the bytes over the clear download of the same file.
//!
//! The wire: both veths have `gso_max_segs 1`, so every packet crosses them at its real size (no segmentation
//! offload super-packets, which a real Ethernet never carries), and the counts are the client veth's own counters
//! (`/sys/class/net/DEV/statistics`, read before and after each download; IP bytes = the counted bytes less 14 per
//! packet for the Ethernet header). They count every packet of the download: the TCP handshake and teardown, the
//! request and the acknowledgements, and for TLS its handshake.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::lab::{Family, HostPair, Lab, Mode, Protocol, TwoHosts};
use crate::lab_report::Cell;
use crate::{Error, Result};

/// File sizes in bytes, and their names in the cells.
pub fn sizes(quick: bool) -> Vec<(usize, &'static str)> {
    if quick {
        vec![(1_000, "1KB"), (100_000, "100KB"), (1_000_000, "1MB")]
    } else {
        vec![
            (1_000, "1KB"),
            (10_000, "10KB"),
            (100_000, "100KB"),
            (1_000_000, "1MB"),
            (10_000_000, "10MB"),
        ]
    }
}

/// The two kinds of file: (name, file extension nginx types it by).
const KINDS: [(&str, &str); 2] = [("text", "txt"), ("random", "bin")];

/// Writes the files into `www`: text (lines of words, gzip takes it to a fraction) and pseudo-random bytes.
fn make_files(www: &Path, sizes: &[(usize, &str)]) -> Result<()> {
    std::fs::create_dir_all(www).map_err(Error::io("www dir"))?;
    let words = [
        "packet", "security", "tunnel", "header", "payload", "network", "host", "router", "link",
        "frame", "key", "nonce", "replay", "window", "policy", "lookup",
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for &(size, name) in sizes {
        let mut text = String::with_capacity(size + 64);
        while text.len() < size {
            text.push_str(words[(next() % words.len() as u64) as usize]);
            text.push(if next() % 9 == 0 { '\n' } else { ' ' });
        }
        text.truncate(size);
        std::fs::write(www.join(format!("{name}.txt")), text).map_err(Error::io("text file"))?;
        // xorshift64's bytes: nothing for gzip to find (not secret, only incompressible).
        let random: Vec<u8> = (0..size.div_ceil(8))
            .flat_map(|_| next().to_le_bytes())
            .take(size)
            .collect();
        std::fs::write(www.join(format!("{name}.bin")), random)
            .map_err(Error::io("random file"))?;
    }
    Ok(())
}

/// nginx serving `www` on `addr` (port 80, and 443 with TLS 1.2 and 1.3), in `ns`, from a prefix of its own.
struct Nginx {
    child: Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx(lab: &Lab, ns: &str, addr: &str, www: &Path) -> Result<Nginx> {
    let prefix = lab.dir().join(format!("nginx-{ns}"));
    std::fs::create_dir_all(prefix.join("tmp")).map_err(Error::io("nginx dir"))?;
    let (key, cert) = crate::lab::self_signed_cert(&prefix)?;
    let p = prefix.display();
    let conf = format!(
        "worker_processes 1;\npid {p}/nginx.pid;\nerror_log {p}/error.log;\nevents {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  types {{ text/plain txt; application/octet-stream bin; }}\n  \
         client_body_temp_path {p}/tmp; proxy_temp_path {p}/tmp; fastcgi_temp_path {p}/tmp; \
         uwsgi_temp_path {p}/tmp; scgi_temp_path {p}/tmp;\n  sendfile on;\n  \
         gzip on; gzip_types text/plain; gzip_min_length 0;\n  \
         server {{ listen {addr}:80; root {www}; }}\n  \
         server {{ listen {addr}:443 ssl; ssl_protocols TLSv1.2 TLSv1.3; ssl_certificate {c}; \
         ssl_certificate_key {k}; root {www}; }}\n}}\n",
        www = www.display(),
        c = cert.display(),
        k = key.display()
    );
    let conf_path = prefix.join("nginx.conf");
    std::fs::write(&conf_path, conf).map_err(Error::io("nginx.conf"))?;
    let child = lab
        .command(ns, &["nginx", "-g", "daemon off;", "-p"])
        .arg(&prefix)
        .arg("-c")
        .arg(&conf_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io(
            "cannot start nginx (apt-get install nginx-light)",
        ))?;
    let n = Nginx { child };
    // Ready when it answers.
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let o = lab.exec(
            ns,
            &[
                "curl",
                "-s",
                "-o",
                "/dev/null",
                &format!("http://{addr}/1KB.bin"),
            ],
        )?;
        if o.status.success() {
            return Ok(n);
        }
    }
    Err(Error::Other(format!(
        "nginx did not answer on {addr}:80 (see {p}/error.log)"
    )))
}

/// The client veth's counters: rx bytes, tx bytes, rx packets, tx packets.
fn counters(lab: &Lab, ns: &str, dev: &str) -> Result<[u64; 4]> {
    let mut v = [0u64; 4];
    for (i, f) in ["rx_bytes", "tx_bytes", "rx_packets", "tx_packets"]
        .iter()
        .enumerate()
    {
        let o = lab.exec_ok(
            ns,
            &["cat", &format!("/sys/class/net/{dev}/statistics/{f}")],
        )?;
        v[i] = o
            .trim()
            .parse()
            .map_err(|_| Error::Other(format!("{dev} {f}: {o:?}")))?;
    }
    Ok(v)
}

/// One download: IP bytes and packets per direction (down: server to client), and its time.
#[derive(Debug, Clone, Copy)]
struct Download {
    down: f64,
    up: f64,
    down_packets: f64,
    up_packets: f64,
    secs: f64,
}

impl Download {
    fn bytes(&self) -> f64 {
        self.down + self.up
    }
}

fn download(lab: &Lab, h: &TwoHosts, url: &str, tls: Option<&str>) -> Result<Download> {
    let c0 = counters(lab, &h.ns[0], h.veth[0])?;
    let mut args = vec![
        "curl",
        "-s",
        "--compressed",
        "-o",
        "/dev/null",
        "-w",
        "%{time_total} %{http_code}",
    ];
    match tls {
        Some("tls1.3") => args.extend(["-k", "--tlsv1.3"]),
        Some(_) => args.extend(["-k", "--tlsv1.2", "--tls-max", "1.2"]),
        None => {}
    }
    args.push(url);
    let o = lab.exec_ok(&h.ns[0], &args)?;
    // The last acknowledgements and the teardown.
    std::thread::sleep(Duration::from_millis(50));
    let c1 = counters(lab, &h.ns[0], h.veth[0])?;
    let mut it = o.split_whitespace();
    let secs: f64 = it
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Other(format!("curl said {o:?}")))?;
    if it.next() != Some("200") {
        return Err(Error::Other(format!("{url}: curl said {o:?}")));
    }
    let d = |i: usize| c1[i].saturating_sub(c0[i]) as f64;
    // Less the Ethernet header of each packet: IP bytes.
    Ok(Download {
        down: d(0) - 14.0 * d(2),
        up: d(1) - 14.0 * d(3),
        down_packets: d(2),
        up_packets: d(3),
        secs,
    })
}

/// (path, host pair or `None` for the clear veth, TLS version for HTTPS).
type PathCase = (&'static str, Option<HostPair>, Option<&'static str>);

fn paths() -> Vec<PathCase> {
    let cbc = |mode: Mode, ah: Option<&str>| HostPair {
        mode,
        outer: Family::V4,
        inner: Family::V4,
        bundle_ah: ah.map(str::to_string),
        ..HostPair::esp("aes128-sha1")
    };
    let ah = HostPair {
        suite: "sha1".into(),
        protocol: Protocol::Ah,
        mode: Mode::Transport,
        ..HostPair::default()
    };
    vec![
        ("clear", None, None),
        ("https tls1.3", None, Some("tls1.3")),
        ("https tls1.2", None, Some("tls1.2")),
        (
            "netveil esp tunnel aes128gcm16",
            Some(HostPair::esp("aes128gcm16")),
            None,
        ),
        // The framing alone (no encryption, no integrity: the L2 study's noENC-noHMAC category), to tell framing
        // from crypto.
        (
            "netveil esp tunnel null-null",
            Some(HostPair {
                allow_null_null: true,
                ..HostPair::esp("null-null")
            }),
            None,
        ),
        (
            "netveil esp transport aes128-sha1",
            Some(cbc(Mode::Transport, None)),
            None,
        ),
        ("netveil ah transport sha1", Some(ah), None),
        (
            "netveil esp+ah transport aes128-sha1 + sha1",
            Some(cbc(Mode::Transport, Some("sha1"))),
            None,
        ),
        (
            "netveil psp aes-gcm-128",
            Some(HostPair::psp("aes-gcm-128")),
            None,
        ),
    ]
}

/// Per (kind, size): the downloads' (bytes, packets, seconds).
type Downloads = Vec<((usize, usize), Vec<Download>)>;

/// Every file, `reps` times, from `server` (an address of the server side) through `h`.
fn downloads_via(
    lab: &Lab,
    h: &TwoHosts,
    server: &str,
    tls: Option<&str>,
    sizes: &[(usize, &str)],
    reps: usize,
) -> Result<Downloads> {
    let mut out = Vec::new();
    for (k, (_, ext)) in KINDS.iter().enumerate() {
        for (s, (_, name)) in sizes.iter().enumerate() {
            let url = match tls {
                Some(_) => format!("https://{server}/{name}.{ext}"),
                None => format!("http://{server}/{name}.{ext}"),
            };
            let mut v = Vec::new();
            for _ in 0..reps {
                v.push(download(lab, h, &url, tls)?);
            }
            out.push(((k, s), v));
        }
    }
    Ok(out)
}

/// Sets `gso_max_segs 1` on both veths: packets cross at their real size.
fn real_wire(lab: &Lab, h: &TwoHosts) -> Result<()> {
    for i in 0..2 {
        lab.exec_ok(
            &h.ns[i],
            &["ip", "link", "set", h.veth[i], "gso_max_segs", "1"],
        )?;
    }
    Ok(())
}

fn run_path(
    bin: &Path,
    www: &Path,
    case: &PathCase,
    sizes: &[(usize, &str)],
    reps: usize,
) -> Result<Downloads> {
    let (_, pair, tls) = case;
    match pair {
        None => {
            let mut lab = Lab::new("nvlab")?;
            let h = TwoHosts::topology(&mut lab, &HostPair::default())?;
            real_wire(&lab, &h)?;
            let addr = h.addrs[1].outer.to_string();
            let _n = nginx(&lab, &h.ns[1], &addr, www)?;
            downloads_via(&lab, &h, &addr, *tls, sizes, reps)
        }
        Some(pair) => {
            let mut lab = Lab::new("nvlab")?.with_netveil(bin);
            let h = TwoHosts::up(&mut lab, pair)?;
            real_wire(&lab, &h)?;
            if pair.protocol == Protocol::Psp {
                h.wait_psp_associated(Duration::from_secs(15))?;
            }
            let addr = match pair.mode {
                Mode::Tunnel => h.addrs[1].inner.to_string(),
                Mode::Transport => h.addrs[1].outer.to_string(),
            };
            let _n = nginx(&lab, &h.ns[1], &addr, www)?;
            downloads_via(&lab, &h, &addr, None, sizes, reps)
        }
    }
}

fn metric(what: &str, kind: &str, name: &str) -> String {
    format!("{what} {kind} {name}")
}

/// The `http` experiment's cells.
pub fn run(bin: &Path, quick: bool, work: &Path) -> Vec<Cell> {
    let sizes = sizes(quick);
    let reps = if quick { 1 } else { 3 };
    let www: PathBuf = work.join("www");
    if let Err(e) = make_files(&www, &sizes) {
        return vec![Cell::missing("http", "all", "files", "B", &format!("{e}"))];
    }
    let mut cells = Vec::new();
    let mut clear: Option<Downloads> = None;
    for case in paths() {
        println!("http: {}", case.0);
        let r = run_path(bin, &www, &case, &sizes, reps);
        for (k, (kind, _)) in KINDS.iter().enumerate() {
            for (s, (_, name)) in sizes.iter().enumerate() {
                let m = |w: &str| metric(w, kind, name);
                let got = r
                    .as_ref()
                    .map(|d| d.iter().find(|(at, _)| *at == (k, s)).map(|x| x.1.clone()));
                match got {
                    Ok(Some(v)) => {
                        let bytes: Vec<f64> = v.iter().map(Download::bytes).collect();
                        let series: [(&str, &str, Vec<f64>); 7] = [
                            ("bytes", "B", bytes.clone()),
                            ("bytes down", "B", v.iter().map(|x| x.down).collect()),
                            ("bytes up", "B", v.iter().map(|x| x.up).collect()),
                            (
                                "packets",
                                "packets",
                                v.iter().map(|x| x.down_packets + x.up_packets).collect(),
                            ),
                            (
                                "packets down",
                                "packets",
                                v.iter().map(|x| x.down_packets).collect(),
                            ),
                            (
                                "packets up",
                                "packets",
                                v.iter().map(|x| x.up_packets).collect(),
                            ),
                            ("time", "ms", v.iter().map(|x| x.secs * 1e3).collect()),
                        ];
                        for (w, unit, runs) in series {
                            cells.push(Cell::measured("http", case.0, &m(w), unit, runs));
                        }
                        if case.0 != "clear" {
                            // Over the clear download of the same file: all bytes (the study's network load) and
                            // the data direction's alone (the acknowledgements going up vary with timing).
                            let clear_runs = clear
                                .as_ref()
                                .and_then(|d| d.iter().find(|(at, _)| *at == (k, s)))
                                .map(|x| x.1.clone());
                            for (w, of) in [
                                ("overhead", Download::bytes as fn(&Download) -> f64),
                                ("overhead down", |x: &Download| x.down),
                            ] {
                                let med = |runs: &[Download]| {
                                    crate::bench_ping::median(
                                        &runs.iter().map(of).collect::<Vec<_>>(),
                                    )
                                };
                                cells.push(match &clear_runs {
                                    Some(c) if med(c) > 0.0 => Cell::measured(
                                        "http",
                                        case.0,
                                        &m(w),
                                        "%",
                                        vec![(med(&v) / med(c) - 1.0) * 100.0],
                                    ),
                                    _ => Cell::missing(
                                        "http",
                                        case.0,
                                        &m(w),
                                        "%",
                                        "no clear download of this file",
                                    ),
                                });
                            }
                        }
                    }
                    other => {
                        let why = match other {
                            Err(e) => format!("the path did not run: {e}"),
                            _ => "no download".into(),
                        };
                        for (w, unit) in [
                            ("bytes", "B"),
                            ("bytes down", "B"),
                            ("bytes up", "B"),
                            ("packets", "packets"),
                            ("packets down", "packets"),
                            ("packets up", "packets"),
                            ("time", "ms"),
                        ] {
                            cells.push(Cell::missing("http", case.0, &m(w), unit, &why));
                        }
                        if case.0 != "clear" {
                            for w in ["overhead", "overhead down"] {
                                cells.push(Cell::missing("http", case.0, &m(w), "%", &why));
                            }
                        }
                    }
                }
            }
        }
        if case.0 == "clear" {
            clear = r.ok();
        }
    }
    let _ = std::fs::remove_dir_all(&www);
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_are_their_sizes_and_text_compresses_random_does_not() {
        let dir = std::env::temp_dir().join(format!("nv-http-files-{}", std::process::id()));
        make_files(&dir, &[(1_000, "1KB"), (100_000, "100KB")]).unwrap();
        for (name, size) in [("1KB", 1_000), ("100KB", 100_000)] {
            for ext in ["txt", "bin"] {
                let b = std::fs::read(dir.join(format!("{name}.{ext}"))).unwrap();
                assert_eq!(b.len(), size, "{name}.{ext}");
            }
        }
        let text = std::fs::read_to_string(dir.join("100KB.txt")).unwrap();
        assert!(text.split_whitespace().count() > 10_000);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(sizes(false).len(), 5);
        assert_eq!(metric("bytes", "text", "1KB"), "bytes text 1KB");
    }
}
