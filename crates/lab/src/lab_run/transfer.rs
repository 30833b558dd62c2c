//! One file transfer of the `http` and `smtp` experiments through a path: the files, the servers (nginx; Postfix in
//! [`super::smtp`]), the wire at its real packet sizes, and what a transfer measures (bytes and packets each way,
//! its time, the programs' CPU time and memory).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::lab::{Lab, TwoHosts};
use crate::{Error, Result};

/// The workload of a file-transfer experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// nginx to curl.
    Http,
    /// A mail with the file attached, curl to Postfix.
    Smtp,
}

impl Workload {
    /// The experiment's name (`http`, `smtp`).
    pub fn experiment(self) -> &'static str {
        match self {
            Workload::Http => "http",
            Workload::Smtp => "smtp",
        }
    }
}

/// File sizes in bytes, and their names in the cells.
pub fn sizes(quick: bool) -> Vec<(usize, &'static str)> {
    if quick {
        vec![(1_000, "1KB"), (1_000_000, "1MB")]
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
pub(super) const KINDS: [(&str, &str); 2] = [("text", "txt"), ("random", "bin")];

/// Writes the files into `www`: text (lines of words, gzip takes it to a fraction) and pseudo-random bytes; their
/// paths.
pub(crate) fn make_files(www: &Path, sizes: &[(usize, &str)]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
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
        paths.push(www.join(format!("{name}.txt")));
        // xorshift64's bytes: nothing for gzip to find (not secret, only incompressible).
        let random: Vec<u8> = (0..size.div_ceil(8))
            .flat_map(|_| next().to_le_bytes())
            .take(size)
            .collect();
        std::fs::write(www.join(format!("{name}.bin")), random)
            .map_err(Error::io("random file"))?;
        paths.push(www.join(format!("{name}.bin")));
    }
    Ok(paths)
}

/// nginx serving `www` on `addr` (port 80, and 443 with TLS 1.2 and 1.3), in `ns`, from a prefix of its own.
fn nginx(lab: &Lab, ns: &str, addr: &str, www: &Path) -> Result<crate::lab::Held> {
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
    let n = crate::lab::Held(child);
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
    Err(Error::timeout(
        format!("nginx did not answer on {addr}:80"),
        5.0,
        format!("see {p}/error.log"),
    ))
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
        v[i] = o.trim().parse().map_err(|_| Error::File {
            path: format!("/sys/class/net/{dev}/statistics/{f}").into(),
            why: format!("not a number: {o:?}"),
        })?;
    }
    Ok(v)
}

/// One transfer: IP bytes and packets per direction (down: server side to client side), its time, and what the
/// programs used.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Download {
    pub(crate) down: f64,
    pub(crate) up: f64,
    pub(crate) down_packets: f64,
    pub(crate) up_packets: f64,
    pub(crate) secs: f64,
    /// curl's CPU time (user and system, ms) and peak resident memory (KiB), from its wait
    /// ([`crate::lab_proc::output_with_usage`]).
    pub(crate) client_cpu_ms: f64,
    pub(crate) client_peak_kib: f64,
    /// The server's (nginx's, or Postfix's processes') CPU time over the transfer, ms.
    pub(crate) server_cpu_ms: f64,
    /// netveil's daemons' (both sides) CPU time over the transfer, ms; `None` without them.
    pub(crate) daemon_cpu_ms: Option<f64>,
}

/// Whose CPU time and memory a path's transfers count: the server's namespace (its processes, less the daemons),
/// and netveil's daemons.
pub(crate) struct Procs {
    pub(super) server_ns: String,
    pub(super) daemons: Vec<u32>,
}

impl Procs {
    pub(crate) fn of(h: &TwoHosts, w: Workload) -> Procs {
        Procs {
            server_ns: match w {
                Workload::Http => h.ns[1].clone(),
                Workload::Smtp => h.ns[0].clone(),
            },
            daemons: h.daemons.iter().filter_map(|d| d.pid()).collect(),
        }
    }

    /// (server CPU, daemons' CPU) so far, ms.
    fn cpu(&self) -> Result<(f64, f64)> {
        Ok((
            crate::lab_proc::ns_cpu_ms(&self.server_ns, &self.daemons)?,
            crate::lab_proc::sum_cpu_ms(&self.daemons)?,
        ))
    }
}

impl Download {
    pub(crate) fn bytes(&self) -> f64 {
        self.down + self.up
    }
}

/// curl's arguments that download `url` (HTTPS with `tls`, "tls1.3" or "tls1.2"), printing the time and the HTTP
/// status.
fn get_args(url: &str, tls: Option<&str>) -> Vec<String> {
    let mut args = vec![
        "curl",
        "-s",
        "--compressed",
        "-o",
        "/dev/null",
        "-w",
        "%{time_total} %{http_code}",
        // A transfer that stalls (under 1,000 bytes/s for 3 s: a black hole) fails instead of hanging.
        "--speed-limit",
        "1000",
        "--speed-time",
        "3",
    ];
    match tls {
        Some("tls1.3") => args.extend(["-k", "--tlsv1.3"]),
        Some(_) => args.extend(["-k", "--tlsv1.2", "--tls-max", "1.2"]),
        None => {}
    }
    args.push(url);
    args.into_iter().map(String::from).collect()
}

/// One transfer of `file` (a path under the files' folder) to the client side: `http` downloads it from `server`
/// (an address of the server side), `smtp` sends its mail from the server side to `client` (an address of the
/// client side).
pub(crate) fn transfer(
    lab: &Lab,
    h: &TwoHosts,
    w: Workload,
    (client, server): (&str, &str),
    tls: Option<&str>,
    file: &Path,
    procs: &Procs,
) -> Result<Download> {
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let (ns, args, ok) = match w {
        Workload::Http => {
            let url = match tls {
                Some(_) => format!("https://{server}/{name}"),
                None => format!("http://{server}/{name}"),
            };
            (&h.ns[0], get_args(&url, tls), "200")
        }
        Workload::Smtp => (
            &h.ns[1],
            super::smtp::send_args(client, &super::smtp::mail_of(file), tls),
            "250",
        ),
    };
    // curl's (or swaks') CPU time and memory from its wait (to the microsecond), run from a thread in its namespace.
    let mut cmd = std::process::Command::new(&args[0]);
    cmd.args(&args[1..]);
    let (server0, daemons0) = procs.cpu()?;
    let c0 = counters(lab, &h.ns[0], h.veth[0])?;
    let (out, usage) = lab.in_ns(ns, move || crate::lab_proc::output_with_usage(cmd))??;
    // The last acknowledgements and the teardown.
    std::thread::sleep(Duration::from_millis(50));
    let c1 = counters(lab, &h.ns[0], h.veth[0])?;
    let (server1, daemons1) = procs.cpu()?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let said: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        return Err(Error::command(
            args.join(" "),
            Some(out.status),
            said.join(" | "),
        ));
    }
    let o = String::from_utf8_lossy(&out.stdout);
    let mut it = o.split_whitespace();
    let secs: f64 = it
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::output(&args[0], format!("{name}: no time in {o:?}")))?;
    if it.next() != Some(ok) {
        return Err(Error::output(&args[0], format!("{name}: {o:?}, not {ok}")));
    }
    let d = |i: usize| c1[i].saturating_sub(c0[i]) as f64;
    // Less the Ethernet header of each packet: IP bytes.
    Ok(Download {
        down: d(0) - 14.0 * d(2),
        up: d(1) - 14.0 * d(3),
        down_packets: d(2),
        up_packets: d(3),
        secs,
        client_cpu_ms: usage.cpu_ms,
        client_peak_kib: usage.peak_kib,
        server_cpu_ms: server1 - server0,
        daemon_cpu_ms: (!procs.daemons.is_empty()).then_some(daemons1 - daemons0),
    })
}

/// Sets `gso_max_segs 1` on both veths: packets cross at their real size.
pub(crate) fn real_wire(lab: &Lab, h: &TwoHosts) -> Result<()> {
    for i in 0..2 {
        lab.exec_ok(
            &h.ns[i],
            &["ip", "link", "set", h.veth[i], "gso_max_segs", "1"],
        )?;
    }
    Ok(())
}

/// The server of `w` on its side, running until dropped: nginx on the server side's `server` address, serving
/// `www`, or Postfix on the client side's `client`.
pub(crate) fn server(
    lab: &Lab,
    h: &TwoHosts,
    w: Workload,
    (client, server): (&str, &str),
    www: &Path,
) -> Result<Box<dyn std::any::Any>> {
    Ok(match w {
        Workload::Http => Box::new(nginx(lab, &h.ns[1], server, www)?),
        Workload::Smtp => Box::new(super::smtp::postfix(lab, &h.ns[0], client)?),
    })
}
