//! exportd's page (Leptos) and the types the browser and the server share.

pub mod intent;
pub mod model;
pub mod sfn;
mod page;
#[cfg(feature = "hydrate")]
mod client;

pub use model::*;

include!(concat!(env!("OUT_DIR"), "/i18n/mod.rs"));

use leptos::prelude::*;

/// The HTML document around the app, rendered by the server; `stylesheet` is the path of the
/// build's stylesheet (named by its hash when the build hashed its files).
pub fn shell(options: LeptosOptions, stylesheet: std::sync::Arc<str>) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html>
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" href="data:,"/>
                <link rel="stylesheet" id="leptos" href=stylesheet.to_string()/>
                <title>"exportd"</title>
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
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
    view! {
        <i18n::I18nContextProvider>
            <main>
                <page::ExportPage/>
            </main>
        </i18n::I18nContextProvider>
    }
}
