//! The `smtp` experiment's programs, as the IPsec web/email study's SMTP half: the files of the `http` experiment
//! sent as e-mail attachments from the server side (the study's East) to a Postfix on the client side.
//!
//! - The message: composed by swaks (`--dump-mail`: a MIME message, the file a base64 attachment, as a mail client
//!   sends it), once per file before the runs.
//! - The transfer: curl's SMTP client sends it (`-T`), so that the time is curl's `time_total` as for HTTP, and
//!   TLS is the same curl with `--ssl-reqd` (STARTTLS) and the same version flags.
//! - The server: a Postfix of the lab's own (its configuration and queue under the lab's directory), listening on
//!   the client's address, accepting mail for `lab.test` and handing it to its `discard` transport (queued, then
//!   dropped: nothing is delivered anywhere).

use std::path::{Path, PathBuf};

use crate::lab::Lab;
use crate::{Error, Result};

/// The mail domain the lab's Postfix accepts.
const DOMAIN: &str = "lab.test";

/// The message file of `file` (next to it).
pub fn mail_of(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".eml");
    PathBuf::from(name)
}

/// Writes each file's message (`FILE.eml`: the file attached) with swaks.
pub fn make_mails(files: &[PathBuf]) -> Result<()> {
    for f in files {
        let o = std::process::Command::new("swaks")
            .args(["--server", "127.0.0.1", "--from"])
            .arg(format!("east@{DOMAIN}"))
            .arg("--to")
            .arg(format!("client@{DOMAIN}"))
            .arg("--header")
            .arg(format!(
                "Subject: {}",
                f.file_name().unwrap_or_default().to_string_lossy()
            ))
            .arg("--attach")
            .arg(format!("@{}", f.display()))
            .arg("--dump-mail")
            .output()
            .map_err(Error::io("cannot run swaks (apt-get install swaks)"))?;
        let swaks = format!("swaks --attach @{} --dump-mail", f.display());
        if !o.status.success() {
            return Err(Error::command(
                swaks,
                Some(o.status),
                String::from_utf8_lossy(&o.stderr),
            ));
        }
        if o.stdout.is_empty() {
            return Err(Error::output(swaks, "no message"));
        }
        std::fs::write(mail_of(f), &o.stdout).map_err(Error::io("mail file"))?;
    }
    Ok(())
}

/// The lab's Postfix: stopped on drop (and killed with its namespace in any case).
pub struct Postfix {
    conf: PathBuf,
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let _ = std::process::Command::new("postfix")
            .arg("-c")
            .arg(&self.conf)
            // (`stop` waits a second for the master to go.)
            .arg("abort")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Starts a Postfix in `ns` listening on `addr` port 25 (STARTTLS offered with a self-signed certificate), its
/// configuration, queue and data under the lab's directory.
pub fn postfix(lab: &Lab, ns: &str, addr: &str) -> Result<Postfix> {
    let dir = lab.dir().join(format!("postfix-{ns}"));
    let (conf, queue, data) = (dir.join("conf"), dir.join("queue"), dir.join("data"));
    for d in [&conf, &queue, &data] {
        std::fs::create_dir_all(d).map_err(Error::io("postfix dir"))?;
    }
    let (key, cert) = crate::lab::self_signed_cert(&conf)?;
    // Postfix's own processes run as its user: its data directory is theirs.
    crate::lab::run_ok(
        std::process::Command::new("chown")
            .arg("postfix")
            .arg(&data),
    )?;
    std::fs::copy("/usr/share/postfix/master.cf.dist", conf.join("master.cf")).map_err(
        Error::io("cannot copy /usr/share/postfix/master.cf.dist (apt-get install postfix)"),
    )?;
    let main = format!(
        "compatibility_level = 3.6\nqueue_directory = {q}\ndata_directory = {d}\nmail_owner = postfix\n\
         setgid_group = postdrop\nmyhostname = {DOMAIN}\nmydestination = {DOMAIN}\ninet_interfaces = {addr}\n\
         inet_protocols = {family}\nsmtpd_peername_lookup = no\nmynetworks = 0.0.0.0/0 [::]/0\nlocal_recipient_maps =\nlocal_transport = discard:\n\
         default_transport = discard:\nalias_maps =\nalias_database =\nbiff = no\nmessage_size_limit = 0\n\
         smtpd_tls_cert_file = {cert}\nsmtpd_tls_key_file = {key}\nsmtpd_tls_security_level = may\n\
         smtpd_banner = {DOMAIN} ESMTP\n",
        q = queue.display(),
        d = data.display(),
        cert = cert.display(),
        key = key.display(),
        // (Only the family in use: with `all`, the master looks for the other one for two seconds.)
        family = if addr.contains(':') { "ipv6" } else { "ipv4" },
    );
    std::fs::write(conf.join("main.cf"), main).map_err(Error::io("main.cf"))?;
    // Postfix waits (two seconds) for a configuration file written less than a second ago, lest it read a file
    // being edited: dated back, both are read at once.
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    for f in ["main.cf", "master.cf"] {
        std::fs::File::options()
            .write(true)
            .open(conf.join(f))
            .and_then(|file| file.set_modified(past))
            .map_err(Error::io(format!("cannot date back {f}")))?;
    }
    let c = conf.to_string_lossy().to_string();
    // The queue's directories (`postfix check` makes them), then the master daemon itself (`postfix start` would
    // check the whole installation again).
    {
        let st = lab
            .command(ns, &["postfix", "-c", &c, "check"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map_err(Error::io("cannot run postfix (apt-get install postfix)"))?;
        if !st.success() {
            return Err(
                Error::command(format!("postfix -c {c} check"), Some(st), "")
                    .logged(format!(" (its files: {})", dir.display())),
            );
        }
    }
    let daemons = crate::lab::run_ok(std::process::Command::new("postconf").args([
        "-d",
        "-h",
        "daemon_directory",
    ]))?;
    let master = format!("{}/master", daemons.trim());
    // (-w: returns once the master runs, non-zero if it could not start. Its output goes to a file: the daemon
    // keeps what it inherits open a while, and a pipe would hold us until it closes it.)
    let err = dir.join("master.err");
    let out = std::fs::File::create(&err).map_err(Error::io("master.err"))?;
    let st = lab
        .command(ns, &[&master, "-c", &c, "-w"])
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().map_err(Error::io("master.err"))?)
        .stderr(out)
        .status()
        .map_err(Error::io(
            "cannot run the postfix master (apt-get install postfix)",
        ))?;
    let guard = Postfix { conf };
    if !st.success() {
        return Err(Error::command(
            format!("{master} -c {c} -w"),
            Some(st),
            std::fs::read_to_string(&err).unwrap_or_default(),
        )
        .logged(format!(" (its files: {})", dir.display())));
    }
    // Ready when it answers.
    let url = format!("smtp://{}:25", bracket(addr));
    let t0 = std::time::Instant::now();
    for _ in 0..50 {
        let o = lab.exec(ns, &["curl", "-s", "-m", "2", "-X", "NOOP", &url])?;
        if o.status.success() {
            return Ok(guard);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Err(Error::timeout(
        format!("postfix did not answer on {addr}:25"),
        t0.elapsed().as_secs() as f64,
        format!("its files: {}", dir.display()),
    ))
}

/// An address as a URL's host.
fn bracket(addr: &str) -> String {
    if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_string()
    }
}

/// curl's arguments that send `mail` to the Postfix at `addr` (with STARTTLS of `tls`, "tls1.3" or "tls1.2"),
/// printing the time and the last SMTP reply's code.
pub fn send_args(addr: &str, mail: &Path, tls: Option<&str>) -> Vec<String> {
    let mut a: Vec<String> = [
        "curl",
        "-s",
        "--mail-from",
        &format!("east@{DOMAIN}"),
        "--mail-rcpt",
        &format!("client@{DOMAIN}"),
        "-w",
        "%{time_total} %{response_code}",
        "-T",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(mail.to_string_lossy().to_string());
    match tls {
        Some("tls1.3") => a.extend(["--ssl-reqd", "-k", "--tlsv1.3"].map(String::from)),
        Some(_) => {
            a.extend(["--ssl-reqd", "-k", "--tlsv1.2", "--tls-max", "1.2"].map(String::from))
        }
        None => {}
    }
    a.push(format!("smtp://{}:25", bracket(addr)));
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curl_sends_the_message_with_the_asked_tls() {
        let a = send_args("10.0.0.1", Path::new("/w/1KB.bin.eml"), Some("tls1.2"));
        assert_eq!(a.last().unwrap(), "smtp://10.0.0.1:25");
        assert!(a.windows(2).any(|w| w == ["-T", "/w/1KB.bin.eml"]));
        assert!(a.windows(2).any(|w| w == ["--tls-max", "1.2"]));
        assert!(a.contains(&"--ssl-reqd".to_string()));
        let clear = send_args("fd00::1", Path::new("m.eml"), None);
        assert!(!clear.contains(&"--ssl-reqd".to_string()));
        assert_eq!(clear.last().unwrap(), "smtp://[fd00::1]:25");
        assert_eq!(
            mail_of(Path::new("/w/1KB.txt")),
            Path::new("/w/1KB.txt.eml")
        );
    }
}
