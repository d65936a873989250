//! Jacobians from a tape (`tape.jacobian`, `tape.batch_jacobian`): one
//! vector-Jacobian product per row, each seeded with a one-hot cotangent.
//! Traced, the rows are one `for_range` loop on the device whose body is
//! the backward pass (TensorFlow's `experimental_use_pfor=False` path: a
//! `while` loop, not a vectorized program); eagerly, a Rust loop.

use super::tape::{GradientTape, Source};
use crate::control::{TensorArray, for_range};
use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::tensor::Tensor;
use crate::trace;

/// What a jacobian holds for a source the target does not depend on
/// (`tf.UnconnectedGradients`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnconnectedGradients {
    /// `None` (TensorFlow's default).
    #[default]
    None,
    /// Zeros of the jacobian's shape.
    Zero,
}

/// The static dims of `t`, or an error naming what needed them.
fn known_dims(t: &Tensor, what: &str) -> Result<Vec<i64>> {
    t.shape().as_known().ok_or_else(|| {
        Error::invalid(
            what,
            format!("needs a known shape, got {}", t.tensor_type()),
        )
    })
}

impl GradientTape {
    /// d`target`/d`source` in full for each source: shape
    /// `target.shape + source.shape` (`tape.jacobian`); `None` for a source
    /// the target does not depend on.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// let x = Tensor::vector(&[1f32, 2.])?;
    /// let tape = GradientTape::new();
    /// tape.watch(&x);
    /// let y = &x * &x;
    /// let j = tape.jacobian(&y, &[(&x).into()])?.remove(0).unwrap();
    /// assert_eq!(j.to_vec::<f32>()?, vec![2., 0., 0., 4.]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn jacobian(&self, target: &Tensor, sources: &[Source<'_>]) -> Result<Vec<Option<Tensor>>> {
        self.jacobian_with(target, sources, UnconnectedGradients::None)
    }

    /// [`jacobian`](GradientTape::jacobian) with zeros for unconnected
    /// sources when asked.
    pub fn jacobian_with(
        &self,
        target: &Tensor,
        sources: &[Source<'_>],
        unconnected: UnconnectedGradients,
    ) -> Result<Vec<Option<Tensor>>> {
        let t_dims = known_dims(target, "jacobian")?;
        let n: i64 = t_dims.iter().product();
        if n == 0 {
            // No rows: an empty jacobian of the full shape (as TensorFlow).
            return sources
                .iter()
                .map(|s| {
                    let (dtype, s_dims) = source_type(s)?;
                    Ok(Some(Tensor::try_zeros(
                        &[t_dims.clone(), s_dims].concat(),
                        dtype,
                    )?))
                })
                .collect();
        }
        let seed = |i: &Tensor| -> Result<Tensor> {
            i.one_hot(n, 1.0, 0.0, target.dtype())?.reshape(&t_dims)
        };
        let rows = self.using(|tape| tape.rows(target, sources, n, &seed))?;
        rows.into_iter()
            .zip(sources)
            .map(|(rows, source)| {
                let (_, s_dims) = source_type(source)?;
                let full: Vec<i64> = t_dims.iter().chain(&s_dims).copied().collect();
                finish(
                    rows.map(|r| r.and_then(|r| r.reshape(&full))),
                    unconnected,
                    source,
                    &full,
                )
            })
            .collect()
    }

    /// For a target `[b, ...]` and a source `[b, ...]` whose rows depend
    /// only on each other (a batch), the per-example jacobians
    /// `[b, target row shape..., source row shape...]`
    /// (`tape.batch_jacobian`). The loop runs over one row's elements,
    /// every example at once. Both must have rank at least 2, as in
    /// TensorFlow (a rank-1 tensor has no per-example part). A source the
    /// target does not depend on gives zeros of the target's dtype, as
    /// TensorFlow's `batch_jacobian` does whatever
    /// [`UnconnectedGradients`] says (so the result is always `Some`).
    pub fn batch_jacobian(&self, target: &Tensor, source: &Tensor) -> Result<Option<Tensor>> {
        self.batch_jacobian_with(target, source, UnconnectedGradients::None)
    }

    /// [`batch_jacobian`](GradientTape::batch_jacobian); `unconnected` is
    /// accepted for TensorFlow's signature and, as there, changes nothing.
    pub fn batch_jacobian_with(
        &self,
        target: &Tensor,
        source: &Tensor,
        _unconnected: UnconnectedGradients,
    ) -> Result<Option<Tensor>> {
        let t_dims = known_dims(target, "batch_jacobian")?;
        let s_dims = known_dims(source, "batch_jacobian")?;
        for (what, t, dims) in [("target", target, &t_dims), ("source", source, &s_dims)] {
            if dims.len() < 2 {
                return Err(Error::Value(format!(
                    "batch_jacobian: the {what}'s shape {} must have rank at least 2 (a leading \
                     batch dimension and the per-example part); for a rank-1 {what} use \
                     jacobian",
                    t.tensor_type().shape
                )));
            }
        }
        if t_dims[0] != s_dims[0] {
            return Err(Error::Value(format!(
                "batch_jacobian: need first dimension of target shape ({}) and source shape \
                 ({}) to match",
                target.tensor_type().shape,
                source.tensor_type().shape
            )));
        }
        let b = t_dims[0];
        let n: i64 = t_dims[1..].iter().product();
        if n == 0 || t_dims[0] == 0 {
            let full: Vec<i64> = t_dims.iter().chain(&s_dims[1..]).copied().collect();
            return Ok(Some(Tensor::try_zeros(&full, source.dtype())?));
        }
        let seed = |i: &Tensor| -> Result<Tensor> {
            i.one_hot(n, 1.0, 0.0, target.dtype())?
                .reshape(&[1, n])?
                .broadcast_to(&[b, n])?
                .reshape(&t_dims)
        };
        let mut rows = self.using(|tape| tape.rows(target, &[source.into()], n, &seed))?;
        // [n, b, s...] -> [b, n, s...] -> [b, t..., s...]
        let rows = rows.remove(0).map(|r| {
            let r = r?;
            let rank = r.rank() as i64;
            let mut perm = vec![1, 0];
            perm.extend(2..rank);
            let full: Vec<i64> = t_dims.iter().chain(&s_dims[1..]).copied().collect();
            r.transpose(&perm)?.reshape(&full)
        });
        let full: Vec<i64> = t_dims.iter().chain(&s_dims[1..]).copied().collect();
        match rows {
            Some(r) => r.map(Some),
            None => Ok(Some(Tensor::try_zeros(&full, target.dtype())?)),
        }
    }

    /// The vector-Jacobian products of `n` seeds, stacked per source
    /// (`[n, source shape...]`; `None` for an unconnected source).
    fn rows(
        &self,
        target: &Tensor,
        sources: &[Source<'_>],
        n: i64,
        seed: &dyn Fn(&Tensor) -> Result<Tensor>,
    ) -> Result<Vec<Option<Result<Tensor>>>> {
        let vjp = |i: &Tensor| self.backward(target, sources, Some(&seed(i)?));
        if !trace::is_tracing() {
            let mut per_row = Vec::with_capacity(n as usize);
            for i in 0..n {
                per_row.push(vjp(&Tensor::try_scalar(i as i32)?)?);
            }
            return Ok((0..sources.len())
                .map(|k| stack_rows(&per_row, k, n))
                .collect());
        }
        let types = connected_types(&vjp)?;
        let arrays = types
            .iter()
            .map(|t| match t {
                Some(t) => Ok(Some(
                    TensorArray::new(t.dtype, n)
                        .with_element_shape(&t.shape.as_known().unwrap_or_default())?,
                )),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let connected: Vec<TensorArray> = arrays.iter().flatten().cloned().collect();
        let filled = for_range(
            0i32,
            n as i32,
            1i32,
            connected,
            |i, arrays: Vec<TensorArray>| {
                let grads = vjp(&i)?;
                let mut out = Vec::with_capacity(arrays.len());
                let mut next = arrays.into_iter();
                for g in grads.into_iter().flatten() {
                    out.push(
                        next.next()
                            .expect("one array per connected source")
                            .write(&i, &g)?,
                    );
                }
                Ok::<_, Error>(out)
            },
        )?;
        let mut filled = filled.into_iter();
        Ok(arrays
            .into_iter()
            .map(|a| a.map(|_| filled.next().expect("filled").stack()))
            .collect())
    }
}

/// Which sources get a gradient, and its type, by a trial trace of one
/// row (nothing of it enters the program).
fn connected_types(
    vjp: &dyn Fn(&Tensor) -> Result<Vec<Option<Tensor>>>,
) -> Result<Vec<Option<TensorType>>> {
    let i32_scalar = TensorType::new(crate::DType::I32, crate::ir::Shape::scalar());
    trace::trial(&[i32_scalar], |args| {
        Ok(vjp(&args[0])?
            .iter()
            .map(|g| g.as_ref().map(Tensor::tensor_type))
            .collect())
    })
}

/// Source `k`'s rows stacked (`None` when it has no gradient).
fn stack_rows(per_row: &[Vec<Option<Tensor>>], k: usize, n: i64) -> Option<Result<Tensor>> {
    let rows: Option<Vec<Tensor>> = per_row.iter().map(|r| r[k].clone()).collect();
    match rows {
        Some(rows) if n > 0 => Some(Tensor::stack(&rows, 0)),
        _ => None,
    }
}

/// A source's dtype and dims.
fn source_type(source: &Source<'_>) -> Result<(crate::DType, Vec<i64>)> {
    match source {
        Source::Tensor(t) => Ok((t.dtype(), known_dims(t, "jacobian")?)),
        Source::Variable(v) => Ok((v.dtype(), v.dims().to_vec())),
    }
}

fn finish(
    rows: Option<Result<Tensor>>,
    unconnected: UnconnectedGradients,
    source: &Source<'_>,
    full: &[i64],
) -> Result<Option<Tensor>> {
    match (rows, unconnected) {
        (Some(r), _) => r.map(Some),
        (None, UnconnectedGradients::None) => Ok(None),
        (None, UnconnectedGradients::Zero) => {
            Ok(Some(Tensor::try_zeros(full, source_type(source)?.0)?))
        }
    }
}
