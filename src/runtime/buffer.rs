//! Device buffers.
//!
//! A `Buffer` owns a `PJRT_Buffer*` and remembers the dtype and dimensions
//! it was made with, because PJRT's execute checks only byte sizes: the
//! executable wrapper compares these against the program's parameters.
//!
//! Thread safety: PJRT buffers may be used from any thread (reads and
//! execution are synchronised by PJRT's events), so `Buffer` is `Send + Sync`.

use super::client::{Client, Device, Platform};
use super::element::{Element, as_bytes, from_bytes};
use super::recycle;
use super::sys;
use super::wait::WaitHistory;
use crate::dtype::ArraySpec;
use crate::dtype::DType;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

static LIVE_BUFFERS: AtomicUsize = AtomicUsize::new(0);

/// How many `Buffer`s exist right now in this process (for leak tests).
pub fn live_buffer_count() -> usize {
    LIVE_BUFFERS.load(Ordering::Relaxed)
}

/// Live buffers on one device: how many, and their arrays' bytes.
struct Tally {
    buffers: AtomicUsize,
    bytes: AtomicI64,
}

impl Tally {
    const fn new() -> Tally {
        Tally {
            buffers: AtomicUsize::new(0),
            bytes: AtomicI64::new(0),
        }
    }
}

/// Devices tallied one by one per platform (the CPU client has at most
/// 1024); any further device shares the last slot.
const TALLIED_DEVICES: usize = 1024;
const PLATFORMS: [Platform; 3] = [Platform::Cpu, Platform::Cuda, Platform::Other];
static TALLIES: [[Tally; TALLIED_DEVICES]; 3] =
    [const { [const { Tally::new() }; TALLIED_DEVICES] }; 3];

fn tally(device: &Device) -> &'static Tally {
    let platform = PLATFORMS
        .iter()
        .position(|p| *p == device.platform)
        .unwrap_or(2);
    &TALLIES[platform][device.index.min(TALLIED_DEVICES - 1)]
}

/// One device's live buffers (see [`live_memory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// The device's platform.
    pub platform: Platform,
    /// Its index in its client's device list.
    pub device: usize,
    /// Live `Buffer`s on it.
    pub buffers: usize,
    /// Their arrays' bytes (elements times element size; a plugin's
    /// padding and alignment are not counted).
    pub bytes: i64,
}

/// Every device that holds live buffers now: their count and bytes. The
/// buffers xlafn keeps for reuse (`runtime::recycle`) are not counted.
pub fn live_memory() -> Vec<DeviceMemory> {
    let mut out = Vec::new();
    for (p, platform) in PLATFORMS.iter().enumerate() {
        for (device, t) in TALLIES[p].iter().enumerate() {
            let buffers = t.buffers.load(Ordering::Relaxed);
            if buffers > 0 {
                out.push(DeviceMemory {
                    platform: *platform,
                    device,
                    buffers,
                    bytes: t.bytes.load(Ordering::Relaxed),
                });
            }
        }
    }
    out
}

/// An array on a device.
pub struct Buffer {
    client: Arc<Client>,
    raw: *mut sys::PJRT_Buffer,
    device: Device,
    dtype: DType,
    dims: Vec<i64>,
    /// For a program's result: how waits for that program went.
    wait_history: Option<Arc<WaitHistory>>,
    /// Was the device chosen explicitly (a device scope, `to_device`, or
    /// computed from such a value)? The tensor layer moves uncommitted
    /// values to where the others are, and refuses to mix committed ones.
    committed: bool,
}

// SAFETY: PJRT buffers are thread-safe handles; all access goes through PJRT
// calls, which synchronise through the buffer's ready event.
unsafe impl Send for Buffer {}
// SAFETY: as for `Send`; `&Buffer` only reads or passes the handle to PJRT.
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer({}{:?} on {})",
            self.dtype, self.dims, self.device
        )
    }
}

/// Maps a dtype to the PJRT buffer type; strings have none.
pub(crate) fn pjrt_type(dtype: DType) -> Result<sys::PJRT_Buffer_Type> {
    Ok(match dtype.check_compilable()? {
        DType::Bool => sys::PJRT_Buffer_Type_PRED,
        DType::I8 => sys::PJRT_Buffer_Type_S8,
        DType::I16 => sys::PJRT_Buffer_Type_S16,
        DType::I32 => sys::PJRT_Buffer_Type_S32,
        DType::I64 => sys::PJRT_Buffer_Type_S64,
        DType::U8 => sys::PJRT_Buffer_Type_U8,
        DType::U16 => sys::PJRT_Buffer_Type_U16,
        DType::U32 => sys::PJRT_Buffer_Type_U32,
        DType::U64 => sys::PJRT_Buffer_Type_U64,
        DType::F16 => sys::PJRT_Buffer_Type_F16,
        DType::BF16 => sys::PJRT_Buffer_Type_BF16,
        DType::F32 => sys::PJRT_Buffer_Type_F32,
        DType::F64 => sys::PJRT_Buffer_Type_F64,
        DType::C64 => sys::PJRT_Buffer_Type_C64,
        DType::C128 => sys::PJRT_Buffer_Type_C128,
        DType::String => unreachable!("rejected by check_compilable"),
    })
}

/// The inverse of `pjrt_type`, for types read back from the plugin.
pub(crate) fn dtype_of(t: sys::PJRT_Buffer_Type) -> Result<DType> {
    DType::NUMERIC_AND_BOOL
        .into_iter()
        .find(|d| pjrt_type(*d).ok() == Some(t))
        .ok_or_else(|| Error::Plugin(format!("the plugin returned unsupported buffer type {t}")))
}

/// An array's bytes (0 for dtypes without a fixed size).
fn array_bytes(dtype: DType, dims: &[i64]) -> i64 {
    dims.iter().product::<i64>() * dtype.size_in_bytes().unwrap_or(0) as i64
}

fn element_count(dims: &[i64]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| acc.checked_mul(d))
            .ok_or_else(|| Error::Value(format!("invalid buffer dimensions {dims:?}")))
    })
}

impl Buffer {
    /// Copies host elements to `device`. `data.len()` must equal the
    /// product of `dims`.
    pub fn from_slice<T: Element>(
        client: &Arc<Client>,
        device: Device,
        data: &[T],
        dims: &[i64],
    ) -> Result<Buffer> {
        let n = element_count(dims)?;
        if n != data.len() {
            return Err(Error::Value(format!(
                "cannot make a buffer of shape {dims:?} ({n} elements) from {} values",
                data.len()
            )));
        }
        Self::from_bytes(client, device, T::DTYPE, as_bytes(data), dims)
    }

    /// Copies raw bytes (dense, row-major) to `device`.
    pub fn from_bytes(
        client: &Arc<Client>,
        device: Device,
        dtype: DType,
        bytes: &[u8],
        dims: &[i64],
    ) -> Result<Buffer> {
        let _span = super::profile::span("host to device")
            .arg("bytes", bytes.len())
            .arg("device", device);
        let ty = pjrt_type(dtype)?;
        crate::dtype::check_array_size(dtype, dims)?;
        check_device(client, device)?;
        let expected = element_count(dims)? * dtype.size_in_bytes()?;
        if bytes.len() != expected {
            return Err(Error::Value(format!(
                "{dtype} buffer of shape {dims:?} needs {expected} bytes, got {}",
                bytes.len()
            )));
        }
        let plugin = client.plugin();
        // The pointer of an empty slice may be dangling; give PJRT a real one.
        let fallback = [0u8; 8];
        let data = if bytes.is_empty() {
            fallback.as_ptr()
        } else {
            bytes.as_ptr()
        };
        let mut args = sys::PJRT_Client_BufferFromHostBuffer_Args {
            struct_size: sys::PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE as usize,
            client: client.raw(),
            data: data.cast(),
            type_: ty,
            dims: dims.as_ptr(),
            num_dims: dims.len(),
            host_buffer_semantics: sys::PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
            device: device.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Client_BufferFromHostBuffer,
            "PJRT_Client_BufferFromHostBuffer",
        )?;
        // SAFETY: `bytes` holds exactly the dense array described by `ty` and
        // `dims` and stays borrowed for the call; with ImmutableOnlyDuringCall
        // the plugin copies it before returning.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Client_BufferFromHostBuffer")?;
        plugin.await_event(
            args.done_with_host_buffer,
            "PJRT_Client_BufferFromHostBuffer",
            None,
        )?;
        Ok(Self::adopt(
            client.clone(),
            args.buffer,
            device,
            dtype,
            dims.to_vec(),
        ))
    }

    /// Wraps a buffer returned by PJRT on `device`; takes ownership.
    pub(crate) fn adopt(
        client: Arc<Client>,
        raw: *mut sys::PJRT_Buffer,
        device: Device,
        dtype: DType,
        dims: Vec<i64>,
    ) -> Buffer {
        LIVE_BUFFERS.fetch_add(1, Ordering::Relaxed);
        let t = tally(&device);
        t.buffers.fetch_add(1, Ordering::Relaxed);
        t.bytes
            .fetch_add(array_bytes(dtype, &dims), Ordering::Relaxed);
        Buffer {
            client,
            raw,
            device,
            dtype,
            dims,
            wait_history: None,
            committed: false,
        }
    }

    /// Marks the buffer's placement as chosen explicitly (or not).
    pub fn with_committed(mut self, committed: bool) -> Buffer {
        self.committed = committed;
        self
    }

    /// Was the buffer's device chosen explicitly (see `with_committed`)?
    pub fn is_committed(&self) -> bool {
        self.committed
    }

    /// Marks this buffer as a result of the program whose waits `history`
    /// records (see `runtime::wait`).
    pub(crate) fn with_wait_history(mut self, history: Arc<WaitHistory>) -> Buffer {
        self.wait_history = Some(history);
        self
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Buffer {
        self.raw
    }

    /// The client that made the buffer.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device that holds the buffer.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The device the plugin says holds the buffer (to cross-check
    /// `device`).
    pub fn device_from_plugin(&self) -> Result<Device> {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_Buffer_Device_Args {
            struct_size: sys::PJRT_Buffer_Device_Args_STRUCT_SIZE as usize,
            buffer: self.raw,
            ..Default::default()
        };
        let f = plugin.func(plugin.api().PJRT_Buffer_Device, "PJRT_Buffer_Device")?;
        // SAFETY: live buffer; a pure query returning a device the client owns.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Buffer_Device")?;
        self.client.device_of_raw(args.device).ok_or_else(|| {
            Error::Plugin("a buffer reports a device its client does not list".into())
        })
    }

    /// A copy of this buffer on `device` (of the same client). Copying to
    /// the device it is on is refused by PJRT, so that returns a copy made
    /// through the host.
    pub fn copy_to_device(&self, device: Device) -> Result<Buffer> {
        check_device(&self.client, device)?;
        if device == self.device {
            let bytes = self.to_bytes()?;
            return Buffer::from_bytes(&self.client, device, self.dtype, &bytes, &self.dims);
        }
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_Buffer_CopyToDevice_Args {
            struct_size: sys::PJRT_Buffer_CopyToDevice_Args_STRUCT_SIZE as usize,
            buffer: self.raw,
            dst_device: device.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Buffer_CopyToDevice,
            "PJRT_Buffer_CopyToDevice",
        )?;
        // SAFETY: live buffer and a device of the same client (checked
        // above); the new buffer is ours, and PJRT orders the copy after
        // the pending writes of the source.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Buffer_CopyToDevice")?;
        Ok(Self::adopt(
            self.client.clone(),
            args.dst_buffer,
            device,
            self.dtype,
            self.dims.clone(),
        ))
    }

    /// The dimensions (row-major).
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The number of elements: the product of the dimensions.
    pub fn element_count(&self) -> usize {
        self.dims.iter().product::<i64>() as usize
    }

    /// Blocks until the buffer's value is computed; reports execution errors.
    pub fn block_until_ready(&self) -> Result<()> {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_Buffer_ReadyEvent_Args {
            struct_size: sys::PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE as usize,
            buffer: self.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Buffer_ReadyEvent,
            "PJRT_Buffer_ReadyEvent",
        )?;
        // SAFETY: live buffer; the returned event is owned and awaited below.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Buffer_ReadyEvent")?;
        // A value that an aborted collective was computing fails here.
        plugin
            .await_event(
                args.event,
                "PJRT_Buffer_ReadyEvent",
                self.wait_history.as_deref(),
            )
            .map_err(super::run_health::name_the_dead)
    }

    /// Copies the whole buffer into host memory, as raw bytes.
    ///
    /// On CPU the buffer already lives in host memory: waiting for it and
    /// copying through its pointer is several times faster than
    /// `PJRT_Buffer_ToHostBuffer`, which completes on another thread.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let size = self.element_count() * self.dtype.size_in_bytes()?;
        let _span = super::profile::span("device to host").arg("bytes", size);
        self.block_until_ready()?;
        let mut out = vec![0u8; size];
        if size == 0 {
            return Ok(out);
        }
        if self.client.platform() == Platform::Cpu {
            let ptr = self.unsafe_pointer()?;
            // SAFETY: the buffer is ready, lives in host memory on the CPU
            // platform, uses the default dense row-major layout (we never ask
            // for another), and holds `size` bytes; `out` has room for them.
            unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, out.as_mut_ptr(), size) };
            return Ok(out);
        }
        self.copy_to_host_slow(&mut out)?;
        Ok(out)
    }

    /// Reads the buffer back as elements of type `T`, which must match.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::Type(format!(
                "cannot read a {} buffer as {}",
                self.dtype,
                T::DTYPE
            )));
        }
        Ok(from_bytes(&self.to_bytes()?))
    }

    /// The buffer's device address, once ready (for observing in-place
    /// updates; the memory must not be accessed through it).
    pub fn device_address(&self) -> Result<usize> {
        self.block_until_ready()?;
        self.unsafe_pointer()
    }

    fn unsafe_pointer(&self) -> Result<usize> {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_Buffer_UnsafePointer_Args {
            struct_size: sys::PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE as usize,
            buffer: self.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Buffer_UnsafePointer,
            "PJRT_Buffer_UnsafePointer",
        )?;
        // SAFETY: live buffer; the call only reads its address.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Buffer_UnsafePointer")?;
        Ok(args.buffer_pointer)
    }

    fn copy_to_host_slow(&self, out: &mut [u8]) -> Result<()> {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_Buffer_ToHostBuffer_Args {
            struct_size: sys::PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE as usize,
            src: self.raw,
            dst: out.as_mut_ptr().cast(),
            dst_size: out.len(),
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Buffer_ToHostBuffer,
            "PJRT_Buffer_ToHostBuffer",
        )?;
        // SAFETY: `out` holds the full dense size of the buffer and stays
        // borrowed until the copy's event has been awaited below.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Buffer_ToHostBuffer")?;
        // A value that an aborted collective was computing fails here.
        plugin
            .await_event(
                args.event,
                "PJRT_Buffer_ToHostBuffer",
                self.wait_history.as_deref(),
            )
            .map_err(super::run_health::name_the_dead)
    }

    /// A buffer of `spec` for an output slot: a recycled one when the pool
    /// has one, else uninitialized memory of the plugin's.
    pub(crate) fn for_output_slot(
        client: &Arc<Client>,
        device: Device,
        spec: &ArraySpec,
    ) -> Result<Buffer> {
        if let Some(raw) = recycle::take(client, device, spec) {
            return Ok(Self::adopt(
                client.clone(),
                raw,
                device,
                spec.dtype,
                spec.dims.clone(),
            ));
        }
        let plugin = client.plugin();
        let mut args = sys::PJRT_Client_CreateUninitializedBuffer_Args {
            struct_size: sys::PJRT_Client_CreateUninitializedBuffer_Args_STRUCT_SIZE as usize,
            client: client.raw(),
            shape_dims: spec.dims.as_ptr(),
            shape_num_dims: spec.dims.len(),
            shape_element_type: pjrt_type(spec.dtype)?,
            device: device.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Client_CreateUninitializedBuffer,
            "PJRT_Client_CreateUninitializedBuffer",
        )?;
        // SAFETY: the dims outlive the call; the device belongs to `client`.
        plugin.check(
            unsafe { f(&mut args) },
            "PJRT_Client_CreateUninitializedBuffer",
        )?;
        Ok(Self::adopt(
            client.clone(),
            args.buffer,
            device,
            spec.dtype,
            spec.dims.clone(),
        ))
    }

    /// Has the buffer been donated to (consumed by) an execution?
    pub fn is_deleted(&self) -> bool {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_Buffer_IsDeleted_Args {
            struct_size: sys::PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE as usize,
            buffer: self.raw,
            ..Default::default()
        };
        match plugin.func(plugin.api().PJRT_Buffer_IsDeleted, "PJRT_Buffer_IsDeleted") {
            // SAFETY: live handle; a pure query.
            Ok(f) => plugin
                .check(unsafe { f(&mut args) }, "PJRT_Buffer_IsDeleted")
                .map_or(true, |()| args.is_deleted),
            Err(_) => true,
        }
    }

    /// The element type as the plugin reports it (used to cross-check).
    pub fn device_dtype(&self) -> Result<DType> {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_Buffer_ElementType_Args {
            struct_size: sys::PJRT_Buffer_ElementType_Args_STRUCT_SIZE as usize,
            buffer: self.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Buffer_ElementType,
            "PJRT_Buffer_ElementType",
        )?;
        // SAFETY: live buffer; a pure query.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Buffer_ElementType")?;
        dtype_of(args.type_)
    }

    /// The dimensions as the plugin reports them (used to cross-check).
    pub fn device_dims(&self) -> Result<Vec<i64>> {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_Buffer_Dimensions_Args {
            struct_size: sys::PJRT_Buffer_Dimensions_Args_STRUCT_SIZE as usize,
            buffer: self.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Buffer_Dimensions,
            "PJRT_Buffer_Dimensions",
        )?;
        // SAFETY: live buffer; the dims array lives as long as the buffer and
        // is copied at once.
        unsafe {
            plugin.check(f(&mut args), "PJRT_Buffer_Dimensions")?;
            if args.num_dims == 0 {
                return Ok(Vec::new());
            }
            Ok(std::slice::from_raw_parts(args.dims, args.num_dims).to_vec())
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        LIVE_BUFFERS.fetch_sub(1, Ordering::Relaxed);
        let t = tally(&self.device);
        t.buffers.fetch_sub(1, Ordering::Relaxed);
        t.bytes
            .fetch_sub(array_bytes(self.dtype, &self.dims), Ordering::Relaxed);
        let spec = ArraySpec::new(self.dtype, &self.dims);
        if recycle::eligible(&spec)
            && !self.is_deleted()
            && recycle::give(&self.client, self.device, &spec, self.raw)
        {
            return;
        }
        destroy_raw(&self.client, self.raw);
    }
}

/// Refuses a device of another client (PJRT would use its handle anyway)
/// and another process's device (this process cannot write its memory).
fn check_device(client: &Client, device: Device) -> Result<()> {
    if !client.knows(device) {
        return Err(Error::Value(format!(
            "device {device} does not belong to this {} client",
            client.platform_name()
        )));
    }
    super::check_addressable(device)
}

/// Destroys a buffer handle.
pub(crate) fn destroy_raw(client: &Client, raw: *mut sys::PJRT_Buffer) {
    let plugin = client.plugin();
    let mut args = sys::PJRT_Buffer_Destroy_Args {
        struct_size: sys::PJRT_Buffer_Destroy_Args_STRUCT_SIZE as usize,
        buffer: raw,
        ..Default::default()
    };
    if let Some(f) = plugin.api().PJRT_Buffer_Destroy {
        // SAFETY: the caller owns the handle and destroys it exactly once;
        // PJRT keeps the memory alive for any execution still using it.
        let err = unsafe { f(&mut args) };
        let _ = plugin.check(err, "PJRT_Buffer_Destroy");
    }
}
