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
use leptos_meta::{provide_meta_context, Stylesheet, Title};
use leptos_router::{
    components::{Route, Router, Routes},
    StaticSegment,
};

/// The HTML document around the app, rendered by the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html>
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" href="data:,"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
                <leptos_meta::MetaTags/>
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
    provide_meta_context();
    view! {
        <Stylesheet id="leptos" href="/pkg/exportd.css"/>
        <Title text="exportd"/>
        <i18n::I18nContextProvider>
            <Router>
                <main>
                    <Routes fallback=|| view! { <p>"Page not found."</p> }>
                        <Route path=StaticSegment("") view=page::ExportPage/>
                    </Routes>
                </main>
            </Router>
        </i18n::I18nContextProvider>
    }
}
