//! `tern coordinator`: the control plane. Stores submit jobs and wait for
//! their outcome; workers register, poll for work and report it finished.
//! The state machine is [`queue::Queue`]; this module serves it over gRPC
//! and runs its clock.

pub mod queue;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

use crate::proto::{self, coordinator_server};
pub use queue::{Limits, Queue};

/// How often the coordinator checks leases and progress.
const TICK: Duration = Duration::from_millis(100);
/// Longest an Await is held.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// The coordinator's shared state.
#[derive(Debug)]
pub struct Coordinator {
    queue: Mutex<Queue>,
    /// Woken on every change an awaiting store may care about.
    changed: Notify,
}

impl Coordinator {
    /// A coordinator with `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Coordinator {
            queue: Mutex::new(Queue::new(limits)),
            changed: Notify::new(),
        })
    }

    /// A snapshot for status displays and metrics.
    pub fn status(&self) -> proto::StatusReply {
        self.queue.lock().status(Instant::now())
    }

    /// Checks leases and progress until the process ends.
    async fn clock(self: Arc<Self>) {
        let mut every = tokio::time::interval(TICK);
        loop {
            every.tick().await;
            if self.queue.lock().tick(Instant::now()) {
                self.changed.notify_waiters();
            }
        }
    }
}

/// The gRPC face of a [`Coordinator`].
#[derive(Debug, Clone)]
pub struct Service(pub Arc<Coordinator>);

#[tonic::async_trait]
impl coordinator_server::Coordinator for Service {
    async fn submit(
        &self,
        req: Request<proto::SubmitRequest>,
    ) -> Result<Response<proto::SubmitReply>, Status> {
        let req = req.into_inner();
        let job = req
            .job
            .ok_or_else(|| Status::invalid_argument("submit without a job"))?;
        let r = self
            .0
            .queue
            .lock()
            .submit(job, req.priority, Instant::now());
        Ok(Response::new(match r {
            Ok(()) => proto::SubmitReply {
                accepted: true,
                reason: String::new(),
            },
            Err(reason) => proto::SubmitReply {
                accepted: false,
                reason,
            },
        }))
    }

    async fn r#await(
        &self,
        req: Request<proto::AwaitRequest>,
    ) -> Result<Response<proto::AwaitReply>, Status> {
        let req = req.into_inner();
        let wait = Duration::from_millis(req.wait_ms.into()).min(MAX_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the check, so a change in between wakes it.
            let changed = self.0.changed.notified();
            let reply = self.0.queue.lock().outcome(&req.job_id);
            let pending = reply.state == proto::await_reply::State::Pending as i32;
            if !pending || tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Ok(Response::new(reply));
            }
        }
    }

    async fn register(
        &self,
        req: Request<proto::RegisterRequest>,
    ) -> Result<Response<proto::RegisterReply>, Status> {
        let req = req.into_inner();
        let mut q = self.0.queue.lock();
        let id = q.register(&req.name, req.slots, Instant::now());
        tracing::info!(
            "tern coordinator: worker {id} ({}) registered with {} slots",
            req.name,
            req.slots
        );
        Ok(Response::new(proto::RegisterReply {
            worker_id: id,
            lease_ms: q.limits().lease.as_millis() as u32,
        }))
    }

    async fn poll(
        &self,
        req: Request<proto::PollRequest>,
    ) -> Result<Response<proto::PollReply>, Status> {
        let req = req.into_inner();
        let reply = self.0.queue.lock().poll(&req, Instant::now());
        Ok(Response::new(reply))
    }

    async fn finish(
        &self,
        req: Request<proto::FinishRequest>,
    ) -> Result<Response<proto::FinishReply>, Status> {
        let req = req.into_inner();
        let outcome = match req.result {
            Some(m) if req.error.is_empty() => Ok(m),
            _ => Err(if req.error.is_empty() {
                "the worker sent no result".to_string()
            } else {
                req.error
            }),
        };
        let accepted = self.0.queue.lock().finish(
            &req.worker_id,
            &req.job_id,
            req.attempt,
            outcome,
            Instant::now(),
        );
        self.0.changed.notify_waiters();
        Ok(Response::new(proto::FinishReply { accepted }))
    }

    async fn status(
        &self,
        _req: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusReply>, Status> {
        Ok(Response::new(self.0.status()))
    }
}

/// Serves a coordinator with `limits` on `listener` until `shutdown`
/// completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let coordinator = Coordinator::new(limits);
    tokio::spawn(coordinator.clone().clock());
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tonic::transport::Server::builder()
        .add_service(coordinator_server::CoordinatorServer::new(Service(
            coordinator,
        )))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
