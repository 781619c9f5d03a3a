use super::*;
use rand::{Rng, SeedableRng};

fn bytewise(a: &[u8], b: &[u8]) -> Ordering {
    a.cmp(b)
}

fn build(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
    let mut b = BlockBuilder::new(interval);
    for (k, v) in entries {
        b.add(k, v);
    }
    let est = b.estimated_size();
    let data = b.finish().to_vec();
    assert_eq!(est, data.len());
    Arc::new(Block::new(data).unwrap())
}

fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..n)
        .map(|i| {
            (
                format!("key{:05}", i * 2).into_bytes(),
                format!("value-{i}").into_bytes(),
            )
        })
        .collect()
}

#[test]
fn roundtrip_forward_and_backward() {
    for interval in [1, 2, 3, 16] {
        let es = entries(100);
        let block = build(&es, interval);
        let mut it = BlockIter::new(block, bytewise);
        it.seek_to_first();
        for (k, v) in &es {
            assert!(it.valid());
            assert_eq!(it.key(), &k[..]);
            assert_eq!(it.value(), &v[..]);
            it.next();
        }
        assert!(!it.valid());
        it.seek_to_last();
        for (k, v) in es.iter().rev() {
            assert!(it.valid());
            assert_eq!(it.key(), &k[..]);
            assert_eq!(it.value(), &v[..]);
            it.prev();
        }
        assert!(!it.valid());
        it.status().unwrap();
    }
}

#[test]
fn seek_at_restart_boundaries() {
    let es = entries(64);
    for interval in [1, 4, 16] {
        let block = build(&es, interval);
        let mut it = BlockIter::new(block, bytewise);
        for (i, (k, _)) in es.iter().enumerate() {
            // Exact key.
            it.seek(k);
            assert_eq!(it.key(), &k[..], "interval {interval} i {i}");
            // Just before the key: lands on it.
            let mut before = k.clone();
            *before.last_mut().unwrap() -= 1;
            it.seek(&before);
            assert_eq!(it.key(), &k[..]);
            // Just after: lands on the next one.
            let mut after = k.clone();
            after.push(0);
            it.seek(&after);
            if i + 1 < es.len() {
                assert_eq!(it.key(), &es[i + 1].0[..]);
                it.prev();
                assert_eq!(it.key(), &k[..]);
            } else {
                assert!(!it.valid());
            }
            it.seek_for_prev(&after);
            assert_eq!(it.key(), &k[..]);
            it.seek_for_prev(&before);
            if i == 0 {
                assert!(!it.valid());
            } else {
                assert_eq!(it.key(), &es[i - 1].0[..]);
            }
        }
        it.seek(b"zzz");
        assert!(!it.valid());
        it.seek(b"");
        assert_eq!(it.key(), &es[0].0[..]);
        it.status().unwrap();
    }
}

#[test]
fn empty_block() {
    let block = build(&[], 16);
    assert!(block.is_empty());
    let mut it = BlockIter::new(block, bytewise);
    it.seek_to_first();
    assert!(!it.valid());
    it.seek_to_last();
    assert!(!it.valid());
    it.seek(b"a");
    assert!(!it.valid());
    it.seek_for_prev(b"a");
    assert!(!it.valid());
    it.status().unwrap();
}

#[test]
fn builder_reset_reuses() {
    let mut b = BlockBuilder::new(4);
    b.add(b"a", b"1");
    b.finish();
    b.reset();
    assert!(b.is_empty());
    b.add(b"b", b"2");
    let block = Arc::new(Block::new(b.finish().to_vec()).unwrap());
    let mut it = BlockIter::new(block, bytewise);
    it.seek_to_first();
    assert_eq!((it.key(), it.value()), (&b"b"[..], &b"2"[..]));
    it.next();
    assert!(!it.valid());
}

#[test]
fn bad_restart_arrays_rejected() {
    assert!(Block::new(vec![]).is_err());
    assert!(Block::new(vec![0, 0, 0, 0]).is_err()); // zero restarts
    assert!(Block::new(vec![1, 0, 0, 0]).is_err()); // count too large
    let mut d = vec![];
    put_fixed32(&mut d, 5);
    put_fixed32(&mut d, 1);
    assert!(Block::new(d).is_err()); // first restart not 0
}

/// Random garbage and random mutations of valid blocks must never panic
/// or hang.
#[test]
fn garbage_never_panics() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let good = build(&entries(40), 3).data().to_vec();
    for round in 0..3000 {
        let data: Vec<u8> = if round % 2 == 0 {
            let mut d = good.clone();
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..d.len());
                d[i] = rng.gen();
            }
            d
        } else {
            let n = rng.gen_range(0..64);
            (0..n).map(|_| rng.gen()).collect()
        };
        let Ok(block) = Block::new(data) else {
            continue;
        };
        let mut it = BlockIter::new(Arc::new(block), bytewise);
        it.seek_to_first();
        let mut steps = 0;
        while it.valid() && steps < 1000 {
            it.next();
            steps += 1;
        }
        it.seek_to_last();
        steps = 0;
        while it.valid() && steps < 1000 {
            it.prev();
            steps += 1;
        }
        it.seek(b"key00040");
        it.seek_for_prev(b"key00041");
    }
}
