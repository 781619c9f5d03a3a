//! Compaction filters a worker can rebuild from a job spec.

use std::collections::HashMap;
use std::sync::Arc;

use tern::compaction::{CompactionFilter, RemoteFilter};

/// Builds a filter from the parameters its store sent.
pub type FilterFactory =
    fn(params: &[u8]) -> std::result::Result<Arc<dyn CompactionFilter>, String>;

/// The filters a worker knows, by name. A job naming one it does not know
/// fails on that worker (and the store runs it itself).
#[derive(Debug, Clone, Default)]
pub struct FilterRegistry {
    factories: HashMap<String, FilterFactory>,
}

impl FilterRegistry {
    /// No filters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Knows `name` from now on.
    pub fn register(&mut self, name: &str, factory: FilterFactory) -> &mut Self {
        self.factories.insert(name.to_string(), factory);
        self
    }

    /// Rebuilds the filter `spec` describes.
    pub fn build(
        &self,
        spec: &RemoteFilter,
    ) -> std::result::Result<Arc<dyn CompactionFilter>, String> {
        let f = self.factories.get(&spec.name).ok_or_else(|| {
            format!(
                "this worker has no compaction filter named {:?}; run a worker built with it",
                spec.name
            )
        })?;
        f(&spec.params)
    }
}
