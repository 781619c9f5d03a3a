//! A bounded soak on loopback: 1,000 connections at once — idle clients
//! that ping, pipelining writers and readers, slow readers that never read
//! their replies, and clients sending malformed requests. Every
//! well-behaved client must keep getting correct answers, and the server
//! process's peak memory must stay under a stated bound.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PINGERS: usize = 900;
const PIPELINERS: usize = 40;
const SLOW_READERS: usize = 30;
const MALFORMED: usize = 30;
const RUN: Duration = Duration::from_secs(8);
/// How long a well-behaved client may wait for any answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// Peak resident memory of the whole test process (server and clients).
const PEAK_RSS_BOUND_MIB: u64 = 512;
const VALUE_LEN: usize = 1024;
const BIG_VALUE_LEN: usize = 64 << 10;

#[derive(Default)]
struct Tally {
    answered: AtomicU64,
    failures: AtomicU64,
    malformed_failures: AtomicU64,
    malformed_closed: AtomicU64,
    /// What went wrong, one line per failure (the first few), so a failed
    /// run says whether clients timed out, were cut off or read wrong data.
    why: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn fail(&self, what: String) {
        self.failures.fetch_add(1, Relaxed);
        let mut why = self.why.lock().unwrap();
        if why.len() < 20 {
            why.push(what);
        }
    }
}

/// Says what a timed request got instead of the answer it wanted.
fn describe<T: std::fmt::Debug>(
    got: &Result<Option<T>, tokio::time::error::Elapsed>,
    started: Instant,
) -> String {
    match got {
        Err(_) => format!("no answer within {ANSWER_WITHIN:?}"),
        Ok(None) => format!("connection closed or failed after {:?}", started.elapsed()),
        Ok(Some(r)) => {
            let text = format!("{r:?}");
            format!("wrong answer: {}", &text[..text.len().min(300)])
        }
    }
}

/// Reads until `buf` holds `n` complete RESP2 replies of the kinds these
/// clients get (simple, error, integer, bulk); returns them as
/// (first byte, payload).
async fn read_replies(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    n: usize,
) -> Option<Vec<(u8, Vec<u8>)>> {
    let mut out = Vec::with_capacity(n);
    let mut pos = 0;
    while out.len() < n {
        let parsed = (|| {
            let line_end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
            let kind = buf[pos];
            let line = &buf[pos + 1..line_end];
            if kind == b'$' {
                let len: i64 = std::str::from_utf8(line).ok()?.parse().ok()?;
                if len < 0 {
                    return Some((kind, Vec::new(), line_end + 2));
                }
                let end = line_end + 2 + len as usize;
                if buf.len() < end + 2 {
                    return None;
                }
                Some((kind, buf[line_end + 2..end].to_vec(), end + 2))
            } else {
                Some((kind, line.to_vec(), line_end + 2))
            }
        })();
        match parsed {
            Some((kind, payload, next)) => {
                out.push((kind, payload));
                pos = next;
            }
            None => {
                let mut chunk = [0u8; 64 << 10];
                let k = sock.read(&mut chunk).await.ok()?;
                if k == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..k]);
            }
        }
    }
    buf.drain(..pos);
    Some(out)
}

fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

async fn pinger(addr: SocketAddr, tally: Arc<Tally>, until: Instant) {
    let mut s = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => return tally.fail(format!("pinger: connect: {e}")),
    };
    let mut buf = Vec::new();
    while Instant::now() < until {
        let started = Instant::now();
        let ok = tokio::time::timeout(ANSWER_WITHIN, async {
            s.write_all(b"PING\r\n").await.ok()?;
            read_replies(&mut s, &mut buf, 1).await
        })
        .await;
        match ok {
            Ok(Some(ref r)) if r[0] == (b'+', b"PONG".to_vec()) => {
                tally.answered.fetch_add(1, Relaxed);
            }
            _ => tally.fail(format!("pinger: {}", describe(&ok, started))),
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

async fn pipeliner(addr: SocketAddr, id: usize, tally: Arc<Tally>, until: Instant) {
    let mut s = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => return tally.fail(format!("pipeliner {id}: connect: {e}")),
    };
    let mut buf = Vec::new();
    let mut round = 0u64;
    while Instant::now() < until {
        let mut req = Vec::new();
        for i in 0..50 {
            let k = format!("p{id}-{i}");
            let v = vec![b'a' + (round % 26) as u8; VALUE_LEN];
            req.extend(cmd(&[b"SET", k.as_bytes(), &v]));
            req.extend(cmd(&[b"GET", k.as_bytes()]));
        }
        let started = Instant::now();
        let ok = tokio::time::timeout(ANSWER_WITHIN, async {
            s.write_all(&req).await.ok()?;
            read_replies(&mut s, &mut buf, 100).await
        })
        .await;
        let want = vec![b'a' + (round % 26) as u8; VALUE_LEN];
        let wrong = match &ok {
            Ok(Some(r)) => r.chunks(2).enumerate().find_map(|(i, p)| {
                let good = p[0] == (b'+', b"OK".to_vec()) && p[1].0 == b'$' && p[1].1 == want;
                (!good).then(|| {
                    let got: Vec<_> = p
                        .iter()
                        .map(|(kind, payload)| {
                            let head = &payload[..payload.len().min(16)];
                            format!(
                                "{}{} ({} bytes)",
                                *kind as char,
                                String::from_utf8_lossy(head),
                                payload.len()
                            )
                        })
                        .collect();
                    format!("wrong answer to SET/GET p{id}-{i} in round {round}: {got:?}")
                })
            }),
            _ => Some(describe(&ok, started)),
        };
        if let Some(wrong) = wrong {
            return tally.fail(format!("pipeliner {id}: {wrong}"));
        }
        tally.answered.fetch_add(100, Relaxed);
        round += 1;
    }
}

/// Asks for big replies and never reads them.
async fn slow_reader(addr: SocketAddr, until: Instant) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let mut req = Vec::new();
    for _ in 0..100 {
        req.extend(cmd(&[b"GET", b"big"]));
    }
    while Instant::now() < until {
        // Once the server stops reading (its replies pile up unread), this
        // write blocks; give up on it then and hold the connection.
        if tokio::time::timeout(Duration::from_millis(500), s.write_all(&req))
            .await
            .is_err()
        {
            break;
        }
    }
    Some(s)
}

async fn malformed(addr: SocketAddr, id: usize, tally: Arc<Tally>, until: Instant) {
    let inputs: [&[u8]; 6] = [
        b"*abc\r\n",
        b"*2\r\n$3\r\nGET\r\n$99999999999999\r\n",
        b"*1\r\n$-7\r\n",
        b"\x00\xff\xfe garbage \r\n*3\r\n",
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n:5\r\n",
        b"*9999999999\r\n",
    ];
    let mut n = id;
    while Instant::now() < until {
        let mut s = match TcpStream::connect(addr).await {
            Ok(s) => s,
            Err(e) => return tally.fail(format!("malformed {id}: connect: {e}")),
        };
        let _ = s.write_all(inputs[n % inputs.len()]).await;
        n += 1;
        // Garbage that parses as an inline command gets an error reply and
        // the connection stays open, as in Redis: end it from this side.
        let _ = s.shutdown().await;
        // The server must answer with an error and close, not hang.
        let mut out = Vec::new();
        match tokio::time::timeout(ANSWER_WITHIN, s.read_to_end(&mut out)).await {
            Ok(_) if out.starts_with(b"-ERR") || out.is_empty() => {
                tally.malformed_closed.fetch_add(1, Relaxed)
            }
            _ => tally.malformed_failures.fetch_add(1, Relaxed),
        };
    }
}

fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kb / 1024
}

#[test]
fn a_thousand_mixed_connections_keep_answering_within_bounded_memory() {
    let server = common::start_with(|c| {
        c.maxclients = 2000;
        c.threads = 2;
    });
    let addr = server.addr();
    let mut c = server.client();
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(vec![b'b'; BIG_VALUE_LEN])
        .query(&mut c)
        .unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tally = Arc::new(Tally::default());
    let until = Instant::now() + RUN;
    let connected = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..PINGERS {
            tasks.push(tokio::spawn(pinger(addr, tally.clone(), until)));
        }
        for id in 0..PIPELINERS {
            tasks.push(tokio::spawn(pipeliner(addr, id, tally.clone(), until)));
        }
        let slow: Vec<_> = (0..SLOW_READERS)
            .map(|_| tokio::spawn(slow_reader(addr, until)))
            .collect();
        for id in 0..MALFORMED {
            tasks.push(tokio::spawn(malformed(addr, id, tally.clone(), until)));
        }
        tokio::time::sleep(RUN / 2).await;
        // Mid-run, a fresh well-behaved client is served too.
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut buf = Vec::new();
        let info = tokio::time::timeout(ANSWER_WITHIN, async {
            s.write_all(&cmd(&[b"INFO", b"clients"])).await.ok()?;
            read_replies(&mut s, &mut buf, 1).await
        })
        .await
        .expect("INFO did not answer mid-soak")
        .expect("INFO connection closed mid-soak");
        let text = String::from_utf8_lossy(&info[0].1).into_owned();
        let connected: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        for t in tasks {
            t.await.unwrap();
        }
        let held: Vec<_> = futures_join(slow).await;
        drop(held);
        connected
    });
    let peak = peak_rss_mib();
    println!(
        "{} answers, {} failures, {} malformed requests not refused, {} malformed connections closed, {connected} connected mid-run, peak RSS {peak} MiB",
        tally.answered.load(Relaxed),
        tally.failures.load(Relaxed),
        tally.malformed_failures.load(Relaxed),
        tally.malformed_closed.load(Relaxed),
    );
    assert_eq!(
        tally.failures.load(Relaxed),
        0,
        "a well-behaved client went unanswered or got a wrong answer:\n{}",
        tally.why.lock().unwrap().join("\n")
    );
    assert!(
        connected >= (PINGERS + PIPELINERS + SLOW_READERS) as u64,
        "only {connected} connections were open mid-run"
    );
    assert!(tally.answered.load(Relaxed) >= (PINGERS * 10) as u64);
    assert_eq!(
        tally.malformed_failures.load(Relaxed),
        0,
        "a malformed request was not refused and closed"
    );
    assert!(tally.malformed_closed.load(Relaxed) >= MALFORMED as u64);
    assert!(
        peak < PEAK_RSS_BOUND_MIB,
        "peak RSS {peak} MiB exceeds {PEAK_RSS_BOUND_MIB} MiB"
    );
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

async fn futures_join<T>(hs: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(hs.len());
    for h in hs {
        out.push(h.await.unwrap());
    }
    out
}
