//! Redis Cluster's key → slot mapping, shared with the client
//! (`tern_client::slot`): a node and its clients must agree on it bit for
//! bit.

pub use tern_client::slot::{crc16, hash_tag, key_slot, SLOTS};
