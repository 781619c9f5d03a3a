//! `tern cluster`: create a cluster of running `tern serve --cluster`
//! nodes, add nodes, and show where every slot is. Changes go to the
//! topology document in etcd as compare-and-set transactions; the nodes
//! pick them up from their watch (see docs/cluster.md).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use tern_server::cluster::etcd::Progress;
use tern_server::cluster::etcd::{ClusterError, Registry};
use tern_server::cluster::slot::SLOTS;
use tern_server::cluster::topology::{MigrationState, NodeInfo, Topology};

use crate::Failure;

/// `println!` that reports a failed write (a closed pipe) instead of
/// panicking.
macro_rules! outln {
    ($($t:tt)*) => {
        writeln!(std::io::stdout(), $($t)*)?
    };
}

/// Flags every `tern cluster` command takes.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// etcd client URLs, comma-separated.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:2379")]
    etcd: String,
    /// The cluster's name (as given to `tern serve --cluster-name`).
    #[arg(long, value_name = "NAME", default_value = "default")]
    name: String,
}

/// `tern cluster`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tern serve --cluster --etcd http://127.0.0.1:2379 --port 7001 --dir n1 &\n  \
    tern serve --cluster --etcd http://127.0.0.1:2379 --port 7002 --dir n2 &\n  \
    tern cluster create --etcd http://127.0.0.1:2379 --nodes 2\n  \
    tern cluster status --etcd http://127.0.0.1:2379\n  \
    redis-cli -c -p 7001 set foo bar\n  \
    tern serve --cluster --etcd http://127.0.0.1:2379 --port 7003 --dir n3 &\n  \
    tern cluster scale-out --etcd http://127.0.0.1:2379 --slots 1638 --to 127.0.0.1:7003\n\n\
    How it works and what each failure does: docs/cluster.md")]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Create the cluster from the running nodes, slots spread evenly.
    Create {
        #[command(flatten)]
        target: Target,
        /// Wait until this many nodes run, then create the cluster with
        /// them [default: the nodes running now].
        #[arg(long)]
        nodes: Option<usize>,
        /// Longest wait for the nodes, seconds.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
    /// Add a running node (by id or host:port) to the cluster, with no slots.
    AddNode {
        #[command(flatten)]
        target: Target,
        /// The node's id, or the host:port it announces.
        node: String,
    },
    /// Move slots to a node while the cluster serves: ownership first, the
    /// data after (pulled on demand, copied in the background).
    ScaleOut {
        #[command(flatten)]
        target: Target,
        /// How many slots to move, taken from the nodes that own the most.
        #[arg(long)]
        slots: usize,
        /// The receiving node: its id or host:port (added to the cluster
        /// first if it runs but is not a member).
        #[arg(long)]
        to: String,
        /// Take the slots from this node only (its id or host:port)
        /// [default: from the nodes that own the most].
        #[arg(long)]
        from: Option<String>,
        /// Return once the move has started instead of waiting for it.
        #[arg(long)]
        no_wait: bool,
        /// Longest wait for the move to finish, seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Show the nodes, whether they run, the slots each owns, and the
    /// migrations under way with their progress.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Finish or roll back migrations stuck on a node that is down.
    Fix {
        #[command(flatten)]
        target: Target,
        /// Give slots still in handoff back to their source.
        #[arg(long)]
        rollback: bool,
    },
}

fn rt() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(format!("cannot start the runtime: {e}")))
}

fn fail(e: ClusterError) -> Failure {
    Failure::new(e.0)
}

/// Runs `tern cluster`.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let rt = rt()?;
    rt.block_on(async {
        match args.command {
            Sub::Create {
                target,
                nodes,
                timeout,
            } => create(&target, nodes, Duration::from_secs(timeout)).await,
            Sub::AddNode { target, node } => add_node(&target, &node).await,
            Sub::ScaleOut {
                target,
                slots,
                to,
                from,
                no_wait,
                timeout,
            } => {
                let wait = Duration::from_secs(timeout);
                scale_out(&target, slots, &to, from.as_deref(), no_wait, wait).await
            }
            Sub::Status { target } => status(&target).await,
            Sub::Fix { target, rollback } => fix(&target, rollback).await,
        }
    })
}

async fn connect(t: &Target) -> Result<Registry, Failure> {
    Registry::connect(&t.etcd, &t.name)
        .await
        .map_err(|e| fail(e).hint("start etcd, or pass --etcd with its client URL"))
}

async fn create(t: &Target, want: Option<usize>, timeout: Duration) -> Result<ExitCode, Failure> {
    let mut reg = connect(t).await?;
    if let Some(cur) = reg.topology().await.map_err(fail)?.topology {
        return Err(Failure::new(format!(
            "cluster {:?} already exists ({} nodes, version {})",
            t.name,
            cur.nodes.len(),
            cur.version
        ))
        .hint("see it with `tern cluster status`; add nodes with `tern cluster add-node`"));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let nodes = loop {
        let live = reg.live_nodes().await.map_err(fail)?;
        let enough = match want {
            Some(n) => live.len() >= n,
            None => !live.is_empty(),
        };
        if enough {
            let mut nodes: Vec<NodeInfo> = live.into_values().collect();
            nodes.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
            if let Some(n) = want {
                nodes.truncate(n);
            }
            break nodes;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Failure::new(format!(
                "{} of {} nodes are running",
                live.len(),
                want.unwrap_or(1)
            ))
            .hint("start the nodes with `tern serve --cluster --etcd ...` first"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let first = Topology::create(nodes).map_err(|e| Failure::new(e.0))?;
    let created = reg
        .update(|cur| match cur {
            None => Ok(first.clone()),
            Some(_) => Err(ClusterError(
                "another `tern cluster create` created the cluster first".into(),
            )),
        })
        .await
        .map_err(fail)?;
    reg.wait_acks(&created, Duration::from_secs(10))
        .await
        .map_err(fail)?;
    outln!(
        "created cluster {:?}: {} nodes, {} slots",
        t.name,
        created.nodes.len(),
        created.assigned()
    );
    print_topology(&created, &reg.live_nodes().await.map_err(fail)?)?;
    Ok(ExitCode::SUCCESS)
}

async fn add_node(t: &Target, which: &str) -> Result<ExitCode, Failure> {
    let mut reg = connect(t).await?;
    let live = reg.live_nodes().await.map_err(fail)?;
    let node = live
        .values()
        .find(|n| n.id == which || n.addr() == which)
        .cloned()
        .ok_or_else(|| {
            Failure::new(format!("no running node is {which}"))
                .hint("start it with `tern serve --cluster`, then pass its id or host:port")
        })?;
    let t2 = reg
        .update(|cur| {
            let mut next = cur.cloned().ok_or_else(|| {
                ClusterError("the cluster does not exist yet; run `tern cluster create`".into())
            })?;
            if next.node(&node.id).is_some() {
                return Err(ClusterError(format!(
                    "node {} is already a member",
                    node.id
                )));
            }
            next.nodes.push(node.clone());
            Ok(next)
        })
        .await
        .map_err(fail)?;
    reg.wait_acks(&t2, Duration::from_secs(10))
        .await
        .map_err(fail)?;
    outln!(
        "added node {} ({}) with no slots; version {}",
        node.id,
        node.addr(),
        t2.version
    );
    Ok(ExitCode::SUCCESS)
}

async fn status(t: &Target) -> Result<ExitCode, Failure> {
    let mut reg = connect(t).await?;
    let stored = reg.topology().await.map_err(fail)?;
    let live = reg.live_nodes().await.map_err(fail)?;
    let Some(topology) = stored.topology else {
        outln!("cluster {:?} does not exist yet", t.name);
        outln!("running nodes: {}", live.len());
        for n in live.values() {
            outln!("  {}  {}", n.id, n.addr());
        }
        return Ok(ExitCode::SUCCESS);
    };
    let acks = reg.acks().await.map_err(fail)?;
    let state = if topology.assigned() == SLOTS {
        "ok"
    } else {
        "fail (slots without an owner)"
    };
    outln!(
        "cluster {:?}: version {}, state {state}, {} of {SLOTS} slots assigned",
        t.name,
        topology.version,
        topology.assigned()
    );
    print_topology(&topology, &live)?;
    if !topology.migrations.is_empty() {
        let progress = reg.progress().await.map_err(fail)?;
        outln!("migrations:");
        for m in &topology.migrations {
            outln!("  {}", describe(&topology, m, progress.get(&m.id), &live));
        }
    }
    let behind: Vec<String> = topology
        .nodes
        .iter()
        .filter(|n| acks.get(&n.id).is_none_or(|&v| v < topology.version))
        .map(|n| {
            format!(
                "{} (at {})",
                n.addr(),
                acks.get(&n.id).copied().unwrap_or(0)
            )
        })
        .collect();
    if !behind.is_empty() {
        outln!(
            "not yet routing with version {}: {}",
            topology.version,
            behind.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn addr_of(t: &Topology, id: &str) -> String {
    t.node(id).map_or_else(|| id.to_string(), |n| n.addr())
}

/// One line about migration `m`: where it stands and what it waits for.
fn describe(
    t: &Topology,
    m: &tern_server::cluster::topology::Migration,
    p: Option<&Progress>,
    live: &std::collections::BTreeMap<String, NodeInfo>,
) -> String {
    let (from, to) = (addr_of(t, &m.from), addr_of(t, &m.to));
    let down = |id: &str| !live.contains_key(id);
    let step = match m.state {
        MigrationState::Handoff if down(&m.to) => {
            "handoff; the target is down: restart it, or `tern cluster fix --rollback`".to_string()
        }
        MigrationState::Handoff if down(&m.from) => {
            "handoff; the source is down: the target takes over once its registration lapses"
                .to_string()
        }
        MigrationState::Handoff => {
            "handoff; waiting for the source to stop serving the slots".to_string()
        }
        MigrationState::Pulling => {
            let copied = p.map_or(0, |p| p.slots_done);
            let mut s = format!(
                "pulling; {copied}/{} slots copied, {} keys, {} MiB",
                m.slot_count(),
                p.map_or(0, |p| p.keys),
                p.map_or(0, |p| p.bytes >> 20)
            );
            if down(&m.from) {
                s += "; the source is down: restart it (its keys are needed)";
            }
            if down(&m.to) {
                s += "; the target is down: restart it";
            }
            s
        }
        MigrationState::Dropping if down(&m.from) => {
            "dropping; the source is down: `tern cluster fix` finishes it".to_string()
        }
        MigrationState::Dropping => "dropping; the source deletes its copy".to_string(),
    };
    format!("#{} {} slots {from} -> {to}: {step}", m.id, m.slot_count())
}

async fn scale_out(
    t: &Target,
    count: usize,
    to: &str,
    from: Option<&str>,
    no_wait: bool,
    timeout: Duration,
) -> Result<ExitCode, Failure> {
    let mut reg = connect(t).await?;
    let live = reg.live_nodes().await.map_err(fail)?;
    let cur = reg
        .topology()
        .await
        .map_err(fail)?
        .topology
        .ok_or_else(|| {
            Failure::new("the cluster does not exist yet").hint("run `tern cluster create`")
        })?;
    let target = cur
        .nodes
        .iter()
        .chain(live.values())
        .find(|n| n.id == to || n.addr() == to)
        .cloned()
        .ok_or_else(|| {
            Failure::new(format!("no node is {to}"))
                .hint("start it with `tern serve --cluster`, then pass its id or host:port")
        })?;
    if !live.contains_key(&target.id) {
        return Err(Failure::new(format!("node {to} is down")).hint("start it first"));
    }
    let donor = match from {
        None => None,
        Some(f) => Some(
            cur.nodes
                .iter()
                .find(|n| n.id == f || n.addr() == f)
                .map(|n| n.id.clone())
                .ok_or_else(|| Failure::new(format!("no member node is {f}")))?,
        ),
    };
    let started = reg
        .update(|cur| {
            let mut next = cur
                .cloned()
                .ok_or_else(|| ClusterError("the cluster vanished".into()))?;
            if next.node(&target.id).is_none() {
                next.nodes.push(target.clone());
            }
            let since = next.version + 1;
            let slots = next.pick_slots(count, &target.id, donor.as_deref());
            if slots.is_empty() {
                return Err(ClusterError("no slots can move to that node".into()));
            }
            next.start_migrations(&slots, &target.id, since)?;
            Ok(next)
        })
        .await
        .map_err(fail)?;
    let ids: Vec<u64> = started
        .migrations
        .iter()
        .filter(|m| m.since == started.version)
        .map(|m| m.id)
        .collect();
    let total: usize = started
        .migrations
        .iter()
        .filter(|m| ids.contains(&m.id))
        .map(|m| m.slot_count())
        .sum();
    outln!(
        "moving {total} slots to {} in {} migration(s); ownership moved at version {}",
        target.addr(),
        ids.len(),
        started.version
    );
    if no_wait {
        outln!("follow it with `tern cluster status`");
        return Ok(ExitCode::SUCCESS);
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} slots copied {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let now = reg.topology().await.map_err(fail)?.topology;
        let progress = reg.progress().await.map_err(fail)?;
        let left: Vec<_> = now
            .iter()
            .flat_map(|t| &t.migrations)
            .filter(|m| ids.contains(&m.id))
            .collect();
        let copied: usize = ids
            .iter()
            .map(|id| match left.iter().find(|m| m.id == *id) {
                None => started
                    .migrations
                    .iter()
                    .find(|m| m.id == *id)
                    .map_or(0, |m| m.slot_count()),
                Some(m) if m.state == MigrationState::Dropping => m.slot_count(),
                Some(m) => progress.get(&m.id).map_or(0, |p| p.slots_done),
            })
            .sum();
        bar.set_position(copied as u64);
        let states: Vec<String> = left
            .iter()
            .map(|m| format!("{:?}", m.state).to_lowercase())
            .collect();
        bar.set_message(states.join(" "));
        if left.is_empty() {
            bar.finish();
            outln!("done: {total} slots now on {}", target.addr());
            return Ok(ExitCode::SUCCESS);
        }
        if tokio::time::Instant::now() >= deadline {
            bar.abandon();
            return Err(Failure::new("the move did not finish in time")
                .hint("see `tern cluster status`; it goes on in the background"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn fix(t: &Target, rollback: bool) -> Result<ExitCode, Failure> {
    let mut reg = connect(t).await?;
    let live = reg.live_nodes().await.map_err(fail)?;
    let Some(cur) = reg.topology().await.map_err(fail)?.topology else {
        outln!("cluster {:?} does not exist", t.name);
        return Ok(ExitCode::SUCCESS);
    };
    if cur.migrations.is_empty() {
        outln!("no migration under way");
        return Ok(ExitCode::SUCCESS);
    }
    let mut acted = Vec::new();
    for m in &cur.migrations {
        let id = m.id;
        let outcome = match m.state {
            // The target served nothing yet: the slots can go back.
            MigrationState::Handoff if rollback => {
                let r = reg
                    .update(|t| {
                        let mut t = t
                            .cloned()
                            .ok_or_else(|| ClusterError("no topology".into()))?;
                        let Some(i) = t
                            .migrations
                            .iter()
                            .position(|m| m.id == id && m.state == MigrationState::Handoff)
                        else {
                            return Err(ClusterError(format!(
                                "migration {id} left handoff meanwhile"
                            )));
                        };
                        let m = t.migrations.remove(i);
                        let from = t.index_of(&m.from);
                        let mut owners = t.owners();
                        for s in m.each_slot() {
                            owners[usize::from(s)] = from;
                        }
                        t.set_owners(&owners);
                        Ok(t)
                    })
                    .await;
                Some(r.map(|_| format!("#{id}: rolled back; its slots are on the source again")))
            }
            // Everything is at the target; the source's copy is dropped
            // when it comes back (it no longer owns the slots).
            MigrationState::Dropping if !live.contains_key(&m.from) => {
                let r = reg
                    .update(|t| {
                        let mut t = t
                            .cloned()
                            .ok_or_else(|| ClusterError("no topology".into()))?;
                        t.migrations.retain(|m| m.id != id);
                        Ok(t)
                    })
                    .await;
                Some(r.map(|_| {
                    format!("#{id}: finished; the source drops its copy when it restarts")
                }))
            }
            _ => None,
        };
        match outcome {
            Some(Ok(msg)) => acted.push(msg),
            Some(Err(e)) => acted.push(format!("#{id}: {e}")),
            None => outln!("{}", describe(&cur, m, None, &live)),
        }
    }
    for a in &acted {
        outln!("{a}");
    }
    Ok(ExitCode::SUCCESS)
}

fn print_topology(
    t: &Topology,
    live: &std::collections::BTreeMap<String, NodeInfo>,
) -> Result<(), Failure> {
    outln!(
        "{:<40}  {:<21}  {:<5}  {:>6}  slots",
        "node",
        "address",
        "state",
        "count"
    );
    for n in &t.nodes {
        let ranges: Vec<String> = t
            .slots
            .iter()
            .filter(|r| r.node == n.id)
            .map(|r| {
                if r.start == r.end {
                    r.start.to_string()
                } else {
                    format!("{}-{}", r.start, r.end)
                }
            })
            .collect();
        let state = if live.contains_key(&n.id) {
            "up"
        } else {
            "down"
        };
        outln!(
            "{:<40}  {:<21}  {:<5}  {:>6}  {}",
            n.id,
            n.addr(),
            state,
            t.slot_count(&n.id),
            ranges.join(" ")
        );
    }
    Ok(())
}
