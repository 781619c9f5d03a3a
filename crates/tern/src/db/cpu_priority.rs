//! Lowering the CPU priority of background threads
//! (`Settings::background_cpu_priority`), so that compaction and GC take
//! the processor only when readers and writers leave it.

use crate::options::CpuPriority;

/// Lowers the calling thread to `priority`; threads it starts afterwards
/// inherit it. Only ever lowers: `Normal` leaves the thread as it is.
/// Off Linux it does nothing.
pub fn lower_current_thread(priority: CpuPriority) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let result = match priority {
            CpuPriority::Normal => return Ok(()),
            CpuPriority::Low => {
                // SAFETY: gettid has no preconditions and cannot fail.
                let tid = unsafe { libc::gettid() };
                // On Linux a thread id names one thread to setpriority,
                // so this sets the nice value of this thread alone.
                // SAFETY: plain integer arguments.
                unsafe { libc::setpriority(libc::PRIO_PROCESS as _, tid as libc::id_t, 19) }
            }
            CpuPriority::Idle => {
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: pid 0 is the calling thread; `param` is an
                // initialised struct the call only reads.
                unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) }
            }
        };
        if result == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = priority;
        Ok(())
    }
}

/// The calling thread's id, as `/proc/self/task` names it.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn this_thread_id() -> String {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }.to_string()
}

/// The scheduling policy and nice value of thread `tid` of this process,
/// from `/proc` (fields 41 and 19 of its `stat`); `None` once it has ended.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn thread_policy_and_nice(tid: &str) -> Option<(u32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces.
    let after_name = &stat[stat.rfind(')').expect("stat has a name") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // `after_name` starts at field 3.
    let nice = fields[19 - 3].parse().expect("nice is a number");
    let policy = fields[41 - 3].parse().expect("policy is a number");
    Some((policy, nice))
}

#[cfg(all(test, target_os = "linux"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lowered_in_a_new_thread(priority: CpuPriority) -> ((u32, i32), (u32, i32)) {
        std::thread::spawn(move || {
            lower_current_thread(priority).unwrap();
            let own = thread_policy_and_nice(&this_thread_id()).unwrap();
            // A thread started now inherits the lowered priority.
            let child = std::thread::spawn(|| thread_policy_and_nice(&this_thread_id()).unwrap())
                .join()
                .unwrap();
            (own, child)
        })
        .join()
        .unwrap()
    }

    #[test]
    fn low_sets_nice_19_and_idle_sets_sched_idle_for_the_thread_and_its_children() {
        let (own, child) = lowered_in_a_new_thread(CpuPriority::Low);
        assert_eq!(own, (libc::SCHED_OTHER as u32, 19));
        assert_eq!(child, own);
        let (own, child) = lowered_in_a_new_thread(CpuPriority::Idle);
        assert_eq!(own.0, libc::SCHED_IDLE as u32);
        assert_eq!(child.0, libc::SCHED_IDLE as u32);
        let (own, _) = lowered_in_a_new_thread(CpuPriority::Normal);
        assert_eq!(own.0, libc::SCHED_OTHER as u32);
    }

    #[test]
    fn lowering_one_thread_leaves_the_caller_alone() {
        let me = this_thread_id();
        let before = thread_policy_and_nice(&me).unwrap();
        lowered_in_a_new_thread(CpuPriority::Idle);
        lowered_in_a_new_thread(CpuPriority::Low);
        assert_eq!(thread_policy_and_nice(&me).unwrap(), before);
    }
}
