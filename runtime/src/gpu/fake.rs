//! A recording fake [`DeviceRuntime`] for tests: every call is appended to a log
//! ([`FakeRuntime::calls`]) with its arguments, handles are fresh integers, and failures can
//! be injected per operation. Nothing is read or written.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::device::Device;
use crate::error::{DlpackError, Result};
use crate::spec::errors::FailureKind;

use super::{
    AllocKind, CopyKind, DeviceAllocation, DevicePtr, DeviceRuntime, EventHandle, StreamHandle,
};

/// One recorded runtime call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    RecordEvent {
        device: Device,
        stream: StreamHandle,
        event: EventHandle,
    },
    WaitEvent {
        device: Device,
        stream: StreamHandle,
        event: EventHandle,
    },
    DestroyEvent {
        device: Device,
        event: EventHandle,
    },
    CurrentStream {
        device: Device,
    },
    Copy {
        device: Device,
        kind: CopyKind,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    },
    StridedCopy {
        device: Device,
        src: DevicePtr,
        shape: Vec<i64>,
        strides: Vec<i64>,
        elem_bytes: usize,
        dst: DevicePtr,
        stream: StreamHandle,
    },
    MemsetZero {
        device: Device,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    },
    Alloc {
        kind: AllocKind,
        device: Device,
        bytes: usize,
        ptr: DevicePtr,
    },
    Free {
        ptr: DevicePtr,
        kind: AllocKind,
    },
    SynchronizeStream {
        device: Device,
        stream: StreamHandle,
    },
}

/// Operation names for [`FakeRuntime::fail_on`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    RecordEvent,
    WaitEvent,
    DestroyEvent,
    CurrentStream,
    Copy,
    StridedCopy,
    MemsetZero,
    Alloc,
    Free,
    SynchronizeStream,
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    next_handle: u64,
    live_events: HashMap<u64, Device>,
    live_allocs: HashMap<u64, DeviceAllocation>,
    current: HashMap<Device, StreamHandle>,
    fail: HashMap<Op, FailureKind>,
}

/// The recording fake. `Send + Sync`; share it as `Arc<FakeRuntime>` and coerce a clone to
/// `Arc<dyn DeviceRuntime>`.
#[derive(Debug, Default)]
pub struct FakeRuntime {
    state: Mutex<State>,
}

/// First fake event handle.
pub const FAKE_EVENT_BASE: u64 = 0xE000;
/// First fake allocation address.
pub const FAKE_PTR_BASE: u64 = 0x7000_0000;

impl FakeRuntime {
    pub fn new() -> Self {
        FakeRuntime::default()
    }

    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        // A test that panicked while holding the lock must not hide the log from others.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.st().calls.clone()
    }

    /// Returns and clears the log.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.st().calls)
    }

    /// Makes every later call of `op` fail with `kind`.
    pub fn fail_on(&self, op: Op, kind: FailureKind) {
        self.st().fail.insert(op, kind);
    }

    /// Stops failing `op`.
    pub fn clear_failure(&self, op: Op) {
        self.st().fail.remove(&op);
    }

    /// Sets the stream [`DeviceRuntime::current_stream`] reports for `device`.
    pub fn set_current_stream(&self, device: Device, stream: Option<StreamHandle>) {
        let mut st = self.st();
        match stream {
            Some(s) => st.current.insert(device, s),
            None => st.current.remove(&device),
        };
    }

    /// Events created and not destroyed.
    pub fn live_events(&self) -> usize {
        self.st().live_events.len()
    }

    /// Allocations made and not freed.
    pub fn live_allocations(&self) -> Vec<DeviceAllocation> {
        let mut v: Vec<_> = self.st().live_allocs.values().copied().collect();
        v.sort_by_key(|a| a.ptr);
        v
    }

    fn check(st: &State, op: Op) -> Result<()> {
        match st.fail.get(&op) {
            Some(&kind) => Err(DlpackError::new(
                kind,
                format!("fake runtime: injected failure in {op:?}"),
            )),
            None => Ok(()),
        }
    }

    fn fresh(st: &mut State) -> u64 {
        st.next_handle += 1;
        st.next_handle
    }
}

impl DeviceRuntime for FakeRuntime {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn record_event(&self, device: Device, stream: StreamHandle) -> Result<EventHandle> {
        let mut st = self.st();
        Self::check(&st, Op::RecordEvent)?;
        let event = EventHandle(FAKE_EVENT_BASE + Self::fresh(&mut st));
        st.live_events.insert(event.0, device);
        st.calls.push(Call::RecordEvent {
            device,
            stream,
            event,
        });
        Ok(event)
    }

    fn wait_event(&self, device: Device, stream: StreamHandle, event: EventHandle) -> Result<()> {
        let mut st = self.st();
        Self::check(&st, Op::WaitEvent)?;
        if !st.live_events.contains_key(&event.0) {
            return Err(DlpackError::new(
                FailureKind::InvalidStream,
                format!("fake runtime: wait on unknown event {event:?}"),
            ));
        }
        st.calls.push(Call::WaitEvent {
            device,
            stream,
            event,
        });
        Ok(())
    }

    fn destroy_event(&self, device: Device, event: EventHandle) -> Result<()> {
        let mut st = self.st();
        Self::check(&st, Op::DestroyEvent)?;
        st.live_events.remove(&event.0);
        st.calls.push(Call::DestroyEvent { device, event });
        Ok(())
    }

    fn current_stream(&self, device: Device) -> Result<Option<StreamHandle>> {
        let mut st = self.st();
        Self::check(&st, Op::CurrentStream)?;
        st.calls.push(Call::CurrentStream { device });
        Ok(st.current.get(&device).copied())
    }

    fn copy(
        &self,
        device: Device,
        kind: CopyKind,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        let mut st = self.st();
        Self::check(&st, Op::Copy)?;
        st.calls.push(Call::Copy {
            device,
            kind,
            dst,
            src,
            bytes,
            stream,
        });
        Ok(())
    }

    fn strided_copy_to_contiguous(
        &self,
        device: Device,
        src: DevicePtr,
        shape: &[i64],
        strides: &[i64],
        elem_bytes: usize,
        dst: DevicePtr,
        stream: StreamHandle,
    ) -> Result<()> {
        let mut st = self.st();
        Self::check(&st, Op::StridedCopy)?;
        st.calls.push(Call::StridedCopy {
            device,
            src,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            elem_bytes,
            dst,
            stream,
        });
        Ok(())
    }

    fn memset_zero(
        &self,
        device: Device,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        let mut st = self.st();
        Self::check(&st, Op::MemsetZero)?;
        st.calls.push(Call::MemsetZero {
            device,
            ptr,
            bytes,
            stream,
        });
        Ok(())
    }

    fn alloc(&self, kind: AllocKind, device: Device, bytes: usize) -> Result<DeviceAllocation> {
        let mut st = self.st();
        Self::check(&st, Op::Alloc)?;
        let ptr = FAKE_PTR_BASE + (Self::fresh(&mut st) << 20);
        let a = DeviceAllocation {
            ptr,
            bytes,
            kind,
            device,
        };
        st.live_allocs.insert(ptr, a);
        st.calls.push(Call::Alloc {
            kind,
            device,
            bytes,
            ptr,
        });
        Ok(a)
    }

    fn free(&self, allocation: &DeviceAllocation) -> Result<()> {
        let mut st = self.st();
        Self::check(&st, Op::Free)?;
        if st.live_allocs.remove(&allocation.ptr).is_none() {
            return Err(DlpackError::new(
                FailureKind::BadArgumentValue,
                format!("fake runtime: double free of {:#x}", allocation.ptr),
            ));
        }
        st.calls.push(Call::Free {
            ptr: allocation.ptr,
            kind: allocation.kind,
        });
        Ok(())
    }

    fn synchronize_stream(&self, device: Device, stream: StreamHandle) -> Result<()> {
        let mut st = self.st();
        Self::check(&st, Op::SynchronizeStream)?;
        st.calls.push(Call::SynchronizeStream { device, stream });
        Ok(())
    }

    /// Answers for its own live allocations (any address inside one); not logged.
    fn pointer_device(&self, ptr: DevicePtr) -> Result<Option<Device>> {
        let st = self.st();
        Ok(st
            .live_allocs
            .values()
            .find(|a| ptr >= a.ptr && ptr < a.ptr + a.bytes.max(1) as u64)
            .map(|a| a.dl_device()))
    }
}
