//! Compile tests for `#[derive(DLPackExport)]`. Re-bless the `.stderr` files with
//! `TRYBUILD=overwrite cargo test -p dlbind-ui-tests`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("cases/pass.rs");
    t.pass("cases/pass_not_frozen.rs");
    t.pass("cases/pass_from_dlpack.rs");
    t.pass("cases/pass_pymethods_block.rs");
    t.pass("cases/pass_hygiene.rs");
    t.compile_fail("cases/fail_*.rs");
}
