//! The browser side of exports and imports (SPEC §7, §10): one key per intent, stored before the first send and
//! reused on every retry; the operation id stored as soon as it is known; polling until the
//! operation settles; resuming after a reload, after signing in, or from another tab.
//!
//! Every read-decide-write of the stored intent runs holding the slot's Web Lock (`lock_slot`),
//! and a tab that made an intent holds a driving lock while it drives it
//! (`another_tab_drives_unseen`), so two tabs never both decide there is no intent; a drive's
//! writes also go through `intent::store_if_owned`/`remove_if_owned`, so a drive that was
//! superseded while it awaited changes nothing. Tries are bounded: after `GIVE_UP_MS` of no answer, or at once on an answer
//! that trying again would not change, the page stops and offers "Try again" (the same intent and
//! key) and "Discard" (forget it; a new click makes a new key).

use crate::intent::{self, Drive, Drives, Intent, IntentStorage};
use crate::model::{ExportList, ExportRequest, ExportState, ExportView, LoginRequest, Problem, SessionView, TimeRange};
use crate::page_state::{number_json, preset_of, Notice, PageSignals, SessionState, Trouble};
use crate::sfn;
use gloo_timers::future::TimeoutFuture;
use leptos::prelude::*;
use leptos::server_fn::ServerFn;
use leptos::task::spawn_local;
use std::collections::BTreeMap;
use wasm_bindgen::{closure::Closure, JsCast, JsValue};

thread_local! {
    static CHANNEL: Option<web_sys::BroadcastChannel> = web_sys::BroadcastChannel::new("exportd.intent").ok();
}

/// localStorage as the intent store.
struct Local;

pub(crate) fn local_storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok()?
}

impl IntentStorage for Local {
    fn load(&self, slot: &str) -> Option<Intent> {
        let text = local_storage()?.get_item(slot).ok()??;
        serde_json::from_slice(text.as_bytes()).ok()
    }
    fn store(&self, slot: &str, intent: &Intent) -> bool {
        let stored = match (local_storage(), serde_json::to_string(intent)) {
            (Some(storage), Ok(text)) => storage.set_item(slot, &text).is_ok(),
            _ => false,
        };
        if stored {
            tell_other_tabs(slot);
        }
        stored
    }
    fn remove(&self, slot: &str) {
        if let Some(storage) = local_storage() {
            let _ = storage.remove_item(slot);
        }
        tell_other_tabs(slot);
    }
}

/// Tells the other tabs at once that `slot` changed; the storage event follows too.
fn tell_other_tabs(slot: &str) {
    CHANNEL.with(|c| c.as_ref().map(|c| c.post_message(&slot.into())));
}

/// How long a tab waits for another tab to let the intent's lock go (a frozen tab holds it)
/// before it goes on without it.
const LOCK_WAIT_MS: u32 = 5_000;

/// A held Web Lock; dropping it lets the lock go.
struct HeldLock {
    release: js_sys::Function,
    /// The name, when it is one of this tab's driving locks (listed in `OWN_DRIVING`).
    driving: Option<String>,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        if let Some(name) = self.driving.take() {
            OWN_DRIVING.with(|own| {
                let mut own = own.borrow_mut();
                if let Some(at) = own.iter().position(|n| *n == name) {
                    own.swap_remove(at);
                }
            });
        }
        let _ = self.release.call0(&JsValue::UNDEFINED);
    }
}

thread_local! {
    /// The driving locks this tab holds (its own drives of intents it made).
    static OWN_DRIVING: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The browser's `navigator.locks`, where there is one: a page over plain HTTP on a LAN address
/// is not a secure context and has none.
fn lock_manager() -> Option<JsValue> {
    let window = web_sys::window()?;
    js_sys::Reflect::get(&window.navigator(), &"locks".into()).ok().filter(|l| l.is_object())
}

/// Takes this browser's Web Lock on `slot`, held until the `HeldLock` is dropped, so that a
/// read-decide-write of the stored intent is one step across tabs: a tab that clicks while
/// another is between reading and writing waits, then reads what the other wrote. `None` where
/// there is no lock manager, or when another tab holds it for longer than `LOCK_WAIT_MS`.
async fn lock_slot(slot: &str) -> Option<HeldLock> {
    take_lock(&format!("{slot}.lock")).await
}

/// The name of the lock a tab holds while it drives the intent with `key` that it made.
fn driving_lock(slot: &str, key: &str) -> String {
    format!("{slot}.driving.{key}")
}

/// Whether another tab of this browser drives an intent it made for `slot` that this tab cannot
/// see yet: it holds the driving lock of a key that is not the stored intent's (`seen`), and not
/// one of this tab's own drives, which may still be winding down.
/// Asked under the slot's lock: the lock manager is one authority for every tab, while the
/// localStorage each tab reads is its own copy, updated a moment after another tab writes. So a
/// tab that takes the slot's lock right after another tab stored a new intent may not see that
/// intent yet, but sees that tab's driving lock.
async fn another_tab_drives_unseen(slot: &str, seen: Option<&str>) -> bool {
    let Some(locks) = lock_manager() else { return false };
    let Some(query) = js_sys::Reflect::get(&locks, &"query".into()).ok().and_then(|q| q.dyn_into::<js_sys::Function>().ok()) else { return false };
    let Some(promise) = query.call0(&locks).ok().and_then(|p| p.dyn_into::<js_sys::Promise>().ok()) else { return false };
    let Ok(snapshot) = wasm_bindgen_futures::JsFuture::from(promise).await else { return false };
    let prefix = driving_lock(slot, "");
    let Ok(held) = js_sys::Reflect::get(&snapshot, &"held".into()) else { return false };
    js_sys::Array::from(&held).iter().filter_map(|lock| js_sys::Reflect::get(&lock, &"name".into()).ok()?.as_string()).any(|name| {
        name.strip_prefix(&prefix).is_some_and(|key| Some(key) != seen) && !OWN_DRIVING.with(|own| own.borrow().contains(&name))
    })
}

/// Takes this tab's driving lock of the intent with `key` that it made.
async fn take_driving_lock(slot: &str, key: &str) -> Option<HeldLock> {
    let name = driving_lock(slot, key);
    let mut lock = take_lock(&name).await?;
    OWN_DRIVING.with(|own| own.borrow_mut().push(name.clone()));
    lock.driving = Some(name);
    Some(lock)
}

/// Takes the (exclusive) Web Lock `name`, waiting at most `LOCK_WAIT_MS`.
async fn take_lock(name: &str) -> Option<HeldLock> {
    let locks = lock_manager()?;
    let request: js_sys::Function = js_sys::Reflect::get(&locks, &"request".into()).ok()?.dyn_into().ok()?;
    // The lock is held until the promise its callback returns settles, that is until the
    // `HeldLock` is dropped; dropped before the grant (a timeout), it lets a late grant go at once.
    let mut release = None;
    let held = js_sys::Promise::new(&mut |resolve, _| release = Some(resolve));
    let release = HeldLock { release: release?, driving: None };
    let mut grant = None;
    let granted = js_sys::Promise::new(&mut |resolve, _| grant = Some(resolve));
    let grant = grant?;
    let on_grant = Closure::once_into_js(move |_lock: JsValue| -> JsValue {
        let _ = grant.call0(&JsValue::UNDEFINED);
        held.into()
    });
    request.call2(&locks, &JsValue::from_str(name), &on_grant).ok()?;
    match first(wasm_bindgen_futures::JsFuture::from(granted), TimeoutFuture::new(LOCK_WAIT_MS)).await {
        Ok(_) => Some(release),
        Err(()) => None,
    }
}

fn is_current<L: Lane>(lane: L, d: Drive) -> bool {
    lane.tab().with(|t| t.drives.is_current(d))
}

async fn store_if_owned<L: Lane>(lane: L, d: Drive, slot: &str, intent: &Intent) -> bool {
    let _held = lock_slot(slot).await;
    lane.tab().with(|t| intent::store_if_owned(&Local, &t.drives, d, slot, intent))
}

async fn remove_if_owned<L: Lane>(lane: L, d: Drive, slot: &str, intent: &Intent) -> bool {
    let _held = lock_slot(slot).await;
    lane.tab().with(|t| intent::remove_if_owned(&Local, &t.drives, d, slot, intent))
}

/// How long one call may take before it counts as lost and is tried again with the same key.
const CALL_TIMEOUT_MS: u32 = 15_000;
const MAX_BACKOFF_MS: f64 = 10_000.0;
const POLL_MS: u32 = 1_000;
/// How long a drive keeps trying when nothing answers (no answer, a timeout, a 5xx, a 429) before
/// it stops and lets the user choose "Try again" or "Discard".
const GIVE_UP_MS: f64 = 30_000.0;

/// The wait before try `n` (from 0): exponential from 300 ms up to 10 s, with full jitter so many
/// tabs that lost the server together do not come back together.
fn backoff_ms(n: u32) -> u32 {
    let cap = (300.0 * 2f64.powi(n.min(10) as i32)).min(MAX_BACKOFF_MS);
    (cap / 2.0 + js_sys::Math::random() * cap / 2.0) as u32
}

/// `work`'s output, or `Err` when `timeout` ends first.
async fn first<F: std::future::Future + Unpin>(mut work: F, mut timeout: TimeoutFuture) -> Result<F::Output, ()> {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(out) = Pin::new(&mut work).poll(cx) {
            return Poll::Ready(Ok(out));
        }
        Pin::new(&mut timeout).poll(cx).map(|()| Err(()))
    })
    .await
}

/// Whether a failed call may be sent again unchanged: no answer, a timeout, a 5xx, or "too
/// many" (429), which a later try may pass.
fn is_transient(p: &Problem) -> bool {
    p.code == sfn::NETWORK || p.status == 0 || p.status >= 500 || p.status == 429 || p.status == 408
}

/// The tries of one drive's calls: each failure waits longer, and failures that go on for longer
/// than `GIVE_UP_MS` end the drive.
struct Tries {
    n: u32,
    failing_since: Option<f64>,
}

impl Tries {
    fn new() -> Tries {
        Tries { n: 0, failing_since: None }
    }

    /// An answer came: the next failure starts counting afresh.
    fn answered(&mut self) {
        *self = Tries::new();
    }

    /// Waits before trying again after the transient failure `p` (at least its `Retry-After`);
    /// after `GIVE_UP_MS` of failures, the trouble to show instead: the server's last answer when
    /// it gave one (a 503 `busy`, a 429 `too-many-exports`), else that nothing answered.
    async fn wait(&mut self, p: Problem) -> Result<(), Trouble> {
        let since = *self.failing_since.get_or_insert_with(now_ms);
        if now_ms() - since >= GIVE_UP_MS {
            return Err(if p.status == 0 { Trouble::Unanswered } else { Trouble::Refused(p) });
        }
        let asked = p.retry_after.map_or(0, |secs| secs.saturating_mul(1000).min(GIVE_UP_MS as u64) as u32);
        TimeoutFuture::new(backoff_ms(self.n).max(asked)).await;
        self.n += 1;
        Ok(())
    }
}

/// A fresh idempotency key: a random (version 4) UUID from `crypto.getRandomValues`, which every
/// page has; `crypto.randomUUID` exists only in secure contexts, so a page served over plain HTTP
/// from a LAN address has none.
pub(crate) fn new_key() -> String {
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
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let hex: String = b.iter().flat_map(|x| [DIGITS[usize::from(x >> 4)] as char, DIGITS[usize::from(x & 15)] as char]).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

fn browser_timezone() -> String {
    let options = js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new()).resolved_options();
    js_sys::Reflect::get(&options, &"timeZone".into()).ok().and_then(|v| v.as_string()).unwrap_or_else(|| "UTC".to_owned())
}

fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// The signed-in user's intent slot of `lane`.
pub(crate) fn slot(s: PageSignals, lane: &str) -> Option<String> {
    match s.session.get_untracked() {
        SessionState::SignedIn(v) => Some(intent::slot_of(lane, &v.tenant, &v.email)),
        _ => None,
    }
}

/// An answer of the REST API: its status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as JSON. Every JSON the page reads, the server functions' answers and
    /// localStorage's intent included, is read from bytes (`serde_json::from_slice`): one
    /// reader, so the wasm carries each type's decoder once, not once per kind of input.
    fn json<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The problem a refused answer carries.
    fn problem(&self) -> Problem {
        self.json().unwrap_or_else(|| Problem::new("bad-response", self.status, &format!("The server answered {}.", self.status)))
    }
}

/// Calls the server (the REST API's session, and every server function through `call_sfn`) with
/// the page's cookie, through the browser's `fetch`; `Err` when no answer came within
/// `CALL_TIMEOUT_MS`, and then the request is aborted, so calls to a server that hangs do not
/// pile up on the browser's few connections to it.
async fn call_api(method: &str, path: &str, json: Option<String>) -> Result<Answer, JsValue> {
    let abort = web_sys::AbortController::new().ok();
    let sent = fetch_answer(method, path, json, abort.as_ref().map(|a| a.signal()));
    match first(Box::pin(sent), TimeoutFuture::new(CALL_TIMEOUT_MS)).await {
        Ok(answer) => answer,
        Err(()) => {
            if let Some(abort) = abort {
                abort.abort();
            }
            Err(JsValue::NULL)
        }
    }
}

async fn fetch_answer(method: &str, path: &str, json: Option<String>, signal: Option<web_sys::AbortSignal>) -> Result<Answer, JsValue> {
    use wasm_bindgen_futures::JsFuture;
    let window = web_sys::window().ok_or(JsValue::NULL)?;
    let init = web_sys::RequestInit::new();
    init.set_method(method);
    init.set_signal(signal.as_ref());
    if let Some(json) = json {
        let headers = web_sys::Headers::new()?;
        headers.set("content-type", "application/json")?;
        init.set_headers(&headers);
        init.set_body(&json.into());
    }
    let resp: web_sys::Response = JsFuture::from(window.fetch_with_str_and_init(path, &init)).await?.dyn_into()?;
    let body = JsFuture::from(resp.array_buffer()?).await?;
    Ok(Answer { status: resp.status(), body: js_sys::Uint8Array::new(&body).to_vec() })
}

/// Remembers the page's language for the server's next render: the language cookie, written
/// here so that the browser build carries no cookie library (`language::requested_by` reads it).
pub fn remember_locale(tag: &str) {
    let document = web_sys::window().and_then(|w| w.document()).and_then(|d| d.dyn_into::<web_sys::HtmlDocument>().ok());
    if let Some(document) = document {
        let _ = document.set_cookie(&format!("{}={tag}; path=/; max-age=31536000; samesite=lax", crate::language::COOKIE));
    }
}

/// Runs once the page is hydrated: listens to the other tabs, ticks the countdown, finds out
/// who is signed in and resumes a stored intent.
pub fn start(s: PageSignals) {
    s.form.timezone.set(browser_timezone());
    // A change of a slot in another tab: each lane follows its own slot.
    let on_change = move |changed: Option<String>| {
        if changed.is_none() || changed == Exports(s).slot() {
            follow_stored(Exports(s));
        }
        if let Some(follow) = OTHER_LANE.with(|l| l.borrow().clone()) {
            follow(changed);
        }
    };
    let _ = window_event_listener(leptos::ev::storage, move |ev| on_change(ev.key()));
    CHANNEL.with(|c| {
        if let Some(c) = c {
            let cb = Closure::<dyn Fn(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| on_change(ev.data().as_string()));
            c.set_onmessage(Some(cb.as_ref().unchecked_ref()));
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
    // Who is signed in comes with the page when the server could tell; else it is asked.
    match embedded_session() {
        Some(Some(who)) => spawn_local(signed_in(s, who)),
        Some(None) => s.session.set(SessionState::SignedOut),
        None => spawn_local(refresh_session(s)),
    }
}

/// The session the server put in the page's head (`Some(None)`: nobody is signed in), if it did.
fn embedded_session() -> Option<Option<SessionView>> {
    let element = web_sys::window()?.document()?.get_element_by_id(crate::SESSION_ELEMENT)?;
    // Read once: after a sign-out or a sign-in, the page asks the server.
    element.remove();
    serde_json::from_slice(element.text_content()?.as_bytes()).ok()
}

thread_local! {
    /// How the lane the page loads later (imports) follows a change of a slot in another tab.
    static OTHER_LANE: std::cell::RefCell<Option<std::rc::Rc<dyn Fn(Option<String>)>>> = const { std::cell::RefCell::new(None) };
}

/// Lets a lane loaded after the page follow the changes other tabs make to its slot, until
/// `None` is given.
pub(crate) fn follow_other_tabs(follow: Option<std::rc::Rc<dyn Fn(Option<String>)>>) {
    OTHER_LANE.with(|l| *l.borrow_mut() = follow);
}

async fn refresh_session(s: PageSignals) {
    match call_api("GET", "/api/session", None).await {
        Ok(resp) if resp.ok() => match resp.json::<SessionView>() {
            Some(who) => signed_in(s, who).await,
            None => s.session.set(SessionState::SignedOut),
        },
        Ok(_) => s.session.set(SessionState::SignedOut),
        Err(_) => {
            s.notice.set(Some(Notice::Unreachable));
            s.session.set(SessionState::SignedOut);
        }
    }
}

/// Shows the signed-in user's page: the list, and the stored intent resumed.
async fn signed_in(s: PageSignals, who: SessionView) {
    let stored = Local.load(&intent::slot_of("intent", &who.tenant, &who.email));
    // The form appears already showing that an operation is being looked up, so Export is never
    // enabled before its state is known.
    if let Some(stored) = &stored {
        s.state.set(if stored.id.is_some() { ExportState::Resuming } else { ExportState::Submitting });
    }
    s.session.set(SessionState::SignedIn(who));
    load_recent(s, false);
    if stored.is_some() {
        resume(Exports(s)).await;
    }
}

/// Signs in with the form's values; a stored intent resumes after.
pub fn login(s: PageSignals, email: String, password: String) {
    spawn_local(async move {
        let body = LoginRequest { email, password };
        let Ok(json) = serde_json::to_string(&body) else { return };
        match call_api("POST", "/api/session", Some(json)).await {
            Ok(resp) if resp.ok() => {
                s.notice.set(None);
                refresh_session(s).await;
            }
            Ok(resp) => s.notice.set(Some(Notice::Refused(resp.problem()))),
            Err(_) => s.notice.set(Some(Notice::Unreachable)),
        }
    });
}

/// Signs out; the stored intent stays, so signing in again resumes it.
pub fn logout(s: PageSignals) {
    spawn_local(async move {
        let _ = call_api("DELETE", "/api/session", None).await;
        stop_all(Exports(s));
        // Nothing of this user stays on screen for the next one: the state, the list, the
        // notice and the form's errors.
        s.state.set(ExportState::Idle);
        s.op_id.set(None);
        s.rows_per_sec.set(None);
        s.retry_in.set(None);
        s.notice.set(None);
        s.trouble.set(None);
        s.form.errors.set(Vec::new());
        s.recent.set(Vec::new());
        s.next_cursor.set(None);
        s.session.set(SessionState::SignedOut);
    });
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
    if f.xlsx.get_untracked() {
        // A workbook's header is in the page's language (a byte order mark and gzip do not apply).
        request.format = crate::model::FileFormat::Xlsx;
        let lang = web_sys::window().and_then(|w| w.document()).and_then(|d| d.document_element()).and_then(|html| html.get_attribute("lang"));
        if lang.as_deref() == Some("ar") {
            request.options.language = crate::model::FileLanguage::Ar;
        }
    } else {
        request.options.bom = f.bom.get_untracked();
        if f.gzip.get_untracked() {
            request.options.compression = crate::model::Compression::Gzip;
        }
    }
    if f.checkpointed.get_untracked() {
        request.consistency = crate::model::Consistency::Checkpointed;
    }
    // The chosen report's filters, each as the JSON of its type; an empty field leaves it out.
    let mut filters = BTreeMap::new();
    let declared = crate::page_catalog().reports.into_iter().find(|r| r.titled.name == report).map(|r| r.filters).unwrap_or_default();
    let (texts, chosen) = (f.filters.get_untracked(), f.chosen.get_untracked());
    for filter in declared {
        let text = texts.get(&filter.name).map(|t| t.trim().to_owned()).unwrap_or_default();
        let value: Option<serde_json::Value> = match (filter.test.as_str(), filter.of.as_deref()) {
            ("one_of", _) => chosen.get(&filter.name).filter(|v| !v.is_empty()).map(|v| v.iter().cloned().map(serde_json::Value::from).collect::<Vec<_>>().into()),
            ("countries", _) => {
                let codes: Vec<serde_json::Value> = text.split(',').map(|c| c.trim().to_ascii_uppercase()).filter(|c| !c.is_empty()).map(Into::into).collect();
                (!codes.is_empty()).then(|| codes.into())
            }
            (_, Some("integer" | "decimal" | "money")) => number_json(&text),
            (_, Some("boolean")) => match text.as_str() {
                "true" => Some(true.into()),
                "false" => Some(false.into()),
                _ => None,
            },
            _ => (!text.is_empty()).then(|| text.into()),
        };
        if let Some(value) = value {
            filters.insert(filter.name, value);
        }
    }
    request.filters = filters;
    request
}

/// This tab's drives of one lane's intents, and the key of the intent its current drive follows.
#[derive(Default)]
pub(crate) struct LaneTab {
    drives: Drives,
    driven: std::cell::RefCell<Option<String>>,
}

/// One kind of operation the page starts from a stored intent and follows until it settles:
/// exports (SPEC §7) and imports (SPEC §10, "the same intent rules"). The intent's rules — one
/// key per intent, stored before the first send and reused on every try, the Web Locks, bounded
/// tries with "Try again" and "Discard", resuming after a reload or from another tab — are
/// written once, in the functions below; a lane says how its operation is created, read, shown
/// and cancelled.
pub(crate) trait Lane: Copy + 'static {
    /// What the server answers for the operation.
    type View: serde::de::DeserializeOwned + 'static;
    /// The path of the server function that creates it.
    const CREATE: &'static str;
    /// The path of the server function that reads it by id.
    const STATUS: &'static str;
    /// The path of the server function that cancels it by id.
    const CANCEL: &'static str;
    /// The problem code of an operation that is not the caller's.
    const NOT_FOUND: &'static str;
    /// This tab's drives of the lane.
    fn tab(self) -> &'static std::thread::LocalKey<LaneTab>;
    /// The page's signals (who is signed in).
    fn page(self) -> PageSignals;
    /// The signed-in user's intent slot of the lane.
    fn slot(self) -> Option<String>;
    /// Why the lane stopped trying, until the user chooses.
    fn trouble(self) -> RwSignal<Option<Trouble>>;
    /// The lane's message for the user.
    fn notice(self) -> RwSignal<Option<Notice>>;
    /// The operation's id.
    fn id(view: &Self::View) -> &str;
    /// Whether the operation changes no more.
    fn is_terminal(view: &Self::View) -> bool;
    /// The id of the operation shown, if any.
    fn shown_id(self) -> Option<String>;
    /// Shows the operation.
    fn show(self, view: &Self::View);
    /// Shows the click taken (`Submitting`), or a stored operation being looked up (`Resuming`).
    fn pending(self, resuming: bool);
    /// Shows nothing in flight.
    fn idle(self);
    /// Whether the shown state lets a new intent start.
    fn is_settled(self) -> bool;
    /// Shows a create the server refused (its field errors too).
    fn rejected(self, p: &Problem);
    /// The operation settled, or was forgotten: lists refresh.
    fn settled(self);
}

/// The read-decide-write of a click: follows the stored intent while it is unsettled, or stores a
/// new one for `request` (a new key). Run under the slot's lock, so two tabs clicking at once
/// make one intent.
fn decide(slot: &str, stored: Option<Intent>, request: Option<Box<serde_json::value::RawValue>>, another_tab_drives_unseen: bool) -> Decision {
    if let Some(stored) = stored.filter(|i| !i.settled) {
        return Decision::Follow(stored);
    }
    if another_tab_drives_unseen {
        return Decision::Wait;
    }
    match request.map(|request| Intent { key: new_key(), request, id: None, settled: false }) {
        Some(intent) if Local.store(slot, &intent) => Decision::Start(intent),
        _ => Decision::CannotStore,
    }
}

/// What a click decided, under the slot's lock.
enum Decision {
    /// An unsettled intent is stored (this tab's or another's): follow it, start nothing.
    Follow(Intent),
    /// Another tab drives an intent this tab cannot see yet: wait for it to show.
    Wait,
    /// A new intent was stored: send it.
    Start(Intent),
    /// The browser refused to store a new intent (or the request could not be written): nothing
    /// is sent.
    CannotStore,
}

/// A click that asks for a new operation of `request` (as the JSON text sent on every try).
/// The lane shows `submitting` on the click itself; a click while an operation is unsettled, in
/// this tab or in another (the stored intent), starts nothing new and follows that one.
pub(crate) fn click<L: Lane>(lane: L, request: Option<Box<serde_json::value::RawValue>>) {
    let Some(slot) = lane.slot() else { return };
    if !lane.is_settled() || lane.trouble().get_untracked().is_some() {
        return;
    }
    lane.pending(false);
    lane.notice().set(None);
    spawn_local(async move {
        let held = lock_slot(&slot).await;
        let stored = Local.load(&slot);
        let others = another_tab_drives_unseen(&slot, stored.as_ref().map(|i| i.key.as_str())).await;
        let decision = decide(&slot, stored, request, others);
        // The driving lock is taken before the slot's lock goes, so a tab that takes the slot's
        // lock next sees it.
        let driving = match &decision {
            Decision::Start(intent) => take_driving_lock(&slot, &intent.key).await,
            _ => None,
        };
        drop(held);
        match decision {
            Decision::Follow(stored) => {
                if stored.id.is_some() {
                    lane.pending(true);
                }
                drive(lane, slot, stored, None).await
            }
            Decision::Wait => {
                // The other tab's intent shows here within moments (the storage event or its
                // message starts a drive, which supersedes this one); if it does not, the user
                // chooses.
                let d = lane.tab().with(|t| t.drives.start());
                TimeoutFuture::new(LOCK_WAIT_MS).await;
                if is_current(lane, d) {
                    lane.trouble().set(Some(Trouble::OtherTab));
                }
            }
            Decision::Start(intent) => drive(lane, slot, intent, driving).await,
            Decision::CannotStore => {
                lane.notice().set(Some(Notice::CannotStore));
                lane.idle();
            }
        }
    });
}

/// "Try again" after a trouble: the stored intent, with its key, is driven again.
pub(crate) fn try_again<L: Lane>(lane: L) {
    let Some(slot) = lane.slot() else { return };
    lane.trouble().set(None);
    match Local.load(&slot).filter(|i| !i.settled) {
        Some(stored) => spawn_local(drive(lane, slot, stored, None)),
        None => lane.idle(),
    }
}

/// "Discard" after a trouble: the page stops following the intent and forgets it, so the next
/// click makes a new intent with a new key; the discarded key is never sent again for another
/// request. An operation it had started stays in the lists.
pub(crate) fn discard<L: Lane>(lane: L) {
    let Some(slot) = lane.slot() else { return };
    let key = lane.tab().with(|t| {
        t.drives.stop_all();
        t.driven.borrow_mut().take()
    });
    spawn_local(async move {
        let held = lock_slot(&slot).await;
        if Local.load(&slot).is_some_and(|i| Some(&i.key) == key.as_ref()) {
            Local.remove(&slot);
        }
        drop(held);
        // The page says idle only once the intent is gone, so a reload right after cannot
        // resume what was discarded.
        lane.trouble().set(None);
        lane.idle();
        lane.settled();
    });
}

/// Another tab changed this user's intent of the lane: show the operation it drives, unless
/// this tab drives that very intent already (both would then be answered with the same
/// operation).
pub(crate) fn follow_stored<L: Lane>(lane: L) {
    let Some(slot) = lane.slot() else { return };
    let Some(stored) = Local.load(&slot) else { return };
    if lane.tab().with(|t| t.driven.borrow().as_deref() == Some(stored.key.as_str())) {
        return;
    }
    spawn_local(drive(lane, slot, stored, None));
}

/// Resumes the stored intent of the lane after a sign-in or a reload, if there is one.
pub(crate) async fn resume<L: Lane>(lane: L) {
    let Some(slot) = lane.slot() else { return };
    if let Some(stored) = Local.load(&slot) {
        drive(lane, slot, stored, None).await;
    }
}

/// Stops every drive of the lane (sign-out).
pub(crate) fn stop_all<L: Lane>(lane: L) {
    lane.tab().with(|t| t.drives.stop_all());
}

/// Sends the intent if it has no operation yet, then follows the operation until it settles or
/// the drive stops. `_driving` is the driving lock of an intent this tab made, held until the
/// drive ends.
async fn drive<L: Lane>(lane: L, slot: String, mut intent: Intent, _driving: Option<HeldLock>) {
    let d = lane.tab().with(|t| {
        *t.driven.borrow_mut() = Some(intent.key.clone());
        t.drives.start()
    });
    lane.trouble().set(None);
    let id = match intent.id.clone() {
        Some(id) => {
            if !intent.settled {
                lane.pending(true);
            }
            id
        }
        None => {
            lane.pending(false);
            match submit(lane, &intent, d).await {
                Ok(view) => {
                    intent.id = Some(L::id(&view).to_owned());
                    intent.settled = L::is_terminal(&view);
                    store_if_owned(lane, d, &slot, &intent).await;
                    if is_current(lane, d) {
                        lane.show(&view);
                    }
                    L::id(&view).to_owned()
                }
                Err(stop) => return stopped(lane, d, &slot, &intent, stop).await,
            }
        }
    };
    if let Err(stop) = poll(lane, &slot, &mut intent, &id, d).await {
        stopped(lane, d, &slot, &intent, stop).await;
    }
}

/// Why sending or polling stopped before the operation settled.
enum Stop {
    /// A final answer to the create that is not the operation: the request was refused.
    Rejected(Problem),
    /// The operation is not this user's (another account's, or planted).
    NotFound,
    /// The session is gone.
    SignedOut,
    /// Another drive took over.
    Superseded,
    /// Nothing answered for longer than the page keeps trying, or an answer that trying again
    /// would not change: the user chooses.
    Trouble(Trouble),
}

/// Shows why drive `d` stopped, if it is still the current one.
async fn stopped<L: Lane>(lane: L, d: Drive, slot: &str, intent: &Intent, stop: Stop) {
    if !is_current(lane, d) {
        return;
    }
    match stop {
        Stop::Superseded => {}
        Stop::SignedOut => {
            let s = lane.page();
            s.notice.set(Some(Notice::SessionEnded));
            lane.idle();
            s.session.set(SessionState::SignedOut);
        }
        Stop::NotFound => {
            // Show nothing of it.
            remove_if_owned(lane, d, slot, intent).await;
            lane.idle();
        }
        Stop::Rejected(p) => {
            remove_if_owned(lane, d, slot, intent).await;
            lane.rejected(&p);
            lane.notice().set(Some(Notice::Refused(p)));
            lane.idle();
        }
        // The stored intent stays as it is: "Try again" (or a reload) drives it again with its key.
        Stop::Trouble(t) => lane.trouble().set(Some(t)),
    }
}

/// Sends the intent until the server answers; a lost answer, a timeout, a 5xx or a 429 is tried
/// again with the same key, after a growing, jittered wait, for at most `GIVE_UP_MS`.
async fn submit<L: Lane>(lane: L, intent: &Intent, d: Drive) -> Result<L::View, Stop> {
    let mut tries = Tries::new();
    loop {
        if !is_current(lane, d) {
            return Err(Stop::Superseded);
        }
        match create::<L::View>(L::CREATE, intent).await {
            Ok(view) => return Ok(view),
            Err(p) if p.code == "unauthenticated" => return Err(Stop::SignedOut),
            Err(p) if !is_transient(&p) => return Err(Stop::Rejected(p)),
            Err(p) => tries.wait(p).await.map_err(Stop::Trouble)?,
        }
    }
}

/// Sends the intent to the lane's create server function (`path`) with its request's stored
/// JSON text as it is, so the page never decodes a request (the server function's own client
/// would take a typed request).
async fn create<V: serde::de::DeserializeOwned>(path: &str, intent: &Intent) -> Result<V, Problem> {
    #[derive(serde::Serialize)]
    struct Args<'a> {
        key: &'a str,
        request: &'a serde_json::value::RawValue,
    }
    call_sfn(path, &Args { key: &intent.key, request: &intent.request }).await
}

/// Calls the page's server function at `path` (`/sfn/…`) with `args`, its arguments struct, as
/// the JSON body: the request server_fn's own client sends, sent through `call_api` (the
/// browser's `fetch`, bounded by `CALL_TIMEOUT_MS`), so the wasm carries one way of calling the
/// server instead of two (server_fn's client, with gloo-net, was 9.8 KB of the gzipped wasm).
pub(crate) async fn call_sfn<V: serde::de::DeserializeOwned>(path: &str, args: &impl serde::Serialize) -> Result<V, Problem> {
    let body = serde_json::to_string(args).map_err(|_| Problem::new("malformed-json", 400, "The request could not be written"))?;
    match call_api("POST", path, Some(body)).await {
        Ok(answer) if answer.ok() => answer.json().ok_or_else(|| Problem::new("bad-response", 502, "The server's answer could not be read")),
        Ok(answer) => Err(answer.problem()),
        Err(_) => Err(Problem::new(sfn::NETWORK, 0, "The server could not be reached")),
    }
}

/// The arguments of a lane's server functions that take an operation's id.
#[derive(serde::Serialize)]
struct ById<'a> {
    id: &'a str,
}

/// Follows operation `id` until it settles, marking the stored intent settled then.
async fn poll<L: Lane>(lane: L, slot: &str, intent: &mut Intent, id: &str, d: Drive) -> Result<(), Stop> {
    let mut tries = Tries::new();
    while is_current(lane, d) {
        match call_sfn::<L::View>(L::STATUS, &ById { id }).await {
            Ok(view) => {
                tries.answered();
                if !is_current(lane, d) {
                    break;
                }
                if L::is_terminal(&view) {
                    // Settled in storage before it is shown settled: a click the moment the
                    // button is enabled must find no unsettled intent to drive again.
                    if !intent.settled {
                        intent.settled = true;
                        store_if_owned(lane, d, slot, intent).await;
                    }
                    lane.show(&view);
                    lane.settled();
                    return Ok(());
                }
                lane.show(&view);
                TimeoutFuture::new(POLL_MS).await;
            }
            Err(p) if p.code == "unauthenticated" => return Err(Stop::SignedOut),
            Err(p) if p.code == L::NOT_FOUND => return Err(Stop::NotFound),
            Err(p) if !is_transient(&p) => return Err(Stop::Trouble(Trouble::Refused(p))),
            Err(p) => tries.wait(p).await.map_err(Stop::Trouble)?,
        }
    }
    Err(Stop::Superseded)
}

/// Cancels the lane's shown operation; its drive keeps polling until it settles.
pub(crate) fn cancel<L: Lane>(lane: L) {
    let Some(id) = lane.shown_id() else { return };
    spawn_local(async move {
        let view = match call_sfn::<L::View>(L::CANCEL, &ById { id: &id }).await {
            Ok(view) => view,
            // Ended before the cancel: the drive's next poll shows how.
            Err(p) if p.code == "export-already-finished" => return,
            Err(p) => return lane.notice().set(Some(Notice::Refused(p))),
        };
        if lane.shown_id().as_deref() != Some(L::id(&view)) {
            return;
        }
        // A cancel answered as ended settles the stored intent before the page shows it ended,
        // so the next click starts a new operation instead of driving this one again.
        if L::is_terminal(&view) {
            settle_stored(lane, L::id(&view)).await;
        }
        lane.show(&view);
    });
}

/// Marks the lane's stored intent of operation `id` settled, if it is the one stored.
async fn settle_stored<L: Lane>(lane: L, id: &str) {
    let Some(slot) = lane.slot() else { return };
    let _held = lock_slot(&slot).await;
    if let Some(mut stored) = Local.load(&slot).filter(|i| i.id.as_deref() == Some(id) && !i.settled) {
        stored.settled = true;
        Local.store(&slot, &stored);
    }
}

/// The export lane of the page.
#[derive(Clone, Copy)]
pub(crate) struct Exports(pub PageSignals);

thread_local! {
    static EXPORTS: LaneTab = LaneTab::default();
    static RATE: std::cell::RefCell<Option<(String, f64, i64)>> = const { std::cell::RefCell::new(None) };
}

impl Lane for Exports {
    type View = ExportView;
    const CREATE: &'static str = sfn::CreateExport::PATH;
    const STATUS: &'static str = sfn::ExportStatus::PATH;
    const CANCEL: &'static str = sfn::CancelExport::PATH;
    const NOT_FOUND: &'static str = "export-not-found";

    fn tab(self) -> &'static std::thread::LocalKey<LaneTab> {
        &EXPORTS
    }
    fn page(self) -> PageSignals {
        self.0
    }
    fn slot(self) -> Option<String> {
        slot(self.0, "intent")
    }
    fn trouble(self) -> RwSignal<Option<Trouble>> {
        self.0.trouble
    }
    fn notice(self) -> RwSignal<Option<Notice>> {
        self.0.notice
    }
    fn id(view: &ExportView) -> &str {
        &view.id
    }
    fn is_terminal(view: &ExportView) -> bool {
        view.status.is_terminal()
    }
    fn shown_id(self) -> Option<String> {
        self.0.op_id.get_untracked()
    }
    fn show(self, view: &ExportView) {
        let s = self.0;
        let state = ExportState::from_view(view);
        if let ExportState::Running { rows_written, .. } = state {
            let (at, rows) = (now_ms(), rows_written);
            let rate = RATE.with(|r| {
                let prev = r.replace(Some((view.id.clone(), at, rows)));
                prev.filter(|(id, t, _)| *id == view.id && at > *t).map(|(_, t, before)| ((rows - before).max(0) as f64 / ((at - t) / 1000.0)).round() as i64)
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
    fn pending(self, resuming: bool) {
        if resuming {
            self.0.state.set(ExportState::Resuming);
        } else {
            self.0.op_id.set(None);
            self.0.form.errors.set(Vec::new());
            self.0.state.set(ExportState::Submitting);
        }
    }
    fn idle(self) {
        self.0.op_id.set(None);
        self.0.state.set(ExportState::Idle);
    }
    fn is_settled(self) -> bool {
        self.0.state.get_untracked().is_settled()
    }
    fn rejected(self, p: &Problem) {
        if p.code == "invalid-request" {
            self.0.form.errors.set(p.errors.clone().unwrap_or_default());
        }
    }
    fn settled(self) {
        load_recent(self.0, false);
    }
}

/// The Export click.
pub fn export(s: PageSignals) {
    click(Exports(s), serde_json::value::to_raw_value(&request_of_form(s)).ok());
}

/// "Retry export": a new intent (a new key) for the same request, only after a terminal failure
/// that allows it; when another tab has already started one, this tab follows that one instead.
pub fn retry(s: PageSignals) {
    let Some(slot) = Exports(s).slot() else { return };
    if !s.state.get_untracked().offers_retry() {
        return;
    }
    let request = Local.load(&slot).map(|i| i.request).or_else(|| serde_json::value::to_raw_value(&request_of_form(s)).ok());
    click(Exports(s), request);
}

/// Download: mints a fresh link on every click (never re-running the export) and follows it; to
/// the file or bundle, or to part `part` of a checkpointed export.
pub fn download(s: PageSignals, id: String, part: Option<i32>) {
    spawn_local(async move {
        let id_of_link = id.clone();
        match call_sfn::<String>(sfn::DownloadLink::PATH, &sfn::DownloadLink { id, part }).await {
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
                s.notice.set(Some(Notice::DownloadRefused(p)));
                load_recent(s, false);
            }
            // Refused (the role no longer allows it): say so, and learn the role again, so that
            // a user who may no longer download is offered no Download button.
            Err(p) if p.status == 403 => {
                s.notice.set(Some(Notice::DownloadRefused(p)));
                if let Ok(resp) = call_api("GET", "/api/session", None).await {
                    if resp.status == 401 {
                        s.session.set(SessionState::SignedOut);
                    } else if let Some(who) = resp.json::<SessionView>().filter(|_| resp.ok()) {
                        s.session.set(SessionState::SignedIn(who));
                    }
                }
            }
            Err(p) => s.notice.set(Some(Notice::DownloadRefused(p))),
        }
    });
}

thread_local! {
    /// How many refreshes of the recent list have started: a load's answer is dropped when a
    /// refresh started after it.
    static LIST_LOAD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Whether a "More" load is under way: a second click (a double click) waits for it.
    static MORE_IN_FLIGHT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Loads the first page of recent exports, or appends the next one. A refresh supersedes a "More"
/// under way, a "More" while another is under way does nothing, and an appended page never
/// repeats an export already listed.
pub fn load_recent(s: PageSignals, more: bool) {
    let cursor = if more { s.next_cursor.get_untracked() } else { None };
    if more && (cursor.is_none() || MORE_IN_FLIGHT.with(|m| m.replace(true))) {
        return;
    }
    let load = LIST_LOAD.with(|l| {
        if !more {
            l.set(l.get().wrapping_add(1));
        }
        l.get()
    });
    spawn_local(async move {
        let answer = call_sfn::<ExportList>(sfn::ListExports::PATH, &sfn::ListExports { cursor }).await;
        if more {
            MORE_IN_FLIGHT.with(|m| m.set(false));
        }
        if LIST_LOAD.with(|l| l.get()) != load {
            return;
        }
        if let Ok(page) = answer {
            if more {
                s.recent.update(|items| {
                    let fresh: Vec<ExportView> = page.items.into_iter().filter(|v| !items.iter().any(|i| i.id == v.id)).collect();
                    items.extend(fresh);
                });
            } else {
                s.recent.set(page.items);
            }
            s.next_cursor.set(page.next_cursor);
        }
    });
}
