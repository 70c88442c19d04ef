"""dlbind_demo: the reference user of dlbind (a DLPack array type built with PyO3)."""

from types import ModuleType
from typing import Literal, Any, ClassVar, Sequence, SupportsIndex, final

from typing_extensions import CapsuleType

__all__ = ["Growable", "Tensor", "from_dlpack"]

_Shape = int | Sequence[int]

@final
class Tensor:
    """An n-d array exported and imported through DLPack; views share their owner's storage."""

    @staticmethod
    def zeros(
        shape: _Shape, dtype: str = "float32", device: str | tuple[int, int] | None = None
    ) -> Tensor:
        """C-contiguous, 64-byte aligned, writable zeros; sub-byte dtypes are packed.

        `device`: None/"cpu", or `(kDLCUDA | kDLCUDAHost | kDLCUDAManaged, id)` for GPU memory
        (BufferError when GPU support or the driver is unavailable).
        """
    @staticmethod
    def arange(n: int, dtype: str = "float32") -> Tensor:
        """`0, 1, …, n-1` in a numeric dtype (bool, int*, uint*, float16/32/64, bfloat16, complex64/128)."""
    @staticmethod
    def from_bytes(data: bytes, shape: _Shape, dtype: str, readonly: bool = False) -> Tensor:
        """A C-contiguous copy of `data`, which must hold exactly `nbytes` bytes."""
    @staticmethod
    def from_dlpack(x: Any, /, *, device: Any | None = None, copy: bool | None = None) -> Tensor:
        """Import any DLPack producer, zero-copy where possible."""

    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    __dlpack_c_exchange_api__: ClassVar[CapsuleType]
    """The DLPack 1.3 C exchange table (a `"dlpack_exchange_api"` capsule), on the type."""

    # Bridges to the older protocols; each exists only where it applies (AttributeError
    # otherwise, so `hasattr` is False and consumers fall through).
    @property
    def __array_interface__(self) -> dict[str, Any]:
        """numpy array interface v3 (host memory only)."""
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA array interface v3 (kDLCUDA / kDLCUDAManaged memory only); `stream` is None."""
    @property
    def __sycl_usm_array_interface__(self) -> dict[str, Any]:
        """SYCL USM array interface v1 (kDLOneAPI memory only); `syclobj` is None."""
    def __buffer__(self, flags: int, /) -> memoryview:
        """The buffer protocol (host memory; read-only tensors refuse writable requests)."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements."""
    @property
    def dtype(self) -> str:
        """The spec's dtype name: "float32", "bfloat16", "float8_e4m3fn", …"""
    @property
    def device(self) -> tuple[int, int]:
        """`(device_type, device_id)`, as `__dlpack_device__` returns it."""
    @property
    def readonly(self) -> bool: ...
    @property
    def writability(self) -> Literal["writable", "readonly", "unknown"]:
        """'unknown' for data imported through a legacy capsule (it may leave through one again)."""
    @property
    def data_ptr(self) -> int:
        """Address of element 0."""
    @property
    def ndim(self) -> int: ...
    @property
    def nbytes(self) -> int:
        """Bytes of the logical array (packed for sub-byte dtypes)."""
    def __len__(self) -> int: ...
    def tobytes(self) -> bytes:
        """The logical array's bytes in C order."""
    def reversed(self, axis: SupportsIndex = 0) -> Tensor:
        """A view with `axis` reversed (negative stride)."""
    def transpose(self) -> Tensor:
        """A view with all axes reversed."""
    def slice(
        self,
        axis: SupportsIndex,
        start: int | None = None,
        stop: int | None = None,
        step: int = 1,
    ) -> Tensor:
        """`x[start:stop:step]` along `axis`, as a view."""
    def numpy(self) -> Any:
        """A numpy array viewing this tensor's memory (zero-copy); `bfloat16` and `float8_*`
        tensors give arrays of the `ml_dtypes` types, which `np.from_dlpack` refuses."""
    def set_readonly(self) -> Tensor:
        """A read-only view of the same storage."""

class Growable:
    """A 1-d or 2-d float32 array with `&mut self` methods that reallocate (a plain, non-frozen
    `#[pyclass]`). Every export (`__dlpack__` capsule, memoryview, `__array_interface__` array,
    exchange-table tensor) holds a shared borrow of it until released: meanwhile the mutating
    methods raise `RuntimeError` (PyO3's "Already borrowed"). A `copy=True` export holds none."""

    __dlpack_c_exchange_api__: ClassVar[CapsuleType]
    def __init__(self, values: Sequence[float] = ...) -> None: ...
    @staticmethod
    def zeros(n: int) -> Growable: ...
    def resize(self, n: int, value: float = 0.0) -> None:
        """Set the length (reallocates); the array becomes 1-d."""
    def push(self, x: float) -> None:
        """Append `x`; the array becomes 1-d."""
    def fill(self, x: float) -> None: ...
    def reshape(self, rows: int, cols: int) -> None:
        """View the data as `rows x cols` (same element count)."""
    def set_readonly(self, readonly: bool) -> None: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def shape(self) -> list[int]: ...
    @property
    def data_ptr(self) -> int: ...
    def tolist(self) -> list[float]: ...
    def __len__(self) -> int: ...
    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...


def from_dlpack(x: Any, /, *, device: Any | None = None, copy: bool | None = None) -> Tensor:
    """Import any DLPack producer as a `Tensor`, zero-copy where possible. A `Tensor` argument
    gives a new `Tensor` viewing the same storage (read-only flag kept, the storage kept alive)."""

# Diagnostics and switches for dlbind's own tests and benchmarks (`live_exports`,
# `live_export_borrows`, `spare_blocks_held`, `exchange_imports`, `same_type_views`,
# `set_same_type_views`, `tensor_freelist_stats`, `numpy_fast_imports`, `set_copy_pool_limit`),
# built on `dlbind::stats` and `dlbind::tuning`; not part of the demo's array API.
_testing: ModuleType
