//! Syncing a file being written from another open file description, for
//! the local file system's writers (buffered and direct alike).

use std::fs::File;
use std::io;

use super::FileSync;

/// A second open file description of a file being written: `fdatasync` on
/// it covers everything the writer flushed.
pub(super) struct PosixSync(pub(super) File);

impl FileSync for PosixSync {
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for as long as `self.0` lives, and
        // sync_file_range only reads its integer arguments.
        let rc =
            unsafe { libc::sync_file_range(self.0.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
