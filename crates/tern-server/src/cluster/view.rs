//! A node's view of the topology and the routing decision made from it:
//! serve a key here, or redirect the client (`-MOVED`), or refuse
//! (`-CROSSSLOT`, `-CLUSTERDOWN`).
//!
//! A connection takes the current view once per pipelined batch and checks
//! every request of the batch against it (Shadowfax's view check), never
//! etcd. The node only reports a new view as installed once no batch holds
//! an older one ([`super::ClusterNode::install`]), so a node that lost a
//! slot has stopped serving it by the time it says so.

use std::sync::Arc;

use super::slot::{key_slot, SLOTS};
use super::topology::{MigrationState, NodeInfo, Topology};
use crate::resp::Reply;

/// A set of slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSet(Box<[u64]>);

impl Default for SlotSet {
    fn default() -> Self {
        SlotSet(vec![0; SLOTS / 64].into_boxed_slice())
    }
}

impl SlotSet {
    /// Adds `slot`.
    pub fn insert(&mut self, slot: u16) {
        if let Some(w) = self.0.get_mut(usize::from(slot) / 64) {
            *w |= 1 << (slot % 64);
        }
    }

    /// Whether `slot` is in the set.
    pub fn contains(&self, slot: u16) -> bool {
        self.0
            .get(usize::from(slot) / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

/// Slot owner entry for a slot with no owner.
const NO_OWNER: u16 = u16::MAX;

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// It has no keys, or all its keys are in a slot this node serves.
    Here,
    /// Its keys are in `slot`, which this node serves while it pulls the
    /// slot's keys from node `source` (index into the topology's nodes):
    /// keys not here yet are fetched before the request runs.
    Pull {
        /// The keys' slot.
        slot: u16,
        /// The node the slot's data is still on.
        source: usize,
    },
    /// Its keys are in `slot`, which this node takes over once the
    /// previous owner acknowledges that it stopped serving it.
    Wait {
        /// The keys' slot.
        slot: u16,
    },
    /// Its keys are in `slot`, which node `owner` (index into the
    /// topology's nodes) serves.
    Moved {
        /// The keys' slot.
        slot: u16,
        /// Its owner.
        owner: usize,
    },
    /// `slot` has no owner.
    Down {
        /// The keys' slot.
        slot: u16,
    },
    /// The keys are in different slots.
    CrossSlot,
}

/// One version of the topology, as this node routes with it.
#[derive(Debug)]
pub struct View {
    /// The document (`None` before the cluster is created).
    pub topology: Option<Topology>,
    /// This node's id.
    pub my_id: String,
    /// This node's index in the topology's nodes, if listed.
    pub me: Option<usize>,
    /// The owner of each slot, an index into the topology's nodes.
    owner: Box<[u16]>,
    /// Slots this node imports (a migration to it in handoff or pulling).
    importing: Option<Arc<SlotSet>>,
}

impl View {
    /// The view of node `my_id` from `topology`.
    pub fn new(my_id: &str, topology: Option<Topology>) -> View {
        let mut owner = vec![NO_OWNER; SLOTS].into_boxed_slice();
        let mut me = None;
        if let Some(t) = &topology {
            for (s, o) in t.owners().into_iter().enumerate() {
                owner[s] = o.map_or(NO_OWNER, |i| i as u16);
            }
            me = t.index_of(my_id);
        }
        let mut importing = SlotSet::default();
        for m in topology.iter().flat_map(|t| &t.migrations) {
            if m.to == my_id && m.state != MigrationState::Dropping {
                m.each_slot().for_each(|s| importing.insert(s));
            }
        }
        View {
            topology,
            my_id: my_id.to_string(),
            me,
            owner,
            importing: (!importing.is_empty()).then(|| Arc::new(importing)),
        }
    }

    /// Whether this node is the source or the target of a migration that
    /// still needs the source's data.
    pub fn in_migration(&self) -> bool {
        self.topology.iter().flat_map(|t| &t.migrations).any(|m| {
            (m.from == self.my_id || m.to == self.my_id) && m.state != MigrationState::Dropping
        })
    }

    /// The slots this node is importing, if any: writes to their keys
    /// leave import markers.
    pub fn importing(&self) -> Option<Arc<SlotSet>> {
        self.importing.clone()
    }

    /// The topology's version (0 before the cluster is created).
    pub fn version(&self) -> u64 {
        self.topology.as_ref().map_or(0, |t| t.version)
    }

    /// The node serving `slot`, as an index into the topology's nodes.
    pub fn owner(&self, slot: u16) -> Option<usize> {
        match self.owner.get(usize::from(slot)) {
            Some(&o) if o != NO_OWNER => Some(usize::from(o)),
            _ => None,
        }
    }

    /// Whether this node serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.me.is_some() && self.owner(slot) == self.me
    }

    /// Node `i` of the topology.
    pub fn node(&self, i: usize) -> Option<&NodeInfo> {
        self.topology.as_ref().and_then(|t| t.nodes.get(i))
    }

    /// Where a request with `keys` goes.
    pub fn route<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Route {
        let mut slot = None;
        for k in keys {
            let s = key_slot(k);
            match slot {
                None => slot = Some(s),
                Some(first) if first != s => return Route::CrossSlot,
                Some(_) => {}
            }
        }
        let Some(slot) = slot else {
            return Route::Here;
        };
        match self.owner(slot) {
            None => Route::Down { slot },
            Some(o) if Some(o) == self.me => {
                if !self.importing.as_ref().is_some_and(|s| s.contains(slot)) {
                    return Route::Here;
                }
                let t = self.topology.as_ref();
                match t.and_then(|t| Some((t, t.migration_of(slot)?))) {
                    Some((t, m)) => match (m.state, t.index_of(&m.from)) {
                        (MigrationState::Handoff, _) => Route::Wait { slot },
                        (MigrationState::Pulling, Some(source)) => Route::Pull { slot, source },
                        _ => Route::Here,
                    },
                    None => Route::Here,
                }
            }
            Some(owner) => Route::Moved { slot, owner },
        }
    }

    /// The error reply for a request routed away from this node; `None`
    /// if it runs here.
    pub fn refusal(&self, route: Route) -> Option<Reply> {
        match route {
            Route::Here | Route::Pull { .. } => None,
            Route::Wait { .. } => Some(Reply::Error(
                "TRYAGAIN the slot is moving to this node; retry".into(),
            )),
            Route::CrossSlot => Some(Reply::Error(
                "CROSSSLOT Keys in request don't hash to the same slot".into(),
            )),
            Route::Down { .. } => Some(Reply::Error("CLUSTERDOWN Hash slot not served".into())),
            Route::Moved { slot, owner } => Some(match self.node(owner) {
                Some(n) => Reply::Error(format!("MOVED {slot} {}", n.addr())),
                None => Reply::Error("CLUSTERDOWN Hash slot not served".into()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::topology::test_node as node;

    #[test]
    fn routes_keys_to_their_owner() {
        let t = Topology::create((0..3).map(node).collect()).unwrap();
        let me = t.nodes[0].id.clone();
        let v = View::new(&me, Some(t));
        // "foo" is slot 12182 (third node), "somekey" 11058 (third),
        // "{user1000}" 3443 (first).
        assert_eq!(v.route([&b"user1000"[..]]), Route::Here);
        assert_eq!(
            v.route([&b"foo"[..]]),
            Route::Moved {
                slot: 12182,
                owner: 2
            }
        );
        assert_eq!(
            v.refusal(v.route([&b"foo"[..]])),
            Some(Reply::Error("MOVED 12182 127.0.0.1:7002".into()))
        );
        assert_eq!(v.route([&b"foo"[..], b"somekey"]), Route::CrossSlot);
        assert_eq!(
            v.route([&b"{user1000}.a"[..], b"{user1000}.b"]),
            Route::Here
        );
        assert_eq!(v.route(std::iter::empty()), Route::Here);
        assert!(v.serves(0) && !v.serves(16383));
    }

    #[test]
    fn without_a_topology_every_slot_is_down() {
        let v = View::new(&format!("{:040x}", 1), None);
        assert_eq!(v.route([&b"foo"[..]]), Route::Down { slot: 12182 });
        assert_eq!(v.version(), 0);
        assert!(!v.serves(12182));
    }
}
