//! Expansion of `#[function]`: validation, the generated items, options.

use crate::autograph;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, FnArg, Ident, ItemFn, Lit, Meta, Pat, ReturnType, Token, Type};

/// Options given in `#[function(...)]`.
#[derive(Default)]
struct Options {
    autograph: bool,
    reduce_retracing: bool,
    name: Option<String>,
    implements: Option<String>,
    jit_compile: Option<bool>,
}

fn parse_options(attr: TokenStream) -> syn::Result<Options> {
    let mut options = Options {
        autograph: true,
        ..Options::default()
    };
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(attr)?;
    for meta in metas {
        match &meta {
            // `experimental_relax_shapes` is TensorFlow's old name for it.
            Meta::Path(p)
                if p.is_ident("reduce_retracing") || p.is_ident("experimental_relax_shapes") =>
            {
                options.reduce_retracing = true
            }
            Meta::NameValue(nv) if nv.path.is_ident("autograph") => {
                options.autograph = bool_value(&nv.value)?
            }
            Meta::NameValue(nv)
                if nv.path.is_ident("reduce_retracing")
                    || nv.path.is_ident("experimental_relax_shapes") =>
            {
                options.reduce_retracing = bool_value(&nv.value)?
            }
            Meta::NameValue(nv) if nv.path.is_ident("implements") => {
                options.implements = Some(string_value(&nv.value)?)
            }
            Meta::NameValue(nv) if nv.path.is_ident("jit_compile") => {
                options.jit_compile = Some(bool_value(&nv.value)?)
            }
            Meta::NameValue(nv) if nv.path.is_ident("name") => {
                options.name = Some(string_value(&nv.value)?)
            }
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "unknown #[function] option; expected `autograph = false`, `reduce_retracing`, `jit_compile = false`, `name = \"...\"` or `implements = \"...\"`",
                ));
            }
        }
    }
    Ok(options)
}

fn bool_value(e: &Expr) -> syn::Result<bool> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Bool(b) => Ok(b.value),
            _ => Err(syn::Error::new_spanned(e, "expected `true` or `false`")),
        },
        _ => Err(syn::Error::new_spanned(e, "expected `true` or `false`")),
    }
}

fn string_value(e: &Expr) -> syn::Result<String> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Str(s) => Ok(s.value()),
            _ => Err(syn::Error::new_spanned(e, "expected a string literal")),
        },
        _ => Err(syn::Error::new_spanned(e, "expected a string literal")),
    }
}

/// The parameters of the traced closure: names and types.
fn parameters(f: &ItemFn) -> syn::Result<Vec<(Ident, Type)>> {
    let sig = &f.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "#[function] cannot be generic: a Function has one parameter list; write a \
             non-generic fn (each call type is traced separately anyway)",
        ));
    }
    if let Some(a) = &sig.asyncness {
        return Err(syn::Error::new_spanned(a, "#[function] cannot be async"));
    }
    sig.inputs
        .iter()
        .map(|arg| match arg {
            FnArg::Receiver(r) => Err(syn::Error::new_spanned(
                r,
                "#[function] works on free functions; for methods, build a Function with \
                 xlafn::function(...) in the struct instead",
            )),
            FnArg::Typed(pt) => match &*pt.pat {
                Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                    Ok((pi.ident.clone(), (*pt.ty).clone()))
                }
                other => Err(syn::Error::new_spanned(
                    other,
                    "#[function] parameters must be plain names (`x: Tensor`), because they name \
                     the Function's signature; destructure inside the body",
                )),
            },
        })
        .collect()
}

/// Expands `#[function(attr)] item`.
pub fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let options = parse_options(attr)?;
    let mut f: ItemFn = syn::parse2(item)?;
    let params = parameters(&f)?;
    let fn_name = f.sig.ident.clone();
    let name = options.name.clone().unwrap_or_else(|| fn_name.to_string());
    let ret: Type = match &f.sig.output {
        ReturnType::Default => syn::parse_quote!(()),
        ReturnType::Type(_, t) => (**t).clone(),
    };
    if options.autograph {
        // Early returns from top-level `if`s fold into if/else first (only
        // for Result-returning functions: the branches yield the success
        // value through `?`).
        if returns_result(&ret) {
            crate::returns::fold_early_returns(&mut f.block);
            // Returns left inside loops or nested tensor branches become a
            // return flag and slot (see jumps.rs).
            let output = quote!(<#ret as ::xlafn::function::IntoOutput>::Out);
            crate::jumps::rewrite_returns(&mut f.block, &output);
        }
        let converted = autograph::convert_block(&mut f.block);
        if converted && !returns_result(&ret) {
            return Err(syn::Error::new_spanned(
                &f.sig.output,
                "this #[function] converts tensor control flow (if/while/for on tensors), which \
                 can fail while tracing: declare the return type as xlafn::Result<...>",
            ));
        }
    }
    let code = autograph::to_code(&f);
    Ok(generate(&f, &params, &ret, &name, &options, &code))
}

fn returns_result(t: &Type) -> bool {
    match t {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Result"),
        _ => false,
    }
}

fn generate(
    f: &ItemFn,
    params: &[(Ident, Type)],
    ret: &Type,
    name: &str,
    options: &Options,
    code: &str,
) -> TokenStream {
    let vis = &f.vis;
    let attrs = &f.attrs;
    let fn_name = &f.sig.ident;
    let static_name = format_ident!(
        "__XLAFN_FUNCTION_{}",
        fn_name.to_string().to_uppercase(),
        span = Span::call_site()
    );
    let names: Vec<&Ident> = params.iter().map(|(n, _)| n).collect();
    let types: Vec<&Type> = params.iter().map(|(_, t)| t).collect();
    let name_strs: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let body = &f.block;
    let out = quote!(<#ret as ::xlafn::function::IntoOutput>::Out);
    let function_type = quote!(::xlafn::Function<(#(#types,)*), #out>);
    let reduce = options
        .reduce_retracing
        .then(|| quote!(.reduce_retracing(true)));
    let implements = options
        .implements
        .as_ref()
        .map(|op| quote!(.implements(#op)));
    let jit_compile = options.jit_compile.map(|on| quote!(.jit_compile(#on)));
    let doc = format!(
        "The traced `Function` behind [`{fn_name}`](fn@{fn_name}), and its AutoGraph-rewritten source."
    );
    quote! {
        #[allow(non_upper_case_globals, clippy::all, unused_mut, unused_parens, unused_assignments, unused_variables)]
        #[doc(hidden)]
        #vis static #static_name: ::std::sync::LazyLock<#function_type> = ::std::sync::LazyLock::new(|| {
            ::xlafn::FunctionOptions::new()
                .name(#name)
                .arg_names(&[#(#name_strs),*])
                #reduce
                #implements
                #jit_compile
                .build(|#(#names: #types),*| -> #ret #body)
        });

        #(#attrs)*
        #vis fn #fn_name(#(#names: impl ::xlafn::function::IntoArg<#types>),*) -> ::xlafn::Result<#out> {
            #static_name.call((#(#names,)*))
        }

        #[doc = #doc]
        #[allow(dead_code)]
        #vis mod #fn_name {
            #[allow(unused_imports)]
            use super::*;

            /// The traced, compiled function (tracing count, concrete functions, ...).
            pub fn function() -> &'static #function_type {
                &super::#static_name
            }

            /// The function's source after the AutoGraph rewrite (the
            /// counterpart of `tf.autograph.to_code`).
            pub const AUTOGRAPH_CODE: &str = #code;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(attr: TokenStream, item: TokenStream) -> String {
        expand(attr, item).expect_err("an error").to_string()
    }

    #[test]
    fn generic_functions_are_refused_with_advice() {
        let e = error_of(
            quote!(),
            quote!(
                fn f<T>(x: T) -> T {
                    x
                }
            ),
        );
        assert!(e.contains("cannot be generic"), "{e}");
    }

    #[test]
    fn methods_and_patterns_are_refused() {
        let e = error_of(
            quote!(),
            quote!(
                fn f(&self) {}
            ),
        );
        assert!(e.contains("free functions"), "{e}");
        let e = error_of(
            quote!(),
            quote!(
                fn f((a, b): (Tensor, Tensor)) {}
            ),
        );
        assert!(e.contains("plain names"), "{e}");
    }

    #[test]
    fn tensor_control_flow_needs_a_result_return_type() {
        let e = error_of(
            quote!(),
            quote!(
                fn f(x: Tensor) -> Tensor {
                    if x.gt_scalar(0) { x } else { x }
                }
            ),
        );
        assert!(e.contains("xlafn::Result"), "{e}");
    }

    #[test]
    fn unknown_options_are_named() {
        let e = error_of(
            quote!(jit = true),
            quote!(
                fn f() {}
            ),
        );
        assert!(e.contains("unknown #[function] option"), "{e}");
    }

    #[test]
    fn generates_the_function_the_wrapper_and_the_module() {
        let out = expand(
            quote!(
                name = "dbl",
                implements = "double_op",
                experimental_relax_shapes
            ),
            quote!(
                pub fn double(a: Tensor) -> Tensor {
                    &a + &a
                }
            ),
        )
        .unwrap();
        let text = out.to_string();
        assert!(
            text.contains("pub static __XLAFN_FUNCTION_DOUBLE"),
            "{text}"
        );
        assert!(
            text.contains(". name (\"dbl\")") && text.contains(". arg_names (& [\"a\"])"),
            "{text}"
        );
        assert!(
            text.contains("pub fn double (a : impl :: xlafn :: function :: IntoArg < Tensor >)"),
            "{text}"
        );
        assert!(text.contains("pub mod double"), "{text}");
        assert!(
            text.contains(". reduce_retracing (true)")
                && text.contains(". implements (\"double_op\")"),
            "{text}"
        );
    }
}
