//! Named points in the engine where a test can run code, to force an
//! interleaving that would otherwise depend on thread timing (RocksDB's
//! `TEST_SYNC_POINT`). Outside `cfg(test)` this is a zero-sized no-op.

#[cfg(test)]
pub use hooks::SyncPoints;
#[cfg(not(test))]
pub use noop::SyncPoints;

#[cfg(not(test))]
mod noop {
    /// No hooks outside tests.
    #[derive(Default)]
    pub struct SyncPoints;

    impl SyncPoints {
        /// Does nothing.
        #[inline(always)]
        pub fn hit(&self, _name: &'static str) {}
    }
}

#[cfg(test)]
mod hooks {
    use std::collections::HashMap;

    use parking_lot::Mutex;

    type Hook = Box<dyn FnOnce() + Send>;

    /// One-shot hooks keyed by point name.
    #[derive(Default)]
    pub struct SyncPoints {
        hooks: Mutex<HashMap<&'static str, Hook>>,
    }

    impl SyncPoints {
        /// Runs `f` the next time the engine reaches `name`.
        pub fn set(&self, name: &'static str, f: impl FnOnce() + Send + 'static) {
            self.hooks.lock().insert(name, Box::new(f));
        }

        /// Called by the engine at `name`: runs and removes its hook, if any.
        pub fn hit(&self, name: &'static str) {
            let hook = self.hooks.lock().remove(name);
            if let Some(f) = hook {
                f();
            }
        }
    }
}
