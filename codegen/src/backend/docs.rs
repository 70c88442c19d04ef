//! Docs backend: `generated/docs/{dtypes,devices,streams,exceptions}.md`.

use serde::Serialize;

use super::{Output, banner, render_template};
use crate::error::Result;
use crate::ir::Ir;

#[derive(Serialize)]
struct DocsView {
    banner: String,
    name: String,
    major: u32,
    minor: u32,
    dtypes: Vec<Vec<String>>,
    devices: Vec<Vec<String>>,
    stream_columns: Vec<String>,
    streams: Vec<Vec<String>>,
    stream_notes: Vec<String>,
    failures: Vec<Vec<String>>,
    exceptions: Vec<Vec<String>>,
    bit_rules: Vec<Vec<String>>,
}

fn code(s: &str) -> String {
    format!("`{}`", s.replace('|', "\\|"))
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Render the four markdown tables.
pub fn render(ir: &Ir, source: &str) -> Result<Vec<Output>> {
    let streams = stream_table(ir);
    let view = DocsView {
        banner: banner(source),
        name: ir.name.clone(),
        major: ir.version.major,
        minor: ir.version.minor,
        dtypes: dtype_rows(ir),
        devices: device_rows(ir),
        stream_columns: streams.columns,
        streams: streams.rows,
        stream_notes: streams.notes,
        failures: ir
            .failures
            .iter()
            .map(|f| vec![code(&f.kind), code(&f.exception), cell(&f.description)])
            .collect(),
        exceptions: ir
            .exceptions
            .iter()
            .map(|e| vec![code(&e.name), cell(&e.doc)])
            .collect(),
        bit_rules: bit_rule_rows(ir),
    };
    let mut out = Vec::new();
    for (name, extra) in [
        ("dtypes", None),
        ("devices", None),
        ("streams", Some(streams.actions)),
        ("exceptions", None),
    ] {
        let contents = match extra {
            Some(actions) => {
                #[derive(Serialize)]
                struct WithActions<'a> {
                    #[serde(flatten)]
                    base: &'a DocsView,
                    actions: Vec<Vec<String>>,
                }
                render_template(
                    &format!("docs/{name}.md"),
                    &WithActions {
                        base: &view,
                        actions,
                    },
                )?
            }
            None => render_template(&format!("docs/{name}.md"), &view)?,
        };
        out.push(Output {
            path: format!("docs/{name}.md"),
            contents,
        });
    }
    Ok(out)
}

/// The stream table (one row per device with rules, then every other device), its notes and
/// the actions' docs.
struct StreamTable {
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
    actions: Vec<Vec<String>>,
}

fn stream_table(ir: &Ir) -> StreamTable {
    let s = &ir.streams;
    let dev_name = |v: &str| -> String { format!("`{v}`") };
    // stream table columns: None, then every listed value, then "> N"
    let mut values: Vec<i64> = s
        .rules
        .iter()
        .flat_map(|r| r.values.iter().map(|v| v.value))
        .collect();
    values.sort_unstable();
    values.dedup();
    let above: Option<i64> = s.rules.iter().filter_map(|r| r.pointers_above).max();
    let mut stream_columns = vec!["device".to_string(), "`None`".to_string()];
    stream_columns.extend(values.iter().map(|v| format!("`{v}`")));
    if let Some(a) = above {
        stream_columns.push(format!("`> {a}`"));
    }
    stream_columns.push(format!("`< {}`", s.min));
    stream_columns.push("consumer passes".to_string());
    let mut streams: Vec<Vec<String>> = s
        .rules
        .iter()
        .map(|r| {
            let mut row = vec![
                format!("{} ({})", dev_name(&r.device), r.device_value),
                r.none.clone(),
            ];
            for v in &values {
                row.push(match r.values.iter().find(|x| x.value == *v) {
                    Some(x) => match &x.action {
                        Some(a) => a.clone(),
                        None => "rejected".into(),
                    },
                    None => match r.pointers_above {
                        Some(p) if *v > p => s
                            .actions
                            .iter()
                            .find(|a| a.carries_value)
                            .map_or("".into(), |a| a.name.clone()),
                        _ => "rejected".into(),
                    },
                });
            }
            if above.is_some() {
                row.push(match r.pointers_above {
                    Some(_) => s
                        .actions
                        .iter()
                        .find(|a| a.carries_value)
                        .map_or("".into(), |a| format!("{}(stream)", a.name)),
                    None => "rejected".into(),
                });
            }
            row.push("rejected".into());
            row.push(
                r.consumer_default
                    .map_or("`None`".into(), |c| format!("`{c}`")),
            );
            row
        })
        .collect();
    let mut other = vec!["every other device".to_string(), s.stream_less_none.clone()];
    other.extend(std::iter::repeat_n(
        "rejected".to_string(),
        stream_columns.len() - 4,
    ));
    other.push("rejected".into());
    other.push("`None`".into());
    streams.push(other);
    let mut notes: Vec<String> = Vec::new();
    for r in &s.rules {
        for v in &r.values {
            if let Some(reason) = &v.reason {
                notes.push(format!("{} `{}`: {}", dev_name(&r.device), v.value, reason));
            }
        }
    }
    notes.push(format!("below `{}`: {}", s.min, s.below_min_reason));
    notes.push(format!("stream-less devices: {}", s.stream_less_reason));
    let actions: Vec<Vec<String>> = s
        .actions
        .iter()
        .map(|a| vec![code(&a.name), cell(&a.doc)])
        .collect();
    StreamTable {
        columns: stream_columns,
        rows: streams,
        notes,
        actions,
    }
}

/// One row per dtype of the spec.
fn dtype_rows(ir: &Ir) -> Vec<Vec<String>> {
    ir.dtypes
        .iter()
        .map(|d| {
            vec![
                code(&d.name),
                format!("`{}` ({})", d.code_name, d.code),
                d.bits.to_string(),
                d.lanes.to_string(),
                d.numpy.as_deref().map_or("–".into(), code),
                d.buffer.as_deref().map_or("–".into(), code),
                d.rust.as_deref().map_or("–".into(), code),
            ]
        })
        .collect()
}

/// One row per device type, saying whether the spec has stream rules for it.
fn device_rows(ir: &Ir) -> Vec<Vec<String>> {
    let s = &ir.streams;
    ir.device_enum()
        .map(|e| {
            e.values
                .iter()
                .map(|v| {
                    let rule = if s.rules.iter().any(|r| r.device == v.name) {
                        "yes"
                    } else {
                        "only `None`"
                    };
                    let host = if v.host_accessible { "yes" } else { "no" };
                    vec![
                        v.value.to_string(),
                        code(&v.name),
                        cell(&v.doc),
                        host.to_string(),
                        rule.to_string(),
                    ]
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One row per type code with its bit rule.
fn bit_rule_rows(ir: &Ir) -> Vec<Vec<String>> {
    ir.dtype_code_enum()
        .map(|e| {
            e.values
                .iter()
                .map(|v| {
                    vec![
                        v.value.to_string(),
                        code(&v.name),
                        v.bits.map_or("any".into(), |b| b.to_string()),
                        cell(&v.doc),
                    ]
                })
                .collect()
        })
        .unwrap_or_default()
}
