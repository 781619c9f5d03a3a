//! A byte-rate limiter for background I/O, shared by compaction and GC so
//! that together they stay under one budget and foreground latency stays flat.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::WritableFile;

/// Token bucket in bytes. A request larger than the balance is granted at
/// once and leaves the bucket in debt; the caller then sleeps until the debt
/// would have been refilled, so the long-run rate is exact and no request
/// waits for more than it asked.
#[derive(Debug)]
pub struct RateLimiter {
    bytes_per_sec: u64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A limiter allowing `bytes_per_sec` (bursts up to 100 ms worth).
    pub fn new(bytes_per_sec: u64) -> Arc<Self> {
        Arc::new(RateLimiter {
            bytes_per_sec: bytes_per_sec.max(1),
            state: Mutex::new((0.0, Instant::now())),
        })
    }

    /// The configured rate.
    pub fn bytes_per_sec(&self) -> u64 {
        self.bytes_per_sec
    }

    /// Takes `bytes` from the bucket, sleeping off any debt.
    pub fn request(&self, bytes: u64) {
        let rate = self.bytes_per_sec as f64;
        let wait = {
            let mut s = self.state.lock();
            let now = Instant::now();
            let burst = rate / 10.0;
            s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * rate).min(burst);
            s.1 = now;
            s.0 -= bytes as f64;
            if s.0 < 0.0 {
                Duration::from_secs_f64(-s.0 / rate)
            } else {
                Duration::ZERO
            }
        };
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

/// A file whose appends are paced by a [`RateLimiter`].
pub struct RateLimitedFile {
    inner: Box<dyn WritableFile>,
    limiter: Arc<RateLimiter>,
}

impl RateLimitedFile {
    /// Wraps `inner`.
    pub fn wrap(
        inner: Box<dyn WritableFile>,
        limiter: Option<&Arc<RateLimiter>>,
    ) -> Box<dyn WritableFile> {
        match limiter {
            Some(l) => Box::new(RateLimitedFile {
                inner,
                limiter: l.clone(),
            }),
            None => inner,
        }
    }
}

impl WritableFile for RateLimitedFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.limiter.request(data.len() as u64);
        self.inner.append(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn sync_handle(&self) -> io::Result<Arc<dyn super::FileSync>> {
        self.inner.sync_handle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_to_the_configured_rate() {
        let l = RateLimiter::new(1_000_000);
        let start = Instant::now();
        for _ in 0..30 {
            l.request(10_000);
        }
        // 300 KB at 1 MB/s, minus the 100 KB burst: at least ~0.2 s.
        assert!(
            start.elapsed() >= Duration::from_millis(150),
            "{:?}",
            start.elapsed()
        );
    }
}
