//! Workloads: YCSB's core workload, db_bench's benchmarks (mixgraph
//! included) and trace replay.

pub mod dbbench;
pub mod mixgraph;
pub mod trace;
pub mod tracegen;
pub mod value;
pub mod ycsb;
