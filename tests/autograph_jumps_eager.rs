//! The same jumping functions as `autograph_jumps.rs`, run eagerly
//! (`run_functions_eagerly(true)`, process-wide, hence a binary of its
//! own): the rewritten code gives plain Rust's results without tracing.

#[path = "common/jump_fns.rs"]
mod jump_fns;

use jump_fns::*;

#[test]
fn jumping_functions_run_eagerly() {
    xlafn::run_functions_eagerly(true);
    check_first_index_over();
    check_tiered();
    check_factor_pair();
    check_stepped();
    check_halvings();
    check_first_positive();
    check_sum_until_over();
    check_positive_sum_until();
    assert_eq!(first_index_over::function().tracing_count(), 0);
    assert_eq!(halvings::function().tracing_count(), 0);
}
