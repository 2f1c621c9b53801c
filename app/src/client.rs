//! The browser side of an export (SPEC §7): one key per intent, stored before the first send and
//! reused on every retry; the operation id stored as soon as it is known; polling until the
//! operation settles; resuming after a reload, after signing in, or from another tab. Every write
//! of the stored intent goes through `intent::store_if_owned`/`remove_if_owned`, so a drive that
//! was superseded while it awaited changes nothing.

use crate::intent::{self, Drive, Drives, Intent, IntentStorage};
use crate::model::{ExportRequest, ExportState, ExportView, LoginRequest, Problem, SessionView, TimeRange};
use crate::page::{preset_of, PageSignals, SessionState};
use crate::sfn;
use futures::future::{select, Either};
use gloo_net::http::{Request, Response};
use gloo_storage::{LocalStorage, Storage};
use gloo_timers::future::TimeoutFuture;
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::collections::BTreeMap;

thread_local! {
    static DRIVES: Drives = Drives::default();
    static CHANNEL: Option<web_sys::BroadcastChannel> = web_sys::BroadcastChannel::new("exportd.intent").ok();
}

/// localStorage as the intent store.
struct Local;

impl IntentStorage for Local {
    fn load(&self, slot: &str) -> Option<Intent> {
        LocalStorage::get::<Intent>(slot).ok()
    }
    fn store(&self, slot: &str, intent: &Intent) -> bool {
        let stored = LocalStorage::set(slot, intent).is_ok();
        // Tell the other tabs at once; the storage event follows too.
        if stored {
            CHANNEL.with(|c| c.as_ref().map(|c| c.post_message(&slot.into())));
        }
        stored
    }
    fn remove(&self, slot: &str) {
        LocalStorage::delete(slot);
        CHANNEL.with(|c| c.as_ref().map(|c| c.post_message(&slot.into())));
    }
}

fn is_current(d: Drive) -> bool {
    DRIVES.with(|drives| drives.is_current(d))
}

fn store_if_owned(d: Drive, slot: &str, intent: &Intent) -> bool {
    DRIVES.with(|drives| intent::store_if_owned(&Local, drives, d, slot, intent))
}

fn remove_if_owned(d: Drive, slot: &str, intent: &Intent) -> bool {
    DRIVES.with(|drives| intent::remove_if_owned(&Local, drives, d, slot, intent))
}

/// How long one call may take before it counts as lost and is tried again with the same key.
const CALL_TIMEOUT_MS: u32 = 15_000;
const MAX_BACKOFF_MS: f64 = 10_000.0;
const POLL_MS: u32 = 1_000;

/// The wait before try `n` (from 0): exponential from 300 ms up to 10 s, with full jitter so many
/// tabs that lost the server together do not come back together.
fn backoff_ms(n: u32) -> u32 {
    let cap = (300.0 * 2f64.powi(n.min(10) as i32)).min(MAX_BACKOFF_MS);
    (cap / 2.0 + js_sys::Math::random() * cap / 2.0) as u32
}

/// Runs a server function call, or a network problem when it takes longer than the timeout.
async fn timed<T>(call: impl std::future::Future<Output = Result<T, Problem>>) -> Result<T, Problem> {
    let call = Box::pin(call);
    match select(call, TimeoutFuture::new(CALL_TIMEOUT_MS)).await {
        Either::Left((result, _)) => result,
        Either::Right(_) => Err(Problem::new(sfn::NETWORK, 0, "The server did not answer in time")),
    }
}

/// Whether a failed call may be sent again unchanged: no answer, a timeout, or a 5xx.
fn is_transient(p: &Problem) -> bool {
    p.code == sfn::NETWORK || p.status == 0 || p.status >= 500
}

/// A fresh idempotency key: a random (version 4) UUID from `crypto.getRandomValues`, which every
/// page has; `crypto.randomUUID` exists only in secure contexts, so a page served over plain HTTP
/// from a LAN address has none.
fn new_key() -> String {
    let mut bytes = [0u8; 16];
    let filled = web_sys::window().and_then(|w| w.crypto().ok()).is_some_and(|c| c.get_random_values_with_u8_array(&mut bytes).is_ok());
    if !filled {
        // No Web Crypto at all (no browser of SPEC §7 lacks it): Math.random, still unique enough
        // for one user's intents.
        for b in bytes.iter_mut() {
            *b = (js_sys::Math::random() * 256.0) as u8;
        }
    }
    uuid_v4(bytes)
}

/// Writes 16 random bytes as a version 4, variant 1 UUID.
fn uuid_v4(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

fn browser_timezone() -> String {
    let options = js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new()).resolved_options();
    js_sys::Reflect::get(&options, &"timeZone".into()).ok().and_then(|v| v.as_string()).unwrap_or_else(|| "UTC".to_owned())
}

fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// The signed-in user's intent slot.
fn slot(s: PageSignals) -> Option<String> {
    match s.session.get_untracked() {
        SessionState::SignedIn(v) => Some(intent::slot_of(&v.tenant, &v.email)),
        _ => None,
    }
}

async fn problem_title(resp: Response) -> String {
    match resp.json::<Problem>().await {
        Ok(p) => p.detail.map(|d| format!("{}: {d}", p.title)).unwrap_or(p.title),
        Err(_) => format!("The server answered {}.", resp.status()),
    }
}

/// Remembers the page's language for the server's next render: leptos_i18n's cookie, written
/// here so that the browser build carries no cookie library (the server reads it).
pub fn remember_locale(tag: &str) {
    use wasm_bindgen::JsCast;
    let document = web_sys::window().and_then(|w| w.document()).and_then(|d| d.dyn_into::<web_sys::HtmlDocument>().ok());
    if let Some(document) = document {
        let _ = document.set_cookie(&format!("i18n_pref_locale={tag}; path=/; max-age=31536000; samesite=lax"));
    }
}

/// Runs once the page is hydrated: listens to the other tabs, ticks the countdown, finds out
/// who is signed in and resumes a stored intent.
pub fn start(s: PageSignals) {
    s.form.timezone.set(browser_timezone());
    let on_change = move |changed: Option<String>| {
        let Some(mine) = slot(s) else { return };
        if changed.is_some_and(|c| c != mine) {
            return;
        }
        follow_stored(s, &mine);
    };
    let _ = window_event_listener(leptos::ev::storage, move |ev| on_change(ev.key()));
    CHANNEL.with(|c| {
        if let Some(c) = c {
            let cb = wasm_bindgen::closure::Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| on_change(ev.data().as_string()));
            c.set_onmessage(Some(wasm_bindgen::JsCast::unchecked_ref(cb.as_ref())));
            cb.forget();
        }
    });
    spawn_local(async move {
        loop {
            TimeoutFuture::new(1_000).await;
            if let ExportState::RetryWait { next_attempt_at: Some(at), .. } = s.state.get_untracked() {
                let at = js_sys::Date::parse(&at);
                s.retry_in.set((!at.is_nan()).then(|| ((at - now_ms()) / 1000.0).ceil().max(0.0) as i64));
            }
        }
    });
    spawn_local(refresh_session(s));
}

/// Another tab changed this user's intent: show the operation it drives, unless this tab
/// drives that very intent already (both would then be answered with the same operation).
fn follow_stored(s: PageSignals, slot: &str) {
    let Some(stored) = Local.load(slot) else { return };
    if DRIVEN_KEY.with(|k| k.borrow().as_deref() == Some(stored.key.as_str())) {
        return;
    }
    spawn_local(drive(s, slot.to_owned(), stored));
}

async fn refresh_session(s: PageSignals) {
    match Request::get("/api/session").send().await {
        Ok(resp) if resp.ok() => match resp.json::<SessionView>().await {
            Ok(who) => {
                let slot = intent::slot_of(&who.tenant, &who.email);
                let stored = Local.load(&slot);
                // The form appears already showing that an operation is being looked up, so
                // Export is never enabled before its state is known.
                if let Some(stored) = &stored {
                    s.state.set(if stored.id.is_some() { ExportState::Resuming } else { ExportState::Submitting });
                }
                s.session.set(SessionState::SignedIn(who));
                load_recent(s, false);
                if let Some(stored) = stored {
                    drive(s, slot, stored).await;
                }
            }
            Err(_) => s.session.set(SessionState::SignedOut),
        },
        Ok(_) => s.session.set(SessionState::SignedOut),
        Err(_) => {
            s.notice.set(Some("exportd cannot be reached; reload to try again.".to_owned()));
            s.session.set(SessionState::SignedOut);
        }
    }
}

/// Signs in with the form's values; a stored intent resumes after.
pub fn login(s: PageSignals, email: String, password: String) {
    spawn_local(async move {
        let body = LoginRequest { email, password };
        let sent = match Request::post("/api/session").json(&body) {
            Ok(req) => req.send().await,
            Err(_) => return,
        };
        match sent {
            Ok(resp) if resp.ok() => {
                s.notice.set(None);
                refresh_session(s).await;
            }
            Ok(resp) => s.notice.set(Some(problem_title(resp).await)),
            Err(_) => s.notice.set(Some("exportd cannot be reached; try again.".to_owned())),
        }
    });
}

/// Signs out; the stored intent stays, so signing in again resumes it.
pub fn logout(s: PageSignals) {
    spawn_local(async move {
        let _ = Request::delete("/api/session").send().await;
        DRIVES.with(|d| d.stop_all());
        // Nothing of this user stays on screen for the next one: the state, the list, the
        // notice and the form's errors.
        s.state.set(ExportState::Idle);
        s.op_id.set(None);
        s.rows_per_sec.set(None);
        s.retry_in.set(None);
        s.notice.set(None);
        s.form.errors.set(Vec::new());
        s.recent.set(Vec::new());
        s.next_cursor.set(None);
        s.session.set(SessionState::SignedOut);
    });
}

fn number(text: &str) -> Option<serde_json::Value> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(serde_json::Value::Number).unwrap_or_else(|| text.into()))
}

/// The request the form describes.
fn request_of_form(s: PageSignals) -> ExportRequest {
    let f = s.form;
    let report = f.report.get_untracked();
    let mut request = ExportRequest::new(&report);
    request.time_range = match preset_of(&f.range.get_untracked()) {
        Some(preset) => TimeRange::Preset { preset },
        None => TimeRange::Dates { from: f.from.get_untracked(), to: f.to.get_untracked() },
    };
    request.timezone = f.timezone.get_untracked().trim().to_owned();
    request.options.bom = f.bom.get_untracked();
    if f.gzip.get_untracked() {
        request.options.compression = crate::model::Compression::Gzip;
    }
    if f.checkpointed.get_untracked() {
        request.consistency = crate::model::Consistency::Checkpointed;
    }
    let mut filters = BTreeMap::new();
    let countries: Vec<serde_json::Value> =
        f.countries.get_untracked().split(',').map(|c| c.trim().to_uppercase()).filter(|c| !c.is_empty()).map(Into::into).collect();
    if !countries.is_empty() {
        filters.insert("country".to_owned(), countries.into());
    }
    if report == "orders" {
        let statuses = f.statuses.get_untracked();
        if !statuses.is_empty() {
            filters.insert("status".to_owned(), statuses.into_iter().map(serde_json::Value::from).collect::<Vec<_>>().into());
        }
        if let Some(v) = number(&f.min_total.get_untracked()) {
            filters.insert("min_total".to_owned(), v);
        }
        if let Some(v) = number(&f.max_total.get_untracked()) {
            filters.insert("max_total".to_owned(), v);
        }
    }
    request.filters = filters;
    request
}

/// Starts a new intent for `request`: stored before the first send, then driven.
fn start_intent(s: PageSignals, slot: String, request: ExportRequest) {
    s.state.set(ExportState::Submitting);
    s.notice.set(None);
    s.form.errors.set(Vec::new());
    s.op_id.set(None);
    let intent = Intent::new(new_key(), request);
    if !Local.store(&slot, &intent) {
        s.notice.set(Some("This browser cannot store the export; it was not sent.".to_owned()));
        s.state.set(ExportState::Idle);
        return;
    }
    spawn_local(drive(s, slot, intent));
}

/// The Export click. The state turns `submitting` on the click itself; a click while an
/// operation is unsettled, in this tab or in another (the stored intent), starts nothing new.
pub fn export(s: PageSignals) {
    let Some(slot) = slot(s) else { return };
    if !s.state.get_untracked().is_settled() {
        return;
    }
    if let Some(stored) = Local.load(&slot).filter(|i| !i.settled) {
        s.state.set(if stored.id.is_some() { ExportState::Resuming } else { ExportState::Submitting });
        spawn_local(drive(s, slot, stored));
        return;
    }
    start_intent(s, slot, request_of_form(s));
}

/// "Retry export": a new intent (a new key) for the same request, only after a terminal failure
/// that allows it.
pub fn retry(s: PageSignals) {
    let Some(slot) = slot(s) else { return };
    if !s.state.get_untracked().offers_retry() {
        return;
    }
    let request = Local.load(&slot).map(|i| i.request).unwrap_or_else(|| request_of_form(s));
    start_intent(s, slot, request);
}

/// Shows `view` as the current operation, if `d` is still the current drive.
fn show(s: PageSignals, d: Drive, view: &ExportView) {
    if !is_current(d) {
        return;
    }
    let state = ExportState::from_view(view);
    if let ExportState::Running { rows_written, .. } = state {
        let (at, rows) = (now_ms(), rows_written);
        let rate = RATE.with(|r| {
            let prev = r.replace(Some((view.id.clone(), at, rows)));
            prev.filter(|(id, t, _)| *id == view.id && at > *t).map(|(_, t, before)| (rows - before).max(0) as f64 / ((at - t) / 1000.0))
        });
        if rate.is_some() {
            s.rows_per_sec.set(rate);
        }
    } else {
        s.rows_per_sec.set(None);
    }
    s.op_id.set(Some(view.id.clone()));
    s.state.set(state);
}

thread_local! {
    static RATE: std::cell::RefCell<Option<(String, f64, i64)>> = const { std::cell::RefCell::new(None) };
    /// The key of the intent this tab's current drive follows.
    static DRIVEN_KEY: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

async fn drive(s: PageSignals, slot: String, mut intent: Intent) {
    let d = DRIVES.with(|drives| drives.start());
    DRIVEN_KEY.with(|k| *k.borrow_mut() = Some(intent.key.clone()));
    let id = match intent.id.clone() {
        Some(id) => {
            if !intent.settled {
                s.state.set(ExportState::Resuming);
            }
            id
        }
        None => {
            s.state.set(ExportState::Submitting);
            match submit(&intent, d).await {
                Ok(view) => {
                    intent.id = Some(view.id.clone());
                    intent.settled = view.status.is_terminal();
                    store_if_owned(d, &slot, &intent);
                    show(s, d, &view);
                    view.id
                }
                Err(Stop::Superseded) => return,
                Err(Stop::SignedOut) => return signed_out(s, d),
                Err(Stop::Rejected(p)) => {
                    if !is_current(d) {
                        return;
                    }
                    remove_if_owned(d, &slot, &intent);
                    if p.code == "invalid-request" {
                        s.form.errors.set(p.errors.clone().unwrap_or_default());
                    }
                    s.notice.set(Some(p.detail.clone().map(|d| format!("{}: {d}", p.title)).unwrap_or(p.title)));
                    s.state.set(ExportState::Idle);
                    return;
                }
            }
        }
    };
    poll(s, &slot, intent, &id, d).await;
}

/// Why sending or polling stopped.
enum Stop {
    /// A final answer that is not the operation.
    Rejected(Problem),
    /// The session is gone.
    SignedOut,
    /// Another drive took over.
    Superseded,
}

fn signed_out(s: PageSignals, d: Drive) {
    if is_current(d) {
        s.notice.set(Some("Your session has ended. Sign in to continue; your export is kept.".to_owned()));
        s.state.set(ExportState::Idle);
        s.session.set(SessionState::SignedOut);
    }
}

/// Sends the intent until the server answers; a lost answer, a timeout or a 5xx is tried again
/// with the same key, after a growing, jittered wait.
async fn submit(intent: &Intent, d: Drive) -> Result<ExportView, Stop> {
    let mut tries = 0;
    loop {
        if !is_current(d) {
            return Err(Stop::Superseded);
        }
        match timed(sfn::create_export(intent.key.clone(), intent.request.clone())).await {
            Ok(view) => return Ok(view),
            Err(p) if p.code == "unauthenticated" => return Err(Stop::SignedOut),
            Err(p) if !is_transient(&p) => return Err(Stop::Rejected(p)),
            Err(_) => {}
        }
        TimeoutFuture::new(backoff_ms(tries)).await;
        tries += 1;
    }
}

async fn poll(s: PageSignals, slot: &str, mut intent: Intent, id: &str, d: Drive) {
    let mut tries = 0;
    while is_current(d) {
        match timed(sfn::export_status(id.to_owned())).await {
            Ok(view) => {
                tries = 0;
                show(s, d, &view);
                if view.status.is_terminal() {
                    if !intent.settled {
                        intent.settled = true;
                        store_if_owned(d, slot, &intent);
                    }
                    load_recent(s, false);
                    return;
                }
                TimeoutFuture::new(POLL_MS).await;
            }
            Err(p) if p.code == "unauthenticated" => return signed_out(s, d),
            Err(p) if p.code == "export-not-found" => {
                // Not this user's (another account's, or planted): show nothing of it.
                if is_current(d) {
                    remove_if_owned(d, slot, &intent);
                    s.op_id.set(None);
                    s.state.set(ExportState::Idle);
                }
                return;
            }
            Err(_) => {
                TimeoutFuture::new(backoff_ms(tries)).await;
                tries += 1;
            }
        }
    }
}

/// Cancels the current operation; its drive keeps polling until it settles.
pub fn cancel(s: PageSignals) {
    let Some(id) = s.op_id.get_untracked() else { return };
    spawn_local(async move {
        let view = match timed(sfn::cancel_export(id)).await {
            Ok(view) => view,
            Err(p) => match p.export {
                Some(view) => *view,
                None => return s.notice.set(Some(p.title)),
            },
        };
        if s.op_id.get_untracked().as_deref() != Some(view.id.as_str()) {
            return;
        }
        // A cancel answered as ended settles the stored intent before the page shows it ended,
        // so the next Export click starts a new operation instead of driving this one again.
        if view.status.is_terminal() {
            settle_stored(s, &view.id);
        }
        s.state.set(ExportState::from_view(&view));
    });
}

/// Marks the stored intent of operation `id` settled, if it is the one stored.
fn settle_stored(s: PageSignals, id: &str) {
    let Some(slot) = slot(s) else { return };
    if let Some(mut stored) = Local.load(&slot).filter(|i| i.id.as_deref() == Some(id) && !i.settled) {
        stored.settled = true;
        Local.store(&slot, &stored);
    }
}

/// Download: mints a fresh link on every click (never re-running the export) and follows it; to
/// the file or bundle, or to part `part` of a checkpointed export.
pub fn download(s: PageSignals, id: String, part: Option<i32>) {
    spawn_local(async move {
        let id_of_link = id.clone();
        match timed(sfn::download_link(id, part)).await {
            Ok(url) => {
                s.notice.set(None);
                if let Some(w) = web_sys::window() {
                    let _ = w.location().assign(&url);
                }
            }
            // The file is gone (its retention ended): the export now reads as expired, here and
            // in the list, and offers no download.
            Err(p) if p.status == 410 => {
                if s.op_id.get_untracked().as_deref() == Some(id_of_link.as_str()) {
                    s.state.set(ExportState::Expired);
                }
                s.notice.set(Some(p.title));
                load_recent(s, false);
            }
            Err(p) => s.notice.set(Some(p.title)),
        }
    });
}

/// Loads the first page of recent exports, or appends the next one.
pub fn load_recent(s: PageSignals, more: bool) {
    let cursor = if more { s.next_cursor.get_untracked() } else { None };
    if more && cursor.is_none() {
        return;
    }
    spawn_local(async move {
        if let Ok(page) = timed(sfn::list_exports(cursor)).await {
            if more {
                s.recent.update(|items| items.extend(page.items));
            } else {
                s.recent.set(page.items);
            }
            s.next_cursor.set(page.next_cursor);
        }
    });
}
