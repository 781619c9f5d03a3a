//! `tern cluster`: create a cluster of running `tern serve --cluster`
//! nodes, add nodes, and show where every slot is. Changes go to the
//! topology document in etcd as compare-and-set transactions; the nodes
//! pick them up from their watch (see docs/cluster.md).

use std::process::ExitCode;
use std::time::Duration;

use tern_server::cluster::etcd::{ClusterError, Registry};
use tern_server::cluster::slot::SLOTS;
use tern_server::cluster::topology::{NodeInfo, Topology};

use crate::Failure;

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
    redis-cli -c -p 7001 set foo bar")]
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
    /// Show the nodes, whether they run, and the slots each owns.
    Status {
        #[command(flatten)]
        target: Target,
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
            Sub::Status { target } => status(&target).await,
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
    println!(
        "created cluster {:?}: {} nodes, {} slots",
        t.name,
        created.nodes.len(),
        created.assigned()
    );
    print_topology(&created, &reg.live_nodes().await.map_err(fail)?);
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
    println!(
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
        println!("cluster {:?} does not exist yet", t.name);
        println!("running nodes: {}", live.len());
        for n in live.values() {
            println!("  {}  {}", n.id, n.addr());
        }
        return Ok(ExitCode::SUCCESS);
    };
    let acks = reg.acks().await.map_err(fail)?;
    let state = if topology.assigned() == SLOTS {
        "ok"
    } else {
        "fail (slots without an owner)"
    };
    println!(
        "cluster {:?}: version {}, state {state}, {} of {SLOTS} slots assigned",
        t.name,
        topology.version,
        topology.assigned()
    );
    print_topology(&topology, &live);
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
        println!(
            "not yet routing with version {}: {}",
            topology.version,
            behind.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn print_topology(t: &Topology, live: &std::collections::BTreeMap<String, NodeInfo>) {
    println!(
        "{:<40}  {:<21}  {:<5}  {:>6}  slots",
        "node", "address", "state", "count"
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
        println!(
            "{:<40}  {:<21}  {:<5}  {:>6}  {}",
            n.id,
            n.addr(),
            state,
            t.slot_count(&n.id),
            ranges.join(" ")
        );
    }
}
