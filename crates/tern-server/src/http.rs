//! The Prometheus `/metrics` endpoint: a minimal HTTP/1.1 responder on its
//! own port (one request per connection).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::state::State;

/// Largest request head accepted, bytes.
const MAX_HEAD: usize = 8 * 1024;

/// Accepts metrics requests until shutdown.
pub async fn serve(listener: TcpListener, state: Arc<State>) {
    let mut shutdown = state.shutdown_signal();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((sock, _)) => {
                    let st = state.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(10), respond(sock, st)).await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            _ = shutdown.changed() => return,
        }
    }
}

async fn respond(mut sock: TcpStream, state: Arc<State>) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
        if head.len() > MAX_HEAD {
            break;
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or(b"");
    let mut parts = line.split(|&b| b == b' ');
    let method = parts.next().unwrap_or(b"");
    let path = parts.next().unwrap_or(b"");
    let (status, ctype, body) = if method != b"GET" {
        (
            "405 Method Not Allowed",
            "text/plain",
            "only GET is supported\n".to_string(),
        )
    } else if path == b"/metrics" || path.starts_with(b"/metrics?") {
        let engine = state.store.db.stats();
        let mut body =
            state
                .metrics
                .render_prometheus(state.connected(), state.started.elapsed(), &engine);
        crate::metrics::render_exec(&mut body, &state.exec, &state.store.meta());
        if let Some(o) = &state.offload {
            crate::metrics::render_offload(&mut body, o.stats());
        }
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
    } else {
        ("404 Not Found", "text/plain", "try /metrics\n".to_string())
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(resp.as_bytes()).await?;
    sock.shutdown().await
}
