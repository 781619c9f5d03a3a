//! The entries a forward scan has read ahead of its caller, so that their
//! separated values can be fetched in one batch (see `blob/scan.rs`).
//!
//! The batch starts small, since a scan may stop after a few entries, and
//! doubles with each refill while the scan goes on.

use crate::error::{Error, Result};

/// Entries the first batch of a scan reads ahead.
const FIRST: usize = 8;
/// Largest batch.
const MAX: usize = 256;

/// One entry read ahead, with its value or the error reading it met.
pub struct Staged {
    /// The user key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Result<Vec<u8>>,
}

/// What follows the last entry of a batch.
pub enum After {
    /// The inner cursor sits on the last entry: carry on from it.
    Inner,
    /// The scan ends after the last entry, with the error that ended it if
    /// one did.
    End(Option<Error>),
}

/// The read-ahead queue of one iterator. It is active while it has an entry
/// at `pos`: the iterator then serves that entry instead of its inner
/// cursor, which sits on the last entry of the queue (or at the end).
pub struct ReadAhead {
    entries: Vec<Staged>,
    pos: usize,
    after: After,
    /// The next batch's size; `None` until the first batch after a seek.
    size: Option<usize>,
    /// The first batch after a seek, when the caller gave a hint.
    hinted_first: Option<usize>,
}

impl Default for ReadAhead {
    fn default() -> Self {
        Self::with_hint(None)
    }
}

impl ReadAhead {
    /// A queue whose first batch after each seek takes `hint` entries (the
    /// caller's expected scan length) rather than a few. One more than the
    /// hint: a caller that reads `hint` entries steps past the last one,
    /// and that step should not start a batch it will never read.
    pub fn with_hint(hint: Option<usize>) -> Self {
        ReadAhead {
            entries: Vec::new(),
            pos: 0,
            after: After::End(None),
            size: None,
            hinted_first: hint.map(|h| h.saturating_add(1).clamp(1, MAX)),
        }
    }

    /// Drops the queue; the next batch is a seek's first again.
    pub fn reset(&mut self) {
        self.clear();
        self.size = None;
    }

    /// Drops the queue, returning what was to follow it.
    fn clear(&mut self) -> After {
        self.entries.clear();
        self.pos = 0;
        std::mem::replace(&mut self.after, After::End(None))
    }

    /// How many entries the next batch takes. Without a hint each batch
    /// doubles the next; past a hinted first batch the scan outran its
    /// hint, so batches start small again.
    pub fn next_size(&mut self) -> usize {
        let (n, next) = match (self.size, self.hinted_first) {
            (None, Some(first)) => (first, FIRST),
            (size, _) => {
                let n = size.unwrap_or(FIRST);
                (n, (n * 2).min(MAX))
            }
        };
        self.size = Some(next);
        n
    }

    /// Installs a batch and what follows it.
    pub fn fill(&mut self, entries: Vec<Staged>, after: After) {
        self.entries = entries;
        self.pos = 0;
        self.after = after;
    }

    /// Whether the iterator is serving a read-ahead entry.
    pub fn is_active(&self) -> bool {
        self.pos < self.entries.len()
    }

    /// The entry being served.
    pub fn current(&self) -> Option<&Staged> {
        self.entries.get(self.pos)
    }

    /// If the current entry's value failed to read, drops the queue and
    /// returns the error.
    pub fn take_current_error(&mut self) -> Option<Error> {
        if self.current()?.value.is_ok() {
            return None;
        }
        let pos = std::mem::replace(&mut self.pos, 0);
        std::mem::take(&mut self.entries)
            .into_iter()
            .nth(pos)
            .and_then(|e| e.value.err())
    }

    /// Steps to the next entry: `Some(Ok)` when there is one, `Some(Err)`
    /// when its value failed (the queue is dropped), `None` when the queue
    /// is used up (then call `finish`).
    pub fn advance(&mut self) -> Option<Result<()>> {
        self.pos += 1;
        if self.pos >= self.entries.len() {
            return None;
        }
        Some(match self.take_current_error() {
            Some(e) => Err(e),
            None => Ok(()),
        })
    }

    /// Ends a used-up queue, returning what follows it.
    pub fn finish(&mut self) -> After {
        self.clear()
    }

    /// Drops the queue, returning the current entry's key: the caller moves
    /// its inner cursor back there (a change of direction).
    pub fn take_current_key(&mut self) -> Option<Vec<u8>> {
        let key = std::mem::take(&mut self.entries.get_mut(self.pos)?.key);
        self.clear();
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(a: &mut ReadAhead, n: usize) -> Vec<usize> {
        (0..n).map(|_| a.next_size()).collect()
    }

    #[test]
    fn batch_sizes_double_from_a_few_or_follow_the_hint() {
        let mut a = ReadAhead::default();
        assert_eq!(sizes(&mut a, 7), [8, 16, 32, 64, 128, 256, 256]);
        a.reset();
        assert_eq!(sizes(&mut a, 2), [8, 16]);
        // A hint of 15 gives 16 first; past it, batches start small and
        // double as without a hint (16 is not taken for a hinted first).
        let mut a = ReadAhead::with_hint(Some(15));
        assert_eq!(sizes(&mut a, 5), [16, 8, 16, 32, 64]);
        a.reset();
        assert_eq!(sizes(&mut a, 2), [16, 8]);
        assert_eq!(ReadAhead::with_hint(Some(0)).next_size(), 1);
        assert_eq!(ReadAhead::with_hint(Some(usize::MAX)).next_size(), MAX);
    }
}
