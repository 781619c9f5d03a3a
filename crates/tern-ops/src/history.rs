//! A run as a text file: the harness, its seed, the settings, and every
//! operation, one per line (`docs/format/history.md`).

use std::fmt::Write as _;
use std::path::Path;

use crate::op::Op;

/// The first line of every history file.
const MAGIC: &str = "tern-history 1";

/// Everything needed to run the same operations again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct History {
    /// The executor that runs it (`model`, `sim`).
    pub harness: String,
    /// The seed the run was drawn from (settings and operations); a
    /// replay reads everything from the file, the seed names the run.
    pub seed: u64,
    /// Plain keys (key numbers are `0..keys`).
    pub keys: u32,
    /// Engine settings, `tern::Settings::set` names and text values.
    pub settings: Vec<(String, String)>,
    /// Parameters of the executor (`name value`), e.g. `no_wal 1`.
    pub params: Vec<(String, String)>,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

impl History {
    /// The value of executor parameter `name`, if set.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Parameter `name` as a number, `default` when absent.
    pub fn param_num<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.param(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("history parameter {name} = {v:?}: not a number")),
        }
    }

    /// The history as text; `comment` lines go first, after `# `.
    pub fn to_text(&self, comment: &str) -> String {
        let mut s = String::new();
        for line in comment.lines() {
            let _ = writeln!(s, "# {line}");
        }
        let _ = writeln!(s, "{MAGIC}");
        let _ = writeln!(s, "harness {}", self.harness);
        let _ = writeln!(s, "seed {}", self.seed);
        let _ = writeln!(s, "keys {}", self.keys);
        for (n, v) in &self.params {
            let _ = writeln!(s, "param {n} {v}");
        }
        for (n, v) in &self.settings {
            let _ = writeln!(s, "set {n} {v}");
        }
        let _ = writeln!(s, "ops {}", self.ops.len());
        for op in &self.ops {
            let _ = writeln!(s, "{op}");
        }
        s
    }

    /// Parses [`History::to_text`]'s output. Blank lines and lines starting
    /// with `#` are skipped; an error names the line.
    pub fn parse(text: &str) -> Result<History, String> {
        let mut h = History::default();
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        match lines.next() {
            Some((_, MAGIC)) => {}
            Some((n, l)) => {
                return Err(format!(
                    "line {n}: {l:?} is not {MAGIC:?}: not a history file"
                ))
            }
            None => return Err("empty history".into()),
        }
        let mut count = None;
        for (n, line) in lines.by_ref() {
            let at = |e: String| format!("line {n}: {e}");
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            let rest = rest.trim();
            let pair = || {
                rest.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.trim().to_string()))
                    .ok_or_else(|| at(format!("{word}: expected NAME VALUE")))
            };
            match word {
                "harness" => h.harness = rest.to_string(),
                "seed" => h.seed = rest.parse().map_err(|_| at(format!("seed {rest:?}")))?,
                "keys" => h.keys = rest.parse().map_err(|_| at(format!("keys {rest:?}")))?,
                "param" => h.params.push(pair()?),
                "set" => h.settings.push(pair()?),
                "ops" => {
                    count = Some(
                        rest.parse::<usize>()
                            .map_err(|_| at(format!("ops {rest:?}")))?,
                    );
                    break;
                }
                other => return Err(at(format!("unknown header line {other:?}"))),
            }
        }
        let Some(count) = count else {
            return Err("no `ops` line: the history has no operations section".into());
        };
        for (n, line) in lines {
            h.ops
                .push(line.parse().map_err(|e| format!("line {n}: {e}"))?);
        }
        if h.ops.len() != count {
            return Err(format!(
                "the header says {count} operations but {} follow: the file is cut short or edited",
                h.ops.len()
            ));
        }
        Ok(h)
    }

    /// Reads a history file.
    pub fn read(path: &Path) -> Result<History, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading history {}: {e}", path.display()))?;
        History::parse(&text).map_err(|e| format!("history {}: {e}", path.display()))
    }

    /// Writes the history to `path` (creating its directory).
    pub fn write(&self, path: &Path, comment: &str) -> Result<(), String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        std::fs::write(path, self.to_text(comment))
            .map_err(|e| format!("writing history {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Generator, Profile};

    fn sample() -> History {
        History {
            harness: "model".into(),
            seed: 42,
            keys: 400,
            settings: vec![
                ("write_buffer_size".into(), "8192".into()),
                ("compression_per_level".into(), "none,lz4,zstd".into()),
            ],
            params: vec![("no_wal".into(), "0".into())],
            ops: Generator::new(Profile::model(5, 5), 42).take(500),
        }
    }

    #[test]
    fn a_history_reads_back_as_written() {
        let h = sample();
        let text = h.to_text("failed at step 12\nreplay: TERN_MODEL_REPLAY=x");
        assert!(text.starts_with("# failed at step 12\n"));
        assert_eq!(History::parse(&text), Ok(h.clone()));
        assert_eq!(h.param("no_wal"), Some("0"));
        assert_eq!(h.param_num("torn", 1u8), Ok(1));
    }

    #[test]
    fn damaged_histories_are_refused_with_the_line() {
        let text = sample().to_text("");
        let cut: String = text.lines().take(20).collect::<Vec<_>>().join("\n");
        assert!(History::parse(&cut).unwrap_err().contains("cut short"));
        let bad = text.replacen("\nflush", "\nflush-now", 1);
        assert!(History::parse(&bad)
            .unwrap_err()
            .contains("unknown operation"));
        assert!(History::parse("hello")
            .unwrap_err()
            .contains("not a history file"));
        assert!(History::parse("tern-history 1\nseed x")
            .unwrap_err()
            .starts_with("line 2"));
        assert!(History::parse("tern-history 1\nseed 1")
            .unwrap_err()
            .contains("no `ops` line"));
    }
}
