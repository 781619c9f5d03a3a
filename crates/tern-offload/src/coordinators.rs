//! A client's view of the coordinators: one URL, or a comma-separated
//! list of a leader and its standbys (all sharing one etcd). Requests go
//! to the coordinator that answered last; when one fails, or answers that
//! it stands by, the client moves on to the next, so a standby that takes
//! over is found without restarting anything.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::error::{OffloadError, Result};
use crate::proto::coordinator_client::CoordinatorClient;

/// A gRPC client of the coordinator service.
pub type Client = CoordinatorClient<Channel>;

/// The coordinators a client may ask (see the module docs).
#[derive(Debug)]
pub struct Coordinators {
    urls: Vec<String>,
    endpoints: Vec<Endpoint>,
    /// Made on first use, inside the runtime the connections live in.
    clients: OnceLock<Vec<Client>>,
    current: AtomicUsize,
}

impl Coordinators {
    /// The coordinators at `urls` (`http://host:port`, comma-separated),
    /// each request limited to `timeout`. Connects on first use and
    /// reconnects as needed.
    pub fn new(urls: &str, timeout: Duration) -> Result<Self> {
        let urls: Vec<String> = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect();
        if urls.is_empty() {
            return Err(OffloadError::Invalid(
                "no coordinator URL given (http://host:port, or several separated by commas)"
                    .into(),
            ));
        }
        let endpoints = urls
            .iter()
            .map(|url| {
                Ok(Endpoint::from_shared(url.clone())
                    .map_err(|e| {
                        OffloadError::Invalid(format!("bad coordinator URL {url:?}: {e}"))
                    })?
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(timeout))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Coordinators {
            urls,
            endpoints,
            clients: OnceLock::new(),
            current: AtomicUsize::new(0),
        })
    }

    /// How many coordinators there are.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Never: there is at least one.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// The client to ask now, and its position for [`Coordinators::failed`].
    /// Must be called inside a tokio runtime.
    pub fn client(&self) -> (usize, Client) {
        let clients = self.clients.get_or_init(|| {
            self.endpoints
                .iter()
                .map(|e| CoordinatorClient::new(e.connect_lazy()))
                .collect()
        });
        let i = self.current.load(Ordering::Acquire) % clients.len();
        (i, clients[i].clone())
    }

    /// The URL of coordinator `i`.
    pub fn url(&self, i: usize) -> &str {
        &self.urls[i % self.urls.len()]
    }

    /// Coordinator `i` failed or stands by: later requests go to the next
    /// one (unless another request moved on already). Returns whether
    /// there is another to try.
    pub fn failed(&self, i: usize) -> bool {
        let n = self.urls.len();
        let _ = self
            .current
            .compare_exchange(i, (i + 1) % n, Ordering::AcqRel, Ordering::Acquire);
        n > 1
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_failure_moves_on_to_the_next_and_wraps_around() {
        let c = Coordinators::new(
            " http://127.0.0.1:1, http://127.0.0.1:2 ,",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(c.len(), 2);
        let (i, _) = c.client();
        assert_eq!(c.url(i), "http://127.0.0.1:1");
        assert!(c.failed(i));
        // A second report of the same failure does not skip the next one.
        c.failed(i);
        let (j, _) = c.client();
        assert_eq!(c.url(j), "http://127.0.0.1:2");
        c.failed(j);
        assert_eq!(c.client().0, 0);
        assert!(Coordinators::new(" , ", Duration::from_secs(1)).is_err());
        assert!(Coordinators::new("not a url", Duration::from_secs(1)).is_err());
        let one = Coordinators::new("http://127.0.0.1:1", Duration::from_secs(1)).unwrap();
        assert!(!one.failed(0), "nothing else to try");
    }
}
