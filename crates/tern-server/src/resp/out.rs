//! Reply bytes waiting to be written to a connection's socket.
//!
//! Replies are encoded into one buffer, except large stored values
//! ([`Reply::Value`]): those stay in their own buffers and go to the socket
//! with the encoded bytes around them in one `writev`, so a 16 KiB GET is
//! not copied once more on its way out.

use std::io::{self, IoSlice};

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::reply::line;
use super::Reply;

/// Values at least this long are written from their own buffer; a shorter
/// one costs less to copy than a slice of its own in the `writev`.
pub const SHARE_MIN: usize = 4096;

/// Slices per `writev` (Linux takes at most 1024).
const MAX_SLICES: usize = 512;

/// Encoded replies, in order, waiting for the socket.
#[derive(Debug, Default)]
pub struct Out {
    /// Everything but the shared values.
    buf: Vec<u8>,
    /// Shared values with where each goes: before `buf[at..]`.
    shared: Vec<(usize, Bytes)>,
    /// Their total length.
    shared_len: usize,
}

impl Out {
    /// An empty output with room for `n` encoded bytes.
    pub fn with_capacity(n: usize) -> Out {
        Out {
            buf: Vec::with_capacity(n),
            ..Out::default()
        }
    }

    /// Appends `reply`'s encoding.
    pub fn push(&mut self, reply: Reply, resp3: bool) {
        match reply {
            Reply::Value(b) if b.len() >= SHARE_MIN => {
                line(&mut self.buf, b'$', &b.len().to_string());
                self.shared_len += b.len();
                self.shared.push((self.buf.len(), b));
                self.buf.extend_from_slice(b"\r\n");
            }
            // An array's items may hold large values (MGET).
            Reply::Array(items) => {
                line(&mut self.buf, b'*', &items.len().to_string());
                for item in items {
                    self.push(item, resp3);
                }
            }
            r => r.encode(&mut self.buf, resp3),
        }
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.buf.len() + self.shared_len
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes everything waiting to `w`, then empties itself; with more
    /// than `above` bytes of buffer it gives back all but `keep`.
    pub async fn write_to<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        above: usize,
        keep: usize,
    ) -> io::Result<()> {
        if self.shared.is_empty() {
            w.write_all(&self.buf).await?;
        } else {
            let mut slices = Vec::with_capacity(2 * self.shared.len() + 1);
            let mut from = 0;
            for (at, b) in &self.shared {
                if *at > from {
                    slices.push(IoSlice::new(&self.buf[from..*at]));
                }
                slices.push(IoSlice::new(b));
                from = *at;
            }
            if self.buf.len() > from {
                slices.push(IoSlice::new(&self.buf[from..]));
            }
            let mut rest = &mut slices[..];
            while !rest.is_empty() {
                let n = rest.len().min(MAX_SLICES);
                let written = w.write_vectored(&rest[..n]).await?;
                if written == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                IoSlice::advance_slices(&mut rest, written);
            }
        }
        self.buf.clear();
        self.shared.clear();
        self.shared_len = 0;
        if self.buf.capacity() > above {
            self.buf.shrink_to(keep);
        }
        // A pipeline of a thousand large values leaves no lasting list.
        if self.shared.capacity() > 64 {
            self.shared = Vec::new();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    /// A writer that takes at most `step` bytes per call, so writes stop
    /// in the middle of slices.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.step);
            self.got.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut left = self.step;
            for b in bufs {
                let n = b.len().min(left);
                self.got.extend_from_slice(&b[..n]);
                left -= n;
                if left == 0 {
                    break;
                }
            }
            Poll::Ready(Ok(self.step - left))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn replies() -> Vec<Reply> {
        let big = |c: u8, n: usize| Bytes::from(vec![c; n]);
        vec![
            Reply::Value(big(b'a', SHARE_MIN)),
            Reply::Value(big(b'b', SHARE_MIN + 7)),
            Reply::Ok,
            Reply::Value(Bytes::from_static(b"small")),
            Reply::Array(vec![Reply::Value(big(b'c', SHARE_MIN)), Reply::Nil]),
            Reply::Value(big(b'd', 3 * SHARE_MIN)),
        ]
    }

    #[test]
    fn writes_what_encoding_writes_in_order_whatever_each_write_takes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for resp3 in [false, true] {
            let mut want = Vec::new();
            for r in replies() {
                r.encode(&mut want, resp3);
            }
            for step in [1, 5, 4096, 1 << 20] {
                let mut out = Out::with_capacity(64);
                for r in replies() {
                    out.push(r, resp3);
                }
                assert_eq!(out.len(), want.len());
                assert_eq!(out.shared.len(), 4, "the large values");
                let mut w = Trickle {
                    got: Vec::new(),
                    step,
                };
                rt.block_on(out.write_to(&mut w, 64, 64)).unwrap();
                assert!(w.got == want, "step {step}, resp3 {resp3}");
                assert!(out.is_empty());
                // Reused after a write.
                out.push(Reply::Int(7), resp3);
                let mut w = Trickle {
                    got: Vec::new(),
                    step,
                };
                rt.block_on(out.write_to(&mut w, 64, 64)).unwrap();
                assert_eq!(w.got, b":7\r\n");
            }
        }
    }

    #[test]
    fn more_values_than_one_writev_takes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut out = Out::default();
        let mut want = Vec::new();
        for i in 0..MAX_SLICES * 2 {
            let r = Reply::Value(Bytes::from(vec![(i % 251) as u8; SHARE_MIN]));
            r.encode(&mut want, false);
            out.push(r, false);
        }
        let mut w = Trickle {
            got: Vec::new(),
            step: usize::MAX,
        };
        rt.block_on(out.write_to(&mut w, 0, 0)).unwrap();
        assert!(w.got == want);
    }
}
