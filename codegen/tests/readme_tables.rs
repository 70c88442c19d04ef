//! The manual's page `docs/manual/tables.md` shows the generated dtype, device, stream and
//! exception tables. They are copied verbatim between `<!-- BEGIN generated/docs/X.md -->` and
//! `<!-- END generated/docs/X.md -->` markers; this test keeps them equal to the
//! files under `generated/docs/` (which the bootstrap test keeps equal to the
//! spec). `BLESS=1 cargo test -p dlbind-codegen --test readme_tables` rewrites them.

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The page that embeds the tables, relative to the repository root.
const PAGE: &str = "docs/manual/tables.md";

/// The generated doc without its first line (the "do not edit" comment) and title; its inner
/// headings are demoted two levels so they nest under the page's `###` section headings.
fn table_body(doc: &str) -> String {
    doc.replace("\r\n", "\n")
        .lines()
        .skip_while(|l| l.starts_with("<!--") || l.starts_with('#') || l.is_empty())
        .map(|l| {
            if l.starts_with('#') {
                format!("##{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

#[test]
fn manual_embeds_current_generated_tables() {
    let page_path = root().join(PAGE);
    let mut page = std::fs::read_to_string(&page_path)
        .unwrap_or_else(|e| panic!("{PAGE}: {e}"))
        .replace("\r\n", "\n");
    let bless = std::env::var_os("BLESS").is_some();
    let mut stale = Vec::new();
    for name in ["dtypes", "devices", "streams", "exceptions"] {
        let doc = std::fs::read_to_string(root().join(format!("generated/docs/{name}.md")))
            .unwrap_or_else(|e| panic!("generated/docs/{name}.md: {e}"));
        let body = table_body(&doc);
        let begin = format!("<!-- BEGIN generated/docs/{name}.md -->\n");
        let end = format!("<!-- END generated/docs/{name}.md -->");
        let start = page
            .find(&begin)
            .unwrap_or_else(|| panic!("{PAGE} lacks the marker {begin:?}"))
            + begin.len();
        let stop = start
            + page[start..]
                .find(&end)
                .unwrap_or_else(|| panic!("{PAGE} lacks the marker {end:?}"));
        let current = page[start..stop].trim_end();
        if current != body {
            stale.push(name);
            page.replace_range(start..stop, &format!("{body}\n"));
        }
    }
    if bless && !stale.is_empty() {
        std::fs::write(&page_path, &page).unwrap_or_else(|e| panic!("write {PAGE}: {e}"));
        return;
    }
    assert!(
        stale.is_empty(),
        "{PAGE} tables are stale for {stale:?}; run `BLESS=1 cargo test -p dlbind-codegen --test readme_tables`"
    );
}
