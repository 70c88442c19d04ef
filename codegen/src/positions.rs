//! Source positions for semantic errors.
//!
//! `serde_yaml` locates syntax and shape errors itself, but the values it
//! produces carry no positions. This module re-parses the same text with
//! `saphyr` (marked nodes) and records the start of every node under a path
//! such as `types[5].fields[2].type`, so validation can report `line:col`.
//! It only runs when validation has something to report.

use std::collections::HashMap;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

/// Path → (line, col), both 1-based.
#[derive(Debug, Default, Clone)]
pub struct Positions {
    map: HashMap<String, (usize, usize)>,
}

impl Positions {
    /// Parse `text` and record node positions; an unparsable text gives an empty map.
    pub fn parse(text: &str) -> Positions {
        let mut p = Positions::default();
        if let Ok(docs) = MarkedYaml::load_from_str(text)
            && let Some(root) = docs.first()
        {
            p.walk(root, String::new());
        }
        p
    }

    fn walk(&mut self, node: &MarkedYaml<'_>, path: String) {
        let start = node.span.start;
        self.map
            .insert(path.clone(), (start.line(), start.col() + 1));
        match &node.data {
            YamlData::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.walk(item, format!("{path}[{i}]"));
                }
            }
            YamlData::Mapping(map) => {
                for (k, v) in map.iter() {
                    let key = match &k.data {
                        YamlData::Value(Scalar::String(s)) => s.to_string(),
                        YamlData::Value(Scalar::Integer(i)) => i.to_string(),
                        YamlData::Value(Scalar::Boolean(b)) => b.to_string(),
                        YamlData::Value(Scalar::Null) => "null".to_string(),
                        YamlData::Representation(s, _, _) => s.to_string(),
                        _ => continue,
                    };
                    let child = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    // the key itself, for "duplicate key"-style messages
                    let ks = k.span.start;
                    self.map
                        .insert(format!("{child}#key"), (ks.line(), ks.col() + 1));
                    self.walk(v, child);
                }
            }
            _ => {}
        }
    }

    /// The position of `path`, falling back to its closest recorded ancestor.
    pub fn lookup(&self, path: &str) -> (usize, usize) {
        let mut p = path.to_string();
        loop {
            if let Some(&pos) = self.map.get(&p) {
                return pos;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p.truncate(i),
                None => return self.map.get("").copied().unwrap_or((1, 1)),
            }
        }
    }
}
