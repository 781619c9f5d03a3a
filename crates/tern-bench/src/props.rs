//! YCSB property files: `name=value` lines, `#` comments, later files and
//! `-p name=value` overrides win.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{Error, Result};

/// An ordered set of properties.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties {
    map: BTreeMap<String, String>,
}

impl Properties {
    /// No properties.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses property-file text (Java `.properties` subset: `=` or `:`
    /// separators, `#`/`!` comments, surrounding spaces trimmed).
    pub fn parse(text: &str) -> Result<Self> {
        let mut p = Properties::new();
        p.merge_text(text)?;
        Ok(p)
    }

    /// Adds the lines of `text`, overriding existing names.
    pub fn merge_text(&mut self, text: &str) -> Result<()> {
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let Some(pos) = line.find(['=', ':']) else {
                return Err(Error(format!(
                    "line {}: expected name=value, found {line:?}",
                    n + 1
                )));
            };
            let (k, v) = (line[..pos].trim(), line[pos + 1..].trim());
            if k.is_empty() {
                return Err(Error(format!("line {}: empty property name", n + 1)));
            }
            self.map.insert(k.to_string(), v.to_string());
        }
        Ok(())
    }

    /// Adds a property file.
    pub fn merge_file(&mut self, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error(format!("cannot read {}: {e}", path.display())))?;
        self.merge_text(&text)
            .map_err(|e| Error(format!("{}: {e}", path.display())))
    }

    /// Applies one `name=value` override.
    pub fn set_pair(&mut self, pair: &str) -> Result<()> {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(Error(format!("-p expects name=value, found {pair:?}")));
        };
        self.set(k.trim(), v.trim());
        Ok(())
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: &str) {
        self.map.insert(name.to_string(), value.to_string());
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.map.get(name).map(String::as_str)
    }

    /// The value of `name` or `default`.
    pub fn get_or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.get(name).unwrap_or(default)
    }

    /// `name` parsed as `T`, or `default` when unset.
    pub fn parse_or<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| Error(format!("property {name}={v:?} is not a valid value"))),
        }
    }

    /// All properties whose name starts with `prefix`, prefix removed.
    pub fn with_prefix(&self, prefix: &str) -> Vec<(String, String)> {
        self.map
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|s| (s.to_string(), v.clone())))
            .collect()
    }

    /// Every property, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_files_and_overrides() {
        let mut p = Properties::parse(
            "# YCSB workload A\nrecordcount=1000\n  operationcount = 2000 \n\n! comment\nrequestdistribution: zipfian\nworkload=site.ycsb.workloads.CoreWorkload\n",
        )
        .unwrap();
        assert_eq!(p.get("recordcount"), Some("1000"));
        assert_eq!(p.get("operationcount"), Some("2000"));
        assert_eq!(p.get("requestdistribution"), Some("zipfian"));
        p.set_pair("recordcount=5000").unwrap();
        p.set_pair("tern.write_buffer_size=1048576").unwrap();
        assert_eq!(p.parse_or::<u64>("recordcount", 0).unwrap(), 5000);
        assert_eq!(p.parse_or::<u64>("fieldcount", 10).unwrap(), 10);
        assert_eq!(
            p.with_prefix("tern."),
            vec![("write_buffer_size".to_string(), "1048576".to_string())]
        );
        assert!(p.set_pair("novalue").is_err());
        assert!(Properties::parse("just words").is_err());
        p.set("operationcount", "x");
        assert!(p.parse_or::<u64>("operationcount", 0).is_err());
    }
}
