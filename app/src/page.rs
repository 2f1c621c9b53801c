//! The export page: log in, pick a report and a range, export, follow, download.
//!
//! Everything that touches the network or localStorage runs only in the browser (`client`); the
//! server renders the same "loading" first state the browser starts from, so hydration matches.

use crate::model::{ExportState, Preset, SessionView};
use leptos::prelude::*;

/// Whether the browser knows who is signed in yet.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub enum SessionState {
    /// Not asked yet (and always so on the server).
    Unknown,
    /// Nobody is signed in.
    SignedOut,
    /// This user is signed in.
    SignedIn(SessionView),
}

/// The signals the page and the browser logic share.
#[derive(Clone, Copy)]
pub struct PageSignals {
    /// Who is signed in.
    pub session: RwSignal<SessionState>,
    /// The state of the current (or last) export.
    pub state: RwSignal<ExportState>,
    /// A message for the user (login failure, rejected request).
    pub notice: RwSignal<Option<String>>,
    /// The report picked.
    pub report: RwSignal<String>,
    /// The range picked.
    pub preset: RwSignal<Preset>,
}

fn preset_value(p: Preset) -> &'static str {
    match p {
        Preset::Yesterday => "yesterday",
        Preset::Last7Days => "last_7_days",
        Preset::ThisMonth => "this_month",
    }
}

fn parse_preset(s: &str) -> Preset {
    match s {
        "yesterday" => Preset::Yesterday,
        "this_month" => Preset::ThisMonth,
        _ => Preset::Last7Days,
    }
}

fn describe(state: &ExportState) -> String {
    match state {
        ExportState::Idle => "No export yet.".to_owned(),
        ExportState::Submitting => "Submitting…".to_owned(),
        ExportState::Queued => "Queued: waiting for a worker.".to_owned(),
        ExportState::Running { rows_written, rows_total } => match rows_total {
            Some(t) => format!("Running: {rows_written} of {t} rows written."),
            None => format!("Running: {rows_written} rows written."),
        },
        ExportState::RetryWait { next_attempt_at } => match next_attempt_at {
            Some(at) => format!("A temporary problem; trying again at {at}."),
            None => "A temporary problem; trying again soon.".to_owned(),
        },
        ExportState::CancelRequested => "Cancelling…".to_owned(),
        ExportState::Cancelled => "Cancelled.".to_owned(),
        ExportState::Ready { rows, .. } => format!("Ready: {rows} rows."),
        ExportState::Expired => "The file has expired; export again to get a new one.".to_owned(),
        ExportState::Failed { message, .. } => format!("Failed: {message}"),
    }
}

/// The one page of the app.
#[component]
pub fn ExportPage() -> impl IntoView {
    let signals = PageSignals {
        session: RwSignal::new(SessionState::Unknown),
        state: RwSignal::new(ExportState::Idle),
        notice: RwSignal::new(None),
        report: RwSignal::new("orders".to_owned()),
        preset: RwSignal::new(Preset::Last7Days),
    };

    #[cfg(feature = "hydrate")]
    Effect::new(move |_| crate::client::start(signals));

    let email = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());

    let on_login = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        #[cfg(feature = "hydrate")]
        crate::client::login(signals, email.get_untracked(), password.get_untracked());
    };
    let on_export = move |_| {
        #[cfg(feature = "hydrate")]
        crate::client::export(signals);
    };
    let on_logout = move |_| {
        #[cfg(feature = "hydrate")]
        crate::client::logout(signals);
    };

    let login_form = move || {
        view! {
            <form class="card" on:submit=on_login data-testid="login-form">
                <h2>"Sign in"</h2>
                <label>"Email"
                    <input type="email" name="email" autocomplete="username"
                        prop:value=move || email.get()
                        on:input=move |ev| email.set(event_target_value(&ev))/>
                </label>
                <label>"Password"
                    <input type="password" name="password" autocomplete="current-password"
                        prop:value=move || password.get()
                        on:input=move |ev| password.set(event_target_value(&ev))/>
                </label>
                <button type="submit">"Sign in"</button>
            </form>
        }
    };

    let export_form = move |who: SessionView| {
        let state = signals.state;
        view! {
            <section class="card">
                <p class="who">
                    "Signed in as " <strong data-testid="who">{who.email.clone()}</strong>
                    " (" {who.role.clone()} ", " {who.tenant.clone()} ") "
                    <button class="link" on:click=on_logout>"Sign out"</button>
                </p>
                <h2>"Export"</h2>
                <label>"Report"
                    <select name="report" prop:value=move || signals.report.get()
                        on:change=move |ev| signals.report.set(event_target_value(&ev))>
                        <option value="orders">"Orders"</option>
                        <option value="customers">"Customers"</option>
                    </select>
                </label>
                <label>"Range"
                    <select name="range" prop:value=move || preset_value(signals.preset.get())
                        on:change=move |ev| signals.preset.set(parse_preset(&event_target_value(&ev)))>
                        <option value="yesterday">"Yesterday"</option>
                        <option value="last_7_days">"Last 7 days"</option>
                        <option value="this_month">"This month"</option>
                    </select>
                </label>
                <button data-testid="export" on:click=on_export
                    disabled=move || !state.get().is_settled()>"Export"</button>
                <div class="status" data-testid="status" data-state=move || state.get().name()>
                    {move || describe(&state.get())}
                </div>
                {move || match state.get() {
                    ExportState::Ready { id, .. } => Some(view! {
                        <a data-testid="download" rel="external" download="" href=format!("/api/exports/{id}/download")>"Download CSV"</a>
                    }),
                    _ => None,
                }}
            </section>
        }
    };

    view! {
        <h1>"exportd"</h1>
        {move || signals.notice.get().map(|n| view! { <p class="notice" role="alert">{n}</p> })}
        {move || match signals.session.get() {
            SessionState::Unknown => view! { <p data-testid="loading">"Loading…"</p> }.into_any(),
            SessionState::SignedOut => login_form().into_any(),
            SessionState::SignedIn(who) => export_form(who).into_any(),
        }}
    }
}
