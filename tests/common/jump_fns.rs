//! Functions whose tensor control flow jumps: `return` inside loops and
//! nested branches, labeled `break`, jumps in `match` arms, and `loop` with
//! a tensor `break`. Each has a plain-Rust reference, and `check_*`
//! compares the two on several inputs. Shared by the compiled test binary
//! (`autograph_jumps.rs`) and the one that runs functions eagerly.

use xlafn::prelude::*;

/// The first index whose value is over `limit`, or -1: `return` inside a
/// tensor `while`.
#[xlafn::function]
pub fn first_index_over(xs: Tensor, limit: Tensor) -> Result<Tensor> {
    let n = xs.dims()[0];
    let mut i = Tensor::scalar(0i32);
    while i.lt_scalar(n)? {
        if xs
            .dynamic_slice(&[i.clone()], &[1])?
            .squeeze(&[0])?
            .gt(&limit)?
        {
            return Ok(i);
        }
        i = i + 1;
    }
    Ok(Tensor::scalar(-1i32))
}

pub fn check_first_index_over() {
    let xs = [0.5f32, 2.0, -1.0, 7.0, 3.0];
    for limit in [-2.0f32, 1.0, 2.5, 6.0, 9.0] {
        let want = xs.iter().position(|&x| x > limit).map_or(-1, |p| p as i32);
        let got = first_index_over(Tensor::vector(&xs).unwrap(), Tensor::scalar(limit))
            .unwrap()
            .item::<i32>()
            .unwrap();
        assert_eq!(got, want, "limit {limit}");
    }
}

/// Returns at two depths of nested tensor branches.
#[xlafn::function]
pub fn tiered(x: Tensor) -> Result<Tensor> {
    let s = x.reduce_sum(&[], false)?;
    if s.gt_scalar(0.0)? {
        if s.gt_scalar(10.0)? {
            return Ok(x * 3.0);
        }
        let y = &x * 2.0;
        return Ok(y);
    }
    Ok(-x)
}

pub fn check_tiered() {
    for xs in [[1f32, 2.0], [6.0, 7.0], [-3.0, 1.0]] {
        let s: f32 = xs.iter().sum();
        let factor = if s > 10.0 {
            3.0
        } else if s > 0.0 {
            2.0
        } else {
            -1.0
        };
        let want: Vec<f32> = xs.iter().map(|x| x * factor).collect();
        let got = tiered(Tensor::vector(&xs).unwrap())
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(got, want, "{xs:?}");
    }
}

/// The first `(a, b)` in `1..n` × `1..n` with `a * b == target`, or
/// `(0, 0)`: a labeled `break` out of two tensor `for` loops.
#[xlafn::function]
pub fn factor_pair(n: Tensor, target: Tensor) -> Result<Tensor> {
    let mut pair = Tensor::vector(&[0i32, 0])?;
    'outer: for a in xlafn::autograph::range_with(1, &n, 1)? {
        for b in xlafn::autograph::range_with(1, &n, 1)? {
            if a.mul(&b)?.eq(&target)? {
                pair = Tensor::stack(&[a.clone(), b.clone()], 0)?;
                break 'outer;
            }
        }
    }
    Ok(pair)
}

fn factor_pair_reference(n: i32, target: i32) -> Vec<i32> {
    let mut pair = vec![0, 0];
    'outer: for a in 1..n {
        for b in 1..n {
            if a * b == target {
                pair = vec![a, b];
                break 'outer;
            }
        }
    }
    pair
}

pub fn check_factor_pair() {
    for (n, target) in [(10, 12), (10, 7), (5, 30), (10, 1), (3, 4)] {
        let got = factor_pair(Tensor::scalar(n), Tensor::scalar(target))
            .unwrap()
            .to_vec::<i32>()
            .unwrap();
        assert_eq!(
            got,
            factor_pair_reference(n, target),
            "n {n} target {target}"
        );
    }
}

/// `break` and `continue` inside the arms of a `match` on a host value,
/// inside a tensor loop.
#[xlafn::function]
pub fn stepped(x: Tensor, mode: i64) -> Result<Tensor> {
    let mut x = x;
    let mut i = Tensor::scalar(0i32);
    while i.lt_scalar(20)? {
        i = i + 1;
        match mode {
            0 => {
                if x.gt_scalar(50.0)? {
                    break;
                }
            }
            1 => {
                if i.floormod_scalar(2)?.eq_scalar(0)? {
                    continue;
                }
            }
            _ => {}
        }
        x = x * 1.5 + 1.0;
    }
    Ok(x)
}

fn stepped_reference(mut x: f32, mode: i64) -> f32 {
    let mut i = 0;
    while i < 20 {
        i += 1;
        match mode {
            0 if x > 50.0 => break,
            1 if i % 2 == 0 => continue,
            _ => {}
        }
        x = x * 1.5 + 1.0;
    }
    x
}

pub fn check_stepped() {
    for mode in [0, 1, 2] {
        for x in [0.0f32, 3.0] {
            let got = stepped(Tensor::scalar(x), mode)
                .unwrap()
                .item::<f32>()
                .unwrap();
            let want = stepped_reference(x, mode);
            assert!(
                (got - want).abs() <= 1e-5 * want.abs(),
                "mode {mode} x {x}: {got} vs {want}"
            );
        }
    }
}

/// How many halvings bring `x` below 1: `loop` with a tensor `break`.
#[xlafn::function]
pub fn halvings(x: Tensor) -> Result<Tensor> {
    let mut x = x;
    let mut n = Tensor::scalar(0i32);
    loop {
        if x.lt_scalar(1.0)? {
            break;
        }
        x = x / 2.0;
        n = n + 1;
    }
    Ok(n)
}

pub fn check_halvings() {
    for x in [0.5f32, 1.0, 3.0, 1000.0] {
        let (mut v, mut want) = (x, 0);
        while v >= 1.0 {
            v /= 2.0;
            want += 1;
        }
        let got = halvings(Tensor::scalar(x)).unwrap().item::<i32>().unwrap();
        assert_eq!(got, want, "x {x}");
    }
}

/// The first positive tensor of a host list, or 0: `return` on a tensor
/// condition inside a host `for` (unrolled; later bodies are guarded).
#[xlafn::function]
pub fn first_positive(xs: Vec<Tensor>) -> Result<Tensor> {
    for x in &xs {
        if x.gt_scalar(0.0)? {
            return Ok(x.clone());
        }
    }
    Ok(Tensor::scalar(0f32))
}

pub fn check_first_positive() {
    for values in [[-1f32, 2.0, 3.0], [-1.0, -2.0, 5.0], [-1.0, -2.0, -3.0]] {
        let want = values.iter().copied().find(|&v| v > 0.0).unwrap_or(0.0);
        let xs: Vec<Tensor> = values.iter().map(|&v| Tensor::scalar(v)).collect();
        let got = first_positive(xs).unwrap().item::<f32>().unwrap();
        assert_eq!(got, want, "{values:?}");
    }
}

/// The running count and sum when the sum of the rows first exceeds
/// `limit`, else `(-1, total)`: a tuple returned from a `for` over a
/// tensor's rows.
#[xlafn::function]
pub fn sum_until_over(xs: Tensor, limit: Tensor) -> Result<(Tensor, Tensor)> {
    let mut total = Tensor::scalar(0f32);
    let mut count = Tensor::scalar(0i32);
    for x in xs.clone() {
        total = total + &x;
        count = count + 1;
        if total.gt(&limit)? {
            return Ok((count, total));
        }
    }
    Ok((Tensor::scalar(-1i32), total))
}

pub fn check_sum_until_over() {
    let xs = [1f32, 2.0, 3.0, 4.0];
    for limit in [0.5f32, 2.5, 5.0, 100.0] {
        let mut want = (-1, xs.iter().sum::<f32>());
        let mut total = 0.0;
        for (k, x) in xs.iter().enumerate() {
            total += x;
            if total > limit {
                want = (k as i32 + 1, total);
                break;
            }
        }
        let (count, total) =
            sum_until_over(Tensor::vector(&xs).unwrap(), Tensor::scalar(limit)).unwrap();
        let got = (count.item::<i32>().unwrap(), total.item::<f32>().unwrap());
        assert_eq!(got, want, "limit {limit}");
    }
}

/// The list's tensors added in order until the total first exceeds
/// `limit`, skipping negative ones: `continue` and `break` on tensor
/// conditions inside a host `for` (unrolled while tracing; after a jump
/// the rest of the iteration, and after a `break` the later iterations,
/// are guarded by the flag).
#[xlafn::function]
pub fn positive_sum_until(xs: Vec<Tensor>, limit: Tensor) -> Result<Tensor> {
    let mut total = Tensor::scalar(0f32);
    for x in &xs {
        if x.lt_scalar(0.0)? {
            continue;
        }
        total = total + x;
        if total.gt(&limit)? {
            break;
        }
    }
    Ok(total)
}

pub fn check_positive_sum_until() {
    let values = [1f32, -5.0, 2.0, 3.0, -1.0, 4.0];
    for limit in [0.5f32, 2.5, 5.0, 100.0] {
        let mut want = 0.0;
        for &v in &values {
            if v < 0.0 {
                continue;
            }
            want += v;
            if want > limit {
                break;
            }
        }
        let xs: Vec<Tensor> = values.iter().map(|&v| Tensor::scalar(v)).collect();
        let got = positive_sum_until(xs, Tensor::scalar(limit))
            .unwrap()
            .item::<f32>()
            .unwrap();
        assert_eq!(got, want, "limit {limit}");
    }
}
