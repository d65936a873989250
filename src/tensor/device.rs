//! Where tensors live and where ops run: the device list, a scoped
//! default device, `Tensor::device` and `to_device`, and the placement rule
//! every eager op and function call follows.
//!
//! The rule is JAX's. A value placed explicitly (made inside a device
//! scope, moved with `to_device`, or computed from such a value) is
//! *committed* to its device; any other value is not. An op or a function
//! runs on the device of its committed inputs, moving the uncommitted ones
//! there; inputs committed to different devices are an error, never a
//! silent copy. With no committed input it runs on the device of the
//! innermost `with_device` scope (its results are then committed there),
//! else where its first input is: values made outside any scope are on
//! the client's first device.

use super::{Repr, Tensor};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, Client, Device};
use std::borrow::Cow;
use std::cell::Cell;

thread_local! {
    /// The innermost `with_device` scope's device on this thread.
    static SCOPE: Cell<Option<Device>> = const { Cell::new(None) };
}

/// The devices of the default client, in the plugin's order (the CPU
/// plugin has 4 unless `set_cpu_device_count` or `XLAFN_CPU_DEVICES` says
/// otherwise). In a multi-process run (`xlafn::distributed`) these are
/// every process's devices, as JAX's `jax.devices()`: a mesh may span
/// them, while each process holds values only on its own,
/// [`local_devices`].
///
/// ```
/// let devices = xlafn::devices()?;
/// assert!(!devices.is_empty());
/// assert_eq!(devices[0].to_string(), "cpu:0");
/// assert_eq!(devices, xlafn::local_devices()?); // one process
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn devices() -> Result<Vec<Device>> {
    Ok(Client::default_client()?.global_devices().to_vec())
}

/// This process's devices (JAX's `jax.local_devices()`): all of
/// [`devices`] unless this process is one of a multi-process run.
pub fn local_devices() -> Result<Vec<Device>> {
    Ok(Client::default_client()?.devices().to_vec())
}

/// `device`, checked to be one of this process's devices of the default
/// client: one that can hold its values.
pub(crate) fn local_device(device: Device) -> Result<Device> {
    let device = crate::runtime::default_client_device(device)?;
    crate::runtime::check_addressable(device)?;
    Ok(device)
}

/// The device new values and input-less ops go to on this thread: the
/// innermost [`with_device`] scope's, else the client's first device.
pub fn default_device() -> Result<Device> {
    match SCOPE.get() {
        Some(d) => Ok(d),
        None => Ok(Client::default_client()?.default_device()),
    }
}

/// Is a `with_device` scope active on this thread?
pub(crate) fn in_device_scope() -> bool {
    SCOPE.get().is_some()
}

/// Runs `body` with `device` as this thread's default device (TensorFlow's
/// `with tf.device(...)`, JAX's `jax.default_device`). Values made inside
/// are committed to it; scopes nest, and the previous device comes back
/// when `body` returns or panics.
///
/// ```
/// use xlafn::prelude::*;
/// let second = xlafn::devices()?[1];
/// let y = xlafn::with_device(second, || Tensor::from_vec(vec![1f32, 2.], &[2])?.exp())?;
/// assert_eq!(y.device()?, second);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn with_device<R>(device: Device, body: impl FnOnce() -> R) -> R {
    struct Restore(Option<Device>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPE.set(self.0);
        }
    }
    // A device the client does not know is kept: the ops in the scope
    // then report it.
    let _restore = Restore(SCOPE.replace(Some(device)));
    body()
}

/// **Devices and sharding**: which device holds a tensor, and moving it.
impl Tensor {
    /// The device holding this eager tensor (an error for a symbolic one).
    pub fn device(&self) -> Result<Device> {
        Ok(self.buffer()?.device())
    }

    /// Is this tensor committed to its device (see the module docs)?
    pub fn is_committed(&self) -> bool {
        matches!(&self.repr, Repr::Eager(b) if b.is_committed())
    }

    /// A copy on `device`, committed to it (`jax.device_put(x, device)`).
    /// Ops on it then run there. A tensor already committed there is
    /// returned as it is; a sharded one is gathered there whole.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// let d1 = xlafn::devices()?[1];
    /// let x = Tensor::from_vec(vec![1f32, 2., 3.], &[3])?.to_device(d1)?;
    /// let y = x.mul_scalar(2.0)?; // runs on cpu:1; the scalar moves there
    /// assert_eq!((y.device()?, y.to_vec::<f32>()?), (d1, vec![2., 4., 6.]));
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if self.is_sharded() {
            let device = local_device(device)?;
            return self.unshard()?.to_device(device);
        }
        let buffer = self.buffer()?;
        let device = local_device(device)?;
        if buffer.device() == device && buffer.is_committed() {
            return Ok(self.clone());
        }
        let moved = buffer.copy_to_device(device)?;
        Ok(Tensor::from_buffer(moved.with_committed(true)))
    }
}

/// Where a computation over `inputs` runs, and whether its results are
/// committed there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement {
    pub device: Device,
    pub committed: bool,
}

/// Decides where a computation over `inputs` runs (see the module docs);
/// `what` names it in the error for inputs committed to different devices.
pub(crate) fn place(inputs: &[&Buffer], what: &dyn Fn() -> String) -> Result<Placement> {
    let mut committed: Option<Device> = None;
    for (i, b) in inputs.iter().enumerate() {
        if !b.is_committed() {
            continue;
        }
        match committed {
            None => committed = Some(b.device()),
            Some(d) if d == b.device() => {}
            Some(d) => {
                return Err(Error::Value(format!(
                    "{}: its inputs are committed to different devices ({d} and, for input {i}, \
                     {}); move them to one device with to_device",
                    what(),
                    b.device()
                )));
            }
        }
    }
    if let Some(device) = committed {
        return Ok(Placement {
            device,
            committed: true,
        });
    }
    let device = match inputs.first() {
        Some(first) if !in_device_scope() => first.device(),
        _ => default_device()?,
    };
    Ok(Placement {
        device,
        committed: in_device_scope(),
    })
}

/// `inputs`, with those not on `device` copied there (uncommitted values
/// follow the computation). The copies go into `copies`, so the borrowed
/// list stays valid; the common case, all there already, copies nothing.
pub(crate) fn gather_on<'a>(
    inputs: &'a [&'a Buffer],
    device: Device,
    copies: &'a mut Vec<Buffer>,
) -> Result<Cow<'a, [&'a Buffer]>> {
    if inputs.iter().all(|b| b.device() == device) {
        return Ok(Cow::Borrowed(inputs));
    }
    for b in inputs.iter().filter(|b| b.device() != device) {
        copies.push(b.copy_to_device(device)?);
    }
    let mut next_copy = copies.iter();
    Ok(Cow::Owned(
        inputs
            .iter()
            .map(|b| match b.device() == device {
                true => *b,
                false => next_copy.next().expect("one copy per moved input"),
            })
            .collect(),
    ))
}
