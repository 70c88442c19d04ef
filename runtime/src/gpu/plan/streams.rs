//! Streams on the consumer's side: the stream `stream=None` stands for, the `stream=` a consumer
//! passes for its current stream, and the wait a C exchange table's no-sync export needs.

use crate::device::Device;
use crate::error::Result;
use crate::gpu::{DeviceRuntime, StreamHandle, default_runtime};
use crate::spec::streams::{StreamAction, consumer_default_stream, stream_value_for};

use super::{is_stream_device, same_stream};

/// The stream that `stream=None` stands for on `device` (the spec's consumer default: CUDA's
/// legacy stream, ROCm's 0), as a handle; `None` for stream-less devices. GPU data whose source
/// records no pending stream is taken to be ready on it.
pub fn device_default_stream(device: Device) -> Option<StreamHandle> {
    consumer_default_stream(device.device_type).map(|s| StreamHandle(s as u64))
}

/// The consumer's half of a C exchange table's no-sync export
/// (`managed_tensor_from_py_object_no_sync`): makes the stream that `__dlpack__(stream=None)`
/// stands for on `device` (the spec's consumer default: CUDA's legacy stream, ROCm's 0) wait
/// for the work queued on `producer`, the producer's current work stream as its table's
/// `current_work_stream` reports it. That is what the producer's `__dlpack__` would have
/// done itself, so a table import is ordered like a `__dlpack__` import: later dlbind copies
/// of the view (queued on that default stream) see the producer's writes. An event recorded
/// on `producer`, waited on, destroyed; nothing for stream-less devices or when the two
/// streams are the same (on CUDA the null stream is the legacy one). Never a synchronise.
pub fn wait_for_producer_stream(
    runtime: &dyn DeviceRuntime,
    device: Device,
    producer: StreamHandle,
) -> Result<()> {
    let Some(consumer) = device_default_stream(device) else {
        return Ok(());
    };
    if same_stream(device, producer, consumer) {
        return Ok(());
    }
    let event = runtime.record_event(device, producer)?;
    let waited = runtime.wait_event(device, consumer, event);
    let destroyed = runtime.destroy_event(device, event);
    waited.and(destroyed)
}

/// The `stream=` a consumer passes to a producer for data that will be used on `device`,
/// given the destination's current stream: CUDA → the current stream (> 2), 2 for the
/// per-thread stream, else 1 (never 0); ROCm → the current stream, else 0; stream-less
/// devices → `None`. Built on the generated `consumer_default_stream` and `stream_value_for`.
pub fn consumer_stream_from_current(device: Device, current: Option<StreamHandle>) -> Option<i64> {
    let default = consumer_default_stream(device.device_type);
    // The action the current stream stands for, passed as the value the spec's rules give it
    // (`stream_value_for`). Handles 0 and 1 (the legacy stream), and actions the device has no
    // value for, pass the device's default.
    let action = match current {
        Some(StreamHandle::PER_THREAD) => StreamAction::PerThreadDefault,
        Some(StreamHandle(h)) if h <= i64::MAX as u64 => StreamAction::Pointer(h as i64),
        _ => return default,
    };
    stream_value_for(device.device_type, action).or(default)
}

/// [`consumer_stream_from_current`] with the current stream taken from `runtime` (a
/// runtime error counts as "no current stream").
pub fn consumer_stream_with(runtime: &dyn DeviceRuntime, device: Device) -> Option<i64> {
    let current = if is_stream_device(device) {
        runtime.current_stream(device).ok().flatten()
    } else {
        None
    };
    consumer_stream_from_current(device, current)
}

/// The stream `from_dlpack` passes for a destination `device`, using the process-wide
/// runtime ([`default_runtime`]) when one is available (CUDA: its current stream, or 1;
/// never 0; ROCm 0; CPU `None`).
pub fn consumer_stream_for(device: Device) -> Option<i64> {
    if is_stream_device(device)
        && let Ok(rt) = default_runtime()
    {
        return consumer_stream_with(rt.as_ref(), device);
    }
    consumer_stream_from_current(device, None)
}
