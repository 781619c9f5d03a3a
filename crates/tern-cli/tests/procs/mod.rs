//! Helpers for tests that run real processes: children killed when
//! dropped, a private etcd, free ports, and network namespaces that stand
//! for other hosts.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process, killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts an etcd with its data in `dir`; returns it and its client URL.
/// `None` (in a run declared partial) if etcd is not installed.
pub fn etcd(dir: &Path) -> Option<(Proc, String)> {
    etcd_on(dir, &[])
}

/// [`etcd`], listening for clients on `extra` addresses too (another
/// host's side of a link) at the same port.
pub fn etcd_on(dir: &Path, extra: &[&str]) -> Option<(Proc, String)> {
    if Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        assert!(
            std::env::var("TERN_PARTIAL").is_ok_and(|v| v == "1"),
            "etcd is not on PATH; install it (apt-get install etcd-server), run scripts/test.sh, \
             or set TERN_PARTIAL=1 to skip this test knowingly"
        );
        eprintln!("SKIPPED (TERN_PARTIAL=1): etcd is not on PATH");
        return None;
    }
    // A port found free may be taken before etcd binds it (tests start
    // nodes and etcds at once): an etcd that exits is started again on
    // other ports.
    for _ in 0..3 {
        let client = free_port();
        let peer = loop {
            let p = free_port();
            if p != client {
                break p;
            }
        };
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut listen = url.clone();
        for h in extra {
            listen += &format!(",http://{h}:{client}");
        }
        let mut child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir)
            .args([
                "--listen-client-urls",
                &listen,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
                return Some((Proc(child), url));
            }
            if child.try_wait().unwrap().is_some() {
                // It may have written its member id for the old ports.
                let _ = std::fs::remove_dir_all(dir);
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "etcd did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("etcd exited three times on start (ports taken?)")
}

/// A network namespace joined to this one by a veth pair on a private
/// /30: this side `10.<a>.<b>.1`, the namespace's `10.<a>.<b>.2`. Removed
/// when dropped.
pub struct Netns {
    pub name: String,
    pub host_if: String,
    pub host_ip: String,
    pub ns_ip: String,
}

/// Runs `ip` with `args`; whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Netns {
    /// `None` (in a run declared partial) where namespaces cannot be made.
    pub fn new() -> Option<Netns> {
        let id = std::process::id() % 60_000;
        let name = format!("tern{id}");
        let (host_if, ns_if) = (format!("tn{id}h"), format!("tn{id}w"));
        let (a, b) = (100 + id / 250 % 100, id % 250);
        let host_ip = format!("10.{a}.{b}.1");
        let ns_ip = format!("10.{a}.{b}.2");
        let made = ip(&["netns", "add", &name]);
        let n = Netns {
            name,
            host_if,
            host_ip,
            ns_ip: ns_ip.clone(),
        };
        let ok =
            made && ip(&[
                "link", "add", &n.host_if, "type", "veth", "peer", "name", &ns_if,
            ]) && ip(&["link", "set", &ns_if, "netns", &n.name])
                && ip(&[
                    "addr",
                    "add",
                    &format!("{}/30", n.host_ip),
                    "dev",
                    &n.host_if,
                ])
                && ip(&["link", "set", &n.host_if, "up"])
                && ip(&[
                    "-n",
                    &n.name,
                    "addr",
                    "add",
                    &format!("{ns_ip}/30"),
                    "dev",
                    &ns_if,
                ])
                && ip(&["-n", &n.name, "link", "set", &ns_if, "up"])
                && ip(&["-n", &n.name, "link", "set", "lo", "up"]);
        if ok {
            return Some(n);
        }
        assert!(
            std::env::var("TERN_PARTIAL").is_ok_and(|v| v == "1"),
            "cannot make a network namespace (needs root and iproute2); run as root, \
             or set TERN_PARTIAL=1 to skip this test knowingly"
        );
        eprintln!("SKIPPED (TERN_PARTIAL=1): no network namespaces here");
        None
    }

    /// Cuts (or restores) the link.
    pub fn link(&self, up: bool) {
        assert!(ip(&[
            "link",
            "set",
            &self.host_if,
            if up { "up" } else { "down" }
        ]));
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        ip(&["link", "del", &self.host_if]);
        ip(&["netns", "del", &self.name]);
    }
}
