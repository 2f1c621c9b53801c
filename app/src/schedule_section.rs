//! The page's schedules section (contract §15), for admins: make a schedule (report, timezone,
//! cadence, window, role, whom to notify), and see the tenant's schedules with Pause, Resume,
//! Delete and each one's recent runs. Like the import section it is a wasm file of its own
//! (`#[lazy]`), loaded only when an admin's page shows it.
//!
//! A create is one intent: its key and request are stored in localStorage
//! (`exportd.schedule.<tenant>.<email>`) before the first send and sent again, unchanged, by the
//! next click or after a reload until the server answers it for good (a schedule, or a refusal);
//! the server's answer for the same key and body is the same schedule, so a lost answer or a
//! double click makes one schedule.

use crate::format::{date_time, problem_text, I18n};
use crate::i18n::*;
use crate::schedules::{Cadence, Every, MonthDay, Notify, ScheduleAction, ScheduleRequest, ScheduleView, ScheduleWindow, ScheduleRole};
use crate::client;
use crate::model::{FileFormat, FileLanguage, Problem};
use crate::page_state::PageSignals;
use crate::sfn;
use serde::{Deserialize, Serialize};
use leptos::prelude::*;
use leptos::task::spawn_local;

/// The form's fields and what the section shows.
#[derive(Clone, Copy)]
struct Schedules {
    page: PageSignals,
    items: RwSignal<Vec<ScheduleView>>,
    open: RwSignal<Option<ScheduleView>>,
    problem: RwSignal<Option<Problem>>,
    sending: RwSignal<Option<String>>,
    report: RwSignal<String>,
    timezone: RwSignal<String>,
    every: RwSignal<String>,
    at: RwSignal<String>,
    weekday: RwSignal<String>,
    day: RwSignal<String>,
    window: RwSignal<String>,
    role: RwSignal<String>,
    xlsx: RwSignal<bool>,
    webhook: RwSignal<String>,
    email: RwSignal<String>,
}

impl Schedules {
    fn refresh(self) {
        spawn_local(async move {
            match sfn::list_schedules().await {
                Ok(list) => self.items.set(list.items),
                Err(p) => self.problem.set(Some(p)),
            }
        });
    }

    /// The request the form describes, in the page's language.
    fn request(self, language: FileLanguage) -> ScheduleRequest {
        let every = match self.every.get_untracked().as_str() {
            "week" => Every::Week,
            "month" => Every::Month,
            _ => Every::Day,
        };
        let day = self.day.get_untracked();
        let cadence = Cadence {
            every,
            at: self.at.get_untracked(),
            weekday: (every == Every::Week).then(|| self.weekday.get_untracked().parse().unwrap_or(1)),
            day: (every == Every::Month).then(|| day.parse().map(MonthDay::Day).unwrap_or(MonthDay::Named(day))),
        };
        let window = match self.window.get_untracked().as_str() {
            "previous_week" => ScheduleWindow::PreviousWeek,
            "previous_month" => ScheduleWindow::PreviousMonth,
            _ => ScheduleWindow::PreviousDay,
        };
        let webhook = Some(self.webhook.get_untracked().trim().to_owned()).filter(|w| !w.is_empty());
        let email: Vec<String> = self.email.get_untracked().split([',', ' ']).map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect();
        let notify = (webhook.is_some() || !email.is_empty()).then_some(Notify { webhook, email, language });
        let mut options = crate::model::ExportOptions::default();
        if self.xlsx.get_untracked() {
            options.language = language;
        }
        ScheduleRequest {
            report: self.report.get_untracked(),
            filters: Default::default(),
            columns: None,
            format: if self.xlsx.get_untracked() { FileFormat::Xlsx } else { FileFormat::Csv },
            options,
            timezone: self.timezone.get_untracked().trim().to_owned(),
            cadence,
            window,
            role: if self.role.get_untracked() == "admin" { ScheduleRole::Admin } else { ScheduleRole::Analyst },
            notify,
        }
    }

    /// The create not yet answered for good, if any.
    fn stored(self) -> Option<Pending> {
        let slot = client::slot(self.page, "schedule")?;
        serde_json::from_str(&client::local_storage()?.get_item(&slot).ok()??).ok()
    }

    fn store(self, pending: Option<&Pending>) {
        if let (Some(storage), Some(slot)) = (client::local_storage(), client::slot(self.page, "schedule")) {
            let _ = match pending.and_then(|p| serde_json::to_string(p).ok()) {
                Some(text) => storage.set_item(&slot, &text),
                None => storage.remove_item(&slot),
            };
        }
    }

    fn create(self, language: FileLanguage) {
        if self.sending.get_untracked().is_some() {
            return;
        }
        let pending = self.stored().unwrap_or_else(|| Pending { key: client::new_key(), request: self.request(language) });
        self.store(Some(&pending));
        self.send(pending);
    }

    fn send(self, pending: Pending) {
        self.sending.set(Some(pending.key.clone()));
        self.problem.set(None);
        spawn_local(async move {
            let answer = sfn::create_schedule(pending.key.clone(), pending.request.clone()).await;
            self.sending.set(None);
            match answer {
                Ok(_) => {
                    self.store(None);
                    self.refresh();
                }
                // Unanswered (the network, the server's trouble): kept, sent again as it is.
                Err(p) if p.status == 0 || p.status >= 500 => self.problem.set(Some(p)),
                Err(p) => {
                    self.store(None);
                    self.problem.set(Some(p));
                }
            }
        });
    }

    fn change(self, id: String, action: ScheduleAction) {
        self.problem.set(None);
        spawn_local(async move {
            match sfn::change_schedule(id, action).await {
                Ok(_) => {
                    self.open.set(None);
                    self.refresh();
                }
                Err(p) => self.problem.set(Some(p)),
            }
        });
    }

    fn show(self, id: String) {
        spawn_local(async move {
            match sfn::show_schedule(id).await {
                Ok(view) => self.open.set(Some(view)),
                Err(p) => self.problem.set(Some(p)),
            }
        });
    }
}

/// A create sent and not yet answered for good.
#[derive(Serialize, Deserialize)]
struct Pending {
    key: String,
    request: ScheduleRequest,
}

/// The timezone the browser is in, the form's default.
fn browser_timezone() -> String {
    let options = js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new()).resolved_options();
    js_sys::Reflect::get(&options, &"timeZone".into()).ok().and_then(|v| v.as_string()).unwrap_or_else(|| "UTC".to_owned())
}

/// The schedules section, built once its wasm file is loaded.
#[leptos::lazy]
pub fn section(i18n: I18n, page: PageSignals) -> AnyView {
    let s = Schedules {
        page,
        items: RwSignal::new(Vec::new()),
        open: RwSignal::new(None),
        problem: RwSignal::new(None),
        sending: RwSignal::new(None),
        report: RwSignal::new(crate::page_catalog().reports.first().map(|r| r.titled.name.clone()).unwrap_or_default()),
        timezone: RwSignal::new(browser_timezone()),
        every: RwSignal::new("day".to_owned()),
        at: RwSignal::new("06:00".to_owned()),
        weekday: RwSignal::new("1".to_owned()),
        day: RwSignal::new("1".to_owned()),
        window: RwSignal::new("previous_day".to_owned()),
        role: RwSignal::new("analyst".to_owned()),
        xlsx: RwSignal::new(false),
        webhook: RwSignal::new(String::new()),
        email: RwSignal::new(String::new()),
    };
    // A create a reload (or a lost answer) left unanswered is sent again, as it was.
    match s.stored() {
        Some(pending) => s.send(pending),
        None => s.refresh(),
    }
    view(i18n, s).into_any()
}

fn field(label: fn(I18n) -> String, i18n: I18n, name: &'static str, value: RwSignal<String>, kind: &'static str) -> impl IntoView {
    view! {
        <label>{move || label(i18n)}
            <input type=kind name=format!("schedule_{name}") data-testid=format!("schedule-{name}") prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev))/>
        </label>
    }
}

fn choice(label: fn(I18n) -> String, i18n: I18n, name: &'static str, value: RwSignal<String>, options: Vec<(&'static str, fn(I18n) -> String)>) -> impl IntoView {
    view! {
        <label>{move || label(i18n)}
            <select name=format!("schedule_{name}") data-testid=format!("schedule-{name}") prop:value=move || value.get() on:change=move |ev| value.set(event_target_value(&ev))>
                {options.into_iter().map(|(v, text)| view! { <option value=v>{move || text(i18n)}</option> }).collect_view()}
            </select>
        </label>
    }
}

// The fields are named `schedule_…`: the export form above has its own `report` and `timezone`.
fn view(i18n: I18n, s: Schedules) -> impl IntoView {
    let language = move || if leptos_i18n::Locale::as_str(i18n.get_locale()) == "ar" { FileLanguage::Ar } else { FileLanguage::En };
    view! {
        <section class="card schedules" aria-labelledby="schedule-heading" data-testid="schedules">
            <h2 id="schedule-heading">{move || td_string!(i18n.get_locale(), schedule_heading)}</h2>
            <form on:submit=move |ev| { ev.prevent_default(); s.create(language()); }>
                <label>{move || td_string!(i18n.get_locale(), report)}
                    <select name="schedule_report" data-testid="schedule-report" prop:value=move || s.report.get() on:change=move |ev| s.report.set(event_target_value(&ev))>
                        {crate::page_catalog().reports.into_iter().map(|r| {
                            let value = r.titled.name.clone();
                            view! { <option value=value>{move || r.titled.title(leptos_i18n::Locale::as_str(i18n.get_locale())).to_owned()}</option> }
                        }).collect_view()}
                    </select>
                </label>
                {field(|i| td_string!(i.get_locale(), timezone).to_string(), i18n, "timezone", s.timezone, "text")}
                {choice(|i| td_string!(i.get_locale(), schedule_every).to_string(), i18n, "every", s.every, vec![
                    ("day", |i| td_string!(i.get_locale(), schedule_every_day).to_string()),
                    ("week", |i| td_string!(i.get_locale(), schedule_every_week).to_string()),
                    ("month", |i| td_string!(i.get_locale(), schedule_every_month).to_string()),
                ])}
                {field(|i| td_string!(i.get_locale(), schedule_at).to_string(), i18n, "at", s.at, "time")}
                {move || (s.every.get() == "week").then(|| field(|i| td_string!(i.get_locale(), schedule_weekday).to_string(), i18n, "weekday", s.weekday, "number"))}
                {move || (s.every.get() == "month").then(|| field(|i| td_string!(i.get_locale(), schedule_day).to_string(), i18n, "day", s.day, "text"))}
                {choice(|i| td_string!(i.get_locale(), schedule_window).to_string(), i18n, "window", s.window, vec![
                    ("previous_day", |i| td_string!(i.get_locale(), schedule_previous_day).to_string()),
                    ("previous_week", |i| td_string!(i.get_locale(), schedule_previous_week).to_string()),
                    ("previous_month", |i| td_string!(i.get_locale(), schedule_previous_month).to_string()),
                ])}
                {choice(|i| td_string!(i.get_locale(), schedule_role).to_string(), i18n, "role", s.role, vec![
                    ("analyst", |i| td_string!(i.get_locale(), schedule_role_analyst).to_string()),
                    ("admin", |i| td_string!(i.get_locale(), schedule_role_admin).to_string()),
                ])}
                <label class="check"><input type="checkbox" data-testid="schedule-xlsx" prop:checked=move || s.xlsx.get() on:change=move |ev| s.xlsx.set(event_target_checked(&ev))/>{move || td_string!(i18n.get_locale(), format_xlsx)}</label>
                {field(|i| td_string!(i.get_locale(), schedule_webhook).to_string(), i18n, "webhook", s.webhook, "url")}
                {field(|i| td_string!(i.get_locale(), schedule_email).to_string(), i18n, "email", s.email, "text")}
                <button type="submit" data-testid="schedule-create" disabled=move || s.sending.get().is_some()>{move || td_string!(i18n.get_locale(), schedule_create)}</button>
            </form>
            {move || s.problem.get().map(|p| view! { <p class="notice" role="alert" data-testid="schedule-problem">{problem_text(i18n, &p)}</p> })}
            <table class="recent" data-testid="schedule-list">
                <thead><tr>
                    <th>{move || td_string!(i18n.get_locale(), report)}</th>
                    <th>{move || td_string!(i18n.get_locale(), schedule_when)}</th>
                    <th>{move || td_string!(i18n.get_locale(), col_status)}</th>
                    <th>{move || td_string!(i18n.get_locale(), schedule_next)}</th>
                    <th></th>
                </tr></thead>
                <tbody>
                    <For each=move || s.items.get() key=|v| (v.id.clone(), v.status.clone(), v.revision) let:v>
                        {row(i18n, s, v)}
                    </For>
                </tbody>
            </table>
            {move || s.open.get().map(|v| runs(i18n, v))}
        </section>
    }
}

fn row(i18n: I18n, s: Schedules, v: ScheduleView) -> impl IntoView {
    let (id, status) = (v.id.clone(), v.status.clone());
    let paused = v.status == "paused";
    let every = v.request.cadence.every;
    let at = format!("{} {}", v.request.cadence.at, v.request.timezone);
    let when = move || {
        let every = match every {
            Every::Day => td_string!(i18n.get_locale(), schedule_every_day),
            Every::Week => td_string!(i18n.get_locale(), schedule_every_week),
            Every::Month => td_string!(i18n.get_locale(), schedule_every_month),
        };
        format!("{} {every} {at}", td_string!(i18n.get_locale(), schedule_every))
    };
    let report = v.request.report.clone();
    let title = move || {
        let language = leptos_i18n::Locale::as_str(i18n.get_locale());
        crate::page_catalog().reports.iter().find(|r| r.titled.name == report).map_or_else(|| report.clone(), |r| r.titled.title(language).to_owned())
    };
    let next = v.next_due.clone().unwrap_or_default();
    let (pause, runs, delete) = (id.clone(), id.clone(), id.clone());
    view! {
        <tr data-testid="schedule-row" data-id=id.clone() data-status=status.clone()>
            <td><bdi>{title}</bdi></td>
            <td><bdi>{when}</bdi></td>
            <td>{let status = status.clone(); move || match status.as_str() {
                "paused" => td_string!(i18n.get_locale(), schedule_paused).to_string(),
                _ => td_string!(i18n.get_locale(), schedule_active).to_string(),
            }}</td>
            <td>{move || if next.is_empty() { String::new() } else { date_time(i18n, &next) }}</td>
            <td>
                <button type="button" class="secondary" data-testid="schedule-pause"
                    on:click=move |_| s.change(pause.clone(), if paused { ScheduleAction::Resume } else { ScheduleAction::Pause })>
                    {move || if paused { td_string!(i18n.get_locale(), schedule_resume).to_string() } else { td_string!(i18n.get_locale(), schedule_pause).to_string() }}
                </button>
                " "
                <button type="button" class="secondary" data-testid="schedule-runs" on:click=move |_| s.show(runs.clone())>{move || td_string!(i18n.get_locale(), schedule_runs)}</button>
                " "
                <button type="button" class="secondary" data-testid="schedule-delete" on:click=move |_| s.change(delete.clone(), ScheduleAction::Delete)>{move || td_string!(i18n.get_locale(), schedule_delete)}</button>
            </td>
        </tr>
    }
}

fn runs(i18n: I18n, v: ScheduleView) -> impl IntoView {
    let items = v.runs.unwrap_or_default();
    let empty = items.is_empty();
    view! {
        <h3 data-testid="schedule-runs-of" data-id=v.id.clone()>{move || td_string!(i18n.get_locale(), schedule_runs)}</h3>
        {empty.then(|| view! { <p class="note" data-testid="schedule-no-runs">{move || td_string!(i18n.get_locale(), schedule_no_runs)}</p> })}
        <table class="recent">
            <tbody>
                {items.into_iter().map(|r| {
                    let created = r.created_at.clone();
                    view! { <tr data-testid="schedule-run" data-id=r.id.clone()><td><code>{r.id.clone()}</code></td><td><bdi>{r.window_start}</bdi></td><td>{r.status}</td><td>{move || date_time(i18n, &created)}</td></tr> }
                }).collect_view()}
            </tbody>
        </table>
    }
}
