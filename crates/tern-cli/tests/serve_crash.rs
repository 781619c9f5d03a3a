//! `tern serve` killed with SIGKILL in the middle of a write stream, in each
//! `appendfsync` mode: a process crash keeps the page cache, so in every
//! mode every write the server acknowledged must be there after a restart,
//! read back by a fresh client on a new server process.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A free local port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn serve(dir: &Path, port: u16, mode: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .arg("serve")
        .args(["--port", &port.to_string()])
        .arg("--dir")
        .arg(dir)
        .args(["--appendfsync", mode, "--metrics-bind", "off"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A RESP connection with one request in flight at a time.
struct Client {
    out: TcpStream,
    replies: BufReader<TcpStream>,
}

impl Client {
    /// Connects, retrying while the server starts.
    fn connect(port: u16) -> Client {
        let start = Instant::now();
        loop {
            if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut c = Client {
                    out: s.try_clone().unwrap(),
                    replies: BufReader::new(s),
                };
                if c.call(&["PING"]).is_ok_and(|r| r == "+PONG") {
                    return c;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "tern serve did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends one command; returns the first reply line (`Err` if the
    /// connection broke).
    fn call(&mut self, args: &[&str]) -> Result<String, std::io::Error> {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.out.write_all(req.as_bytes())?;
        let mut line = String::new();
        if self.replies.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end().to_string();
        if let Some(len) = line.strip_prefix('$') {
            if len == "-1" {
                return Ok("(nil)".into());
            }
            let mut value = String::new();
            self.replies.read_line(&mut value)?;
            return Ok(value.trim_end().to_string());
        }
        Ok(line)
    }
}

fn value(i: u64) -> String {
    format!("value-{i}-{}", "x".repeat(100))
}

fn kill_mid_stream(mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let port = free_port();
    let mut server = serve(&dir, port, mode);
    let mut c = Client::connect(port);
    // Write until the kill; count only what the server acknowledged. The
    // kill comes 1.5 s in, or later on a slow machine: not before 200
    // writes were acknowledged, so the check below has something to check.
    let progress = Arc::new(AtomicU64::new(0));
    let killer = {
        let progress = progress.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            std::thread::sleep(Duration::from_millis(1500));
            while progress.load(Ordering::Relaxed) < 200
                && start.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            // `Child::kill` sends SIGKILL.
            server.kill().unwrap();
            server.wait().unwrap();
        })
    };
    let mut acked = 0u64;
    loop {
        match c.call(&["SET", &format!("k{acked}"), &value(acked)]) {
            Ok(r) if r == "+OK" => {
                acked += 1;
                progress.store(acked, Ordering::Relaxed);
            }
            Ok(r) => panic!("{mode}: SET k{acked} answered {r}"),
            Err(_) => break,
        }
    }
    killer.join().unwrap();
    assert!(acked > 100, "{mode}: only {acked} writes before the kill");

    // A new process, a new client.
    let mut server = serve(&dir, port, mode);
    let mut c = Client::connect(port);
    for i in 0..acked {
        assert_eq!(
            c.call(&["GET", &format!("k{i}")]).unwrap(),
            value(i),
            "{mode}: acknowledged write k{i} of {acked} lost by kill -9"
        );
    }
    // At most the one write in flight at the kill went further.
    for i in acked + 1..acked + 10 {
        assert_eq!(
            c.call(&["GET", &format!("k{i}")]).unwrap(),
            "(nil)",
            "{mode}"
        );
    }
    eprintln!("appendfsync {mode}: {acked} acknowledged writes survived kill -9");
    tern_stress::ci_summary(&format!("serve_kill9_acked_{mode}"), acked);
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn kill_9_keeps_every_acknowledged_write_with_appendfsync_always() {
    kill_mid_stream("always");
}

#[test]
fn kill_9_keeps_every_acknowledged_write_with_appendfsync_everysec() {
    kill_mid_stream("everysec");
}

#[test]
fn kill_9_keeps_every_acknowledged_write_with_appendfsync_no() {
    kill_mid_stream("no");
}
