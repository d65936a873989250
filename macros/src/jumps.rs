//! `break`, `continue` and `return` inside converted control flow, the
//! AutoGraph way: each becomes a flag carried in the state
//! (`xlafn::autograph::Flag`), the statements after a jump run only while
//! its flags are down, and loops also stop on them. After this rewrite the
//! loops and `if`s hold no jumps and are converted like any others, so a
//! tensor condition anywhere makes the flags tensors.
//!
//! - `break`/`continue`, labeled or not, in `while`, `for` and `loop`,
//!   directly or inside `if`/`else`, `match` arms, plain blocks and nested
//!   loops. Each loop has its own pair of flags; a jump to an outer loop
//!   also stops the loops between.
//! - `return value` anywhere in those places, in a function returning
//!   `Result` (see [`rewrite_returns`]): the value goes into a return slot
//!   (`xlafn::autograph::ReturnValue`) and a return flag stops everything
//!   after it; the function ends by returning the slot.
//!
//! Left as Rust (a tensor condition around them is then a compile-time
//! error): `break` with a value, jumps inside expressions whose value is
//! used (`let x = match .. { .. => return .. }`), jumps to labeled blocks,
//! and `while let` loops with jumps.

use crate::autograph::{obviously_host, obviously_host_iterable};
use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::visit::{self, Visit};
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, ExprIf, Ident, Lifetime, Stmt};

const RETURN_FLAG: &str = "ag_do_return__";
const RETURN_VALUE: &str = "ag_retval__";

fn ident(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

/// The jumps that leave a piece of code: `return`s, and `break`/`continue`
/// that no loop inside it catches; and whether any of them sits under an
/// `if`/`while`/`for` whose condition or iterable may be a tensor (then
/// only flags can carry it). Closures and nested items are skipped.
#[derive(Default)]
pub struct Escapes {
    /// Labels of the loops entered so far (`None`: unlabeled).
    inner_loops: Vec<Option<String>>,
    /// How many enclosing constructs (inside the code) may be tensors.
    tensor_depth: usize,
    pub returns: bool,
    pub loop_jumps: bool,
    pub tensor_returns: bool,
    pub tensor_loop_jumps: bool,
}

impl Escapes {
    pub fn of_block(b: &Block) -> Escapes {
        let mut e = Escapes::default();
        e.visit_block(b);
        e
    }

    pub fn of_expr(x: &Expr) -> Escapes {
        let mut e = Escapes::default();
        e.visit_expr(x);
        e
    }

    pub fn any(&self) -> bool {
        self.returns || self.loop_jumps
    }

    fn jump(&mut self, label: Option<&Lifetime>) {
        let caught = match label {
            None => !self.inner_loops.is_empty(),
            Some(l) => self
                .inner_loops
                .iter()
                .any(|inner| inner.as_deref() == Some(&l.ident.to_string())),
        };
        if !caught {
            self.loop_jumps = true;
            self.tensor_loop_jumps |= self.tensor_depth > 0;
        }
    }

    fn in_loop(&mut self, label: Option<&syn::Label>, f: impl FnOnce(&mut Self)) {
        self.inner_loops
            .push(label.map(|l| l.name.ident.to_string()));
        f(self);
        self.inner_loops.pop();
    }

    fn under(&mut self, tensor: bool, f: impl FnOnce(&mut Self)) {
        self.tensor_depth += usize::from(tensor);
        f(self);
        self.tensor_depth -= usize::from(tensor);
    }
}

impl<'a> Visit<'a> for Escapes {
    fn visit_expr_return(&mut self, r: &'a syn::ExprReturn) {
        self.returns = true;
        self.tensor_returns |= self.tensor_depth > 0;
        visit::visit_expr_return(self, r);
    }
    fn visit_expr_break(&mut self, b: &'a syn::ExprBreak) {
        self.jump(b.label.as_ref());
        visit::visit_expr_break(self, b);
    }
    fn visit_expr_continue(&mut self, c: &'a syn::ExprContinue) {
        self.jump(c.label.as_ref());
    }
    fn visit_expr_if(&mut self, i: &'a ExprIf) {
        self.visit_expr(&i.cond);
        self.under(!obviously_host(&i.cond), |s| {
            s.visit_block(&i.then_branch);
            if let Some((_, e)) = &i.else_branch {
                s.visit_expr(e);
            }
        });
    }
    fn visit_expr_while(&mut self, w: &'a syn::ExprWhile) {
        self.visit_expr(&w.cond);
        self.under(!obviously_host(&w.cond), |s| {
            s.in_loop(w.label.as_ref(), |s| s.visit_block(&w.body))
        });
    }
    fn visit_expr_for_loop(&mut self, f: &'a syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.under(!obviously_host_iterable(&f.expr), |s| {
            s.in_loop(f.label.as_ref(), |s| s.visit_block(&f.body))
        });
    }
    fn visit_expr_loop(&mut self, l: &'a syn::ExprLoop) {
        self.in_loop(l.label.as_ref(), |s| s.visit_block(&l.body));
    }
    fn visit_expr_closure(&mut self, _: &'a syn::ExprClosure) {}
    fn visit_item(&mut self, _: &'a syn::Item) {}
}

/// Does a `break`/`continue` out of this loop (whose condition or iterable
/// is a host value, or a `loop`) depend on a tensor condition? Only then
/// must it become flags; otherwise the loop stays plain Rust.
pub fn jumps_on_tensor_condition(e: &Expr) -> bool {
    loop_body(e).is_some_and(|b| Escapes::of_block(b).tensor_loop_jumps)
}

fn loop_body(e: &Expr) -> Option<&Block> {
    match e {
        Expr::While(w) => Some(&w.body),
        Expr::ForLoop(f) => Some(&f.body),
        Expr::Loop(l) => Some(&l.body),
        _ => None,
    }
}

/// Rewrites a `while`, `for` or `loop` whose body jumps (a `break` or
/// `continue`, labeled or not; no `return`) into flags, or `None` when it
/// has no such jump or an unsupported one.
pub fn rewrite_loop(e: &Expr) -> Option<Expr> {
    let body = loop_body(e)?;
    let escapes = Escapes::of_block(body);
    if escapes.returns || !escapes.loop_jumps {
        return None;
    }
    let mut r = Rewriter::default();
    let (rewritten, raised) = r.loop_expr(e)?;
    raised.is_empty().then_some(rewritten)
}

/// Rewrites every `return` of a function body into the return flag and
/// slot, when one of them sits inside an `if`/`while`/`for` whose condition
/// may be a tensor (elsewhere plain Rust `return` works). `output` is the
/// type the function returns inside its `Result`. Returns whether the body
/// changed; on an unsupported jump it is left as it was.
pub fn rewrite_returns(block: &mut Block, output: &TokenStream) -> bool {
    if !return_under_tensor_condition(block) {
        return false;
    }
    let mut stmts = block.stmts.clone();
    if let Some(last) = stmts.pop() {
        stmts.push(tail_as_return(last));
    }
    let mut r = Rewriter {
        returns: true,
        ..Rewriter::default()
    };
    let Some((body, _)) = r.stmts(&stmts) else {
        return false;
    };
    let (flag, slot) = (ident(RETURN_FLAG), ident(RETURN_VALUE));
    *block = syn::parse_quote! {{
        let mut #flag = ::xlafn::autograph::Flag::new();
        let mut #slot = ::xlafn::autograph::ReturnValue::<#output>::undefined();
        #(#body)*
        #slot.into_result()
    }};
    true
}

/// Does a `return` sit under an `if`, `while` or `for` whose condition or
/// iterable may be a tensor?
fn return_under_tensor_condition(block: &Block) -> bool {
    Escapes::of_block(block).tensor_returns
}

/// The function body's last statement as a `return`: a tail value `e`
/// becomes `return e;`, pushed into the branches of a tail `if`/`match`/
/// block so that each branch returns its own value.
fn tail_as_return(last: Stmt) -> Stmt {
    match last {
        Stmt::Expr(e, None) => Stmt::Expr(value_as_return(e), Some(Default::default())),
        Stmt::Macro(m) if m.semi_token.is_none() => {
            let e = Expr::Macro(syn::ExprMacro {
                attrs: m.attrs,
                mac: m.mac,
            });
            Stmt::Expr(value_as_return(e), Some(Default::default()))
        }
        other => other,
    }
}

fn value_as_return(e: Expr) -> Expr {
    match e {
        Expr::If(mut i) if i.else_branch.is_some() => {
            block_tail_as_return(&mut i.then_branch);
            if let Some((_, else_e)) = &mut i.else_branch {
                let inner = std::mem::replace(&mut **else_e, Expr::Verbatim(TokenStream::new()));
                **else_e = value_as_return(inner);
            }
            Expr::If(i)
        }
        Expr::Block(mut b) if b.label.is_none() => {
            block_tail_as_return(&mut b.block);
            Expr::Block(b)
        }
        Expr::Match(mut m) => {
            for arm in &mut m.arms {
                let body = std::mem::replace(&mut *arm.body, Expr::Verbatim(TokenStream::new()));
                *arm.body = value_as_return(body);
            }
            Expr::Match(m)
        }
        e @ Expr::Return(_) => e,
        e => syn::parse_quote!(return #e),
    }
}

fn block_tail_as_return(b: &mut Block) {
    if let Some(last) = b.stmts.pop() {
        b.stmts.push(tail_as_return(last));
    }
}

/// Makes a returned expression use clones of the local variables it names,
/// so that `return Ok(x)` inside a converted (closure) body does not move
/// `x` out of state that the closure still hands back.
struct CloneLocals;

impl VisitMut for CloneLocals {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        match e {
            Expr::Path(p) if p.qself.is_none() && is_local_name(&p.path) => {
                let local = p.clone();
                *e = syn::parse_quote!(::core::clone::Clone::clone(&#local));
            }
            // The callee of `f(..)` is a function, not a value.
            Expr::Call(c) => c.args.iter_mut().for_each(|a| self.visit_expr_mut(a)),
            _ => visit_mut::visit_expr_mut(self, e),
        }
    }
    fn visit_expr_closure_mut(&mut self, _: &mut syn::ExprClosure) {}
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// A single lower-case name: a local variable (constants and unit
/// structs are upper case).
fn is_local_name(path: &syn::Path) -> bool {
    path.get_ident().is_some_and(|i| {
        let name = i.to_string();
        name.starts_with(|c: char| c.is_lowercase() || c == '_') && name != "self"
    })
}

/// The flags of one loop being rewritten.
struct LoopFlags {
    label: Option<String>,
    brk: Ident,
    cnt: Ident,
    broke: bool,
    continued: bool,
}

/// Flags a statement may raise; the statements after it are guarded by
/// them.
type Raised = Vec<Ident>;

fn join(into: &mut Raised, more: Raised) {
    for f in more {
        if !into.contains(&f) {
            into.push(f);
        }
    }
}

#[derive(Default)]
struct Rewriter {
    loops: Vec<LoopFlags>,
    next_loop: usize,
    /// `return` is rewritten (else it is unsupported).
    returns: bool,
}

impl Rewriter {
    /// Rewrites a statement list: after a statement that may jump, the rest
    /// runs under a guard on the flags it may raise.
    fn stmts(&mut self, stmts: &[Stmt]) -> Option<(Vec<Stmt>, Raised)> {
        let mut out = Vec::new();
        let mut raised = Raised::new();
        for (i, stmt) in stmts.iter().enumerate() {
            let (new, jumps) = self.stmt(stmt)?;
            out.push(new);
            if !jumps.is_empty() && i + 1 < stmts.len() {
                let (rest, rest_raised) = self.stmts(&stmts[i + 1..])?;
                out.push(syn::parse_quote! {
                    if ::xlafn::autograph::go_on(true, &[#(&#jumps),*])? { #(#rest)* }
                });
                join(&mut raised, jumps);
                join(&mut raised, rest_raised);
                return Some((out, raised));
            }
            join(&mut raised, jumps);
        }
        Some((out, raised))
    }

    fn stmt(&mut self, stmt: &Stmt) -> Option<(Stmt, Raised)> {
        match stmt {
            Stmt::Expr(e, semi) => {
                if !Escapes::of_expr(e).any() {
                    return Some((stmt.clone(), Raised::new()));
                }
                let (new, raised) = self.expr(e)?;
                let semi = semi.or(Some(Default::default()));
                Some((Stmt::Expr(new, semi), raised))
            }
            // A jump inside a `let` initializer or a macro: unsupported.
            Stmt::Local(l) => {
                let mut e = Escapes::default();
                e.visit_local(l);
                (!e.any()).then(|| (stmt.clone(), Raised::new()))
            }
            other => Some((other.clone(), Raised::new())),
        }
    }

    /// A statement-position expression that jumps.
    fn expr(&mut self, e: &Expr) -> Option<(Expr, Raised)> {
        match e {
            Expr::Break(b) if b.expr.is_none() => {
                let l = self.target(b.label.as_ref())?;
                l.broke = true;
                let brk = l.brk.clone();
                Some((syn::parse_quote!(#brk = #brk.raised()?), vec![brk]))
            }
            Expr::Continue(c) => {
                let l = self.target(c.label.as_ref())?;
                l.continued = true;
                let cnt = l.cnt.clone();
                Some((syn::parse_quote!(#cnt = #cnt.raised()?), vec![cnt]))
            }
            Expr::Return(r) if self.returns => {
                let mut value = (**r.expr.as_ref()?).clone();
                if Escapes::of_expr(&value).any() {
                    return None;
                }
                CloneLocals.visit_expr_mut(&mut value);
                let (flag, slot) = (ident(RETURN_FLAG), ident(RETURN_VALUE));
                Some((
                    syn::parse_quote!({
                        #slot = ::xlafn::autograph::ReturnValue::Value((#value)?);
                        #flag = #flag.raised()?;
                    }),
                    vec![flag],
                ))
            }
            Expr::If(i) => {
                let (new, raised) = self.if_expr(i)?;
                Some((Expr::If(new), raised))
            }
            Expr::Block(b) if b.label.is_none() && b.attrs.is_empty() => {
                let mut nb = b.clone();
                let (stmts, raised) = self.stmts(&b.block.stmts)?;
                nb.block.stmts = stmts;
                Some((Expr::Block(nb), raised))
            }
            Expr::Match(m) => {
                let mut nm = m.clone();
                let mut raised = Raised::new();
                for arm in &mut nm.arms {
                    if arm
                        .guard
                        .as_ref()
                        .is_some_and(|(_, g)| Escapes::of_expr(g).any())
                    {
                        return None;
                    }
                    let body = Stmt::Expr((*arm.body).clone(), None);
                    let (stmts, r) = self.stmts(&[body])?;
                    *arm.body = syn::parse_quote!({ #(#stmts)* });
                    join(&mut raised, r);
                }
                Some((Expr::Match(nm), raised))
            }
            Expr::While(_) | Expr::ForLoop(_) | Expr::Loop(_) => self.loop_expr(e),
            _ => None,
        }
    }

    /// The loop a `break`/`continue` jumps to.
    fn target(&mut self, label: Option<&Lifetime>) -> Option<&mut LoopFlags> {
        match label {
            None => self.loops.last_mut(),
            Some(l) => {
                let name = l.ident.to_string();
                self.loops
                    .iter_mut()
                    .rev()
                    .find(|f| f.label.as_deref() == Some(name.as_str()))
            }
        }
    }

    fn if_expr(&mut self, i: &ExprIf) -> Option<(ExprIf, Raised)> {
        if Escapes::of_expr(&i.cond).any() {
            return None;
        }
        let mut out = i.clone();
        let (then_stmts, mut raised) = self.stmts(&i.then_branch.stmts)?;
        out.then_branch.stmts = then_stmts;
        if let Some((else_token, e)) = &i.else_branch {
            let (new_else, r) = match &**e {
                Expr::If(inner) => {
                    let (n, r) = self.if_expr(inner)?;
                    (Expr::If(n), r)
                }
                Expr::Block(b) => {
                    let mut nb = b.clone();
                    let (stmts, r) = self.stmts(&b.block.stmts)?;
                    nb.block.stmts = stmts;
                    (Expr::Block(nb), r)
                }
                _ => return None,
            };
            join(&mut raised, r);
            out.else_branch = Some((*else_token, Box::new(new_else)));
        }
        Some((out, raised))
    }

    /// A loop: its own jumps become its flags; it also stops on the flags
    /// of outer targets (an outer loop's, or `return`) raised inside, and
    /// raises those to its surroundings.
    fn loop_expr(&mut self, e: &Expr) -> Option<(Expr, Raised)> {
        let (label, body) = match e {
            Expr::While(w) if matches!(*w.cond, Expr::Let(_)) => return None,
            Expr::While(w) => (&w.label, &w.body),
            Expr::ForLoop(f) => (&f.label, &f.body),
            Expr::Loop(l) => (&l.label, &l.body),
            _ => return None,
        };
        if let Expr::While(w) = e
            && Escapes::of_expr(&w.cond).any()
        {
            return None;
        }
        let n = self.next_loop;
        self.next_loop += 1;
        let suffix = if n == 0 {
            String::new()
        } else {
            format!("{n}")
        };
        self.loops.push(LoopFlags {
            label: label.as_ref().map(|l| l.name.ident.to_string()),
            brk: ident(&format!("ag_break{suffix}__")),
            cnt: ident(&format!("ag_continue{suffix}__")),
            broke: false,
            continued: false,
        });
        let rewritten = self.stmts(&body.stmts);
        let flags = self.loops.pop().expect("pushed above");
        let (body, raised) = rewritten?;
        let outward: Raised = raised
            .into_iter()
            .filter(|f| *f != flags.brk && *f != flags.cnt)
            .collect();
        let (brk, cnt) = (&flags.brk, &flags.cnt);
        let mut stops: Vec<&Ident> = Vec::new();
        if flags.broke {
            stops.push(brk);
        }
        stops.extend(&outward);
        let declare_brk = flags
            .broke
            .then(|| quote!(let mut #brk = ::xlafn::autograph::Flag::new();));
        let declare_cnt = flags
            .continued
            .then(|| quote!(let mut #cnt = ::xlafn::autograph::Flag::new();));
        let clear = flags.continued.then(|| quote!(#cnt = #cnt.cleared()?;));
        let go_on = |c: TokenStream| -> TokenStream {
            if stops.is_empty() {
                c
            } else {
                quote!(::xlafn::autograph::go_on(#c, &[#(&#stops),*])?)
            }
        };
        let guarded = if stops.is_empty() {
            quote!(#(#body)*)
        } else {
            let guard = go_on(quote!(true));
            quote!(if #guard { #(#body)* })
        };
        let host_stop =
            (!stops.is_empty()).then(|| quote!(::xlafn::autograph::host_clear(&[#(&#stops),*])));
        let the_loop = match e {
            // The condition may be a tensor: the flags join it, and the
            // loop runs on the device once any of them is a tensor.
            Expr::While(w) if !obviously_host(&w.cond) => {
                let c = go_on(w.cond.to_token_stream());
                quote!(while #c { #clear #(#body)* })
            }
            // A host loop keeps running on its host condition; a flag
            // raised on a tensor condition skips the remaining bodies.
            Expr::While(w) => {
                let c = &w.cond;
                let c = match &host_stop {
                    Some(h) => quote!((#c) && #h),
                    None => quote!(#c),
                };
                quote!(while #c { #clear #guarded })
            }
            Expr::ForLoop(f) => {
                let (pat, it) = (&f.pat, &f.expr);
                let stop_on_host = host_stop
                    .filter(|_| obviously_host_iterable(it))
                    .map(|h| quote!(if !#h { break; }));
                quote!(for #pat in #it { #stop_on_host #clear #guarded })
            }
            _ => {
                let c = go_on(quote!(true));
                quote!(while #c { #clear #(#body)* })
            }
        };
        let tokens = quote!({ #declare_brk #declare_cnt #the_loop });
        Some((syn::parse2(tokens).expect("rewritten loop parses"), outward))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unparse(e: &Expr) -> String {
        let f: syn::File = syn::parse_quote!(fn f() { #e; });
        prettyplease::unparse(&f)
    }

    fn rewrite(src: &str) -> Option<String> {
        let e: Expr = syn::parse_str(src).unwrap();
        rewrite_loop(&e).map(|e| unparse(&e))
    }

    fn rewrite_fn(src: &str) -> Option<String> {
        let mut f: syn::ItemFn = syn::parse_str(src).unwrap();
        rewrite_returns(&mut f.block, &quote!(Tensor)).then(|| {
            prettyplease::unparse(&syn::File {
                shebang: None,
                attrs: vec![],
                items: vec![syn::Item::Fn(f)],
            })
        })
    }

    #[test]
    fn break_and_continue_become_flags_with_guards() {
        let code = rewrite(
            "while c { a = a + 1; if t { break; } b = b + 1; if u { continue; } d = d + 1; }",
        )
        .unwrap();
        for part in [
            "while ::xlafn::autograph::go_on(c, &[&ag_break__])?",
            "ag_break__ = ag_break__.raised()?;",
            "ag_continue__ = ag_continue__.raised()?;",
            "if ::xlafn::autograph::go_on(true, &[&ag_break__])?",
            "if ::xlafn::autograph::go_on(true, &[&ag_continue__])?",
            "ag_continue__ = ag_continue__.cleared()?;",
        ] {
            assert!(code.contains(part), "{part}\n{code}");
        }
    }

    #[test]
    fn jumps_in_match_arms_and_blocks_are_rewritten() {
        let code =
            rewrite("while c { match k { 0 => break, _ => { x = x + 1; continue; } } y = 1; }")
                .unwrap();
        assert!(code.contains("0 => {\n"), "{code}");
        assert!(
            code.contains("ag_break__ = ag_break__.raised()?;"),
            "{code}"
        );
        assert!(
            code.contains("go_on(true, &[&ag_break__, &ag_continue__])?"),
            "the rest is guarded by both flags\n{code}"
        );
    }

    #[test]
    fn labeled_jumps_stop_the_loops_between() {
        let code = rewrite("'outer: while c { for i in xs { if t { break 'outer; } if u { continue 'outer; } z = 1; } w = 2; }").unwrap();
        // The inner loop stops on the outer loop's flags ...
        assert!(
            code.contains("go_on(true, &[&ag_break__, &ag_continue__])?"),
            "{code}"
        );
        // ... and the outer loop's rest is guarded by them.
        assert!(
            code.contains("while ::xlafn::autograph::go_on(c, &[&ag_break__])?"),
            "{code}"
        );
        assert!(!code.contains("'outer"), "labels are gone\n{code}");
    }

    #[test]
    fn unsupported_jumps_leave_the_loop_alone() {
        assert!(rewrite("while c { a = 1; }").is_none(), "no jumps");
        assert!(
            rewrite("while c { let v = loop { break 3; }; }").is_none(),
            "break value"
        );
        assert!(
            rewrite("while c { let v = if t { 1 } else { break }; }").is_none(),
            "jump in a let"
        );
        assert!(
            rewrite("while c { if t { return; } break; }").is_none(),
            "return (see rewrite_returns)"
        );
        assert!(
            rewrite("while c { loop { break; } }").is_none(),
            "the inner loop's own break"
        );
        assert!(
            rewrite("'a: while c { break 'b; }").is_none(),
            "unknown label"
        );
    }

    #[test]
    fn host_loops_keep_their_condition_and_guard_their_bodies() {
        let code = rewrite("for i in 0..n { if t { break; } a = a + 1; }").unwrap();
        assert!(
            code.contains(
                "if !::xlafn::autograph::host_clear(&[&ag_break__]) {\n                break;"
            ),
            "{code}"
        );
        let code = rewrite("while i < n { if t { break; } i += 1; }").unwrap();
        assert!(
            code.contains("while (i < n) && ::xlafn::autograph::host_clear(&[&ag_break__])"),
            "{code}"
        );
    }

    #[test]
    fn returns_become_a_flag_and_a_slot() {
        let code = rewrite_fn(
            "fn f(x: Tensor) -> Result<Tensor> { let mut x = x; while c(&x)? { x = g(&x)?; if t(&x)? { return Ok(x); } } Ok(-x) }",
        )
        .unwrap();
        for part in [
            "let mut ag_do_return__ = ::xlafn::autograph::Flag::new();",
            "let mut ag_retval__ = ::xlafn::autograph::ReturnValue::<Tensor>::undefined();",
            "while ::xlafn::autograph::go_on(c(&x)?, &[&ag_do_return__])?",
            "ag_retval__ = ::xlafn::autograph::ReturnValue::Value((Ok(::core::clone::Clone::clone(&x)))?",
            "ag_do_return__ = ag_do_return__.raised()?;",
            "if ::xlafn::autograph::go_on(true, &[&ag_do_return__])? {",
            "ReturnValue::Value((Ok(-::core::clone::Clone::clone(&x)))?",
            "ag_retval__.into_result()",
        ] {
            assert!(squashed(&code).contains(&squashed(part)), "{part}\n{code}");
        }
    }

    /// Without whitespace, so that line breaks do not matter.
    fn squashed(s: &str) -> String {
        s.split_whitespace().collect()
    }

    #[test]
    fn returns_under_host_conditions_only_stay_rust() {
        assert!(rewrite_fn("fn f(n: i64) -> Result<Tensor> { for i in 0..n { if i == 2 { return Ok(a); } } Ok(b) }").is_none());
        assert!(
            rewrite_fn("fn f(x: Tensor) -> Result<Tensor> { let y = match x { _ => return Ok(a) }; if t(&x)? { return Ok(b); } Ok(y) }").is_none(),
            "a return inside a let initializer is unsupported"
        );
    }

    #[test]
    fn tail_branches_each_return() {
        let code = rewrite_fn(
            "fn f(x: Tensor) -> Result<Tensor> { if t(&x)? { if u(&x)? { return Ok(a); } Ok(b) } else { Ok(c) } }",
        )
        .unwrap();
        assert_eq!(code.matches("ReturnValue::Value(").count(), 3, "{code}");
    }
}
