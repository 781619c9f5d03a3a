//! Offline tools over a store directory, built on the engine's own readers:
//! [`check`] verifies every file a store depends on, [`dump`] prints what
//! the files hold. Both read only; neither opens the store.

pub mod check;
pub mod dump;
pub mod show;

use crate::format::internal_key::{self};

/// Formats an internal key for messages: escaped user key, sequence, kind.
pub fn describe_key(ikey: &[u8]) -> String {
    if ikey.is_empty() {
        return "(none)".to_string();
    }
    match internal_key::parse(ikey) {
        Ok(p) => format!("{} @{} {:?}", escape_bytes(p.user_key), p.seq, p.kind),
        Err(_) => format!("{} (malformed)", escape_bytes(ikey)),
    }
}

/// Escapes bytes for display: printable ASCII as is, backslash doubled,
/// everything else as `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}
