//! The stress key space and the values derived from `(slot, version)`.
//!
//! Slots `0..keys` are plain keys `k<slot>`; slots `keys..keys + groups` are
//! atomic groups: group `g` is [`GROUP_WIDTH`] keys `g<g>.<j>` that are only
//! ever written together, in one batch, with the same value.

use crate::expected::KeyState;

/// Keys per atomic group.
pub const GROUP_WIDTH: usize = 4;

/// The key of plain slot `k`.
pub fn plain_key(k: usize) -> Vec<u8> {
    format!("k{k:08}").into_bytes()
}

/// The key of member `j` of group `g`.
pub fn group_key(g: usize, j: usize) -> Vec<u8> {
    format!("g{g:06}.{j}").into_bytes()
}

/// The prefix shared by the members of group `g` (an iterator bound).
pub fn group_prefix(g: usize) -> Vec<u8> {
    format!("g{g:06}.").into_bytes()
}

/// The plain slot a key names, if it is a plain key.
pub fn parse_plain_key(key: &[u8]) -> Option<usize> {
    let rest = key.strip_prefix(b"k")?;
    if rest.len() != 8 {
        return None;
    }
    std::str::from_utf8(rest).ok()?.parse().ok()
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value slot `slot` holds at `version`: a readable prefix naming both,
/// then filler derived from them. Mostly 16–80 bytes; one version in 20 gets
/// 1–4 KiB (a large value; with key-value separation these go to blobs).
pub fn value(slot: usize, version: u64) -> Vec<u8> {
    let h = mix(((slot as u64) << 32) ^ version);
    let len = if h % 20 == 0 {
        1024 + (h >> 8) as usize % 3072
    } else {
        16 + (h >> 8) as usize % 64
    };
    let mut v = format!("{slot:x}.{version:x}.").into_bytes();
    let mut x = h;
    while v.len() < len {
        x = mix(x);
        v.extend(x.to_le_bytes().iter().map(|b| b'a' + b % 26));
    }
    v.truncate(len);
    v
}

/// True when `got` is what `slot` holds in `state`.
pub fn matches(slot: usize, state: KeyState, got: Option<&[u8]>) -> bool {
    match got {
        None => !state.exists(),
        Some(v) => state.exists() && v == value(slot, state.version()).as_slice(),
    }
}

/// A short description of a value read from the store, for reports.
pub fn describe(got: Option<&[u8]>) -> String {
    match got {
        None => "absent".to_string(),
        Some(v) => {
            let head: String = v
                .iter()
                .take(24)
                .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
                .collect();
            format!("{} bytes \"{head}\"", v.len())
        }
    }
}

/// A description of an expected state, for reports.
pub fn describe_state(state: KeyState) -> String {
    if state.exists() {
        format!("version {}", state.version())
    } else if state.version() == 0 {
        "never written".to_string()
    } else {
        format!("deleted at version {}", state.version())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_deterministic_and_distinct() {
        assert_eq!(value(7, 3), value(7, 3));
        assert_ne!(value(7, 3), value(7, 4));
        assert_ne!(value(7, 3), value(8, 3));
        assert!(matches(7, KeyState::new(3, true), Some(&value(7, 3))));
        assert!(!matches(7, KeyState::new(3, false), Some(&value(7, 3))));
        assert!(matches(7, KeyState::ABSENT, None));
        assert_eq!(parse_plain_key(&plain_key(1234)), Some(1234));
        let lens: Vec<usize> = (0..200).map(|v| value(1, v).len()).collect();
        assert!(lens.iter().any(|&l| l >= 1024));
        assert!(lens.iter().all(|&l| l >= 16));
    }
}
