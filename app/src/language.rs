//! The page's language: which translation of the generated `i18n` module (leptos_i18n, from
//! `locales/*.json`) the page shows, as a signal its texts follow.
//!
//! leptos_i18n's own context (`I18nContextProvider`) resolves the language again in the browser
//! on every start, with its locale matching (icu_locale_core, leptos-use's `use_locales` and
//! cookies, leptos_meta for `<html lang>`): 31 KB of the page's gzipped wasm, though the browser
//! only ever needs the language the server rendered. So the server resolves it with leptos_i18n
//! (the `i18n_pref_locale` cookie, then `Accept-Language`) and writes it on `<html lang dir>`,
//! the browser reads it back from there, and every text is looked up by locale
//! (`td_string!(i18n.get_locale(), key)`), which needs no context of leptos_i18n's.

use crate::i18n::*;
use leptos::prelude::*;

/// The language the page is shown in; a copy reads and writes the same signal.
#[derive(Clone, Copy)]
pub struct I18n(RwSignal<Locale>);

impl I18n {
    /// The language shown; a reactive read, so a text that asks follows a switch.
    pub fn get_locale(self) -> Locale {
        self.0.get()
    }

    /// Shows the page in `locale`; in the browser, `<html lang dir>` follows.
    pub fn set_locale(self, locale: Locale) {
        self.0.set(locale)
    }
}

/// The language of this request's page, as leptos_i18n resolves it on the server: the language
/// cookie the switch writes, else the best match of `Accept-Language`, else English. The shell
/// renders it on `<html>` and gives it to the page with [`provide`].
#[cfg(feature = "ssr")]
pub fn requested() -> Locale {
    leptos_i18n::context::init_i18n_context::<Locale>().get_locale_untracked()
}

/// Gives the components below the caller the page's language, `locale`, as [`I18n`].
pub fn provide(locale: Locale) -> I18n {
    let i18n = I18n(RwSignal::new(locale));
    provide_context(i18n);
    i18n
}

/// The page's language: the one an ancestor provided (the server's shell), else the `lang` the
/// server rendered on `<html>` (the browser, which hydrates the page without the shell),
/// provided from here on; in the browser, `<html lang dir>` then follows every switch.
pub fn use_language() -> I18n {
    if let Some(i18n) = use_context::<I18n>() {
        return i18n;
    }
    #[cfg(feature = "hydrate")]
    let rendered = document().document_element().and_then(|html| html.get_attribute("lang")).and_then(|lang| lang.parse().ok());
    #[cfg(not(feature = "hydrate"))]
    let rendered: Option<Locale> = None;
    let i18n = provide(rendered.unwrap_or_default());
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let locale = i18n.get_locale();
        if let Some(html) = document().document_element() {
            let _ = html.set_attribute("lang", locale.as_str());
            let _ = html.set_attribute("dir", locale.direction().as_str());
        }
    });
    i18n
}
