//! The AutoGraph rewrite: `if`, `while` and `for` become calls of
//! `xlafn::autograph::{if_stmt, while_stmt, for_stmt}`, which pick plain
//! Rust or tensor control flow by the condition's type at compile time.
//!
//! Rules:
//! - Conditions that can only be host values are left alone: comparisons
//!   (`a < b`, `==`), `&&`/`||`, `!`, literals, `if let`/`while let`, and
//!   predicates such as `.is_empty()`. So are `for` loops over ranges
//!   (`0..n`), arrays, references and iterator adaptors (`.iter()`, ...).
//! - Jumps first become flags in the state (see `jumps.rs`): `break` and
//!   `continue` in a loop whose condition or iterable may be a tensor (and
//!   in `loop`), and every `return` of a function where one sits under a
//!   tensor condition. Constructs with jumps that the rewrite does not
//!   handle are left as Rust, with their condition wrapped in
//!   `host_condition`, so a tensor condition there is a compile-time error
//!   that says what to do.
//! - The variables a construct assigns (`x = ..`, `x += ..`) and that were
//!   declared before it are its state: passed in and assigned back
//!   afterwards. Tensor control flow requires them to be tensors or
//!   structures of tensors.
//! - Closures and nested items are not rewritten.

use crate::jumps;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::visit::{self, Visit};
use syn::visit_mut::{self, VisitMut};
use syn::{BinOp, Block, Expr, ExprForLoop, ExprIf, ExprWhile, Ident, ItemFn, Pat, UnOp};

/// Rewrites the function body; returns whether anything was converted.
pub fn convert_block(block: &mut Block) -> bool {
    let mut c = Converter { converted: 0 };
    c.visit_block_mut(block);
    c.converted > 0
}

/// The rewritten function as source text.
pub fn to_code(f: &ItemFn) -> String {
    let file = syn::File {
        shebang: None,
        attrs: Vec::new(),
        items: vec![syn::Item::Fn(f.clone())],
    };
    prettyplease::unparse(&file)
}

struct Converter {
    converted: usize,
}

impl VisitMut for Converter {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        // `break`/`continue` in a `while` become flags first, so the loop
        // and the `if`s around the jumps can then be converted as usual.
        let rewritten = match e {
            Expr::While(w) if !obviously_host(&w.cond) => jumps::rewrite_loop(e),
            Expr::ForLoop(f) if !obviously_host_iterable(&f.expr) => jumps::rewrite_loop(e),
            // A host loop (or `loop`) stays plain Rust unless a jump out
            // of it depends on a tensor condition.
            Expr::While(_) | Expr::ForLoop(_) | Expr::Loop(_)
                if jumps::jumps_on_tensor_condition(e) =>
            {
                jumps::rewrite_loop(e)
            }
            _ => None,
        };
        if let Some(rewritten) = rewritten {
            *e = rewritten;
        }
        // Inner constructs first, so outer ones see their state assignments.
        visit_mut::visit_expr_mut(self, e);
        let replacement = match e {
            Expr::If(i) if convertible_if(i) => Some(convert_if(i)),
            Expr::While(w) if convertible_while(w) => Some(convert_while(w)),
            Expr::ForLoop(f) if convertible_for(f) => Some(convert_for(f)),
            // Left as Rust because of a jump: make a tensor condition a
            // clear compile-time error rather than a bare type mismatch.
            Expr::If(i) if !obviously_host(&i.cond) => {
                guard_condition(&mut i.cond);
                None
            }
            Expr::While(w) if !obviously_host(&w.cond) => {
                guard_condition(&mut w.cond);
                None
            }
            _ => None,
        };
        if let Some(tokens) = replacement {
            *e = syn::parse2(tokens).expect("generated control flow parses");
            self.converted += 1;
        }
    }

    fn visit_expr_closure_mut(&mut self, _: &mut syn::ExprClosure) {}
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Wraps a condition in `::xlafn::autograph::host_condition(..)`, whose
/// trait bound explains what to do when the condition is a tensor.
fn guard_condition(cond: &mut Box<Expr>) {
    let inner = &**cond;
    let guarded: Expr = syn::parse_quote!(::xlafn::autograph::host_condition(#inner));
    **cond = guarded;
}

fn host_predicate(name: &str) -> bool {
    matches!(
        name,
        "is_empty"
            | "contains"
            | "contains_key"
            | "starts_with"
            | "ends_with"
            | "is_some"
            | "is_none"
            | "is_ok"
            | "is_err"
            | "any"
            | "all"
            | "is_symbolic"
    )
}

/// Can this condition only be a host `bool`?
pub fn obviously_host(e: &Expr) -> bool {
    match e {
        Expr::Binary(b) => matches!(
            b.op,
            BinOp::Lt(_)
                | BinOp::Le(_)
                | BinOp::Gt(_)
                | BinOp::Ge(_)
                | BinOp::Eq(_)
                | BinOp::Ne(_)
                | BinOp::And(_)
                | BinOp::Or(_)
        ),
        Expr::Unary(u) => matches!(u.op, UnOp::Not(_)),
        Expr::Lit(_) | Expr::Let(_) => true,
        Expr::Paren(p) => obviously_host(&p.expr),
        Expr::MethodCall(m) => host_predicate(&m.method.to_string()),
        _ => false,
    }
}

/// Iterables that are certainly host values.
pub fn obviously_host_iterable(e: &Expr) -> bool {
    match e {
        Expr::Range(_) | Expr::Array(_) | Expr::Reference(_) | Expr::Macro(_) => true,
        Expr::Paren(p) => obviously_host_iterable(&p.expr),
        Expr::MethodCall(m) => matches!(
            m.method.to_string().as_str(),
            "iter"
                | "iter_mut"
                | "into_iter"
                | "enumerate"
                | "zip"
                | "rev"
                | "chars"
                | "bytes"
                | "keys"
                | "values"
                | "lines"
                | "windows"
                | "chunks"
                | "step_by"
                | "skip"
                | "take"
                | "map"
                | "filter"
        ),
        _ => false,
    }
}

fn convertible_if(i: &ExprIf) -> bool {
    !obviously_host(&i.cond) && !leaves(&i.then_branch, i.else_branch.as_ref().map(|(_, e)| &**e))
}

fn convertible_while(w: &ExprWhile) -> bool {
    w.label.is_none() && !obviously_host(&w.cond) && !leaves(&w.body, None)
}

fn convertible_for(f: &ExprForLoop) -> bool {
    f.label.is_none() && !obviously_host_iterable(&f.expr) && !leaves(&f.body, None)
}

/// Does a jump leave this construct (its blocks and else branch)?
fn leaves(block: &Block, other: Option<&Expr>) -> bool {
    jumps::Escapes::of_block(block).any() || other.is_some_and(|e| jumps::Escapes::of_expr(e).any())
}

/// Variables assigned inside a construct and not declared inside it.
#[derive(Default)]
struct State {
    assigned: Vec<Ident>,
    declared: Vec<Ident>,
}

impl State {
    fn of(blocks: &[&Block], exprs: &[&Expr]) -> Vec<Ident> {
        let mut s = State::default();
        blocks.iter().for_each(|b| s.visit_block(b));
        exprs.iter().for_each(|e| s.visit_expr(e));
        s.assigned
            .into_iter()
            .filter(|i| !s.declared.contains(i))
            .collect()
    }

    fn add(&mut self, ident: &Ident) {
        if !self.assigned.contains(ident) && !ident.to_string().starts_with("__ag_") {
            self.assigned.push(ident.clone());
        }
    }

    fn targets(&mut self, e: &Expr) {
        match e {
            Expr::Path(p) => {
                if let Some(i) = p.path.get_ident() {
                    self.add(i);
                }
            }
            Expr::Tuple(t) => t.elems.iter().for_each(|e| self.targets(e)),
            Expr::Paren(p) => self.targets(&p.expr),
            _ => {}
        }
    }
}

impl<'a> Visit<'a> for State {
    fn visit_expr_assign(&mut self, a: &'a syn::ExprAssign) {
        self.targets(&a.left);
        visit::visit_expr_assign(self, a);
    }
    fn visit_expr_binary(&mut self, b: &'a syn::ExprBinary) {
        let compound = matches!(
            b.op,
            BinOp::AddAssign(_)
                | BinOp::SubAssign(_)
                | BinOp::MulAssign(_)
                | BinOp::DivAssign(_)
                | BinOp::RemAssign(_)
        );
        if compound {
            self.targets(&b.left);
        }
        visit::visit_expr_binary(self, b);
    }
    fn visit_pat_ident(&mut self, p: &'a syn::PatIdent) {
        self.declared.push(p.ident.clone());
    }
    fn visit_expr_closure(&mut self, _: &'a syn::ExprClosure) {}
    fn visit_item(&mut self, _: &'a syn::Item) {}
}

fn state_tokens(state: &[Ident]) -> (TokenStream, TokenStream) {
    (quote!((#(#state,)*)), quote!((#(mut #state,)*)))
}

fn convert_if(i: &ExprIf) -> TokenStream {
    let else_expr = i.else_branch.as_ref().map(|(_, e)| &**e);
    let state = State::of(
        &[&i.then_branch],
        &else_expr.into_iter().collect::<Vec<_>>(),
    );
    let (tuple, pattern) = state_tokens(&state);
    let cond = &i.cond;
    let then_b = &i.then_branch;
    let else_part = match else_expr {
        Some(e) => quote!(else #e),
        None => quote!(),
    };
    let assign_back = if state.is_empty() {
        quote!()
    } else {
        quote!(#tuple = __ag_state;)
    };
    quote! {{
        let (__ag_state, __ag_value) = ::xlafn::autograph::if_stmt(
            #cond,
            #tuple,
            |__ag_branch: bool, #pattern| -> ::xlafn::Result<_> {
                let __ag_value = if __ag_branch #then_b #else_part;
                ::core::result::Result::Ok((#tuple, __ag_value))
            },
        )?;
        #assign_back
        __ag_value
    }}
}

fn convert_while(w: &ExprWhile) -> TokenStream {
    let state = State::of(&[&w.body], &[&w.cond]);
    let (tuple, pattern) = state_tokens(&state);
    let cond = &w.cond;
    let body = &w.body;
    let assign_back = if state.is_empty() {
        quote!(let _ = __ag_state;)
    } else {
        quote!(#tuple = __ag_state;)
    };
    quote! {{
        let __ag_state = ::xlafn::autograph::while_stmt(
            #tuple,
            |__ag_condition: bool, #pattern| -> ::xlafn::Result<_> {
                if __ag_condition {
                    let __ag_cond = #cond;
                    return ::core::result::Result::Ok((#tuple, ::core::option::Option::Some(__ag_cond)));
                }
                #body
                ::core::result::Result::Ok((#tuple, ::core::option::Option::None))
            },
        )?;
        #assign_back
    }}
}

fn convert_for(f: &ExprForLoop) -> TokenStream {
    let state = State::of(&[&f.body], &[]);
    let (tuple, pattern) = state_tokens(&state);
    let iterable = &f.expr;
    let body = &f.body;
    let item: &Pat = &f.pat;
    let item_name = format_ident!("__ag_item");
    let assign_back = if state.is_empty() {
        quote!(let _ = __ag_state;)
    } else {
        quote!(#tuple = __ag_state;)
    };
    quote! {{
        let __ag_state = ::xlafn::autograph::for_stmt(
            #iterable,
            #tuple,
            |#item_name, #pattern| -> ::xlafn::Result<_> {
                let #item = #item_name;
                #body
                ::core::result::Result::Ok(#tuple)
            },
        )?;
        #assign_back
    }}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(src: &str) -> (bool, String) {
        let mut f: ItemFn = syn::parse_str(src).unwrap();
        let converted = convert_block(&mut f.block);
        (converted, to_code(&f))
    }

    #[test]
    fn tensor_if_becomes_if_stmt_with_assigned_state() {
        let (c, code) = rewrite(
            "fn f(x: Tensor) -> Result<Tensor> { let mut y = x.clone(); if x.reduce_sum(&[], false)?.gt_scalar(0)? { y = y * 2.0; } else { y = -y; } Ok(y) }",
        );
        assert!(c);
        let expected = r#"fn f(x: Tensor) -> Result<Tensor> {
    let mut y = x.clone();
    {
        let (__ag_state, __ag_value) = ::xlafn::autograph::if_stmt(
            x.reduce_sum(&[], false)?.gt_scalar(0)?,
            (y,),
            |__ag_branch: bool, (mut y,)| -> ::xlafn::Result<_> {
                let __ag_value = if __ag_branch {
                    y = y * 2.0;
                } else {
                    y = -y;
                };
                ::core::result::Result::Ok(((y,), __ag_value))
            },
        )?;
        (y,) = __ag_state;
        __ag_value
    }
    Ok(y)
}
"#;
        assert_eq!(code, expected);
    }

    #[test]
    fn tensor_while_becomes_while_stmt() {
        let (c, code) = rewrite(
            "fn f(x: Tensor) -> Result<Tensor> { let mut x = x; while x.reduce_sum(&[], false)?.gt_scalar(1)? { x = x.tanh()?; } Ok(x) }",
        );
        assert!(c);
        assert!(
            code.contains("::xlafn::autograph::while_stmt(\n            (x,),"),
            "{code}"
        );
        assert!(
            code.contains("let __ag_cond = x.reduce_sum(&[], false)?.gt_scalar(1)?;"),
            "{code}"
        );
        assert!(code.contains("(x,) = __ag_state;"), "{code}");
    }

    #[test]
    fn for_over_a_tensor_range_becomes_for_stmt() {
        let (c, code) = rewrite(
            "fn f(n: Tensor) -> Result<Tensor> { let mut acc = Tensor::scalar(0f32); for i in xlafn::autograph::range(&n)? { acc = acc + i.cast(DType::F32)?; } Ok(acc) }",
        );
        assert!(c);
        assert!(
            code.contains(
                "::xlafn::autograph::for_stmt(\n            xlafn::autograph::range(&n)?,"
            ),
            "{code}"
        );
        assert!(code.contains("let i = __ag_item;"), "{code}");
    }

    #[test]
    fn host_conditions_and_iterables_stay_rust() {
        let src = "fn f(x: Tensor, n: i64) -> Tensor { let mut x = x; for _ in 0..n { if n > 2 { x = x * 2.0; } } while v.is_empty() { } x }";
        let (c, code) = rewrite(src);
        assert!(!c, "{code}");
        assert!(code.contains("for _ in 0..n"), "{code}");
    }

    #[test]
    fn host_loops_become_flags_only_for_jumps_on_tensor_conditions() {
        let (_, code) = rewrite(
            "fn f(xs: Vec<Tensor>, n: i64) -> Result<()> { for x in &xs { if x.gt_scalar(0)? { break; } } for i in 0..n { if i == 1 { break; } } let mut k = 0; loop { k += 1; if k > n { break; } } Ok(()) }",
        );
        // Only the first loop's break depends on a tensor.
        assert_eq!(code.matches(".raised()?").count(), 1, "{code}");
        assert!(code.contains("if i == 1 {\n            break;"), "{code}");
        assert!(code.contains("loop {"), "{code}");
    }

    #[test]
    fn jumps_out_of_a_construct_keep_it_rust() {
        // Jumps the rewrite does not turn into flags (a `break` with a
        // value, a jump inside a `let` initializer) keep their constructs.
        let (c, code) = rewrite(
            "fn f(done: bool) { let v = loop { if done { break 1; } }; 'a: while flag { let w = if u { 1 } else { continue 'a }; } }",
        );
        assert!(!c, "{code}");
        // The kept conditions must be host bools, with an explanation if not.
        assert!(
            code.contains("if ::xlafn::autograph::host_condition(done)"),
            "{code}"
        );
        assert!(
            code.contains("while ::xlafn::autograph::host_condition(flag)"),
            "{code}"
        );
        // A break inside a nested loop does not leave the outer construct.
        let (c, _) = rewrite(
            "fn f(x: Tensor) -> Result<()> { if x.gt_scalar(0)? { loop { break; } } Ok(()) }",
        );
        assert!(c);
    }

    #[test]
    fn variables_declared_inside_are_not_state_and_closures_are_skipped() {
        let (_, code) = rewrite(
            "fn f(x: Tensor) -> Result<Tensor> { let mut a = x.clone(); if x.gt_scalar(0)? { let t = a.clone(); a = t + 1.0; let g = |mut q: i32| { q = 2; q }; } Ok(a) }",
        );
        assert!(code.contains("(mut a,)"), "{code}");
        assert!(
            !code.contains("(mut a, mut t") && !code.contains("mut q,)"),
            "{code}"
        );
    }
}
