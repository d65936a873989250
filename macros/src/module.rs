//! `#[derive(Module)]`: an `xlafn::module::Module` impl that visits each
//! field of a struct under its name (tuple fields under their index),
//! skipping fields marked `#[module(skip)]`. Type parameters get a
//! `Module` bound. Enums and unions are refused: which variant's variables
//! a checkpoint holds would change with the value.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields, Index, parse_quote};

pub fn derive(input: DeriveInput) -> syn::Result<TokenStream> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Module)] works on structs: an enum's variables would depend on its variant",
        ));
    };
    let mut visits = Vec::new();
    let fields: Vec<_> = match &data.fields {
        Fields::Named(named) => named.named.iter().collect(),
        Fields::Unnamed(unnamed) => unnamed.unnamed.iter().collect(),
        Fields::Unit => Vec::new(),
    };
    for (i, field) in fields.into_iter().enumerate() {
        if skipped(&field.attrs)? {
            continue;
        }
        let (access, name) = match &field.ident {
            Some(ident) => (quote!(#ident), ident.to_string()),
            None => {
                let index = Index::from(i);
                (quote!(#index), i.to_string())
            }
        };
        visits.push(quote! {
            ::xlafn::module::Module::visit_variables(
                &self.#access,
                &::xlafn::module::join(prefix, #name),
                f,
            );
        });
    }
    let mut generics = input.generics.clone();
    for param in generics.type_params_mut() {
        param.bounds.push(parse_quote!(::xlafn::module::Module));
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let ident = &input.ident;
    Ok(quote! {
        impl #impl_generics ::xlafn::module::Module for #ident #ty_generics #where_clause {
            fn visit_variables(
                &self,
                prefix: &str,
                f: &mut dyn FnMut(::std::string::String, &::xlafn::Variable),
            ) {
                #(#visits)*
            }
        }
    })
}

/// Whether a field carries `#[module(skip)]` (any other `module` option is
/// an error).
fn skipped(attrs: &[syn::Attribute]) -> syn::Result<bool> {
    let mut skip = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(meta.error("expected `skip`"))
            }
        })?;
    }
    Ok(skip)
}
