// Issue 50: every derive form expanded inside a module that shadows what an unhygienic
// expansion would name (serde's test under a shadowed prelude). The module is the demo's
// `dlbind_demo.hygiene`, whose types tests/python/test_hygiene.py exports and imports.
include!("../../../examples/tensor/src/hygiene.rs");

fn main() {
    let _ = shadowed::register;
}
