//! `#[xlafn::function]`: turns a `fn` into a traced, XLA-compiled xlafn
//! `Function`, rewriting tensor control flow the way TensorFlow's AutoGraph
//! does.
//!
//! ```ignore
//! #[xlafn::function]
//! fn collatz_steps(n: Tensor) -> Result<Tensor> {
//!     let mut n = n;
//!     let mut steps = Tensor::scalar(0i32);
//!     while n.gt_scalar(1)? {
//!         if n.floormod_scalar(2)?.eq_scalar(0)? { n = n.floordiv_scalar(2)?; } else { n = &n * 3 + 1; }
//!         steps = steps + 1;
//!     }
//!     Ok(steps)
//! }
//! // collatz_steps(Tensor::scalar(27))?;  collatz_steps::function().tracing_count();
//! // collatz_steps::AUTOGRAPH_CODE is the rewritten source.
//! ```
//!
//! What it generates, for `fn name(a: A, b: B) -> R`:
//! - a hidden `static` holding the `Function`, built on first use with the
//!   parameter names `a`, `b` in its signature;
//! - `fn name(a: impl IntoArg<A>, b: impl IntoArg<B>) -> xlafn::Result<..>`,
//!   which calls it;
//! - `mod name { fn function() -> &'static Function<..>; const AUTOGRAPH_CODE }`.
//!
//! The rewrite (see `autograph.rs`) turns `if`, `while` and `for` into calls
//! of `xlafn::autograph`, which decide by the condition's type whether to
//! run plain Rust (host values, at trace time) or emit `cond`/`while_loop`/
//! `for_range` (tensors).

mod autograph;
mod expand;
mod jumps;
mod module;
mod returns;

use proc_macro::TokenStream;

/// Makes a polymorphic, traced `Function` from a `fn` item. Options:
/// `autograph = false` (no control-flow rewrite), `reduce_retracing`,
/// `name = "..."`.
#[proc_macro_attribute]
pub fn function(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand::expand(attr.into(), item.into()) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// `#[derive(Module)]`: implements `xlafn::module::Module` for a struct by
/// visiting each field under its name; `#[module(skip)]` leaves a field out.
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(item: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(item as syn::DeriveInput);
    match module::derive(input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}
