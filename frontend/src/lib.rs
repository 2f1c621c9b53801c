//! Hydrates the server-rendered page in the browser.

/// Entry point called by the generated JavaScript once the WASM module is loaded.
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    // Panics are written to the console in debug builds only: the hook's formatting costs the
    // release wasm kilobytes that every visitor downloads.
    #[cfg(debug_assertions)]
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
}
