//! The Redis serialization protocol: request parsing and reply encoding.

pub mod fuzz;
pub mod out;
pub mod parser;
pub mod reply;

pub use out::Out;
pub use parser::{Args, Limits, Parser, ProtocolError, Step};
pub use reply::Reply;
