//! exportd's page (Leptos) and the types the browser and the server share.

pub mod intent;
pub mod language;
pub mod model;
pub mod schedules;
pub mod sfn;
mod format;
mod page;
mod page_state;
#[cfg(feature = "hydrate")]
mod client;
#[cfg(feature = "hydrate")]
mod imports;
#[cfg(feature = "hydrate")]
mod schedule_section;

pub use model::*;

include!(concat!(env!("OUT_DIR"), "/i18n/mod.rs"));

use leptos::prelude::*;

/// Who is signed in, as the server found it for the page's request (`None`: nobody), put by the
/// server in the request's extensions so that the shell can hand it to the page.
#[cfg(feature = "ssr")]
#[derive(Debug, Clone)]
pub struct PageSession(pub Option<SessionView>);

/// The id of the `<script type="application/json">` in the page's head that carries the
/// `PageSession` (`null` when nobody is signed in): the page knows who is signed in without a
/// round trip of its own (on a phone's slow network, one round trip is over half a second).
pub const SESSION_ELEMENT: &str = "exportd-session";

/// The page's session as JSON for a `<script>` element: `<` is written `\u003c`, so no value
/// can close the element.
#[cfg(feature = "ssr")]
fn session_json() -> Option<String> {
    let parts = use_context::<axum::http::request::Parts>()?;
    let session = parts.extensions.get::<PageSession>()?;
    serde_json::to_string(&session.0).ok().map(|json| json.replace('<', "\\u003c"))
}

/// What the page's forms offer (`PageCatalog`), put by the server in the extensions of a request
/// for the page.
#[cfg(feature = "ssr")]
#[derive(Debug, Clone)]
pub struct PageCatalogOf(pub std::sync::Arc<PageCatalog>);

/// The id of the `<script type="application/json">` in the page's head that carries the
/// [`PageCatalog`]: the page renders its forms from it, on the server and in the browser alike.
pub const CATALOG_ELEMENT: &str = "exportd-catalog";

/// The page's catalog as JSON for a `<script>` element, `<` written `\u003c`.
#[cfg(feature = "ssr")]
fn catalog_json() -> Option<String> {
    serde_json::to_string(&page_catalog()).ok().map(|json| json.replace('<', "\\u003c"))
}

/// What the page's forms offer: on the server, from the request; in the browser, from the page's
/// head, where the server wrote it.
pub fn page_catalog() -> PageCatalog {
    #[cfg(feature = "ssr")]
    {
        use_context::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<PageCatalogOf>().map(|c| (*c.0).clone()))
            .unwrap_or_default()
    }
    #[cfg(all(feature = "hydrate", not(feature = "ssr")))]
    {
        thread_local! {
            static READ: PageCatalog = web_sys::window()
                .and_then(|w| w.document())
                .and_then(|d| d.get_element_by_id(CATALOG_ELEMENT))
                .and_then(|e| e.text_content())
                .and_then(|json| serde_json::from_str(&json).ok())
                .unwrap_or_default();
        }
        READ.with(Clone::clone)
    }
    #[cfg(not(any(feature = "ssr", feature = "hydrate")))]
    {
        PageCatalog::default()
    }
}

/// The paths of the build's files that the page's head names (each named by its hash when the
/// build hashed its files).
#[derive(Debug, Clone)]
pub struct PageFiles {
    /// The stylesheet.
    pub stylesheet: std::sync::Arc<str>,
    /// The wasm's JavaScript glue.
    pub js: std::sync::Arc<str>,
    /// The wasm.
    pub wasm: std::sync::Arc<str>,
}

/// The script that loads the wasm and hydrates the page: Leptos' own (`HydrationScripts`), given
/// the files' paths instead of reading them from a hash file on disk at each render, so that a
/// binary that carries its files needs no file beside it.
fn hydration_script(files: &PageFiles) -> String {
    let js = serde_json::to_string(&*files.js).unwrap_or_default();
    let wasm = serde_json::to_string(&*files.wasm).unwrap_or_default();
    format!("import({js}).then(mod => {{ mod.default({{module_or_path: {wasm}}}).then(() => {{ mod.hydrate(); }}); }})")
}

/// The HTML document around the app, rendered by the server, naming the build's `files`.
pub fn shell(options: LeptosOptions, files: PageFiles) -> impl IntoView {
    #[cfg(feature = "ssr")]
    let session = session_json().map(|json| view! { <script type="application/json" id=SESSION_ELEMENT inner_html=json></script> });
    #[cfg(not(feature = "ssr"))]
    let session: Option<()> = None;
    #[cfg(feature = "ssr")]
    let catalog = catalog_json().map(|json| view! { <script type="application/json" id=CATALOG_ELEMENT inner_html=json></script> });
    #[cfg(not(feature = "ssr"))]
    let catalog: Option<()> = None;
    #[cfg(feature = "ssr")]
    let locale = language::requested();
    #[cfg(not(feature = "ssr"))]
    let locale = i18n::Locale::default();
    language::provide(locale);
    view! {
        <!DOCTYPE html>
        <html lang=leptos_i18n::Locale::as_str(locale) dir=leptos_i18n::Locale::direction(locale).as_str()>
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" href="data:,"/>
                <link rel="stylesheet" id="leptos" href=files.stylesheet.to_string()/>
                <title>"exportd"</title>
                <AutoReload options/>
                {session}
                {catalog}
                <link rel="modulepreload" href=files.js.to_string()/>
                <link rel="preload" href=files.wasm.to_string() r#as="fetch" r#type="application/wasm" crossorigin=""/>
                <script type="module" inner_html=hydration_script(&files)></script>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The root component: one page, the export page.
#[component]
pub fn App() -> impl IntoView {
    language::use_language();
    view! {
        <main>
            <page::ExportPage/>
        </main>
    }
}
