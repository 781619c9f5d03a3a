//! The cluster's topology: which nodes exist and which node owns each
//! slot. One versioned JSON document in etcd, changed only by
//! compare-and-set transactions ([`super::etcd`]); every node builds its
//! routing [`super::view::View`] from it. Specified in
//! `docs/format/cluster.md`.

use serde::{Deserialize, Serialize};

use super::slot::SLOTS;

/// The topology document's format version.
pub const TOPOLOGY_FORMAT: u32 = 1;

/// One node (a primary; `replicas` is reserved for replication).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// 40 lower-case hex digits, as Redis Cluster node ids.
    pub id: String,
    /// Host clients connect to.
    pub host: String,
    /// Port clients connect to.
    pub port: u16,
    /// Ids of nodes replicating this one (none yet).
    #[serde(default)]
    pub replicas: Vec<String>,
}

impl NodeInfo {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Slots `start..=end`, owned by node `node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    /// First slot.
    pub start: u16,
    /// Last slot (inclusive).
    pub end: u16,
    /// Owner's node id.
    pub node: String,
}

/// Where a slot migration stands (see docs/cluster.md, "Live migration").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationState {
    /// Ownership moved to the target, which waits (clients see
    /// `-TRYAGAIN`) until the source acknowledges that it stopped serving
    /// the slots.
    Handoff,
    /// The target serves the slots, pulling each key it does not have yet
    /// from the source on demand, while the bulk copies in the background.
    Pulling,
    /// Everything is at the target; the source deletes its copy.
    Dropping,
}

/// Slots moving from one node to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// Unique within the cluster.
    pub id: u64,
    /// The topology version that started it: the source has stopped
    /// serving the slots once it acknowledges this version.
    pub since: u64,
    /// Source node id.
    pub from: String,
    /// Target node id (the slots' owner in `slots`).
    pub to: String,
    /// The moving slots, inclusive ranges.
    pub slots: Vec<(u16, u16)>,
    /// The step it is at.
    pub state: MigrationState,
}

impl Migration {
    /// Whether `slot` is one of the moving slots.
    pub fn has(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }

    /// The moving slots, one by one.
    pub fn each_slot(&self) -> impl Iterator<Item = u16> + '_ {
        self.slots.iter().flat_map(|&(a, b)| a..=b)
    }

    /// Number of moving slots.
    pub fn slot_count(&self) -> usize {
        self.slots
            .iter()
            .map(|&(a, b)| usize::from(b.saturating_sub(a)) + 1)
            .sum()
    }
}

/// The whole topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Format of this document ([`TOPOLOGY_FORMAT`]).
    pub format: u32,
    /// Raised by one on every change (Redis's configuration epoch).
    pub version: u64,
    /// Every node of the cluster, in the order they joined.
    pub nodes: Vec<NodeInfo>,
    /// Slot ownership: sorted, disjoint ranges. A slot in no range has no
    /// owner (clients get `-CLUSTERDOWN`).
    pub slots: Vec<SlotRange>,
    /// Slot migrations under way.
    #[serde(default)]
    pub migrations: Vec<Migration>,
}

/// A topology that breaks a rule, with what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError(pub String);

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TopologyError {}

/// Whether `id` is a node id: 40 lower-case hex digits.
pub fn valid_node_id(id: &str) -> bool {
    id.len() == 40
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Topology {
    /// A cluster of `nodes` with the slots spread evenly over them, in
    /// contiguous ranges (as `redis-cli --cluster create` does).
    pub fn create(nodes: Vec<NodeInfo>) -> Result<Topology, TopologyError> {
        if nodes.is_empty() {
            return Err(TopologyError("a cluster needs at least one node".into()));
        }
        let n = nodes.len();
        let mut slots = Vec::with_capacity(n);
        let mut start = 0usize;
        for (i, node) in nodes.iter().enumerate() {
            let count = SLOTS / n + usize::from(i < SLOTS % n);
            if count == 0 {
                continue;
            }
            slots.push(SlotRange {
                start: start as u16,
                end: (start + count - 1) as u16,
                node: node.id.clone(),
            });
            start += count;
        }
        let t = Topology {
            format: TOPOLOGY_FORMAT,
            version: 1,
            nodes,
            slots,
            migrations: Vec::new(),
        };
        t.validate()?;
        Ok(t)
    }

    /// Checks the rules: known format, unique well-formed node ids, slot
    /// ranges sorted, disjoint, in range and owned by listed nodes.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let bad = |m: String| Err(TopologyError(m));
        if self.format != TOPOLOGY_FORMAT {
            return bad(format!(
                "topology format {} (this version reads format {TOPOLOGY_FORMAT})",
                self.format
            ));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if !valid_node_id(&n.id) {
                return bad(format!("node id {:?} is not 40 hex digits", n.id));
            }
            if self.nodes[..i].iter().any(|m| m.id == n.id) {
                return bad(format!("node {} is listed twice", n.id));
            }
            if n.host.is_empty() || n.port == 0 {
                return bad(format!("node {} has no address", n.id));
            }
        }
        let mut next = 0usize;
        for r in &self.slots {
            if usize::from(r.start) < next || r.start > r.end || usize::from(r.end) >= SLOTS {
                return bad(format!(
                    "slot range {}-{} is out of order, overlaps another or exceeds {}",
                    r.start,
                    r.end,
                    SLOTS - 1
                ));
            }
            if self.node(&r.node).is_none() {
                return bad(format!(
                    "slots {}-{} belong to unknown node {}",
                    r.start, r.end, r.node
                ));
            }
            next = usize::from(r.end) + 1;
        }
        let owners = self.owners();
        let mut moving = vec![false; SLOTS];
        for (i, m) in self.migrations.iter().enumerate() {
            if self.migrations[..i].iter().any(|o| o.id == m.id) {
                return bad(format!("migration {} is listed twice", m.id));
            }
            let (Some(_), Some(to)) = (self.index_of(&m.from), self.index_of(&m.to)) else {
                return bad(format!("migration {} names an unknown node", m.id));
            };
            if m.from == m.to || m.slots.is_empty() {
                return bad(format!("migration {} moves nothing", m.id));
            }
            for &(a, b) in &m.slots {
                if a > b || usize::from(b) >= SLOTS {
                    return bad(format!("migration {} has slot range {a}-{b}", m.id));
                }
            }
            for s in m.each_slot() {
                let s = usize::from(s);
                if owners[s] != Some(to) {
                    return bad(format!(
                        "migration {} moves slot {s}, which its target does not own",
                        m.id
                    ));
                }
                if std::mem::replace(&mut moving[s], true) {
                    return bad(format!("slot {s} is in two migrations"));
                }
            }
        }
        Ok(())
    }

    /// The migration moving `slot`, if any.
    pub fn migration_of(&self, slot: u16) -> Option<&Migration> {
        self.migrations.iter().find(|m| m.has(slot))
    }

    /// Starts moving `slots` (each owned by one node, not already moving)
    /// to node `to`: ownership passes to `to` at once, and one migration
    /// per source node records where the data still is. `since` is the
    /// version this change will be stored as; migration ids are taken
    /// from `since << 16` on.
    pub fn start_migrations(
        &mut self,
        slots: &[u16],
        to: &str,
        since: u64,
    ) -> Result<(), TopologyError> {
        let to_idx = self
            .index_of(to)
            .ok_or_else(|| TopologyError(format!("unknown node {to}")))?;
        let mut owners = self.owners();
        let mut by_source: std::collections::BTreeMap<usize, Vec<u16>> = Default::default();
        for &s in slots {
            let Some(from) = owners.get(usize::from(s)).copied().flatten() else {
                return Err(TopologyError(format!(
                    "slot {s} has no owner to move it from"
                )));
            };
            if from == to_idx {
                continue;
            }
            if self.migration_of(s).is_some() {
                return Err(TopologyError(format!("slot {s} is already moving")));
            }
            by_source.entry(from).or_default().push(s);
            owners[usize::from(s)] = Some(to_idx);
        }
        for (next_id, (from, mut list)) in (since << 16..).zip(by_source) {
            list.sort_unstable();
            let mut ranges: Vec<(u16, u16)> = Vec::new();
            for s in list {
                match ranges.last_mut() {
                    Some(r) if r.1 + 1 == s => r.1 = s,
                    _ => ranges.push((s, s)),
                }
            }
            self.migrations.push(Migration {
                id: next_id,
                from: self.nodes[from].id.clone(),
                to: to.to_string(),
                since,
                slots: ranges,
                state: MigrationState::Handoff,
            });
        }
        self.set_owners(&owners);
        self.validate()
    }

    /// Picks `count` slots for node `to` from the nodes that own the most
    /// (only from node `from` if given), from the top of their ranges,
    /// evening out ownership.
    pub fn pick_slots(&self, count: usize, to: &str, from: Option<&str>) -> Vec<u16> {
        let owners = self.owners();
        let mut counts: Vec<usize> = self
            .nodes
            .iter()
            .map(|n| match from {
                Some(f) if f != n.id => 0,
                _ => self.slot_count(&n.id),
            })
            .collect();
        let to_idx = self.index_of(to);
        let mut taken = vec![false; SLOTS];
        let mut out = Vec::new();
        while out.len() < count {
            let Some((donor, _)) = counts
                .iter()
                .enumerate()
                .filter(|&(i, &c)| Some(i) != to_idx && c > 0)
                .max_by_key(|&(i, &c)| (c, std::cmp::Reverse(i)))
            else {
                break;
            };
            let Some(s) = (0..SLOTS).rev().find(|&s| {
                owners[s] == Some(donor) && !taken[s] && self.migration_of(s as u16).is_none()
            }) else {
                counts[donor] = 0;
                continue;
            };
            taken[s] = true;
            counts[donor] -= 1;
            out.push(s as u16);
        }
        out.sort_unstable();
        out
    }

    /// The node with id `id`.
    pub fn node(&self, id: &str) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The index in `nodes` of node `id`.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    /// The owner of every slot, as an index into `nodes`.
    pub fn owners(&self) -> Vec<Option<usize>> {
        let mut owners = vec![None; SLOTS];
        for r in &self.slots {
            let owner = self.index_of(&r.node);
            for o in &mut owners[usize::from(r.start)..=usize::from(r.end)] {
                *o = owner;
            }
        }
        owners
    }

    /// Rebuilds the slot ranges from the owner of every slot (`owners[s]`
    /// indexes `nodes`), merging neighbours with the same owner.
    pub fn set_owners(&mut self, owners: &[Option<usize>]) {
        let mut slots: Vec<SlotRange> = Vec::new();
        for (s, o) in owners.iter().enumerate().take(SLOTS) {
            let Some(id) = o.and_then(|i| self.nodes.get(i)).map(|n| &n.id) else {
                continue;
            };
            match slots.last_mut() {
                Some(r) if usize::from(r.end) + 1 == s && &r.node == id => r.end = s as u16,
                _ => slots.push(SlotRange {
                    start: s as u16,
                    end: s as u16,
                    node: id.clone(),
                }),
            }
        }
        self.slots = slots;
    }

    /// Slots owned by node `id`.
    pub fn slot_count(&self, id: &str) -> usize {
        self.slots
            .iter()
            .filter(|r| r.node == id)
            .map(|r| usize::from(r.end - r.start) + 1)
            .sum()
    }

    /// Slots with an owner.
    pub fn assigned(&self) -> usize {
        self.slots
            .iter()
            .map(|r| usize::from(r.end - r.start) + 1)
            .sum()
    }

    /// The document as stored in etcd.
    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain structs of strings and integers cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Reads and checks a stored document.
    pub fn decode(raw: &[u8]) -> Result<Topology, TopologyError> {
        let t: Topology = serde_json::from_slice(raw)
            .map_err(|e| TopologyError(format!("unreadable topology document: {e}")))?;
        t.validate()?;
        Ok(t)
    }
}

/// Node `i` of a test cluster.
#[cfg(test)]
pub(crate) fn test_node(i: u8) -> NodeInfo {
    NodeInfo {
        id: format!("{:040x}", u64::from(i) + 1),
        host: "127.0.0.1".into(),
        port: 7000 + u16::from(i),
        replicas: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: u8) -> NodeInfo {
        test_node(i)
    }

    #[test]
    fn create_spreads_every_slot_evenly() {
        for n in 1..=7u8 {
            let t = Topology::create((0..n).map(node).collect()).unwrap();
            assert_eq!(t.assigned(), SLOTS);
            let counts: Vec<usize> = t.nodes.iter().map(|x| t.slot_count(&x.id)).collect();
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(hi - lo <= 1, "{counts:?}");
            assert!(t.owners().iter().all(|o| o.is_some()));
        }
        let t = Topology::create((0..3).map(node).collect()).unwrap();
        assert_eq!((t.slots[0].start, t.slots[0].end), (0, 5461));
        assert_eq!((t.slots[2].start, t.slots[2].end), (10923, 16383));
        assert!(Topology::create(Vec::new()).is_err());
    }

    #[test]
    fn documents_round_trip_and_broken_ones_are_refused() {
        let t = Topology::create((0..3).map(node).collect()).unwrap();
        assert_eq!(Topology::decode(&t.encode()).unwrap(), t);
        let mut overlap = t.clone();
        overlap.slots[1].start = overlap.slots[0].end;
        assert!(overlap.validate().is_err());
        let mut unknown = t.clone();
        unknown.slots[0].node = format!("{:040x}", 99);
        assert!(unknown.validate().is_err());
        let mut dup = t.clone();
        dup.nodes.push(node(0));
        assert!(dup.validate().is_err());
        let mut bad_id = t.clone();
        bad_id.nodes[0].id = "xyz".into();
        assert!(bad_id.validate().is_err());
        let mut future = t.clone();
        future.format = 2;
        assert!(Topology::decode(&future.encode()).is_err());
        assert!(Topology::decode(b"{").is_err());
    }

    #[test]
    fn migrations_move_ownership_first_and_are_checked() {
        let mut t = Topology::create((0..3).map(node).collect()).unwrap();
        t.nodes.push(node(3));
        let new = t.nodes[3].id.clone();
        let slots = t.pick_slots(1638, &new, None);
        assert_eq!(slots.len(), 1638);
        t.start_migrations(&slots, &new, 7).unwrap();
        assert_eq!(t.slot_count(&new), 1638);
        // Taken evenly from the three owners, one migration per source.
        assert_eq!(t.migrations.len(), 3);
        for (i, m) in t.migrations.iter().enumerate() {
            assert_eq!((m.id, m.since), ((7 << 16) + i as u64, 7));
            assert_eq!(m.state, MigrationState::Handoff);
            assert!((545..=547).contains(&m.slot_count()), "{m:?}");
            assert!(m.each_slot().all(|s| t.owners()[usize::from(s)] == Some(3)));
        }
        assert_eq!(Topology::decode(&t.encode()).unwrap(), t);
        // A slot cannot move twice at once, nor a migration name a slot
        // its target does not own.
        assert!(t
            .clone()
            .start_migrations(&slots[..1], &t.nodes[0].id.clone(), 20)
            .is_err());
        let mut bad = t.clone();
        bad.migrations[0].slots.push((0, 0));
        assert!(bad.validate().is_err());
        let mut unknown = t.clone();
        unknown.migrations[0].from = format!("{:040x}", 99);
        assert!(unknown.validate().is_err());
        // The next pick avoids slots already moving.
        let more = t.pick_slots(100, &new, None);
        let only = t.pick_slots(10, &new, Some(&t.nodes[1].id.clone()));
        assert_eq!(only.len(), 10);
        assert!(only.iter().all(|&s| t.owners()[usize::from(s)] == Some(1)));
        assert!(more.iter().all(|&s| t.migration_of(s).is_none()));
    }

    #[test]
    fn set_owners_merges_neighbours() {
        let mut t = Topology::create((0..2).map(node).collect()).unwrap();
        let mut owners = t.owners();
        owners[0] = Some(1);
        owners[100] = None;
        t.set_owners(&owners);
        t.validate().unwrap();
        assert_eq!(t.owners(), owners);
        assert_eq!(t.slots.len(), 4, "{:?}", t.slots);
        assert_eq!(t.assigned(), SLOTS - 1);
    }
}
