//! Runs Python scripts that drive a server with redis-py, for the tests of
//! `tern serve` and of cluster mode: bounded in time, failing with what
//! the script printed, and skipped only in a run declared partial.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `script` with `args` under python3 once `import` (a module of
/// redis-py) imports, and returns its stdout; `None` when redis-py is
/// missing and `TERN_PARTIAL=1` allows skipping. Panics on a non-zero exit
/// or a run past `limit`, printing what the script wrote.
pub fn run_redis_py(
    script: &str,
    args: &[String],
    import: &str,
    limit: Duration,
) -> Option<String> {
    let has = Command::new("python3")
        .args(["-c", &format!("import {import}")])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        assert!(
            std::env::var("TERN_PARTIAL").is_ok_and(|v| v == "1"),
            "redis-py is not installed; run scripts/test.sh (it installs it), \
             or set TERN_PARTIAL=1 to skip this part knowingly"
        );
        eprintln!("SKIPPED (TERN_PARTIAL=1): redis-py is not installed");
        return None;
    }
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).expect("python3 runs");
            s
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("python3 runs")));
    let stderr = drain(Box::new(child.stderr.take().expect("python3 runs")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("python3 runs") {
            break Some(status);
        }
        if Instant::now() > deadline {
            child.kill().expect("python3 runs");
            child.wait().expect("python3 runs");
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (
        stdout.join().expect("python3 runs"),
        stderr.join().expect("python3 runs"),
    );
    let status = status.unwrap_or_else(|| {
        panic!("python ran past {limit:?}:\n{stdout}{stderr}");
    });
    assert!(
        status.success(),
        "python failed ({status}):\n{stdout}{stderr}"
    );
    Some(stdout)
}
