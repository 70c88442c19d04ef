//! Compiles csrc/abi.c against the `dlpack.h` that dlbind publishes to its dependents:
//! dlbind declares `links = "dlbind"`, so its build script's `cargo:include=DIR` arrives here
//! as `DEP_DLBIND_INCLUDE`.
fn main() {
    let include = std::env::var("DEP_DLBIND_INCLUDE")
        .expect("dlbind publishes DEP_DLBIND_INCLUDE (links = \"dlbind\")");
    assert!(
        std::path::Path::new(&include).join("dlpack.h").is_file(),
        "no dlpack.h in DEP_DLBIND_INCLUDE={include}"
    );
    println!("cargo:rerun-if-changed=csrc/abi.c");
    cc::Build::new()
        .file("csrc/abi.c")
        .include(&include)
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("downstream_abi");
}
