//! The page's language: which translation of the generated `i18n` module (leptos_i18n, from
//! `locales/*.json`) the page shows, as a signal its texts follow.
//!
//! leptos_i18n's own context (`I18nContextProvider`) resolves the language again in the browser
//! on every start, with its locale matching (icu_locale_core, leptos-use's `use_locales` and
//! cookies, leptos_meta for `<html lang>`): 31 KB of the page's gzipped wasm, though the browser
//! only ever needs the language the server rendered. So the server resolves it from the request
//! ([`requested_by`]: the `i18n_pref_locale` cookie, then `Accept-Language`) and writes it on
//! `<html lang dir>`, the browser reads it back from there, and every text is looked up by
//! locale (`td_string!(i18n.get_locale(), key)`): the page uses no context of leptos_i18n's.

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

/// The cookie the language switch writes (leptos_i18n's name for it, so a choice made on an
/// earlier release still counts).
pub const COOKIE: &str = "i18n_pref_locale";

/// The language of this request's page (see [`requested_by`]); English outside a request. The
/// shell renders it on `<html>` and gives it to the page with [`provide`].
#[cfg(feature = "ssr")]
pub fn requested() -> Locale {
    use_context::<axum::http::request::Parts>().map(|parts| requested_by(&parts.headers)).unwrap_or_default()
}

/// The language a request asks for: the one its language cookie names, else the best match of
/// `Accept-Language` taken in order of quality (leptos_i18n's matching, so `ar-SA` is Arabic),
/// else English.
///
/// A pure function of the headers. leptos_i18n's own context resolves it with signals and an
/// effect that writes the cookie back; during a server render that effect could run after the
/// request's reactive owner was gone and panic ("a reactive value … already disposed"), as the
/// end-to-end runs' server log showed.
#[cfg(feature = "ssr")]
pub fn requested_by(headers: &axum::http::HeaderMap) -> Locale {
    use axum::http::header;
    let chosen = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .and_then(|c| c.value().parse().ok());
    chosen.unwrap_or_else(|| {
        let accepted = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()).map(accept_language::parse).unwrap_or_default();
        Locale::find_locale(&accepted)
    })
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

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use axum::http::{header, HeaderMap, HeaderValue};

    fn asking(pairs: &[(header::HeaderName, &str)]) -> Locale {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(name.clone(), HeaderValue::from_str(value).expect("a valid header value"));
        }
        requested_by(&headers)
    }

    #[test]
    fn a_request_that_asks_for_nothing_is_answered_in_english() {
        assert_eq!(asking(&[]), Locale::en);
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "fr-FR, de;q=0.8")]), Locale::en);
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "*")]), Locale::en);
    }

    #[test]
    fn accept_language_is_matched_by_language_so_a_regional_arabic_is_arabic() {
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "ar")]), Locale::ar);
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "ar-SA,ar;q=0.9")]), Locale::ar);
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "fr, ar;q=0.5, en;q=0.1")]), Locale::ar);
    }

    #[test]
    fn accept_language_is_taken_in_order_of_quality_not_of_writing() {
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "en;q=0.2, ar")]), Locale::ar);
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "ar;q=0.3, en-US;q=0.9")]), Locale::en);
    }

    #[test]
    fn the_language_cookie_wins_over_accept_language_unless_it_names_no_language_of_ours() {
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "ar"), (header::COOKIE, "exportd_session=abc; i18n_pref_locale=en")]), Locale::en);
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "en"), (header::COOKIE, "i18n_pref_locale=ar")]), Locale::ar);
        // Two Cookie headers (HTTP/2 may split them) are read alike.
        assert_eq!(asking(&[(header::COOKIE, "a=1"), (header::COOKIE, "i18n_pref_locale=ar")]), Locale::ar);
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "ar"), (header::COOKIE, "i18n_pref_locale=fr")]), Locale::ar);
        assert_eq!(asking(&[(header::ACCEPT_LANGUAGE, "ar"), (header::COOKIE, "i18n_pref_locale")]), Locale::ar);
    }
}
