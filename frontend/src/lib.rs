//! Hydrates the server-rendered page in the browser.

/// Entry point called by the generated JavaScript once the WASM module is loaded.
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
}
