//! Output: YCSB-cpp-shaped text, JSON, and a self-contained HTML report.

pub mod html;
pub mod json;
pub mod text;

pub use json::Report;
