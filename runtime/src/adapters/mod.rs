//! Adapters for the Rust array crates users already hold data in (issue 34): one cargo feature
//! per crate, off by default, each both ways where the crate allows.
//!
//! | feature | module | export | import |
//! |---|---|---|---|
//!
//! Each adapter is a leaf: it uses the public model (`DLPackSource`, `ImportedTensor`, `Buffer`,
//! `from_dlpack`) and never a CPython internal.
