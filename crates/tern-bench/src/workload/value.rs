//! Value bytes: cheap pseudo-random printable data, and YCSB rows.

use rand::RngCore;

/// Fills `buf` with printable ASCII from `rng`: one call for the whole
/// buffer, then each random byte scaled into the 95 printable characters
/// (a multiply and shift the compiler vectorises). The client's own CPU is
/// shared with the engine under test, so it is kept small.
pub fn fill_printable<R: RngCore + ?Sized>(rng: &mut R, buf: &mut [u8]) {
    rng.fill_bytes(buf);
    for b in buf.iter_mut() {
        *b = b' ' + ((u16::from(*b) * 95) >> 8) as u8;
    }
}

/// db_bench-style value: the first half random, the rest repeating it, so
/// the value compresses to about half its size.
pub fn fill_compressible<R: RngCore + ?Sized>(rng: &mut R, buf: &mut [u8]) {
    let half = buf.len().div_ceil(2);
    let (a, b) = buf.split_at_mut(half);
    fill_printable(rng, a);
    for (i, x) in b.iter_mut().enumerate() {
        *x = a[i % half.max(1)];
    }
}

/// Encodes YCSB fields as one value: for each field, a little-endian u32
/// name length, the name, a u32 value length, the value.
pub fn encode_row(out: &mut Vec<u8>, fields: &[(String, Vec<u8>)]) {
    out.clear();
    for (name, value) in fields {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
}

/// Appends one field to a row in [`encode_row`]'s format, its value `len`
/// bytes that `fill` writes in place (no value buffer of its own).
pub fn push_field(out: &mut Vec<u8>, name: &str, len: usize, fill: impl FnOnce(&mut [u8])) {
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    let start = out.len();
    out.resize(start + len, 0);
    fill(&mut out[start..]);
}

/// Decodes a row written by [`encode_row`]; `None` if malformed.
pub fn decode_row(mut data: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let mut fields = Vec::new();
    let take = |data: &mut &[u8]| -> Option<Vec<u8>> {
        let len = u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as usize;
        let v = data.get(4..4 + len)?.to_vec();
        *data = &data[4 + len..];
        Some(v)
    };
    while !data.is_empty() {
        let name = String::from_utf8(take(&mut data)?).ok()?;
        let value = take(&mut data)?;
        fields.push((name, value));
    }
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn rows_round_trip() {
        let fields = vec![
            ("field0".to_string(), b"abc".to_vec()),
            ("field1".into(), vec![]),
        ];
        let mut out = Vec::new();
        encode_row(&mut out, &fields);
        assert_eq!(decode_row(&out), Some(fields));
        assert_eq!(decode_row(&out[..5]), None);
        let mut r = rand::rngs::SmallRng::seed_from_u64(1);
        let mut v = vec![0u8; 33];
        fill_compressible(&mut r, &mut v);
        assert!(v.iter().all(|b| (32..127).contains(b)));
        assert_eq!(v[..16], v[17..33]);
    }
}
