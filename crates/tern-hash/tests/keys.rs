//! Walking every key, read-modify-writes that delete, and waiting for
//! durability.

use std::collections::{HashMap, HashSet};

use tern::io::MemFs;
use tern_hash::{HashOptions, HashStore, Update};

#[test]
fn a_scan_returns_every_live_key_once_from_memory_and_disk() {
    let store = HashStore::open_with_fs(MemFs::new(), "/db", HashOptions::small()).expect("open");
    let mut s = store.session();
    let mut model = HashMap::new();
    for i in 0..6000u64 {
        let key = format!("k{}", i % 1500).into_bytes();
        if i % 11 == 0 {
            s.delete(&key).expect("delete");
            model.remove(&key);
        } else {
            let v = format!("v{i}").into_bytes();
            s.upsert(&key, &v).expect("upsert");
            model.insert(key, v);
        }
    }
    assert!(store.stats().head > 64, "part of the log is on disk");
    let mut got = Vec::new();
    let mut cursor = 0;
    let mut calls = 0;
    loop {
        cursor = s.scan(cursor, 100, usize::MAX, &mut got).expect("scan");
        calls += 1;
        if cursor == 0 {
            break;
        }
    }
    assert!(calls > 5, "the walk came in pages");
    let keys: HashSet<_> = got.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys.len(), got.len(), "no key twice");
    let got: HashMap<_, _> = got.into_iter().collect();
    assert_eq!(got, model);
}

#[test]
fn update_deletes_and_keeps() {
    let store = HashStore::open_with_fs(MemFs::new(), "/db", HashOptions::small()).expect("open");
    let mut s = store.session();
    s.upsert(b"a", b"1").expect("upsert");
    assert_eq!(
        s.update(b"a", |old| {
            assert_eq!(old, Some(&b"1"[..]));
            Update::Delete
        })
        .expect("update"),
        Update::Delete
    );
    assert_eq!(s.get(b"a").expect("get"), None);
    assert_eq!(
        s.update(b"a", |old| {
            assert_eq!(old, None);
            Update::Keep
        })
        .expect("update"),
        Update::Keep
    );
    assert_eq!(s.get(b"a").expect("get"), None);
    // Deleting a key that lives on disk only.
    s.upsert(b"cold", b"x").expect("upsert");
    for i in 0..3000u64 {
        s.upsert(format!("filler{i}").as_bytes(), &[0u8; 40])
            .expect("upsert");
    }
    assert_eq!(
        s.update(b"cold", |old| {
            assert_eq!(old, Some(&b"x"[..]));
            Update::Delete
        })
        .expect("update"),
        Update::Delete
    );
    assert_eq!(s.get(b"cold").expect("get"), None);
}

#[test]
fn waiting_for_a_sync_point_makes_writes_durable_and_shares_checkpoints() {
    let fs = MemFs::new();
    {
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let store = &store;
                scope.spawn(move || {
                    let mut s = store.session();
                    for i in 0..50u64 {
                        s.upsert(format!("t{t}-{i}").as_bytes(), b"v")
                            .expect("upsert");
                        let point = store.sync_point();
                        store.wait_durable(point).expect("durable");
                    }
                });
            }
        });
        let taken = store.stats().checkpoints;
        assert!(
            taken > 0 && taken <= 200,
            "{taken} checkpoints for 200 waits"
        );
        fs.crash();
    }
    let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("reopen");
    let mut s = store.session();
    for t in 0..4u64 {
        for i in 0..50u64 {
            assert_eq!(
                s.get(format!("t{t}-{i}").as_bytes())
                    .expect("get")
                    .as_deref(),
                Some(&b"v"[..])
            );
        }
    }
}
