//! Emits PyO3's `Py_3_*` cfgs, so version-dependent CPython symbols (see `cpython.rs`) resolve
//! to the right name on every supported interpreter.
//!
//! Also publishes the generated C header to dependents, following the `-sys` crate convention:
//! the package declares `links = "dlbind"`, so `cargo:include=DIR` reaches the build script of
//! every crate that depends on `dlbind` directly as `DEP_DLBIND_INCLUDE=DIR`, the directory
//! holding `dlpack.h` (the runtime's own copy of `generated/include/dlpack.h`, verified by
//! `dlbind check`). C compiled against it shares the runtime's ABI.
fn main() {
    pyo3_build_config::use_pyo3_cfgs();
    let dir = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("include");
    println!("cargo:include={}", dir.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=include/dlpack.h");
}
