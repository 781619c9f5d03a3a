//! Data-driven tests of version building: `testdata/version/*`.
//!
//! Directives: `apply` applies the edit in its input to the version the
//! file has built so far and prints every error, every broken invariant and
//! the resulting shape; `check next=N` checks the invariants as recovery
//! does with next file number `N`; `reset` starts from an empty version. Regenerate the
//! expected outputs with `REWRITE=1 cargo test -p tern datadriven`.

use super::builder::VersionBuilder;
use super::{script, Version};

#[test]
fn version_building() {
    datadriven::walk("testdata/version", |f| {
        let mut v = Version::default();
        f.run(|case| -> String {
            match case.directive.as_str() {
                "reset" => {
                    v = Version::default();
                    script::shape(&v)
                }
                "apply" => {
                    let edit = match script::edit(&case.input) {
                        Ok(e) => e,
                        Err(e) => return format!("parse error: {e}\n"),
                    };
                    let mut builder = VersionBuilder::new(&v);
                    let mut out = String::new();
                    for e in builder.apply(&edit) {
                        out.push_str(&format!("error: {e}\n"));
                    }
                    v = builder.build();
                    for e in v.check_invariants(None) {
                        out.push_str(&format!("invariant: {e}\n"));
                    }
                    out + &script::shape(&v)
                }
                "check" => {
                    let next = case
                        .args
                        .get("next")
                        .and_then(|n| n.first())
                        .and_then(|n| n.parse().ok());
                    let errors: String = v
                        .check_invariants(next)
                        .iter()
                        .map(|e| format!("invariant: {e}\n"))
                        .collect();
                    if errors.is_empty() {
                        "ok\n".to_string()
                    } else {
                        errors
                    }
                }
                other => format!("unknown directive {other}\n"),
            }
        })
    });
}

/// GC adds one hop of lineage per round for a table compaction never
/// rewrites, so a chain can grow past any fixed bound: a long chain that
/// ends in a live file must still install, open and resolve.
#[test]
fn long_lineage_chain_is_valid_and_resolves() {
    let mut text = String::from("add L6 5 a..b\nblob add 1000 records=10 bytes=1000\n");
    let mut v = Version::default();
    let mut builder = VersionBuilder::new(&v);
    assert!(builder.apply(&script::edit(&text).unwrap()).is_empty());
    v = builder.build();
    for i in 0..100u64 {
        text = format!(
            "blob add {} records=10 bytes=1000\nblob retire {} -> {} base=0\n",
            1001 + i,
            1000 + i,
            1001 + i
        );
        let mut builder = VersionBuilder::new(&v);
        assert!(builder.apply(&script::edit(&text).unwrap()).is_empty());
        v = builder.build();
        assert_eq!(
            v.check_invariants(Some(5000)),
            vec![],
            "after {} hops",
            i + 1
        );
    }
    assert_eq!(v.resolve_blob(1000, 3), Ok((1100, 3, true)));
}
