//! Commands that read and write (INCR, APPEND, SET NX, DEL) stay atomic
//! when many connections pipeline them at once, and the writes of many
//! connections share engine commits.
#![allow(clippy::unwrap_used)]

mod common;

use tern_server::config::AppendFsync;

fn info_field(c: &mut redis::Connection, section: &str, name: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(c).unwrap();
    common::info_field(&info, name)
}

#[test]
fn pipelined_read_modify_writes_from_many_connections_lose_no_update() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 20;
    const PER_PIPE: usize = 25;
    let s = common::start();
    std::thread::scope(|scope| {
        for t in 0..CLIENTS {
            let mut c = s.client();
            scope.spawn(move || {
                for r in 0..ROUNDS {
                    let mut p = redis::pipe();
                    for i in 0..PER_PIPE {
                        p.cmd("INCR").arg("ctr").ignore();
                        p.cmd("APPEND").arg("log").arg("x").ignore();
                        // Plain writes race the INCRs of other connections.
                        p.cmd("SET")
                            .arg(format!("k{t}"))
                            .arg(r * PER_PIPE + i)
                            .ignore();
                        // Exactly one SET NX per name wins.
                        p.cmd("SET")
                            .arg(format!("once{r}-{i}"))
                            .arg(t)
                            .arg("NX")
                            .ignore();
                    }
                    p.query::<()>(&mut c).unwrap();
                }
            });
        }
    });
    let mut c = s.client();
    let total = (CLIENTS * ROUNDS * PER_PIPE) as i64;
    let ctr: i64 = redis::cmd("GET").arg("ctr").query(&mut c).unwrap();
    assert_eq!(ctr, total);
    let len: i64 = redis::cmd("STRLEN").arg("log").query(&mut c).unwrap();
    assert_eq!(len, total);
    for t in 0..CLIENTS {
        let v: i64 = redis::cmd("GET")
            .arg(format!("k{t}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(v, (ROUNDS * PER_PIPE - 1) as i64);
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("once*").query(&mut c).unwrap();
    assert_eq!(keys.len(), ROUNDS * PER_PIPE);
    // DEL of the same key from every connection: exactly one deletes it.
    let deleted: i64 = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let mut c = s.client();
                scope.spawn(move || {
                    let mut n = 0i64;
                    for i in 0..ROUNDS * PER_PIPE {
                        n += redis::cmd("DEL")
                            .arg(format!("once{}-{}", i / PER_PIPE, i % PER_PIPE))
                            .query::<i64>(&mut c)
                            .unwrap();
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(deleted, (ROUNDS * PER_PIPE) as i64);
}

#[test]
fn synced_writes_of_many_connections_share_commits() {
    const CLIENTS: usize = 16;
    const WRITES: usize = 40;
    let s = common::start_with(|c| c.appendfsync = AppendFsync::Always);
    let mut c = s.client();
    let before = info_field(&mut c, "tern", "write_commits");
    std::thread::scope(|scope| {
        for t in 0..CLIENTS {
            let mut c = s.client();
            scope.spawn(move || {
                for i in 0..WRITES {
                    redis::cmd("INCR")
                        .arg("shared")
                        .query::<i64>(&mut c)
                        .unwrap();
                    redis::cmd("SET")
                        .arg(format!("{t}-{i}"))
                        .arg("v")
                        .query::<()>(&mut c)
                        .unwrap();
                }
            });
        }
    });
    let commits = info_field(&mut c, "tern", "write_commits") - before;
    let writes = (CLIENTS * WRITES * 2) as u64;
    println!("{writes} synced writes in {commits} commits");
    assert!(
        commits * 2 <= writes,
        "{commits} commits for {writes} writes from {CLIENTS} connections: writes were not grouped"
    );
    let shared: i64 = redis::cmd("GET").arg("shared").query(&mut c).unwrap();
    assert_eq!(shared, (CLIENTS * WRITES) as i64);
}

#[test]
fn an_oversized_key_fails_only_its_own_command_not_the_commit_group() {
    // A key over the engine's limit once made the whole group's commit
    // fail: every connection whose writes shared it got the error.
    let s = common::start();
    let long = "k".repeat(70 << 10);
    std::thread::scope(|scope| {
        let mut bad = s.client();
        let long = long.clone();
        scope.spawn(move || {
            for _ in 0..200 {
                let e = redis::cmd("SET")
                    .arg(&long)
                    .arg("x")
                    .query::<()>(&mut bad)
                    .unwrap_err();
                assert!(common::error_text(e).contains("key"), "unexpected error");
            }
        });
        for t in 0..4 {
            let mut c = s.client();
            scope.spawn(move || {
                for i in 0..200 {
                    let mut p = redis::pipe();
                    p.cmd("SET").arg(format!("{t}-{i}")).arg(i).ignore();
                    p.cmd("INCR").arg(format!("n{t}")).ignore();
                    p.query::<()>(&mut c).unwrap();
                }
            });
        }
    });
    let mut c = s.client();
    for t in 0..4 {
        let n: i64 = redis::cmd("GET")
            .arg(format!("n{t}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 200);
    }
    let e = redis::cmd("MSET")
        .arg("fine")
        .arg("1")
        .arg(&long)
        .arg("2")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(common::error_text(e).contains("key"));
    // MSET is all or nothing.
    let v: Option<String> = redis::cmd("GET").arg("fine").query(&mut c).unwrap();
    assert_eq!(v, None);
}

#[test]
fn del_that_fails_on_a_later_key_deletes_nothing() {
    let s = common::start();
    let mut c = s.client();
    let _: () = redis::cmd("SET")
        .arg("good")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let long = "k".repeat(70 << 10);
    assert!(redis::cmd("DEL")
        .arg("good")
        .arg(&long)
        .query::<i64>(&mut c)
        .is_err());
    let v: Option<String> = redis::cmd("GET").arg("good").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("1"));
}
