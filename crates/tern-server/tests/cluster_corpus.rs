//! Replays the cluster decoders' fuzz corpus (`fuzz/corpus/cluster`:
//! topology documents, cluster records, value dumps, bulk copy file names
//! and ingest intents)
//! through the fuzz harness, and checks that the seeds decode as they
//! should, so `cargo test` catches regressions without the fuzzer.
#![allow(clippy::unwrap_used)]

use tern_server::cluster::fuzz::decode;
use tern_server::cluster::topology::Topology;
use tern_server::commands::dump::Dump;
use tern_server::keyspace::ClusterRecord;

#[test]
fn cluster_fuzz_corpus_replays_without_panics() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/cluster");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        decode(&data);
        for cut in 0..data.len().min(64) {
            decode(&data[..cut]);
        }
        n += 1;
    }
    assert!(n >= 5, "the corpus should hold the seed inputs, found {n}");
    let seed = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let t = Topology::decode(&seed("topology-with-migration")[1..]).unwrap();
    assert_eq!(t.migrations.len(), 1);
    assert!(Topology::decode(&seed("topology-overlap")[1..]).is_err());
    assert!(ClusterRecord::decode(&seed("record")[1..]).is_ok());
    assert!(ClusterRecord::decode(&seed("record-bad-id")[1..]).is_err());
    assert_eq!(
        tern_server::cluster::ingest::parse_file_name(&seed("file-name")[1..]).map(|f| f.number),
        Some(42)
    );
    assert_eq!(
        tern_server::keyspace::decode_ingest_intent(&seed("ingest-intent")[1..]).unwrap(),
        (5, 9)
    );
    for name in ["dump-hash", "dump-list", "dump-zset", "dump-string"] {
        let d = Dump::decode(&seed(name)[1..]).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(Dump::decode(&d.encode()).unwrap(), d);
    }
}
