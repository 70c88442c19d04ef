//! `use dlbind::prelude::*;` — the derive, the traits it implements and the import trait, the
//! common types, and PyO3's prelude.

pub use crate::device::Device;
pub use crate::dims::Dims;
pub use crate::error::DlpackError;
pub use crate::export::{DLPackSource, DataSource};
pub use crate::ffi::{DLDataType, DLDeviceType};
pub use crate::import::ImportedTensor;
pub use crate::spec::elements::DLPackElement;
pub use crate::storage::Buffer;
pub use crate::writability::Writability;
pub use crate::{DLPackExport, FromDLPack}; // the derives, and the `FromDLPack` trait
pub use pyo3::prelude::*;
