//! Cluster mode as separate processes: a private etcd, several `tern serve
//! --cluster` nodes and `tern cluster`, driven by the cluster clients
//! people use (`redis-cli -c`, redis-py's `RedisCluster`) and checked key
//! by key on the nodes themselves.
#![allow(clippy::unwrap_used)]

mod procs;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use procs::{etcd_on, free_port, Netns, Proc};

/// Seconds a killed node stays registered in etcd.
const NODE_TTL: u64 = 2;

/// One `tern serve --cluster` node.
struct Node {
    proc: Option<Proc>,
    port: u16,
    dir: PathBuf,
    /// The address it listens on.
    host: String,
    /// The network namespace it runs in (another "host"), if any.
    netns: Option<String>,
}

/// etcd and the nodes of one test cluster.
struct Cluster {
    etcd_url: String,
    /// etcd's URL from inside the namespace, if there is one.
    ns_etcd_url: Option<String>,
    nodes: Vec<Node>,
    root: tempfile::TempDir,
    _etcd: Proc,
}

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

/// Megabytes per second a migration copies in these tests: slow enough
/// to kill a node in the middle of it.
const MIGRATE_RATE_MB: f64 = 0.25;

/// Starts a node listening on `host:port` with its data in `dir`, inside
/// network namespace `netns` if given; returns once it serves.
fn start_node(etcd_url: &str, dir: &Path, host: &str, port: u16, netns: Option<&str>) -> Proc {
    start_node_at_rate(etcd_url, dir, host, port, netns, MIGRATE_RATE_MB)
}

/// [`start_node`] with migrations (copies, drops, cleanup) at `rate` MB/s.
fn start_node_at_rate(
    etcd_url: &str,
    dir: &Path,
    host: &str,
    port: u16,
    netns: Option<&str>,
    rate: f64,
) -> Proc {
    start_node_with(etcd_url, dir, host, port, netns, rate, "")
}

/// [`start_node_at_rate`] with `extra` lines at the end of the `[cluster]`
/// table (further tables may follow).
fn start_node_with(
    etcd_url: &str,
    dir: &Path,
    host: &str,
    port: u16,
    netns: Option<&str>,
    rate: f64,
    extra: &str,
) -> Proc {
    let cfg = dir.with_extension("toml");
    std::fs::write(
        &cfg,
        format!(
            "appendfsync = \"always\"\nmetrics-bind = \"off\"\n[cluster]\netcd = \"{etcd_url}\"\nnode-ttl-secs = {NODE_TTL}\nmigrate-rate-mb = {rate}\n{extra}"
        ),
    )
    .unwrap();
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_tern")]);
            c
        }
        None => tern(),
    };
    let mut child = cmd
        .args([
            "serve",
            "--bind",
            host,
            "--port",
            &port.to_string(),
            "--config",
        ])
        .arg(&cfg)
        .arg("--dir")
        .arg(dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("tern serve exited before it was ready:\n{seen}");
        };
        seen += &line;
        seen.push('\n');
        if line.contains("ready") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Proc(child)
}

impl Cluster {
    /// etcd and `n` running nodes; `None` in a partial run without etcd.
    fn start(n: usize) -> Option<Cluster> {
        Cluster::start_in(n, None)
    }

    /// [`Cluster::start`], with node 0 inside network namespace `ns`
    /// (another host, reached over its link).
    fn start_in(n: usize, ns: Option<&Netns>) -> Option<Cluster> {
        let root = tempfile::tempdir().unwrap();
        let extra: Vec<&str> = ns.iter().map(|n| n.host_ip.as_str()).collect();
        let (etcd_proc, etcd_url) = etcd_on(&root.path().join("etcd"), &extra)?;
        let port = etcd_url.rsplit(':').next().unwrap().to_string();
        let mut c = Cluster {
            ns_etcd_url: ns.map(|n| format!("http://{}:{port}", n.host_ip)),
            etcd_url,
            nodes: Vec::new(),
            root,
            _etcd: etcd_proc,
        };
        for i in 0..n {
            match ns.filter(|_| i == 0) {
                Some(ns) => c.add_at(&ns.ns_ip.clone(), Some(ns.name.clone())),
                None => c.add(),
            };
        }
        Some(c)
    }

    /// Starts one more node; returns its index.
    fn add(&mut self) -> usize {
        self.add_at("127.0.0.1", None)
    }

    /// Starts one more node with `extra` configuration (see
    /// [`start_node_with`]); returns its index.
    fn add_with(&mut self, extra: &str) -> usize {
        let i = self.nodes.len();
        let dir = self.root.path().join(format!("node{i}"));
        let port = free_port();
        let proc = start_node_with(
            &self.etcd_url,
            &dir,
            "127.0.0.1",
            port,
            None,
            MIGRATE_RATE_MB,
            extra,
        );
        self.nodes.push(Node {
            proc: Some(proc),
            port,
            dir,
            host: "127.0.0.1".to_string(),
            netns: None,
        });
        i
    }

    /// Starts one more node on `host`, in `netns` if given.
    fn add_at(&mut self, host: &str, netns: Option<String>) -> usize {
        let i = self.nodes.len();
        let dir = self.root.path().join(format!("node{i}"));
        let port = free_port();
        let url = match &netns {
            Some(_) => self.ns_etcd_url.clone().unwrap(),
            None => self.etcd_url.clone(),
        };
        let proc = start_node(&url, &dir, host, port, netns.as_deref());
        self.nodes.push(Node {
            proc: Some(proc),
            port,
            dir,
            host: host.to_string(),
            netns,
        });
        i
    }

    /// Runs `tern cluster <args> --etcd ...`; its standard output.
    fn admin(&self, args: &[&str]) -> String {
        let out = tern()
            .arg("cluster")
            .args(args)
            .args(["--etcd", &self.etcd_url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "tern cluster {args:?} failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    fn kill(&mut self, i: usize) {
        let p = self.nodes[i].proc.take().unwrap();
        p.signal("-KILL");
        drop(p);
    }

    fn restart(&mut self, i: usize) {
        let n = &self.nodes[i];
        let url = match &n.netns {
            Some(_) => self.ns_etcd_url.clone().unwrap(),
            None => self.etcd_url.clone(),
        };
        let p = start_node(&url, &n.dir, &n.host, n.port, n.netns.as_deref());
        self.nodes[i].proc = Some(p);
    }

    fn conn(&self, i: usize) -> redis::Connection {
        let n = &self.nodes[i];
        redis::Client::open(format!("redis://{}:{}/", n.host, n.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

/// `redis-cli -c -p <port> <args>`; its output, trimmed.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-c", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (apt-get install redis-tools)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `script` with Python; `None` (in a partial run) without redis-py.
fn python(script: &str, args: &[String]) -> Option<String> {
    tern_stress::python::run_redis_py(script, args, "redis.cluster", Duration::from_secs(300))
}

/// The slot of `key`, asked of node 0.
fn keyslot(c: &mut redis::Connection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(c)
        .unwrap()
}

/// Which node owns each slot, from `CLUSTER SLOTS` of node `i`: port by
/// slot.
fn slot_owners(c: &Cluster, i: usize) -> Vec<u16> {
    use redis::Value;
    let int = |v: &Value| match v {
        Value::Int(n) => *n as u16,
        v => panic!("not an integer: {v:?}"),
    };
    let ranges: Vec<Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut c.conn(i))
        .unwrap();
    let mut owners = vec![0u16; 16384];
    for r in ranges {
        let Value::Array(items) = r else {
            panic!("CLUSTER SLOTS entry is not an array: {r:?}")
        };
        let Value::Array(node) = &items[2] else {
            panic!("CLUSTER SLOTS node is not an array: {items:?}")
        };
        let port = int(&node[1]);
        for o in &mut owners[usize::from(int(&items[0]))..=usize::from(int(&items[1]))] {
            *o = port;
        }
    }
    owners
}

const REDIS_PY: &str = r#"
import sys
from redis.cluster import RedisCluster
rc = RedisCluster(host="127.0.0.1", port=int(sys.argv[1]))
n = int(sys.argv[2])
for i in range(n):
    rc.set(f"py:{i}", f"value-{i}")
p = rc.pipeline()
for i in range(n):
    p.incrby(f"py:counter:{i % 50}", 1)
p.execute()
bad = [i for i in range(n) if rc.get(f"py:{i}") != f"value-{i}".encode()]
assert not bad, f"lost {len(bad)} keys"
assert sum(int(rc.get(f"py:counter:{i}")) for i in range(50)) == n
tagged = rc.mset({"{user}:a": "1", "{user}:b": "2"})
assert rc.mget("{user}:a", "{user}:b") == [b"1", b"2"]
print("ok", len(rc.get_nodes()))
"#;

#[test]
fn cluster_clients_work_unchanged_against_three_nodes() {
    let Some(c) = Cluster::start(3) else { return };
    let out = c.admin(&["create", "--nodes", "3"]);
    assert!(out.contains("3 nodes, 16384 slots"), "{out}");

    // Every node tells the same story: all slots, three owners.
    let owners = slot_owners(&c, 0);
    for i in 1..3 {
        assert_eq!(slot_owners(&c, i), owners, "node {i} disagrees");
    }
    for n in &c.nodes {
        assert!(owners.contains(&n.port));
    }

    // redis-cli follows MOVED from any entry node.
    let keys: Vec<String> = (0..60).map(|i| format!("cli:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let entry = c.nodes[i % 3].port;
        assert_eq!(redis_cli(entry, &["set", k, &format!("v{i}")]), "OK");
    }
    for (i, k) in keys.iter().enumerate() {
        let entry = c.nodes[(i + 1) % 3].port;
        assert_eq!(redis_cli(entry, &["get", k]), format!("v{i}"));
    }

    // Each key lives on its owner only, and the others redirect to it.
    let mut c0 = c.conn(0);
    for k in &keys {
        let slot = keyslot(&mut c0, k);
        let owner = owners[usize::from(slot)];
        for (i, n) in c.nodes.iter().enumerate() {
            let mut conn = c.conn(i);
            let r: redis::RedisResult<Option<String>> = redis::cmd("GET").arg(k).query(&mut conn);
            let count: i64 = redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query(&mut conn)
                .unwrap();
            if n.port == owner {
                assert!(r.unwrap().is_some(), "{k} missing on its owner");
                assert!(count >= 1);
            } else {
                let e = r.unwrap_err();
                assert_eq!(e.code(), Some("MOVED"), "{e:?}");
                assert!(
                    e.to_string().contains(&format!("{slot} 127.0.0.1:{owner}")),
                    "{e}"
                );
                assert_eq!(count, 0, "{k}'s slot has keys on a non-owner");
            }
        }
    }
    // Keys of different slots in one command are refused; a hash tag keeps
    // them together.
    let e = redis::cmd("MSET")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query::<()>(&mut c0)
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e:?}");
    assert_eq!(
        redis_cli(c.nodes[0].port, &["mset", "{t}a", "1", "{t}b", "2"]),
        "OK"
    );

    // redis-py's RedisCluster: plain commands, a pipeline across nodes,
    // hash-tagged multi-key commands.
    if let Some(out) = python(REDIS_PY, &[c.nodes[1].port.to_string(), "2000".into()]) {
        assert_eq!(out.trim(), "ok 3");
        // Checked on the nodes, not through the client that wrote them.
        for i in (0..2000).step_by(97) {
            let k = format!("py:{i}");
            assert_eq!(
                redis_cli(c.nodes[2].port, &["get", &k]),
                format!("value-{i}")
            );
        }
    }
    let info = redis_cli(c.nodes[0].port, &["cluster", "info"]);
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_known_nodes:3"), "{info}");
}

#[test]
fn a_killed_node_shows_down_and_comes_back_with_its_id_and_keys() {
    let Some(mut c) = Cluster::start(3) else {
        return;
    };
    c.admin(&["create", "--nodes", "3"]);
    let id: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut c.conn(1))
        .unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    for k in &keys {
        assert_eq!(redis_cli(c.nodes[0].port, &["set", k, k]), "OK");
    }
    // Acknowledged with appendfsync always: a kill -9 loses nothing.
    c.kill(1);
    let deadline = Instant::now() + Duration::from_secs(NODE_TTL * 5 + 5);
    loop {
        let status = c.admin(&["status"]);
        let line = status
            .lines()
            .find(|l| l.starts_with(&id))
            .unwrap()
            .to_string();
        if line.contains(" down ") {
            break;
        }
        assert!(Instant::now() < deadline, "never shown down:\n{status}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let nodes = redis_cli(c.nodes[0].port, &["cluster", "nodes"]);
    let line = nodes.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(
        line.contains("fail") && line.contains("disconnected"),
        "{line}"
    );

    c.restart(1);
    let again: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut c.conn(1))
        .unwrap();
    assert_eq!(again, id, "a restarted node keeps its id");
    for k in &keys {
        assert_eq!(redis_cli(c.nodes[2].port, &["get", k]), *k, "{k} lost");
    }
    let status = c.admin(&["status"]);
    let line = status.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(line.contains(" up "), "{status}");
}

#[test]
fn an_added_node_joins_without_slots_and_redirects_everything() {
    let Some(mut c) = Cluster::start(2) else {
        return;
    };
    c.admin(&["create", "--nodes", "2"]);
    let i = c.add();
    let port = c.nodes[i].port;
    // Before it joins, the node follows the topology but owns nothing: it
    // redirects to the owners, and the members do not list it.
    let e = redis::cmd("GET")
        .arg("foo")
        .query::<Option<String>>(&mut c.conn(i))
        .unwrap_err();
    assert_eq!(e.code(), Some("MOVED"), "{e:?}");
    let nodes = redis_cli(c.nodes[0].port, &["cluster", "nodes"]);
    assert_eq!(nodes.lines().count(), 2, "{nodes}");
    let out = c.admin(&["add-node", &format!("127.0.0.1:{port}")]);
    assert!(out.contains("with no slots"), "{out}");
    let nodes = redis_cli(c.nodes[0].port, &["cluster", "nodes"]);
    assert_eq!(nodes.lines().count(), 3, "{nodes}");
    let e = redis::cmd("GET")
        .arg("foo")
        .query::<Option<String>>(&mut c.conn(i))
        .unwrap_err();
    assert_eq!(e.code(), Some("MOVED"), "{e:?}");
    assert_eq!(redis_cli(port, &["set", "foo", "bar"]), "OK");
    assert_eq!(redis_cli(port, &["get", "foo"]), "bar");
    // Creating the cluster again is refused.
    let out = tern()
        .args(["cluster", "create", "--etcd", &c.etcd_url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
}

/// A YCSB-style writer and reader through redis-py's `RedisCluster`: loads
/// `n` keys of 1 KiB, prints `ready`, then updates (60%) and reads (40%)
/// random keys until the stop file appears, checking every read against
/// the last acknowledged write (or a write whose outcome it never learned).
/// Writes its log (acknowledged values, unsure ones, error counts) as
/// JSON. `verify` mode reads every key with a fresh client and counts
/// those that do not hold an acknowledged (or unsure) value.
const LOAD_PY: &str = r#"
import json, os, random, sys, time
from redis.cluster import RedisCluster
from redis.exceptions import RedisError
mode, port, n, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rc = RedisCluster(host="127.0.0.1", port=port)
pad = "x" * 1000
if mode == "verify":
    st = json.load(open(log))
    acked, unsure = st["acked"], st["unsure"]
    bad = []
    for i in range(n):
        k = f"k{i}"
        got = rc.get(k)
        got = got.decode() if got is not None else None
        if got != acked.get(k) and got not in unsure.get(k, []):
            bad.append((k, got[:20] if got else got, (acked.get(k) or "")[:20]))
    print(json.dumps({"bad": len(bad), "examples": bad[:5]}))
    sys.exit(0)
stop = sys.argv[5]
acked, unsure = {}, {}
p = rc.pipeline()
for i in range(n):
    v = f"{i}-init-{pad}"
    p.set(f"k{i}", v)
    acked[f"k{i}"] = v
p.execute()
print("ready", flush=True)
ops = errors = bad_reads = 0
examples = []
lat = []
while not os.path.exists(stop):
    i = random.randrange(n)
    k = f"k{i}"
    t0 = time.monotonic()
    try:
        if random.random() < 0.6:
            v = f"{i}-{ops}-{pad}"
            unsure.setdefault(k, []).append(v)
            rc.set(k, v)
            acked[k] = v
            unsure.pop(k, None)
        else:
            got = rc.get(k)
            got = got.decode() if got is not None else None
            if got != acked.get(k) and got not in unsure.get(k, []):
                bad_reads += 1
                examples.append((k, (got or "")[:20], acked.get(k, "")[:20]))
    except RedisError as e:
        errors += 1
        if len(examples) < 10:
            examples.append(("error", str(e)[:120]))
    lat.append(time.monotonic() - t0)
    ops += 1
lat.sort()
p99 = lat[int(len(lat) * 0.99)] if lat else 0
json.dump({"acked": acked, "unsure": unsure, "ops": ops, "errors": errors,
           "bad_reads": bad_reads, "examples": examples, "p99_ms": p99 * 1000}, open(log, "w"))
"#;

/// Keys the scale-out tests load.
const LOAD_KEYS: usize = 4000;

/// What the load client reported.
#[derive(Debug)]
struct LoadReport {
    ops: u64,
    errors: u64,
    bad_reads: u64,
    p99_ms: f64,
    examples: String,
}

/// The load client, running.
struct Load {
    proc: Proc,
    log: PathBuf,
    stop: PathBuf,
}

impl Load {
    /// Starts the load through node `entry`; `None` without redis-py.
    fn start(c: &Cluster, entry: u16) -> Option<Load> {
        python("import sys", &[])?;
        let log = c.root.path().join("load.json");
        let stop = c.root.path().join("load.stop");
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(LOAD_PY)
            .args(["load", &entry.to_string(), &LOAD_KEYS.to_string()])
            .arg(&log)
            .arg(&stop)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the load client did not start");
        Some(Load {
            proc: Proc(child),
            log,
            stop,
        })
    }

    /// Stops the load and returns its report.
    fn finish(mut self) -> LoadReport {
        std::fs::write(&self.stop, b"").unwrap();
        let status = self.proc.0.wait().unwrap();
        assert!(status.success(), "the load client failed");
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&self.log).unwrap()).unwrap();
        LoadReport {
            ops: v["ops"].as_u64().unwrap(),
            errors: v["errors"].as_u64().unwrap(),
            bad_reads: v["bad_reads"].as_u64().unwrap(),
            p99_ms: v["p99_ms"].as_f64().unwrap(),
            examples: v["examples"].to_string(),
        }
    }
}

/// Reads every key through a fresh cluster client and checks it against
/// the load's log; returns the number of keys that lost their
/// acknowledged value.
fn verify(c: &Cluster, entry: u16, log: &Path) -> u64 {
    let out = python(
        LOAD_PY,
        &[
            "verify".into(),
            entry.to_string(),
            LOAD_KEYS.to_string(),
            log.display().to_string(),
        ],
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let bad = v["bad"].as_u64().unwrap();
    assert_eq!(
        bad, 0,
        "keys lost their acknowledged value: {}",
        v["examples"]
    );
    let _ = c;
    bad
}

/// Waits until no migration is under way.
fn wait_migrations_done(c: &Cluster, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let status = c.admin(&["status"]);
        if !status.contains("migrations:") {
            return;
        }
        assert!(Instant::now() < deadline, "migrations stuck:\n{status}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `tern cluster status` mentions `what`.
fn wait_status(c: &Cluster, what: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let status = c.admin(&["status"]);
        if status.contains(what) {
            return status;
        }
        assert!(Instant::now() < deadline, "never saw {what:?}:\n{status}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Keys stored on all nodes together.
fn total_keys(c: &Cluster) -> i64 {
    (0..c.nodes.len())
        .map(|i| redis::cmd("DBSIZE").query::<i64>(&mut c.conn(i)).unwrap())
        .sum()
}

/// Where a scale-out is disturbed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Disturb {
    Nothing,
    KillSource,
    KillTarget,
    KillAdmin,
    /// SIGSTOP the source before the move, SIGCONT once the target took
    /// its slots over without its acknowledgement.
    FreezeSource,
    /// Cut the link of a source on another host (a network namespace)
    /// mid-copy for three leases, then restore it.
    CutSource,
    /// With the source frozen (so the move stays in handoff), kill the
    /// target and restart it.
    KillTargetInHandoff,
    /// Freeze the source (the move stays in handoff), kill it, restart it.
    KillSourceInHandoff,
    /// Kill a source while it drops its copy, restart it.
    KillSourceWhileDropping,
}

/// The port of the source of a migration `status` shows in `state`.
fn source_in(status: &str, state: &str) -> Option<u16> {
    status
        .lines()
        .find(|l| l.contains(&format!(": {state};")))?
        .split(" slots ")
        .nth(1)?
        .split(' ')
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

/// Moves 10% of the slots of a three-node cluster to a fourth node while
/// the load runs, disturbed by `d`; then every acknowledged write must be
/// readable and every key stored exactly once.
fn scale_out_under_load(d: Disturb) {
    let ns = match d {
        Disturb::CutSource => match Netns::new() {
            Some(ns) => Some(ns),
            None => return,
        },
        _ => None,
    };
    let Some(mut c) = Cluster::start_in(3, ns.as_ref()) else {
        return;
    };
    c.admin(&["create", "--nodes", "3"]);
    c.add();
    let entry = c.nodes[1].port;
    let Some(load) = Load::start(&c, entry) else {
        return;
    };
    let to = format!("127.0.0.1:{}", c.nodes[3].port);
    let frozen = matches!(
        d,
        Disturb::FreezeSource | Disturb::KillTargetInHandoff | Disturb::KillSourceInHandoff
    );
    if frozen {
        c.nodes[0].proc.as_ref().unwrap().signal("-STOP");
    }
    let mut admin = tern()
        .args([
            "cluster",
            "scale-out",
            "--slots",
            "1638",
            "--to",
            &to,
            "--etcd",
        ])
        .arg(&c.etcd_url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(admin.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("moving 1638 slots"), "{first}");
    match d {
        Disturb::Nothing => {}
        Disturb::KillAdmin => {
            admin.kill().unwrap();
        }
        Disturb::FreezeSource => {}
        Disturb::KillTargetInHandoff => {
            wait_status(&c, "handoff;", Duration::from_secs(20));
            c.kill(3);
            std::thread::sleep(Duration::from_millis(1000));
            c.restart(3);
        }
        Disturb::KillSourceInHandoff => {
            wait_status(&c, "handoff;", Duration::from_secs(20));
            c.kill(0);
            std::thread::sleep(Duration::from_millis(500));
        }
        Disturb::KillSourceWhileDropping => {
            let status = wait_status(&c, "dropping;", Duration::from_secs(60));
            let port = source_in(&status, "dropping").unwrap();
            let i = c.nodes.iter().position(|n| n.port == port).unwrap();
            c.kill(i);
            std::thread::sleep(Duration::from_millis(1000));
            c.restart(i);
        }
        Disturb::CutSource => {
            wait_status(&c, "pulling;", Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(300));
            let ns = ns.as_ref().unwrap();
            ns.link(false);
            std::thread::sleep(Duration::from_secs(NODE_TTL * 3));
            ns.link(true);
        }
        Disturb::KillSource | Disturb::KillTarget => {
            wait_status(&c, "pulling;", Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(300));
            let victim = if d == Disturb::KillSource { 0 } else { 3 };
            c.kill(victim);
            std::thread::sleep(Duration::from_millis(1500));
            c.restart(victim);
        }
    }
    if frozen {
        // The target waits for the frozen source's registration to lapse
        // (and a lease more) before it serves the slots.
        let frozen = redis_cli(c.nodes[1].port, &["cluster", "nodes"]);
        let id = frozen
            .lines()
            .find(|l| l.contains(&format!(":{}@", c.nodes[0].port)))
            .and_then(|l| l.split(' ').next())
            .unwrap()
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(NODE_TTL * 6 + 10);
        loop {
            let status = c.admin(&["status"]);
            let from_frozen = status
                .lines()
                .find(|l| l.contains(&format!("127.0.0.1:{} ->", c.nodes[0].port)))
                .unwrap_or("")
                .to_string();
            if from_frozen.contains("pulling") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "never took over from {id}:\n{status}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        match d {
            Disturb::KillSourceInHandoff => c.restart(0),
            _ => c.nodes[0].proc.as_ref().unwrap().signal("-CONT"),
        }
    }
    wait_migrations_done(&c, Duration::from_secs(90));
    if d != Disturb::KillAdmin {
        assert!(
            admin.wait().unwrap().success(),
            "tern cluster scale-out failed"
        );
    }
    let _ = admin.wait();
    let log = load.log.clone();
    let report = load.finish();
    eprintln!(
        "{d:?}: {} ops, {} errors, p99 {:.1} ms",
        report.ops, report.errors, report.p99_ms
    );
    assert!(report.ops > 100, "the load hardly ran: {report:?}");
    assert_eq!(
        report.bad_reads, 0,
        "stale or lost reads: {}",
        report.examples
    );
    if matches!(d, Disturb::Nothing | Disturb::KillAdmin) {
        assert_eq!(report.errors, 0, "requests failed: {}", report.examples);
    }
    verify(&c, c.nodes[2].port, &log);
    // Every key once: the sources dropped what moved.
    assert_eq!(total_keys(&c), LOAD_KEYS as i64);
    if matches!(d, Disturb::Nothing | Disturb::KillAdmin) {
        // The bulk copy came as files the target ingested, not key by key.
        assert!(cluster_info(&c, 3, "tern_migration_ingested_files") > 0);
        assert!(cluster_info(&c, 3, "tern_migration_ingested_keys") > 0);
    }
    let status = c.admin(&["status"]);
    let line = status
        .lines()
        .find(|l| l.contains(&to))
        .unwrap()
        .to_string();
    assert!(line.contains(" 1638 "), "{status}");
}

#[test]
fn scale_out_under_load_loses_no_acknowledged_write() {
    scale_out_under_load(Disturb::Nothing);
}

#[test]
fn scale_out_survives_the_admin_killed_after_it_started() {
    scale_out_under_load(Disturb::KillAdmin);
}

#[test]
fn scale_out_survives_the_source_killed_mid_copy() {
    scale_out_under_load(Disturb::KillSource);
}

#[test]
fn scale_out_fences_a_frozen_source_and_finishes_once_it_thaws() {
    scale_out_under_load(Disturb::FreezeSource);
}

#[test]
fn scale_out_survives_the_sources_link_cut_mid_copy() {
    scale_out_under_load(Disturb::CutSource);
}

#[test]
fn scale_out_survives_the_target_killed_in_handoff() {
    scale_out_under_load(Disturb::KillTargetInHandoff);
}

#[test]
fn scale_out_survives_the_source_killed_in_handoff() {
    scale_out_under_load(Disturb::KillSourceInHandoff);
}

#[test]
fn scale_out_survives_a_source_killed_while_dropping() {
    scale_out_under_load(Disturb::KillSourceWhileDropping);
}

#[test]
fn scale_out_survives_the_target_killed_mid_copy() {
    scale_out_under_load(Disturb::KillTarget);
}

/// A created cluster of three nodes, a fourth running outside it (its
/// index), and a `tern-client` connected to the cluster.
fn three_and_a_spare() -> Option<(
    Cluster,
    usize,
    tokio::runtime::Runtime,
    tern_client::ClusterClient,
)> {
    let mut c = Cluster::start(3)?;
    c.admin(&["create", "--nodes", "3"]);
    let spare = c.add();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seed = format!("127.0.0.1:{}", c.nodes[0].port);
    let client = rt
        .block_on(tern_client::ClusterClient::connect(&[&seed]))
        .unwrap();
    Some((c, spare, rt, client))
}

/// `tern-client` through a scale-out: pipelined batches that span every
/// node keep succeeding while slots move (redirects and retries are the
/// client's business), and every acknowledged write reads back.
#[test]
fn tern_client_batches_ride_through_a_scale_out() {
    let Some((c, added, rt, client)) = three_and_a_spare() else {
        return;
    };
    let to = format!("127.0.0.1:{}", c.nodes[added].port);
    let set = |k: &str, v: &str| {
        vec![
            b"SET".to_vec(),
            k.as_bytes().to_vec(),
            v.as_bytes().to_vec(),
        ]
    };
    let get = |k: &str| vec![b"GET".to_vec(), k.as_bytes().to_vec()];
    let n = 3000;
    let pad = "x".repeat(1000);
    let mut model: Vec<String> = (0..n).map(|i| format!("init-{i}-{pad}")).collect();
    let load: Vec<_> = (0..n).map(|i| set(&format!("t{i}"), &model[i])).collect();
    for r in rt.block_on(client.batch(load)).unwrap() {
        assert_eq!(r, tern_client::Reply::Simple("OK".into()));
    }
    let admin = tern()
        .args([
            "cluster",
            "scale-out",
            "--slots",
            "1638",
            "--to",
            &to,
            "--no-wait",
            "--etcd",
        ])
        .arg(&c.etcd_url)
        .output()
        .unwrap();
    assert!(admin.status.success());
    let mut round = 0u64;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        // 64 writes and 64 reads per batch, over all nodes.
        // The order of commands on one key is kept, so each read must
        // see the writes before it in the batch.
        let mut cmds = Vec::new();
        let mut expect = Vec::new();
        for j in 0..64 {
            let i = ((round * 7919 + j * 104729) % n as u64) as usize;
            model[i] = format!("r{round}-{i}-{pad}");
            cmds.push(set(&format!("t{i}"), &model[i]));
            let r = ((round * 31 + j * 613) % n as u64) as usize;
            cmds.push(get(&format!("t{r}")));
            expect.push((r, model[r].clone()));
        }
        let replies = rt.block_on(client.batch(cmds)).unwrap();
        for (pair, (r, want)) in replies.chunks(2).zip(&expect) {
            assert_eq!(
                pair[0],
                tern_client::Reply::Simple("OK".into()),
                "round {round}"
            );
            let want = tern_client::Reply::Bulk(want.clone().into_bytes());
            assert_eq!(pair[1], want, "round {round}, key t{r}");
        }
        round += 1;
        let status = c.admin(&["status"]);
        if !status.contains("migrations:") && round > 5 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the scale-out did not finish:\n{status}"
        );
    }
    let (moved, retries) = client.counters();
    eprintln!("{round} batches, {moved} redirects followed, {retries} retries");
    assert!(moved > 0, "the client never followed a redirect");
    let all: Vec<_> = (0..n).map(|i| get(&format!("t{i}"))).collect();
    let replies = rt.block_on(client.batch(all)).unwrap();
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(
            r,
            tern_client::Reply::Bulk(model[i].clone().into_bytes()),
            "t{i}"
        );
    }
    assert_eq!(total_keys(&c), n as i64);
}

/// A client that pipelines large replies and never reads them must not
/// hold up a topology change: the node routes the rest of its requests
/// again after each write instead of keeping the old view.
#[test]
fn a_client_that_never_reads_does_not_hold_up_a_topology_change() {
    use std::io::Write;
    let Some(mut c) = Cluster::start(2) else {
        return;
    };
    c.admin(&["create", "--nodes", "2"]);
    let port = c.nodes[0].port;
    // A key this node owns, with a 512 KiB value.
    let mut conn = c.conn(0);
    let key = (0..)
        .map(|i| format!("big{i}"))
        .find(|k| {
            redis::cmd("GET")
                .arg(k)
                .query::<Option<String>>(&mut conn)
                .is_ok()
        })
        .unwrap();
    let value = "v".repeat(512 << 10);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(&value)
        .query(&mut conn)
        .unwrap();
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let get = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
    let pipeline = get.repeat(200);
    slow.write_all(pipeline.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // The node must acknowledge the new topology (add-node waits 10 s for
    // every member) while `slow` sits on 100 MiB of unread replies.
    let i = c.add();
    let started = Instant::now();
    c.admin(&["add-node", &format!("127.0.0.1:{}", c.nodes[i].port)]);
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(slow);
}

/// The source refuses to drop a slot a target is still pulling from it.
#[test]
fn a_source_refuses_to_drop_a_slot_still_being_handed_over() {
    let Some(mut c) = Cluster::start(2) else {
        return;
    };
    c.admin(&["create", "--nodes", "2"]);
    let i = c.add();
    let to = format!("127.0.0.1:{}", c.nodes[i].port);
    // Enough data that the copy (at MIGRATE_RATE_MB) takes a while.
    let value = "x".repeat(1000);
    for k in 0..3000 {
        assert_eq!(
            redis_cli(c.nodes[0].port, &["set", &format!("d{k}"), &value]),
            "OK"
        );
    }
    c.admin(&["scale-out", "--slots", "4000", "--to", &to, "--no-wait"]);
    wait_status(&c, "pulling;", Duration::from_secs(20));
    // The first slot of each range the target took: its source refuses to
    // drop it; the other node has nothing there to drop.
    let topo: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut c.conn(0))
        .unwrap();
    let mine = topo.lines().find(|l| l.contains(&to)).unwrap();
    let firsts: Vec<u16> = mine
        .split(' ')
        .skip(8)
        .filter_map(|r| r.split('-').next()?.parse().ok())
        .collect();
    let mut refused = 0;
    for &slot in &firsts {
        for n in 0..2 {
            match redis::cmd("TERN.DROPSLOT")
                .arg(slot)
                .arg(10)
                .query::<i64>(&mut c.conn(n))
            {
                Ok(dropped) => assert_eq!(dropped, 0, "node {n} dropped keys of slot {slot}"),
                Err(e) => {
                    assert!(e.to_string().contains("handed over"), "{e}");
                    refused += 1;
                }
            }
        }
    }
    assert!(refused >= 2, "sources did not refuse: {firsts:?}");
    // FLUSHDB would lose keys the target still needs (on a source) or
    // leave half a slot (on the target): refused on every node involved.
    for n in [0, 1, i] {
        let e = redis::cmd("FLUSHDB")
            .query::<()>(&mut c.conn(n))
            .unwrap_err();
        assert!(e.to_string().contains("migration"), "node {n}: {e}");
    }
    wait_migrations_done(&c, Duration::from_secs(60));
    assert_eq!(total_keys(&c), 3000);
}

/// A node that takes back slots it held before must serve their current
/// values, not what it kept of them: here a source killed while dropping
/// (its copy half deleted, the migration finished by `tern cluster fix`)
/// comes back with a crawling cleanup, and the slots move back to it.
#[test]
fn a_node_taking_slots_back_serves_their_values_not_its_leftovers() {
    let Some((mut c, t, rt, client)) = three_and_a_spare() else {
        return;
    };
    let t_addr = format!("127.0.0.1:{}", c.nodes[t].port);
    let n = 6000;
    let write_all = |tag: &str| {
        let cmds: Vec<_> = (0..n)
            .map(|i| {
                vec![
                    b"SET".to_vec(),
                    format!("l{i}").into_bytes(),
                    format!("{tag}-{i}").into_bytes(),
                ]
            })
            .collect();
        for r in rt.block_on(client.batch(cmds)).unwrap() {
            assert_eq!(r, tern_client::Reply::Simple("OK".into()));
        }
    };
    write_all("v1");
    c.admin(&["scale-out", "--slots", "1638", "--to", &t_addr, "--no-wait"]);
    let status = wait_status(&c, "dropping;", Duration::from_secs(60));
    let port = source_in(&status, "dropping").unwrap();
    let s = c.nodes.iter().position(|x| x.port == port).unwrap();
    c.kill(s);
    wait_status(
        &c,
        "the source is down",
        Duration::from_secs(NODE_TTL * 5 + 5),
    );
    let fixed = c.admin(&["fix"]);
    assert!(fixed.contains("finished"), "{fixed}");
    wait_migrations_done(&c, Duration::from_secs(60));
    // Back, with a cleanup that deletes a key a second.
    let node = &c.nodes[s];
    let p = start_node_at_rate(&c.etcd_url, &node.dir, &node.host, node.port, None, 0.001);
    c.nodes[s].proc = Some(p);
    let rt2 = &rt;
    let _ = rt2.block_on(client.refresh());
    write_all("v2");
    assert!(
        total_keys(&c) > n as i64,
        "the killed source kept no leftovers; nothing to test"
    );
    let s_addr = format!("127.0.0.1:{}", c.nodes[s].port);
    c.admin(&[
        "scale-out",
        "--slots",
        "1638",
        "--from",
        &t_addr,
        "--to",
        &s_addr,
    ]);
    let cmds: Vec<_> = (0..n)
        .map(|i| vec![b"GET".to_vec(), format!("l{i}").into_bytes()])
        .collect();
    let got = rt.block_on(client.batch(cmds)).unwrap();
    for (i, r) in got.into_iter().enumerate() {
        let want = tern_client::Reply::Bulk(format!("v2-{i}").into_bytes());
        assert_eq!(r, want, "l{i} is stale");
    }
}

/// A field of `CLUSTER INFO` of node `i`.
fn cluster_info(c: &Cluster, i: usize, field: &str) -> u64 {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut c.conn(i))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {info}"))
}

/// The hottest records of moving slots come with the ownership change:
/// the new owner has a key read often on the old one before anyone asks
/// for it there, and serves it without a pull.
#[test]
fn hot_records_travel_with_the_slots() {
    let Some((c, spare, _rt, _client)) = three_and_a_spare() else {
        return;
    };
    // The top slot of some node's first range: `scale-out --slots 1
    // --from` that node moves exactly it.
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut c.conn(0))
        .unwrap();
    let line = nodes.lines().next().unwrap();
    let donor_port: u16 = line
        .split(' ')
        .nth(1)
        .unwrap()
        .split(['@', ':'])
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let top: u16 = line
        .split(' ')
        .nth(8)
        .and_then(|r| r.split('-').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let key = (0..)
        .map(|i| format!("hot{i}"))
        .find(|k| tern_client::slot::key_slot(k.as_bytes()) == top)
        .unwrap();
    let donor = c.nodes.iter().position(|n| n.port == donor_port).unwrap();
    let mut conn = c.conn(donor);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("burning")
        .query(&mut conn)
        .unwrap();
    for _ in 0..400 {
        let _: String = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    }
    let to = format!("127.0.0.1:{}", c.nodes[spare].port);
    let from = format!("127.0.0.1:{donor_port}");
    c.admin(&["scale-out", "--slots", "1", "--from", &from, "--to", &to]);
    assert!(cluster_info(&c, spare, "tern_migration_hot_records_received") >= 1);
    assert!(cluster_info(&c, donor, "tern_migration_hot_records_sent") >= 1);
    let got: String = redis::cmd("GET")
        .arg(&key)
        .query(&mut c.conn(spare))
        .unwrap();
    assert_eq!(got, "burning");
    assert_eq!(cluster_info(&c, spare, "tern_migration_pulled_keys"), 0);
}

/// Hashes, sets, sorted sets and lists move with their slots: their
/// members are copied in the background, pulled on demand when a client
/// asks for one first, and written to while the move is under way; every
/// value reads back whole afterwards, with its expiry, and is stored once.
#[test]
fn composite_values_move_with_their_slots() {
    let Some((c, spare, rt, client)) = three_and_a_spare() else {
        return;
    };
    let cmd =
        |parts: &[&str]| -> Vec<Vec<u8>> { parts.iter().map(|p| p.as_bytes().to_vec()).collect() };
    let n = 400;
    let mut load = Vec::new();
    for i in 0..n {
        let (h, s, z, l) = (
            format!("h{i}"),
            format!("s{i}"),
            format!("z{i}"),
            format!("l{i}"),
        );
        load.push(cmd(&[
            "HSET",
            &h,
            "a",
            &format!("A{i}"),
            "b",
            &format!("B{i}"),
        ]));
        load.push(cmd(&["SADD", &s, "x", "y", &format!("m{i}")]));
        load.push(cmd(&["ZADD", &z, "1.5", "one", &format!("{i}"), "two"]));
        load.push(cmd(&["RPUSH", &l, "p", "q", &format!("r{i}")]));
    }
    // One bigger value, and one that expires (long after the test).
    let mut big = vec!["HSET".to_string(), "bighash".into()];
    for f in 0..5000 {
        big.push(format!("f{f}"));
        big.push(format!("v{f}"));
    }
    load.push(big.iter().map(|s| s.as_bytes().to_vec()).collect());
    load.push(cmd(&["SADD", "{tag}a", "1", "2", "3"]));
    load.push(cmd(&["SADD", "{tag}b", "2", "3", "4"]));
    load.push(cmd(&["RPUSH", "expiring", "e"]));
    load.push(cmd(&["PEXPIRE", "expiring", "600000"]));
    for r in rt.block_on(client.batch(load)).unwrap() {
        assert!(!matches!(r, tern_client::Reply::Error(_)), "{r:?}");
    }
    let to = format!("127.0.0.1:{}", c.nodes[spare].port);
    c.admin(&["scale-out", "--slots", "6000", "--to", &to, "--no-wait"]);
    // While slots move: write to some values, read others (a read of a
    // value not copied yet pulls it whole from its previous owner).
    for i in (0..n).step_by(7) {
        let replies = rt
            .block_on(client.batch(vec![
                cmd(&["HSET", &format!("h{i}"), "c", "C"]),
                cmd(&["RPUSH", &format!("l{i}"), "s"]),
                cmd(&["ZINCRBY", &format!("z{i}"), "1", "one"]),
                cmd(&["SMEMBERS", &format!("s{}", (i + 3) % n)]),
            ]))
            .unwrap();
        assert_eq!(replies[0], tern_client::Reply::Int(1), "h{i}");
        assert_eq!(replies[1], tern_client::Reply::Int(4), "l{i}");
        assert_eq!(
            replies[2],
            tern_client::Reply::Bulk(b"2.5".to_vec()),
            "z{i}"
        );
        match &replies[3] {
            tern_client::Reply::Array(m) => assert_eq!(m.len(), 3, "s{}", (i + 3) % n),
            r => panic!("SMEMBERS: {r:?}"),
        }
    }
    wait_migrations_done(&c, Duration::from_secs(120));
    let bulk = |s: &str| tern_client::Reply::Bulk(s.as_bytes().to_vec());
    let arr = |v: &[&str]| tern_client::Reply::Array(v.iter().map(|s| bulk(s)).collect());
    let mut reads = Vec::new();
    for i in 0..n {
        reads.push(cmd(&["HGETALL", &format!("h{i}")]));
        reads.push(cmd(&["SMEMBERS", &format!("s{i}")]));
        reads.push(cmd(&["ZRANGE", &format!("z{i}"), "0", "-1", "WITHSCORES"]));
        reads.push(cmd(&["LRANGE", &format!("l{i}"), "0", "-1"]));
    }
    let replies = rt.block_on(client.batch(reads)).unwrap();
    for (i, r) in replies.chunks(4).enumerate() {
        let touched = i % 7 == 0;
        let (a, b) = (format!("A{i}"), format!("B{i}"));
        let mut hash = vec!["a", a.as_str(), "b", b.as_str()];
        if touched {
            hash.extend(["c", "C"]);
        }
        assert_eq!(r[0], arr(&hash), "h{i}");
        let m = format!("m{i}");
        let mut set = vec![m.as_str(), "x", "y"];
        set.sort();
        assert_eq!(r[1], arr(&set), "s{i}");
        let two = format!("{i}");
        let one = if touched { "2.5" } else { "1.5" };
        let mut z = [("one", one.to_string()), ("two", two.clone())];
        z.sort_by(|x, y| {
            let (a, b): (f64, f64) = (x.1.parse().unwrap(), y.1.parse().unwrap());
            a.partial_cmp(&b).unwrap().then(x.0.cmp(y.0))
        });
        let zflat: Vec<&str> = z.iter().flat_map(|(m, s)| [*m, s.as_str()]).collect();
        assert_eq!(r[2], arr(&zflat), "z{i}");
        let last = format!("r{i}");
        let mut list = vec!["p", "q", last.as_str()];
        if touched {
            list.push("s");
        }
        assert_eq!(r[3], arr(&list), "l{i}");
    }
    let more = rt
        .block_on(client.batch(vec![
            cmd(&["HLEN", "bighash"]),
            cmd(&["HGET", "bighash", "f4999"]),
            cmd(&["SINTERCARD", "2", "{tag}a", "{tag}b"]),
            cmd(&["PTTL", "expiring"]),
            cmd(&["LRANGE", "expiring", "0", "-1"]),
        ]))
        .unwrap();
    assert_eq!(more[0], tern_client::Reply::Int(5000));
    assert_eq!(more[1], bulk("v4999"));
    assert_eq!(more[2], tern_client::Reply::Int(2));
    match more[3] {
        tern_client::Reply::Int(ms) => assert!(ms > 500_000, "the expiry moved too: {ms}"),
        ref r => panic!("PTTL: {r:?}"),
    }
    assert_eq!(more[4], arr(&["e"]));
    // Each value is stored once, on its owner.
    assert_eq!(total_keys(&c), 4 * n as i64 + 4);
    let (pulled, copied) = (
        (0..c.nodes.len())
            .map(|i| cluster_info(&c, i, "tern_migration_pulled_keys"))
            .sum::<u64>(),
        (0..c.nodes.len())
            .map(|i| cluster_info(&c, i, "tern_migration_ingested_keys"))
            .sum::<u64>(),
    );
    eprintln!("{pulled} values pulled on demand, {copied} copied in the background");
    assert!(copied > 0, "nothing was copied");
}

/// Runs `cmd` on `conn`, again while it answers `-TRYAGAIN` (a slot in
/// handoff, or taking in a part of its bulk copy).
fn retrying<T: redis::FromRedisValue>(conn: &mut redis::Connection, cmd: &redis::Cmd) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match cmd.query(conn) {
            Ok(v) => return v,
            Err(e)
                if e.to_string().to_ascii_uppercase().contains("TRYAGAIN")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// `keys` and `expires` of INFO keyspace on `conn`.
fn keyspace_counts(conn: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("keyspace").query(conn).unwrap();
    let field = |name: &str| {
        info.split([',', ':', '\n'])
            .find_map(|kv| kv.trim().strip_prefix(&format!("{name}=")))
            .map_or(0, |v| v.parse().unwrap())
    };
    (field("keys"), field("expires"))
}

/// The bulk copy arrives as files in many small parts while a client
/// overwrites, deletes and sets expiries on keys of the moving slots at
/// the target, whose engine flushes and compacts all the while: every
/// change made at the target wins over the older copy (a deleted key
/// never comes back), and the target's key and expiry counts stay exact,
/// also after a restart.
#[test]
fn a_bulk_copy_in_files_never_overwrites_or_revives_what_the_target_changed() {
    let Some(mut c) = Cluster::start(1) else {
        return;
    };
    c.admin(&["create", "--nodes", "1"]);
    const KEYS: usize = 4000;
    let key = |i: usize| format!("bulk:{i}");
    let value = |i: usize, tag: &str| format!("{tag}-{i}-{}", "x".repeat(700 + i % 300));
    // The model: key -> (value, has an expiry).
    let mut model: std::collections::BTreeMap<String, (String, bool)> = Default::default();
    {
        let mut src = c.conn(0);
        let mut pipe = redis::pipe();
        for i in 0..KEYS {
            if i % 11 == 0 {
                pipe.cmd("SET")
                    .arg(key(i))
                    .arg(value(i, "v"))
                    .arg("EX")
                    .arg(5000)
                    .ignore();
            } else {
                pipe.cmd("SET").arg(key(i)).arg(value(i, "v")).ignore();
            }
            model.insert(key(i), (value(i, "v"), i % 11 == 0));
        }
        let () = pipe.query(&mut src).unwrap();
    }
    // Small parts and an engine that flushes and compacts every few
    // writes: tombstones of keys deleted here reach the last level while
    // parts still arrive.
    let target = c.add_with(
        "migrate-part-kb = 16\n[engine]\nwrite-buffer-size = 65536\ntarget-file-size = 32768\nmax-bytes-for-level-base = 131072\n",
    );
    let to = format!("127.0.0.1:{}", c.nodes[target].port);
    let mut admin = tern()
        .args([
            "cluster",
            "scale-out",
            "--slots",
            "4096",
            "--to",
            &to,
            "--etcd",
        ])
        .arg(&c.etcd_url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_status(&c, "pulling;", Duration::from_secs(20));
    let owners = slot_owners(&c, 0);
    let mut src = c.conn(0);
    let moving: Vec<usize> = (0..KEYS)
        .filter(|&i| owners[usize::from(keyslot(&mut src, &key(i)))] == c.nodes[target].port)
        .collect();
    assert!(moving.len() > 500, "{} keys move", moving.len());
    let mut dst = c.conn(target);
    // Last keys first: their parts come last, after these changes.
    for (n, &i) in moving.iter().rev().enumerate() {
        let k = key(i);
        if i % 5 == 0 {
            let _: i64 = retrying(&mut dst, redis::cmd("DEL").arg(&k));
            model.remove(&k);
        } else if i % 3 == 0 {
            let _: () = retrying(&mut dst, redis::cmd("SET").arg(&k).arg(value(i, "new")));
            model.insert(k, (value(i, "new"), false));
        } else if i % 7 == 0 {
            let _: i64 = retrying(&mut dst, redis::cmd("EXPIRE").arg(&k).arg(9000));
            if let Some(e) = model.get_mut(&k) {
                e.1 = true;
            }
        }
        if n % 50 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    wait_migrations_done(&c, Duration::from_secs(120));
    assert!(admin.wait().unwrap().success());
    assert!(
        cluster_info(&c, target, "tern_migration_ingested_files") > 10,
        "the copy came in many parts"
    );
    let check = |c: &Cluster| {
        let mut conns = [c.conn(0), c.conn(target)];
        for i in 0..KEYS {
            let k = key(i);
            let on = usize::from(moving.binary_search(&i).is_ok());
            let got: Option<String> = redis::cmd("GET").arg(&k).query(&mut conns[on]).unwrap();
            assert_eq!(got.as_ref(), model.get(&k).map(|e| &e.0), "key {k}");
            let ttl: i64 = redis::cmd("TTL").arg(&k).query(&mut conns[on]).unwrap();
            match model.get(&k) {
                None => assert_eq!(ttl, -2, "key {k}"),
                Some((_, true)) => assert!(ttl > 0, "key {k} lost its expiry"),
                Some((_, false)) => assert_eq!(ttl, -1, "key {k} got an expiry"),
            }
        }
        let moved_live: Vec<_> = moving.iter().filter_map(|&i| model.get(&key(i))).collect();
        let want = (
            moved_live.len() as u64,
            moved_live.iter().filter(|e| e.1).count() as u64,
        );
        assert_eq!(keyspace_counts(&mut conns[1]), want, "the target's counts");
        assert_eq!(total_keys(c), model.len() as i64);
    };
    check(&c);
    c.kill(target);
    c.restart(target);
    check(&c);
}
