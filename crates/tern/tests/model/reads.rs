//! Keys, values and checked reads shared by the model tests.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::{Db, ReadOptions, Snapshot};

use crate::Model;

/// Key number `i` in one of four shapes, so blocks see short keys, long
/// keys sharing a long prefix (restart points, prefix compression), binary
/// bytes including 0x00 and 0xff, and keys that are prefixes of others.
pub fn key_for(i: u32) -> Vec<u8> {
    match i % 4 {
        0 => format!("k{i:04}").into_bytes(),
        1 => format!("{}/{i:06}", "tenant-0042/objects/by-id".repeat(4)).into_bytes(),
        2 => {
            let mut k = vec![0xff, 0x00];
            k.extend_from_slice(&i.to_be_bytes());
            k
        }
        _ => format!("k{:04}", i - 3).into_bytes()[..1 + (i as usize % 5)].to_vec(),
    }
}

/// Keys per atomic group.
pub const GROUP_WIDTH: u32 = 4;

/// Member `j` of group `g`.
pub fn group_key(g: u32, j: u32) -> Vec<u8> {
    format!("grp{g:03}/{j}").into_bytes()
}

/// A stable mix of two numbers, for values and check choices.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value written at `step` for the entry numbered `id`: names the step,
/// mostly short, one in twenty 500–3000 bytes (separated into blob files
/// when separation is on).
pub fn value_for(step: usize, id: u64) -> Vec<u8> {
    let h = mix(step as u64, id);
    let len = if h % 20 == 0 {
        500 + (h >> 8) as usize % 2500
    } else {
        (h >> 8) as usize % 64
    };
    let mut v = format!("v{step}-").into_bytes();
    v.resize(len.max(v.len()), b'a' + (step % 26) as u8);
    v
}

/// Everything a plain iterator sees, through `snap` if given.
pub fn scan(db: &Db, snap: Option<&Snapshot>) -> Model {
    scan_with(
        db,
        ReadOptions {
            snapshot: snap,
            ..Default::default()
        },
    )
}

/// Everything `opts` lets an iterator see.
pub fn scan_with(db: &Db, opts: ReadOptions<'_>) -> Model {
    let mut it = db.iter(opts).unwrap();
    let mut out = Model::new();
    it.seek_to_first();
    while it.valid() {
        out.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().unwrap();
    out
}

/// A bounded iteration, forwards or backwards, then a seek and a few mixed
/// steps (their choices drawn from `seed`), compared with `model`.
pub fn check_iter(
    db: &Db,
    snap: Option<&Snapshot>,
    model: &Model,
    (lower, upper, reverse): (Option<Vec<u8>>, Option<Vec<u8>>, bool),
    seed: u64,
    ctx: &str,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let in_range =
        |k: &Vec<u8>| lower.as_ref().is_none_or(|l| k >= l) && upper.as_ref().is_none_or(|u| k < u);
    let expect: Vec<(&Vec<u8>, &Vec<u8>)> = model.iter().filter(|(k, _)| in_range(k)).collect();
    let opts = ReadOptions {
        snapshot: snap,
        lower_bound: lower.clone(),
        upper_bound: upper.clone(),
        // A hint changes only how values are batched, never what is read.
        scan_len_hint: rng.gen_bool(0.5).then(|| rng.gen_range(1..64)),
        serial_reads: rng.gen_bool(0.5),
        // Head-only walks see a prefix of each separated value.
        value_heads: rng.gen_bool(0.2),
    };
    let heads = opts.value_heads;
    let mut it = db.iter(opts).unwrap();
    let mut got = Vec::new();
    let mut head_lens = Vec::new();
    let mut entry = |it: &tern::DbIterator| {
        got.push((it.key().to_vec(), it.value().to_vec()));
        head_lens.push(it.value_is_head().then_some(it.value().len()));
    };
    if reverse {
        it.seek_to_last();
        while it.valid() {
            entry(&it);
            it.prev();
        }
        got.reverse();
        head_lens.reverse();
    } else {
        it.seek_to_first();
        while it.valid() {
            entry(&it);
            it.next();
        }
    }
    it.status().unwrap();
    assert!(
        heads || head_lens.iter().all(Option::is_none),
        "{ctx}: heads only when asked"
    );
    let want: Vec<(Vec<u8>, Vec<u8>)> = expect
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let len = head_lens.get(i).copied().flatten().unwrap_or(v.len());
            ((*k).clone(), v[..len.min(v.len())].to_vec())
        })
        .collect();
    assert_eq!(
        got.len(),
        want.len(),
        "{ctx}: iteration length (lower {lower:?}, upper {upper:?})"
    );
    assert!(
        got == want,
        "{ctx}: iteration contents differ (lower {lower:?}, upper {upper:?})"
    );
    // A seek and a few mixed steps.
    let target = key_for(rng.gen_range(0..400));
    it.seek(&target);
    let mut pos = expect.iter().position(|(k, _)| **k >= target);
    for _ in 0..6 {
        match pos {
            Some(p) => {
                assert!(it.valid(), "{ctx}: seek/step should be valid at {p}");
                assert_eq!(
                    it.key(),
                    expect[p].0.as_slice(),
                    "{ctx}: key after seek/step"
                );
                let want = expect[p].1.as_slice();
                let want = if it.value_is_head() {
                    &want[..it.value().len().min(want.len())]
                } else {
                    want
                };
                assert_eq!(it.value(), want, "{ctx}: value after seek/step");
            }
            None => {
                assert!(!it.valid(), "{ctx}: iterator should be exhausted");
                break;
            }
        }
        if rng.gen_bool(0.5) {
            it.next();
            pos = pos.map(|p| p + 1).filter(|&p| p < expect.len());
        } else {
            it.prev();
            pos = pos.and_then(|p| p.checked_sub(1));
        }
    }
}
