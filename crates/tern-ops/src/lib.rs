//! Random operation streams for Tern's test harnesses, and what the
//! harnesses share around them.
//!
//! The model test (`crates/tern/tests/model`), `tern stress` and
//! `tern stress --sim` all execute the same [`Op`]s, drawn by one
//! [`Generator`] from named [`Weights`], against a store opened with
//! [`random_settings`]. A run is a [`History`]: its seed, its settings and
//! its operations, written as text, so a failing run can be saved, cut down
//! by [`shrink`] and replayed.
//!
//! This crate knows nothing of the engine: keys are numbers each executor
//! maps to its own key shapes, settings are `name = value` text that
//! `tern::Settings::set` parses, crash modes and fault kinds are indices
//! into the executor's own lists. That keeps it usable from the engine's
//! own tests, which cannot depend on a crate that depends on the engine.
//!
//! A failed history goes through [`save_and_shrink`]; every harness adds
//! its counts to the CI run summary with [`ci_summary`]. The history
//! format is specified in `docs/format/history.md`.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod failure;
mod generate;
mod history;
mod op;
mod settings;
mod shrink;
mod summary;
mod weights;

pub use failure::{save_and_shrink, SaveTo};
pub use generate::{Generator, Profile};
pub use history::History;
pub use op::{Entry, Op, Recovery, ScanBounds, Target};
pub use settings::{random_settings, Scale};
pub use shrink::{shrink, Budget, ShrinkReport};
pub use summary::ci_summary;
pub use weights::Weights;
