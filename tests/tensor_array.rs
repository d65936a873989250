//! `TensorArray` as TensorFlow has it: `dynamic_size` arrays written
//! from host loops inside compiled functions, element shapes inferred from
//! the first write inside a loop body (the guide's `dynamic_rnn`, written
//! as in the guide), bounds for device loops, and `stack_padded`.

use xlafn::prelude::*;

/// `x[i]` for a host index.
fn row(x: &Tensor, i: i64) -> Result<Tensor> {
    let mut begin = vec![0; x.dims().len()];
    begin[0] = i;
    let mut size = x.dims();
    size[0] = 1;
    x.slice(&begin, &size)?.squeeze(&[0])
}

#[test]
fn api_page_dynamic_size_array_written_in_a_host_loop() {
    // ta = tf.TensorArray(dtype=tf.int32, size=0, dynamic_size=True)
    // for i in range(len(x)): ta = ta.write(i, x[i] + 1)
    // return ta.stack()
    let f = function(|x: Tensor| -> Result<Tensor> {
        let mut ta = TensorArray::dynamic(DType::I32)?;
        for i in 0..x.dims()[0] {
            ta = ta.write(i, &(row(&x, i)? + 1))?;
        }
        assert!(!ta.size()?.is_symbolic(), "a host-known size");
        ta.stack()
    });
    let y = f.call((Tensor::vector(&[1i32, 2, 3]).unwrap(),)).unwrap();
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![2, 3, 4]);
    assert_eq!(y.dims(), vec![3]);
    let y = f.call((Tensor::vector(&[5i32]).unwrap(),)).unwrap();
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![6]);
}

#[test]
fn host_writes_out_of_order_leave_zeros_in_the_gaps() {
    // TensorFlow fills unwritten elements of a dynamic array with zeros.
    let f = function(|x: Tensor| -> Result<Tensor> {
        TensorArray::dynamic(DType::F32)?
            .write(3i64, &x)?
            .write(1i64, &(&x * 2.0))?
            .stack()
    });
    let y = f.call((Tensor::vector(&[1f32, 2.]).unwrap(),)).unwrap();
    assert_eq!(y.dims(), vec![4, 2]);
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        vec![0., 0., 2., 4., 0., 0., 1., 2.]
    );
}

/// The guide's `rnn_step`: the new state is the input plus the state.
fn rnn_step(input: &Tensor, state: &Tensor) -> Result<Tensor> {
    input.add(state)
}

/// The guide's `dynamic_rnn`, written as in the guide: a fixed-size array
/// with no element shape, first written inside the loop.
fn dynamic_rnn(input_data: Tensor, initial_state: Tensor) -> Result<Tensor> {
    // [batch, time, features] -> [time, batch, features]
    let input_data = input_data.transpose(&[1, 0, 2])?;
    let max_seq_len = input_data.dims()[0];
    let states = TensorArray::new(DType::F32, max_seq_len);
    let (_, states) = for_range(
        0,
        max_seq_len,
        1,
        (initial_state, states),
        |i, (state, states): (Tensor, TensorArray)| -> Result<_> {
            let input = input_data.dynamic_slice(
                &[i.clone(), Tensor::scalar(0i32), Tensor::scalar(0i32)],
                &[1, input_data.dims()[1], input_data.dims()[2]],
            )?;
            let state = rnn_step(&input.squeeze(&[0])?, &state)?;
            let states = states.write(&i, &state)?;
            Ok((state, states))
        },
    )?;
    states.stack()?.transpose(&[1, 0, 2])
}

#[test]
fn guide_dynamic_rnn_infers_the_element_shape_inside_the_loop() {
    let (batch, seq_len, features) = (2usize, 3usize, 4usize);
    let data: Vec<f32> = (0..batch * seq_len * features)
        .map(|k| ((k * 7 % 11) as f32) / 10.0)
        .collect();
    let input = Tensor::from_vec(data.clone(), &[2, 3, 4]).unwrap();
    let f = function(dynamic_rnn);
    let got = f
        .call((
            input.clone(),
            Tensor::fill(&[2, 4], 0.0, DType::F32).unwrap(),
        ))
        .unwrap();
    assert_eq!(got.dims(), vec![2, 3, 4]);
    // Reference: the running sum over time, per batch row and feature.
    let mut want = vec![0f32; data.len()];
    for b in 0..batch {
        let mut state = vec![0f32; features];
        for t in 0..seq_len {
            for (k, s) in state.iter_mut().enumerate() {
                let at = (b * seq_len + t) * features + k;
                *s += data[at];
                want[at] = *s;
            }
        }
    }
    let got = got.to_vec::<f32>().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
    // Eagerly the same code gives the same result.
    let eager = dynamic_rnn(input, Tensor::fill(&[2, 4], 0.0, DType::F32).unwrap()).unwrap();
    assert_eq!(eager.to_vec::<f32>().unwrap(), got);
    assert_eq!(f.tracing_count(), 1);
}

#[test]
fn a_while_loop_body_gives_the_element_shape_too() {
    let f = function(|n: Tensor, x: Tensor| -> Result<Tensor> {
        let ta = TensorArray::new(DType::F32, 4);
        let (_, ta) = while_loop(
            |(i, _): &(Tensor, TensorArray)| i.lt(&n),
            |(i, ta): (Tensor, TensorArray)| -> Result<_> {
                let value = x.mul(&i.cast(DType::F32)?)?;
                Ok((i.add_scalar(1)?, ta.write(&i, &value)?))
            },
            (Tensor::scalar(0i32), ta),
        )?;
        ta.stack()
    });
    let y = f
        .call((Tensor::scalar(3i32), Tensor::vector(&[1f32, 10.]).unwrap()))
        .unwrap();
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        vec![0., 0., 1., 10., 2., 20., 0., 0.]
    );
}

#[test]
fn device_loops_need_a_bound_and_say_how_to_give_one() {
    let unbounded = function(|n: Tensor| -> Result<Tensor> {
        let ta = TensorArray::dynamic(DType::I32)?;
        let ta = for_range(0, &n, 1, ta, |i, ta: TensorArray| ta.write(&i, &i))?;
        ta.stack()
    });
    let e = unbounded.call((Tensor::scalar(3i32),)).unwrap_err();
    assert!(e.to_string().contains("with_max_size(n)"), "{e}");

    // With a bound the loop compiles; stack() has no static shape, and
    // says what to use; stack_padded() gives the buffer and the size.
    let bounded = function(|n: Tensor| -> Result<(Tensor, Tensor)> {
        let ta = TensorArray::dynamic(DType::I32)?.with_max_size(5);
        let ta = for_range(0, &n, 1, ta, |i, ta: TensorArray| ta.write(&i, &(&i * 10)))?;
        assert!(
            ta.stack()
                .unwrap_err()
                .to_string()
                .contains("stack_padded()")
        );
        ta.stack_padded()
    });
    let (all, size) = bounded.call((Tensor::scalar(3i32),)).unwrap();
    assert_eq!(all.to_vec::<i32>().unwrap(), vec![0, 10, 20, 0, 0]);
    assert_eq!(size.item::<i32>().unwrap(), 3);
}
