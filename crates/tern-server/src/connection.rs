//! One client connection: read, parse, execute, reply, with pipelining.
//!
//! The connection's task parses every complete request a read brought in,
//! then runs them in order: consecutive writes as one job on the
//! committer, consecutive reads as one job on the read pool, the rest
//! inline (see [`crate::exec`]). It waits for each job before the next, so
//! its requests take effect in the order sent, and writes the replies once
//! the pipeline is done, so a pipeline is answered with few writes.
//!
//! Memory per connection is bounded: arguments are checked against the
//! limits before they are buffered, the request buffer against
//! `client-query-buffer-limit`, all request buffers together against
//! `maxmemory-clients`, and replies are written out (waiting for the
//! client to read them) whenever 1 MiB is pending. A client that stalls in
//! the middle of a request or while its replies are written is closed after
//! `stall-timeout`, an idle one after `timeout`.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::commands::{execute, execute_from_memory, execute_in_run, Access, RunClock, Session};
use crate::exec::committer::JobDone;
use crate::exec::{run_bounded, Class, Exec, Request};
use crate::resp::parser::UNAUTHENTICATED_LIMITS;
use crate::resp::{Limits, Out, Parser, Reply};
use crate::state::{ClientInfo, State};

/// Most requests parsed ahead of execution.
const MAX_BATCH: usize = 1024;

/// Pending reply bytes that trigger a write in the middle of a pipeline.
const OUT_FLUSH: usize = 1 << 20;
/// Point reads at the front of a batch from which separated values that
/// the read pool would copy out of their blob files' mappings go there
/// rather than being read here with a system call each: the hand-over
/// (two thread wake-ups) costs about what a few such calls do. With
/// `-P 16` pipelines of 1 KiB GETs this was 1.14× faster; one GET at a
/// time on the pool was 0.88× (`docs/server.md`).
const MAPPED_BATCH: usize = 8;
/// Read buffer growth step, and the least a read asks for.
const READ_CHUNK: usize = 16 * 1024;
/// The most a read asks for. A client whose reads keep filling the
/// buffer (a pipeline of large values: sixteen 16 KiB SETs are 256 KiB)
/// gets reads that double up to this, so its pipeline runs as one job,
/// one commit, rather than a job per 16 KiB; reads that come back short
/// halve it again. Half of [`OUT_FLUSH`], so a buffer grown by reads (a
/// partial request plus one read) stays under the size past which
/// `maxmemory-clients` closes a client.
const MAX_READ_CHUNK: usize = OUT_FLUSH / 2;
/// How long a client with a grown, empty buffer may stay quiet before the
/// buffer goes back to [`READ_CHUNK`] (Redis shrinks idle query buffers
/// the same way).
const SHRINK_AFTER: Duration = Duration::from_secs(1);
/// A buffer this much larger than needed is shrunk when idle.
const KEEP_CAPACITY: usize = 64 * 1024;

/// How long a connection closed with an error reads and drops what its
/// client still sends.
const DRAIN_ON_CLOSE: Duration = Duration::from_millis(100);

/// Why a connection is being closed early.
enum Close {
    /// The peer went away or the socket failed.
    Gone,
    /// Send this error, then close.
    With(String),
}

fn secs(s: u64) -> Option<Duration> {
    (s > 0).then(|| Duration::from_secs(s))
}

async fn write_out(
    sock: &mut TcpStream,
    out: &mut Out,
    stall: Option<Duration>,
) -> Result<(), Close> {
    if out.is_empty() {
        return Ok(());
    }
    let w = out.write_to(sock, OUT_FLUSH * 2, READ_CHUNK);
    let r = match stall {
        Some(d) => tokio::time::timeout(d, w).await.map_err(|_| Close::Gone)?,
        None => w.await,
    };
    r.map_err(|_| Close::Gone)
}

/// Serves one connection until it closes, the client quits, or the
/// server shuts down. The caller has registered `info` in the client table;
/// this removes it.
pub async fn serve(mut sock: TcpStream, state: Arc<State>, exec: Arc<Exec>, info: Arc<ClientInfo>) {
    let id = info.id;
    let mut accounted = 0usize;
    let r = run(&mut sock, &state, &exec, info, &mut accounted).await;
    if let Err(Close::With(msg)) = r {
        state.metrics.protocol_errors.fetch_add(1, Relaxed);
        let mut out = Vec::new();
        Reply::Error(msg).encode(&mut out, false);
        let _ = tokio::time::timeout(Duration::from_secs(1), sock.write_all(&out)).await;
        // Closed with input unread, the connection is reset, and a reset
        // can discard the error before the client reads it: finish
        // writing, then drop what the client still sends, for a moment.
        let _ = sock.shutdown().await;
        let mut sink = vec![0u8; READ_CHUNK];
        let _ = tokio::time::timeout(DRAIN_ON_CLOSE, async {
            while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
    }
    let _ = sock.shutdown().await;
    state.buffered.fetch_sub(accounted, Relaxed);
    state.clients.lock().remove(&id);
}

async fn run(
    sock: &mut TcpStream,
    state: &Arc<State>,
    exec: &Exec,
    info: Arc<ClientInfo>,
    accounted: &mut usize,
) -> Result<(), Close> {
    let cfg = &state.config;
    let full_limits = Limits {
        max_bulk_len: cfg.proto_max_bulk_len,
        max_args: cfg.max_args,
        max_request_len: cfg.client_query_buffer_limit,
    };
    let authed = state.tunables.requirepass().is_empty();
    let mut session = Session::new(info, authed);
    let mut parser = Parser::new(if authed {
        full_limits
    } else {
        UNAUTHENTICATED_LIMITS
    });
    let mut inbuf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    // What the next read asks for (see `MAX_READ_CHUNK`).
    let mut chunk = READ_CHUNK;
    let mut out = Out::with_capacity(READ_CHUNK);
    let mut requests: VecDeque<Request> = VecDeque::new();
    // Requests that have run, their buffers going back to the parser.
    let mut ran: Vec<Request> = Vec::new();
    let mut shutdown = state.shutdown_signal();
    let stall = secs(cfg.stall_timeout);
    let idle = secs(cfg.timeout);
    loop {
        let mut start = 0;
        loop {
            // Parse what the buffer holds (one request at a time until
            // authenticated: AUTH changes the parser's limits), run it,
            // and repeat while requests remain.
            let mut bad = None;
            while requests.len() < MAX_BATCH && (session.authed || requests.is_empty()) {
                match parser.parse(&inbuf[start..]) {
                    Ok(step) => {
                        start += step.consumed;
                        match step.request {
                            Some(args) => requests.push_back(Request::new(args)),
                            None if step.consumed == 0 => break,
                            None => {}
                        }
                    }
                    Err(e) => {
                        bad = Some(format!("ERR {e}"));
                        break;
                    }
                }
            }
            if requests.is_empty() && bad.is_none() {
                break;
            }
            let was_authed = session.authed;
            session = run_requests(
                state,
                exec,
                session,
                &mut requests,
                &mut ran,
                &mut out,
                sock,
                stall,
            )
            .await?;
            for r in ran.drain(..) {
                parser.recycle(r.args);
            }
            // A batch answered from memory awaits nothing that yields: this
            // counts it against the task's budget, so a client with a large
            // read of pipelined requests lets the worker's other
            // connections run between its batches.
            tokio::task::consume_budget().await;
            if session.authed && !was_authed {
                parser.set_limits(full_limits);
            }
            if session.close {
                write_out(sock, &mut out, stall).await?;
                return Ok(());
            }
            if let Some(msg) = bad {
                write_out(sock, &mut out, stall).await?;
                return Err(Close::With(msg));
            }
        }
        write_out(sock, &mut out, stall).await?;
        inbuf.drain(..start);

        // Bound what this connection may buffer.
        let pending = parser.pending_bulk().unwrap_or(0).max(inbuf.len());
        if parser.held() + pending > cfg.client_query_buffer_limit {
            return Err(Close::With(
                "ERR request exceeds client-query-buffer-limit; send smaller requests or raise the limit".into(),
            ));
        }
        let need = parser
            .pending_bulk()
            .unwrap_or(0)
            .min(cfg.client_query_buffer_limit);
        let spare = inbuf.capacity() - inbuf.len();
        if spare < chunk || spare < need {
            // Exact: the room a read gets is what was asked for.
            inbuf.reserve_exact(need.max(chunk));
        } else if inbuf.is_empty() && inbuf.capacity() > KEEP_CAPACITY.max(2 * chunk) {
            inbuf.shrink_to(chunk);
        }
        // The arguments of a request still arriving left the buffer for
        // the parser: they count too.
        account(state, inbuf.capacity() + parser.held(), accounted)?;

        // A client gone quiet gives its grown buffer back.
        if inbuf.is_empty() && inbuf.capacity() > KEEP_CAPACITY {
            let quiet = tokio::select! {
                r = tokio::time::timeout(SHRINK_AFTER, sock.readable()) => r.is_err(),
                _ = shutdown.changed() => return Ok(()),
            };
            if quiet {
                inbuf.shrink_to(READ_CHUNK);
                chunk = READ_CHUNK;
                account(state, inbuf.capacity() + parser.held(), accounted)?;
            }
        }

        // Wait for more input.
        let timeout = if parser.in_progress() || !inbuf.is_empty() {
            stall
        } else {
            idle
        };
        let read_room = inbuf.capacity() - inbuf.len();
        let read = sock.read_buf(&mut inbuf);
        let n = tokio::select! {
            r = async {
                match timeout {
                    Some(d) => tokio::time::timeout(d, read).await.map_err(|_| ()),
                    None => Ok(read.await),
                }
            } => match r {
                Ok(Ok(n)) => n,
                Ok(Err(_)) => return Err(Close::Gone),
                Err(()) => return Err(Close::Gone),
            },
            _ = shutdown.changed() => return Ok(()),
        };
        if n == 0 {
            return Err(Close::Gone);
        }
        // Before authentication reads stay small: anyone may connect.
        chunk = if session.authed {
            next_chunk(chunk, n, read_room, &state.buffered, cfg.maxmemory_clients)
        } else {
            READ_CHUNK
        };
    }
}

/// Charges `cap` bytes (a request buffer's capacity and the arguments of
/// a request still arriving) to all clients' total (`accounted` is what
/// this connection was charged so far). A connection charged past
/// [`OUT_FLUSH`] while the total exceeds `maxmemory-clients` is closed.
fn account(state: &State, cap: usize, accounted: &mut usize) -> Result<(), Close> {
    if cap > *accounted {
        let total = state.buffered.fetch_add(cap - *accounted, Relaxed) + cap - *accounted;
        *accounted = cap;
        if total > state.config.maxmemory_clients && cap > OUT_FLUSH {
            return Err(Close::With(
                "ERR client input buffers exceed maxmemory-clients; retry later, send smaller requests or raise the limit".into(),
            ));
        }
    } else {
        state.buffered.fetch_sub(*accounted - cap, Relaxed);
        *accounted = cap;
    }
    Ok(())
}

/// What the read after one that asked for `room` bytes and got `n` asks
/// for, from `chunk`: twice as much if it filled the room (the client had
/// more ready), up to [`MAX_READ_CHUNK`]; half as much if it came back
/// under half full, or while all clients' buffers (`buffered`) take half
/// of `maxmemory-clients` or more, down to [`READ_CHUNK`].
fn next_chunk(
    chunk: usize,
    n: usize,
    room: usize,
    buffered: &std::sync::atomic::AtomicUsize,
    maxmemory_clients: usize,
) -> usize {
    if buffered.load(Relaxed) >= maxmemory_clients / 2 || n < chunk / 2 {
        (chunk / 2).max(READ_CHUNK)
    } else if n >= room {
        (chunk * 2).min(MAX_READ_CHUNK)
    } else {
        chunk
    }
}

/// Runs `requests` in order, appending the replies to `out` (and writing
/// them out as they pile up). Point reads are answered from memory here
/// while they can be; consecutive reads go to the read pool as one job,
/// consecutive writes to the committer as one job. A job whose replies grow
/// past [`crate::exec::JOB_REPLY_BYTES`] hands back the rest, which runs after its
/// replies are written.
#[allow(clippy::too_many_arguments)]
async fn run_requests(
    state: &Arc<State>,
    exec: &Exec,
    mut session: Session,
    requests: &mut VecDeque<Request>,
    ran: &mut Vec<Request>,
    out: &mut Out,
    sock: &mut TcpStream,
    stall: Option<Duration>,
) -> Result<Session, Close> {
    // Cluster mode: the batch is routed with one view, held until it has
    // run, so a topology change is acknowledged only after it.
    let mut view = match &state.cluster {
        Some(c) if session.authed => {
            let (s, view) = route_cluster(state, exec, c, session, requests).await?;
            session = s;
            view
        }
        _ => None,
    };
    while let Some(first) = requests.front() {
        // Before authentication every command answers without the engine.
        let class = if session.authed {
            first.class
        } else {
            Class::Inline
        };
        let replies = match class {
            Class::Inline => {
                let Some(req) = requests.pop_front() else {
                    break;
                };
                let reply = match req.redirect {
                    Some(r) => {
                        // Inside MULTI a redirected command aborts the
                        // transaction, as in Redis Cluster.
                        session.multi_failed |= session.multi.is_some();
                        r
                    }
                    None => execute(state, &mut session, &req.args, Access::Read { view: None }),
                };
                if session.silent_close {
                    Vec::new()
                } else {
                    vec![reply]
                }
            }
            Class::PointRead | Class::Read => {
                let replies = {
                    // Several point reads share the read-ahead's view.
                    let (point_reads, view) = read_ahead(state, requests);
                    // From memory here, sparing two thread hand-offs; the
                    // first read that would wait on the device goes, with
                    // the reads after it, to the read pool. So does, in a
                    // long enough run, the first separated value the pool
                    // would read through its file's mapping.
                    let defer_mapped = point_reads >= MAPPED_BATCH;
                    let mut clock = RunClock::start();
                    run_bounded(
                        requests,
                        |req| {
                            (req.class == Class::PointRead)
                                .then(|| {
                                    execute_from_memory(
                                        state,
                                        &mut session,
                                        &req.args,
                                        &mut clock,
                                        defer_mapped,
                                        view.as_ref().filter(|_| req.shares_view()),
                                    )
                                })
                                .flatten()
                        },
                        ran,
                    )
                };
                let mut replies = if replies.is_empty() {
                    let (s, replies) = read_on_pool(state, exec, session, requests, ran).await?;
                    session = s;
                    replies
                } else {
                    replies
                };
                // A node that may have lost its slots while reading
                // answers nothing it read.
                if state.cluster.as_ref().is_some_and(|c| !c.lease_fresh()) {
                    for r in replies.iter_mut().filter(|r| !r.is_error()) {
                        *r = crate::cluster::ClusterNode::fenced_reply();
                    }
                }
                replies
            }
            Class::Write => {
                let n = requests.iter().take_while(|r| r.class == class).count();
                let run: VecDeque<Request> = requests.drain(..n).collect();
                let done = exec
                    .committer
                    .run(state.clone(), session, run)
                    .await
                    .ok_or(Close::Gone)?;
                session = done.session;
                put_back(requests, done.rest);
                ran.extend(done.ran);
                let mut replies = done.replies;
                // A node frozen or cut off between its commit and here may
                // have lost its slots meanwhile: the write is not
                // acknowledged, and not retryable either (it did apply
                // here, so it may show at the new owner).
                if state.cluster.as_ref().is_some_and(|c| !c.lease_fresh()) {
                    for r in replies.iter_mut().filter(|r| !r.is_error()) {
                        *r = Reply::err(
                            "the node lost touch with the cluster after this write; its outcome is unknown",
                        );
                    }
                }
                replies
            }
        };
        for r in replies {
            out.push(r, session.resp3);
        }
        if session.close {
            requests.clear();
            return Ok(session);
        }
        if out.len() >= OUT_FLUSH {
            // A client slow to read must not hold the view (and with it a
            // topology change): the requests not run yet are routed again
            // after the write, with the view current then.
            let rerouting = view.take().is_some();
            write_out(sock, out, stall).await?;
            if let (true, Some(c)) = (rerouting, &state.cluster) {
                for r in requests.iter_mut() {
                    r.reset_route();
                }
                let (s, v) = route_cluster(state, exec, c, session, requests).await?;
                session = s;
                view = v;
            }
        }
    }
    drop(view);
    Ok(session)
}

/// Longest a request waits for a slot in handoff to this node.
const HANDOFF_WAIT: Duration = Duration::from_secs(2);

/// Routes `requests` in cluster mode (see [`crate::cluster::route_batch`]):
/// waits briefly for slots in handoff, and pulls the keys this node does
/// not have yet from their previous owner (one fetch per source, one
/// import through the committer). A request whose keys cannot be pulled
/// gets `-TRYAGAIN`. Returns the view the batch runs with.
async fn route_cluster(
    state: &Arc<State>,
    exec: &Exec,
    node: &crate::cluster::ClusterNode,
    mut session: Session,
    requests: &mut VecDeque<Request>,
) -> Result<(Session, Option<Arc<crate::cluster::view::View>>), Close> {
    let deadline = tokio::time::Instant::now() + HANDOFF_WAIT;
    let mut view = node.view();
    while crate::routing::must_wait(&view, requests) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let v = view.version();
        drop(view);
        node.changed_since(v, left).await;
        view = node.view();
    }
    let mut round = 0;
    loop {
        let pulls = crate::routing::route_batch(node, &view, node.lease_fresh(), requests);
        if !crate::routing::any_keyed(requests) {
            return Ok((session, None));
        }
        if pulls.is_empty() {
            return Ok((session, Some(view)));
        }
        // Which keys are not here yet is a store read: on the read pool.
        let mut by_source: std::collections::BTreeMap<usize, Vec<Vec<u8>>> = Default::default();
        for &(i, source) in &pulls {
            if let Some(r) = requests.get(i) {
                by_source
                    .entry(source)
                    .or_default()
                    .extend(crate::routing::request_keys(r));
            }
        }
        let st = state.clone();
        let missing = exec
            .readers
            .run(move || {
                let mut out = Vec::new();
                for (source, keys) in by_source {
                    let keys = crate::cluster::migrate::unsettled(&st, &keys)?;
                    if !keys.is_empty() {
                        out.push((source, keys));
                    }
                }
                Ok::<_, String>(out)
            })
            .await
            .ok_or(Close::Gone)?;
        let why = match missing {
            Ok(m) if m.is_empty() => return Ok((session, Some(view))),
            Ok(_) if round >= PULL_ROUNDS => {
                "the slot kept moving while its keys were pulled".into()
            }
            Err(e) => e,
            Ok(missing) => {
                // The view is let go while the source answers: a topology
                // change must not wait on the network. The batch is routed
                // again afterwards, with the view current then.
                let sources: Vec<_> = missing
                    .into_iter()
                    .filter_map(|(source, keys)| Some((view.node(source)?.addr(), keys)))
                    .collect();
                drop(view);
                let (s, pulled) = pull(state, exec, node, session, sources).await?;
                session = s;
                view = node.view();
                for r in requests.iter_mut() {
                    r.reset_route();
                }
                match pulled {
                    Ok(()) => {
                        round += 1;
                        continue;
                    }
                    Err(e) => {
                        // Routed again to find the requests still waiting on
                        // the source.
                        let again =
                            crate::routing::route_batch(node, &view, node.lease_fresh(), requests);
                        refuse_pulls(requests, &again, &e);
                        return Ok((session, Some(view)));
                    }
                }
            }
        };
        refuse_pulls(requests, &pulls, &why);
        return Ok((session, Some(view)));
    }
}

/// Pull rounds per batch before its requests get `-TRYAGAIN`.
const PULL_ROUNDS: usize = 3;

/// Answers the requests `pulls` names with `-TRYAGAIN`, saying `why`.
fn refuse_pulls(requests: &mut VecDeque<Request>, pulls: &[(usize, usize)], why: &str) {
    tracing::warn!("tern serve: pulling keys from a slot's previous owner failed: {why}");
    for &(i, _) in pulls {
        if let Some(r) = requests.get_mut(i) {
            r.redirect = Some(Reply::Error(format!(
                "TRYAGAIN the slot's previous owner did not answer ({why}); retry"
            )));
            r.class = crate::exec::Class::Inline;
        }
    }
}

/// Fetches `sources`' keys (address, keys) from every source at once and
/// imports them through the committer.
async fn pull(
    state: &Arc<State>,
    exec: &Exec,
    node: &crate::cluster::ClusterNode,
    session: Session,
    sources: Vec<(String, Vec<Vec<u8>>)>,
) -> Result<(Session, Result<(), String>), Close> {
    let pw = &state.config.requirepass;
    let fetches = sources.into_iter().map(|(addr, keys)| async move {
        crate::cluster::migrate::fetch_from(node, &addr, pw, keys).await
    });
    let mut records = Vec::new();
    for r in futures::future::join_all(fetches).await {
        match r {
            Ok(r) => records.extend(r),
            Err(e) => return Ok((session, Err(e))),
        }
    }
    if records.is_empty() {
        return Ok((session, Ok(())));
    }
    node.counters
        .pulled_keys
        .fetch_add(records.len() as u64, std::sync::atomic::Ordering::Relaxed);
    let import = VecDeque::from([Request::new(crate::cluster::migrate::import_args(records))]);
    let JobDone {
        session, replies, ..
    } = exec
        .committer
        .run(state.clone(), session, import)
        .await
        .ok_or(Close::Gone)?;
    match replies.first() {
        Some(Reply::Error(e)) => Ok((session, Err(e.clone()))),
        _ => Ok((session, Ok(()))),
    }
}

/// Names the keys of the point reads at the front of `requests` for
/// read-ahead, when there are several: their lookups' cache misses then
/// overlap. Returns how many point reads there are (up to
/// [`MAPPED_BATCH`]), and the read-ahead, whose view they may share.
fn read_ahead<'s>(
    state: &'s State,
    requests: &VecDeque<Request>,
) -> (usize, Option<tern::ReadAhead<'s>>) {
    let reads = requests
        .iter()
        .take_while(|r| r.class == Class::PointRead && r.redirect.is_none());
    let n = reads.clone().take(MAPPED_BATCH).count();
    if n < 2 {
        return (n, None);
    }
    let keys = reads.flat_map(|r| {
        let spec = r.cmd.map(|i| &crate::commands::table::COMMANDS[i]);
        spec.into_iter()
            .flat_map(|s| crate::commands::key_positions(s, &r.args))
            .filter_map(|i| r.args.get(i).map(Vec::as_slice))
    });
    (n, Some(state.store.read_ahead(keys)))
}

/// Returns the requests a job did not run to the front of the queue.
fn put_back(requests: &mut VecDeque<Request>, rest: VecDeque<Request>) {
    for r in rest.into_iter().rev() {
        requests.push_front(r);
    }
}

/// Runs the reads at the front of `requests` on the read pool, as one job.
async fn read_on_pool(
    state: &Arc<State>,
    exec: &Exec,
    session: Session,
    requests: &mut VecDeque<Request>,
    ran: &mut Vec<Request>,
) -> Result<(Session, Vec<Reply>), Close> {
    let n = requests.iter().take_while(|r| r.class.reads()).count();
    let mut run: VecDeque<Request> = requests.drain(..n).collect();
    let mut done = std::mem::take(ran);
    let st = state.clone();
    let (session, rest, replies, done) = exec
        .readers
        .run(move || {
            let mut session = session;
            let mut clock = RunClock::start();
            let replies = {
                // The job's point reads share one view, as on the task.
                let (_, view) = read_ahead(&st, &run);
                run_bounded(
                    &mut run,
                    |req| {
                        Some(execute_in_run(
                            &st,
                            &mut session,
                            &req.args,
                            Access::Read {
                                view: view.as_ref().filter(|_| req.shares_view()),
                            },
                            &mut clock,
                        ))
                    },
                    &mut done,
                )
            };
            (session, run, replies, done)
        })
        .await
        .ok_or(Close::Gone)?;
    *ran = done;
    put_back(requests, rest);
    Ok((session, replies))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn reads_grow_while_they_fill_and_shrink_when_they_come_back_short() {
        let buffered = AtomicUsize::new(0);
        let limit = 1 << 30;
        let next = |chunk, n, room| next_chunk(chunk, n, room, &buffered, limit);
        // Full reads double it, up to the cap.
        assert_eq!(next(READ_CHUNK, READ_CHUNK, READ_CHUNK), 2 * READ_CHUNK);
        assert_eq!(
            next(MAX_READ_CHUNK, MAX_READ_CHUNK, MAX_READ_CHUNK),
            MAX_READ_CHUNK
        );
        // Reads at least half full keep it; shorter ones halve it, down to
        // the floor.
        assert_eq!(
            next(8 * READ_CHUNK, 5 * READ_CHUNK, 9 * READ_CHUNK),
            8 * READ_CHUNK
        );
        assert_eq!(next(8 * READ_CHUNK, 100, 9 * READ_CHUNK), 4 * READ_CHUNK);
        assert_eq!(next(READ_CHUNK, 0, READ_CHUNK), READ_CHUNK);
        // With the clients' buffers at half the limit or more, even a full
        // read halves it.
        buffered.store(limit / 2, Relaxed);
        assert_eq!(next(READ_CHUNK, READ_CHUNK, READ_CHUNK), READ_CHUNK);
        assert_eq!(
            next(8 * READ_CHUNK, 8 * READ_CHUNK, 8 * READ_CHUNK),
            4 * READ_CHUNK
        );
    }
}
