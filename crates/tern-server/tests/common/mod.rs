//! Helpers shared by the integration tests: an in-process server on a free
//! port with a temporary data directory, and raw-socket access.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tern_server::{Config, ServerHandle, StartOptions};

/// A server and the directory it stores its data in.
pub struct TestServer {
    pub server: ServerHandle,
    pub dir: tempfile::TempDir,
}

/// A configuration for tests: free ports, data in `dir`.
pub fn test_config(dir: &std::path::Path) -> Config {
    Config {
        port: Some(0),
        dir: dir.to_path_buf(),
        metrics_bind: "127.0.0.1:0".into(),
        threads: 2,
        ..Config::default()
    }
}

/// Starts a server with `tweak` applied to the test configuration.
pub fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut c = test_config(dir.path());
    tweak(&mut c);
    let server = tern_server::start(c, StartOptions::default()).unwrap();
    TestServer { server, dir }
}

/// Starts a server with the test configuration.
pub fn start() -> TestServer {
    start_with(|_| {})
}

impl TestServer {
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    /// Stops the server cleanly and starts a new one on the same data.
    pub fn restart_with(self, tweak: impl FnOnce(&mut Config)) -> TestServer {
        let TestServer { server, dir } = self;
        server.shutdown().unwrap();
        drop(server);
        let mut c = test_config(dir.path());
        tweak(&mut c);
        let server = tern_server::start(c, StartOptions::default()).unwrap();
        TestServer { server, dir }
    }

    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

/// Sends `input` on a fresh connection, closes the write side, and returns
/// everything the server sent back before closing.
pub fn raw(addr: SocketAddr, input: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may answer and close before it has read everything (an
    // error on the first request): a failed write or shutdown is expected
    // then, and what it sent is still there to read.
    let _ = s.write_all(input);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The numeric field `name` of an INFO reply.
pub fn info_field(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("INFO has no {name}:\n{info}"))
        .trim()
        .parse()
        .unwrap()
}

/// Runs `args` and returns the reply or the server's error text
/// ("CODE detail").
pub fn run(con: &mut redis::Connection, args: &[&str]) -> Result<redis::Value, String> {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query::<redis::Value>(con).map_err(error_text)
}

/// The full text of a server error reply.
pub fn error_text(e: redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(c), Some(d)) => format!("{c} {d}"),
        (Some(c), None) => c.to_string(),
        _ => e.to_string(),
    }
}

/// Member keys of the store (every generation, live or garbage): what
/// compaction has yet to reclaim of composite values.
pub fn member_keys(t: &TestServer) -> usize {
    let db = &t.server.state().store.db;
    let mut it = db
        .iter(tern::ReadOptions {
            lower_bound: Some(vec![b'f']),
            upper_bound: Some(vec![b'g']),
            value_heads: true,
            ..tern::ReadOptions::default()
        })
        .unwrap();
    it.seek(b"f");
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next();
    }
    it.status().unwrap();
    n
}
