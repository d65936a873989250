//! Layer: composites. Linear-algebra algorithms and matrix functions
//! written in the tensor language itself (`Tensor` ops, `control`'s device
//! loops, `custom_gradient`), as a user could write them: LU and the solves
//! and determinants built on it, Householder QR, Jacobi eigen and singular
//! value decompositions, matrix functions (`expm`, powers), the
//! tridiagonal solve, and the cumulative product with its exact gradient.
//! They sit above `control` (their loops) and below nothing they use: no
//! op family imports them. Imports `tensor`, `ops` (`matrix` helpers,
//! `custom_gradient`, `one_program`, `stats`, `window`),
//! `control`, `dtype` and `error`.
//!
//! XLA's CPU path that xlafn drives has no LAPACK calls, so these are
//! device programs of ordinary ops; each eager call runs as one compiled
//! program.

pub mod cumlogsumexp;
pub mod cumprod;
pub mod jacobi;
pub mod lu;
pub mod matrix_functions;
pub mod qr;
pub mod tridiagonal;
