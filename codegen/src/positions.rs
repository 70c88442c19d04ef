//! Source positions for semantic errors.
//!
//! `serde_yaml` locates syntax and shape errors itself, but the values it
//! produces carry no positions. This module re-parses the same text with
//! `saphyr` (marked nodes) and records the start of every node under a path
//! such as `types[5].fields[2].type`, so validation can report `line:col`.
//! It only runs when validation has something to report.

use std::collections::HashMap;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

/// How many repaired texts [`Positions::parse`] tries when `saphyr` rejects one.
const MAX_RETRIES: usize = 16;

/// Path → (line, col), both 1-based.
#[derive(Debug, Default, Clone)]
pub struct Positions {
    map: HashMap<String, (usize, usize)>,
}

impl Positions {
    /// Parse `text` and record node positions; an unparsable text gives an empty map.
    ///
    /// `saphyr` is stricter than libyaml (which `serde_yaml` uses) in places, so it
    /// can reject a text `serde_yaml` accepted: a byte order mark inside the document,
    /// a flow collection continued on a less indented line, ... Then a non-ASCII
    /// character at the rejected spot is read as a space (columns count characters, so
    /// positions stay the same), otherwise the positions come from the longest prefix
    /// (cut at a line break before the rejected spot) that it accepts; paths beyond
    /// the cut fall back to their closest recorded ancestor.
    pub fn parse(text: &str) -> Positions {
        let mut p = Positions::default();
        let mut text = text.to_string();
        for _ in 0..MAX_RETRIES {
            let e = match MarkedYaml::load_from_str(&text) {
                Ok(docs) => {
                    if let Some(root) = docs.first() {
                        p.walk(root, String::new());
                    }
                    break;
                }
                Err(e) => e,
            };
            // the marker's index counts characters
            let at = text
                .char_indices()
                .nth(e.marker().index())
                .map_or(text.len(), |(b, _)| b);
            if let Some(c) = text[at..].chars().next()
                && !c.is_ascii()
            {
                text.replace_range(at..at + c.len_utf8(), " ");
                continue;
            }
            match text[..at]
                .trim_end_matches(['\n', '\r'])
                .rfind(['\n', '\r'])
            {
                Some(cut) if cut + 1 < text.len() => text.truncate(cut + 1),
                _ => break,
            }
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
