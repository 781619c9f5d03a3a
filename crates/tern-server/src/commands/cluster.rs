//! `CLUSTER …`, `ASKING`, `READONLY` and `READWRITE`, answered as Redis
//! Cluster answers them so that cluster-aware clients work unchanged.

use std::fmt::Write as _;

use super::strings::tri;
use super::{int_arg, store_error, wrong_arity, Ctx};
use crate::cluster::slot::{key_slot, SLOTS};
use crate::cluster::view::View;
use crate::cluster::ClusterNode;
use crate::resp::Reply;

/// The cluster bus port Redis would use; reported in `CLUSTER NODES`
/// (Tern nodes talk through etcd, not a bus).
const BUS_PORT_OFFSET: u32 = 10000;

fn disabled() -> Reply {
    Reply::err("This instance has cluster support disabled")
}

fn node_of<'a>(ctx: &'a Ctx<'_>) -> Result<&'a ClusterNode, Reply> {
    ctx.state.cluster.as_deref().ok_or_else(disabled)
}

fn slot_arg(a: &[u8]) -> Result<u16, Reply> {
    match int_arg(a) {
        Ok(s) if (0..SLOTS as i64).contains(&s) => Ok(s as u16),
        Ok(_) => Err(Reply::err("Invalid slot")),
        Err(_) => Err(Reply::err("Invalid or out of range slot")),
    }
}

/// ASKING: accepted; it changes nothing here, since the owner of a moving
/// slot serves it itself (`docs/cluster.md`).
pub fn asking(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    tri!(node_of(ctx));
    Reply::Ok
}

/// READONLY / READWRITE: accepted on a primary, which serves reads
/// anyway (as Redis does).
pub fn readonly(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    tri!(node_of(ctx));
    Reply::Ok
}

/// CLUSTER <subcommand> ...
pub fn cluster(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    if sub == b"help" {
        return super::server::help(&[
            "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "INFO",
            "    Return information about the cluster.",
            "MYID",
            "    Return the node id.",
            "NODES",
            "    Return cluster configuration seen by node, in CLUSTER NODES format.",
            "SLOTS",
            "    Return information about slots range mappings.",
            "SHARDS",
            "    Return information about slot range mappings and the nodes of each shard.",
            "KEYSLOT <key>",
            "    Return the hash slot for <key>.",
            "COUNTKEYSINSLOT <slot>",
            "    Return the number of keys in <slot>.",
            "GETKEYSINSLOT <slot> <count>",
            "    Return key names stored by current node in a slot.",
            "Topology changes are made with `tern cluster` (create, add-node,",
            "scale-out, fix), which stores them in etcd.",
        ]);
    }
    let node = tri!(node_of(ctx));
    let view = node.view();
    let argc = args.len();
    match sub.as_slice() {
        b"myid" if argc == 2 => Reply::text(node.info.id.clone()),
        b"keyslot" if argc == 3 => Reply::Int(i64::from(key_slot(&args[2]))),
        b"info" if argc == 2 => Reply::Verbatim(info(node, &view)),
        b"nodes" if argc == 2 => Reply::Verbatim(nodes(node, &view)),
        b"slots" if argc == 2 => slots(&view),
        b"shards" if argc == 2 => shards(node, &view),
        b"countkeysinslot" if argc == 3 => {
            let slot = tri!(slot_arg(&args[2]));
            let n = tri!(ctx.store().count_in_slot(slot).map_err(store_error));
            Reply::Int(n as i64)
        }
        b"getkeysinslot" if argc == 4 => {
            let slot = tri!(slot_arg(&args[2]));
            let count = match int_arg(&args[3]) {
                Ok(c) if c >= 0 => c as usize,
                _ => return Reply::err("Invalid number of keys"),
            };
            let keys = tri!(ctx.store().keys_in_slot(slot, count).map_err(store_error));
            Reply::Array(keys.into_iter().map(Reply::Bulk).collect())
        }
        b"myid" | b"keyslot" | b"info" | b"nodes" | b"slots" | b"shards"
        | b"countkeysinslot" | b"getkeysinslot" => {
            wrong_arity(&format!("cluster|{}", String::from_utf8_lossy(&sub)))
        }
        _ => Reply::err(format!(
            "unknown subcommand '{}'. Try CLUSTER HELP. (Topology changes are made with `tern cluster`.)",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

/// Slot ranges of node `i` in `view`.
fn ranges_of(view: &View, i: usize) -> Vec<(u16, u16)> {
    let Some(t) = &view.topology else {
        return Vec::new();
    };
    let Some(id) = t.nodes.get(i).map(|n| &n.id) else {
        return Vec::new();
    };
    t.slots
        .iter()
        .filter(|r| &r.node == id)
        .map(|r| (r.start, r.end))
        .collect()
}

fn info(node: &ClusterNode, view: &View) -> String {
    let (assigned, known, size) = match &view.topology {
        Some(t) => (
            t.assigned(),
            t.nodes.len(),
            t.nodes.iter().filter(|n| t.slot_count(&n.id) > 0).count(),
        ),
        None => (0, 1, 0),
    };
    let state = if assigned == SLOTS { "ok" } else { "fail" };
    let mut out = String::new();
    let mut kv = |k: &str, v: String| {
        let _ = write!(out, "{k}:{v}\r\n");
    };
    kv("cluster_enabled", "1".into());
    kv("cluster_state", state.into());
    kv("cluster_slots_assigned", assigned.to_string());
    kv("cluster_slots_ok", assigned.to_string());
    kv("cluster_slots_pfail", "0".into());
    kv("cluster_slots_fail", "0".into());
    kv("cluster_known_nodes", known.to_string());
    kv("cluster_size", size.to_string());
    kv("cluster_current_epoch", view.version().to_string());
    kv("cluster_my_epoch", view.version().to_string());
    kv("cluster_stats_messages_sent", "0".into());
    kv("cluster_stats_messages_received", "0".into());
    kv("tern_cluster_name", node.name.clone());
    kv(
        "tern_etcd_connected",
        u8::from(node.connected()).to_string(),
    );
    let c = &node.counters;
    let get =
        |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed).to_string();
    kv("tern_migration_pulled_keys", get(&c.pulled_keys));
    kv(
        "tern_migration_hot_records_received",
        get(&c.hot_records_received),
    );
    kv("tern_migration_hot_records_sent", get(&c.hot_records_sent));
    let i = &node.ingests;
    kv("tern_migration_ingested_files", get(&i.files));
    kv("tern_migration_ingested_bytes", get(&i.bytes));
    kv("tern_migration_ingested_keys", get(&i.keys));
    out
}

fn nodes(node: &ClusterNode, view: &View) -> String {
    let mut out = String::new();
    let Some(t) = &view.topology else {
        let i = &node.info;
        let _ = writeln!(
            out,
            "{} {}:{}@{} myself,master - 0 0 0 connected",
            i.id,
            i.host,
            i.port,
            u32::from(i.port) + BUS_PORT_OFFSET
        );
        return out;
    };
    for (i, n) in t.nodes.iter().enumerate() {
        let me = n.id == node.info.id;
        let mut flags = String::new();
        if me {
            flags.push_str("myself,");
        }
        flags.push_str("master");
        if !node.alive(&n.id) {
            flags.push_str(",fail");
        }
        let link = if node.alive(&n.id) {
            "connected"
        } else {
            "disconnected"
        };
        let _ = write!(
            out,
            "{} {}:{}@{} {flags} - 0 0 {} {link}",
            n.id,
            n.host,
            n.port,
            u32::from(n.port) + BUS_PORT_OFFSET,
            t.version
        );
        for (a, b) in ranges_of(view, i) {
            if a == b {
                let _ = write!(out, " {a}");
            } else {
                let _ = write!(out, " {a}-{b}");
            }
        }
        out.push('\n');
    }
    out
}

fn node_entry(view: &View, i: usize) -> Reply {
    match view.node(i) {
        Some(n) => Reply::Array(vec![
            Reply::text(n.host.clone()),
            Reply::Int(i64::from(n.port)),
            Reply::text(n.id.clone()),
            Reply::Map(Vec::new()),
        ]),
        None => Reply::NilArray,
    }
}

fn slots(view: &View) -> Reply {
    let Some(t) = &view.topology else {
        return Reply::Array(Vec::new());
    };
    Reply::Array(
        t.slots
            .iter()
            .filter_map(|r| {
                let i = t.index_of(&r.node)?;
                Some(Reply::Array(vec![
                    Reply::Int(i64::from(r.start)),
                    Reply::Int(i64::from(r.end)),
                    node_entry(view, i),
                ]))
            })
            .collect(),
    )
}

fn shards(node: &ClusterNode, view: &View) -> Reply {
    let Some(t) = &view.topology else {
        return Reply::Array(Vec::new());
    };
    let mut out = Vec::new();
    for (i, n) in t.nodes.iter().enumerate() {
        let slots: Vec<Reply> = ranges_of(view, i)
            .into_iter()
            .flat_map(|(a, b)| [Reply::Int(i64::from(a)), Reply::Int(i64::from(b))])
            .collect();
        let health = if node.alive(&n.id) { "online" } else { "fail" };
        let entry = Reply::Map(vec![
            (Reply::text("id"), Reply::text(n.id.clone())),
            (Reply::text("port"), Reply::Int(i64::from(n.port))),
            (Reply::text("ip"), Reply::text(n.host.clone())),
            (Reply::text("endpoint"), Reply::text(n.host.clone())),
            (Reply::text("role"), Reply::text("master")),
            (Reply::text("replication-offset"), Reply::Int(0)),
            (Reply::text("health"), Reply::text(health)),
        ]);
        out.push(Reply::Map(vec![
            (Reply::text("slots"), Reply::Array(slots)),
            (Reply::text("nodes"), Reply::Array(vec![entry])),
        ]));
    }
    Reply::Array(out)
}
