//! `Variable`: mutable state shared by eager code and traced functions.
//!
//! A variable is a shared resource with a unique id, a dtype and a fixed
//! shape, holding one device buffer. Eagerly, `read` returns a tensor of the
//! current value and `assign` replaces it. While tracing, the first read
//! makes the variable an implicit input of the graph, later reads see the
//! value the trace last assigned, and a variable assigned in the trace
//! becomes an extra output that the call writes back. That output is
//! aliased to the variable's input, so XLA updates the weights in place
//! (buffer donation) whenever no other tensor still holds the old value.
//!
//! Concrete functions hold only weak references to the variables they
//! captured: calling one after its variable is dropped fails with a
//! FailedPrecondition error. Calls that touch variables lock them (in
//! id order) from reading their buffers to writing the results back, so
//! concurrent `assign_add`s never lose updates.

use crate::dtype::DType;
use crate::error::{Error, OrPanic, Result};
use crate::ir::{Shape, TensorType};
use crate::runtime::Buffer;
use crate::tensor::Tensor;
use crate::trace;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError, Weak};

static NEXT_VARIABLE: AtomicU64 = AtomicU64::new(1);

/// Where a variable's name came from, which decides what may replace it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NameSource {
    /// `Variable:<id>`, given at creation.
    Automatic,
    /// A path in a module tree (`Variable::name_by_path`).
    Path,
    /// Given by hand (`Variable::named`, or a restored export's name).
    Given,
}

/// A variable's name, shared by its clones and changeable after creation.
pub(crate) struct VariableName(Mutex<(Arc<str>, NameSource)>);

impl VariableName {
    fn automatic(id: u64) -> VariableName {
        VariableName(Mutex::new((
            Arc::from(format!("Variable:{id}")),
            NameSource::Automatic,
        )))
    }

    fn lock(&self) -> MutexGuard<'_, (Arc<str>, NameSource)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn given(name: String) -> VariableName {
        VariableName(Mutex::new((Arc::from(name), NameSource::Given)))
    }

    pub(crate) fn get(&self) -> String {
        self.lock().0.to_string()
    }

    fn set(&self, name: String, source: NameSource) {
        *self.lock() = (Arc::from(name), source);
    }
}

impl std::fmt::Display for VariableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.lock().0.clone();
        f.write_str(&name)
    }
}

/// The shared state behind a `Variable`.
pub(crate) struct VariableInner {
    pub id: u64,
    /// Changes after creation: a module listing its variables names them
    /// by their paths (see [`VariableName`]).
    pub name: VariableName,
    pub dtype: DType,
    pub dims: Vec<i64>,
    /// An eager tensor: on one device, or sharded over a mesh.
    value: Mutex<Tensor>,
    /// For the stand-in a traced closure gets for a `Variable` parameter:
    /// which of the call's variables (by first occurrence) it stands for.
    pub arg_slot: Option<usize>,
    /// The id state keyed to this variable uses (optimizer slots): its own,
    /// or for a stand-in, the id of the variable it first stood for.
    pub slot_key: u64,
    /// Whether optimizers should train it (`tf.Variable(trainable=...)`);
    /// `Module::trainable_variables` leaves the others out. Atomic so that
    /// a variable already shared (a built layer's) can still be marked.
    pub trainable: AtomicBool,
    /// False while a variable created from a traced value waits for its
    /// lifted initializer to run (see [`Variable::try_new`]).
    initialized: AtomicBool,
    /// Frozen for fine-tuning (`Module::freeze`): not trained while set,
    /// whatever `trainable` says, and unfreezing restores `trainable`.
    frozen: AtomicBool,
    /// The built-in layer holding it, set when that layer lists it.
    layer_kind: OnceLock<LayerKind>,
}

/// The kind of built-in layer a variable belongs to, and so what its
/// weights are called and laid out like in other frameworks: what
/// `weights::Mapping::torch` and `flax` read to convert a checkpoint by
/// module kind rather than by name. A built-in layer notes it on its
/// variables when it lists them ([`Variable::layer_kind`]); a variable
/// made by hand has none, and presets leave it to the mapping's other
/// rules.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// `Linear` (`kernel [in, out]`, `bias`).
    Linear,
    /// `Conv1d`..`Conv3d` (`kernel [k.., in / groups, filters]`, `bias`).
    Conv,
    /// `ConvTranspose2d` (`kernel [k.., filters, in]`, Keras' layout).
    ConvTranspose,
    /// `DepthwiseConv2d` (`kernel [k.., in, multiplier]`).
    DepthwiseConv,
    /// `Embedding` (`embeddings [vocab, dim]`).
    Embedding,
    /// `BatchNorm` (`gamma`, `beta`, `moving_mean`, `moving_variance`).
    BatchNorm,
    /// `LayerNorm` (`gamma`, `beta`).
    LayerNorm,
    /// `GroupNorm` (`gamma`, `beta`).
    GroupNorm,
    /// `RmsNorm` (`gamma`).
    RmsNorm,
    /// `Lstm` (`kernel [in, 4u]`, `recurrent_kernel [u, 4u]`, `bias [4u]`;
    /// gates i, f, c, o).
    Lstm,
    /// `Gru` (`kernel [in, 3u]`, `recurrent_kernel [u, 3u]`, `bias [3u]`,
    /// or `[2, 3u]` with `reset_after`; gates z, r, h).
    Gru,
    /// A `MultiHeadAttention` projection: `query`, `key` and `value`
    /// (`kernel [features, heads, head_dim]`, `bias [heads, head_dim]`).
    AttentionInput,
    /// A `MultiHeadAttention`'s `output` projection (`kernel [heads,
    /// head_dim, features]`, `bias [features]`).
    AttentionOutput,
}

impl VariableInner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Tensor> {
        self.value.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the value for a read, an assignment or a whole call. Inside a
    /// host callback a variable that is locked gives an error instead of a
    /// wait: the call holding it may be the very call running the callback
    /// (its program reads the variable before and writes it after), which
    /// would then wait forever, and the callback may run on an XLA worker
    /// thread, so the holder cannot be told apart by thread.
    pub(crate) fn lock_for_call(&self) -> Result<MutexGuard<'_, Tensor>> {
        let guard = self.lock_when_free()?;
        if !self.initialized.load(Ordering::Acquire) {
            return Err(Error::FailedPrecondition(format!(
                "variable '{}' is uninitialized: it was created from a value computed in a traced \
                 function, and that function's first call did not complete, so its initial value \
                 was never computed",
                self.name
            )));
        }
        Ok(guard)
    }

    /// Sets the value of a variable created from a traced value, once its
    /// lifted initializer has run.
    pub(crate) fn initialize(&self, value: Arc<Buffer>) -> Result<()> {
        if value.dtype() != self.dtype || value.dims() != self.dims.as_slice() {
            return Err(Error::Value(format!(
                "the initial value of variable '{}' was traced as {} but computed as {:?} {:?}",
                self.name,
                self.tensor_type(),
                value.dtype(),
                value.dims()
            )));
        }
        *self.lock() = Tensor::from_shared_buffer(value);
        self.initialized.store(true, Ordering::Release);
        Ok(())
    }

    fn lock_when_free(&self) -> Result<MutexGuard<'_, Tensor>> {
        if !crate::runtime::in_host_callback() {
            return Ok(self.lock());
        }
        match self.value.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(e)) => Ok(e.into_inner()),
            Err(TryLockError::WouldBlock) => Err(Error::FailedPrecondition(format!(
                "variable '{}' is in use by a running function call (perhaps the one running \
                 this host callback), so a host callback cannot read or assign it: pass its \
                 value in as a callback input and return the new value as a result instead",
                self.name
            ))),
        }
    }

    pub(crate) fn tensor_type(&self) -> TensorType {
        TensorType::known(self.dtype, &self.dims)
    }

    fn check_value(&self, value: &Tensor, op: &str) -> Result<()> {
        let ty = value.tensor_type();
        let fits = ty.dtype == self.dtype
            && ty.shape.dims().is_none_or(|d| {
                d.len() == self.dims.len()
                    && d.iter()
                        .zip(&self.dims)
                        .all(|(a, b)| a.is_none_or(|a| a == *b))
            });
        if !fits {
            return Err(Error::invalid(
                op,
                format!(
                    "cannot assign a {ty} value to variable '{}' of type {}",
                    self.name,
                    self.tensor_type()
                ),
            ));
        }
        Ok(())
    }
}

/// How a concrete function refers to a variable: captured by its closure
/// (weakly), or passed as the call's `slot`-th distinct variable
/// argument (`proxy` is the stand-in used while tracing).
#[derive(Clone)]
pub(crate) enum VarRef {
    Captured(Weak<VariableInner>),
    Arg {
        slot: usize,
        proxy: Weak<VariableInner>,
    },
}

impl VarRef {
    pub(crate) fn of(var: &Arc<VariableInner>) -> VarRef {
        match var.arg_slot {
            Some(slot) => VarRef::Arg {
                slot,
                proxy: Arc::downgrade(var),
            },
            None => VarRef::Captured(Arc::downgrade(var)),
        }
    }

    pub(crate) fn same(&self, other: &VarRef) -> bool {
        match (self, other) {
            (VarRef::Captured(a), VarRef::Captured(b)) => a.ptr_eq(b),
            (VarRef::Arg { slot: a, .. }, VarRef::Arg { slot: b, .. }) => a == b,
            _ => false,
        }
    }

    /// The variable at call time: captured, or one of the call's arguments.
    pub(crate) fn resolve(
        &self,
        var_args: &[Variable],
        function: &str,
    ) -> Result<Arc<VariableInner>> {
        match self {
            VarRef::Captured(w) => w.upgrade().ok_or_else(|| dropped_variable(function)),
            VarRef::Arg { slot, .. } => var_args.get(*slot).map(|v| v.inner.clone()).ok_or_else(|| {
                Error::Type(format!("function '{function}' takes variable arguments; call it with call(), not call_flat()"))
            }),
        }
    }

    /// The variable while its trace is open (regions use the stand-in).
    pub(crate) fn resolve_in_trace(&self, function: &str) -> Result<Arc<VariableInner>> {
        match self {
            VarRef::Captured(w) | VarRef::Arg { proxy: w, .. } => {
                w.upgrade().ok_or_else(|| dropped_variable(function))
            }
        }
    }
}

/// The error for a concrete function whose variable was dropped.
pub(crate) fn dropped_variable(function: &str) -> Error {
    Error::FailedPrecondition(format!(
        "Could not find a variable captured by function '{function}'. This could mean that the \
         variable has been deleted: a concrete function keeps only weak references to the \
         variables it captured. Variables made inside the function (an optimizer's or a \
         layer's, say) are dropped when the trace that made them ends: create optimizers and \
         layers outside the function and capture them, as in TensorFlow"
    ))
}
/// A mutable tensor-valued resource. Cheap to clone (clones share the
/// variable).
///
/// A function that uses a variable captures it: each call reads its
/// current value, and assignments inside the function update it.
///
/// ```
/// use xlafn::prelude::*;
/// let v = Variable::new(Tensor::vector(&[1f32, 2.])?);
/// v.assign_add(&Tensor::vector(&[10f32, 20.])?)?;
/// assert_eq!(v.read().to_vec::<f32>()?, vec![11., 22.]);
///
/// let counter = v.clone(); // the same variable
/// let bump = function(move || -> Result<Tensor> {
///     counter.assign_add(&Tensor::vector(&[1f32, 1.])?)?;
///     Ok(counter.read())
/// });
/// bump.call(())?;
/// assert_eq!(bump.call(())?.to_vec::<f32>()?, vec![13., 24.]);
/// assert_eq!(v.read().to_vec::<f32>()?, vec![13., 24.]);
/// assert_eq!(bump.tracing_count(), 1);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone)]
pub struct Variable {
    inner: Arc<VariableInner>,
}

impl std::fmt::Debug for Variable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Variable('{}', {})",
            self.inner.name,
            self.inner.tensor_type()
        )
    }
}

impl Variable {
    /// A variable holding `initial`. Panics on errors; see
    /// [`Variable::try_new`].
    #[track_caller]
    pub fn new(initial: Tensor) -> Variable {
        Self::try_new(initial).or_panic()
    }

    /// A variable holding `initial`, an eager tensor or, on the first call
    /// of a traced function, a value computed in its trace (the API page's
    /// `tf.Variable(tf.ones_like(x))`). As in TensorFlow, the computation
    /// of such an initial value is lifted out of the graph and run once on
    /// that call's concrete arguments; until then the variable is
    /// uninitialized. Its shape must be fully known while tracing.
    ///
    /// ```
    /// use std::sync::OnceLock;
    /// use xlafn::prelude::*;
    /// let v: OnceLock<Variable> = OnceLock::new();
    /// let f = function(move |x: Tensor| -> Result<Tensor> {
    ///     let v = v.get_or_init(|| Variable::new(x.ones_like().unwrap()));
    ///     v.read().mul(&x)
    /// });
    /// assert_eq!(f.call((Tensor::vector(&[1, 2])?,))?.to_vec::<i32>()?, vec![1, 2]);
    /// assert_eq!(f.call((Tensor::vector(&[3, 4])?,))?.to_vec::<i32>()?, vec![3, 4]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn try_new(initial: Tensor) -> Result<Variable> {
        let (value, initialized) = match initial.is_symbolic() {
            false => (initial.clone(), true),
            true => (Self::placeholder()?, false),
        };
        let ty = initial.tensor_type();
        let dims = ty.shape.as_known().ok_or_else(|| {
            Error::Value(format!(
                "a Variable's initial value must have a fully known shape, got {ty}: give the \
                 function an input signature with known dimensions, or create the variable \
                 outside the function"
            ))
        })?;
        let id = NEXT_VARIABLE.fetch_add(1, Ordering::Relaxed);
        let inner = Arc::new(VariableInner {
            id,
            name: VariableName::automatic(id),
            dtype: ty.dtype,
            dims,
            value: Mutex::new(value),
            arg_slot: None,
            slot_key: id,
            trainable: AtomicBool::new(true),
            initialized: AtomicBool::new(initialized),
            frozen: AtomicBool::new(false),
            layer_kind: OnceLock::new(),
        });
        if !initialized {
            if !trace::is_tracing() {
                return Err(trace::out_of_scope_tensor(&initial));
            }
            trace::lift_initializer(&inner, &initial)?;
        }
        trace::note_variable_created();
        Ok(Variable { inner })
    }

    /// The value a variable holds where no value of its own exists yet
    /// (never read: see `VariableInner::initialized`).
    fn placeholder() -> Result<Tensor> {
        Tensor::try_scalar(0u8)
    }

    /// Names the variable (for signatures, exports, logs and errors). A
    /// name given here is kept: module paths never replace it.
    pub fn named(self, name: impl Into<String>) -> Variable {
        self.inner.name.set(name.into(), NameSource::Given);
        self
    }

    /// The variable's name: one given by [`Variable::named`]; else its
    /// path in the outermost module that has listed it
    /// (`blocks.0.attn.query.kernel`, see [`Variable::name_by_path`]);
    /// else `Variable:<id>`.
    pub fn name(&self) -> String {
        self.inner.name.get()
    }

    /// The kind of built-in layer this variable belongs to (see
    /// [`LayerKind`]), once that layer has listed it; `None` for a
    /// variable made by hand.
    pub fn layer_kind(&self) -> Option<LayerKind> {
        self.inner.layer_kind.get().copied()
    }

    /// Notes the layer kind holding this variable; the first one stays (a
    /// weight tied between two layers keeps its first layer's).
    pub(crate) fn note_layer_kind(&self, kind: LayerKind) {
        let _ = self.inner.layer_kind.set(kind);
    }

    /// Names the variable by its `path` in a module tree, unless it has a
    /// name given by hand. `Module::named_variables` calls it for every
    /// variable it lists, so a model's variables carry their paths into
    /// exports, `xlafn show`, logs and errors without `.named(..)`.
    /// A path replaces an earlier path only when it extends it (`0.kernel`
    /// listed from a sub-layer, then `blocks.0.kernel` from the whole
    /// model): the name is the path from the outermost module, whichever
    /// order the listings come in.
    pub fn name_by_path(&self, path: &str) {
        if path.is_empty() {
            return;
        }
        let mut name = self.inner.name.lock();
        let replace = match name.1 {
            NameSource::Automatic => true,
            NameSource::Path => {
                path.len() > name.0.len()
                    && path.ends_with(&*name.0)
                    && path.as_bytes()[path.len() - name.0.len() - 1] == b'.'
            }
            NameSource::Given => false,
        };
        if replace {
            *name = (Arc::from(path), NameSource::Path);
        }
    }

    /// Marks the variable as not trained (`tf.Variable(trainable=False)`:
    /// batch-norm statistics, step counters, or a built layer's weight
    /// frozen for fine-tuning). Every handle to the variable sees the mark.
    /// As with Keras' `trainable = False` after `compile`, a function
    /// already traced keeps the variables it was traced with: mark them
    /// before the first call of the training step.
    pub fn non_trainable(self) -> Variable {
        self.inner.trainable.store(false, Ordering::Relaxed);
        self
    }

    /// Whether optimizers should train it: not marked
    /// [`Variable::non_trainable`] and not frozen.
    pub fn trainable(&self) -> bool {
        self.inner.trainable.load(Ordering::Relaxed) && !self.frozen()
    }

    /// Freezes the variable for fine-tuning (`frozen` true) or thaws it:
    /// a frozen variable is not trainable, and thawing gives back what it
    /// was (a batch norm's moving statistics stay non-trainable). What
    /// `Module::freeze` and `unfreeze` set on every variable of a model;
    /// as with [`Variable::non_trainable`], set it before a training step
    /// is first traced.
    pub fn set_frozen(&self, frozen: bool) {
        self.inner.frozen.store(frozen, Ordering::Relaxed);
    }

    /// Whether the variable is frozen (see [`Variable::set_frozen`]).
    pub fn frozen(&self) -> bool {
        self.inner.frozen.load(Ordering::Relaxed)
    }

    /// The unique id of this variable.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The key under which state belonging to this variable (optimizer
    /// slots) is kept: its id, or inside a trace with variable parameters,
    /// the id of the variable the parameter was first called with.
    pub fn slot_key(&self) -> u64 {
        self.inner.slot_key
    }

    /// The element type, fixed at creation (assignments must match it).
    pub fn dtype(&self) -> DType {
        self.inner.dtype
    }

    /// The dimensions, fixed at creation (assignments must match them).
    pub fn dims(&self) -> &[i64] {
        &self.inner.dims
    }

    /// The trace type of this variable as a function argument.
    pub(crate) fn spec(&self, alias: usize) -> VariableSpec {
        VariableSpec {
            dtype: self.inner.dtype,
            dims: self.inner.dims.clone(),
            alias,
        }
    }

    pub(crate) fn from_inner(inner: Arc<VariableInner>) -> Variable {
        Variable { inner }
    }

    /// The current value. Eagerly a tensor of the value now (later
    /// assignments do not change it); while tracing, the value this trace
    /// last assigned, or the variable's value when the call starts.
    #[track_caller]
    pub fn read(&self) -> Tensor {
        self.try_read().or_panic()
    }

    /// `read`, reporting errors instead of panicking.
    pub fn try_read(&self) -> Result<Tensor> {
        let value = if trace::is_tracing() {
            trace::read_variable(&self.inner)?
        } else {
            self.check_not_stand_in()?;
            self.inner.lock_for_call()?.clone()
        };
        if let Some(recorder) = crate::tensor::hooks::recorder() {
            (recorder.record_variable_read)(self.inner.id, &value);
        }
        Ok(value)
    }

    /// Sets the value (dtype and shape must match).
    ///
    /// The variable keeps where it lives, as a `tf.Variable` keeps its
    /// device and a DTensor variable its layout: a value with no placement
    /// of its own (not sharded, not committed to a device) is laid out
    /// like the current value, sharded with its sharding or copied to its
    /// committed device. So `checkpoint::restore` leaves a model-parallel
    /// weight split as it was. A sharded or committed value keeps its own
    /// placement: that is the caller's explicit choice.
    pub fn assign(&self, value: &Tensor) -> Result<()> {
        self.inner.check_value(value, "assign")?;
        if trace::is_tracing() {
            return trace::assign_variable(&self.inner, value);
        }
        self.check_not_stand_in()?;
        if value.is_symbolic() {
            return Err(trace::out_of_scope_tensor(value));
        }
        let mut current = self.inner.lock_for_call()?;
        *current = placed_like(&current, value)?;
        Ok(())
    }

    /// A parameter's stand-in exists only inside its trace.
    fn check_not_stand_in(&self) -> Result<()> {
        if self.inner.arg_slot.is_some() {
            return Err(Error::OutOfScope(format!(
                "variable parameter '{}' was kept from a traced function's body and used outside it",
                self.inner.name
            )));
        }
        Ok(())
    }

    /// The stand-in for the `slot`-th distinct variable argument of a call
    /// being traced (its value buffer is never used).
    pub(crate) fn stand_in(
        slot: usize,
        like: &VariableSpec,
        stands_for: Option<u64>,
    ) -> Result<Variable> {
        let id = NEXT_VARIABLE.fetch_add(1, Ordering::Relaxed);
        let placeholder = Self::placeholder()?;
        let inner = VariableInner {
            id,
            name: VariableName::given(format!("argument variable {slot}")),
            dtype: like.dtype,
            dims: like.dims.clone(),
            value: Mutex::new(placeholder),
            arg_slot: Some(slot),
            slot_key: stands_for.unwrap_or(id),
            trainable: AtomicBool::new(true),
            initialized: AtomicBool::new(true),
            frozen: AtomicBool::new(false),
            layer_kind: OnceLock::new(),
        };
        Ok(Variable {
            inner: Arc::new(inner),
        })
    }

    /// `self = self + delta`.
    pub fn assign_add(&self, delta: &Tensor) -> Result<()> {
        self.update(|v| v.add(delta))
    }

    /// `self = self - delta`.
    pub fn assign_sub(&self, delta: &Tensor) -> Result<()> {
        self.update(|v| v.sub(delta))
    }

    /// Eagerly, read-modify-write under the variable's lock (so concurrent
    /// eager updates are not lost); traced, the same as read + assign.
    fn update(&self, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<()> {
        if trace::is_tracing() {
            let next = f(&self.try_read()?)?;
            return self.assign(&next);
        }
        let mut guard = self.inner.lock_for_call()?;
        let next = f(&guard.clone())?;
        self.inner.check_value(&next, "assign")?;
        if next.is_symbolic() {
            return Err(trace::out_of_scope_tensor(&next));
        }
        *guard = next;
        Ok(())
    }

    /// Locks the variable's value for a call that reads and replaces it;
    /// an error if it is uninitialized.
    pub(crate) fn lock_buffer(&self) -> Result<MutexGuard<'_, Tensor>> {
        self.inner.lock_for_call()
    }

    /// The device address of the current buffer (CPU), to observe in-place
    /// updates in tests and diagnostics.
    #[doc(hidden)]
    pub fn device_address(&self) -> Result<usize> {
        self.inner.lock().buffer()?.device_address()
    }
}

/// `value`, laid out like `current` when it has no placement of its own
/// (see [`Variable::assign`]).
fn placed_like(current: &Tensor, value: &Tensor) -> Result<Tensor> {
    if value.is_sharded() || value.is_committed() {
        return Ok(value.clone());
    }
    if let Some(sharding) = current.sharding() {
        return value.shard(&sharding);
    }
    if current.is_committed() {
        return value.to_device(current.device()?);
    }
    Ok(value.clone())
}

/// The trace type of a `Variable` argument: dtype, shape, and its
/// aliasing pattern (`alias` is the index of the first argument that is the
/// same variable), so `f(a, a)` and `f(b, b)` share a trace and `f(a, b)`
/// does not.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VariableSpec {
    /// The variable's element type.
    pub dtype: DType,
    /// The variable's dimensions (always fully known).
    pub dims: Vec<i64>,
    /// The index of the first argument that is this same variable
    /// (TensorFlow's `alias_id`).
    pub alias: usize,
}

impl std::fmt::Display for VariableSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VariableSpec(shape={}, dtype={}, alias_id={})",
            Shape::known(&self.dims),
            self.dtype,
            self.alias
        )
    }
}
