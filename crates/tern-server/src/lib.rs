//! `tern serve`: a Redis-protocol (RESP2/RESP3) server on the Tern engine.
//!
//! Each connection is a tokio task that parses requests
//! ([`resp::parser`]), hands the ones that touch the engine to the
//! committer (writes) or the read pool (reads) ([`exec`], [`commands`]) and
//! writes the replies back; the writes of every connection are committed
//! to the engine in groups. Redis keys live in their own
//! namespace of the engine's key space, with expiry stored in the value
//! ([`keyspace`], `docs/format/server.md`). In cluster mode ([`cluster`],
//! `docs/cluster.md`) each batch is first routed against the node's view
//! of the topology ([`routing`]). Start a server with [`start`].

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod cluster;
pub mod commands;
pub mod config;
pub mod connection;
pub mod exec;
pub mod expiry;
pub mod glob;
pub mod hash;
pub mod http;
pub mod key_cache;
pub mod keyspace;
pub mod members;
pub mod metrics;
pub mod pending;
pub mod process;
pub mod resp;
pub mod routing;
pub mod server;
pub mod state;
pub mod store;
pub mod tunables;
pub mod watch;

pub use config::{AppendFsync, Config, EngineKind};
pub use server::{start, ServerError, ServerHandle, StartOptions};
