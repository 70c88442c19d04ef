//! Emits PyO3's `Py_3_*` cfgs, so version-dependent CPython symbols (see `cpython.rs`) resolve
//! to the right name on every supported interpreter.
//!
//! Also publishes the generated C header to dependents, following the `-sys` crate convention:
//! the package declares `links = "dlbind"`, so `cargo:include=DIR` reaches the build script of
//! every crate that depends on `dlbind` directly as `DEP_DLBIND_INCLUDE=DIR`, the directory
//! holding `dlpack.h` (the runtime's own copy of `generated/include/dlpack.h`, verified by
//! `dlbind check`). C compiled against it shares the runtime's ABI.
//!
//! And sets `dlbind_pyo3_layout_known` when the PyO3 compiled is the release whose class layout
//! the free list's direct construction models ([`AUDITED_PYO3`]; decision 0017).
fn main() {
    pyo3_build_config::use_pyo3_cfgs();
    let dir = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("include");
    println!("cargo:include={}", dir.display());
    println!("cargo:rustc-check-cfg=cfg(dlbind_pyo3_layout_known)");
    if pyo3_version().as_deref() == Some(AUDITED_PYO3) {
        println!("cargo:rustc-cfg=dlbind_pyo3_layout_known");
    }
    python_dll();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=include/dlpack.h");
}

/// Windows, full API: `dlbind_python_dll="<name>"` (and `dlbind_python_dll`), the interpreter DLL
/// that `cpython::python_dll_extern!` links CPython's private functions from (`raw-dylib`, as
/// PyO3 links the public ones), when PyO3's configuration names one of [`PYTHON_DLLS`]. Unset
/// elsewhere (an abi3 build's `python3` is not one: it links none of them); lib.rs refuses a Windows full-API build
/// without it by name.
fn python_dll() {
    let values: Vec<String> = PYTHON_DLLS.iter().map(|n| format!("\"{n}\"")).collect();
    println!(
        "cargo:rustc-check-cfg=cfg(dlbind_python_dll, values(none(), {}))",
        values.join(", ")
    );
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("windows") {
        return;
    }
    // An abi3 build's name is `python3`, not in the list: nothing of it is linked by dlbind.
    if let Some(name) = pyo3_build_config::get()
        .lib_name()
        .filter(|n| PYTHON_DLLS.contains(n))
    {
        println!("cargo:rustc-cfg=dlbind_python_dll");
        println!("cargo:rustc-cfg=dlbind_python_dll=\"{name}\"");
    }
}

/// The interpreter DLLs `cpython::python_dll_extern!` has a `#[link]` for (the same list).
const PYTHON_DLLS: &[&str] = &[
    "python311",
    "python311_d",
    "python312",
    "python312_d",
    "python313",
    "python313_d",
    "python313t",
    "python313t_d",
    "python314",
    "python314_d",
    "python314t",
    "python314t_d",
    "python315",
    "python315_d",
    "python315t",
    "python315t_d",
];

/// The PyO3 release whose instance layout and construction `cpython::freelist::probe` models.
/// Another release (a later 0.30.x the `pyo3 = "0.30.1"` requirement admits) gets PyO3's own
/// constructor until its `PyStaticClassObject` / `PyClassObjectContents` and
/// `PyClassInitializer` are read and this is updated (docs/decisions/0017-pyo3-object-layout.md).
const AUDITED_PYO3: &str = "0.30.1";

/// The version of the PyO3 being compiled, when it can be told; `None` otherwise.
///
/// PyO3 publishes no version (no constant, nothing in its `links` metadata), but each PyO3
/// release depends on `pyo3-build-config` of exactly its own version (`=0.30.1`), and a Cargo
/// build holds one version per semver-compatible range, so the `pyo3-build-config` this script
/// is linked with is PyO3's version. That crate's documented panic (`run_python_script` on a
/// config without an executable) reports its own source location: a crates.io package's path
/// ends in `…/pyo3-build-config-<version>/src/…`. A vendored, git or patched copy (a path
/// without the version), a remapped path without it, or any change in that panic gives `None`,
/// and with it PyO3's constructor: slower, never wrong.
fn pyo3_version() -> Option<String> {
    use pyo3_build_config::{InterpreterConfigBuilder, PythonImplementation, PythonVersion};
    use std::sync::{Arc, Mutex};

    let config = InterpreterConfigBuilder::new(
        PythonImplementation::CPython,
        PythonVersion {
            major: 3,
            minor: 11,
        },
    )
    .finalize()
    .ok()?;
    let seen = Arc::new(Mutex::new(None::<String>));
    let hook_seen = Arc::clone(&seen);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut s) = hook_seen.lock() {
            *s = info.location().map(|l| l.file().to_owned());
        }
    }));
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        config.run_python_script("")
    }));
    std::panic::set_hook(previous);
    if ran.is_ok() {
        return None;
    }
    let file = seen.lock().ok()?.take()?;
    let component = std::path::Path::new(&file)
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter_map(|c| c.strip_prefix("pyo3-build-config-"))
        .next_back()?;
    Some(component.to_owned())
}
