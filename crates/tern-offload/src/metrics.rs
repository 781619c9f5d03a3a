//! Prometheus metrics for `tern coordinator` and `tern worker`: the text
//! exposition format (version 0.0.4) and a minimal HTTP/1.1 responder that
//! serves it on `GET /metrics`, one request per connection.
//!
//! Each daemon keeps its counts where the events happen and hands
//! [`spawn`] a function that renders them; nothing is computed between
//! scrapes.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::proto::{self, job_spec};

/// Upper bounds of the time histograms' buckets, seconds: a small GC takes
/// milliseconds, a large compaction minutes.
pub const BUCKETS_S: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The job kinds, as metrics label them (`kind="..."`).
pub const KINDS: [&str; 2] = ["compaction", "gc"];

/// Where `spec`'s kind is in [`KINDS`].
pub fn kind_index(spec: &proto::JobSpec) -> Option<usize> {
    match spec.kind {
        Some(job_spec::Kind::Compaction(_)) => Some(0),
        Some(job_spec::Kind::Gc(_)) => Some(1),
        None => None,
    }
}

/// A histogram of durations over [`BUCKETS_S`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket, not cumulative; the last is above every
    /// bound.
    pub buckets: [u64; BUCKETS_S.len() + 1],
    /// Sum of the observations, seconds.
    pub sum: f64,
    /// Observations.
    pub count: u64,
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let b = BUCKETS_S
            .iter()
            .position(|&ub| s <= ub)
            .unwrap_or(BUCKETS_S.len());
        self.buckets[b] += 1;
        self.sum += s;
        self.count += 1;
    }
}

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// Only grows (restarts at zero with the process).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, a sum and a count.
    Histogram,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        }
    }
}

/// A sample's value.
pub trait Value: Copy {
    /// Appends it as the text format writes numbers.
    fn write_to(self, out: &mut String);
}

impl Value for u64 {
    fn write_to(self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl Value for f64 {
    fn write_to(self, out: &mut String) {
        // Rust writes "inf" and "NaN"; the format wants "+Inf" and "NaN".
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if self > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(out, "{self}");
        }
    }
}

/// Label pairs of one sample.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

/// A text exposition being written: families in order, each a `# HELP`
/// and a `# TYPE` line, then its samples.
#[derive(Debug, Default)]
pub struct Text(String);

impl Text {
    /// An empty exposition.
    pub fn new() -> Self {
        Text(String::with_capacity(4096))
    }

    /// Starts the family `name`; its samples follow.
    pub fn family(&mut self, name: &str, ty: Type, help: &str) {
        // Help text escapes only backslashes and newlines.
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {}", ty.name());
    }

    /// One sample: `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: Labels<'_>, v: impl Value) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let val = val
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.0, "{k}=\"{val}\"");
            }
            self.0.push('}');
        }
        self.0.push(' ');
        v.write_to(&mut self.0);
        self.0.push('\n');
    }

    /// A family of one unlabelled counter.
    pub fn counter(&mut self, name: &str, help: &str, v: u64) {
        self.family(name, Type::Counter, help);
        self.sample(name, &[], v);
    }

    /// A family of one unlabelled gauge.
    pub fn gauge(&mut self, name: &str, help: &str, v: impl Value) {
        self.family(name, Type::Gauge, help);
        self.sample(name, &[], v);
    }

    /// A family of counters, one per value of the label `label`.
    pub fn counters(&mut self, name: &str, help: &str, label: &str, vs: &[(&str, u64)]) {
        self.family(name, Type::Counter, help);
        for &(l, v) in vs {
            self.sample(name, &[(label, l)], v);
        }
    }

    /// A family of gauges, one per value of the label `label`.
    pub fn gauges(&mut self, name: &str, help: &str, label: &str, vs: &[(&str, u64)]) {
        self.family(name, Type::Gauge, help);
        for &(l, v) in vs {
            self.sample(name, &[(label, l)], v);
        }
    }

    /// A histogram family: per series, `name_bucket{..,le=".."}` (cumulative,
    /// ending with `+Inf`), `name_sum` and `name_count`.
    pub fn histogram(&mut self, name: &str, help: &str, series: &[(Labels<'_>, &Histogram)]) {
        self.family(name, Type::Histogram, help);
        for &(labels, h) in series {
            self.histogram_series(name, labels, h);
        }
    }

    /// One series of the histogram family `name` (started with
    /// [`Text::family`]).
    pub fn histogram_series(&mut self, name: &str, labels: Labels<'_>, h: &Histogram) {
        let bucket = format!("{name}_bucket");
        let mut cum = 0;
        for (i, n) in h.buckets.iter().enumerate() {
            cum += n;
            let le = match BUCKETS_S.get(i) {
                Some(ub) => ub.to_string(),
                None => "+Inf".into(),
            };
            let mut l = labels.to_vec();
            l.push(("le", &le));
            self.sample(&bucket, &l, cum);
        }
        self.sample(&format!("{name}_sum"), labels, h.sum);
        self.sample(&format!("{name}_count"), labels, h.count);
    }

    /// The exposition.
    pub fn finish(self) -> String {
        self.0
    }
}

/// Largest request head read, bytes: a scrape's is a few hundred.
const MAX_HEAD: usize = 8 * 1024;
/// Longest one connection is served: a client that stalls is dropped.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections answered at once; more are closed unanswered, so a flood
/// of slow clients cannot pile up tasks.
const MAX_CONNECTIONS: usize = 32;
/// The text format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What renders the exposition on each scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// A `/metrics` endpoint being served; dropping it stops it.
#[derive(Debug)]
pub struct Endpoint(tokio::task::JoinHandle<()>);

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves `render`'s exposition on `listener` until the returned handle is
/// dropped, logging the address as `who`. Must be called on a Tokio
/// runtime.
pub fn spawn(
    listener: TcpListener,
    who: &str,
    render: impl Fn() -> String + Send + Sync + 'static,
) -> Endpoint {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!("{who}: Prometheus metrics on http://{addr}/metrics");
    }
    Endpoint(tokio::spawn(serve(listener, Arc::new(render))))
}

/// Accepts connections on `listener` forever, answering each with one
/// response.
pub async fn serve(listener: TcpListener, render: Render) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    continue;
                };
                let render = render.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, respond(sock, &render)).await;
                    drop(slot);
                });
            }
            // Out of descriptors, most likely: wait rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Reads one request head and answers it.
async fn respond(mut sock: TcpStream, render: &Render) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let complete =
        |h: &[u8]| h.windows(4).any(|w| w == b"\r\n\r\n") || h.windows(2).any(|w| w == b"\n\n");
    while !complete(&head) && head.len() <= MAX_HEAD {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let (status, extra, ctype, body) = route(&head, complete(&head), render);
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(resp.as_bytes()).await?;
    sock.write_all(body.as_bytes()).await?;
    sock.shutdown().await?;
    // Closing with unread input would send a reset, which can destroy the
    // response before the client reads it: read what is left first.
    let drain = async {
        let mut left = MAX_HEAD * 8;
        while left > 0 {
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    Ok(())
}

/// The status line, extra headers, content type and body answering the
/// request head `head` (`complete`: it ended with its blank line).
fn route(
    head: &[u8],
    complete: bool,
    render: &Render,
) -> (&'static str, &'static str, &'static str, String) {
    let line = head.split(|&b| b == b'\n').next().unwrap_or(b"");
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ');
    let (method, path, version) = (parts.next(), parts.next(), parts.next());
    let plain = "text/plain; charset=utf-8";
    let well_formed = complete
        && head.len() <= MAX_HEAD
        && parts.next().is_none()
        && version.is_some_and(|v| v.starts_with(b"HTTP/1."));
    let (Some(method), Some(path), true) = (method, path, well_formed) else {
        return ("400 Bad Request", "", plain, "bad request\n".into());
    };
    if method != b"GET" {
        return (
            "405 Method Not Allowed",
            "Allow: GET\r\n",
            plain,
            "only GET is supported\n".into(),
        );
    }
    if path == b"/metrics" || path.starts_with(b"/metrics?") {
        ("200 OK", "", CONTENT_TYPE, render())
    } else {
        ("404 Not Found", "", plain, "try /metrics\n".into())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    async fn ask(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn the_responder_serves_get_metrics_and_refuses_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _endpoint = spawn(listener, "test", || {
            let mut t = Text::new();
            t.counter("x_total", "Things.", 7);
            t.finish()
        });
        let ok = ask(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("Content-Type: text/plain; version=0.0.4"),
            "{ok}"
        );
        let body = "# HELP x_total Things.\n# TYPE x_total counter\nx_total 7\n";
        assert!(
            ok.contains(&format!("Content-Length: {}\r\n", body.len())),
            "{ok}"
        );
        assert!(ok.ends_with(&format!("\r\n\r\n{body}")), "{ok}");
        let query = ask(addr, b"GET /metrics?name[]=x HTTP/1.0\n\n").await;
        assert!(query.starts_with("HTTP/1.1 200 OK\r\n"), "{query}");
        let other = ask(addr, b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404 Not Found\r\n"), "{other}");
        let post = ask(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        assert!(
            post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{post}"
        );
        assert!(post.contains("Allow: GET\r\n"), "{post}");
        let garbage = ask(addr, b"hello\r\n\r\n").await;
        assert!(
            garbage.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{garbage}"
        );
        // A head that never ends is cut off at the limit, not read forever.
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD * 2, b'a');
        let long = ask(addr, &long).await;
        assert!(long.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{long}");
    }

    #[test]
    fn histograms_are_cumulative_and_end_with_inf() {
        let mut h = Histogram::default();
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_millis(200));
        h.observe(Duration::from_secs(1000));
        let mut t = Text::new();
        t.histogram("j_seconds", "Job time.", &[(&[("kind", "gc")], &h)]);
        let text = t.finish();
        assert!(text.starts_with("# HELP j_seconds Job time.\n# TYPE j_seconds histogram\n"));
        assert!(
            text.contains("j_seconds_bucket{kind=\"gc\",le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("j_seconds_bucket{kind=\"gc\",le=\"0.1\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("j_seconds_bucket{kind=\"gc\",le=\"0.25\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("j_seconds_bucket{kind=\"gc\",le=\"600\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("j_seconds_bucket{kind=\"gc\",le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("j_seconds_sum{kind=\"gc\"} 1000.203\n"),
            "{text}"
        );
        assert!(text.contains("j_seconds_count{kind=\"gc\"} 3\n"), "{text}");
        let mut t = Text::new();
        t.gauge("age_seconds", "Age.", f64::INFINITY);
        assert!(t.finish().ends_with("age_seconds +Inf\n"));
    }
}
