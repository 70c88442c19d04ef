//! The bootstrap test (as prost's): every copy a crate ships (dlbind.yaml) equals a fresh
//! generation from `spec/dlpack.yaml`, and every file a crate reads from the generator is one
//! of those copies, so no crate reads a file outside its own package.

mod common;

use std::path::Path;

use common::root;
use dlbind_codegen::Builder;
use dlbind_codegen::project::Project;

#[test]
fn shipped_copies_equal_a_fresh_generation() {
    let root = root();
    let report = Builder::new()
        .spec(root.join("spec/dlpack.yaml"))
        .source_name("spec/dlpack.yaml")
        .out_dir(root.join("generated"))
        .project(root.join("dlbind.yaml"))
        .check()
        .expect("check");
    assert!(
        report.is_clean(),
        "stale copies or outputs (run `cargo run -p dlbind-codegen -- generate` from the \
         project root):\n{}",
        report.diff()
    );
}

/// The crates' own copies are all listed, so `generate` keeps each one fresh.
#[test]
fn every_file_a_crate_reads_is_a_listed_copy() {
    let root = root();
    let project = Project::load(&root.join("dlbind.yaml")).expect("dlbind.yaml");
    let listed: Vec<&str> = project.copies.iter().map(|c| c.to.as_str()).collect();
    let mut needed = vec![
        "codegen/spec/dlpack.yaml".to_string(),
        "runtime/include/dlpack.h".to_string(),
        "macros/src/generated/derive_table.rs".to_string(),
    ];
    for dir in ["runtime/src/generated", "macros/src/generated"] {
        for e in std::fs::read_dir(root.join(dir)).expect(dir) {
            let name = e.unwrap().file_name().into_string().unwrap();
            needed.push(format!("{dir}/{name}"));
        }
    }
    for n in &needed {
        assert!(listed.contains(&n.as_str()), "{n} is not in dlbind.yaml");
        assert!(Path::new(&root.join(n)).is_file(), "{n} is missing");
    }
    // And the runtime's `spec` module includes exactly its generated directory's files.
    let mut spec_src = String::new();
    for file in [
        "runtime/src/spec/mod.rs",
        "runtime/src/spec/elements.rs",
        "runtime/src/spec/streams.rs",
    ] {
        spec_src += &std::fs::read_to_string(root.join(file)).expect(file);
    }
    for name in [
        "types.rs",
        "dtypes.rs",
        "elements.rs",
        "streams.rs",
        "errors.rs",
        "protocol.rs",
    ] {
        assert!(
            spec_src.contains(&format!("include!(\"../generated/{name}\")")),
            "runtime/src/spec does not include its copy generated/{name}"
        );
    }
    assert_eq!(
        spec_src.matches("include!(").count(),
        6,
        "runtime/src/spec includes something other than its six generated files"
    );
}
