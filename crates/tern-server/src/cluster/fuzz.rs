//! Fuzz harness for the cluster's decoders (`fuzz/fuzz_targets/cluster.rs`,
//! and the corpus replay test): the topology document a node reads from
//! etcd, the cluster record and ingest intents it reads from its store,
//! the dump of a value another node sends it while a slot moves, and the
//! names of the files of a bulk copy part. Arbitrary bytes
//! must decode to something that passes the checks, or to an error, never
//! a panic; whatever decodes routes every slot without panicking.

use super::topology::Topology;
use super::view::View;
use crate::keyspace::ClusterRecord;

/// Decodes `data`: the first byte picks the decoder.
pub fn decode(data: &[u8]) {
    let Some((which, body)) = data.split_first() else {
        return;
    };
    if which % 5 == 4 {
        if let Some(f) = super::ingest::parse_file_name(body) {
            assert_eq!(f.file_name().as_bytes(), body);
        }
        if let Ok((a, b)) = crate::keyspace::decode_ingest_intent(body) {
            assert_eq!(crate::keyspace::encode_ingest_intent(a, b), body);
        }
        return;
    }
    if which % 5 == 2 {
        crate::commands::dump::fuzz(body);
        return;
    }
    if which % 5 == 1 {
        if let Ok(r) = ClusterRecord::decode(body) {
            assert_eq!(ClusterRecord::decode(&r.encode()).as_ref(), Ok(&r));
        }
        return;
    }
    let Ok(t) = Topology::decode(body) else {
        return;
    };
    // What decodes re-encodes to the same document and routes every slot.
    assert_eq!(Topology::decode(&t.encode()).as_ref(), Ok(&t));
    let me = t.nodes.first().map(|n| n.id.clone()).unwrap_or_default();
    let view = View::new(&me, Some(t));
    for slot in 0..super::slot::SLOTS as u16 {
        let _ = view.owner(slot);
    }
    let _ = view.route([&body[..body.len().min(8)]]);
}
