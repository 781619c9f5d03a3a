//! The offload service as separate processes: a `tern coordinator`, `tern
//! worker`s killed with SIGKILL or frozen with SIGSTOP mid-job, and a store
//! whose jobs go through them with local fallback off, so a remote failure
//! cannot hide behind a local run. Every write must survive and `tern
//! check` must pass. The daemons' Prometheus metrics must count what ran.
#![allow(clippy::unwrap_used)]

#[path = "../../tern-offload/tests/common/mod.rs"]
mod common;
mod procs;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_matches, check_clean, churn, setup, Model, Setup};
use procs::{etcd, free_port, Netns, Proc};
use tern::Db;
use tern_offload::proto::coordinator_client::CoordinatorClient;
use tern_offload::{GrpcRunner, RemoteExecutor};

/// Starts `tern coordinator` on a free port; returns it and its URL.
fn coordinator(lease_ms: u64) -> (Proc, String) {
    coordinator_at("127.0.0.1:0", lease_ms, None)
}

/// Starts `tern coordinator` on `listen`, keeping its jobs in the etcd at
/// `etcd` if given; returns it and its URL.
fn coordinator_at(listen: &str, lease_ms: u64, etcd: Option<&str>) -> (Proc, String) {
    coordinator_with(listen, lease_ms, etcd, &[])
}

/// [`coordinator_at`], with `extra` flags (a `--progress-timeout-s` among
/// them replaces the 20 s given otherwise).
fn coordinator_with(
    listen: &str,
    lease_ms: u64,
    etcd: Option<&str>,
    extra: &[&str],
) -> (Proc, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern"));
    cmd.args(["coordinator", "--listen", listen, "--lease-ms"])
        .arg(lease_ms.to_string())
        .args(extra);
    if !extra.contains(&"--progress-timeout-s") {
        cmd.args(["--progress-timeout-s", "20"]);
    }
    if let Some(e) = etcd {
        cmd.args(["--etcd", e]);
    }
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .split("listening on ")
        .nth(1)
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), url)
}

/// Starts `tern worker`, waiting `delay_ms` before committing each job,
/// and returns once it has registered (a job submitted before then would
/// find no worker).
fn worker(url: &str, tier: &str, scratch: &Path, name: &str, delay_ms: u64) -> Proc {
    worker_with(url, tier, scratch, name, delay_ms, &[])
}

/// [`worker`], with `extra` flags.
fn worker_with(
    url: &str,
    tier: &str,
    scratch: &Path,
    name: &str,
    delay_ms: u64,
    extra: &[&str],
) -> Proc {
    worker_in_env(url, tier, scratch, name, delay_ms, extra, &[])
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The status of the coordinator at `url`, or of the first of several
/// (comma-separated) that leads; `None` while none leads.
fn try_status(url: &str) -> Option<tern_offload::proto::StatusReply> {
    rt().block_on(async {
        for u in url.split(',') {
            let mut c = CoordinatorClient::connect(u.to_string()).await.unwrap();
            if let Ok(r) = c.status(tern_offload::proto::StatusRequest {}).await {
                return Some(r.into_inner());
            }
        }
        None
    })
}

fn status(url: &str) -> tern_offload::proto::StatusReply {
    try_status(url).unwrap_or_else(|| panic!("no coordinator at {url} leads"))
}

/// Waits until `f` holds for the coordinator's status.
fn wait_status(url: &str, what: &str, f: impl Fn(&tern_offload::proto::StatusReply) -> bool) {
    wait_until(what, || try_status(url).filter(|st| f(st)).map(|_| ()))
}

/// A store with auto compactions off, so the jobs that run are those a
/// test asks for; its compactions and GC go through the coordinator at
/// `url` (fallback on or off).
fn open(s: &Setup, url: &str, fallback: bool) -> (Arc<Db>, Arc<RemoteExecutor>) {
    let mut opts = common::opts();
    opts.disable_auto_compactions = true;
    let runner = Arc::new(GrpcRunner::new(url).unwrap());
    let (db, exec) = common::open_with(s, runner, fallback, opts);
    (Arc::new(db), exec)
}

/// Compacts everything on another thread.
fn compact_in_background(db: &Arc<Db>) -> std::thread::JoinHandle<tern::Result<()>> {
    let db = db.clone();
    std::thread::spawn(move || db.compact_range(None, None))
}

/// Waits (up to 30 s) for `p` to exit.
fn wait_exit(p: &mut Proc) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = p.0.try_wait().unwrap() {
            return st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the process kept running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn running_on(s: &tern_offload::proto::StatusReply, name: &str) -> bool {
    let Some(w) = s.workers.iter().find(|w| w.name == name) else {
        return false;
    };
    s.jobs
        .iter()
        .any(|j| j.state == "running" && j.worker_id == w.worker_id)
}

fn finish(s: &Setup, db: Arc<Db>, exec: &RemoteExecutor, model: &Model) {
    assert_matches(&db, model);
    assert!(exec.stats().remote_compactions.load(Relaxed) > 0);
    assert_eq!(exec.stats().local_jobs.load(Relaxed), 0, "fallback is off");
    db.close().unwrap();
    drop(db);
    check_clean(&s.dir);
    let db = Db::open(&s.dir, common::opts()).unwrap();
    assert_matches(&db, model);
}

#[test]
fn a_worker_killed_mid_job_loses_it_to_another_and_no_write_is_lost() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let (_coord, url) = coordinator(1000);
    let slow = worker(&url, &tier_url, &s.scratch, "slow", 5000);
    let (db, exec) = open(&s, &url, false);
    let model = churn(&db);
    let compacting = compact_in_background(&db);
    wait_status(&url, "a job running on the slow worker", |st| {
        running_on(st, "slow")
    });
    slow.signal("-KILL");
    let _fast = worker(&url, &tier_url, &s.scratch, "fast", 0);
    compacting.join().unwrap().unwrap();
    db.collect_garbage().unwrap();
    let st = status(&url);
    assert!(
        st.reassigned >= 1,
        "the killed worker's job was not reassigned: {st:?}"
    );
    finish(&s, db, &exec, &model);
}

#[test]
fn a_split_compactions_parts_run_on_two_workers_at_once() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let (_coord, url) = coordinator(1000);
    // Each worker runs one job at a time and holds it a while, so parts
    // handed out together must go to both.
    let _a = worker(&url, &tier_url, &s.scratch, "a", 1500);
    let _b = worker(&url, &tier_url, &s.scratch, "b", 1500);
    let mut opts = common::opts();
    opts.disable_auto_compactions = true;
    opts.settings.max_subcompactions = 2;
    opts.settings.target_file_size = 8 << 10;
    let runner = Arc::new(GrpcRunner::new(&url).unwrap());
    let (db, exec) = common::open_with(&s, runner, false, opts);
    let db = Arc::new(db);
    let model = churn(&db);
    let compacting = compact_in_background(&db);
    wait_status(&url, "parts running on both workers at once", |st| {
        running_on(st, "a") && running_on(st, "b")
    });
    compacting.join().unwrap().unwrap();
    let engine = db.stats();
    assert!(engine.subcompactions >= 2, "{engine}");
    assert_eq!(
        engine.remote_compactions,
        exec.stats().remote_compactions.load(Relaxed),
        "every part and whole job ran on a worker"
    );
    db.collect_garbage().unwrap();
    finish(&s, db, &exec, &model);
}

#[test]
fn a_frozen_worker_loses_its_job_and_abandons_it_when_thawed() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let (_coord, url) = coordinator(1000);
    let frozen = worker(&url, &tier_url, &s.scratch, "frozen", 3000);
    let (db, exec) = open(&s, &url, false);
    let model = churn(&db);
    let compacting = compact_in_background(&db);
    wait_status(&url, "a job running on the worker", |st| {
        running_on(st, "frozen")
    });
    frozen.signal("-STOP");
    let _other = worker(&url, &tier_url, &s.scratch, "other", 0);
    compacting.join().unwrap().unwrap();
    // Thawed, the frozen worker finds it lost its lease: it registers
    // again and is told to abandon its stale attempt (or, had it committed
    // first, its result would be refused: see the queue's tests). The
    // store installed the other worker's attempt only.
    frozen.signal("-CONT");
    wait_status(&url, "the thawed worker to register again, idle", |st| {
        st.workers.iter().any(|w| w.name == "frozen")
            && st.jobs.iter().all(|j| j.state != "running")
    });
    let st = status(&url);
    assert!(st.reassigned >= 1, "{st:?}");
    assert_eq!(st.failed, 0, "{st:?}");
    db.collect_garbage().unwrap();
    finish(&s, db, &exec, &model);
}

#[test]
fn a_coordinator_killed_mid_queue_is_replaced_from_etcd_and_the_job_completes() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let Some((_etcd, etcd_url)) = etcd(&s.dir.with_file_name("etcd")) else {
        return;
    };
    let listen = format!("127.0.0.1:{}", free_port());
    let (first, url) = coordinator_at(&listen, 1000, Some(&etcd_url));
    let _worker = worker(&url, &tier_url, &s.scratch, "slow", 2000);
    let (db, exec) = open(&s, &url, false);
    let model = churn(&db);
    let compacting = compact_in_background(&db);
    wait_status(&url, "a job running", |st| running_on(st, "slow"));
    first.signal("-KILL");
    drop(first);
    // The replacement waits out the dead one's leadership, restores the
    // queue from etcd, and the job runs again as a new attempt.
    let metrics = format!("127.0.0.1:{}", free_port());
    let (_second, url2) = coordinator_with(
        &listen,
        1000,
        Some(&etcd_url),
        &["--metrics-bind", &metrics],
    );
    assert_eq!(url, url2);
    compacting.join().unwrap().unwrap();
    let m = scrape(&metrics);
    assert_eq!(sample(&m, "tern_coordinator_leader"), 1.0, "{m}");
    assert!(
        sample(&m, "tern_coordinator_jobs_restored_total") >= 1.0,
        "{m}"
    );
    finish(&s, db, &exec, &model);
}

#[test]
fn a_standby_takes_over_from_a_frozen_leader_and_the_job_completes() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let Some((_etcd, etcd_url)) = etcd(&s.dir.with_file_name("etcd")) else {
        return;
    };
    let (mut leader, url1) = coordinator_at("127.0.0.1:0", 1000, Some(&etcd_url));
    wait_status(&url1, "the first coordinator to lead", |_| true);
    let (_standby, url2) = coordinator_at("127.0.0.1:0", 1000, Some(&etcd_url));
    // Workers and the store know both; the standby answers "unavailable"
    // until it leads, so they stay with the leader.
    let both = format!("{url1},{url2}");
    // Before it leads, the standby answers only "unavailable".
    let refusal = rt().block_on(async {
        let mut c = CoordinatorClient::connect(url2.clone()).await.unwrap();
        let e = c
            .status(tern_offload::proto::StatusRequest {})
            .await
            .unwrap_err();
        format!("{:?}: {}", e.code(), e.message())
    });
    assert!(
        refusal.starts_with("Unavailable") && refusal.contains("stands by"),
        "{refusal}"
    );
    let _w = worker(&both, &tier_url, &s.scratch, "w", 3000);
    let _v = worker(&both, &tier_url, &s.scratch, "v", 3000);
    let (db, exec) = open(&s, &both, false);
    let model = churn(&db);
    let compacting = compact_in_background(&db);
    wait_status(&url1, "a job running on a worker of the leader", |st| {
        running_on(st, "w") || running_on(st, "v")
    });
    // Frozen, the leader keeps its port but answers nothing and stops
    // renewing its etcd lease: the standby takes the leader key, restores
    // the queue (the running job as a new attempt), and the worker and the
    // store move on to it once their requests to the leader time out.
    leader.signal("-STOP");
    compacting.join().unwrap().unwrap();
    // Both workers found the new leader, each under an id of its own.
    wait_status(&url2, "both workers registered with the new leader", |st| {
        st.workers.len() == 2
    });
    let st = status(&url2);
    assert!(
        st.jobs.iter().any(|j| j.state == "done" && j.attempt >= 2),
        "the job did not complete as a new attempt under the standby: {st:?}"
    );
    // Thawed, the old leader finds its lease gone and stops without
    // writing anything (every write compares the leader key).
    leader.signal("-CONT");
    let exit = wait_exit(&mut leader);
    assert!(!exit.success(), "the deposed leader kept running: {exit}");
    db.collect_garbage().unwrap();
    finish(&s, db, &exec, &model);
}

/// A leader stopped with SIGTERM gives up its lease, so its standby leads
/// at once instead of after the lease's time to live (a minute here, longer
/// than any wait below).
#[test]
fn a_leader_stopped_cleanly_hands_over_to_its_standby_at_once() {
    let s = setup();
    let Some((_etcd, etcd_url)) = etcd(&s.dir.with_file_name("etcd")) else {
        return;
    };
    let (mut leader, url1) = coordinator_at("127.0.0.1:0", 20_000, Some(&etcd_url));
    wait_status(&url1, "the first coordinator to lead", |_| true);
    let (_standby, url2) = coordinator_at("127.0.0.1:0", 20_000, Some(&etcd_url));
    assert!(
        try_status(&url2).is_none(),
        "the standby answers before it leads"
    );
    leader.signal("-TERM");
    let exit = wait_exit(&mut leader);
    assert!(exit.success(), "a clean stop: {exit}");
    wait_status(&url2, "the standby to lead", |_| true);
}

#[test]
fn with_etcd_unreachable_the_coordinator_stops_and_the_store_runs_jobs_itself() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let Some((etcd, etcd_url)) = etcd(&s.dir.with_file_name("etcd")) else {
        return;
    };
    let (mut coord, url) = coordinator_at("127.0.0.1:0", 1000, Some(&etcd_url));
    let _worker = worker(&url, &tier_url, &s.scratch, "w", 0);
    let (db, exec) = open(&s, &url, true);
    let model = churn(&db);
    etcd.signal("-KILL");
    // Without etcd the coordinator cannot keep its leadership: it stops
    // rather than act on state it cannot record.
    assert!(!wait_exit(&mut coord).success());
    db.compact_range(None, None).unwrap();
    db.collect_garbage().unwrap();
    let st = exec.stats();
    assert!(st.local_jobs.load(Relaxed) >= 1, "nothing ran locally");
    assert!(st.fallback_remote.load(Relaxed) >= 1);
    assert_matches(&db, &model);
    db.close().unwrap();
    drop(db);
    check_clean(&s.dir);
}

#[test]
fn a_worker_on_another_host_cut_off_mid_job_loses_it_and_no_write_is_lost() {
    let Some(ns) = Netns::new() else { return };
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let port = free_port();
    let (_coord, _) = coordinator_at(&format!("0.0.0.0:{port}"), 1000, None);
    let url = format!("http://127.0.0.1:{port}");
    let remote_url = format!("http://{}:{port}", ns.host_ip);
    // The remote worker runs in the namespace and reaches the coordinator
    // over the veth link only; the shared tier is a directory both see.
    let remote = Proc(
        Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(env!("CARGO_BIN_EXE_tern"))
            .args([
                "worker",
                "--coordinator",
                &remote_url,
                "--shared",
                &tier_url,
            ])
            .args(["--name", "remote", "--commit-delay-ms", "3000", "--scratch"])
            .arg(s.scratch.join("remote"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_status(&url, "the remote worker to register", |st| {
        st.workers.iter().any(|w| w.name == "remote")
    });
    let (db, exec) = open(&s, &url, false);
    let model = churn(&db);
    let compacting = compact_in_background(&db);
    wait_status(&url, "a job running on the remote worker", |st| {
        running_on(st, "remote")
    });
    ns.link(false);
    let _local = worker(&url, &tier_url, &s.scratch, "local", 0);
    compacting.join().unwrap().unwrap();
    let st = status(&url);
    assert!(st.reassigned >= 1, "{st:?}");
    // The link comes back: the remote worker re-registers and abandons
    // the attempt it lost.
    ns.link(true);
    wait_status(&url, "the remote worker to come back", |st| {
        st.workers.iter().any(|w| w.name == "remote")
    });
    drop(remote);
    finish(&s, db, &exec, &model);
}

#[test]
fn a_worker_told_to_stop_finishes_its_job_first() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let (_coord, url) = coordinator(1000);
    let mut w = worker(&url, &tier_url, &s.scratch, "leaving", 1500);
    let (db, exec) = open(&s, &url, false);
    let model = churn(&db);
    let compacting = compact_in_background(&db);
    wait_status(&url, "a job running", |st| running_on(st, "leaving"));
    // The rest of the compaction needs a worker: one is there before the
    // first leaves, so no job finds none.
    let _next = worker(&url, &tier_url, &s.scratch, "next", 0);
    w.signal("-TERM");
    // It takes nothing new, finishes the job it has, and exits cleanly.
    let exit = wait_exit(&mut w);
    assert!(exit.success(), "{exit:?}");
    let st = status(&url);
    assert_eq!(
        st.reassigned, 0,
        "the job was finished, not abandoned: {st:?}"
    );
    assert!(st.done >= 1, "{st:?}");
    compacting.join().unwrap().unwrap();
    finish(&s, db, &exec, &model);
}

/// GETs `/metrics` from `addr` over a plain TCP connection; returns the
/// body after checking the status and the content type.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .unwrap();
    let mut response = String::new();
    sock.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    body.to_string()
}

/// The value of `series` (a name and its labels, as exported) in `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn the_coordinator_and_its_workers_export_what_ran_as_prometheus_metrics() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let coord_metrics = format!("127.0.0.1:{}", free_port());
    let (_coord, url) = coordinator_with(
        "127.0.0.1:0",
        1000,
        None,
        &["--metrics-bind", &coord_metrics],
    );
    let worker_metrics: Vec<String> = (0..2)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let _workers: Vec<Proc> = worker_metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let name = format!("metered-{i}");
            worker_with(
                &url,
                &tier_url,
                &s.scratch,
                &name,
                0,
                &["--metrics-bind", m],
            )
        })
        .collect();
    let (db, exec) = open(&s, &url, false);
    let model = churn(&db);
    db.compact_range(None, None).unwrap();
    db.collect_garbage().unwrap();
    // Every job has been awaited done by the store, and a worker counts an
    // attempt before it reports it: nothing is left to wait for.
    let stats = exec.stats();
    let (compactions, gcs) = (
        stats.remote_compactions.load(Relaxed) as f64,
        stats.remote_gcs.load(Relaxed) as f64,
    );
    let remote = stats.remote_jobs() as f64;

    let c = scrape(&coord_metrics);
    assert!(
        c.contains("# TYPE tern_coordinator_jobs_done_total counter\n"),
        "{c}"
    );
    assert!(
        c.contains("# TYPE tern_coordinator_job_seconds histogram\n"),
        "{c}"
    );
    assert!(
        !c.contains("tern_coordinator_leader"),
        "no etcd, no leader gauge: {c}"
    );
    let done = sample(&c, "tern_coordinator_jobs_done_total");
    assert!(done >= 1.0, "{c}");
    assert_eq!(done, remote, "the store installed every job done: {c}");
    assert_eq!(
        sample(&c, "tern_coordinator_jobs_submitted_total"),
        done,
        "{c}"
    );
    assert_eq!(
        sample(&c, "tern_coordinator_attempts_dispatched_total"),
        done,
        "{c}"
    );
    for cause in ["attempts_exhausted", "no_worker_left"] {
        let series = format!("tern_coordinator_jobs_failed_total{{cause=\"{cause}\"}}");
        assert_eq!(sample(&c, &series), 0.0, "{c}");
    }
    let job_count = |kind: &str| {
        let n = sample(
            &c,
            &format!("tern_coordinator_job_seconds_count{{kind=\"{kind}\"}}"),
        );
        let inf = format!("tern_coordinator_job_seconds_bucket{{kind=\"{kind}\",le=\"+Inf\"}}");
        assert_eq!(sample(&c, &inf), n, "{c}");
        n
    };
    assert_eq!(job_count("compaction"), compactions, "{c}");
    assert_eq!(job_count("gc"), gcs, "{c}");
    assert_eq!(job_count("compaction") + job_count("gc"), done, "{c}");
    for kind in ["compaction", "gc"] {
        let wait = format!("tern_coordinator_queue_wait_seconds_count{{kind=\"{kind}\"}}");
        assert_eq!(sample(&c, &wait), job_count(kind), "one wait per job: {c}");
        for gauge in ["queued", "running"] {
            let series = format!("tern_coordinator_{gauge}_jobs{{kind=\"{kind}\"}}");
            assert_eq!(sample(&c, &series), 0.0, "{c}");
        }
    }
    assert_eq!(sample(&c, "tern_coordinator_workers"), 2.0, "{c}");
    assert_eq!(sample(&c, "tern_coordinator_worker_slots"), 2.0, "{c}");
    assert_eq!(sample(&c, "tern_coordinator_worker_free_slots"), 2.0, "{c}");

    let (mut ok, mut seconds, mut downloaded, mut uploaded) = (0.0, 0.0, 0.0, 0.0);
    for m in &worker_metrics {
        let w = scrape(m);
        assert!(
            w.contains("# TYPE tern_worker_attempts_total counter\n"),
            "{w}"
        );
        assert_eq!(sample(&w, "tern_worker_slots"), 1.0, "{w}");
        assert_eq!(sample(&w, "tern_worker_registered"), 1.0, "{w}");
        assert_eq!(sample(&w, "tern_worker_running_attempts"), 0.0, "{w}");
        assert!(
            sample(&w, "tern_worker_last_poll_age_seconds").is_finite(),
            "{w}"
        );
        for outcome in ["failed", "abandoned"] {
            let series = format!("tern_worker_attempts_total{{outcome=\"{outcome}\"}}");
            assert_eq!(sample(&w, &series), 0.0, "{w}");
        }
        ok += sample(&w, "tern_worker_attempts_total{outcome=\"ok\"}");
        for kind in ["compaction", "gc"] {
            seconds += sample(
                &w,
                &format!("tern_worker_job_seconds_count{{kind=\"{kind}\"}}"),
            );
        }
        downloaded += sample(&w, "tern_worker_downloaded_bytes_total");
        uploaded += sample(&w, "tern_worker_uploaded_bytes_total");
    }
    assert_eq!(
        ok, done,
        "every job done was one attempt committed by a worker"
    );
    assert_eq!(seconds, done);
    assert!(
        downloaded > 0.0 && uploaded > 0.0,
        "{downloaded} {uploaded}"
    );
    finish(&s, db, &exec, &model);
}

/// [`worker_with`], with `env` added to the worker's environment (an S3
/// tier's `AWS_*` settings).
fn worker_in_env(
    url: &str,
    tier: &str,
    scratch: &Path,
    name: &str,
    delay_ms: u64,
    extra: &[&str],
    env: &[(String, String)],
) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args([
            "worker",
            "--coordinator",
            url,
            "--shared",
            tier,
            "--name",
            name,
        ])
        .arg("--scratch")
        .arg(scratch.join(name))
        .args(["--commit-delay-ms", &delay_ms.to_string()])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait_status(url, "the worker to register", |st| {
        st.workers.iter().any(|w| w.name == name)
    });
    p
}

/// Waits (up to 30 s) until `f` returns something; returns it.
fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `f` finds something in the coordinator's status; returns it.
fn wait_for<T>(
    url: &str,
    what: &str,
    f: impl Fn(&tern_offload::proto::StatusReply) -> Option<T>,
) -> T {
    wait_until(what, || try_status(url).and_then(|st| f(&st)))
}

#[test]
fn a_worker_stuck_on_a_frozen_s3_tier_is_caught_by_the_progress_timeout() {
    let Some((moto, port)) = common::moto() else {
        return;
    };
    let s = common::setup_s3(port);
    let tier_url = s.tier.url().to_string();
    let coord_metrics = format!("127.0.0.1:{}", free_port());
    // The lease (1 s) is far shorter than the progress timeout (3 s): a
    // worker that stopped polling would lose its job to the lease first.
    let (_coord, url) = coordinator_with(
        "127.0.0.1:0",
        1000,
        None,
        &[
            "--progress-timeout-s",
            "3",
            "--metrics-bind",
            &coord_metrics,
        ],
    );
    let env = common::moto_env(port);
    let names = ["s3-a", "s3-b"];
    let worker_metrics: Vec<String> = names
        .iter()
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let _workers: Vec<Proc> = names
        .iter()
        .zip(&worker_metrics)
        .map(|(name, m)| {
            worker_in_env(
                &url,
                &tier_url,
                &s.scratch,
                name,
                0,
                &["--metrics-bind", m],
                &env,
            )
        })
        .collect();
    let (db, exec) = open(&s, &url, false);
    let model = churn(&db);
    // Every input is in the bucket before the server freezes, so the store
    // submits the job without waiting on S3: only the worker does.
    exec.wait_for_uploads();
    moto.signal("-STOP");
    let compacting = compact_in_background(&db);
    let stuck = wait_for(&url, "a worker to take the job", |st| {
        let j = st.jobs.iter().find(|j| j.state == "running")?;
        let w = st.workers.iter().find(|w| w.worker_id == j.worker_id)?;
        Some(w.name.clone())
    });
    // Its download waits on the frozen server while the worker keeps
    // polling: its lease stays alive, and only its progress, standing
    // still, gives it away.
    wait_status(&url, "the stuck attempt to be reassigned", |st| {
        st.reassigned >= 1
    });
    let st = status(&url);
    for name in names {
        assert!(
            st.workers.iter().any(|w| w.name == name),
            "worker {name} was dropped: the lease, not the progress timeout, ended the attempt: {st:?}"
        );
    }
    let no_progress = r#"tern_coordinator_attempts_reassigned_total{cause="no_progress"}"#;
    let lease_expired = r#"tern_coordinator_attempts_reassigned_total{cause="lease_expired"}"#;
    let c = scrape(&coord_metrics);
    assert!(sample(&c, no_progress) >= 1.0, "{c}");
    assert_eq!(sample(&c, lease_expired), 0.0, "{c}");
    // What becomes of the stuck attempt: the coordinator cancels it, and at
    // its next poll the worker aborts the attempt's task (dropping the GET
    // still waiting on the frozen server) and removes its scratch
    // directory. Left alone, object_store's client would have waited out
    // its request timeout (30 s) and retried (up to 10 times, within 3
    // minutes), the worker keeping its lease all the while.
    let stuck_metrics = &worker_metrics[names.iter().position(|n| *n == stuck).unwrap()];
    let abandoned = r#"tern_worker_attempts_total{outcome="abandoned"}"#;
    wait_until("the stuck worker to abandon its attempt", || {
        (sample(&scrape(stuck_metrics), abandoned) >= 1.0).then_some(())
    });
    moto.signal("-CONT");
    // The job runs again as a new attempt (on either worker) once the
    // server answers.
    compacting.join().unwrap().unwrap();
    db.collect_garbage().unwrap();
    let c = scrape(&coord_metrics);
    assert_eq!(sample(&c, lease_expired), 0.0, "{c}");
    for cause in ["attempts_exhausted", "no_worker_left"] {
        let series = format!("tern_coordinator_jobs_failed_total{{cause=\"{cause}\"}}");
        assert_eq!(sample(&c, &series), 0.0, "{c}");
    }
    for m in &worker_metrics {
        let w = scrape(m);
        assert_eq!(
            sample(&w, "tern_worker_registrations_total"),
            1.0,
            "a worker registered again: it had lost its lease: {w}"
        );
    }
    finish(&s, db, &exec, &model);
}

#[test]
fn a_corrupted_output_from_a_worker_process_is_refused_and_the_job_runs_again() {
    let s = setup();
    let tier_url = s.tier.url().to_string();
    let (_coord, url) = coordinator(1000);
    // It waits 2 s between uploading its outputs and committing them.
    let mut slow = worker(&url, &tier_url, &s.scratch, "slow", 2000);
    let (db, exec) = open(&s, &url, false);
    let model = churn(&db);
    let compacting = compact_in_background(&db);
    let (job, attempt) = wait_for(&url, "a compaction running", |st| {
        st.jobs
            .iter()
            .find(|j| j.state == "running" && j.kind == "compaction")
            .map(|j| (j.job_id.clone(), j.attempt))
    });
    let dir = s.tier.local_file(&format!("jobs/{job}/{attempt}")).unwrap();
    let table = dir.join("000000.sst");
    wait_until("the attempt's first output table in the tier", || {
        table.exists().then_some(())
    });
    // Flip a byte in place. In a local tier the object is a hard link to
    // the worker's scratch file; the worker has finished writing it. Had
    // the flip come before the worker read it for its checksum, the
    // table's own block checksums would still refuse it.
    {
        use std::io::{Read, Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&table)
            .unwrap();
        let mut b = [0u8; 1];
        f.seek(SeekFrom::Start(100)).unwrap();
        f.read_exact(&mut b).unwrap();
        f.seek(SeekFrom::Start(100)).unwrap();
        f.write_all(&[b[0] ^ 0x40]).unwrap();
        f.sync_all().unwrap();
    }
    assert!(
        !dir.join("result.pb").exists(),
        "the worker committed before its output was damaged"
    );
    let err = compacting
        .join()
        .unwrap()
        .expect_err("a compaction whose output was damaged must fail: fallback is off");
    assert!(err.to_string().contains("failed its checks"), "{err}");
    // A worker's bad output is an expected failure, not a bug in Tern.
    assert!(matches!(err, tern::Error::Remote(_)), "{err:?}");
    let st = exec.stats();
    assert_eq!(st.fallback_verify.load(Relaxed), 1, "{st:?}");
    assert_eq!(st.remote_compactions.load(Relaxed), 0, "{st:?}");
    assert_eq!(st.local_jobs.load(Relaxed), 0, "fallback is off: {st:?}");
    // The coordinator counted the attempt done: the refusal was the
    // store's, after it checked what it fetched.
    let cs = status(&url);
    assert!(
        cs.done >= 1 && cs.reassigned == 0 && cs.failed == 0,
        "{cs:?}"
    );
    // The next compaction goes to a worker again, one that commits at
    // once, and succeeds.
    let _fast = worker(&url, &tier_url, &s.scratch, "fast", 0);
    slow.signal("-TERM");
    let exit = wait_exit(&mut slow);
    assert!(exit.success(), "{exit:?}");
    db.compact_range(None, None).unwrap();
    db.collect_garbage().unwrap();
    assert_eq!(
        exec.stats().fallback_verify.load(Relaxed),
        1,
        "only the damaged output was refused"
    );
    finish(&s, db, &exec, &model);
}
