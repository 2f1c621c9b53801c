//! The browser side of an export (SPEC §7): one key per intent, stored before the first send and
//! reused on every retry; the operation id stored as soon as it is known; polling until the
//! operation settles; resuming after a reload or from another tab.

use crate::model::{
    ExportRequest, ExportState, ExportView, LoginRequest, Problem, SessionView, TimeRange,
};
use crate::page::{PageSignals, SessionState};
use gloo_net::http::{Request, Response};
use gloo_storage::{LocalStorage, Storage};
use gloo_timers::future::TimeoutFuture;
use leptos::prelude::*;
use leptos::task::spawn_local;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, Ordering};

/// One export intent as kept in localStorage: the key, the exact request, and the operation id
/// once the server has told it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Intent {
    key: String,
    request: ExportRequest,
    id: Option<String>,
}

/// Which drive loop is current; an older loop stops at its next step, so one tab never polls twice.
static CURRENT_DRIVE: AtomicU32 = AtomicU32::new(0);

const MAX_BACKOFF_MS: u32 = 10_000;

fn storage_key(email: &str) -> String {
    format!("exportd.intent.{email}")
}

fn new_key() -> String {
    web_sys::window()
        .and_then(|w| w.crypto().ok())
        .map(|c| c.random_uuid())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

fn browser_timezone() -> String {
    let options = js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new())
        .resolved_options();
    js_sys::Reflect::get(&options, &"timeZone".into())
        .ok()
        .and_then(|v| v.as_string())
        .unwrap_or_else(|| "UTC".to_owned())
}

fn signed_in_email(s: PageSignals) -> Option<String> {
    match s.session.get_untracked() {
        SessionState::SignedIn(v) => Some(v.email),
        _ => None,
    }
}

async fn problem_title(resp: Response) -> String {
    match resp.json::<Problem>().await {
        Ok(p) => p.detail.map(|d| format!("{}: {d}", p.title)).unwrap_or(p.title),
        Err(_) => format!("The server answered {}.", resp.status()),
    }
}

/// Runs once the page is hydrated: finds out who is signed in and resumes a stored intent.
pub fn start(s: PageSignals) {
    let _ = window_event_listener(leptos::ev::storage, move |ev| {
        let Some(email) = signed_in_email(s) else { return };
        if ev.key().as_deref() != Some(storage_key(&email).as_str()) {
            return;
        }
        if let Ok(intent) = LocalStorage::get::<Intent>(storage_key(&email)) {
            spawn_local(drive(s, email, intent));
        }
    });
    spawn_local(refresh_session(s));
}

async fn refresh_session(s: PageSignals) {
    match Request::get("/api/session").send().await {
        Ok(resp) if resp.ok() => match resp.json::<SessionView>().await {
            Ok(who) => {
                let email = who.email.clone();
                s.session.set(SessionState::SignedIn(who));
                if let Ok(intent) = LocalStorage::get::<Intent>(storage_key(&email)) {
                    drive(s, email, intent).await;
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

/// Signs in with the form's values.
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
        CURRENT_DRIVE.fetch_add(1, Ordering::SeqCst);
        s.state.set(ExportState::Idle);
        s.session.set(SessionState::SignedOut);
    });
}

/// The Export click: makes a new intent, stores it, then sends it. A click while the current
/// operation is unsettled does nothing, so a double click is one intent.
pub fn export(s: PageSignals) {
    let Some(email) = signed_in_email(s) else { return };
    if !s.state.get_untracked().is_settled() {
        return;
    }
    s.state.set(ExportState::Submitting);
    s.notice.set(None);
    let mut request = ExportRequest::new(&s.report.get_untracked());
    request.time_range = TimeRange::Preset { preset: s.preset.get_untracked() };
    request.timezone = browser_timezone();
    let intent = Intent { key: new_key(), request, id: None };
    if LocalStorage::set(storage_key(&email), &intent).is_err() {
        s.notice.set(Some("This browser cannot store the export; it was not sent.".to_owned()));
        s.state.set(ExportState::Idle);
        return;
    }
    spawn_local(drive(s, email, intent));
}

enum SubmitError {
    Rejected(String),
    SignedOut,
    /// Another drive or another user took over; the stored intent stays for its owner.
    Superseded,
}

async fn drive(s: PageSignals, email: String, mut intent: Intent) {
    let me = CURRENT_DRIVE.fetch_add(1, Ordering::SeqCst) + 1;
    let id = match intent.id.clone() {
        Some(id) => id,
        None => {
            s.state.set(ExportState::Submitting);
            match submit(s, &email, &intent, me).await {
                Ok(view) => {
                    intent.id = Some(view.id.clone());
                    let _ = LocalStorage::set(storage_key(&email), &intent);
                    s.state.set(ExportState::from_view(&view));
                    view.id
                }
                Err(SubmitError::Rejected(message)) => {
                    LocalStorage::delete(storage_key(&email));
                    s.notice.set(Some(message));
                    s.state.set(ExportState::Idle);
                    return;
                }
                Err(SubmitError::Superseded) => return,
                Err(SubmitError::SignedOut) => {
                    s.state.set(ExportState::Idle);
                    s.session.set(SessionState::SignedOut);
                    return;
                }
            }
        }
    };
    poll(s, &email, &id, me).await;
}

/// Sends the intent until the server answers; network errors and 5xx are retried with the same
/// key. Stops when another drive took over or another user signed in, so one user's intent is
/// never sent with another's session.
async fn submit(s: PageSignals, email: &str, intent: &Intent, me: u32) -> Result<ExportView, SubmitError> {
    let mut delay = 500;
    loop {
        if CURRENT_DRIVE.load(Ordering::SeqCst) != me || signed_in_email(s).as_deref() != Some(email) {
            return Err(SubmitError::Superseded);
        }
        let req = Request::post("/api/exports")
            .header("Idempotency-Key", &intent.key)
            .json(&intent.request)
            .map_err(|_| SubmitError::Rejected("The request could not be encoded.".to_owned()))?;
        match req.send().await {
            Ok(resp) if resp.status() == 202 => {
                if let Ok(view) = resp.json::<ExportView>().await {
                    return Ok(view);
                }
            }
            Ok(resp) if resp.status() == 401 => return Err(SubmitError::SignedOut),
            Ok(resp) if resp.status() < 500 => {
                return Err(SubmitError::Rejected(problem_title(resp).await))
            }
            _ => {}
        }
        TimeoutFuture::new(delay).await;
        delay = (delay * 2).min(MAX_BACKOFF_MS);
    }
}

async fn poll(s: PageSignals, email: &str, id: &str, me: u32) {
    let mut delay = 1000;
    while CURRENT_DRIVE.load(Ordering::SeqCst) == me {
        match Request::get(&format!("/api/exports/{id}")).send().await {
            Ok(resp) if resp.ok() => {
                if let Ok(view) = resp.json::<ExportView>().await {
                    let state = ExportState::from_view(&view);
                    let settled = state.is_settled();
                    s.state.set(state);
                    if settled {
                        return;
                    }
                }
                delay = 1000;
            }
            Ok(resp) if resp.status() == 401 => {
                s.session.set(SessionState::SignedOut);
                return;
            }
            Ok(resp) if resp.status() == 404 => {
                LocalStorage::delete(storage_key(email));
                s.state.set(ExportState::Idle);
                return;
            }
            _ => delay = (delay * 2).min(MAX_BACKOFF_MS),
        }
        TimeoutFuture::new(delay).await;
    }
}
