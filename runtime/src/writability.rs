//! Whether consumers may write the data: known writable, known read-only, or unknown.

/// Whether consumers may write a tensor's data. DLPack's legacy capsule has no read-only flag,
/// so a view imported through one is of *unknown* writability: dlbind never writes it and
/// exports it with READ_ONLY in versioned capsules, but lets it leave through a legacy capsule
/// again, since that loses nothing it had (a JAX array, which JAX 0.10 moves only through
/// legacy capsules, can go into dlbind and back). Data known to be read-only (a versioned
/// READ_ONLY flag, a non-writeable numpy array, a read-only buffer, a `Vec` lent through `&`)
/// cannot be reused by a legacy capsule: under `copy=None` such a request gets a private,
/// writable copy, under `copy=False` a `BufferError` (decision 0024).
///
/// `#[dlpack(readonly)]` fields may be a `bool` (`true`: known read-only) or a `Writability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Writability {
    /// Consumers may write.
    Writable,
    /// Consumers must not write (the producer said so).
    ReadOnly,
    /// Nobody said (a legacy capsule): treated as read-only, except that a legacy export is
    /// allowed.
    Unknown,
}

impl Writability {
    /// `ReadOnly` when `readonly`, else `Writable`.
    #[inline]
    pub const fn from_readonly(readonly: bool) -> Self {
        if readonly {
            Writability::ReadOnly
        } else {
            Writability::Writable
        }
    }

    /// What may be exported of data that `self` (a type's field) and `storage` (what holds the
    /// memory) both describe: the narrower of the two. Read-only if either is, unknown if
    /// either is, writable only if both are: a field can narrow what the storage allows, never
    /// widen it.
    #[inline]
    pub const fn narrow(self, storage: Writability) -> Self {
        match (self, storage) {
            (Writability::ReadOnly, _) | (_, Writability::ReadOnly) => Writability::ReadOnly,
            (Writability::Unknown, _) | (_, Writability::Unknown) => Writability::Unknown,
            _ => Writability::Writable,
        }
    }

    /// Whether writing is allowed (only for `Writable`).
    #[inline]
    pub const fn is_writable(self) -> bool {
        matches!(self, Writability::Writable)
    }
}

/// A `#[dlpack(readonly)]` field's type: `bool` or [`Writability`] (used by the derive).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`#[dlpack(readonly)]` expects a `bool` or a `dlbind::Writability`, not `{Self}`",
    label = "a `bool` or a `dlbind::Writability`"
)]
pub trait ReadonlyField {
    fn writability(&self) -> Writability;
    /// The field's value for an import of this writability (`#[derive(FromDLPack)]`).
    fn from_writability(w: Writability) -> Self;
}

impl ReadonlyField for bool {
    #[inline]
    fn writability(&self) -> Writability {
        Writability::from_readonly(*self)
    }
    #[inline]
    fn from_writability(w: Writability) -> Self {
        !w.is_writable()
    }
}

impl ReadonlyField for Writability {
    #[inline]
    fn writability(&self) -> Writability {
        *self
    }
    #[inline]
    fn from_writability(w: Writability) -> Self {
        w
    }
}

#[cfg(test)]
mod tests {
    use super::Writability::{self, *};

    #[test]
    fn a_field_narrows_the_storage_never_widens_it() {
        let all = [Writable, ReadOnly, Unknown];
        for f in all {
            for s in all {
                let n = f.narrow(s);
                let rank = |w: Writability| match w {
                    Writable => 0,
                    Unknown => 1,
                    ReadOnly => 2,
                };
                assert_eq!(rank(n), rank(f).max(rank(s)), "{f:?} narrow {s:?}");
                assert!(!n.is_writable() || (f.is_writable() && s.is_writable()));
            }
        }
    }
}
